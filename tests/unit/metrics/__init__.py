"""The metrics wing: the sweep's numbers, the state series and the exposition."""
