"""Sphinx configuration of the docs site (``make docs``, warnings are errors).

The pages are Markdown, read by MyST-parser, so they render the same on GitHub and here; the API
reference comes from the package's docstrings through autodoc, which needs Django set up.
"""

from __future__ import annotations

import sys
from pathlib import Path

import django
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# autodoc imports the models: a minimal project with the app is enough (no database is opened).
settings.configure(
    INSTALLED_APPS=[
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "rangefilter",
        "django_dbqueue",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
    DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
)
django.setup()

project = "django_dbqueue"
author = "django_dbqueue contributors"
copyright = "2026, django_dbqueue contributors"

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
# "## Heading" anchors, so pages can link to each other's sections as on GitHub.
myst_heading_anchors = 3
# Pygments cannot lex the "…" of abridged SQL samples: it falls back to plain text, which is fine.
suppress_warnings = ["misc.highlighting_failure"]
autodoc_member_order = "bysource"
try:
    import django.tasks  # Django >= 6.0
except ImportError:
    # Django 5.2 (what pip installs on Python 3.10/3.11, e.g. a stock Debian 12's python3): the
    # django.tasks backend's reference is still built from its docstrings.
    autodoc_mock_imports = ["django.tasks", "django.utils.json"]
autodoc_typehints = "description"

html_theme = "furo"
html_title = "django_dbqueue"
