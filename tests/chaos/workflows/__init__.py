"""Durable workflows under chaos (issue #36; ``make chaos-workflows``, RELIABILITY.md).

5-step workflows on 2,000 rows in atomic mode (``testapp.AtomicWorkflow``) and 2,000 in lease
mode (``testapp.LeaseWorkflow``), run by real ``runqueue`` supervisors (4 worker processes in
all) on a private database server the run owns (MariaDB, or PostgreSQL with
``--postgresql``), while worker processes are SIGKILLed every few seconds, a whole
``runqueue`` now and then, and the server is crashed and started again once. Every step's
body writes a ``StepLedger`` row, which says whether the step's checkpoint had committed
already when the body started. At the end:

* atomic mode: every step's database effect committed exactly once (one ledger row per row
  and step, none missing, none doubled);
* lease mode: every step ran, and a step ran again only when the run that ran it first was
  cut short (its worker killed, or its database session lost): at least once, as documented;
* no step ran after its checkpoint committed, in either mode;
* every workflow finished (SUCCEEDED, its five checkpoints holding the results handed on).

``verdict.py`` turns the tables into those counters (a plain function, tested in
``test_chaos_workflows_verdict.py``); ``run.py`` runs the processes and the faults.
"""
