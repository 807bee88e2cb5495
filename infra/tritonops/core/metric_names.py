"""The release agent's metric names (``tritonops_release_*``), one constant each.

The agent writes them (``agent/exporter.py`` holds their help text; ``agent/pull.py``,
``agent/reporting.py``), ``release/status.py`` reads them back from each agent, and the alert rules
(``observability/metrics.py`` re-exports them) select on them. Standard library only: the node
agent's zipapp ships this module.
"""

from __future__ import annotations

RELEASE_INFO = "tritonops_release_info"
CHANNEL_INFO = "tritonops_release_channel_info"
UP_TO_DATE = "tritonops_release_up_to_date"
LAST_SUCCESS = "tritonops_release_last_success_timestamp_seconds"
LAST_POLL = "tritonops_release_last_poll_timestamp_seconds"
POLLS = "tritonops_release_polls_total"
FAILURES = "tritonops_release_failures_total"
TEXTFILE_ERRORS = "tritonops_release_textfile_errors_total"
APPLY_SECONDS = "tritonops_release_apply_seconds"
DOWNLOADED_BYTES = "tritonops_release_downloaded_bytes_total"
STORE_REQUESTS = "tritonops_release_store_requests_total"
METADATA_EXPIRED = "tritonops_release_metadata_expired"
METADATA_REJECTED = "tritonops_release_metadata_rejected_total"
ROLLOUT_TARGETED = "tritonops_release_rollout_targeted"
CREDENTIALS_ERRORS = "tritonops_release_credentials_errors_total"
CREDENTIALS_EXPIRY = "tritonops_release_credentials_expiry_timestamp_seconds"
