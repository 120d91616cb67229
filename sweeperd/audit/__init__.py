"""The audit (docs/commands.md#sweeperd-audit): what is wrong with a job's row and its sets, as a
pure function on plain data; the read-only script that observes a batch of ids and the one
repair script; and the paced reading of a node's rows and sets that both `audit` and the
daemon's background audit run.

May import: verb, server and the root modules.
"""
