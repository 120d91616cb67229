"""`sweeperd top`: the layout it reads by, one primary's read, the refresh of every queue, the
rates, the screen and the live loop. It never writes.

May import: config, server and the root modules (never the daemon: it reads, it does not sweep).
"""
