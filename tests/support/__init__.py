"""Helpers the tests share: real servers and topologies, the daemon as a process or in
this process, clocks passed in, the keyspace seeded and read back. No test lives here."""
