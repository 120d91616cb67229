"""The fleet wing: a node, a tick, the drain, the ledger's holds, the primaries."""
