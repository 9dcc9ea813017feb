"""The text a failure keeps in ``queue_last_error``: its traceback, cut to
``DBQUEUE_MAX_ERROR_LENGTH``.

Not in :mod:`django_dbqueue.exceptions`: the cut reads a setting, and the exceptions are what
the settings' own modules (``retry``, through ``conf``'s retry policy setting) stand on.
"""

from __future__ import annotations

import re
import traceback

from .conf import settings


def describe_error(error: BaseException | str) -> str:
    """The text kept in ``queue_last_error``: the full traceback of an exception."""
    if isinstance(error, BaseException):
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    else:
        text = str(error)
    limit = settings.MAX_ERROR_LENGTH
    if len(text) > limit:
        # Keep the end: the innermost frames and the message explain a failure.
        text = "…[truncated]\n" + text[-limit:]
    return text


#: How a failure's message is masked to group failures alike (Spark's report, the admin's
#: dead-letter console): its variable parts become placeholders, in this order (an id before
#: its digits are taken for a number). Java, PCRE (MariaDB), ICU (MySQL) and Python read them
#: alike; PostgreSQL's dialect is made in ``backends`` (``\b`` is ``\y`` there).
ERROR_MASKS = (
    (r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", "<id>"),
    (r"\b0[xX][0-9a-fA-F]+\b", "<id>"),
    # Hashes and tokens: 12+ hex digits with at least one digit and one letter.
    (r"\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{12,}\b", "<id>"),
    (r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+", "<email>"),
    # Integers, decimals and amounts with thousands separators: 200014, 950.00, 1,234.56.
    (r"\d+(?:[.,]\d+)*", "<n>"),
)
#: Characters of the last line kept as the message (a traceback line can be a whole payload).
ERROR_LINE_LENGTH = 300
_COMPILED_MASKS = [(re.compile(pattern), replacement) for pattern, replacement in ERROR_MASKS]


def error_group(text: str) -> str:
    """A stored error's group: its last non-blank line (the exception and its message), cut
    to :data:`ERROR_LINE_LENGTH` characters, masked (the databases compute the same in SQL)."""
    line = text.strip().rsplit("\n", 1)[-1][:ERROR_LINE_LENGTH]
    for pattern, replacement in _COMPILED_MASKS:
        line = pattern.sub(replacement, line)
    return line
