"""tests.settings, plus an app that holds ``django.setup()`` (tests/slowstart) until let go."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.slowstart"]  # noqa: F405
