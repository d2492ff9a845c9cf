//! JSON-RPC method names the core sends or recognizes.

/// Opens a session.
pub const INITIALIZE: &str = "initialize";
/// Confirms the session after `initialize`.
pub const INITIALIZED: &str = "notifications/initialized";
/// Liveness check, answered by the core itself when the server asks.
pub const PING: &str = "ping";
/// Calls a tool: the one request that carries an idempotency key.
pub const TOOLS_CALL: &str = "tools/call";
/// Lists tools.
pub const TOOLS_LIST: &str = "tools/list";
/// Cancels a request the other side sent.
pub const CANCELLED: &str = "notifications/cancelled";
/// Progress of a request that asked for it with a `progressToken`.
pub const PROGRESS: &str = "notifications/progress";
/// Opens the modern era's stream of change notifications.
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
/// The server's acknowledgement that opens a `subscriptions/listen` stream.
pub const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
/// Polls a task (tasks extension).
pub const TASKS_GET: &str = "tasks/get";
/// Answers a task's input requests (tasks extension).
pub const TASKS_UPDATE: &str = "tasks/update";
/// Asks the server to cancel a task (tasks extension).
pub const TASKS_CANCEL: &str = "tasks/cancel";
