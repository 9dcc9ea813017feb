"""The test settings, with the statement counters of the idle worker that bench/workflow_wake.py
measures: every cursor statement (bench/querycount.py, any database) and, on MariaDB, every
round trip at the driver (bench/stmtcount.py). Each is on only when its environment variable
names a folder."""

from __future__ import annotations

from bench import querycount, stmtcount
from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

querycount.install()
if DATABASES["default"]["ENGINE"].endswith("mysql"):
    stmtcount.install()
