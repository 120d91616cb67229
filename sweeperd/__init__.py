"""sweeperd: the stalled-job sweeper for EchoMQ queues."""

__version__ = "0.1.0"
