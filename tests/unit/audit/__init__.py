"""The audit wing: the pure classification, the audit against random keyspaces, the command on
a real server (planted classes, nothing written, --repair through the verb, live traffic)."""
