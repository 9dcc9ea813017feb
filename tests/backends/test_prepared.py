"""PostgreSQL runs the claim's repeated statements prepared (backends/prepared.py): the fair
walk's text is the same at every claim of a model, so from its second run on a connection it
runs as ``EXECUTE``, planned once. Checked on the real server: the claims give the same rows
in the same order as without it; a statement the session lost (a pooler's other session, a
``DEALLOCATE``) or already holds costs the claim a retry, not an error; a connection that
keeps losing them stops preparing; ``DBQUEUE_PREPARED_STATEMENTS = False`` prepares nothing."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from django_dbqueue.backends import prepared
from django_dbqueue.fairness import bounded, options
from django_dbqueue.models import QueueFairTurn
from django_dbqueue.queue.outcome import Outcome
from django_dbqueue.queue.record import record
from django_dbqueue.states import QueueState
from tests.conftest import running_vendor
from tests.testapp.models import FairJob

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.databases("postgresql", reason="only PostgreSQL prepares the claim's statements"),
    # The passes that run every test on one database (DBQUEUE_TESTS_EVERY_DATABASE) keep it.
    pytest.mark.skipif(running_vendor() != "postgresql", reason="only PostgreSQL prepares them"),
    pytest.mark.skipif(
        bool(os.environ.get("DBQUEUE_TEST_PREPARED")),
        reason="psycopg's server-side binding prepares by itself (test_prepared_statements.py)",
    ),
]

KEYS = 6
CLAIMS = 7
WARM_UP = 4


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    """Each test starts from rows of six keys, no turn, and nothing this module prepared."""
    bounded._ROWS_PER_KEY.clear()
    bounded._BOTH_SEGMENTS.clear()
    bounded._FULL_LOOSE_SCANS.clear()
    FairJob.queue_fair_weights = None
    options.fair_share_of.cache_clear()
    _deallocate_ours()
    yield
    FairJob.queue_fair_weights = {"gold": 3}
    options.fair_share_of.cache_clear()
    _deallocate_ours()


def _deallocate_ours(forget: bool = True) -> None:
    """Drop this connection's statements of the module (and, ``forget``, what it knows)."""
    for name in ours():
        with connection.cursor() as cursor:
            cursor.execute(f"DEALLOCATE {name}")
    if forget:
        prepared._sessions.clear()


def _fill() -> int:
    """Fresh rows; the primary key before the first (claims compare by place in the fill)."""
    FairJob.objects.all().delete()
    QueueFairTurn.objects.all().delete()
    FairJob.objects.bulk_create([FairJob(customer=f"k{n % KEYS}") for n in range(KEYS * CLAIMS * 2)])
    return FairJob.objects.order_by("pk").values_list("pk", flat=True)[0] - 1


def _claims(count: int = CLAIMS) -> list[list[int]]:
    """``count`` claims of ``KEYS`` rows each, their success recorded: the rows of each."""
    taken = []
    for _ in range(count):
        rows = FairJob.objects.claim(KEYS, worker_id="prepared", lease=60)
        taken.append([row.pk for row in rows])
        if rows:
            record(FairJob, rows[0].queue_claim(), [Outcome.succeeded(row) for row in rows])
    return taken


