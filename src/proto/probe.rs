//! Era detection as one pure decision: what an answer to the `server/discover` probe says
//! about the server.
//!
//! Deployed legacy servers answer a sessionless request for a method they do not know in
//! many ways: a 4xx with a JSON-RPC error or plain text, a `200` SSE stream that ends without
//! an event, a `200` with an empty body. A dual-era client that reads any of them as "not
//! legacy" cannot connect at all, so every answer that is not recognisably modern means
//! "legacy: fall back to `initialize`". Some legacy servers answer an unknown method with a
//! 5xx and `initialize` normally: a 5xx from a server that answers at all falls back to
//! `initialize` once (a 2026-07-28 server refuses a legacy `initialize` with a modern error,
//! which is read forward), and only when `initialize` gets no answer either is the probe sent
//! again. An answer that says nothing at all (no connection) is asked again; the probe is
//! read-only, so that is safe.
//!
//! Not every answer that leads to an era says which one the server speaks: a rate limiter's
//! 429, a 401 before a token exists, a firewall's 403 or a 5xx come the same from a server of
//! either era. The era they lead to is used for the connection, and not remembered for the
//! origin ([`says_era`](crate::proto::probe::says_era)): the next client probes again.
//!
//! [`read_probe`](crate::proto::probe::read_probe) is the rule; the session gathers the facts and carries the verdict out.
//! Each row is tested on one line in `tests/core/probe_table.rs`.

use serde_json::Value;

use super::modern::{self, ModernError};
use super::version::ProtocolVersion;
use crate::error::RpcError;

/// Times a handshake retries a revision the server refused while listing it as supported.
pub const MAX_VERSION_RETRIES: u32 = 2;

/// What came back for one `server/discover` probe.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProbeAnswer {
    /// No answer: the connection failed, or broke before the answer was complete.
    Transport,
    /// A non-2xx status, with the JSON-RPC error of its body when the body was one.
    Refused {
        /// The HTTP status.
        status: u16,
        /// The body's JSON-RPC error, if any.
        error: Option<RpcError>,
    },
    /// A 2xx whose body ended without a response to the probe: empty, not JSON-RPC, an SSE
    /// stream with no event or no response to the probe, too large to read, or a content
    /// type that is neither JSON nor SSE.
    NoResponse,
    /// The probe's JSON-RPC result.
    Result(Value),
    /// The probe's JSON-RPC error in a 2xx body.
    Error(RpcError),
}

/// Facts about the handshake the probe belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeFacts {
    /// The era may still be chosen (`Era::Auto`); with `Era::Modern` forced, an answer that
    /// means "legacy" is an error.
    pub may_switch_era: bool,
    /// `initialize` was already refused the way only a modern server refuses it: this probe is
    /// the way forward, and an answer that means "legacy" leaves nowhere to go.
    pub after_modern_refusal: bool,
    /// Probes of this handshake that got no answer, this one included.
    pub unanswered: u32,
    /// [`ReconnectPolicy::max_attempts`](crate::ReconnectPolicy::max_attempts).
    pub max_attempts: u32,
    /// Version refusals already retried in this handshake.
    pub version_retries: u32,
}

impl ProbeFacts {
    /// A first probe under `Era::Auto` with the default limits.
    pub const FIRST: ProbeFacts = ProbeFacts {
        may_switch_era: true,
        after_modern_refusal: false,
        unanswered: 1,
        max_attempts: 10,
        version_retries: 0,
    };

    /// The same facts with the era forced to modern.
    pub const fn forced_modern(self) -> Self {
        ProbeFacts {
            may_switch_era: false,
            ..self
        }
    }

    /// The same facts for the probe sent after `initialize` was refused as modern.
    pub const fn after_modern_refusal(self) -> Self {
        ProbeFacts {
            after_modern_refusal: true,
            ..self
        }
    }

    /// The same facts with `n` unanswered probes.
    pub const fn unanswered(self, n: u32) -> Self {
        ProbeFacts {
            unanswered: n,
            ..self
        }
    }

    /// The same facts with `n` version refusals already retried.
    pub const fn version_retries(self, n: u32) -> Self {
        ProbeFacts {
            version_retries: n,
            ..self
        }
    }
}

