"""``python -m tests.chaos [--long]``: run the chaos suite and print its results table."""

from __future__ import annotations

import sys

from tests.chaos.harness import main

sys.exit(main())
