"""A project whose queue app has no migrations yet (``makemigrations`` never run for it):
``runqueue`` must say to run ``makemigrations testapp``, not ``migrate`` (issue 34, item 11)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

MIGRATION_MODULES = {"testapp": None}
