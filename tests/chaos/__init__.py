"""Fault-injection suite: real runqueue processes, a private MariaDB, kills and restarts."""
