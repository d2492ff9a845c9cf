//! Checkpoints ([`crate::proto::checkpoint`]): a call's durable state reported as it changes,
//! and a call picked up from one another process left.

use std::time::Instant;

use serde_json::{json, Value};
use tracing::debug;

use super::{Call, CallState, RESERVED_KEY};
use crate::proto::checkpoint::{is_read_only, CallStage, Checkpoint};
use crate::proto::session::timers::Timer;
use crate::proto::session::Session;
use crate::proto::{CallId, Output, ResendPolicy};

/// Why a picked-up call under a key with a space at an edge is not sent again.
const EDGED_KEY: &str = "the process that sent it stopped before its answer came, \
     and its idempotency key begins or ends with a space, which no send keeps";

/// Whether picking `checkpoint` up would send a request under its key, or a round's key
/// derived from it, when that key begins or ends with a space (an older release's: HTTP
/// strips the header's, so the server would see one key in the header and another in the
/// body). A task is only polled, under no key.
fn sends_under_edged_key(checkpoint: &Checkpoint) -> bool {
    let edged = checkpoint
        .idempotency_key
        .as_ref()
        .is_some_and(|k| k.as_str().starts_with(' ') || k.as_str().ends_with(' '));
    edged && !matches!(checkpoint.stage, CallStage::Task { .. })
}

impl Session {
    /// Call `call`'s durable state as of now; `None` for a call this session does not have,
    /// one it makes for itself, or one of a read-only method (those get no checkpoints).
    #[must_use]
    pub fn checkpoint(&self, call: CallId) -> Option<Checkpoint> {
        let sending = self.calls.get(call)?.sends() == 0;
        self.checkpoint_of(call, sending)
    }

    /// Call `call`'s durable state; `sending` when it is written before a send, which goes
    /// to this session's server (else the last send's server is the one that counts). The
    /// application may say a server keeps keys without advertising it.
    fn checkpoint_of(&self, call: CallId, sending: bool) -> Option<Checkpoint> {
        let c = self.calls.get(call)?;
        if !gets_checkpoints(c) {
            return None;
        }
        let checkpoint = c.checkpoint(self.life.era(), self.session_id().cloned());
        let dedups = (if sending {
            self.life.ready().is_some_and(|s| s.dedups())
        } else {
            checkpoint.server_dedups
        }) || self.config.resend_policy == ResendPolicy::AssumeServerDeduplicates;
        Some(checkpoint.with_server_dedups(dedups))
    }

    /// Picks up, as call `id`, a call another process left in flight, from its last
    /// checkpoint; `checkpoint.deadline` bounds it here. By the rule that governs every
    /// interruption:
    ///
    /// - [`CallStage::Sent`]: its request may have run. With an idempotency key that the
    ///   server it was sent to kept ([`Checkpoint::server_dedups`]), it is re-sent
    ///   under that key (the round's, for an MRTR round) once the session is established,
    ///   if the server deduplicates keys (or the application said it does:
    ///   [`ResendPolicy::AssumeServerDeduplicates`](crate::ResendPolicy)), and reported
    ///   [`SessionEvent::Redispatched`](crate::SessionEvent::Redispatched); otherwise it
    ///   fails [`ErrorKind::OutcomeUnknown`](crate::error::ErrorKind::OutcomeUnknown), unkeyed
    ///   ones at once, without connecting; so does one whose key ends in `.round<n>`
    ///   (reserved, see [`Session::submit`]), which a deduplicating server could answer with
    ///   another call's round, and one whose key begins or ends with a space (which an older
    ///   release took, and [`IdempotencyKey::new`](crate::ids::IdempotencyKey::new) refuses
    ///   now: HTTP strips it from the header, so no send of it could be deduplicated). So
    ///   does a round awaiting its inputs under such a key, whose round's key derives from it.
    /// - [`CallStage::AwaitingInput`]: the round was never sent. The server's input requests
    ///   go to the application again ([`Output::ServerRequest`]), and the round is sent once
    ///   they are answered.
    /// - [`CallStage::Task`]: polled (`tasks/get`) until the task ends.
    ///
    /// Whatever happens, the call completes exactly once, as any other. An id already in use
    /// is refused (nothing is sent, nothing reported).
    pub fn pick_up(&mut self, id: CallId, mut checkpoint: Checkpoint, now: Instant) {
        if self.refuse(id, "pick-up") {
            return;
        }
        if self.config.resend_policy == ResendPolicy::AssumeServerDeduplicates {
            // The application says the server keeps keys, advertised or not.
            checkpoint.server_dedups = true;
        }
        let deadline = checkpoint.deadline;
        let awaiting = match &checkpoint.stage {
            CallStage::AwaitingInput {
                request_state,
                input_requests,
                ..
            } => {
                let mut result = json!({
                    "resultType": "input_required",
                    "inputRequests": input_requests,
                });
                if let Some(state) = request_state {
                    result["requestState"] = Value::String(state.clone());
                }
                Some(result)
            }
            _ => None,
        };
        debug!(call = id.0, stage = checkpoint.stage.as_str(), method = %checkpoint.method, "picking a call up");
        let edged = sends_under_edged_key(&checkpoint);
        let call = Call::picked_up(checkpoint, deadline);
        // Sent by another process where its key protects nothing (unkeyed, or to a server
        // that did not deduplicate keys): a send may repeat it even to a server that keeps keys.
        // Under a reserved key (an older release's), a send may be answered with another
        // call's result; under a key with a space at an edge (an older release's too), a send
        // reaches the server as two keys, header and body, and cannot be deduplicated
        // against the run it may have had.
        let unprotected = call
            .repeat_risk(true)
            .or_else(|| call.resends_reserved_key().then_some(RESERVED_KEY))
            .or_else(|| edged.then_some(EDGED_KEY));
        self.calls.insert(id, call);
        self.timers.set(Timer::CallDeadline(id), deadline);
        if let Some(why) = unprotected {
            // Nothing can make a second send of it safe: reported at once.
            return self.unsafe_to_repeat(id, why);
        }
        if let Some(result) = awaiting {
            self.input_required(id, result, now);
        }
        if self.life.ready().is_some() {
            if self
                .calls
                .get(id)
                .is_some_and(|c| c.state() == CallState::Waiting)
            {
                self.send_call(id);
            }
        } else {
            // A round awaiting its inputs is sent once they are in: the session must be
            // established by then.
            self.start_if_stopped(now);
        }
    }

    /// Reports call `id`'s durable state, when the session makes checkpoints and the call
    /// gets them; `sending` when a send to this session's server follows.
    pub(in crate::proto::session) fn note_checkpoint(&mut self, id: CallId, sending: bool) {
        if !self.config.checkpoints {
            return;
        }
        if let Some(checkpoint) = self.checkpoint_of(id, sending) {
            self.outputs.push_back(Output::Checkpoint {
                call: id,
                checkpoint: Box::new(checkpoint),
            });
        }
    }
}

/// Whether `call` gets checkpoints: the application's, of a method that may change
/// something.
fn gets_checkpoints(call: &Call) -> bool {
    call.serves().is_none() && !is_read_only(call.method())
}
