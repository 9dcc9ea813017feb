# Everything a fresh Debian machine of this kind needs is installed from here: system
# packages (apt), a virtualenv with the newest Python >= 3.10, and the local database servers.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
MARIADB_URL ?= mysql://root@127.0.0.1:3306/dbqueue
POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/dbqueue
SQLITE_URL ?= sqlite:///$(CURDIR)/tests/dbqueue.sqlite3
PYTEST ?= $(PY) -m pytest -q
EXAMPLE_DB ?=

.PHONY: help venv system-deps services test test-passes test-databases test-mariadb test-postgresql test-admin test-postgresql-prepared test-sqlite test-spark test-install test-django \
        lint check docs screenshots package example test-python model-check protocol-hypothesis bench bench-quick bench-startup bench-scale bench-flow bench-request-reply bench-atomic-ceiling bench-workflows chaos chaos-workflows faults soak soak-quick netns clean

help:
	@echo "make example   - run the example shop end to end: Python >= 3.10 and SQLite only, no root"
	@echo "                 (EXAMPLE_DB=mysql://... for another database; its driver is yours to install)"
	@echo "make test      - lint, mypy, checks, docs, package, the whole test suite on MariaDB, PostgreSQL"
	@echo "                 and SQLite (each in two halves: make test-mariadb-contract, -wings), smoke runs"
	@echo "                 on Django 6.0 (PostgreSQL; make test-django-60) and on Python 3.10 (MariaDB)"
	@echo "                 and 3.11 (SQLite) with Django 5.2 LTS"
	@echo "make chaos     - the long fault-injection run (50,000 rows, kills, DB restarts) on a private MariaDB"
	@echo "make chaos-workflows - 2,000 5-step workflows a mode under SIGKILLs and a server crash, private"
	@echo "                 MariaDB then PostgreSQL: each step once, every workflow finished (~15 min)"
	@echo "make faults    - issue #21's fault table: poison rows, leaks, read-only, 100 workers (~4 min)"
	@echo "make soak      - 30 minutes at 70% of capacity, a worker SIGKILL a minute, purges (SOAK_MINUTES=30)"
	@echo "make netns     - many hosts over a real network (root): partitions and a slow link (~4 min)"
	@echo "make model-check - the protocol model (protocol/queue.pml) checked by Spin at deeper bounds (~10 min)"
	@echo "make protocol-hypothesis - the Hypothesis run of the real code against the protocol, longer budget"
	@echo "make docs      - the docs site (Sphinx + MyST, warnings are errors) into docs/_build/html;"
	@echo "                 only the docs extra in .venv-docs: no root, no apt, no database"
	@echo "make screenshots - docs/img/*.png again, from the example shop in headless Chromium"
	@echo "make package   - wheel + sdist, twine check, the wheel in a clean virtualenv runs the example"
	@echo "make bench     - benchmarks against the peers and the raw-SQL limit (rewrites BENCHMARKS.md)"
	@echo "make bench-quick - ours and the raw-SQL loops only, 3 rounds, ~10 min (bench/out/BENCHMARKS-quick.md)"
	@echo "make bench-startup - runqueue's start-up time and the package's import time, against a 0.67 s floor"
	@echo "make bench-flow - the claim's cost with per-key limits, as a ratio to the plain claim"
	@echo "make bench-request-reply - 1,000 request-reply calls from 8 processes: p95 round trip (MariaDB, PostgreSQL)"
	@echo "make bench-workflows - 10,000 sleeping and 10,000 event-waiting workflows: wake lateness, wakes"
	@echo "                 per row, idle statements/s with parked rows (MariaDB, PostgreSQL; WAKE_ARGS=...)"
	@echo "make bench-atomic-ceiling - atomic mode's statements in raw SQL, four ways, against 'ack each'"
	@echo "make bench-spark - the Spark pipeline, 10M rows, on a standalone cluster and on local[*] (~30 min)"
	@echo "make test-spark-cluster - the pipeline on a Spark standalone cluster started by the test (~4 min;"
	@echo "                 make test runs the pipeline in local mode, not on the cluster)"
	@echo "make bench-scale - 10,000,000 rows: claim, enqueue, admin, rescue, purge under 4 workers (~30 min a server)"

# -- environment ----------------------------------------------------------------------------

system-deps:
	@bash scripts/system-deps.sh

