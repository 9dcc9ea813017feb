"""A stored error's group computed by the database (the admin's dead-letter console): the
last non-blank line of ``queue_last_error``, cut, with :data:`~django_dbqueue.tracebacks.ERROR_MASKS`
applied, as :func:`django_dbqueue.tracebacks.error_group` computes it in Python.

MySQL 8 (ICU) and MariaDB 10.6+ (PCRE) have ``REGEXP_REPLACE`` replacing every match;
PostgreSQL's needs the ``'g'`` flag and spells a word boundary ``\\y``. SQLite has no regular
expressions: the admin groups its rows in Python. Every pattern goes as a parameter.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import F, Func, Value
from django.db.models.functions import Left

from ..tracebacks import ERROR_LINE_LENGTH, ERROR_MASKS

#: Trailing blanks, then everything up to the last line break ("s": "." matches a line break).
TRAILING_BLANKS = r"\s+\Z"
UP_TO_LAST_LINE = "(?s)^.*\n"


def _replace(expression: Any, pattern: str, replacement: str, every: tuple[Value, ...]) -> Func:
    return Func(
        expression,
        Value(pattern),
        Value(replacement),
        *every,
        function="REGEXP_REPLACE",
        output_field=models.TextField(),
    )


def masked_last_line(column: str, word_boundary: str = r"\b", every: tuple[Value, ...] = ()) -> Func:
    """The expression; ``word_boundary`` and ``every`` (the flag that replaces every match)
    are the dialect's."""
    line: Any = _replace(_replace(F(column), TRAILING_BLANKS, "", ()), UP_TO_LAST_LINE, "", ())
    line = Left(line, ERROR_LINE_LENGTH)
    for pattern, replacement in ERROR_MASKS:
        line = _replace(line, pattern.replace(r"\b", word_boundary), replacement, every)
    return line
