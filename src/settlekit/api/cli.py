"""`settlekit keys`: API key management (create prints the secret once; only its hash is stored)."""

from __future__ import annotations

from typing import Annotated

import typer

from settlekit.api.auth import SCOPES, create_api_key, list_api_keys, revoke_api_key
from settlekit.errors import SettlekitError
from settlekit.store.db import opened

api_keys_app = typer.Typer(help="API keys (tenant-bound, scoped).", no_args_is_help=True)

DbOption = Annotated[str, typer.Option("--db", envvar="SETTLEKIT_DB", help="database URL")]


@api_keys_app.callback()
def keys() -> None:
    """API keys (tenant-bound, scoped)."""


@api_keys_app.command("create")
def create(
    db: DbOption,
    tenant: Annotated[str, typer.Option("--tenant", help="tenant the key is bound to")],
    scopes: Annotated[str, typer.Option("--scopes", help=f"comma-separated: {','.join(SCOPES)}")],
    label: Annotated[str | None, typer.Option("--label", help="free-text note")] = None,
) -> None:
    """Create a key and print it once (store it now: it cannot be shown again)."""
    try:
        with opened(db) as database:
            key_id, secret = create_api_key(database, tenant, scopes, label=label)
    except SettlekitError as exc:
        typer.echo(f"error {exc.code}: {exc.message}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"key id: {key_id}", err=True)
    typer.echo(secret)


@api_keys_app.command("revoke")
def revoke(
    db: DbOption,
    key_id: Annotated[str, typer.Argument(help="key id (the hex part of sk_<keyid>_…)")],
) -> None:
    """Revoke a key; requests with it fail from now on."""
    try:
        with opened(db) as database:
            revoke_api_key(database, key_id)
    except SettlekitError as exc:
        typer.echo(f"error {exc.code}: {exc.message}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"revoked {key_id}")


@api_keys_app.command("list")
def list_keys(
    db: DbOption,
    tenant: Annotated[str | None, typer.Option("--tenant", help="only this tenant")] = None,
) -> None:
    """List keys (ids, tenants, scopes, status; never secrets)."""
    with opened(db) as database:
        for key in list_api_keys(database, tenant):
            typer.echo(f"{key.key_id}\t{key.tenant_id}\t{','.join(sorted(key.scopes))}\t{key.status}"
                       f"\t{key.label or ''}")