$(VENV)/.installed: pyproject.toml
	@bash scripts/make-venv.sh $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev]'
	@touch $@

venv: system-deps $(VENV)/.installed

services:
	@bash scripts/start-services.sh

# -- tests ----------------------------------------------------------------------------------

test: venv services test-passes

# Everything `make test` runs, three at a time, longest first (by the wall times of the last
# run, which `make test` prints at its end: a long pass started last would run alone at the end
# while a core idles): the three databases' passes and the Spark pass (each on its own server,
# database or file; tests/README.md says which tests each runs), the smoke runs of the older
# Django series and Pythons, then lint, check, docs and package, each as soon as a slot frees up. -O prints each job's output whole when it ends, so the
# log reads as if they had run one after another; each pass ends with its wall time
# (scripts/timed.sh), and the run with all of them and how busy the machine's CPUs were
# (scripts/machine-busy.sh). TEST_JOBS=1 runs them one after another.
TEST_JOBS ?= 3
TEST_TIMES ?= $(CURDIR)/test-times.log
TIMED = TEST_TIMES=$(TEST_TIMES) bash scripts/timed.sh
TEST_PASSES = test-mariadb-wings test-postgresql-contract $(TEST_DJANGO_SERIES:%=test-django-%) \
              test-sqlite-wings test-postgresql-wings test-mariadb-contract test-spark test-sqlite-contract \
              test-postgresql-prepared $(PYTHON_SERIES:%=test-python-%) test-admin test-install lint check \
              docs package
test-passes: venv services
	@rm -f $(TEST_TIMES)
	@bash scripts/machine-busy.sh $(MAKE) --no-print-directory -j$(TEST_JOBS) -O $(TEST_PASSES) \
	   DJANGO_SMOKE_DBS="$(TEST_DJANGO_SMOKE_DBS)"; status=$$?; \
	 echo "== wall time of each pass ($(TEST_JOBS) at a time):"; cat $(TEST_TIMES); exit $$status

# The databases' passes alone, side by side.
test-databases: venv services
	$(MAKE) --no-print-directory -j3 -O test-sqlite test-mariadb test-spark test-postgresql test-admin

lint: venv
	$(VENV)/bin/ruff check django_dbqueue tests example_project docs protocol $(wildcard bench)
	DATABASE_URL=$(SQLITE_URL) $(VENV)/bin/mypy django_dbqueue

check: venv services
	DATABASE_URL=$(SQLITE_URL) $(PY) -m django check --settings tests.settings --fail-level WARNING
	DATABASE_URL=$(SQLITE_URL) $(PY) -m django makemigrations --check --dry-run --settings tests.settings
	cd example_project && ../$(PY) manage.py makemigrations --check --dry-run
	@# The benchmark's app too (a stale one broke `make bench`); it reads MariaDB's own `mysql`
	@# schema for the migration history, and writes nothing.
	BENCH_SYSTEM=dbqueue BENCH_DB_NAME=mysql $(PY) bench/manage.py makemigrations --check --dry-run dbqapp

# The docs site, warnings as errors: a broken link, a page in no toctree or a bad docstring fails.
# It needs only the docs extra (Sphinx, MyST, Furo) and the package's own dependencies (autodoc
# imports the models), in a small virtualenv of its own: no root, no apt, no database server.
DOCS_VENV ?= .venv-docs

$(DOCS_VENV)/.installed: pyproject.toml
	@bash scripts/make-venv.sh $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install -q -e '.[docs]'
	@touch $@

docs: $(DOCS_VENV)/.installed
	$(DOCS_VENV)/bin/python -m sphinx -W --keep-going -q -b html docs docs/_build/html

# docs/img/*.png, taken from the example shop in headless Chromium (scripts/screenshots.py): a
# fresh SQLite shop with a drained queue, the admin at 1,400 px. Needs chromium and chromium-driver
# (scripts/system-deps.sh) and the dev virtualenv (Selenium).
screenshots: venv
	$(PY) scripts/screenshots.py docs/img

# The wheel and sdist as PyPI would see them, installed into a clean virtualenv (Python 3.12 when
# this machine has it) that runs the example shop from the wheel, not from this tree.
package: venv
	bash scripts/check-wheel.sh $(PY)

