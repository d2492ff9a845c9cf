"""mcp_resume: a resume-aware Model Context Protocol client for asyncio.

Backed by the ``mcp-resume`` Rust SDK: the same recovery rules (a replayed stream is never
taken for a resumed session; only calls that are provably safe are re-sent; every other
interrupted call raises ``OutcomeUnknownError``), on a tokio runtime the extension owns.

    import asyncio
    from mcp_resume import Client

    async def main() -> None:
        async with Client("http://127.0.0.1:8080/mcp") as client:
            for tool in await client.list_tools():
                print(tool.name)
            result = await client.call_tool("echo", {"text": "hi"})
            print(result.text)

    asyncio.run(main())
"""

from ._client import (
    Client,
    ElicitationHandler,
    RootsHandler,
    SamplingHandler,
    ServerRequestHandler,
    TokenProvider,
)
from ._enums import Era, LoggingLevel, ResendPolicy
from ._errors import (
    ClosedError,
    ContextMismatchError,
    InvalidConfigError,
    LedgerError,
    McpResumeError,
    McpTimeoutError,
    MissingCapabilityError,
    OutcomeUnknownError,
    ProtocolError,
    RpcError,
    SessionLostError,
    TooLargeError,
    TransportError,
    UnauthorizedError,
)
from ._mcp_resume import (
    CallToolResult,
    Completion,
    Content,
    CreateMessageRequest,
    CreateMessageResult,
    ElicitRequest,
    ElicitResult,
    EraCache,
    EventStream,
    ExtensionStatus,
    GetPromptResult,
    InitializeResult,
    ListRootsRequest,
    MemoryLedger,
    NotificationStream,
    OAuth,
    Page,
    Prompt,
    PromptArgument,
    PromptMessage,
    PromptReference,
    ReadResourceResult,
    ReconnectPolicy,
    RecoveredCall,
    Resource,
    ResourceContents,
    ResourceTemplate,
    ResourceTemplateReference,
    Root,
    SamplingMessage,
    ServerNotification,
    ServerRequest,
    SessionEvent,
    Tool,
    __version__,
)

__all__ = [
    "CallToolResult",
    "Client",
    "ClosedError",
    "Completion",
    "Content",
    "ContextMismatchError",
    "CreateMessageRequest",
    "CreateMessageResult",
    "ElicitRequest",
    "ElicitResult",
    "ElicitationHandler",
    "Era",
    "EraCache",
    "EventStream",
    "ExtensionStatus",
    "GetPromptResult",
    "InitializeResult",
    "InvalidConfigError",
    "LedgerError",
    "ListRootsRequest",
    "LoggingLevel",
    "McpResumeError",
    "McpTimeoutError",
    "MemoryLedger",
    "MissingCapabilityError",
    "NotificationStream",
    "OAuth",
    "OutcomeUnknownError",
    "Page",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "PromptReference",
    "ProtocolError",
    "ReadResourceResult",
    "ReconnectPolicy",
    "RecoveredCall",
    "ResendPolicy",
    "Resource",
    "ResourceContents",
    "ResourceTemplate",
    "ResourceTemplateReference",
    "Root",
    "RootsHandler",
    "RpcError",
    "SamplingHandler",
    "SamplingMessage",
    "ServerNotification",
    "ServerRequest",
    "ServerRequestHandler",
    "TokenProvider",
    "SessionEvent",
    "SessionLostError",
    "TooLargeError",
    "Tool",
    "TransportError",
    "UnauthorizedError",
    "__version__",
]
