"""The command line: usage, help, exit codes and the one line of every failure."""
