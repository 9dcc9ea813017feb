"""The engine's extension points: where the feature wings add to a claim, an enqueue and an end.

The engine (``queue/``) sits below the feature wings (DESIGN.md "Layout"), yet a claim must
hold back paused queues and keep per-key limits, an enqueue must join an open batch, and an
end for good must move a batch's counters and settle a chain. Rather than import the wings
(which would put them under the engine, and every change of theirs in its way), the engine
names here what it asks, with the arguments it gives and the answer it expects, and each wing
registers its callables into these points from ``AppConfig.ready()``
(:mod:`django_dbqueue.apps`), in one fixed order. It is the way Django's own apps hook in: a
registry filled at start-up, nothing imported by name from stored text, nothing discovered.

A point is a list of named callables, called in registration order; registering a name again
replaces its callable in its place, so a second ``ready()`` (a test that re-populates the app
registry) changes nothing. A point nobody registered into does nothing: the engine then
behaves as it would without the feature (no pause, no limit, no batch); a verb (``pause()``,
``cancel_running()`` …) raises ``ImproperlyConfigured`` naming the fix instead.

The wings register (``flow/extensions.py``, ``composition/extensions.py``,
``fairness/extensions.py``):

========================  ======================================================================
``claim_filters``         flow control's pauses (``flow.pauses.unpaused``)
``claim_gates``           flow control's per-key limits (``flow.limits.gate``)
``claim_orders``          fairness's fair share and priority aging (``fairness.locked_candidates``)
``enqueue_stamps``        composition's open batch and the trace context (``composition.hooks.stamp``)
``keyed_inserts``         flow control's unique keys (``flow.unique``)
``keyed_models``          flow control's unique keys: whether a model's rows go in one by one
``value_stamps``          composition's batch and the trace context for rows inserted as values
``ended``                 composition's batches and chains (``composition.hooks.finished``)
``succeeded``             the metrics' success counter, once per committed write (``metrics``)
``cancelled_in_claim``    cancellation: the requests a claim's CANCELLED end answered
``cancel_requests``       cancellation: the expired rows someone asked to cancel (the rescue)
``pause_queue`` …         the QuerySet's ``pause()``, ``resume()``, ``cancel_running()``
``enqueue_after`` …       a row's ``enqueue(after=…)``, its duplicate policy, ``request_cancel()``
========================  ======================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from django.db import models

    from .row import QueueRow

_F = TypeVar("_F", bound=Callable[..., Any])


class ExtensionPoint(Generic[_F]):
    """Named callables of one kind, in the order they were first registered."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._named: dict[str, _F] = {}
        # What callers iterate over: a tuple, rebuilt on registration, so the outcome path
        # pays no copy per call.
        self._callables: tuple[_F, ...] = ()

    def register(self, name: str, function: _F) -> None:
        """Add ``function`` under ``name`` (again: replace it in its place)."""
        self._named[name] = function
        self._callables = tuple(self._named.values())

    def __iter__(self) -> Iterator[_F]:
        return iter(self._callables)

    def __bool__(self) -> bool:
        return bool(self._callables)

    def only(self) -> _F:
        """The callable that carries out a verb (``pause_queue`` …; the last registered, one
        wing registers each): a clear error, naming the fix, when no wing registered it."""
        if not self._callables:
            raise ImproperlyConfigured(
                f"nothing is registered for the queue's {self.name!r}: the feature wings register "
                "in DbQueueConfig.ready(); add 'django_dbqueue' to INSTALLED_APPS"
            )
        return self._callables[-1]


# -- the claim -----------------------------------------------------------------------------------


class ClaimGate(Protocol):
    """One claim's pass through per-key limits, inside the claim's transaction."""

    def take(self, qs: Any, limit: int) -> list[tuple[Any, Any, Any]]:
        """The claim's locked candidates ``(pk, token, database now)`` the gate lets through
        (in place of ``qs.claim_candidates(limit)``)."""

    def charge(self, ids: list[Any]) -> None:
        """Count the rows finally taken against their keys."""


#: What a claim (and an idle worker's probe) may take: the QuerySet less what is held back, or
#: None when nothing of it may be claimed. Each narrows the previous one's answer.
claim_filters: ExtensionPoint[Callable[[Any], Any]] = ExtensionPoint("claim filter")

#: The order a claim takes due rows in: ``(qs, limit)`` -> up to ``limit`` locked candidates
#: ``(pk, token, database now)``, as ``qs.claim_candidates(limit)`` gives them. The first one
#: registered is the claim's (fairness: fair share and aging, the plain order for a model that
#: declares neither); none registered, the plain claim.
claim_orders: ExtensionPoint[Callable[[Any, int], list[tuple[Any, ...]]]] = ExtensionPoint("claim order")

#: A gate for one claim of a model on a database, or None (the plain claim). The first gate
#: given is the claim's: a claim's candidates come from one SELECT.
claim_gates: ExtensionPoint[Callable[[type[models.Model], str], ClaimGate | None]] = ExtensionPoint(
    "claim gate"
)


# -- enqueueing ----------------------------------------------------------------------------------


class EnqueueStamp(Protocol):
    def __call__(
        self, model: type[models.Model], values: dict[str, Any] | None = None, rows: list[Any] | None = None
    ) -> None:
        """An enqueue's bookkeeping: new ``rows`` (instances about to be inserted), or the
        ``values`` of an UPDATE that re-queues rows (changed in place; order kept)."""


class KeyedInsert(Protocol):
    def __call__(self, qs: Any, rows: Sequence[Any], on_duplicate: str | None) -> int | None:
        """Insert ``rows`` of a model whose rows have a duplicate policy, returning how many
        were inserted; None when the model has none (the plain bulk INSERT). Raises
        ValueError for an ``on_duplicate`` that does not exist, before writing anything."""


