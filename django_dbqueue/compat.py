"""What Python 3.11+ and 3.12+ added that the package uses, for Python 3.10 (Django 5.2 LTS).

One place, so that dropping 3.10 later is deleting this module and one import line per file.
"""

from __future__ import annotations

import sys
from datetime import timezone
from enum import Enum

#: ``datetime.UTC`` is new in Python 3.11; it is the same object as ``timezone.utc``.
UTC = timezone.utc

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, Enum):
        """``enum.StrEnum`` of Python 3.11: members are str, and ``str()`` gives the value."""

        def __str__(self) -> str:
            return str(self.value)

        @staticmethod
        def _generate_next_value_(name: str, start: int, count: int, last_values: list[str]) -> str:
            return name.lower()


__all__ = ["UTC", "StrEnum"]
