"""The commands wing: once, its dry run and budget, inspect, the progress bar, demo."""
