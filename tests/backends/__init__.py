"""The backend conformance suite: the checklist for a new database.

``django_dbqueue/backends/`` is the only package that asks which database it is on; everything
else calls a :class:`~django_dbqueue.backends.base.QueueBackend` method or reads one of its flags.
This suite holds every one of those methods and flags to its contract against a real server, the
same tests on MariaDB, PostgreSQL and SQLite (the way River's ``riverdriver/riverdrivertest``
holds each driver to one contract). It is chosen by nothing but ``DATABASE_URL``: ``make test``
runs it once per database, like the rest of the suite.

Every case is a real event, never a mock: a real deadlock between two sessions, a real lock-wait
timeout, a read-only session refusing a write, a raw ``BEGIN``, a NOTIFY from another session, an
idle transaction the server really ends. Where a method is vendor-specific, the test asserts the
vendor's documented behaviour and the others are skipped with the reason.

To add a database, write its ``QueueBackend`` subclass, register it in ``backends.BACKENDS``,
and make each module here pass (or skip with a reason that names the database's limit):

==========================  ====================================================================
``test_flags.py``           ``backend_for``, ``vendor``, ``describe``, ``skip_locked``,
                            ``order_by_pk``, ``spark_jdbc``, ``can_notify``,
                            ``configuration_warning``, ``as_text``
``test_errors.py``          ``is_lock_conflict`` (deadlock, lock-wait timeout, unrelated errors),
                            ``is_read_only``
``test_transactions.py``    ``server_in_transaction``, ``bound_idle_transactions``
``test_notify.py``          ``notify``, ``listen``, ``listen_notes``
``test_sizes.py``           ``table_row_estimate``, ``plan_row_estimate``, ``session_room``
``test_clock.py``           ``DbNow``, ``db_now_plus``, ``read_now``, ``aware``, ``QueueTimeField``
``test_inserts.py``         ``insert_new``
``test_locking.py``         ``retry_on_lock_conflicts``, the claim's ``SKIP LOCKED``
``test_partitioning.py``    ``history_partitioning`` and the partition helpers
==========================  ====================================================================

The tests run in autocommit, as a worker does (no transaction around the test; each test's rows
are removed after it, see ``conftest.py``), and they wait on conditions, never on fixed sleeps,
so the whole suite takes seconds per database.
"""
