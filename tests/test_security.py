"""No SQL built from data by string formatting; names that reach the database are validated.

(Admin permissions are tested with the admin.) The scan reads django_dbqueue's source with
``ast``: every call that hands SQL text to the database (``cursor.execute``/``executemany``/
``executescript``/``callproc``, ``Manager.raw``, ``QuerySet.extra``, ``RawSQL``) must get text
that is not assembled with f-strings, ``%``, ``+`` or ``.format()`` — except around
identifiers quoted by ``quote_name()`` and module constants bound to a string literal. Values
travel as parameters.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_dbqueue"
SQL_METHODS = {"execute", "executemany", "executescript", "callproc", "raw", "extra"}
SQL_CALLABLES = {"RawSQL"}


#: Call sites reviewed by hand, by (file, function): why the text they build is not data.
REVIEWED = {
    ("django_dbqueue/backends/mysql.py", "estimate"): (
        "EXPLAIN + the SQL Django compiled for a QuerySet; its params go separately"
    ),
    ("django_dbqueue/backends/postgresql.py", "_walk_cte"): (
        "the fair claim's recursive walk names its own CTE's column (dbqueue_walk<n>.dbqueue_key, "
        "a name the code makes from a loop counter, no data); every value a parameter"
    ),
    ("django_dbqueue/backends/prepared.py", "_prepare"): (
        "PREPARE <name> AS <text>: the name a hash digest and a counter; the text is the library's "
        "own statement with its values quoted by psycopg's mogrify(), as its client-side binding "
        "quotes them for any statement; DEALLOCATE <name> likewise"
    ),
    ("django_dbqueue/backends/prepared.py", "fetch_prepared"): (
        "EXECUTE <name>: a name _prepare() made from a hash digest and a counter, no data"
    ),
    ("django_dbqueue/queue/history.py", "copy_attempts"): (
        "INSERT … SELECT of attempt rows: identifiers through quote_name(), the key's text cast "
        "from backends/, one %s per id; every value a parameter"
    ),
    ("django_dbqueue/spark/read.py", "read_history"): (
        "MIN/MAX(id) for Spark's partitions: the WHERE is constant text with one %s per value, "
        "the values (datetimes, model labels) are parameters"
    ),
    **{
        ("django_dbqueue/spark/enqueue.py", method): (
            "enqueue_dataframe's DDL/DML on its staging table (_StagedRun): identifiers through "
            "qn() (quote_name), values by parameters"
        )
        for method in ("execute", "_create_stage", "_staged_range")
    },
    ("django_dbqueue/backends/mysql_partitions.py", "finish_interrupted"): (
        "INSERT IGNORE … SELECT between the history table and its leftover twin: identifiers "
        "through quote_name() (self.q), no values (the partition DDL of backends/*_partitions.py "
        "goes through HistoryPartitioning.run() the same way; partition bounds are DDL, formatted "
        "from datetimes by partitioning.literal())"
    ),
    ("django_dbqueue/spark/enqueue.py", "_insert_chunk"): (
        "runs enqueue_dataframe's INSERT … SELECT with its params"
    ),
}


def _is_quoted_identifier(node: ast.AST, quoters: frozenset[str] = frozenset()) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, (ast.Attribute, ast.Name))
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
        in {"quote_name", *quoters}
    )


def _safe_placeholder(node: ast.AST, constants: frozenset[str]) -> bool:
    """An identifier quoted by quote_name(), or a module constant bound to a string literal."""
    return _is_quoted_identifier(node, constants) or (isinstance(node, ast.Name) and node.id in constants)


def _formatted(node: ast.AST, constants: frozenset[str] = frozenset()) -> bool:
    """Text assembled from values: an f-string with a placeholder that is not safe, ``%``,
    ``+`` of strings, or ``.format()``."""
    if isinstance(node, ast.JoinedStr):
        return any(
            isinstance(part, ast.FormattedValue) and not _safe_placeholder(part.value, constants)
            for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        sides = (node.left, node.right)
        return any(isinstance(s, (ast.Constant, ast.JoinedStr)) and _stringish(s) for s in sides) or any(
            _formatted(s, constants) for s in sides
        )
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return True
    return False


def _stringish(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def formatted_sql_calls(source: str, filename: str = "<source>") -> list[str]:
    tree = ast.parse(source, filename)
    constants = frozenset(
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id.isupper()
    ) | frozenset(  # qn = connection.ops.quote_name
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "quote_name"
        for target in node.targets
        if isinstance(target, ast.Name)
    )
    owner = {
        id(call): func.name
        for func in ast.walk(tree)
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
        for call in ast.walk(func)
        if isinstance(call, ast.Call)
    }
    # Names bound by formatting anywhere in the module (assignments are checked by name:
    # conservative, a formatted value under a reused name is still reported).
    formatted_names = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and node.value is not None
        and _formatted(node.value, constants)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in SQL_METHODS and name not in SQL_CALLABLES:
            continue
        args = list(node.args[:1]) + [
            kw.value for kw in node.keywords if kw.arg in ("sql", "raw_query", "where")
        ]
        for arg in args:
            candidates = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
            for sql in candidates:
                if _formatted(sql, constants) or (isinstance(sql, ast.Name) and sql.id in formatted_names):
                    where = owner.get(id(node), "<module>")
                    found.append(
                        f"{filename}:{node.lineno} in {where}(): {name}() gets SQL built by formatting"
                    )
    return found


def test_the_scanner_finds_formatted_sql_and_accepts_parameters() -> None:
    bad = """
