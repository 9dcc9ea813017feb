from __future__ import annotations

from django.urls import path

from django_dbqueue.observability.metrics import metrics_view

urlpatterns = [path("metrics/", metrics_view)]
