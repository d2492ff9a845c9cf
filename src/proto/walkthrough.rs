//! A walkthrough, not code: what happens when a resume lands on another instance.
//!
//! The seed scenario: a call's SSE stream is cut by the load balancer after event `s1-3`;
//! the reconnect lands on an instance that does not own the session. Follow it through the
//! pipeline of [`Session`](super::Session):
//!
//! 1. **The cut.** The driver reports [`Session::handle_error`](super::Session::handle_error)
//!    for the call's POST exchange. `session/exchanges/responses.rs` sees an SSE body was
//!    being read and reports the stream's end; the call's cursor (`session/cursors.rs`) holds
//!    `s1-3`, so the failure is `Failure::StreamEnded { event_id_seen: true }`.
//! 2. **The decision.** `session/apply.rs` gathers the call's facts into a
//!    [`State`](super::decide::State) and asks [`decide`](super::decide::decide), which
//!    answers `Decision::Resume`. `apply` arms the call's backoff in the timer table
//!    (`session/timers.rs`), never earlier than the server's `retry`.
//! 3. **The resume.** When the timer fires, `session/outbound.rs` sends a GET with
//!    `Last-Event-ID: s1-3` and remembers, on the exchange, that `s1-4` must come next when
//!    the server advertised sequenced ids.
//! 4. **What the other instance says** is read in one place,
//!    `proto/classify.rs`:
//!    - a strict server answers 404 with the `SESSION_RESUME_REJECTED` body:
//!      `classify::refusal` reads `Refused::Rejected(NotOwner)`;
//!      `session/exchanges/responses.rs` maps it, for a resume, to
//!      `Failure::ResumeRejected(NotOwner)`;
//!    - a replaying server answers 200 under another capability hash:
//!      `session/exchanges/responses.rs` compares it through `classify::hash_matches` →
//!      `Failure::ResumeCapabilityHashChanged`;
//!    - it replays from another stream's log: the cursor sees `s7-1` where `s1-4` was owed →
//!      `Failure::EventGap`; a response to a request never sent → `Failure::OrphanedResponse`;
//!    - it replays nothing and ends cleanly: `Failure::ResumedStreamEnded { clean: true,
//!      progress: false }`, the unverifiable clean end.
//! 5. **The decision again.** Each of these is `Decision::Reinitialize`, with the call's fate
//!    decided by whether re-sending it is provably safe: a keyed call to a server that
//!    deduplicates is re-sent, anything else fails with `OutcomeUnknown`.
//!    `dangerous_trust_replay` is one more fact in the `State`; it changes the decision and
//!    nothing else.
//! 6. **Re-initialization.** `reinit::start_reinit` (the only place that starts one) moves the
//!    lifecycle (`session/lifecycle/`) from `Ready` to `Initializing`, keeping the old
//!    session to compare with; a session that never worked counts as a failed attempt and
//!    backs off. `session/lifecycle/handshake.rs` then runs the handshake without the old id,
//!    reports `SessionEvent::Reinitialized { capabilities_changed }`, re-sends the waiting
//!    calls and reopens the standalone stream.