# Each database's pass is two halves that run side by side, each on a database (or SQLite file)
# of its own: the queue's promises (tests/backends and tests/contract, which start the most
# runqueue processes) and the rest (the feature wings, the surfaces, chaos). `make test-mariadb`
# runs both halves of MariaDB's pass, and so on; `make test` lists the halves, so that three
# jobs at a time keep both cores busy to the end instead of waiting on one long pass.
CONTRACT_TESTS := tests/backends tests/contract
NOT_CONTRACT := $(CONTRACT_TESTS:%=--ignore=%)

# Each pass's database: the rest's is the database's own URL, the contract's one beside it.
URL_mariadb := $(MARIADB_URL)
URL_postgresql := $(POSTGRES_URL)
URL_sqlite := $(SQLITE_URL)
CONTRACT_URL_mariadb := $(MARIADB_URL)_contract
CONTRACT_URL_postgresql := $(POSTGRES_URL)_contract
CONTRACT_URL_sqlite := $(SQLITE_URL:.sqlite3=_contract.sqlite3)
# What the rest of each pass leaves to a pass of its own, beside it:
# * MariaDB: the Spark tests (MariaDB only, a third of its time in JVMs): `make test-spark`;
# * PostgreSQL: the admin's tests (its pages, the permission matrix, the browsers; PostgreSQL's
#   in tests/README.md): `make test-admin`;
# * SQLite: the docs' pip lines (each `pip install` of the README and docs, run as written into a
#   throwaway virtualenv: minutes of building wheels, no database): `make test-install`.
WINGS_ARGS_mariadb := --ignore=tests/surfaces/spark
WINGS_ARGS_postgresql := --ignore=tests/surfaces/admin
WINGS_ARGS_sqlite := -m "not install"

test-mariadb: test-mariadb-contract test-mariadb-wings
test-postgresql: test-postgresql-contract test-postgresql-wings
test-sqlite: test-sqlite-contract test-sqlite-wings

# (Pattern rules, so not in .PHONY: make looks for no implicit rule of a phony target.)
# Then the claims on a second database (tests/contract/test_second_database.py), which need a
# second alias in the settings: only there, since with it Django's own checks read it in every
# test (tests/settings.py).
test-%-contract: venv services
	$(TIMED) $@ env DATABASE_URL=$(CONTRACT_URL_$*) $(PYTEST) $(CONTRACT_TESTS)
	$(TIMED) $@-second-database env DATABASE_URL=$(CONTRACT_URL_$*) DBQUEUE_TEST_SECOND_DATABASE=1 \
	  $(PYTEST) tests/contract/test_second_database.py

test-%-wings: venv services
	$(TIMED) $@ env DATABASE_URL=$(URL_$*) $(PYTEST) $(NOT_CONTRACT) $(WINGS_ARGS_$*)

test-spark: venv services
	$(TIMED) $@ env DATABASE_URL=$(MARIADB_URL)_spark $(PYTEST) -m "not spark_cluster" tests/surfaces/spark

# PostgreSQL through psycopg's server-side binding with prepared statements (DBQUEUE_TEST_PREPARED,
# tests/settings.py; docs/reference/databases.md): the queue's contract, and the fair and
# flow-control claims, whose statements are built once with parameters the server now types.
# In-process tests only (`-m "not processes"`): the tests that start runqueue processes (signals,
# deaths, timeouts, concurrent workers) send the statements the in-process tests send, and
# they were half of the pass's time (176 s alone without them, 372 s with, 2026-11-29), the
# longest of `make test`'s passes; they run on PostgreSQL in test-postgresql-contract.
PREPARED_TESTS := $(CONTRACT_TESTS) tests/features/fairness tests/features/flow
test-postgresql-prepared: venv services
	$(TIMED) $@ env DATABASE_URL=$(POSTGRES_URL)_prepared DBQUEUE_TEST_PREPARED=1 \
	  DBQUEUE_TESTS_EVERY_DATABASE=1 $(PYTEST) -m "not processes" $(PREPARED_TESTS)

test-admin: venv services
	$(TIMED) $@ env DATABASE_URL=$(POSTGRES_URL)_admin $(PYTEST) tests/surfaces/admin

test-install: venv
	$(TIMED) $@ env DATABASE_URL=$(SQLITE_URL:.sqlite3=install.sqlite3) $(PYTEST) -m install tests/surfaces/docs

