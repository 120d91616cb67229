"""The verb and how it is sent: the Lua scripts (the verb's port and the sweep that wraps it
with its accounting), the two executors, a round of calls and their replies, the size of a
call, and the ACL commands the sweep needs.

May import: server and the root modules.
"""
