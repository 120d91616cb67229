"""The operator's one-shot commands: `once` (and its dry run), `inspect`, the way they print and
fail, the drain's progress bar, and `demo`.

May import: daemon (demo runs it), fleet, config, metrics, verb, server and the root modules.
"""