# The full suite above runs on the newest Django (what `.[dev]` installs into $(VENV)). Each older
# supported series gets a smoke run on MariaDB, PostgreSQL and SQLite, in a virtualenv of its own that
# pins the series: `make test-django-52`, `make test-django-60`; `make test-django` runs them all.
DJANGO_SERIES ?= 52 60
# `make test` runs the matrix's corners, not its whole product: the newest Django on the newest
# Python (the full suite, three databases), Django 6.0 on it on PostgreSQL, and Django 5.2 LTS on
# the oldest Pythons: 3.10 on MariaDB, 3.11 on SQLite (test-python-310/311). So every database
# meets an older Django and every supported Python runs the smoke set; the rest of the product
# (Django 5.2 on 3.13, 6.0 on MariaDB and SQLite, ...) adds little that these do not run and
# costs a third of the run's time. `make test-django-52`/`-60` alone run all three databases.
TEST_DJANGO_SERIES ?= 60
TEST_DJANGO_SMOKE_DBS ?= postgresql
DJANGO_SMOKE_DBS ?= mariadb postgresql sqlite
DJANGO_PIN_52 := Django>=5.2,<5.3
DJANGO_PIN_60 := Django>=6.0,<6.1
# The smoke set: the tests that lean on Django's API most and change with its version or
# Python's: the backend conformance suite, the queue's contract, the django.tasks backend and the
# admin (its templates and changelist differ by series). No processes, browsers or Spark: they
# test this package, not the series. DBQUEUE_TESTS_EVERY_DATABASE=1 runs the admin tests on every
# database a corner uses (the full passes run them on PostgreSQL only).
SMOKE_TESTS ?= tests/backends tests/contract tests/features/tasks tests/surfaces/admin
SMOKE_ENV ?= DBQUEUE_TESTS_EVERY_DATABASE=1
SMOKE ?= -m "not slow and not processes and not spark and not browser" $(SMOKE_TESTS)

# Python 3.10 and 3.11 (Django 5.2 LTS; Django 6.x needs 3.12, and pip picks 5.2 by itself
# through Django's metadata): the smoke set in a virtualenv of each version with the package and
# the test tools only (no Spark, no Selenium). `make test-python-310`. Python 3.10 is the LTS's
# run on MariaDB; 3.11 (many machines' python3) is its run on SQLite. PY_SMOKE_DBS_310="mariadb
# postgresql sqlite" runs more.
PYTHON_SERIES ?= 310 311
PY_SMOKE_DBS_310 ?= mariadb
PY_SMOKE_DBS_311 ?= sqlite
PY_SMOKE_DEPS := mysqlclient 'psycopg[binary]>=3.2' dj-database-url pytest pytest-django \
                 'hypothesis>=6.100' prometheus-client opentelemetry-api opentelemetry-sdk

test-python: venv services $(PYTHON_SERIES:%=.venv-py%/.installed)
	$(MAKE) --no-print-directory -j2 -O $(PYTHON_SERIES:%=test-python-%)

.venv-py%/.installed: pyproject.toml
	@bash scripts/make-venv.sh .venv-py$* $(shell echo $* | sed 's/^3/3./')
	.venv-py$*/bin/pip install -q -e . $(PY_SMOKE_DEPS)
	@touch $@

.PRECIOUS: .venv-py%/.installed

test-python-%: venv services .venv-py%/.installed
	@.venv-py$*/bin/python -c 'import sys, django; print("Python", sys.version.split()[0], "Django", django.get_version())'
	$(if $(filter mariadb,$(PY_SMOKE_DBS_$*)),$(TIMED) "$@ (MariaDB)" \
	  env $(SMOKE_ENV) DATABASE_URL=$(MARIADB_URL)py$* .venv-py$*/bin/python -m pytest -q $(SMOKE))
	$(if $(filter postgresql,$(PY_SMOKE_DBS_$*)),$(TIMED) "$@ (PostgreSQL)" \
	  env $(SMOKE_ENV) DATABASE_URL=$(POSTGRES_URL)py$* .venv-py$*/bin/python -m pytest -q $(SMOKE))
	$(if $(filter sqlite,$(PY_SMOKE_DBS_$*)),$(TIMED) "$@ (SQLite)" \
	  env $(SMOKE_ENV) DATABASE_URL=$(SQLITE_URL:.sqlite3=py$*.sqlite3) .venv-py$*/bin/python -m pytest -q $(SMOKE))

