"""What a message payload may hold: JSON that every supported database stores as it was given,
and that every worker can decode again.

Checked before the INSERT, so a bad payload is the publisher's ``ValueError`` or ``TypeError``
(documented, and the caller's transaction stays usable) rather than a database error:

* only JSON types, with string keys (``{1: "x"}`` would come back as ``{"1": "x"}``);
* no NaN or infinity (not JSON: MariaDB's JSON check constraint refuses them);
* no NUL character in a string (PostgreSQL's ``jsonb`` cannot store it);
* nested at most ``MAX_DEPTH`` deep (MariaDB's JSON check refuses deeper values, and a worker's
  decoder would hit Python's recursion limit on far deeper ones);
* at most ``DBQUEUE_MAX_PAYLOAD_BYTES`` of JSON text.
"""

from __future__ import annotations

import json
from typing import Any

from .conf import settings

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
    if "\\u0000" in text:
        raise ValueError(f"the payload of a {kind!r} message holds a NUL character, which databases refuse")
    size = len(text.encode())
    if size > settings.MAX_PAYLOAD_BYTES:
        raise ValueError(
            f"the payload of a {kind!r} message is {size} bytes; the limit is "
            f"{settings.MAX_PAYLOAD_BYTES} (DBQUEUE_MAX_PAYLOAD_BYTES): store big data "
            "elsewhere and publish a reference to it"
        )
    return size


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
                stack.append((item, depth + 1))
        elif isinstance(value, (list, tuple)):
            if depth >= MAX_DEPTH:
                raise ValueError(f"the payload of a {kind!r} message is nested deeper than {MAX_DEPTH}")
            stack.extend((item, depth + 1) for item in value)
        elif value is not None and not isinstance(value, (str, int, float, bool)):
            raise TypeError(
                f"the payload of a {kind!r} message is not JSON-serialisable: "
                f"{type(value).__name__} {value!r:.60}"
            )
