"""The interactive API documentation, working offline: Swagger UI at /docs and ReDoc at /redoc, their
JavaScript, CSS and favicon served from the `fastapi-offline` package (a pinned dependency) under /docs/assets/
instead of a CDN. None of these pages needs an API key, and none is an operation of the OpenAPI document."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

SWAGGER_PATH = "/docs"
OAUTH2_REDIRECT_PATH = "/docs/oauth2-redirect"
REDOC_PATH = "/redoc"
ASSETS_PATH = "/docs/assets"
ASSETS_PACKAGE = ("fastapi_offline", "static")  # swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js
DOC_PATHS = frozenset({SWAGGER_PATH, OAUTH2_REDIRECT_PATH, REDOC_PATH})


def add_docs(app: FastAPI) -> None:
    """Serve /docs, /docs/oauth2-redirect, /redoc and the assets they load; `app` is built with
    `docs_url=None, redoc_url=None` so FastAPI's CDN-backed pages are not added."""
    app.mount(ASSETS_PATH, StaticFiles(packages=[ASSETS_PACKAGE]), name="docs-assets")

    def asset(request: Request, name: str) -> str:
        return f"{_root(request)}{ASSETS_PATH}/{name}"

    async def swagger_ui(request: Request) -> HTMLResponse:
        root = _root(request)
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - Swagger UI",
            swagger_js_url=asset(request, "swagger-ui-bundle.js"), swagger_css_url=asset(request, "swagger-ui.css"),
            swagger_favicon_url=asset(request, "favicon.png"), oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_PATH}",
            swagger_ui_parameters=app.swagger_ui_parameters)

    async def oauth2_redirect(request: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc(request: Request) -> HTMLResponse:
        return get_redoc_html(
            openapi_url=f"{_root(request)}{app.openapi_url}", title=f"{app.title} - ReDoc",
            redoc_js_url=asset(request, "redoc.standalone.js"), redoc_favicon_url=asset(request, "favicon.png"),
            with_google_fonts=False)

    app.add_route(SWAGGER_PATH, swagger_ui, include_in_schema=False)
    app.add_route(OAUTH2_REDIRECT_PATH, oauth2_redirect, include_in_schema=False)
    app.add_route(REDOC_PATH, redoc, include_in_schema=False)


def _root(request: Request) -> str:
    """The path prefix the app is mounted under (a proxy's root path), without a trailing slash."""
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")
