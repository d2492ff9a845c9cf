"""Type stubs of the extension module. Use the classes through ``mcp_resume``."""

from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from types import GenericAlias
from typing import Any, Generic, Literal, TypeVar, final

from ._enums import Era, LoggingLevel, ResendPolicy

__version__: str
__all__ = [
    "CallToolResult",
    "Completion",
    "Content",
    "CreateMessageRequest",
    "CreateMessageResult",
    "ElicitRequest",
    "ElicitResult",
    "EraCache",
    "EventStream",
    "ExtensionStatus",
    "GetPromptResult",
    "InitializeResult",
    "ListRootsRequest",
    "MemoryLedger",
    "NotificationStream",
    "OAuth",
    "Page",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "PromptReference",
    "RawBridge",
    "RawClient",
    "RawGuard",
    "RawOutbound",
    "RawStep",
    "ReadResourceResult",
    "ReconnectPolicy",
    "RecoveredCall",
    "Resource",
    "ResourceContents",
    "ResourceTemplate",
    "ResourceTemplateReference",
    "Root",
    "SamplingMessage",
    "ServerNotification",
    "ServerRequest",
    "SessionEvent",
    "Tool",
    "__version__",
    "_panicking",
    "_unpickle",
    "_resolved",
]

_EventType = Literal[
    "connected",
    "listening",
    "listen_stopped",
    "resumed",
    "resume_rejected",
    "reinitialized",
    "redispatched",
    "outcome_unknown",
    "context_mismatch",
    "checks_degraded",
    "era_detected",
    "task_created",
    "task_finished",
    "session_lost",
    "closed",
    "other",
]

@final
class InitializeResult:
    """The server's answer to ``initialize`` (in the modern era: its discovery, shaped
    alike)."""

    @property
    def protocol_version(self) -> str:
        """The protocol version the server chose."""
    @property
    def capabilities(self) -> dict[str, Any]:
        """The server's capabilities, as sent."""
    @property
    def server_name(self) -> str:
        """``serverInfo.name``."""
    @property
    def server_version(self) -> str:
        """``serverInfo.version``."""
    @property
    def instructions(self) -> str | None:
        """Usage instructions for the model, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The whole ``result`` member, as sent (a fresh copy)."""

@final
class Tool:
    """A tool the server offers."""

    @property
    def name(self) -> str:
        """Name to call it by."""
    @property
    def title(self) -> str | None:
        """Human-readable title, if any."""
    @property
    def description(self) -> str | None:
        """Description, if any."""
    @property
    def input_schema(self) -> dict[str, Any]:
        """JSON Schema of the arguments."""
    @property
    def output_schema(self) -> dict[str, Any] | None:
        """JSON Schema of ``structuredContent``, if declared."""
    @property
    def annotations(self) -> dict[str, Any] | None:
        """Behaviour hints (``readOnlyHint``, ``idempotentHint``, …), as sent."""
    @property
    def is_idempotent_hint(self) -> bool:
        """The ``idempotentHint`` annotation (``False`` when absent)."""
    @property
    def is_read_only_hint(self) -> bool:
        """The ``readOnlyHint`` annotation (``False`` when absent)."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """The tool's ``_meta``, if any."""
    @property
    def icons(self) -> list[dict[str, Any]] | None:
        """The tool's ``icons``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The whole tool object, as sent (a fresh copy)."""
    def __eq__(self, value: object, /) -> bool:
        """Equal when the tool objects sent are equal."""
    def __reduce__(self) -> tuple[Any, ...]: ...

@final
class Content:
    """One item of a tool result's ``content``."""

    @property
    def type(self) -> str:
        """``"text"``, ``"image"``, ``"audio"``, ``"resource_link"``, ``"resource"``, or the
        item's own type."""
    @property
    def text(self) -> str | None:
        """The text of a text item, or of an embedded text resource."""
    @property
    def data(self) -> str | None:
        """Base64 data of an image or audio item, or of an embedded binary resource
        (``blob``)."""
    @property
    def mime_type(self) -> str | None:
        """MIME type of an image, audio or resource item."""
    @property
    def uri(self) -> str | None:
        """URI of a ``resource_link`` or ``resource`` item."""
    @property
    def annotations(self) -> dict[str, Any] | None:
        """The item's ``annotations`` (``audience``, ``priority``, ``lastModified``), if any."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """The item's ``_meta``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The item, as sent (a fresh copy)."""
    def __eq__(self, value: object, /) -> bool:
        """Equal when the items sent are equal."""
    def __reduce__(self) -> tuple[Any, ...]: ...