# The series run side by side, each on databases of its own (dbqueue52, dbqueue60, ...).
test-django: venv services $(DJANGO_SERIES:%=.venv-django%/.installed)
	$(MAKE) --no-print-directory -j2 -O $(DJANGO_SERIES:%=test-django-%)

.venv-django%/.installed: pyproject.toml
	$(if $(DJANGO_PIN_$*),,$(error no DJANGO_PIN_$* in the Makefile for Django series $*))
	@bash scripts/make-venv.sh .venv-django$*
	@# The smoke set's dependencies only, as the Python series' (no Spark, Selenium, Sphinx or
	@# linters: the smoke set runs none of them, and PySpark alone is a 300 MB wheel to unpack).
	.venv-django$*/bin/pip install -q -e . '$(DJANGO_PIN_$*)' $(PY_SMOKE_DEPS)
	@touch $@

# Pattern-built stamps would otherwise count as intermediate files and be deleted after the run.
.PRECIOUS: .venv-django%/.installed

test-django-%: venv services .venv-django%/.installed
	@.venv-django$*/bin/python -c 'import django; print("Django", django.get_version())'
	$(if $(filter mariadb,$(DJANGO_SMOKE_DBS)),$(TIMED) "$@ (MariaDB)" \
	  env $(SMOKE_ENV) DATABASE_URL=$(MARIADB_URL)$* .venv-django$*/bin/python -m pytest -q $(SMOKE))
	$(if $(filter postgresql,$(DJANGO_SMOKE_DBS)),$(TIMED) "$@ (PostgreSQL)" \
	  env $(SMOKE_ENV) DATABASE_URL=$(POSTGRES_URL)$* .venv-django$*/bin/python -m pytest -q $(SMOKE))
	$(if $(filter sqlite,$(DJANGO_SMOKE_DBS)),$(TIMED) "$@ (SQLite)" \
	  env $(SMOKE_ENV) DATABASE_URL=$(SQLITE_URL:.sqlite3=$*.sqlite3) .venv-django$*/bin/python -m pytest -q $(SMOKE))

# The long chaos run: it starts its own MariaDB server (never the shared one) in a private
# temporary folder of its own, and prints the results table (RELIABILITY.md). The results JSON
# goes to CHAOS_RESULTS (git-ignored), one file per run. The quick variant is
# tests/chaos/test_chaos_quick.py.
CHAOS_RESULTS ?= tests/chaos/results
chaos: venv
	$(PY) -m tests.chaos --long --json $(CHAOS_RESULTS)/long-run-$$(date -u +%Y%m%dT%H%M%SZ)-$$$$.json

# Durable workflows under chaos (issue #36; RELIABILITY.md "Workflows under chaos"): 2,000 5-step
# workflows in atomic mode and 2,000 in lease mode, 2 runqueues x 2 worker processes, a worker
# SIGKILLed every ~3 s (every 5th kill a whole runqueue) and one crash of the server, first on a
# private MariaDB, then on a private PostgreSQL cluster (initdb/pg_ctl in the run's own temporary
# folder; never the shared servers). Checks every step's effect once (atomic; lease: again only
# after a kill), no step run after its checkpoint committed, every workflow finished. Prints each
# run's table; its results JSON goes to CHAOS_RESULTS. ~7 min a server on a busy machine. Not in
# `make test`: its quick variant (60 rows a mode, MariaDB) is tests/chaos/test_chaos_workflows_quick.py.
CHAOS_WORKFLOWS_ARGS ?=
chaos-workflows: venv
	$(PY) -m tests.chaos.workflows $(CHAOS_WORKFLOWS_ARGS) \
	  --json $(CHAOS_RESULTS)/workflows-mariadb-$$(date -u +%Y%m%dT%H%M%SZ)-$$$$.json
	$(PY) -m tests.chaos.workflows --postgresql $(CHAOS_WORKFLOWS_ARGS) \
	  --json $(CHAOS_RESULTS)/workflows-postgresql-$$(date -u +%Y%m%dT%H%M%SZ)-$$$$.json

# The fault table of issue #21 (RELIABILITY.md): one fault per scenario, each on a fresh database
# of the shared servers (dbq_faults_*, dropped after), real runqueue processes. Not in `make test`.
# FAULTS_ARGS=--only a,f-postgresql picks scenarios; the results JSON goes to CHAOS_RESULTS.
FAULTS_ARGS ?= --postgresql-too
faults: venv services
	$(PY) -m tests.chaos.faults $(FAULTS_ARGS) --json $(CHAOS_RESULTS)/faults-$$(date -u +%Y%m%dT%H%M%SZ)-$$$$.json

