"""`settlekit api-keys`: API key management (create prints the secret once; only its hash is stored). Not to be
confused with the signer keys of `/v1/keys`. `settlekit keys` is the earlier, deprecated name."""

from __future__ import annotations

from typing import Annotated

import typer

from settlekit.api.auth import SCOPES, create_api_key, list_api_keys, revoke_api_key
from settlekit.application.database import Database
from settlekit.cli.common import USAGE_EXIT, DbOption, JsonOption, print_json, run_with_db

api_keys_app = typer.Typer(help="API keys (tenant-bound, scoped).", no_args_is_help=True)


@api_keys_app.callback()
def api_keys() -> None:
    """API keys (tenant-bound, scoped)."""


def _migrated(database: Database) -> Database:
    database.migrate()
    return database


@api_keys_app.command("create")
def create(
    *,
    db: DbOption = None,
    tenant: Annotated[str, typer.Option("--tenant", help="tenant the key is bound to")],
    scopes: Annotated[str, typer.Option("--scopes", help=f"comma-separated: {','.join(SCOPES)}")],
    label: Annotated[str | None, typer.Option("--label", help="free-text note")] = None,
    as_json: JsonOption = False,
) -> None:
    """Create a key and print it once (store it now: it cannot be shown again)."""
    key_id, secret = run_with_db(db, lambda d: create_api_key(_migrated(d), tenant, scopes, label=label),
                                 error_exit=USAGE_EXIT)
    if as_json:
        print_json({"keyId": key_id, "tenantId": tenant, "key": secret})
        return
    typer.echo(f"key id: {key_id}", err=True)
    typer.echo(secret)


@api_keys_app.command("revoke")
def revoke(
    *,
    db: DbOption = None,
    key_id: Annotated[str, typer.Argument(help="key id (the hex part of sk_<keyid>_…)")],
) -> None:
    """Revoke a key; requests with it fail from now on."""
    run_with_db(db, lambda d: revoke_api_key(_migrated(d), key_id), error_exit=USAGE_EXIT)
    typer.echo(f"revoked {key_id}")


@api_keys_app.command("list")
def list_keys(
    *,
    db: DbOption = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="only this tenant")] = None,
    as_json: JsonOption = False,
) -> None:
    """List keys (ids, tenants, scopes, status; never secrets)."""
    keys = run_with_db(db, lambda d: list_api_keys(_migrated(d), tenant), reading=True)
    if as_json:
        print_json([{"keyId": k.key_id, "tenantId": k.tenant_id, "scopes": sorted(k.scopes), "status": k.status,
                     "label": k.label} for k in keys])
        return
    for key in keys:
        typer.echo(f"{key.key_id}\t{key.tenant_id}\t{','.join(sorted(key.scopes))}\t{key.status}\t{key.label or ''}")
