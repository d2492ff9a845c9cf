"""What the framework modules share: recognising the bridge's errors that mean "this call
may have run" where a framework wraps them (the streams' ``interrupted_as_result`` covers the
rest), the idempotency key derived from a framework's tool call id, and the install hint for
a framework that is missing."""

from __future__ import annotations

import hashlib
import importlib
from types import ModuleType
from typing import Any

from ..bridge import (
    IDEMPOTENCY_META_KEY,
    OUTCOME_META_KEY,
    interrupted_message,
    may_have_run_kind,
)

__all__ = [
    "FINAL_KINDS",
    "OUTCOME_META_KEY",
    "final_kind",
    "interrupted_message",
    "keyed_meta",
    "require",
    "tool_call_key",
]

#: The bridge's error kinds (``error.data["kind"]``) of a call that always may have run on
#: the server: an interrupted call (``outcome_unknown``) and one answered under another
#: negotiated context (``context_mismatch``: it ran). Any other kind may have run too when its
#: data says ``mayHaveRun`` (a timed-out call that had been sent). Running such a call again by
#: retrying is what the framework modules prevent.
FINAL_KINDS = frozenset({"outcome_unknown", "context_mismatch"})


def require(module: str, extra: str, framework: str) -> ModuleType:
    """Imports ``module``, or raises ``ModuleNotFoundError`` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"mcp_resume.frameworks needs {framework} for this module: "
            f'pip install "mcp_resume[{extra}]" (missing: {error.name})',
            name=error.name,
        ) from error


def _error_data(error: BaseException) -> Any:
    # `mcp` 1.x `McpError` and 2.x `MCPError` both keep the JSON-RPC error as `.error`.
    return getattr(getattr(error, "error", None), "data", None)


def final_kind(error: BaseException | None) -> str | None:
    """The bridge's kind (``outcome_unknown``, ``context_mismatch``, or another marked
    ``mayHaveRun``) if ``error``, an exception group holding it or one of its causes is the
    error of a call that may have run, else ``None``."""
    seen: set[int] = set()
    stack: list[BaseException] = [error] if error is not None else []
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        kind = may_have_run_kind(_error_data(current))
        if kind is not None:
            return kind
        inner = getattr(current, "exceptions", None)
        if isinstance(inner, tuple):
            stack.extend(e for e in inner if isinstance(e, BaseException))
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)
    return None


def tool_call_key(tool_call_id: str, tool: str) -> str:
    """The idempotency key of one tool invocation: the same id and tool give the same key, so
    a retry of that invocation is deduplicated by a server that honours keys. As unique as the
    framework's tool call ids are (model providers' are per call)."""
    digest = hashlib.sha256(f"{tool}\0{tool_call_id}".encode()).hexdigest()
    return f"tool-call-{digest[:40]}"


def keyed_meta(meta: dict[str, Any] | None, tool_call_id: str | None, tool: str) -> Any:
    """``meta`` with the key of this invocation added, unless it has one already or there is
    no tool call id (a direct call outside an agent run)."""
    if not tool_call_id or (meta is not None and IDEMPOTENCY_META_KEY in meta):
        return meta
    return {**(meta or {}), IDEMPOTENCY_META_KEY: tool_call_key(tool_call_id, tool)}
