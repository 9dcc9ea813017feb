"""Settings of the scale benchmark: the test settings (the example shop, its admin as shipped, the
test app's message handlers) on two databases of one server, ``scale_big`` (default) and
``scale_empty`` (or the names in ``SCALE_DB`` and ``SCALE_EMPTY_DB``). With ``SCALE_CLAIM_LOG``
set (the purge phase's ``runqueue`` workers) every claim's two statements are logged with their
own time (Django logs statements only with DEBUG)."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, LOGGING

DATABASES["default"]["NAME"] = os.environ.get("SCALE_DB", "scale_big")
# SCALE_DB / SCALE_EMPTY_DB: names of one's own, so two people can each keep a built pair.
DATABASES["empty"] = {**DATABASES["default"], "NAME": os.environ.get("SCALE_EMPTY_DB", "scale_empty")}

if os.environ.get("SCALE_QUIET"):
    # The benchmark's own process: the rescue logs a warning per rescued row (10,000 of them).
    LOGGING["loggers"]["django_dbqueue"]["level"] = "ERROR"

if os.environ.get("SCALE_CLAIM_LOG"):
    DEBUG = True
    LOGGING["filters"] = {"claims": {"()": "bench.scale.claimlog.ClaimStatements"}}
    LOGGING["formatters"] = {"claims": {"format": "%(created).6f %(duration).6f %(claim_step)s"}}
    LOGGING["handlers"]["claims"] = {
        "class": "logging.FileHandler",
        "filename": os.environ["SCALE_CLAIM_LOG"],
        "filters": ["claims"],
        "formatter": "claims",
    }
    LOGGING["loggers"]["django.db.backends"] = {"handlers": ["claims"], "level": "DEBUG", "propagate": False}
