"""What every command shares: the `--db`, `--tenant` and `--json` options, the one-line error and its exit code,
opening the database, reading a JSON file."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from settlekit.application.database import Database, connect, url_traits
from settlekit.errors import ConfigurationError, DatabaseUnavailableError, SettlekitError, ValidationError
from settlekit.events.canonical import parse_json

console = Console(stderr=True, soft_wrap=True)  # one error, one line

DbOption = Annotated[str | None, typer.Option("--db", help="postgresql://… or sqlite:///path.db [env SETTLEKIT_DB, "
                                                           "default sqlite:///settlekit.db]", show_default=False)]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of text")]
TenantOption = Annotated[str, typer.Option("--tenant", "-t", help="tenant id")]

T = TypeVar("T")

USAGE_EXIT = 2  # bad configuration or usage: nothing was attempted
FAILURE_EXIT = 1  # the operation was refused or failed


def exit_code(exc: SettlekitError) -> int:
    """2 for a configuration error (bad setting, bad URL), 1 for everything else."""
    return USAGE_EXIT if isinstance(exc, ConfigurationError) else FAILURE_EXIT


class _ConnectionErrors(logging.Handler):
    """Keeps the last connection error the PostgreSQL pool logged, so the one-line DATABASE_UNAVAILABLE message
    can say why (refused, unknown database or role, unknown host) without the pool's own log lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.last = message.split(": ", 1)[-1].splitlines()[0].strip() if message else None


_connection_errors = _ConnectionErrors()


def watch_connection_errors() -> None:
    """Remember the PostgreSQL pool's connection errors for `error_line` (the `settlekit` entry point calls it)."""
    pool_log = logging.getLogger("psycopg.pool")
    if _connection_errors not in pool_log.handlers:
        pool_log.addHandler(_connection_errors)


def error_line(exc: SettlekitError, note: str = "") -> str:
    """`error CODE: message` (Rich markup, the message escaped); an unreachable database says why."""
    if exc.code == "DATABASE_UNAVAILABLE" and _connection_errors.last:
        note = f" ({_connection_errors.last}){note}"
    return f"[red]error[/red] {exc.code}: {escape(exc.message)}{escape(note)}"


def fail(exc: SettlekitError, code: int | None = None, note: str = "") -> NoReturn:
    """Print `error CODE: message` on stderr (one line) and exit with `code` (default: `exit_code(exc)`)."""
    console.print(error_line(exc, note), highlight=False)
    raise typer.Exit(code=exit_code(exc) if code is None else code)


def require_existing_sqlite(url: str) -> None:
    """Commands that only read refuse a SQLite path with no file (opening it would create an empty database)."""
    path = url_traits(url).file
    if path is not None and not path.is_file():
        raise DatabaseUnavailableError(f"no SQLite database at {path} (create one with `settlekit migrate`)",
                                       code="DATABASE_NOT_FOUND", path=str(path))


def database_url(db: str | None) -> str:
    """The `--db` given, else the `db_url` setting (SETTLEKIT_DB)."""
    from settlekit.runtime.settings import Settings

    return db if db is not None else Settings().db_url


def open_database(url: str | None, *, reading: bool = False) -> Database:
    """`connect` to `database_url(url)`; with `reading`, a missing SQLite file is refused instead of created."""
    url = database_url(url)
    if reading:
        require_existing_sqlite(url)
    if not url_traits(url).server:
        return connect(url)
    from settlekit.runtime.settings import Settings

    # SETTLEKIT_DB_DIRECT and the like; no statement deadline: a one-off command may rewrite much
    return connect(url, **Settings(db_url=url).database_options(deadline=False))


def run_with_db(db_url: str | None, action: Callable[[Database], T], *, reading: bool = False,
                error_exit: int | None = None) -> T:
    """Open the database, run `action` on it and close it; a SettlekitError from either step is one line on stderr
    and exit `error_exit` (default: `exit_code`). `reading`: see `open_database`."""
    try:
        db = open_database(db_url, reading=reading)
    except SettlekitError as exc:
        fail(exc, error_exit)
    try:
        return action(db)
    except SettlekitError as exc:
        fail(exc, error_exit)
    finally:
        db.close()


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    print(json.dumps(value, ensure_ascii=False))


READ_CHUNK = 1 << 20
_JSON_SPACE = b" \t\r\n\xef\xbb\xbf"  # and a UTF-8 byte order mark, left for the parser to judge
_JSON_STARTS = frozenset(bytes([c]) for c in b'[{"-0123456789tfn') | {b""}


