"""FastMCP's client over ``mcp_resume.bridge``: ``ResumeTransport`` is a FastMCP
``ClientTransport`` (FastMCP 3.4 and 4.x), so ``fastmcp.Client`` (and what is built on it, such
as pydantic-ai's ``MCPToolset``: see ``mcp_resume.frameworks.pydantic_ai``) keeps its API::

    import fastmcp
    from mcp_resume.frameworks.fastmcp import ResumeTransport

    async with fastmcp.Client(ResumeTransport(url), auth="<token>") as client:
        result = await client.call_tool("echo", {"text": "hi"})

FastMCP's client retries nothing by itself: a call that may have run raises the ``mcp``
package's ``McpError`` whose ``error.data["kind"]`` is ``"outcome_unknown"`` (or
``"context_mismatch"``), which the application sees as such.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..bridge import check_options, streamablehttp_client
from ._outcome import require

_transports = require("fastmcp.client.transports", "fastmcp", "FastMCP")
ClientTransport = _transports.ClientTransport

__all__ = ["ResumeTransport"]


class ResumeTransport(ClientTransport):  # type: ignore[misc, valid-type]
    """A FastMCP transport whose session runs on mcp-resume.

    ``options`` are the keywords of ``mcp_resume.bridge.streamablehttp_client`` (``headers``,
    ``bearer_token``, ``call_timeout``: the longest one call may take across every resume and
    re-send, ``era``, ``reconnect``, ``resend_policy``, …); an unknown one raises
    ``TypeError`` here. ``fastmcp.Client(transport, auth="<token>")`` sends the token as
    ``Authorization: Bearer``; an ``httpx.Auth`` or ``"oauth"`` raises ``TypeError``: the HTTP
    stack is the Rust SDK's (``mcp_resume.Client(oauth=...)`` runs MCP authorization).
    """

    def __init__(self, url: str, **options: Any) -> None:
        check_options(options, "ResumeTransport")
        self.url = url
        self._options = options
        self._session_id: Any = None

    def _set_auth(self, auth: Any) -> None:
        # What `fastmcp.Client(..., auth=...)` calls.
        if auth is None:
            return
        if not isinstance(auth, str) or auth == "oauth":
            raise TypeError(
                "ResumeTransport takes auth as a bearer token string; an httpx.Auth or 'oauth' "
                "needs an httpx client, which this transport does not use "
                "(mcp_resume.Client(oauth=...) runs MCP authorization)"
            )
        if self._options.get("bearer_token") not in (None, auth):
            raise TypeError("ResumeTransport: a bearer_token and another auth token")
        self._options["bearer_token"] = auth

    @asynccontextmanager
    async def connect_session(
        self, *, transport_options: Any = None, **session_kwargs: Any
    ) -> AsyncIterator[Any]:
        # FastMCP 4 names the session class to use in `transport_options`; 3.x has none.
        session_class = getattr(transport_options, "session_class", None)
        if session_class is None:
            from mcp import ClientSession as session_class
        async with streamablehttp_client(self.url, **self._options) as (read, write, session_id):
            self._session_id = session_id
            async with session_class(read, write, **session_kwargs) as session:
                yield session

    def get_session_id(self) -> str | None:
        return self._session_id() if self._session_id is not None else None  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<ResumeTransport(url={self.url!r})>"