@final
class CallToolResult:
    """The result of ``tools/call``. A tool that failed says so in-band (``is_error``); a
    call that failed raises instead."""

    @property
    def content(self) -> list[Content]:
        """Unstructured result items."""
    @property
    def structured_content(self) -> Any:
        """``structuredContent``, if any, else ``None``."""
    @property
    def is_error(self) -> bool:
        """Whether the tool reported an error (``isError``)."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """The result's ``_meta``, if any."""
    @property
    def text(self) -> str:
        """The text items joined by newlines."""
    def to_dict(self) -> dict[str, Any]:
        """The whole ``result`` member, as sent (a fresh copy)."""
    def __eq__(self, value: object, /) -> bool:
        """Equal when the results sent are equal."""
    def __reduce__(self) -> tuple[Any, ...]: ...

_Item = TypeVar("_Item")

@final
class Page(Generic[_Item]):
    """One page of a ``*/list`` result (``list_tools_page`` and its siblings)."""

    @property
    def items(self) -> list[_Item]:
        """The items of this page."""
    @property
    def next_cursor(self) -> str | None:
        """The cursor of the next page; ``None`` on the last page."""
    def to_dict(self) -> dict[str, Any]:
        """The whole ``result`` member, as sent (a fresh copy)."""
    @classmethod
    def __class_getitem__(cls, item: Any) -> GenericAlias:
        """``Page[Resource]`` in annotations."""

@final
class Resource:
    """A resource the server offers (``resources/list``)."""

    @property
    def uri(self) -> str:
        """Its URI, for ``read_resource``."""
    @property
    def name(self) -> str:
        """Its name."""
    @property
    def title(self) -> str | None:
        """Human-readable title, if any."""
    @property
    def description(self) -> str | None:
        """Description, if any."""
    @property
    def mime_type(self) -> str | None:
        """MIME type, if known."""
    @property
    def size(self) -> int | None:
        """Size in bytes, if known."""
    @property
    def annotations(self) -> dict[str, Any] | None:
        """Usage hints (``audience``, ``priority``, ``lastModified``), as sent."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """``_meta``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The resource object, as sent (a fresh copy)."""

@final
class ResourceTemplate:
    """A family of resources named by an RFC 6570 URI template
    (``resources/templates/list``)."""

    @property
    def uri_template(self) -> str:
        """The URI template, as sent (never expanded)."""
    @property
    def name(self) -> str:
        """Its name."""
    @property
    def title(self) -> str | None:
        """Human-readable title, if any."""
    @property
    def description(self) -> str | None:
        """Description, if any."""
    @property
    def mime_type(self) -> str | None:
        """MIME type of the resources it names, when they share one."""
    @property
    def annotations(self) -> dict[str, Any] | None:
        """Usage hints, as sent."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """``_meta``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The template object, as sent (a fresh copy)."""

@final
class ResourceContents:
    """The contents of a resource, or of one of its parts: text or base64 ``blob``."""

    @property
    def uri(self) -> str:
        """The URI these contents are of."""
    @property
    def mime_type(self) -> str | None:
        """MIME type, if known."""
    @property
    def text(self) -> str | None:
        """The text, for a text resource."""
    @property
    def blob(self) -> str | None:
        """Base64-encoded bytes, for a binary resource."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """``_meta``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The contents object, as sent (a fresh copy)."""

@final
class ReadResourceResult:
    """The result of ``resources/read``."""

    @property
    def contents(self) -> list[ResourceContents]:
        """The contents (one resource may have several parts)."""
    @property
    def text(self) -> str:
        """The text parts joined by newlines."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """The result's ``_meta``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The whole ``result`` member, as sent (a fresh copy)."""

@final
class PromptArgument:
    """One argument of a prompt."""

    @property
    def name(self) -> str:
        """Its name."""
    @property
    def title(self) -> str | None:
        """Human-readable title, if any."""
    @property
    def description(self) -> str | None:
        """Description, if any."""
    @property
    def required(self) -> bool | None:
        """Whether it must be given (``None`` when the server did not say)."""
    def to_dict(self) -> dict[str, Any]:
        """The argument object, as sent (a fresh copy)."""

