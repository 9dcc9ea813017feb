from __future__ import annotations

from django.apps import AppConfig


class PeerAppConfig(AppConfig):
    name = "bench.peerapp"
    label = "peerapp"
    verbose_name = "peer queues benchmark"

    def ready(self) -> None:
        from bench import querycount, stmtcount

        querycount.install()
        stmtcount.install()
