"""The settings: every option in one table, the coercers that read a value, the TOML file, the
connection and web config settings, and the one Settings object built from them.

May import: server and the root modules.
"""
