"""The daemon wing: `run` as a process and in-process, the schedule, discovery,
membership, notify, HTTP and reload."""
