"""The engine of one sweep: every primary the daemon sweeps (its node, epoch watch and
backoff), a tick of a batch of queues, the drain of a backlog, the ledger that counts each
call, the holds of a migrating slot, each queue's next wake at its deadline, and the layout
followed through failovers.

May import: config, metrics, verb, server and the root modules.
"""
