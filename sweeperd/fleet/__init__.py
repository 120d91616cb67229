"""The engine of one sweep: the fleet of primaries the daemon sweeps, each a member that owns
its node (epoch watch and backoff), its ticks of a batch of queues, the drain of a backlog, the
ledger that counts each call, each queue's next wake at its deadline and the listener that
hears of a new lease; the holds of a migrating slot, and the layout followed through failovers.

May import: config, metrics, verb, server and the root modules.
"""
