"""The scale benchmark (issue #25): the queue at 10,000,000 rows; run it with ``make bench-scale``
or ``python -m bench.scale`` (see __main__.py)."""