class KeyedModel(Protocol):
    def __call__(self, model: type[QueueRow], on_duplicate: str | None) -> bool:
        """Whether rows of ``model`` go in under a duplicate policy (one INSERT each, by a
        keyed insert), so not as one multi-row INSERT of values. Raises ValueError for an
        ``on_duplicate`` that does not exist."""


class ValueStamp(Protocol):
    def __call__(self, model: type[models.Model], count: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """An enqueue's bookkeeping for ``count`` new rows inserted from values, not instances
        (``bulk_enqueue`` of mappings, queue/inserts.py): the values every row takes, and those
        a row takes where it gives none."""


enqueue_stamps: ExtensionPoint[EnqueueStamp] = ExtensionPoint("enqueue stamp")
keyed_inserts: ExtensionPoint[KeyedInsert] = ExtensionPoint("keyed insert")
keyed_models: ExtensionPoint[KeyedModel] = ExtensionPoint("keyed model")
value_stamps: ExtensionPoint[ValueStamp] = ExtensionPoint("value stamp")


# -- ends ----------------------------------------------------------------------------------------


class Ended(Protocol):
    def __call__(
        self,
        model: type[QueueRow],
        using: str,
        succeeded: Sequence[Any] = (),
        failed: Sequence[Any] = (),
        cancelled: Sequence[Any] = (),
    ) -> None:
        """Rows (instances with ``queue.row.COMPOSITION_FIELDS`` loaded) that just ended for good,
        inside the transaction that wrote them."""


class CancelledInClaim(Protocol):
    def __call__(self, model: type[QueueRow], using: str, ids: Iterable[Any]) -> None:
        """Rows a claim held just ended CANCELLED (in the writing transaction)."""


class CancelRequests(Protocol):
    def __call__(self, model: type[QueueRow], using: str, rows: Iterable[tuple[Any, Any]]) -> dict[Any, str]:
        """Of ``rows`` (pk, claim token), those someone asked to cancel during that very claim:
        pk -> the reason their end keeps."""


class Succeeded(Protocol):
    def __call__(self, model: type[QueueRow], rows: Sequence[Any]) -> None:
        """The rows whose success one write recorded, once its transaction committed: a
        count per write, where a ``job_succeeded`` receiver is called once per row (a lease-mode
        flush records hundreds)."""


#: Every end for good: a worker's, the rescue's, an operator's bulk ``cancel()``.
ended: ExtensionPoint[Ended] = ExtensionPoint("end")
succeeded: ExtensionPoint[Succeeded] = ExtensionPoint("succeeded")
cancelled_in_claim: ExtensionPoint[CancelledInClaim] = ExtensionPoint("cancelled in claim")
cancel_requests: ExtensionPoint[CancelRequests] = ExtensionPoint("cancel requests")


def tell_ended(
    model: type[QueueRow],
    using: str,
    succeeded: Sequence[Any] = (),
    failed: Sequence[Any] = (),
    cancelled: Sequence[Any] = (),
) -> None:
    """Call every ``ended`` callable (in the caller's transaction)."""
    for hook in ended:
        hook(model, using, succeeded=succeeded, failed=failed, cancelled=cancelled)


# -- verbs the QuerySet offers on behalf of a wing -----------------------------------------------


class PauseQueue(Protocol):
    def __call__(
        self, target: type[models.Model], queue: str | None = None, *, using: str | None = None
    ) -> bool:
        """Pause (or resume) a model or one named queue of it; whether anything changed."""


class CancelRunning(Protocol):
    def __call__(self, qs: Any, requested_by: str = "") -> int:
        """Ask the workers of the RUNNING rows of ``qs`` to cancel them; how many were asked."""


pause_queue: ExtensionPoint[PauseQueue] = ExtensionPoint("pause")
resume_queue: ExtensionPoint[PauseQueue] = ExtensionPoint("resume")
cancel_running: ExtensionPoint[CancelRunning] = ExtensionPoint("cancel_running")


# -- verbs a row's API offers on behalf of a wing (QueueMixin, queue/mixin.py) -------------------


class EnqueueAfter(Protocol):
    def __call__(self, row: Any, parents: Iterable[Any], on_parent_failure: str) -> bool:
        """Enqueue ``row`` to run once its ``parents`` all succeeded; whether it is READY now."""


class KeyedWrite(Protocol):
    def __call__(self, row: Any, using: str, on_duplicate: str | None, write: Callable[[], bool]) -> bool:
        """Run ``write`` (the INSERT or UPDATE that makes ``row`` active) under the duplicate
        policy of the model's unique key; whether ``row`` itself is now active."""


class RequestCancel(Protocol):
    def __call__(self, row: Any, requested_by: str = "") -> None:
        """Ask the worker running ``row`` to cancel it (``NotRunning`` if it is not RUNNING)."""


enqueue_after: ExtensionPoint[EnqueueAfter] = ExtensionPoint("enqueue after")
keyed_writes: ExtensionPoint[KeyedWrite] = ExtensionPoint("keyed write")
request_cancel: ExtensionPoint[RequestCancel] = ExtensionPoint("request_cancel")


def write_keyed(row: Any, using: str, on_duplicate: str | None, write: Callable[[], bool]) -> bool:
    """An enqueue of one row: through the unique keys' duplicate policy when a wing registered
    one (it also refuses a policy that does not exist), else just ``write``."""
    policies = tuple(keyed_writes)
    if not policies:
        return bool(write())
    return policies[-1](row, using, on_duplicate, write)
