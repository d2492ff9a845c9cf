"""An OAuth 2.1 authorization server for the tests (stdlib only): protected resource
metadata, authorization server metadata, dynamic registration, and a token endpoint for the
authorization code (PKCE S256), client credentials and jwt-bearer (workload identity)
grants. `approve(url)` plays the user:
it answers an authorization URL with the redirect the server would send."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CLIENT_ID = "machine-1"
CLIENT_SECRET = "s3cret"
WORKLOAD_TOKEN = "workload-jwt"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


class AuthServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.valid: set[str] = set()
        self.codes: dict[str, str] = {}
        self.grants: list[str] = []
        # Every token request's form, as received.
        self.forms: list[dict[str, str]] = []
        self.serial = 0
        self.resource = ""
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def challenge(self) -> str:
        return f'Bearer error="invalid_token", resource_metadata="{self.url}/prm"'

    def approve(self, authorization_url: str) -> str:
        """What the user agent is redirected to once the user approved."""
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(authorization_url).query))
        with self.lock:
            self.serial += 1
            code = f"code-{self.serial}"
            self.codes[code] = query["code_challenge"]
        params = urllib.parse.urlencode({"code": code, "state": query["state"], "iss": self.url})
        return f"{query['redirect_uri']}?{params}"

    def issue(self, grant: str) -> dict[str, Any]:
        with self.lock:
            self.grants.append(grant)
            self.serial += 1
            token = f"access-{self.serial}"
            self.valid.add(token)
        return {"access_token": token, "token_type": "Bearer", "expires_in": 3600}


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    @property
    def owner(self) -> AuthServer:
        return self.server.owner  # type: ignore[attr-defined,no-any-return]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        o = self.owner
        if self.path == "/prm":
            self._json(200, {"resource": o.resource, "authorization_servers": [o.url]})
        elif self.path == "/.well-known/oauth-authorization-server":
            self._json(200, {
                "issuer": o.url,
                "authorization_endpoint": f"{o.url}/authorize",
                "token_endpoint": f"{o.url}/token",
                "registration_endpoint": f"{o.url}/register",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "client_credentials", JWT_BEARER],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
                "authorization_response_iss_parameter_supported": True,
            })
        else:
            self._json(404, {})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode()
        if self.path == "/register":
            self._json(201, {"client_id": "registered-1"})
            return
        if self.path != "/token":
            self._json(404, {})
            return
        form = dict(urllib.parse.parse_qsl(body))
        with self.owner.lock:
            self.owner.forms.append(form)
        grant = form.get("grant_type", "")
        if grant == "authorization_code":
            with self.owner.lock:
                challenge = self.owner.codes.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "").encode()
            expected = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
            if challenge is None or expected.decode() != challenge:
                self._json(400, {"error": "invalid_grant"})
                return
        elif grant == "client_credentials":
            basic = self.headers.get("Authorization", "")
            given = base64.b64decode(basic.removeprefix("Basic ")).decode() if basic else ""
            if given != f"{CLIENT_ID}:{CLIENT_SECRET}":
                self._json(401, {"error": "invalid_client"})
                return
        elif grant == JWT_BEARER:
            if form.get("assertion") != WORKLOAD_TOKEN:
                self._json(400, {"error": "invalid_grant"})
                return
        else:
            self._json(400, {"error": "unsupported_grant_type"})
            return
        self._json(200, self.owner.issue(grant))

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
