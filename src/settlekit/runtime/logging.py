"""JSON logging for the long-running processes (`serve`, `worker`, `receive`, `deliveries run`).

`configure_logging` routes every stdlib logger (each module's `logging.getLogger(__name__)`, uvicorn's and
psycopg's too) through structlog's `ProcessorFormatter`: one JSON object per line with `timestamp`, `level`,
`logger`, `event`, the `extra=` fields of the call, and whatever is bound in the context (`bind`), such as the
API's request id, tenant, key id and error code. Nothing is configured on import: library users and tests keep
stdlib logging as they set it up.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any

import orjson
import structlog

from settlekit.errors import ConfigurationError

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_HANDLER_NAME = "settlekit-json"
# libraries that log each retry of an outage themselves (psycopg's pool: every failed reconnection): one record
# of each message template per interval, the first at once (settlekit's own loops log the outage's state changes)
THROTTLED_LOGGERS = ("psycopg.pool",)
THROTTLE_SECONDS = 30.0


class Throttle(logging.Filter):
    """Lets a record through when no record with the same message template (`record.msg`) went through in the
    last `interval` seconds; the ones held back are counted in the next one let through (`suppressed`)."""

    def __init__(self, interval: float = THROTTLE_SECONDS, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.interval = interval
        self.clock = clock
        self._last: dict[str, tuple[float, int]] = {}  # template -> (when one went through, how many held back)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        template = str(record.msg)
        now = self.clock()
        with self._lock:
            last, held = self._last.get(template, (None, 0))
            if last is not None and now - last < self.interval:
                self._last[template] = (last, held + 1)
                return False
            self._last[template] = (now, 0)
            if len(self._last) > 1000:  # templates are few; bound it anyway
                self._last.clear()
        if held:
            record.suppressed = held
        return True


def parse_level(name: str) -> int:
    """The level number of DEBUG/INFO/WARNING/ERROR/CRITICAL (any case); ConfigurationError otherwise."""
    value = name.strip().upper()
    if value not in _LEVELS:
        raise ConfigurationError(f"SETTLEKIT_LOG_LEVEL must be one of {', '.join(_LEVELS)}, not {name!r}",
                                 code="SETTINGS_INVALID", variable="SETTLEKIT_LOG_LEVEL")
    return int(getattr(logging, value))


def _drop_color_message(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    """uvicorn passes an ANSI-coloured copy of its message as an extra field: not wanted in JSON."""
    event.pop("color_message", None)
    return event


def _pre_chain() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        _drop_color_message,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def _json_line(event: dict[str, Any], **_: Any) -> str:
    """One log record as JSON (orjson; a value it cannot encode is written as its str(); what it refuses outright,
    such as a lone surrogate, goes through the standard library)."""
    try:
        return orjson.dumps(event, default=str, option=orjson.OPT_NON_STR_KEYS).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(event, default=str)


def write_json_line(logger: logging.Logger, level: int, message: str, fields: dict[str, Any]) -> bool:
    """Write what `logger.log(level, message, extra=fields)` would write, without the stdlib record and the
    formatter's processors, when the JSON handler `configure_logging` installed is the only place the record goes
    (no other handler or filter on the way, the level enabled): the same line, key order included. Returns False
    (nothing written) otherwise: the caller logs the usual way. The caller checks `logger.isEnabledFor(level)`."""
    handler = _only_json_handler(logger, level)
    if handler is None:
        return False
    event: dict[str, Any] = {"event": message}
    for key, value in structlog.contextvars.get_contextvars().items():  # merge_contextvars
        event.setdefault(key, value)
    event["level"] = logging.getLevelName(level).lower()  # add_log_level
    event["logger"] = logger.name  # add_logger_name
    event.update(fields)  # ExtraAdder: the record's extra attributes
    event.pop("color_message", None)
    event["timestamp"] = datetime.now(tz=UTC).isoformat().replace("+00:00", "Z")  # TimeStamper(iso, utc)
    line = _json_line(event) + handler.terminator
    handler.acquire()
    try:
        handler.stream.write(line)
        handler.flush()
    finally:
        handler.release()
    return True


def _only_json_handler(logger: logging.Logger, level: int) -> logging.StreamHandler[Any] | None:
    """The JSON handler when a record of `logger` at `level` goes to it alone, unfiltered; else None."""
    if logger.disabled:
        return None
    node: logging.Logger | None = logger
    while node is not None and node.parent is not None:  # the loggers below the root
        if node.handlers or node.filters or not node.propagate:
            return None
        node = node.parent
    if node is None or node.filters or len(node.handlers) != 1:
        return None
    handler = node.handlers[0]
    if (type(handler) is not logging.StreamHandler or handler.get_name() != _HANDLER_NAME or handler.filters
            or level < handler.level or type(handler.formatter) is not structlog.stdlib.ProcessorFormatter):
        return None
    return handler


def json_formatter() -> logging.Formatter:
    """The formatter turning a stdlib record into one JSON line."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_pre_chain(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_json_line),
        ],
    )


def configure_logging(level: str | int = "INFO", *, stream: IO[str] | None = None) -> logging.Handler:
    """Send every log record at `level` or above to `stream` (default stderr) as JSON; idempotent (a second
    call replaces the handler of the first). Returns the handler (`reset_logging` removes it)."""
    number = parse_level(level) if isinstance(level, str) else level
    structlog.configure(
        processors=[*_pre_chain(), structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(json_formatter())
    root = logging.getLogger()
    reset_logging()
    root.addHandler(handler)
    root.setLevel(number)
    # httpx logs every request with its full URL at info: a webhook URL may carry credentials in its query, and
    # the delivery worker logs its attempts itself (without the URL)
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(number, logging.WARNING))
    for name in THROTTLED_LOGGERS:
        logging.getLogger(name).addFilter(Throttle())
    # uvicorn's loggers keep no handlers of their own: their records come out here as JSON too
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    return handler


def reset_logging() -> None:
    """Remove the JSON handler `configure_logging` installed (if any)."""
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.NOTSET)
    for name in THROTTLED_LOGGERS:
        for existing in list(logging.getLogger(name).filters):
            if isinstance(existing, Throttle):
                logging.getLogger(name).removeFilter(existing)
    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _HANDLER_NAME:
            root.removeHandler(existing)
            existing.close()


def bind(**fields: Any) -> None:
    """Add fields to every log line of the current context (request, task); None values are skipped."""
    structlog.contextvars.bind_contextvars(**{k: v for k, v in fields.items() if v is not None})


def current(name: str) -> Any:
    """A field bound in the current context (None when unbound)."""
    return structlog.contextvars.get_contextvars().get(name)


def clear() -> None:
    """Start a fresh logging context (each request does)."""
    structlog.contextvars.clear_contextvars()
