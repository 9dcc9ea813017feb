"""The engine: an outcome as a value, and ``record()``, the one writer of queue columns after
a claim (DESIGN.md "Layout")."""
