"""String enums of the client's settings. Each member is a ``str``, so plain strings work
wherever a member is expected (``era="modern"``)."""

from __future__ import annotations

import enum

__all__ = ["Era", "LoggingLevel", "ResendPolicy"]


class Era(str, enum.Enum):
    """Which era of the protocol a server speaks (``Client.era``) or a client should speak
    (``Client(era=...)``)."""

    AUTO = "auto"
    """Probe with ``server/discover`` and fall back to ``initialize``; the default."""
    LEGACY = "legacy"
    """Sessions and ``initialize`` (protocol 2025-03-26 to 2025-11-25)."""
    MODERN = "modern"
    """No session, per-request metadata (protocol 2026-07-28)."""

    def __str__(self) -> str:
        return self.value


class ResendPolicy(str, enum.Enum):
    """When a keyed tool call may be re-sent after an interruption whose outcome is
    unknown."""

    SERVER_ADVERTISED = "server_advertised"
    """Only when the server advertised that it deduplicates keys; the default."""
    ASSUME_SERVER_DEDUPLICATES = "assume_server_deduplicates"
    """The application knows the server deduplicates keyed calls."""

    def __str__(self) -> str:
        return self.value


class LoggingLevel(str, enum.Enum):
    """Severity of the server's log messages (RFC 5424), least severe first:
    ``Client.set_logging_level`` asks for this level and above."""

    DEBUG = "debug"
    INFO = "info"
    NOTICE = "notice"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"
    ALERT = "alert"
    EMERGENCY = "emergency"

    def __str__(self) -> str:
        return self.value


Era.__module__ = "mcp_resume"
LoggingLevel.__module__ = "mcp_resume"
ResendPolicy.__module__ = "mcp_resume"