@final
class Prompt:
    """A prompt template the server offers (``prompts/list``)."""

    @property
    def name(self) -> str:
        """Name to get it by."""
    @property
    def title(self) -> str | None:
        """Human-readable title, if any."""
    @property
    def description(self) -> str | None:
        """Description, if any."""
    @property
    def arguments(self) -> list[PromptArgument]:
        """The arguments it takes."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """``_meta``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The prompt object, as sent (a fresh copy)."""

@final
class PromptMessage:
    """One message of a rendered prompt."""

    @property
    def role(self) -> str:
        """``"user"`` or ``"assistant"``."""
    @property
    def content(self) -> Content:
        """What is said."""
    def to_dict(self) -> dict[str, Any]:
        """The message, as sent (a fresh copy)."""

@final
class GetPromptResult:
    """The result of ``prompts/get``: the rendered prompt."""

    @property
    def description(self) -> str | None:
        """Description of the rendered prompt, if any."""
    @property
    def messages(self) -> list[PromptMessage]:
        """The messages."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """The result's ``_meta``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The whole ``result`` member, as sent (a fresh copy)."""

@final
class Completion:
    """Suggested values for the argument being completed (``completion/complete``)."""

    @property
    def values(self) -> list[str]:
        """The suggestions (at most 100)."""
    @property
    def total(self) -> int | None:
        """How many suggestions exist in all, if known."""
    @property
    def has_more(self) -> bool | None:
        """Whether there are more than these, if the server said."""
    def to_dict(self) -> dict[str, Any]:
        """The ``completion`` member, as sent (a fresh copy)."""

@final
class PromptReference:
    """What ``complete`` completes: an argument of the prompt ``name``."""

    def __new__(cls, name: str) -> PromptReference:
        """The prompt named ``name``."""
    @property
    def name(self) -> str:
        """The prompt's name."""
    def to_dict(self) -> dict[str, Any]:
        """``{"type": "ref/prompt", "name": ...}``."""

@final
class ResourceTemplateReference:
    """What ``complete`` completes: a variable of the resource template ``uri``."""

    def __new__(cls, uri: str) -> ResourceTemplateReference:
        """The resource template whose URI template is ``uri``."""
    @property
    def uri(self) -> str:
        """The URI template."""
    def to_dict(self) -> dict[str, Any]:
        """``{"type": "ref/resource", "uri": ...}``."""

@final
class SamplingMessage:
    """One message of a sampling conversation."""

    @property
    def role(self) -> str:
        """``"user"`` or ``"assistant"``."""
    @property
    def content(self) -> list[Content]:
        """Its content items (one or several; ``tool_use`` and ``tool_result`` items keep
        their own ``type``)."""
    @property
    def text(self) -> str:
        """The text items joined by newlines."""
    def to_dict(self) -> dict[str, Any]:
        """The message, as sent (a fresh copy)."""

