"""`settlekit receive`: run the reference webhook receiver."""

from __future__ import annotations

from pathlib import Path

import typer

from settlekit.delivery.receiver import ReceiverServer

delivery_app = typer.Typer(help="Webhook delivery tools.", no_args_is_help=True)


@delivery_app.callback()
def _delivery_group() -> None:
    """Webhook delivery tools."""


def _load_secrets(secret: list[str] | None, secret_file: Path | None) -> list[str]:
    secrets = list(secret or [])
    if secret_file is not None:
        secrets += [ln.strip() for ln in secret_file.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not secrets:
        raise typer.BadParameter("give --secret (repeatable), SETTLEKIT_WEBHOOK_SECRET or --secret-file")
    return secrets


def receive_command(
    port: int = typer.Option(8787, "--port", "-p", help="TCP port (0 = any free port)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    secret: list[str] | None = typer.Option(
        None,
        "--secret",
        "-s",
        envvar="SETTLEKIT_WEBHOOK_SECRET",
        help="whsec_ secret; repeat for rotation (any one may match).",
    ),
    secret_file: Path | None = typer.Option(
        None, "--secret-file", exists=True, dir_okay=False, help="File with one secret per line."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Directory to store <artifactId>.json files."),
    tolerance: int = typer.Option(300, "--tolerance", help="Allowed timestamp skew in seconds."),
    legacy: bool = typer.Option(False, "--accept-legacy", help="Also accept settld x-proxy-* signatures."),
    no_artifact_check: bool = typer.Option(
        False, "--no-artifact-check", help="Skip artifactHash and settlement-total checks."
    ),
) -> None:
    """Receive signed artifact webhooks: verify, dedupe by webhook-id, store each artifact once."""
    server = ReceiverServer(
        secrets=_load_secrets(secret, secret_file),
        host=host,
        port=port,
        out_dir=out,
        tolerance_seconds=tolerance,
        verify_artifact_body=not no_artifact_check,
        accept_legacy=legacy,
        log=lambda line: typer.echo(line, err=True),
    )
    typer.echo(f"listening on {server.url}", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        typer.echo(f"stopped: {server.stats()}", err=True)


delivery_app.command("receive")(receive_command)
