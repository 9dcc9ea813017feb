"""A module nothing imports: a test that finds it in ``sys.modules`` saw stored or typed text
imported as code (tests/surfaces/admin/test_admin_permissions.py)."""

from __future__ import annotations


def thing() -> None:  # what a forged target or task_path names
    raise AssertionError("the canary was called")
