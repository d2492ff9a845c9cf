"""The exceptions of ``mcp_resume``: one base class and one subclass per error kind.

The SDK decides which kind a failure is; the binding only picks the class. Match on the
class (or on ``kind``), never on the message.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "McpResumeError",
    "TransportError",
    "McpTimeoutError",
    "SessionLostError",
    "OutcomeUnknownError",
    "ContextMismatchError",
    "RpcError",
    "ProtocolError",
    "TooLargeError",
    "ClosedError",
    "UnauthorizedError",
    "InvalidConfigError",
    "MissingCapabilityError",
    "LedgerError",
]


class McpResumeError(Exception):
    """Base class of every error the client raises.

    Attributes:
        kind: the SDK's stable name of the error kind, e.g. ``"outcome_unknown"``.
        message: the human-readable message.
        retry_after: seconds the server asked to wait (``Retry-After`` on a 429 or 503) when
            that wait did not fit in the call's deadline and the call failed instead;
            ``None`` otherwise.
        may_have_run: whether the request this error ended may have run on the server, so
            that retrying it could run it twice: always for ``outcome_unknown`` and
            ``context_mismatch``; for a timed-out, lost or closed call when it had been sent
            and nothing proved it did not run; for a call that became a task, for any
            error but the task's own final status.
        input_refused: whether the call ended because the application's handler could not
            provide an input the server asked for during it (a 2026-07-28 call's
            ``input_required`` round, or its task's, whose handler raised; a user's
            ``decline`` is an answer, not this). Such an error is ``outcome_unknown`` and
            ``may_have_run``, but must not be sent again as an interrupted call would be: a
            re-send starts the call over and asks for the same input again.
    """

    kind: str = "unknown"
    message: str
    retry_after: float | None
    may_have_run: bool = False
    input_refused: bool = False

    def __init__(
        self, message: str, *, kind: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        if kind is not None:
            self.kind = kind

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with its attributes, so it survives a process pool.
        return (type(self), (self.message,), self.__dict__)


class TransportError(McpResumeError):
    """The network failed and the client could not recover within its limits."""

    kind = "transport"


class McpTimeoutError(McpResumeError, TimeoutError):
    """The call's deadline passed; it spans every resume and re-send.

    Also a builtin ``TimeoutError``, so ``except TimeoutError`` catches it.
    """

    kind = "timeout"


class SessionLostError(McpResumeError):
    """The session could not be re-established before the call's deadline, or the
    call kept finding its session gone. Not terminal: the next call reconnects."""

    kind = "session_lost"


class OutcomeUnknownError(McpResumeError):
    """The call was interrupted and it cannot be known whether the server ran it.

    It was not re-sent because that was not provably safe: give the call an idempotency key
    (and use a server that deduplicates keys) to let the client re-send it.
    """

    kind = "outcome_unknown"
    may_have_run = True


class ContextMismatchError(McpResumeError):
    """The answer was produced under another negotiated context than this session's.

    It may be wrong, so it is not returned; the call already ran and is not re-sent.
    """

    kind = "context_mismatch"
    may_have_run = True


class RpcError(McpResumeError):
    """A JSON-RPC error: raised when the server answers a call with one.

    Raise it from a server-request handler to answer the server with this error.

    Attributes:
        code: the JSON-RPC error code.
        message: the JSON-RPC error message.
        data: the error's ``data`` member, or ``None``.
    """

    kind = "rpc"
    code: int
    data: Any

    def __init__(
        self, code: int, message: str, data: Any = None, *, retry_after: float | None = None
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.code = code
        self.data = data

    def __str__(self) -> str:
        return f"JSON-RPC error {self.code}: {self.message}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message, self.data), self.__dict__)


class ProtocolError(McpResumeError):
    """The server broke the protocol (malformed SSE or JSON, unexpected status, …)."""

    kind = "protocol"


class TooLargeError(McpResumeError):
    """The server sent an event or body larger than the configured maximum."""

    kind = "too_large"


class ClosedError(McpResumeError):
    """The client was closed before the call completed, or is closed."""

    kind = "closed"


class UnauthorizedError(McpResumeError):
    """The server refused the credentials (HTTP 401, or 403 asking for more scope).

    Attributes:
        auth_challenge: the server's ``WWW-Authenticate`` challenge, as a dict (``status``,
            ``scheme``, ``error``, ``error_description``, ``scope``, ``resource_metadata``,
            ``realm``), or ``None``.
    """

    kind = "unauthorized"
    auth_challenge: dict[str, Any] | None

    def __init__(
        self,
        message: str,
        *,
        auth_challenge: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.auth_challenge = auth_challenge


class InvalidConfigError(McpResumeError, ValueError):
    """The configuration is invalid (raised by ``Client(...)``), or a call's own options are.

    Also a builtin ``ValueError``.
    """

    kind = "invalid_config"


class MissingCapabilityError(McpResumeError):
    """A modern server requires a client capability this client did not declare.

    Attributes:
        code: the server's JSON-RPC error code.
        data: the error's ``data``; ``data["requiredCapabilities"]`` names what is missing.
    """

    kind = "missing_capability"
    code: int | None
    data: Any

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        data: Any = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.code = code
        self.data = data


class LedgerError(McpResumeError):
    """The ledger of calls in flight could not be read (``Client.recover()``), or held an
    entry it could not read back. A call whose entry cannot be written is not sent: it is
    tried again within its deadline, and fails ``TransportError`` saying so."""

    kind = "ledger"


# Shown (and pickled) under the package that exports them.
for _cls in (
    McpResumeError,
    TransportError,
    McpTimeoutError,
    SessionLostError,
    OutcomeUnknownError,
    ContextMismatchError,
    RpcError,
    ProtocolError,
    TooLargeError,
    ClosedError,
    UnauthorizedError,
    InvalidConfigError,
    MissingCapabilityError,
    LedgerError,
):
    _cls.__module__ = "mcp_resume"
