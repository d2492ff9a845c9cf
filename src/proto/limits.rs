//! The core's bounds on what a server can make it hold or do, in one place. Not part of the
//! compatibility promise: a release may move any of them.

/// Delivered ids remembered; the oldest are forgotten first. A replay reaching further back
/// than this is delivered again (bounded memory wins over perfect recall of an unbounded log).
pub const MAX_REMEMBERED_EVENT_IDS: usize = 4096;

/// Answers to server requests in flight at once. A server that floods a stream with requests
/// (`ping`, sampling) must not make the client open a connection per request.
pub const MAX_ANSWERS_IN_FLIGHT: usize = 8;

/// Answers queued behind those in flight; past this they are dropped (counted and logged):
/// the server gets no answer, which it must tolerate anyway from a client that went away.
pub const MAX_QUEUED_ANSWERS: usize = 256;

/// Tools whose `x-mcp-header` annotations a session remembers (2026-07-28): a server whose
/// lists keep naming new tools must not make the memory grow without end.
pub const MAX_ANNOTATED_TOOLS: usize = 4096;

/// Server requests the app may hold unanswered at once; past this a request is answered with
/// an error at once. Their ids are the server's: the set of them must stay bounded.
pub const MAX_OPEN_SERVER_REQUESTS: usize = 1024;

/// MRTR rounds one call may go through before it fails: a server that keeps asking must not
/// keep a call (and its handlers) busy forever.
pub const MAX_INPUT_ROUNDS: u32 = 16;

/// Inputs one MRTR round may ask for: each runs an app handler (a sampling request costs a
/// model call), so a round asking for more fails the call before any handler runs. This is
/// what bounds the handlers a call's inputs run at once: the tokio driver does not count them
/// against its bound on a legacy server's own requests (32), which refuses what is past it and
/// would fail a round half-answered.
pub const MAX_INPUTS_PER_ROUND: usize = 16;

/// Notifications the app sent before the session was ready, or while as many as
/// [`MAX_NOTIFICATIONS_IN_FLIGHT`] are being POSTed, held until they can go; past this they
/// are dropped (logged).
pub const MAX_QUEUED_NOTIFICATIONS: usize = 1024;

/// The app's notifications POSTed at once: an app that sends them faster than the server
/// takes them must not make the client open a connection per notification.
pub const MAX_NOTIFICATIONS_IN_FLIGHT: usize = 8;
