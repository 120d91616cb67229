"""`sweeperd run` around the engine: the schedule of the queues (their intervals, and the wakes
at their deadlines), the queue set, discovery, the replicas' sharing and membership, health,
SIGHUP's reload, systemd's notify and the HTTP side.

May import: fleet, config, metrics, verb, server and the root modules.
"""
