"""The app's own tables: the engine's bookkeeping (attempt history, cancel requests, pauses,
key slots, batches and dependencies, schedules and their firings, worker processes, reply
slots, durable workflows' checkpoints, events and progress).

The ground floor of the package (DESIGN.md "Layout"): these modules import Django and the
foundation (``conf``, ``states``, ``backends``...) and nothing of the engine, so the engine
imports them directly. ``django_dbqueue.models`` re-exports them: that is where Django finds
them and where the documented imports point.
"""
