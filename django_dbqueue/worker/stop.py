"""Whether a worker is to stop, shared by what it runs: its loop, its executor, its signal
handlers, its wait through a database outage and its supervisor's pipe.

Two different things stop it. It is *asked* to (``stop()``: a stop signal, its supervisor,
its caller): the running job finishes and the rows it has not started are given back. Or a
handler *forces* it (``fatal``: an error that asks the process to exit, a connection a handler
left beyond use): it stops claiming, and its caller learns why.
"""

from __future__ import annotations

import threading


class StopFlag:
    def __init__(self, wake: threading.Event | None = None) -> None:
        self._event = threading.Event()
        #: Also set by ``stop()``, so a worker sleeping between polls wakes at once.
        self._wake = wake
        #: What a handler raised that ends this worker (see the module's docstring).
        self.fatal: BaseException | None = None

    def stop(self) -> None:
        self._event.set()
        if self._wake is not None:
            self._wake.set()

    @property
    def stopping(self) -> bool:
        """Asked to stop (not ``fatal``: a handler's end of the worker is told apart)."""
        return self._event.is_set()

    def must_stop(self) -> bool:
        """Asked to stop, or forced to: no further job is started."""
        return self._event.is_set() or self.fatal is not None

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds``, or less if asked to stop meanwhile; True if asked."""
        return self._event.wait(seconds)
