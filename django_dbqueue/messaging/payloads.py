"""What a message payload may hold: JSON that every supported database stores as it was given,
and that every worker can decode again.

Checked before the INSERT, so a bad payload is the publisher's ``ValueError`` or ``TypeError``
(documented, and the caller's transaction stays usable) rather than a database error:

* only JSON types, with string keys (``{1: "x"}`` would come back as ``{"1": "x"}``);
* no NaN or infinity (not JSON: MariaDB's JSON check constraint refuses them);
* no NUL character and no surrogate code point (``"\\ud800"``: half of a UTF-16 pair, not a
  character) in any string, dict keys included: PostgreSQL's ``jsonb`` refuses both, and
  neither is text another language or database reads back as it was given;
* nested at most ``MAX_DEPTH`` deep (MariaDB's JSON check refuses deeper values, and a worker's
  decoder would hit Python's recursion limit on far deeper ones);
* at most ``DBQUEUE_MAX_PAYLOAD_BYTES`` of JSON text.
"""

from __future__ import annotations

import json
from typing import Any

from ..conf import settings

#: The deepest nesting of lists and objects a payload may have: MariaDB's ``JSON_VALID`` (the
#: check constraint on its JSON columns) refuses 32 levels and more.
MAX_DEPTH = 31


def check_payload(payload: Any, kind: str) -> int:
    """Raise ``TypeError``/``ValueError`` naming what is wrong; return the JSON's size in bytes."""
    _check_shape(payload, kind)
    try:
        text = json.dumps(payload, allow_nan=False)
    except ValueError as exc:
        raise ValueError(
            f"the payload of a {kind!r} message holds NaN or infinity, which JSON has not"
        ) from exc
    size = len(text.encode())
    if size > settings.MAX_PAYLOAD_BYTES:
        raise ValueError(
            f"the payload of a {kind!r} message is {size} bytes; the limit is "
            f"{settings.MAX_PAYLOAD_BYTES} (DBQUEUE_MAX_PAYLOAD_BYTES): store big data "
            "elsewhere and publish a reference to it"
        )
    return size


def check_text(value: str, what: str) -> str:
    """``value`` if every database stores it as given; else a ``ValueError`` naming ``what``.

    A NUL character (PostgreSQL's text and ``jsonb`` refuse it) or a surrogate code point (a
    lone half of a UTF-16 pair, which no UTF-8 column holds) would otherwise reach the INSERT
    and fail there as a ``DataError``, or on another database be stored differently."""
    if "\x00" in value:
        raise ValueError(f"{what} holds a NUL character (\\x00), which databases refuse: {value!r:.80}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{what} holds the surrogate code point {value[exc.start]!r} (half of a UTF-16 "
                f"pair, not a character), which databases refuse: {value!r:.80}"
            ) from None
    return value


def check_texts(value: Any, what: str) -> None:
    """:func:`check_text` on every string and dict key of the JSON value ``value`` (the
    arguments of a ``django.tasks`` task, which Django itself has already made JSON)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not _clean(item):
                check_text(item, f"a string in {what}")
        elif isinstance(item, dict):
            for key, inner in item.items():
                if isinstance(key, str) and not _clean(key):
                    check_text(key, f"a key in {what}")
                stack.append(inner)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _clean(value: str) -> bool:
    # check_text's test without building its message: a payload may hold many strings.
    if "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_shape(payload: Any, kind: str) -> None:
    # Iterative, so that a payload nested too deeply is reported, not a RecursionError.
    stack: list[tuple[Any, int]] = [(payload, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            if depth >= MAX_DEPTH:
                raise ValueError(f"the payload of a {kind!r} message is nested deeper than {MAX_DEPTH}")
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError(
                        f"the payload of a {kind!r} message has the key {key!r}: JSON keys are strings"
                    )
                if not _clean(key):
                    check_text(key, f"a key in the payload of a {kind!r} message")
                stack.append((item, depth + 1))
        elif isinstance(value, (list, tuple)):
            if depth >= MAX_DEPTH:
                raise ValueError(f"the payload of a {kind!r} message is nested deeper than {MAX_DEPTH}")
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str):
            if not _clean(value):
                check_text(value, f"a string in the payload of a {kind!r} message")
        elif value is not None and not isinstance(value, (int, float, bool)):
            raise TypeError(
                f"the payload of a {kind!r} message is not JSON-serialisable: "
                f"{type(value).__name__} {value!r:.60}"
            )
