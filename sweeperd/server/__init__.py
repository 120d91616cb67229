"""Reaching the servers: the checked connection and its wire, the URL and TLS rules, what a
server says of itself (run_id, role, clock), where the primaries are (standalone, Cluster,
Sentinel), and the reads every command shares (the queues found by SCAN, a queue's counts).

May import: the root modules (constants, keyspace, reasons, model, ownership, logs).
"""
