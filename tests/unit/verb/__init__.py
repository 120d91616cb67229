"""The verb wing: the module's verb, its Lua port, the sweep script, rounds and sizing."""
