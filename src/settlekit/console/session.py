"""The console's session: a signed, expiring cookie holding a session id, and a server-side row for it (the API
key it acts with, its CSRF token, the one-shot message of its last action) that signing out or revoking the key
deletes, so a copied cookie ends with it in every API process; and the checks every form goes through (the
session's token in the form, and the request's Origin)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from settlekit.api.auth import ApiKey
from settlekit.application import sessions as console_sessions
from settlekit.application.database import Database
from settlekit.errors import SettlekitError

SESSION_COOKIE = "sk_console"
SIGN_IN_COOKIE = "sk_console_signin"  # the CSRF token of the sign-in form, before there is a session
SIGN_IN_SECONDS = 3600


class CsrfError(SettlekitError):
    """A form without the session's token or from another origin."""

    def __init__(self, message: str):
        super().__init__(message, code="FORBIDDEN", status=403)


@dataclass(frozen=True)
class Session:
    session_id: str
    key_id: str
    csrf: str
    flash: str | None = None  # JSON of the last action's message, not yet shown


@dataclass(frozen=True)
class SignedIn:
    """The signed-in person's key (checked active now) and the session's CSRF token."""

    key: ApiKey
    csrf: str
    session_id: str = ""
    flash: str | None = None


class Sessions:
    """Signs and reads the console's cookies with a key of the server's own (derived from its signing key, so every
    API process of one deployment reads the others' cookies), over the sessions stored in `db`."""

    def __init__(self, db: Database, secret: bytes, max_age: int, path: str):
        self.db = db
        self.max_age = max_age
        self.path = path
        self._session = URLSafeTimedSerializer(secret, salt="settlekit.console.session.v2")
        self._sign_in = URLSafeTimedSerializer(secret, salt="settlekit.console.sign-in")

    def issue(self, response: Response, request: Request, key: ApiKey) -> None:
        """Start a session for `key` (a new row) and set its cookie (blocking: call from a worker thread)."""
        session_id = secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        console_sessions.insert(self.db, session_id, key_id=key.key_id, tenant_id=key.tenant_id,
                                csrf=secrets.token_urlsafe(24), expires_at=now + timedelta(seconds=self.max_age),
                                now=now)
        self._set(response, request, SESSION_COOKIE, self._session.dumps({"s": session_id}), self.max_age)

    def read(self, request: Request) -> Session | None:
        """The session the cookie names, while its row lasts (blocking: call from a worker thread)."""
        raw = request.cookies.get(SESSION_COOKIE)
        if not raw:
            return None
        try:
            data: Any = self._session.loads(raw, max_age=self.max_age)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("s"), str):
            return None
        stored = console_sessions.find(self.db, data["s"], now=datetime.now(UTC))
        if stored is None:
            return None
        return Session(data["s"], stored.key_id, stored.csrf, stored.flash)

    def end(self, response: Response, session: Session | None) -> None:
        """End the session (its row, so every copy of the cookie) and clear the cookie (blocking)."""
        if session is not None:
            console_sessions.delete(self.db, session.session_id)
        response.delete_cookie(SESSION_COOKIE, path=self.path, httponly=True, samesite="strict")

    def flash(self, session_id: str, message: str) -> None:
        """Keep a one-shot message (JSON) for the session's next page (blocking)."""
        console_sessions.set_flash(self.db, session_id, message)

    def take_flash(self, session_id: str) -> bool:
        """Clear the session's message; True when this call cleared it, so it is shown once (blocking)."""
        return console_sessions.take_flash(self.db, session_id)

    def sign_in_token(self, request: Request, response: Response) -> str:
        """The sign-in form's CSRF token, set in its own short-lived cookie (reused while it is valid)."""
        current = self._read_sign_in(request)
        if current is not None:
            return current
        token = secrets.token_urlsafe(24)
        self._set(response, request, SIGN_IN_COOKIE, self._sign_in.dumps(token), SIGN_IN_SECONDS)
        return token

    def check_sign_in(self, request: Request, form_token: str | None) -> None:
        check_origin(request)
        expected = self._read_sign_in(request)
        if expected is None or not form_token or not hmac.compare_digest(expected, form_token):
            raise CsrfError("the sign-in form has expired or did not come from this console: sign in again")

    def _read_sign_in(self, request: Request) -> str | None:
        raw = request.cookies.get(SIGN_IN_COOKIE)
        if not raw:
            return None
        try:
            token: Any = self._sign_in.loads(raw, max_age=SIGN_IN_SECONDS)
        except BadSignature:
            return None
        return token if isinstance(token, str) else None

    def _set(self, response: Response, request: Request, name: str, value: str, max_age: int) -> None:
        response.set_cookie(name, value, max_age=max_age, path=self.path, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")


def check_form(request: Request, session: SignedIn, form_token: str | None) -> None:
    """A form posted to the console: from this origin, carrying the session's CSRF token."""
    check_origin(request)
    if not form_token or not hmac.compare_digest(session.csrf, form_token):
        raise CsrfError("the form's CSRF token is missing or is not this session's: reload the page")


def check_origin(request: Request) -> None:
    """The request's Origin (or, without one, its Referer's origin) must be the console's own."""
    own = f"{request.url.scheme}://{request.url.netloc}".lower()
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if referer:
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}"
    if origin is None or origin.lower() != own:
        raise CsrfError("the form was not posted from this console's origin")


def session_secret(server_key_pem: str | None) -> bytes:
    """The cookie-signing key: derived from the server's private signing key when there is one (every process of a
    deployment shares it), otherwise random for this process."""
    if server_key_pem is None:
        return secrets.token_bytes(32)
    return hmac.new(server_key_pem.encode("ascii"), b"settlekit console session v1", hashlib.sha256).digest()
