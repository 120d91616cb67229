"""The command line: typer's commands built from the options table, what a command prints, and
the entry point `sweeperd.cli:main`.

May import: every wing.
"""

from sweeperd.cli.app import app, main

__all__ = ["app", "main"]
