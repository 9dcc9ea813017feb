#!/usr/bin/env python
"""``manage.py`` of the benchmark project (``BENCH_SYSTEM`` picks the queue under test)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
