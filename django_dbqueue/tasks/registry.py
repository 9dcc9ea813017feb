"""The ``django.tasks`` Tasks this process declared, by their dotted path.

Stored text never chooses code (DESIGN.md): a task path read from a row, a batch callback or
a schedule is looked up here, among the Tasks that ``@task`` declared for a
:class:`~django_dbqueue.tasks.DatabaseBackend` (Django validates each Task against its backend
when it is declared, and the backend registers it then), never imported as given.

Foundation floor: it knows nothing of the package's models, so the engine's wings (a batch's
callbacks, schedules) and the tasks backend can all use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.utils.module_loading import autodiscover_modules

if TYPE_CHECKING:
    from django.tasks.base import Task

#: Every Task this process created for a DatabaseBackend, by module path. Django validates a
#: Task with its backend when ``@task`` (or ``.using()``) creates it, so a task module that was
#: imported has its tasks here. A stored ``task_path`` is looked up here, never imported: the
#: text of a row (which an admin form or a hand-written INSERT may have chosen) names code
#: only among the tasks code declared.
_registered: dict[str, Task] = {}
_discovered = False


def register(task: Task) -> None:
    """Keep ``task`` under its path; the first one is the ``@task`` declaration (its
    ``.using()`` copies share its function)."""
    _registered.setdefault(task.module_path, task)


def registered_task(path: object) -> Task | None:
    """The Task this process registered under ``path``, or None. At the first miss, the
    installed apps' ``tasks`` modules are imported (as ``admin`` modules are: the module
    names come from INSTALLED_APPS, not from the stored text)."""
    global _discovered
    if not isinstance(path, str):
        return None
    if path not in _registered and not _discovered:
        _discovered = True  # once: a broken tasks module raises here once, not on every row
        autodiscover_modules("tasks")
    return _registered.get(path)
