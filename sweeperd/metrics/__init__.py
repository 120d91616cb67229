"""What Prometheus scrapes: the sweep's numbers (written by the fleet's ledger), the daemon's
state read at scrape time, their exposition and the one registry they live in.

May import: verb, server and the root modules.
"""