# The soak (issue #25, RELIABILITY.md "Soak: 30 minutes"): the capacity of 4 workers measured, then
# SOAK_MINUTES of steady enqueueing at 70% of it from a publisher process, a worker SIGKILL every
# minute and purgequeue every 2 minutes, on a fresh soak_<pid> database of the shared MariaDB
# (dropped after). Prints RSS slopes per worker, claim latency per 5 minutes and the accounting of
# every item; the results JSON goes to SOAK_RESULTS (git-ignored). Not in `make test`: its own
# quick test (a 1-minute soak, ~2 minutes in all) is `make soak-quick`.
SOAK_MINUTES ?= 30
SOAK_RESULTS ?= tests/soak/results
soak: venv services
	$(PY) -m tests.soak --minutes $(SOAK_MINUTES) --json $(SOAK_RESULTS)/soak-$$(date -u +%Y%m%dT%H%M%SZ)-$$$$.json

soak-quick: venv services
	DBQUEUE_SOAK=1 DATABASE_URL=$(MARIADB_URL) $(PYTEST) tests/soak/test_soak_quick.py

# Many hosts over a real network (issue #25, RELIABILITY.md): a private MariaDB and three runqueue
# hosts in network namespaces of their own (root only: ip netns, a bridge, veth pairs, TAP devices);
# one host partitioned mid-job in lease and atomic mode, then a slow link. The namespaces are
# always removed. The quick variant is tests/chaos/test_netns_quick.py (in the MariaDB pass).
netns: venv
	$(PY) -m tests.chaos.netns --full --json $(CHAOS_RESULTS)/netns-$$(date -u +%Y%m%dT%H%M%SZ)-$$$$.json

# The protocol model (protocol/queue.pml, docs/explanation/protocol-model.md) at the deeper bounds
# of protocol/check.py's DEEP list, and the three mutations; `make test` checks the small bounds
# (tests/unit/test_protocol_model.py). system-deps installs Spin (apt) when it is missing.
model-check: system-deps venv
	$(PY) -m protocol.check --deep

# The Hypothesis state machine of the real code (tests/contract/test_protocol_hypothesis.py) with
# a longer budget than `make test`'s, on MariaDB and PostgreSQL.
PROTOCOL_EXAMPLES ?= 400
protocol-hypothesis: venv services
	DBQUEUE_PROTOCOL_EXAMPLES=$(PROTOCOL_EXAMPLES) DATABASE_URL=$(MARIADB_URL)_protocol $(PYTEST) tests/contract/test_protocol_hypothesis.py
	DBQUEUE_PROTOCOL_EXAMPLES=$(PROTOCOL_EXAMPLES) DATABASE_URL=$(POSTGRES_URL)_protocol $(PYTEST) tests/contract/test_protocol_hypothesis.py

# -- benchmarks -----------------------------------------------------------------------------
# The peers get their own virtualenv (they are not dependencies of django_dbqueue).

BENCH_VENV ?= bench/.venv-peers

$(BENCH_VENV)/.installed: bench/requirements.txt
	@bash scripts/make-venv.sh $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q -r bench/requirements.txt
	@touch $@

# The full run (~40 min): every system and mode in 3 interleaved rounds, rewrites BENCHMARKS.md;
# then the flow-control claims and the fair and aging claims (issue #37; over 10,000 and
# 100,000 due rows) on both servers, whose ratios the report's floor lines take (--report-only
# rewrites it with them), start-up and request-reply.
bench: venv services $(BENCH_VENV)/.installed
	BENCH_OURS_PYTHON=$(CURDIR)/$(PY) $(BENCH_VENV)/bin/python bench/run.py
	DATABASE_URL=mysql://root@127.0.0.1:3306/bench_flow $(PY) bench/flow_claim.py --json bench/out/flow-mysql.json
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_flow $(PY) bench/flow_claim.py \
	  --json bench/out/flow-postgresql.json
	for ready in 10000 100000; do \
	  DATABASE_URL=mysql://root@127.0.0.1:3306/bench_fair $(PY) bench/fair_claim.py --ready $$ready \
	    --claims 40 --json bench/out/fair-mysql-$$ready.json || exit 1; \
	  DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_fair $(PY) bench/fair_claim.py --ready $$ready \
	    --claims 40 --json bench/out/fair-postgresql-$$ready.json || exit 1; done
	BENCH_OURS_PYTHON=$(CURDIR)/$(PY) $(BENCH_VENV)/bin/python bench/run.py --report-only
	$(PY) bench/startup.py
	$(MAKE) bench-request-reply