def f(cursor, table, pk, Model):
    cursor.execute(f"DELETE FROM x WHERE id = {pk}")
    cursor.execute("DELETE FROM x WHERE id = %s" % pk)
    cursor.execute("DELETE FROM x WHERE id = " + str(pk))
    cursor.execute("DELETE FROM x WHERE id = {}".format(pk))
    sql = f"SELECT * FROM x WHERE name = '{table}'"
    cursor.execute(sql)
    Model.objects.raw(f"SELECT * FROM x WHERE id = {pk}")
    Model.objects.extra(where=[f"id = {pk}"])
    RawSQL("id = %s" % pk, [])
"""
    good = """
CHANNEL = "dbqueue"
def f(cursor, connection, pk, Model, query):
    cursor.execute(f"LISTEN {CHANNEL}")
    cursor.execute("DELETE FROM x WHERE id = %s", [pk])
    cursor.execute(f"UPDATE {connection.ops.quote_name(Model._meta.db_table)} SET a = %s", [pk])
    for sql, params in query.get_compiler(using="default").as_sql():
        cursor.execute(sql, params)
"""
    assert len(formatted_sql_calls(bad)) == 8
    assert formatted_sql_calls(good) == []


def test_django_dbqueue_builds_no_sql_from_data_by_string_formatting() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 10
    found = [
        problem
        for path in files
        if "migrations" not in path.parts
        for problem in formatted_sql_calls(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]
    unreviewed = [
        problem
        for problem in found
        if (problem.split(":")[0], problem.split(" in ")[1].split("(")[0]) not in REVIEWED
    ]
    assert unreviewed == [], "SQL built by formatting: pass values as parameters (or review it)"


@pytest.mark.django_db(transaction=True)
def test_a_hostile_worker_id_given_to_the_python_api_is_stored_as_data_not_run_as_sql() -> None:
    # runqueue refuses such ids (tests/contract/test_bad_input.py); code calling Worker directly is
    # not validated, and needs no validation to be safe: the id is a query parameter.
    from django.db import connection

    from django_dbqueue.models import QueueAttempt
    from django_dbqueue.worker import Worker
    from tests.testapp.models import Job

    hostile = "w'); DROP TABLE testapp_job; -- \" `x`"
    job = Job.objects.create(name="x")
    stats = Worker(models=[Job], burst=True, handle_signals=False, worker_id=hostile).run()
    assert stats.succeeded == 1
    assert "testapp_job" in connection.introspection.table_names()
    job.refresh_from_db()
    assert job.queue_state == "succeeded" and job.queue_locked_by == hostile
    assert QueueAttempt.objects.get(object_id=str(job.pk)).worker_id == hostile


@pytest.mark.parametrize("queue", ["emails; DROP TABLE x", "a b", "", "q" * 65, "naïve"])
def test_queue_names_are_validated_where_they_enter(queue) -> None:
    from django.core.management import CommandError, call_command

    from django_dbqueue.models import Message

    with pytest.raises(ValueError, match="queue name"):
        Message.objects.publish("test.echo", {}, queue=queue)
    with pytest.raises(CommandError):
        call_command("runqueue", "--queue", queue)
