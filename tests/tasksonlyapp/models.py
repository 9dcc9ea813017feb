"""No models: the task is declared here so that it is imported, and its backend loaded, when
the project starts (as a project's ``tasks`` module imported by its models or views is)."""

from __future__ import annotations

from django.tasks import task


@task
def ping() -> None:
    pass
