"""Process wiring: the validated settings (`settings`), JSON logging (`logging`), the garbage collector of a
long-running process (`memory`) and the composition root that runs the background workers and the retention
cleanups, a delivery worker alone and the webhook receiver (`workers`)."""

from settlekit.runtime.settings import Settings
from settlekit.runtime.workers import (
    CleanupResult,
    CleanupScheduler,
    Workers,
    delivery_run_config,
    load_server_signer,
    register_queue_gauges,
    run_receiver,
    standalone_delivery_worker,
    unregister_queue_gauges,
    uvicorn_options,
    worker_config,
)
from settlekit.store.maintenance import CLEANUP_LOCK_KEY

__all__ = [
    "CLEANUP_LOCK_KEY",
    "CleanupResult",
    "CleanupScheduler",
    "Settings",
    "Workers",
    "delivery_run_config",
    "load_server_signer",
    "register_queue_gauges",
    "run_receiver",
    "standalone_delivery_worker",
    "unregister_queue_gauges",
    "uvicorn_options",
    "worker_config",
]
