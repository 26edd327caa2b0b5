"""A small HTTP client for the Retasc API that turns every failure into one sentence.

Uses ``httpx2`` (the HTTP library the MCP SDK depends on), so the CLI adds no HTTP stack.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from contextlib import contextmanager

import httpx2

from retasc import __version__
from retasc.cli.errors import AUTH, LOCAL, REFUSED, UNREACHABLE, CliError

USER_AGENT = f"retasc-cli/{__version__} (Python {platform.python_version()})"


def _reason(exc: Exception) -> str:
    text = str(exc).lower()
    if isinstance(exc, httpx2.TimeoutException):
        return "timed out"
    if "refused" in text:
        return "connection refused"
    if "name or service not known" in text or "nodename nor servname" in text or "getaddrinfo" in text:
        return "unknown host"
    return str(exc).strip().rstrip(".") or type(exc).__name__


class Api:
    """``auth`` per request: ``"token"`` (the person's rtscpat_ token), ``"key"`` (this
    folder's agent key) or ``None``."""

    def __init__(
        self, server: str, *, token: str | None = None, key: str | None = None, org: str | None = None, timeout: float = 30.0
    ):
        self.server = server.rstrip("/")
        self.token = token
        self.key = key
        self.org = org
        self.http = httpx2.Client(base_url=self.server, timeout=timeout, headers={"User-Agent": USER_AGENT})

    def close(self) -> None:
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _headers(self, auth: str | None, org: str | None) -> dict:
        headers = {"Accept": "application/json"}
        if auth == "token":
            if not self.token:
                raise CliError("You are not signed in to this server; run retasc login.", exit_code=AUTH)
            headers["Authorization"] = f"Bearer {self.token}"
            org = org or self.org
            if org:
                headers["X-Retasc-Org"] = org
        elif auth == "key":
            if not self.key:
                raise CliError("This folder is not bound to Retasc; run retasc bind.", exit_code=LOCAL)
            headers["Authorization"] = f"Bearer {self.key}"
        return headers

    def unreachable(self, exc: Exception) -> CliError:
        return CliError(f"Cannot reach the Retasc server at {self.server}: {_reason(exc)}.", exit_code=UNREACHABLE)

    def refusal(self, response: httpx2.Response, auth: str | None) -> CliError:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "code" not in body:
            code = "SERVER_ERROR" if response.status_code >= 500 else f"HTTP_{response.status_code}"
            exit_code = UNREACHABLE if response.status_code >= 500 else REFUSED
            return CliError(
                f"The server at {self.server} answered HTTP {response.status_code} ({code}).", exit_code=exit_code, code=code
            )
        code = str(body["code"])
        message = str(body.get("message") or code).strip()
        if response.status_code == 401 or code == "UNAUTHORIZED":
            if auth == "key":
                message = "This folder's agent key is unknown or revoked; run retasc bind --force"
            elif auth == "token":
                message = "Your sign-in is no longer valid; run retasc login"
            return CliError(f"{message.rstrip('.')} ({code}).", exit_code=AUTH, code=code)
        tell = body.get("tellHuman")
        sentence = f"{message.rstrip('.')} ({code})" + (f"; {str(tell).rstrip('.')}" if tell else "") + "."
        return CliError(sentence, exit_code=REFUSED, code=code)

    def request(
        self,
        method: str,
        path: str,
        *,
        auth: str | None = "token",
        json=None,
        params=None,
        org: str | None = None,
        ok: tuple[int, ...] = (),
    ) -> dict:
        headers = self._headers(auth, org)
        try:
            response = self.http.request(method, path, json=json, params=params, headers=headers)
        except httpx2.HTTPError as exc:
            raise self.unreachable(exc) from None
        if response.status_code >= 400 and response.status_code not in ok:
            raise self.refusal(response, auth)
        try:
            data = response.json()
        except ValueError:
            raise CliError(f"The server at {self.server} did not answer JSON for {path}.", exit_code=UNREACHABLE) from None
        if response.status_code in ok and response.status_code >= 400:
            data = {"_status": response.status_code, **(data if isinstance(data, dict) else {})}
        return data

    def get(self, path: str, **kw) -> dict:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: dict | None = None, **kw) -> dict:
        return self.request("POST", path, json=body or {}, **kw)

    def upload(self, path: str, *, data: dict, file: tuple[str, str, bytes], auth: str = "token") -> dict:
        """POST a multipart form: ``data`` fields and one ``file`` (field, file name, bytes)."""
        field, name, content = file
        headers = self._headers(auth, None)
        try:
            response = self.http.post(path, data=data, files={field: (name, content)}, headers=headers)
        except httpx2.HTTPError as exc:
            raise self.unreachable(exc) from None
        if response.status_code >= 400:
            raise self.refusal(response, auth)
        try:
            return response.json()
        except ValueError:
            raise CliError(f"The server at {self.server} did not answer JSON for {path}.", exit_code=UNREACHABLE) from None

    @contextmanager
    def stream(self, path: str, *, params=None, auth: str = "token") -> Iterator[httpx2.Response]:
        headers = self._headers(auth, None)
        try:
            with self.http.stream("GET", path, params=params, headers=headers, timeout=httpx2.Timeout(30, read=300)) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self.refusal(response, auth)
                yield response
        except httpx2.HTTPError as exc:
            raise self.unreachable(exc) from None
