"""Observability as code: one source for Kubernetes and edge.

- :mod:`tritonops.observability.rules`: Prometheus recording rules and alerts (with runbooks);
- :mod:`tritonops.observability.dashboards`: Grafana dashboards (grafana-foundation-sdk);
- :mod:`tritonops.observability.keda_trigger`: the KEDA Prometheus trigger and the desired-replicas formula;
- :mod:`tritonops.observability.export`: writes rule files and dashboard JSON into a directory (edge).

Only Triton's own metric names are used (see :mod:`tritonops.observability.metrics`), plus Prometheus'
``up``, this project's recording rules, and the drift gauge written by the drift checks.
"""

from tritonops.observability.metrics import DRIFT_METRIC

__all__ = ["DRIFT_METRIC"]