@final
class CreateMessageRequest:
    """The server's ``sampling/createMessage`` request: it asks the client's model for a
    message."""

    @property
    def request_id(self) -> int | str:
        """The server's request id."""
    @property
    def messages(self) -> list[SamplingMessage]:
        """The conversation so far."""
    @property
    def max_tokens(self) -> int:
        """The most tokens to generate."""
    @property
    def system_prompt(self) -> str | None:
        """The system prompt the server asks for, if any."""
    @property
    def include_context(self) -> str | None:
        """Which MCP context to include (``none``, ``thisServer``, ``allServers``), if
        given."""
    @property
    def temperature(self) -> float | None:
        """The sampling temperature, if given."""
    @property
    def stop_sequences(self) -> list[str] | None:
        """Stop sequences, if given."""
    @property
    def model_preferences(self) -> dict[str, Any] | None:
        """The server's model preferences, as sent."""
    @property
    def metadata(self) -> Any:
        """Provider-specific metadata, as sent."""
    @property
    def tools(self) -> list[Any] | None:
        """Tools the model may use, as sent."""
    @property
    def tool_choice(self) -> Any:
        """How the model may use them, as sent."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """The params' ``_meta``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The request's params (a fresh copy)."""

@final
class ElicitRequest:
    """The server's ``elicitation/create`` request: it asks the user for information, with
    a form (``requested_schema``) or by sending them to a URL (``url`` mode)."""

    @property
    def request_id(self) -> int | str:
        """The server's request id."""
    @property
    def message(self) -> str:
        """What to tell the user."""
    @property
    def mode(self) -> str | None:
        """``"form"`` or ``"url"``; ``None`` (older servers) means a form."""
    @property
    def requested_schema(self) -> dict[str, Any] | None:
        """The form's JSON Schema, as sent."""
    @property
    def url(self) -> str | None:
        """The URL to send the user to (``url`` mode)."""
    @property
    def elicitation_id(self) -> str | None:
        """The elicitation's id (``url`` mode)."""
    @property
    def is_url_mode(self) -> bool:
        """Whether the server asks the user to visit a URL rather than fill in a form."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """The params' ``_meta``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The request's params (a fresh copy)."""

@final
class ListRootsRequest:
    """The server's ``roots/list`` request: it asks which roots the client exposes."""

    @property
    def request_id(self) -> int | str:
        """The server's request id."""
    @property
    def meta(self) -> dict[str, Any] | None:
        """The params' ``_meta``, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The request's params (``{}``, or its ``_meta``)."""