# django_dbqueue's lease, atomic and grouped modes against the raw-SQL loops only (no peers, so
# no peers' virtualenv), MariaDB, 1 and 4 workers, fewer rows, 3 interleaved rounds (~10 min):
# the same columns and floor lines in bench/out/BENCHMARKS-quick.md; BENCHMARKS.md is left alone.
bench-quick: venv services
	$(PY) bench/run.py --quick

# Raw SQL only (no peers, no django_dbqueue): what atomic mode's contract costs (issue #3).
bench-atomic-ceiling: venv services
	$(PY) bench/atomic_ceiling.py

# runqueue's start-up (launch to the first "consuming" line, median of 5 on an empty SQLite
# queue) against the 0.67 s floor, and the package's import time (issue #31; also run by `make bench`).
bench-startup: venv
	$(PY) bench/startup.py

# The claim with per-key limits beside the plain claim (issue #22; also run by `make bench`).
bench-flow: venv services
	$(PY) bench/flow_claim.py

# Fair share and aging (issue #37): the claim's cost at 100,000 due rows beside the plain claim,
# the EXPLAIN of the fair ranking, and the full-size fairness run (100,000 rows of one tenant, 20
# quiet tenants, 4 runqueue workers) and the aging run (a 30 s bound under a saturating stream of
# priority-10 rows: the histogram of 100 priority-0 rows' waits), on MariaDB and PostgreSQL.
# Not in `make test`.
bench-fairness: venv services
	for url in mysql://root@127.0.0.1:3306/bench_fair postgres://postgres@127.0.0.1:5432/bench_fair; do \
		DATABASE_URL=$$url $(PY) bench/fair_claim.py || exit 1; \
		DATABASE_URL=$$url $(PY) bench/fair_claim.py --processes || exit 1; \
		DATABASE_URL=$$url $(PY) bench/fair_claim.py --aging 30 || exit 1; done

# Durable workflows waking up (issue #36; bench/workflow_wake.py): 10,000 rows sleeping 30 s and
# 10,000 waiting for events sent from another process, under runqueue's default poll: lateness
# p50/p95/max after the due time or the event, runs per row (each must wake once), and an idle
# worker's statements per second with 20,000 parked rows against an empty queue, on MariaDB and
# PostgreSQL (a throw-away test_bench_wf database on each). WAKE_ARGS="--rows 500 --sleep 5" for
# a quick run. Exit status 1 if a bar of the issue is missed. Not in `make test`.
WAKE_ARGS ?=
bench-workflows: venv services
	DATABASE_URL=mysql://root@127.0.0.1:3306/bench_wf $(PY) bench/workflow_wake.py $(WAKE_ARGS)
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_wf $(PY) bench/workflow_wake.py $(WAKE_ARGS)

# Request-reply round trips, 1,000 calls from 8 client processes (issue #23; also run by `make bench`).
bench-request-reply: venv services
	DATABASE_URL=mysql://root@127.0.0.1:3306/bench_rr $(PY) bench/request_reply.py
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_rr $(PY) bench/request_reply.py

# The queue at 10,000,000 rows (issue #25; bench/scale/): claim and enqueue beside an empty table,
# the admin's pages and bulk actions, the rescue of 10,000 expired leases, and a purge of 1,000,000
# messages under 4 runqueue workers, on each server of SCALE_URLS in turn. Each builds databases
# scale_big and scale_empty there (~10 GB on disk for both servers) and drops them at the end
# (SCALE_ARGS=--keep keeps them for the next run; --rows 1000000 for a quick one). Rewrites each
# server's block of BENCHMARKS.md's "Scale: 10 million rows". Not in `make test`.
SCALE_URLS ?= mysql://root@127.0.0.1:3306/scale_big postgres://postgres@127.0.0.1:5432/scale_big
SCALE_ARGS ?=
bench-scale: venv services
	for url in $(SCALE_URLS); do DATABASE_URL=$$url $(PY) -m bench.scale $(SCALE_ARGS) || exit 1; done