def ours() -> dict[str, int]:
    """This connection's statements prepared by the module, with how many runs each had."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, generic_plans + custom_plans FROM pg_prepared_statements "
            "WHERE name LIKE 'dbqueue\\_%%'"
        )
        return dict(cursor.fetchall())


def _warm() -> str:
    """Claims until the walk runs prepared: the name it runs under. The first two claims walk
    with no turn yet (a text of their own), the next two with the turn: the fourth prepares."""
    with CaptureQueriesContext(connection) as captured:
        _claims(WARM_UP)
    executed = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("EXECUTE dbqueue_")]
    return executed[-1].split()[1]


def test_the_fair_walk_runs_prepared_with_the_same_rows() -> None:
    base = _fill()
    with override_settings(DBQUEUE_PREPARED_STATEMENTS=False):
        unprepared = [[pk - base for pk in rows] for rows in _claims()]
    assert ours() == {}
    # Every claim took one row of each key (the fair share).
    assert all(len(rows) == KEYS for rows in unprepared)
    base = _fill()
    with CaptureQueriesContext(connection) as captured:
        taken = [[pk - base for pk in rows] for rows in _claims()]
    assert taken == unprepared
    sent = [query["sql"] for query in captured.captured_queries]
    walks = [sql for sql in sent if sql.startswith(("EXECUTE", "WITH RECURSIVE"))]
    # After the warm-up each claim runs the walk by its name: no text, no PREPARE.
    name = walks[-1].removeprefix("EXECUTE ")
    assert name.startswith("dbqueue_")
    assert walks[-(CLAIMS - WARM_UP) :] == [f"EXECUTE {name}"] * (CLAIMS - WARM_UP), walks
    assert ours()[name] >= CLAIMS - WARM_UP  # the server's count of its runs by name


def test_a_statement_the_session_lost_costs_a_retry(caplog: pytest.LogCaptureFixture) -> None:
    _fill()
    name = _warm()
    # What a pooler does when it hands the next transaction another server session.
    with connection.cursor() as cursor:
        cursor.execute(f"DEALLOCATE {name}")
    with caplog.at_level(logging.INFO, logger="django_dbqueue.backends"):
        assert len(_claims(1)[0]) == KEYS
    assert "A prepared statement was lost" in caplog.text
    # The retry ran the text (its count starts again); the next claim prepares it again,
    # under a name of the new generation.
    assert name not in ours()
    _claims(1)
    assert name[:-1] + "1" in ours()
    assert FairJob.objects.filter(queue_state=QueueState.SUCCEEDED).count() == KEYS * (WARM_UP + 2)


def test_a_statement_the_session_holds_already_costs_a_retry() -> None:
    """The module forgot what it prepared (or a pooler's session holds it from another process
    of the project): its PREPARE under the same name fails."""
    _fill()
    name = _warm()
    prepared._sessions.clear()
    taken = _claims(3)  # runs the text; fails to prepare it, runs it; prepares it anew
    assert [len(rows) for rows in taken] == [KEYS] * 3
    assert name in ours() and name[:-1] + "1" in ours()


def test_a_connection_that_keeps_losing_them_stops_preparing(caplog: pytest.LogCaptureFixture) -> None:
    _fill()
    _warm()
    with caplog.at_level(logging.WARNING, logger="django_dbqueue.backends"):
        for _ in range(prepared.LOSSES_BEFORE_OFF):
            _deallocate_ours(forget=False)
            assert len(_claims(1)[0]) == KEYS  # lost: runs the text
            assert len(_claims(1)[0]) == KEYS  # prepares it again (until the last loss)
    assert "set DBQUEUE_PREPARED_STATEMENTS = False" in caplog.text
    _deallocate_ours(forget=False)
    with CaptureQueriesContext(connection) as captured:
        _claims(3)
    assert not [q for q in captured.captured_queries if q["sql"].startswith(("PREPARE", "EXECUTE"))]
    assert ours() == {}


def test_the_setting_turns_it_off() -> None:
    _fill()
    with override_settings(DBQUEUE_PREPARED_STATEMENTS=False), CaptureQueriesContext(connection) as captured:
        assert all(len(rows) == KEYS for rows in _claims())
    assert not [q for q in captured.captured_queries if q["sql"].startswith(("PREPARE", "EXECUTE"))]
    assert ours() == {}


def test_a_text_run_once_is_never_prepared() -> None:
    """The claim's statements whose text holds their rows' keys run once each: none of them is
    prepared (a PREPARE would be a round trip more for nothing)."""
    session = prepared._Session()
    for number in range(prepared.TEXTS_REMEMBERED * 2):
        assert session.name_for(f"SELECT {number}") is None
    assert len(session.seen) == prepared.TEXTS_REMEMBERED
    assert session.name_for("SELECT 1") is None
    assert session.name_for("SELECT 1") == ""  # its second run: prepare it