@final
class CreateMessageResult:
    """The client's answer to ``sampling/createMessage``: an assistant message from
    ``model``."""

    def __new__(
        cls,
        model: str,
        content: str | Mapping[str, Any] | list[Mapping[str, Any]],
        *,
        stop_reason: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> CreateMessageResult:
        """``content`` is text, one content item (``{"type": "image", ...}``), or a list of
        items; ``stop_reason`` is e.g. ``"endTurn"``; ``meta`` becomes ``_meta``."""
    @property
    def model(self) -> str:
        """The model that generated the message."""
    @property
    def stop_reason(self) -> str | None:
        """Why generation stopped, if given."""
    def to_dict(self) -> dict[str, Any]:
        """The answer's JSON, as it will be sent."""

@final
class ElicitResult:
    """The client's answer to ``elicitation/create``."""

    @staticmethod
    def accept(content: Mapping[str, Any] | None = None) -> ElicitResult:
        """The user submitted ``content`` (the form's values; ``None`` for a URL)."""
    @staticmethod
    def decline() -> ElicitResult:
        """The user refused."""
    @staticmethod
    def cancel() -> ElicitResult:
        """The user dismissed the request."""
    @property
    def action(self) -> Literal["accept", "decline", "cancel"]:
        """What the user did."""
    @property
    def content(self) -> dict[str, Any] | None:
        """The submitted values, for an accepted form."""
    def to_dict(self) -> dict[str, Any]:
        """The answer's JSON, as it will be sent."""

@final
class Root:
    """A root the client exposes to the server: a directory or file it may work in."""

    def __new__(cls, uri: str, name: str | None = None) -> Root:
        """A root at ``uri`` (a ``file://`` URI), with an optional human-readable name."""
    @property
    def uri(self) -> str:
        """Its URI."""
    @property
    def name(self) -> str | None:
        """Its name, if any."""
    def to_dict(self) -> dict[str, Any]:
        """The root's JSON, as it will be sent."""

@final
class ServerNotification:
    """A notification from the server (progress, log message, list change, …)."""

    @property
    def call(self) -> int | None:
        """The id of the call whose stream carried it, when known."""
    @property
    def method(self) -> str:
        """The method, e.g. ``"notifications/progress"``."""
    @property
    def params(self) -> Any:
        """The params, as sent (``None`` when absent)."""
    @property
    def progress_token(self) -> str | int | None:
        """``params.progressToken`` of a progress notification."""
    def to_dict(self) -> dict[str, Any]:
        """``{"call": ..., "method": ..., "params": ...}``."""

@final
class ServerRequest:
    """A request from the server the application answers (sampling, elicitation, roots,
    and in the modern era the input requests of a call)."""

    @property
    def id(self) -> int | str:
        """The server's request id; opaque."""
    @property
    def method(self) -> str:
        """The method, e.g. ``"sampling/createMessage"``."""
    @property
    def params(self) -> Any:
        """The params, as sent (``None`` when absent)."""
    def to_dict(self) -> dict[str, Any]:
        """``{"id": ..., "method": ..., "params": ...}``."""

@final
class ExtensionStatus:
    """Which resume-safety checks the server advertised and which are in force."""

    @property
    def advertised(self) -> bool:
        """The server advertised the resume-safety extension."""
    @property
    def capability_hash(self) -> bool:
        """Capability hashes are compared on every response."""
    @property
    def sequenced_event_ids(self) -> bool:
        """Event ids on resumed streams are checked for gaps."""
    @property
    def idempotency(self) -> bool:
        """The server deduplicates keyed tool calls."""
    def to_dict(self) -> dict[str, bool]:
        """The four flags."""

@final
class SessionEvent:
    """Lifecycle news of the session. ``type`` says which; attributes that do not apply
    are ``None``."""

    @property
    def type(self) -> _EventType:
        """Which event this is."""
    @property
    def call(self) -> int | None:
        """The call concerned (``redispatched``, ``outcome_unknown``,
        ``context_mismatch``, tasks)."""
    @property
    def method(self) -> str | None:
        """The call's method (``redispatched``, ``outcome_unknown``)."""
    @property
    def idempotency_key(self) -> str | None:
        """The key a call was re-sent with (``redispatched``)."""
    @property
    def protocol_version(self) -> str | None:
        """The negotiated protocol version (``connected``)."""
    @property
    def last_event_id(self) -> str | None:
        """The cursor presented (``resumed``)."""
    @property
    def reason(self) -> str | None:
        """Why the session was re-initialized (``reinitialized``: ``"session_not_found"``,
        ``"resume_rejected"``, ``"unverifiable_clean_end"``, ``"event_gap"``,
        ``"orphaned_response"``, ``"capability_mismatch"``, ``"version_refused"``), what
        is missing (``checks_degraded``), or why the client stopped opening the stream of
        server messages (``listen_stopped``: ``"gave_up"``, ``"refused"``,
        ``"unauthorized"``)."""
    @property
    def attempts(self) -> int | None:
        """Consecutive failed attempts (``listen_stopped`` with ``reason`` ``"gave_up"``)."""
    @property
    def reject_reason(self) -> str | None:
        """The server's reason for rejecting a resume (``"unknown_session"``,
        ``"not_owner"``, ``"event_gap"``, ``"orphaned_request"``,
        ``"capability_mismatch"``, or its own), when it gave one."""
    @property
    def capabilities_changed(self) -> bool | None:
        """Whether version, server capabilities or capability hash changed
        (``reinitialized``)."""
    @property
    def status(self) -> ExtensionStatus | None:
        """The checks in force now (``checks_degraded``)."""
    @property
    def era(self) -> Era | None:
        """The era found (``era_detected``)."""
    @property
    def task_id(self) -> str | None:
        """The server's task id (``task_created``, ``task_finished``)."""
    @property
    def detail(self) -> str | None:
        """The event as the SDK prints it (``other`` only)."""
    def to_dict(self) -> dict[str, Any]:
        """``type`` and the attributes that apply."""

@final
class ReconnectPolicy:
    """Reconnect delays and caps. Every argument defaults to the SDK's default (20 ms
    initial delay, ×2, 10 s cap, 20 % jitter, 10 attempts, 3 resumes without progress, 5
    re-initialization failures); the policy is checked when it is made."""

    def __new__(
        cls,
        *,
        initial_delay: float | None = None,
        multiplier: float | None = None,
        max_delay: float | None = None,
        jitter: float | None = None,
        max_attempts: int | None = None,
        max_resumes_without_progress: int | None = None,
        max_reinit_failures: int | None = None,
    ) -> ReconnectPolicy:
        """Raises ``InvalidConfigError`` for values that make reconnection meaningless."""
    @property
    def initial_delay(self) -> float:
        """First delay in seconds when the server named none (its ``retry`` takes this
        place)."""
    @property
    def multiplier(self) -> float:
        """Growth factor per attempt."""
    @property
    def max_delay(self) -> float:
        """Largest delay in seconds before jitter."""
    @property
    def jitter(self) -> float:
        """Jitter added on top, as a fraction of the delay."""
    @property
    def max_attempts(self) -> int:
        """Attempts to reach the server for one call or stream before it fails."""
    @property
    def max_resumes_without_progress(self) -> int:
        """Resumes of one stream delivering nothing new before it counts as an
        unverifiable clean end."""
    @property
    def max_reinit_failures(self) -> int:
        """Consecutive failed re-initializations after which, with no call waiting,
        the client stops trying (the next call reconnects); waiting calls end at their
        own deadlines with ``SessionLostError``."""

@final
class EraCache:
    """Which era each origin was found to speak, shared by the clients given the same
    cache."""

    def __new__(cls) -> EraCache:
        """An empty cache of its own."""
    @staticmethod
    def global_cache() -> EraCache:
        """The process-wide cache every client uses unless given another."""
    def get(self, url: str) -> Era | None:
        """The era ``url``'s origin was found to speak, if known."""
    def remember(self, url: str, era: Era | str) -> None:
        """Records that ``url``'s origin speaks ``era`` (restoring a persisted answer)."""
    def clear(self) -> None:
        """Forgets every origin."""

@final
class EventStream:
    """Session events, from ``Client.events()``."""

    def __aiter__(self) -> EventStream: ...
    def __anext__(self) -> Awaitable[SessionEvent]: ...
    @property
    def missed(self) -> int:
        """Events this subscriber lost because it fell more than 256 behind."""

@final
class NotificationStream:
    """Server notifications, from ``Client.notifications()``."""

    def __aiter__(self) -> NotificationStream: ...
    def __anext__(self) -> Awaitable[ServerNotification]: ...
    @property
    def missed(self) -> int:
        """Notifications this subscriber lost because it fell more than 256 behind."""

@final
class OAuth:
    """How a client gets its tokens by MCP authorization (the SDK's OAuth provider):
    discovery from the server's 401, dynamic client registration, PKCE, refresh, step-up.

    The grants without a user take ``issuer``, the authorization server their credentials
    belong to, and send them nowhere else: without it, whichever authorization server the
    MCP server names would receive the client secret, the workload token or the identity
    assertion grant. Leaving it out raises ``InvalidConfigError`` unless
    ``dangerous_trust_discovered_issuer=True``."""

    @staticmethod
    def client_credentials(
        client_id: str,
        client_secret: str,
        *,
        issuer: str | None = None,
        dangerous_trust_discovered_issuer: bool = False,
        scopes: list[str] | None = None,
        dpop: bool = False,
    ) -> OAuth:
        """A machine client, no user: the client credentials grant, at ``issuer`` only.
        ``dpop=True`` (every constructor): DPoP-bound tokens with a key generated for the
        process, where the authorization server issues them."""
    @staticmethod
    def authorization_code(
        authorize: Callable[[str], Awaitable[str] | str],
        *,
        redirect_uri: str | None = None,
        client_name: str | None = None,
        scopes: list[str] | None = None,
        dpop: bool = False,
    ) -> OAuth:
        """A user's authorization: ``authorize`` gets the authorization URL and returns the
        URL the authorization server redirected to (run on the client's event loop). The
        URL is the authorization endpoint of the authorization server the MCP server named,
        not one the application chose: open it in the user's browser, never fetch it with
        the application's own credentials. The answer arrives at ``redirect_uri`` with a
        segment naming that authorization server appended to its path: return the URL it
        arrived at, whatever the path (an answer meant for another server is refused)."""
    @staticmethod
    def workload_identity(
        client_id: str,
        token: str,
        *,
        issuer: str | None = None,
        dangerous_trust_discovered_issuer: bool = False,
        scopes: list[str] | None = None,
        dpop: bool = False,
    ) -> OAuth:
        """Workload identity federation: the jwt-bearer grant with the workload's token, as
        the public client ``client_id``, at ``issuer`` only."""
    @staticmethod
    def identity_assertion(
        client_id: str,
        client_secret: str,
        idp_token_endpoint: str,
        id_token: str,
        *,
        issuer: str | None = None,
        dangerous_trust_discovered_issuer: bool = False,
        idp_client_id: str | None = None,
        scopes: list[str] | None = None,
        dpop: bool = False,
    ) -> OAuth:
        """Enterprise-managed authorization: ``id_token`` exchanged at the IdP for an
        identity assertion grant for ``issuer``, presented there in the jwt-bearer grant by
        the client."""

@final
class RawBridge:
    """The Rust SDK's message bridge: JSON-RPC messages in and out as dicts, an mcp-resume
    session in between; see ``mcp_resume.bridge.streamablehttp_client``."""

    def __new__(
        cls,
        client: RawClient,
        *,
        trust_tool_annotations: bool = False,
        capacity: int | None = None,
    ) -> RawBridge: ...
    def send(self, message: Mapping[str, Any]) -> Awaitable[None]: ...
    def recv(self) -> Awaitable[dict[str, Any] | None]: ...
    def close(self) -> Awaitable[None]: ...
    def session_id(self) -> str | None: ...

_Headers = Iterable[tuple[bytes, bytes]] | Iterable[list[bytes]]
_HeadOut = tuple[int, list[tuple[bytes, bytes]]]
_Sent = tuple[_HeadOut | None, bytes, Literal["complete", "abort"] | None]

@final
class RawGuard:
    """The resume-safety guard of one process and its store; see
    ``mcp_resume.server.ResumeSafetyMiddleware``."""

    def __new__(
        cls,
        *,
        store: str | None = None,
        instance_id: str | None = None,
        max_body: int | None = None,
        lease: float | None = None,
        resume_checks: bool | None = None,
        idempotency: bool | None = None,
        retry_after: float | None = None,
        key_scope_header: str | None = None,
        seed: int | None = None,
    ) -> RawGuard: ...
    @property
    def instance_id(self) -> str: ...
    def begin(self, method: str, headers: _Headers) -> RawStep | Awaitable[RawStep]: ...

@final
class RawStep:
    """What the middleware does next with a request."""

    @property
    def kind(self) -> Literal["read_body", "pass", "forward", "answer"]: ...
    @property
    def limit(self) -> int: ...
    @property
    def last_event_id(self) -> bytes | None: ...
    def take_outbound(self) -> RawOutbound | None: ...
    def take_answer(self) -> _Sent | None: ...
    def body(self, data: bytes | None) -> RawStep | Awaitable[RawStep]: ...

@final
class RawOutbound:
    """One response on its way out; each step returns what to send now."""

    def head(self, status: int, headers: _Headers) -> _Sent | Awaitable[_Sent]: ...
    def body(self, chunk: bytes) -> _Sent | Awaitable[_Sent]: ...
    def end(self, clean: bool) -> _Sent | Awaitable[_Sent]: ...
    @property
    def must_drain(self) -> bool: ...
    @property
    def keyed(self) -> bool: ...
    @property
    def untouched(self) -> bool: ...
    def close(self) -> None: ...

@final
class MemoryLedger:
    """A ledger of calls in flight in memory, shared by the clients given it: a client that
    replaces another in this process picks up its calls with ``recover()``. It does not
    survive the process (a Redis ledger does)."""

    def __new__(cls) -> MemoryLedger: ...
    def __len__(self) -> int:
        """The number of entries held."""

@final
class RecoveredCall:
    """A call ``Client.recover()`` picked up: what its ledger entry says, and (awaited) its
    outcome: a ``CallToolResult`` for a ``tools/call``, the raw result otherwise. An unkeyed
    call that may have run raises ``OutcomeUnknownError`` at once, never re-sent. Dropped
    before its outcome was awaited, it is not cancelled: it comes back from the next
    ``Client.recover()``."""

    @property
    def entry_id(self) -> str:
        """The ledger entry's id."""
    @property
    def method(self) -> str:
        """The JSON-RPC method."""
    @property
    def params(self) -> dict[str, Any] | None:
        """The params of its request, as recorded."""
    @property
    def tool_name(self) -> str | None:
        """For a ``tools/call``, the tool's name."""
    @property
    def arguments(self) -> Any:
        """For a ``tools/call``, the tool's arguments."""
    @property
    def idempotency_key(self) -> str | None:
        """The call's own idempotency key, if it had one."""
    @property
    def stage(self) -> Literal["sent", "awaiting_input", "task"]:
        """Where it stood when its process stopped."""
    @property
    def task_id(self) -> str | None:
        """The task it became, for stage ``"task"``."""
    @property
    def deadline(self) -> float:
        """The call's deadline, in seconds since the Unix epoch."""
    def __await__(self) -> Generator[Any, None, Any]: ...

@final
class RawClient:
    """The low-level client behind ``mcp_resume.Client``; its methods return awaitables
    bound to the running event loop."""

    def __new__(
        cls,
        url: str,
        *,
        capabilities: Mapping[str, Any] | None = None,
        client_info: tuple[str, str] | None = None,
        protocol_version: str | None = None,
        era: Era | str | None = None,
        era_cache: EraCache | None = None,
        bearer_token: str | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        call_timeout: float | None = None,
        connect_timeout: float | None = None,
        reconnect: ReconnectPolicy | None = None,
        resend_policy: ResendPolicy | str | None = None,
        max_event_size: int | None = None,
        max_body_size: int | None = None,
        open_listen_stream: bool | None = None,
        jitter_seed: int | None = None,
        on_server_request: Any = None,
        on_sampling: Any = None,
        on_elicitation: Any = None,
        on_roots: Any = None,
        token_provider: Any = None,
        oauth: OAuth | None = None,
        ledger: MemoryLedger | str | None = None,
        ledger_identity: str | None = None,
        record_session_ids: bool | None = None,
        otlp_endpoint: str | None = None,
    ) -> RawClient: ...
    def connect(self) -> Awaitable[InitializeResult]: ...
    def list_tools(self) -> Awaitable[list[Tool]]: ...
    def list_tools_page(self, cursor: str | None = None) -> Awaitable[Page[Tool]]: ...
    def list_resources(self) -> Awaitable[list[Resource]]: ...
    def list_resources_page(self, cursor: str | None = None) -> Awaitable[Page[Resource]]: ...
    def list_resource_templates(self) -> Awaitable[list[ResourceTemplate]]: ...
    def list_resource_templates_page(
        self, cursor: str | None = None
    ) -> Awaitable[Page[ResourceTemplate]]: ...
    def read_resource(self, uri: str) -> Awaitable[ReadResourceResult]: ...
    def subscribe_resource(self, uri: str) -> Awaitable[None]: ...
    def unsubscribe_resource(self, uri: str) -> Awaitable[None]: ...
    def list_prompts(self) -> Awaitable[list[Prompt]]: ...
    def list_prompts_page(self, cursor: str | None = None) -> Awaitable[Page[Prompt]]: ...
    def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None
    ) -> Awaitable[GetPromptResult]: ...
    def complete(
        self,
        ref: PromptReference | ResourceTemplateReference | Mapping[str, Any],
        argument_name: str,
        argument_value: str,
        *,
        context: Mapping[str, str] | None = None,
    ) -> Awaitable[Completion]: ...
    def set_logging_level(self, level: LoggingLevel | str) -> Awaitable[None]: ...
    def notify_roots_changed(self) -> Awaitable[None]: ...
    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: Any = None,
        timeout: float | None = None,
        progress: str | int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Awaitable[CallToolResult]: ...
    def request(self, method: str, params: Any = None) -> Awaitable[Any]: ...
    def notify(self, method: str, params: Any = None) -> Awaitable[None]: ...
    def ping(self) -> Awaitable[None]: ...
    def resume_task(self, task_id: str, *, timeout: float | None = None) -> Awaitable[Any]: ...
    def recover(self) -> Awaitable[list[RecoveredCall]]: ...
    def close(self) -> Awaitable[None]: ...
    @property
    def era(self) -> Era | None: ...
    @property
    def extension_status(self) -> ExtensionStatus | None: ...
    @property
    def url(self) -> str: ...
    def events(self) -> EventStream: ...
    def notifications(self) -> NotificationStream: ...
    server_request_handler: Any
    sampling_handler: Any
    elicitation_handler: Any
    roots_handler: Any

_T = TypeVar("_T")

def _unpickle(cls: str, raw: dict[str, Any]) -> Any:
    """Rebuilds a pickled ``Tool``, ``Content`` or ``CallToolResult`` from its JSON."""

def _panicking() -> Awaitable[None]:
    """An awaitable whose Rust future panics: it fails with ``RuntimeError``."""

def _resolved(value: _T) -> Awaitable[_T]:
    """Resolves to ``value`` on the runtime: the bridge between asyncio and tokio alone."""

def _bench_rust_calls(url: str, calls: int, concurrency: int) -> Awaitable[float]:
    """Only in builds with the ``bench`` feature."""
