"""Checks of the repository itself: the docs' examples and links, the shipped files, the
log events named in the docs, the tests' own imports."""