# -- example --------------------------------------------------------------------------------

# The example needs only a Python >= 3.10 (the machine's own python3 will do) and SQLite: a small virtualenv of its own with the
# package (editable, from this tree), Django, rangefilter and dj-database-url. No database servers,
# no apt, no root. Each run starts from a fresh SQLite file; with EXAMPLE_DB it adds to that database.
EXAMPLE_VENV ?= .venv-example
EXAMPLE_SQLITE := example_project/shop.sqlite3

$(EXAMPLE_VENV)/.installed: pyproject.toml
	@bash scripts/make-venv.sh $(EXAMPLE_VENV)
	$(EXAMPLE_VENV)/bin/pip install -q -e . dj-database-url
	@touch $@

example: $(EXAMPLE_VENV)/.installed
	@if [ -z "$(EXAMPLE_DB)" ]; then rm -f $(EXAMPLE_SQLITE); echo "a fresh example database: $(EXAMPLE_SQLITE)"; \
	 else echo "adding to the orders already in $(EXAMPLE_DB)"; fi
	cd example_project && DATABASE_URL=$(EXAMPLE_DB) ../$(EXAMPLE_VENV)/bin/python manage.py migrate -v0 && \
	DATABASE_URL=$(EXAMPLE_DB) ../$(EXAMPLE_VENV)/bin/python manage.py shopdemo --orders 3000

clean:
	rm -rf $(VENV) .venv-django* .venv-py3* $(DOCS_VENV) $(EXAMPLE_VENV) dist build docs/_build .pytest_cache .ruff_cache tests/*.sqlite3 example_project/*.sqlite3 test-times.log

# -- Spark pipeline benchmarks --------------------------------------------------------------
# bench-spark (bench/spark_cluster_bench.py): the same spark-submit job on a standalone cluster (a
# master and two 1-core workers started from the PySpark distribution, tests/spark_cluster.py)
# and on local[*]: enqueue_dataframe of SPARK_BENCH_ROWS rows, its idempotent re-run, and
# queue_report over SPARK_BENCH_HISTORY_ROWS history rows. The database is dropped afterwards.
# Run it alone on the machine (nothing else busy), as every benchmark.
# bench-spark-paths (bench/spark_bench.py): 1M rows three ways (Spark, ORM bulk_create,
# executemany), fresh and re-run, and the report, on local[2].
SPARK_BENCH_URL ?= mysql://root@127.0.0.1:3306/spark_bench
SPARK_BENCH_ROWS ?= 10000000
SPARK_BENCH_HISTORY_ROWS ?= 1000000
SPARK_PATHS_ROWS ?= 1000000
.PHONY: bench-spark bench-spark-paths test-spark-cluster
bench-spark: venv services
	DATABASE_URL=$(SPARK_BENCH_URL) $(PY) bench/spark_cluster_bench.py --rows $(SPARK_BENCH_ROWS) \
	  --history-rows $(SPARK_BENCH_HISTORY_ROWS)

bench-spark-paths: venv services
	DATABASE_URL=$(SPARK_BENCH_URL) $(PY) bench/spark_bench.py --rows $(SPARK_PATHS_ROWS)

# The pipeline on a standalone cluster (tests/surfaces/spark/test_spark_cluster.py, ~4 minutes: five
# JVMs on two cores). make test-spark runs the pipeline in local mode and the refusal without the
# jar, not the cluster (marker spark_cluster), so that make test stays under 20 minutes.
test-spark-cluster: venv services
	DATABASE_URL=$(MARIADB_URL) $(PYTEST) -m spark_cluster tests/surfaces/spark/test_spark_cluster.py

# -- The attempt history at 10 million rows (issue #25): purge by partition drop against batched
# DELETE, and a live table's conversion (bench/history_partitions.py).
# The section of BENCHMARKS.md between its markers is rewritten.
HISTORY_BENCH_ROWS ?= 10000000
HISTORY_BENCH_ARGS ?=
.PHONY: bench-history
bench-history: venv services
	DATABASE_URL=mysql://root@127.0.0.1:3306/hist_bench $(PY) bench/history_partitions.py --rows $(HISTORY_BENCH_ROWS) $(HISTORY_BENCH_ARGS)
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/hist_bench $(PY) bench/history_partitions.py --rows $(HISTORY_BENCH_ROWS) $(HISTORY_BENCH_ARGS)
