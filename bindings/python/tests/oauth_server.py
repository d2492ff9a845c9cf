"""An OAuth 2.1 authorization server for the tests (stdlib only): protected resource
metadata, authorization server metadata, dynamic registration, and a token endpoint for the
authorization code (PKCE S256), client credentials and jwt-bearer (workload identity, and
enterprise-managed authorization's identity assertion grant) grants; `/idp/token` plays the
enterprise IdP, exchanging an ID token for that grant (RFC 8693). `approve(url)` plays the
user: it answers an authorization URL with the redirect the server would send."""

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
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
# The user's ID token at the IdP, and the identity assertion grant the IdP issues for it.
ID_TOKEN = "user-id-token"
IDENTITY_GRANT = "id-jag-for-user"


class AuthServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.valid: set[str] = set()
        self.codes: dict[str, str] = {}
        self.grants: list[str] = []
        # Every token request's form (the IdP's included), and its Authorization header.
        self.forms: list[dict[str, str]] = []
        self.authorizations: list[str] = []
        # DPoP: the algorithms the metadata lists (none: DPoP not offered), the tokens bound
        # to a key, and the proofs seen at the token endpoint and by the MCP server.
        self.dpop_algs: list[str] = []
        self.dpop_bound: set[str] = set()
        self.token_proofs: list[str] = []
        self.mcp_proofs: list[tuple[str, str]] = []
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

    def issue(self, grant: str, bound: bool = False) -> dict[str, Any]:
        with self.lock:
            self.grants.append(grant)
            self.serial += 1
            token = f"access-{self.serial}"
            self.valid.add(token)
            if bound:
                self.dpop_bound.add(token)
        kind = "DPoP" if bound else "Bearer"
        return {"access_token": token, "token_type": kind, "expires_in": 3600}

    def admits(self, authorization: str, proof: str | None) -> bool:
        """Whether an MCP request's credentials are good: a bound token only as `DPoP`, with
        a proof."""
        scheme, _, token = authorization.partition(" ")
        with self.lock:
            if token not in self.valid:
                return False
            if token not in self.dpop_bound:
                return scheme == "Bearer"
            if scheme != "DPoP" or not proof:
                return False
            self.mcp_proofs.append((token, proof))
            return True


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
                **({"dpop_signing_alg_values_supported": o.dpop_algs} if o.dpop_algs else {}),
            })
        else:
            self._json(404, {})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode()
        if self.path == "/register":
            self._json(201, {"client_id": "registered-1"})
            return
        if self.path not in ("/token", "/idp/token"):
            self._json(404, {})
            return
        form = dict(urllib.parse.parse_qsl(body))
        with self.owner.lock:
            self.owner.forms.append(form)
            self.owner.authorizations.append(self.headers.get("Authorization", ""))
        grant = form.get("grant_type", "")
        if self.path == "/idp/token":
            self._idp_exchange(form)
            return
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
            if form.get("assertion") not in (WORKLOAD_TOKEN, IDENTITY_GRANT):
                self._json(400, {"error": "invalid_grant"})
                return
        else:
            self._json(400, {"error": "unsupported_grant_type"})
            return
        proof = self.headers.get("DPoP")
        if proof and self.owner.dpop_algs:
            with self.owner.lock:
                self.owner.token_proofs.append(proof)
        self._json(200, self.owner.issue(grant, bound=bool(proof and self.owner.dpop_algs)))

    def _idp_exchange(self, form: dict[str, str]) -> None:
        """The IdP: the user's ID token for an identity assertion grant meant for this
        authorization server."""
        o = self.owner
        if (
            form.get("grant_type") != TOKEN_EXCHANGE
            or form.get("requested_token_type") != ID_JAG
            or form.get("subject_token_type") != ID_TOKEN_TYPE
            or form.get("subject_token") != ID_TOKEN
            or form.get("audience") != o.url
        ):
            self._json(400, {"error": "invalid_request"})
            return
        with o.lock:
            o.grants.append(TOKEN_EXCHANGE)
        self._json(200, {
            "access_token": IDENTITY_GRANT,
            "issued_token_type": ID_JAG,
            "token_type": "N_A",
            "expires_in": 300,
        })

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
