"""The config wing: the settings, their coercers, the file's schema, the web config."""