/// What the handshake does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProbeVerdict {
    /// A modern server: the session is the modern one.
    Modern,
    /// A modern server refused a revision it lists as supported (a server may refuse a first
    /// request this way): probe again.
    RetryVersion,
    /// A legacy server: send `initialize`, and remember the era for the origin once it works.
    Legacy,
    /// A server that answers but failed the probe (a 5xx): send `initialize` once; if it
    /// gets no answer either, probe again after the backoff delay, within the connect
    /// deadline.
    FallBack,
    /// No answer: probe again after the backoff delay, within the connect deadline.
    Retry,
    /// The handshake fails with what the server said (or, after the retries, what the
    /// network did).
    Report,
}

/// The era-detection rule. Total and pure: the same inputs always give the same verdict.
pub fn read_probe(answer: &ProbeAnswer, facts: &ProbeFacts) -> ProbeVerdict {
    use ProbeVerdict::*;
    let legacy = if facts.may_switch_era && !facts.after_modern_refusal {
        Legacy
    } else {
        Report
    };
    let retry = if facts.unanswered < facts.max_attempts {
        Retry
    } else {
        Report
    };
    match answer {
        ProbeAnswer::Transport => retry,
        ProbeAnswer::Refused { status, .. } if *status >= 500 => match legacy {
            Legacy => FallBack,
            _ => retry,
        },
        ProbeAnswer::Refused {
            status,
            error: Some(error),
        } => match modern::modern_error(error) {
            Some(e) => read_modern_error(&e, facts, legacy),
            // The answer of a modern server that lacks the method, which only counts once
            // `initialize` has shown the server is modern: before that, legacy servers send
            // the same.
            None if *status == 404
                && error.code == modern::METHOD_NOT_FOUND
                && facts.after_modern_refusal =>
            {
                Modern
            }
            None => legacy,
        },
        ProbeAnswer::Refused { error: None, .. } | ProbeAnswer::NoResponse => legacy,
        ProbeAnswer::Error(error) => match modern::modern_error(error) {
            Some(e) => read_modern_error(&e, facts, legacy),
            None => legacy,
        },
        ProbeAnswer::Result(result) if modern::is_discover_result(result) => {
            read_supported(&modern::strings(result.get("supportedVersions")), legacy)
        }
        ProbeAnswer::Result(_) => legacy,
    }
}

/// Refusals that come the same from a server of either era, or from something in front of it:
/// no credentials yet (401, 407), a firewall or a policy (403), a timeout (408), rate limiting
/// (429).
const SAYS_NOTHING: [u16; 5] = [401, 403, 407, 408, 429];

/// Whether `answer` says which era the server speaks, so that the era [`read_probe`] reads
/// from it may be remembered for the origin. Every answer does but no answer at all, a 5xx
/// (a server failing for now), and a 401, 403, 407, 408 or 429 whose body is no modern error.
/// The era those lead to holds for the connection they were met on; the next one probes
/// again.
pub fn says_era(answer: &ProbeAnswer) -> bool {
    match answer {
        ProbeAnswer::Transport => false,
        ProbeAnswer::Refused { status, .. } if *status >= 500 => false,
        ProbeAnswer::Refused { status, error } if SAYS_NOTHING.contains(status) => error
            .as_ref()
            .is_some_and(|e| modern::modern_error(e).is_some()),
        ProbeAnswer::Refused { .. }
        | ProbeAnswer::NoResponse
        | ProbeAnswer::Result(_)
        | ProbeAnswer::Error(_) => true,
    }
}

fn read_modern_error(
    error: &ModernError,
    facts: &ProbeFacts,
    legacy: ProbeVerdict,
) -> ProbeVerdict {
    match error {
        ModernError::UnsupportedVersion { supported }
            if modern::pick_version(supported).is_some() =>
        {
            if facts.version_retries < MAX_VERSION_RETRIES {
                ProbeVerdict::RetryVersion
            } else {
                ProbeVerdict::Report
            }
        }
        ModernError::UnsupportedVersion { supported } => read_supported(supported, legacy),
        // A modern server refused the probe itself: nothing a retry or the other era fixes.
        ModernError::MissingCapability { .. } | ModernError::HeaderMismatch => ProbeVerdict::Report,
    }
}

/// What a server listing `supported` revisions is: modern when it lists one of ours, legacy
/// when it lists only legacy ones we speak, else nothing we can talk to.
fn read_supported(supported: &[String], legacy: ProbeVerdict) -> ProbeVerdict {
    if modern::pick_version(supported).is_some() {
        return ProbeVerdict::Modern;
    }
    let speaks_legacy = supported
        .iter()
        .filter_map(|s| ProtocolVersion::parse(s))
        .any(|v| !v.is_modern());
    if speaks_legacy {
        legacy
    } else {
        ProbeVerdict::Report
    }
}
