"""The soak run (issue #25): steady load, periodic purges and a worker SIGKILL every minute
for ``--minutes``; see ``harness.py``."""
