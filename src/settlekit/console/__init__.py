"""The operator console: server-rendered pages at `/console` over the services the JSON routes call.

`console_mounts(settings)` is what `settlekit serve` passes to `api.app.create_app(mounts=...)` (nothing when the
`console` setting is off). A person signs in with an API key; the console keeps only the key's id in a signed,
expiring session cookie and checks on every request that the key is still active, holds the scope of the API
route the page or action uses, and takes from the key's rate limit. Every page is the key's tenant's only.
"""

from __future__ import annotations

from settlekit.api.app import SubApp
from settlekit.console.web import PREFIX, console_app
from settlekit.runtime.settings import Settings

__all__ = ["PREFIX", "console_app", "console_mounts"]


def console_mounts(settings: Settings) -> dict[str, SubApp]:
    """The console's mount for `create_app`, or none when the `console` setting is off."""
    if not settings.console:
        return {}
    return {PREFIX: lambda ctx: console_app(ctx, settings)}
