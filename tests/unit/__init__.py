"""Tests of one unit each, mirroring the package's wings (tests/unit/<wing>/); the root
modules' here. They run against a real server where the unit talks to one."""
