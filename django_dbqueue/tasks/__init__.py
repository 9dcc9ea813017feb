"""The ``django.tasks`` backend (Django >= 6.0; docs/tasks.md)::

    TASKS = {"default": {"BACKEND": "django_dbqueue.tasks.DatabaseBackend"}}

``DatabaseBackend``, ``retry`` and ``wait`` are the public names. Modules by concept:
``backend`` (the backend, its runner and its ``task_finished`` receivers; it imports
``django.tasks``, so only Django 6.0+ loads it), ``record`` (the ``TaskRecord`` model,
re-exported by ``django_dbqueue.models``), ``registry`` (the Tasks this process registered:
what a stored task path may resolve to).

The public names are imported when first asked for: the model discovery imports ``record``
and batches' callbacks ``registry`` through this package on any Django release, before the
models are ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import DatabaseBackend, retry, wait

__all__ = ["DatabaseBackend", "retry", "wait"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
