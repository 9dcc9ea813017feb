"""The table of fair share (issue #37): where each model's round robin among keys stands."""

from __future__ import annotations

from django.db import models


class QueueFairTurn(models.Model):
    """One row per model with a fair key: the key the last claim served last.

    Claims at the same fair rank start after it (``fairness.rotation``), so every host's
    claims take turns over the keys together. A claim locks it before it ranks and moves it
    before its short transaction commits: two claims of a model in the same instant queue on
    this row for the other's commit, never on each other's queue rows."""

    model = models.CharField(max_length=200, unique=True)
    last_key = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        app_label = "django_dbqueue"
        verbose_name = "fair share turn"

    def __str__(self) -> str:
        return f"{self.model} after {self.last_key!r}"