def read_bytes(path: Path, limit: int | None = None, *, json_only: bool = False) -> bytes:
    """A file's bytes; exit 2 with FILE_NOT_FOUND or FILE_UNREADABLE (a directory, no permission), or with
    FILE_TOO_LARGE past `limit` bytes: read in chunks, never more than `limit` + one chunk, so a device or a pipe
    that never ends (/dev/zero) is refused too. With `json_only`, a first chunk that cannot start a JSON array or
    object is refused at once as JSON_INVALID instead of being read to the limit."""
    try:
        with path.open("rb") as handle:
            chunks: list[bytes] = []
            size = 0
            while chunk := handle.read(READ_CHUNK):
                if json_only and not chunks and chunk.lstrip(_JSON_SPACE)[:1] not in _JSON_STARTS:
                    console.print(f"[red]error[/red] JSON_INVALID: {escape(str(path))} is not valid JSON: it "
                                  "does not start with a JSON value", highlight=False)
                    raise typer.Exit(code=USAGE_EXIT)
                chunks.append(chunk)
                size += len(chunk)
                if limit is not None and size > limit:
                    fail(ValidationError(f"{path} is over the limit of {limit} bytes", code="FILE_TOO_LARGE",
                                         status=413, limitBytes=limit), USAGE_EXIT)
            return b"".join(chunks)
    except FileNotFoundError as exc:
        console.print(f"[red]error[/red] FILE_NOT_FOUND: {escape(str(path))} does not exist", highlight=False)
        raise typer.Exit(code=USAGE_EXIT) from exc
    except OSError as exc:
        console.print(f"[red]error[/red] FILE_UNREADABLE: cannot read {escape(str(path))}: {escape(str(exc))}",
                      highlight=False)
        raise typer.Exit(code=USAGE_EXIT) from exc


def read_json(path: Path, limit: int | None = None) -> Any:
    """A JSON file parsed with JS number semantics; exit 2 with FILE_NOT_FOUND, FILE_UNREADABLE, FILE_TOO_LARGE
    (past `limit` bytes) or JSON_INVALID (nested too deeply to parse included)."""
    try:
        text = read_bytes(path, limit, json_only=True).decode("utf-8")
    except UnicodeDecodeError as exc:
        console.print(f"[red]error[/red] FILE_UNREADABLE: cannot read {escape(str(path))}: {escape(str(exc))}",
                      highlight=False)
        raise typer.Exit(code=USAGE_EXIT) from exc
    try:
        return parse_json(text)
    except (ValueError, RecursionError) as exc:
        console.print(f"[red]error[/red] JSON_INVALID: {escape(str(path))} is not valid JSON: {escape(str(exc))}",
                      highlight=False)
        raise typer.Exit(code=USAGE_EXIT) from exc



def events_of(data: Any) -> Any:
    """The events of a parsed stream file: the file's array itself, or the `events` array of an object that holds
    one (an export); anything else as it is, for the caller to refuse."""
    if isinstance(data, dict) and isinstance(data.get("events"), list):
        return data["events"]
    return data


F = TypeVar("F", bound=Callable[..., Any])


def _flag_type(name: str) -> Any:
    """The type of a setting's flag: the setting's own type, optional (None: not given, the environment
    decides); repeatable for tuples."""
    from settlekit.runtime.settings import Settings

    annotation = Settings.model_fields[name].annotation
    if annotation is bool:
        return bool | None
    if annotation in (int, int | None):
        return int | None
    if annotation in (float, float | None):
        return float | None
    if annotation == tuple[str, ...]:
        return list[str] | None
    return str | None


def settings_flags(*names: str, aliases: dict[str, str] | None = None) -> Callable[[F], F]:
    """Give a command one option per named setting (`--<name>`, help from the Settings field) and pass the ones
    given to it as `flags: dict[str, Any]`, ready for `Settings(**flags)`. `aliases` maps a setting to an old
    flag name still accepted (hidden)."""
    import functools
    import inspect

    from settlekit.runtime.settings import Settings, env_var, flag

    aliases = aliases or {}

    def option(name: str) -> inspect.Parameter:
        info = Settings.model_fields[name]
        kind = _flag_type(name)
        decls = [flag(name)]
        if kind == bool | None:
            decls = [f"{flag(name)}/--no-{flag(name)[2:]}"]
        text = f"{info.description} [env {env_var(name)}]"
        annotation = Annotated[kind, typer.Option(*decls, help=text, show_default=False)]  # type: ignore[valid-type]
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)

    def alias(name: str, old: str) -> inspect.Parameter:
        annotation = Annotated[_flag_type(name), typer.Option(old, hidden=True)]  # type: ignore[valid-type]
        return inspect.Parameter(f"alias_{name}", inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation=annotation)

    def decorate(func: F) -> F:
        own = [p for p in inspect.signature(func, eval_str=True).parameters.values() if p.name != "flags"]
        extra = [option(n) for n in names] + [alias(n, old) for n, old in aliases.items()]

        @functools.wraps(func)
        def command(**values: Any) -> Any:
            given: dict[str, Any] = {}
            for name in names:
                value = values.pop(name, None)
                old = values.pop(f"alias_{name}", None)
                value = value if value is not None else old
                if isinstance(value, list):
                    value = tuple(value) or None
                if value is not None:
                    given[name] = value
            return func(flags=given, **values)

        parameters = [*own, *extra]
        command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in parameters}
        return command  # type: ignore[return-value]

    return decorate
