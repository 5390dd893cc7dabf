"""Every configuration value settlekit reads, in one validated object.

Each field has an environment variable `SETTLEKIT_<NAME>` and a command-line flag `--<name>` of the same name
(lower case, hyphens); `db_url` is `SETTLEKIT_DB` / `--db`. The commands build `Settings(**flags)`: a flag that
was given wins over the environment, and a flag left at None means "not given". A bad value raises one
ConfigurationError (code SETTINGS_INVALID) naming the variable, the flag and the problem.

`settlekit settings --markdown` prints the README table of every setting (`settings_table`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pydantic
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from settlekit.errors import ConfigurationError
from settlekit.store.db import url_traits
from settlekit.store.events import MAX_QUEUED_APPENDS

if TYPE_CHECKING:
    from settlekit.delivery.circuit import CircuitPolicy
    from settlekit.delivery.replays import ReplayPolicy

ENV_PREFIX = "SETTLEKIT_"
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


def _instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Settings(BaseSettings):
    """Process configuration of `serve`, `worker`, the delivery commands and the demo."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid",
                                      populate_by_name=True)

    db_url: str = Field("sqlite:///settlekit.db", validation_alias="SETTLEKIT_DB",
                        description="database URL, `postgresql://…` or `sqlite:///path.db`")
    db_direct: str | None = Field(
        None, description="PostgreSQL URL that bypasses the connection pooler, used only for the dispatcher's "
        "LISTEN wake-ups; set it when `SETTLEKIT_DB` points at PgBouncer in transaction mode (default: "
        "`SETTLEKIT_DB`)")
    db_prepared_statements: bool = Field(
        True, description="server-side prepared statements on PostgreSQL; turn off behind PgBouncer in "
        "transaction mode unless it is 1.22 or later with `max_prepared_statements` set")
    db_unavailable_hold: float = Field(
        1.0, ge=0, description="seconds after a failed PostgreSQL connection attempt during which what needs the "
        "database fails at once (the API answers 503 `DATABASE_UNAVAILABLE` with Retry-After) before one request "
        "tries again; 0: every request waits for its own attempt")
    db_statement_timeout: float = Field(
        2.0, ge=0, description="seconds `serve` and `worker` wait for the answer to each PostgreSQL round trip "
        "(a statement, a COMMIT) before the connection is dropped and the operation fails as "
        "`DATABASE_UNAVAILABLE` (503), whatever sits between them and the server (PgBouncer holds queries while "
        "it has no server connection); migrations and the one-off commands have no limit; 0: no limit")
    db_pool_timeout: float = Field(
        1.5, gt=0, description="seconds an operation waits for a free PostgreSQL connection of the process's pool "
        "before it fails as `DATABASE_UNAVAILABLE` (503)")
    host: str = Field("127.0.0.1", description="API listen address (`serve`)")
    port: int = Field(8080, ge=0, le=65535, description="API listen port (`serve`; 0: any free port)")
    server_key_file: str | None = Field(
        None, description="server Ed25519 key (PKCS#8 PEM, created 0600 if missing); share it between processes "
        "(default: an ephemeral key)")
    instance_id: str = Field(default_factory=_instance_id,
                             description="worker instance id (per-instance consumers); default host-pid-random")
    allow_loopback_webhooks: bool = Field(
        False, description="allow webhook URLs on loopback, and plain `http://` with them (development and tests)")
    allow_private_webhooks: bool = Field(
        False, description="destinations that opt in (`allowPrivateNetwork`) may use private ranges (10/8, "
        "172.16/12, 192.168/16, fc00::/7, 100.64/10, …; not loopback, not link-local)")
    allowed_webhook_networks: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="CIDRs (comma separated; the flag is repeatable) that destinations which opt in may reach")
    allow_insecure_http: bool = Field(False, description="allow `http://` webhook URLs")
    delivery_concurrency: int = Field(
        64, ge=1, description="webhook requests in flight per worker process (claimed fairly between tenants and "
        "destinations as slots free up)")
    delivery_destination_concurrency: int = Field(
        4, ge=1, description="of those, requests in flight to one destination (a slow endpoint holds at most this "
        "many slots)")
    delivery_tenant_concurrency: int = Field(
        16, ge=1, description="of those, requests in flight to all destinations of one tenant")
    delivery_circuit_threshold: int = Field(
        5, ge=0, description="attempts in a row without an answer (timeouts, network errors) after which a "
        "destination's circuit opens: its deliveries wait, then one probe at a time tries; 0: never")
    delivery_circuit_probe: float = Field(
        30.0, gt=0, description="seconds the circuit stays open the first time; doubled at each reopening")
    delivery_circuit_probe_max: float = Field(
        1800.0, gt=0, description="longest time (s) a circuit stays open before the next probe")
    replay_rate: float = Field(
        20.0, gt=0, description="deliveries a replay sends again per second (as many at once when it is created)")
    replay_max_deliveries: int = Field(
        10_000, ge=1, description="delivered or failed deliveries one replay's window may hold")
    replay_max_window_hours: float = Field(720.0, gt=0, description="longest replay window (hours)")
    replay_max_running_per_tenant: int = Field(
        2, ge=1, description="replays of one tenant running at once (one per destination in any case)")
    test_send_concurrency: int = Field(
        2, ge=1, description="test sends (`POST /v1/destinations/{id}/test`) of one tenant in flight per API "
        "process; one more is answered 429 `TEST_SEND_BUSY`")
    test_send_timeout: float = Field(10.0, gt=0, le=60, description="whole-request deadline of a test send (s)")
    console: bool = Field(
        True, description="`serve` serves the operator console at `/console` (sign-in with an API key)")
    console_session_seconds: int = Field(
        8 * 3600, ge=60, le=7 * 24 * 3600, description="how long a console sign-in lasts (its session and signed "
        "cookie expire then; signing out or revoking the API key ends it at once, in every process)")
    dispatch_batch_size: int = Field(200, ge=1, description="events per dispatcher turn")
    max_body_bytes: int = Field(1_048_576, ge=1, description="API request body limit (bytes)")
    import_max_bytes: int = Field(
        256 * 1024 * 1024, ge=1, description="largest stream file `settlekit import` reads (bytes); a larger one, "
        "or a device or pipe that goes on past it, is refused (`FILE_TOO_LARGE`, exit 2)")
    max_destinations_per_tenant: int = Field(
        100, ge=1, description="webhook destinations a tenant may create through the API; one more is 409 "
        "`DESTINATION_LIMIT_REACHED` (the CLI's operator is not bound)")
    max_header_bytes: int = Field(
        32_768, ge=1024, description="API request line and headers together, at most (bytes); a longer request "
        "head is answered 431 `REQUEST_HEAD_TOO_LARGE` and its connection closed")
    max_queued_appends: int = Field(
        MAX_QUEUED_APPENDS, ge=1, description="appends an API process holds at most while they wait for the "
        "database (its authentication queue and its group commit's, each); one more is answered 503 `OVERLOADED` "
        "at once")
    group_commit_window_ms: float = Field(
        2.0, ge=0, le=100, description="milliseconds an API process's group commit waits for more appends to "
        "join a transaction while appends come concurrently (an append that comes alone is written at once); 0: "
        "no wait")
    append_cached_streams: int = Field(
        2048, ge=0, description="job streams an API process keeps the head and state of, as of its own last append "
        "to each (least recently used dropped first), so that the next append to one reads nothing before its "
        "commit; 0 turns this off")
    max_routed_requests: int = Field(
        256, ge=1, description="requests an API process has in progress at most, from arrival until the answer "
        "starts, their upload excepted (all but the event append route and the event streams); one more is answered "
        "503 `OVERLOADED` at once")
    rate_limit_per_second: float = Field(50.0, gt=0, description="token bucket per API key: rate")
    rate_limit_burst: int = Field(100, ge=1, description="token bucket per API key: burst")
    auth_failure_rate_per_second: float = Field(
        1.0, gt=0, description="failed authentications allowed per client address and second")
    auth_failure_burst: int = Field(20, ge=1, description="burst of failed authentications per client address")
    operator_tenant: str = Field("system", min_length=1,
                                 description="tenant whose admin keys may use the cross-tenant ops routes")
    settld_compat_at_root: bool = Field(
        False, description="serve settld's job routes for its own clients (`/compat/settld/jobs…`) at the origin's "
        "`/jobs…` as well: settld's API SDK drops a base URL's path")
    proxy_headers: bool = Field(
        True, description="`serve` behind a reverse proxy: take the client address from `X-Forwarded-For` when "
        "the connection comes from a trusted proxy (uvicorn's `--proxy-headers`)")
    forwarded_allow_ips: str | None = Field(
        None, description="addresses/CIDRs of the proxies trusted for `X-Forwarded-*` ('*' trusts all; default "
        "uvicorn's: `FORWARDED_ALLOW_IPS` or 127.0.0.1)")
    delivery_lease: float = Field(
        10.0, gt=0, description="delivery lease (s), renewed while a send is in flight; a crashed worker's rows "
        "are claimable again within one lease")
    delivery_lease_renew: float | None = Field(
        None, gt=0, description="lease renewal interval (s); default 30 % of the lease")
    delivery_timeout: float = Field(
        15.0, gt=0, description="deadline of one delivery attempt (s), from connecting to the last response byte "
        "read (at most 64 KiB of the body is read)")
    delivery_max_attempts: int = Field(15, ge=1, description="delivery attempts before the DLQ")
    delivery_backoff_base: float = Field(2.0, gt=0, description="first retry delay (s)")
    delivery_backoff_cap: float = Field(3600.0, gt=0, description="longest retry delay (s)")
    delivery_max_claims: int = Field(
        5, ge=1, description="claims of one delivery without a recorded outcome (its worker died each time) "
        "before it goes to the DLQ as `crash_loop`")
    destination_disable_after_failures: int = Field(
        100, ge=0, description="failed delivery attempts in a row after which a destination is disabled "
        "automatically (reason `failing: …`, shown on the destination; enabling clears it); 0: never")
    destination_disable_after_hours: float = Field(
        120.0, ge=0, description="how long the run of failed attempts must have lasted (hours) before it disables "
        "the destination")
    dispatch_max_attempts: int = Field(10, ge=1,
                                       description="handler attempts on one event before its consumer is dead")
    rearm_cooldown: float = Field(300.0, ge=0, description="seconds before a dead consumer is re-armed")
    max_rearm_count: int = Field(3, ge=0, description="automatic re-arms before a dead consumer stays dead")
    metrics_host: str = Field("127.0.0.1", description="address where `worker` serves `/metrics`")
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="port where `worker` serves `/metrics` (0: any free port; default: "
        "not served)")
    metrics_per_destination: bool = Field(
        False, description="label delivery metrics with destination ids (tenant data)")
    cleanup_interval: float = Field(
        300.0, ge=0, description="seconds between the retention cleanups (expired deliveries and idempotency "
        "keys) that `worker` and `serve` with workers run, one process at a time; 0 turns them off")
    secrets_dir: Path = Field(
        Path("secrets"), description="directory of webhook secret files: where `deliveries destinations add "
        "--generate-secret` writes and `deliveries secrets migrate` may import legacy `file:` secrets from")
    feed_max_streams_per_tenant: int = Field(
        10, ge=1, description="open `GET /v1/events/stream` connections per tenant and API process; one more is "
        "refused with 429 and Retry-After")
    feed_poll_interval: float = Field(
        0.5, gt=0, le=60, description="longest wait between the event feed's checks for newly settled positions "
        "(one read per API process, shared by every open stream; appends wake it sooner)")
    feed_heartbeat_interval: float = Field(
        15.0, gt=0, le=3600, description="seconds of silence after which an event stream sends a comment line, so "
        "proxies keep the connection open")
    log_level: LogLevel = Field(
        "INFO", description="level of the JSON logs of `serve`, `worker`, `receive` and `deliveries run` "
        "(stderr, one object per line)")

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**{name: value for name, value in values.items() if value is not None})
        except pydantic.ValidationError as exc:
            raise _settings_error(exc) from None

    @field_validator("allowed_webhook_networks", mode="before")
    @classmethod
    def _split_networks(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if isinstance(value, (list, tuple)):
            return tuple(part.strip() for item in value for part in str(item).split(",") if part.strip())
        return value

    @field_validator("allowed_webhook_networks")
    @classmethod
    def _check_networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"{network!r} is not a CIDR") from None
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("server_key_file", "forwarded_allow_ips", "db_direct", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    def circuit_policy(self) -> CircuitPolicy:
        """When a destination's circuit opens and how long (`delivery.circuit`), from these settings."""
        from settlekit.delivery.circuit import CircuitPolicy

        return CircuitPolicy(self.delivery_circuit_threshold, timedelta(seconds=self.delivery_circuit_probe),
                             timedelta(seconds=max(self.delivery_circuit_probe, self.delivery_circuit_probe_max)))

    def replay_policy(self) -> ReplayPolicy:
        """How replays run (`delivery.replays`), from these settings."""
        from settlekit.delivery.replays import ReplayPolicy

        return ReplayPolicy(rate=self.replay_rate, max_deliveries=self.replay_max_deliveries,
                            max_window=timedelta(hours=self.replay_max_window_hours),
                            max_running_per_tenant=self.replay_max_running_per_tenant)

    def database_options(self, url: str | None = None, *, deadline: bool = True) -> dict[str, Any]:
        """Keyword arguments of `store.db.connect(url, ...)` (default: `db_url`): the pooler and outage options on
        PostgreSQL, none on SQLite. `db_direct` names the server of `db_url`: another URL does not get it. Without
        `deadline` (a one-off command that may rewrite much), round trips have no time limit."""
        url = self.db_url if url is None else url
        if not url_traits(url).server:
            return {}
        return {"direct_url": self.db_direct if url == self.db_url else None,
                "prepared_statements": self.db_prepared_statements, "unavailable_hold": self.db_unavailable_hold,
                "timeout": self.db_pool_timeout,
                "statement_timeout": self.db_statement_timeout if deadline else None}



def env_var(name: str) -> str:
    """The environment variable of a field."""
    return f"{ENV_PREFIX}DB" if name == "db_url" else ENV_PREFIX + name.upper()


def flag(name: str) -> str:
    """The command-line flag of a field (the variable's name without the prefix, in lower case)."""
    return "--" + env_var(name)[len(ENV_PREFIX):].lower().replace("_", "-")


def _field_of(location: tuple[int | str, ...]) -> str | None:
    for part in location:
        text = str(part)
        if text in Settings.model_fields:
            return text
        if text.upper() == f"{ENV_PREFIX}DB":
            return "db_url"
    return None


def _settings_error(exc: pydantic.ValidationError) -> ConfigurationError:
    """The first problem of a validation error as one line naming the variable and the flag."""
    error = exc.errors(include_url=False)[0]
    name = _field_of(tuple(error.get("loc", ())))
    problem = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden":
        return ConfigurationError(f"unknown setting {error['loc'][0]!r}", code="SETTINGS_INVALID")
    given = error.get("input")
    shown = f", not {given!r}" if isinstance(given, (str, int, float)) and not isinstance(given, bool) else ""
    if name is None:
        return ConfigurationError(f"invalid settings: {problem}{shown}", code="SETTINGS_INVALID")
    return ConfigurationError(f"{env_var(name)} ({flag(name)}): {problem[:1].lower()}{problem[1:]}{shown}",
                              code="SETTINGS_INVALID", variable=env_var(name), flag=flag(name))


def _default_text(name: str) -> str:
    info = Settings.model_fields[name]
    if info.default_factory is not None:
        return "host-pid-random"
    value = info.default
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"`{value}`" if isinstance(value, (str, Path)) else str(value)


def settings_table() -> str:
    """A Markdown table of every setting: variable, flag, default, meaning (the README's)."""
    lines = ["| environment variable | flag | default | meaning |", "|---|---|---|---|"]
    for name, info in Settings.model_fields.items():
        lines.append(f"| `{env_var(name)}` | `{flag(name)}` | {_default_text(name)} | {info.description} |")
    return "\n".join(lines) + "\n"
