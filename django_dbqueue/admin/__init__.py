"""The Django admin of django_dbqueue.

* :class:`QueueAdminMixin` (:mod:`.mixin`) — ``class OrderAdmin(QueueAdminMixin, admin.ModelAdmin)``
  for a ``QueueMixin`` model: queue columns, filters, bulk actions (:mod:`.actions`), people
  as consumers (:mod:`.people`), a dashboard (:mod:`.stats`) and a paginator that never counts
  a whole big table (:mod:`.pagination`);
* :mod:`.site` registers the package's own models on the default admin site (imported here
  when ``django_dbqueue`` is installed), like any app's ``admin.py``; unregister one
  (``admin.site.unregister(Message)``) to hide it.
"""

from __future__ import annotations

from django.apps import apps

from .display import describe_queue_state, error_summary
from .filters import HasErrorFilter, WholeDayRangeFilter
from .mixin import QueueAdminMixin

__all__ = [
    "HasErrorFilter",
    "QueueAdminMixin",
    "WholeDayRangeFilter",
    "describe_queue_state",
    "error_summary",
]

if apps.is_installed("django_dbqueue"):  # else there are no such tables (check E000 says why)
    from . import batches, schedules, site  # noqa: F401 - register the package's own models
