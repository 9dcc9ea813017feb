"""An app whose ``ready()`` holds Django's start-up until the test lets it go: a runqueue in
the middle of ``django.setup()`` for as long as a test needs (tests/contract/test_startup.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django.apps import AppConfig


class SlowStartConfig(AppConfig):
    name = "tests.slowstart"

    def ready(self) -> None:
        gate = os.environ.get("DBQUEUE_TEST_START_GATE")
        if not gate:
            return
        Path(gate, "starting").touch()
        deadline = time.monotonic() + 60
        while not Path(gate, "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
