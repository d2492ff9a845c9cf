//! The session state machine. (Interface fixed; implementation in progress.)

use std::time::Instant;

use http::HeaderMap;
use serde_json::Value;

use super::config::SessionConfig;
use super::{CallId, CallRequest, HttpId, Output, Transmit, TransportFailure};
use crate::error::RpcError;
use crate::ids::RequestId;

/// The sans-IO MCP client session. See the [module docs](super) for the driver contract.
#[derive(Debug)]
pub struct Session {
    _config: SessionConfig,
}

#[allow(unused_variables)]
impl Session {
    /// Creates an idle session. Nothing is sent until [`Session::connect`].
    pub fn new(config: SessionConfig, now: Instant) -> Self {
        Session { _config: config }
    }

    /// Starts `initialize` (+ `notifications/initialized`, + the GET stream). The returned
    /// call completes with the `initialize` result once the session is ready.
    pub fn connect(&mut self, now: Instant) -> CallId {
        todo!()
    }

    /// Submits a request. Calls submitted before or during (re-)initialization wait for it.
    pub fn submit(&mut self, request: CallRequest, now: Instant) -> CallId {
        todo!()
    }

    /// Sends a notification to the server (best effort; no completion is reported).
    pub fn notify(&mut self, method: &str, params: Option<Value>, now: Instant) {
        todo!()
    }

    /// Answers a server-to-client request.
    pub fn respond(&mut self, id: RequestId, result: Result<Value, RpcError>, now: Instant) {
        todo!()
    }

    /// The app gave up on a call (its future was dropped): POST `notifications/cancelled`
    /// if it may be running, abort its stream, and report nothing more for it.
    pub fn cancel(&mut self, call: CallId, now: Instant) {
        todo!()
    }

    /// Closes the session: fails waiting calls with `Closed` and DELETEs the session. The
    /// returned call completes when the DELETE is answered (405 tolerated).
    pub fn close(&mut self, now: Instant) -> CallId {
        todo!()
    }

    /// The response head of an exchange arrived.
    pub fn handle_head(&mut self, http: HttpId, status: u16, headers: &HeaderMap, now: Instant) {
        todo!()
    }

    /// Body bytes of an exchange arrived (SSE or JSON, per the head's content type).
    pub fn handle_data(&mut self, http: HttpId, data: &[u8], now: Instant) {
        todo!()
    }

    /// The body of an exchange ended cleanly.
    pub fn handle_end(&mut self, http: HttpId, now: Instant) {
        todo!()
    }

    /// An exchange failed at the transport level.
    pub fn handle_error(&mut self, http: HttpId, failure: TransportFailure, now: Instant) {
        todo!()
    }

    /// Time passed: fire expired timers (backoff, deadlines).
    pub fn handle_timeout(&mut self, now: Instant) {
        todo!()
    }

    /// Next network action.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        todo!()
    }

    /// Next output for the app.
    pub fn poll_output(&mut self) -> Option<Output> {
        todo!()
    }

    /// When [`Session::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        todo!()
    }

    /// Whether the session is closed or lost for good (the driver may stop).
    pub fn is_terminated(&self) -> bool {
        todo!()
    }
}
