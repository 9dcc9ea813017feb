"""Stop signals that arrive while ``runqueue`` starts.

Django takes a while to start (settings, every app's models, the system checks) before the
command's code runs; a SIGTERM in that time (a deploy that changes its mind, systemd stopping
a unit that just started) would kill the process with the default action, -15, before any
handler is in place. So the first code of this package that Django imports for a ``runqueue``
process (the package's ``__init__``, imported at the start of ``django.setup()``) installs a
handler that only remembers the signal, and the command installs it again first thing (for a
``manage.py`` that imported the package some other way). The supervisor asks
``stop_requested()`` once its own handlers are in place: a signal remembered means "stop",
and it stops before starting any worker, with exit code 0. A second signal meanwhile exits
at once, as it does later.

Nothing happens in any other process (a web server, a shell, ``call_command()``): the
handler is only installed when ``runqueue`` is the command on the command line, only in the
main thread and only over the default handlers (or an inherited ignore).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

_received: list[int] = []
#: The process that installed the handler: a process forked from it (the metrics exporter,
#: a worker before it installs its own) gets the default action instead.
_installed_in: list[int] = []


def _remember(signum: int, frame: FrameType | None) -> None:
    if os.getpid() not in _installed_in:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _received:
        os._exit(128 + signum)
    _received.append(signum)


def hold_stop_signals(argv: list[str] | None = None) -> None:
    """Remember SIGTERM/SIGINT from now on if this process is ``… runqueue …``."""
    argv = sys.argv if argv is None else argv
    if argv[1:2] != ["runqueue"] or threading.current_thread() is not threading.main_thread():
        return
    _installed_in.append(os.getpid())
    for sig in (signal.SIGTERM, signal.SIGINT):
        # SIG_IGN too: a shell starts a background job (``runqueue &`` in a script) with
        # SIGINT ignored, and the supervisor's own handlers take SIGINT over later anyway; left
        # alone here, the same signal would be ignored while starting and obeyed after.
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler):
            signal.signal(sig, _remember)


def stop_requested() -> bool:
    """Whether a stop signal arrived while starting (asked once, by the supervisor)."""
    return bool(_received)
