"""Webhook destinations and their deliveries: the use cases the entry points call.

operations.py: saving (create, replace, a PATCH's changes), reading, enabling (with the backfill of the time it
was disabled) and disabling a destination, its secrets (by value, by reference, rotations), the tenant's deliveries
(list, read with the attempt log, requeue, backfill); tools.py: a test send, the endpoint statistics, a replay's
window; replays.py: replays of a destination's deliveries (create, read, list, cancel). The delivery mechanics they
build on (sending, signing, retries, the circuit, the SSRF guard, the worker and its automatic disabling) are in
`delivery/`; what the entry points need of them is named here too: the replay policy, a new secret
(`generate_secret`), the import of legacy `file:` secret references (`migrate_file_refs`). The console's lists of
deliveries (of a job's artifacts, a destination's latest) are the store's.
"""

from __future__ import annotations

from settlekit.application.destinations import replays
from settlekit.application.destinations.operations import (
    BACKFILL_MARGIN,
    DEFAULT_ROTATION_GRACE,
    DELIVERY_STATES,
    DESTINATION_STATUSES,
    MAX_ARTIFACT_TYPE_LENGTH,
    MAX_ARTIFACT_TYPES,
    ORDERINGS,
    Backfill,
    DeliveryDetail,
    DestinationPolicy,
    add_destination,
    backfill_deliveries,
    check_destination,
    check_destination_id,
    check_secret_value,
    circuit_json,
    disable_destination,
    enable_destination,
    enable_destination_with_backfill,
    get_delivery,
    get_destination,
    list_deliveries,
    list_destinations,
    public_secret_ref,
    requeue_delivery,
    requeue_destination,
    save_destination,
    stored_secret_ref,
)
from settlekit.application.destinations.tools import (
    MAX_WINDOW,
    STATS_ATTEMPTS,
    STATS_DELIVERIES,
    TEST_TYPE,
    SentTest,
    check_window,
    config_for_test_send,
    destination_stats,
    percentile,
    sample_body,
    send_test,
    window,
)
from settlekit.delivery.legacy_secrets import migrate_file_refs
from settlekit.delivery.replays import ReplayPolicy
from settlekit.delivery.signing import generate_secret
from settlekit.store.deliveries import Destination, deliveries_of_artifacts, latest_deliveries

__all__ = [
    "BACKFILL_MARGIN", "DEFAULT_ROTATION_GRACE", "DELIVERY_STATES", "DESTINATION_STATUSES", "MAX_ARTIFACT_TYPES",
    "MAX_ARTIFACT_TYPE_LENGTH", "MAX_WINDOW", "ORDERINGS", "STATS_ATTEMPTS", "STATS_DELIVERIES", "TEST_TYPE",
    "Backfill", "DeliveryDetail", "Destination", "DestinationPolicy", "ReplayPolicy", "SentTest", "add_destination",
    "backfill_deliveries", "check_destination", "check_destination_id", "check_secret_value", "check_window",
    "circuit_json", "config_for_test_send", "deliveries_of_artifacts", "destination_stats", "disable_destination",
    "enable_destination", "enable_destination_with_backfill", "generate_secret", "get_delivery", "get_destination",
    "latest_deliveries", "list_deliveries", "list_destinations", "migrate_file_refs", "percentile",
    "public_secret_ref", "replays", "requeue_delivery", "requeue_destination", "sample_body", "save_destination",
    "send_test", "stored_secret_ref", "window",
]
