//! What the guard asks a store to keep, and what a store answers: the only data that crosses
//! from the rules to I/O. Fields are private: records are made by the guard and read back by
//! stores through serde, so no skin can forge one with a wrong owner or hash.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::ids::{
    ArgumentsDigest, CapabilityHash, ClaimToken, IdempotencyKey, InstanceId, SessionId,
};

/// A legacy-era session as the guard that saw its `initialize` recorded it: the negotiated
/// context's hash and the instance that owns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    session: SessionId,
    owner: InstanceId,
    hash: CapabilityHash,
    protocol_version: String,
}

impl SessionRecord {
    pub(crate) fn new(
        session: SessionId,
        owner: InstanceId,
        hash: CapabilityHash,
        protocol_version: String,
    ) -> Self {
        Self {
            session,
            owner,
            hash,
            protocol_version,
        }
    }

    /// The session.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// The instance whose guard saw the session's `initialize`: the only one that can prove a
    /// resume of its streams.
    pub fn owner(&self) -> &InstanceId {
        &self.owner
    }

    /// The negotiated context's hash.
    pub fn hash(&self) -> &CapabilityHash {
        &self.hash
    }

    /// The negotiated protocol version.
    pub fn protocol_version(&self) -> &str {
        &self.protocol_version
    }
}

/// A request to claim an idempotency key for one execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    key: IdempotencyKey,
    digest: ArgumentsDigest,
    token: ClaimToken,
    lease: Duration,
}

impl Claim {
    /// A claim of `key` for the call whose digest is `digest`, held as `token` for `lease`
    /// at a time (the guard makes these; stores and their tests may too).
    pub fn new(
        key: IdempotencyKey,
        digest: ArgumentsDigest,
        token: ClaimToken,
        lease: Duration,
    ) -> Self {
        Self {
            key,
            digest,
            token,
            lease,
        }
    }

    pub(crate) fn with_token(self, token: ClaimToken) -> Self {
        Self { token, ..self }
    }

    /// The claim of the same key text within `scope` (a client's identity): keys of other
    /// scopes are other keys.
    pub(crate) fn within(self, scope: &[u8]) -> Self {
        Self {
            key: self.key.within(scope),
            ..self
        }
    }

    /// The key.
    pub fn key(&self) -> &IdempotencyKey {
        &self.key
    }

    /// The digest of the call (tool and arguments) the key is claimed for.
    pub fn digest(&self) -> &ArgumentsDigest {
        &self.digest
    }

    /// Who holds the claim if it is granted.
    pub fn token(&self) -> &ClaimToken {
        &self.token
    }

    /// How long the claim holds without a renewal: when it lapses, the holder is taken for
    /// dead and the key's outcome becomes unknown for good.
    pub fn lease(&self) -> Duration {
        self.lease
    }
}

/// What a store answers to a [`Claim`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClaimOutcome {
    /// The key was free, or is already held by this claim's own token (the same claim sent
    /// again): it is held by the claim's token; the call may run.
    Granted,
    /// Another execution of the same call holds the key and its lease is alive.
    InUse,
    /// The key's execution finished: its stored answer.
    Done(StoredOutcome),
    /// The key was claimed for another call (other tool or arguments).
    Mismatch,
    /// The key's holder died (its lease lapsed, or it reported the loss) before storing an
    /// answer: whether the call ran cannot be known, and it never runs again.
    Lost,
}

/// The answer of a finished keyed call, kept under its key: the JSON-RPC response without
/// `jsonrpc` and `id` (`{"result": …}` or `{"error": …}`), re-addressed to whichever request
/// asks again. Kept as JSON text: the answer's members are re-sent as the inner server wrote
/// them (a number beyond 64 bits or a decimal longer than a `f64` holds would not survive a
/// trip through [`Value`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOutcome {
    response: String,
}

impl StoredOutcome {
    /// Reads a stored answer back (stores only): the text [`response`](Self::response) gave.
    pub fn from_stored(response: &str) -> Option<Self> {
        let members: BTreeMap<Cow<'_, str>, &RawValue> = serde_json::from_str(response).ok()?;
        if members.len() != 1 {
            return None;
        }
        Self::from_members(&members)
    }

    /// The answer a JSON-RPC response message carries.
    pub(crate) fn from_response(message: &str) -> Option<Self> {
        let members: BTreeMap<Cow<'_, str>, &RawValue> = serde_json::from_str(message).ok()?;
        Self::from_members(&members)
    }

    /// The one answer member (`result` or `error`, not null) of a message's members.
    fn from_members(members: &BTreeMap<Cow<'_, str>, &RawValue>) -> Option<Self> {
        let member = |name: &str| members.get(name).filter(|v| v.get() != "null");
        let (name, value) = match (member("result"), member("error")) {
            (Some(r), None) => ("result", r),
            (None, Some(e)) => ("error", e),
            _ => return None,
        };
        Some(Self {
            response: format!("{{\"{name}\":{}}}", value.get()),
        })
    }

    /// The stored answer as JSON text (`{"result": …}` or `{"error": …}`).
    pub fn response(&self) -> &str {
        &self.response
    }

    /// The answer as a JSON-RPC response to the request with `id`.
    pub(crate) fn addressed_to(&self, id: &Value) -> String {
        // `response` is `{"result":…}` or `{"error":…}`: the id goes in front of its member.
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},{}", &self.response[1..])
    }
}

/// A store operation the guard asks its skin to run, then to report back.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StoreOp {
    /// Keep a session record (an `initialize` passed); nothing to report.
    PutSession(SessionRecord),
    /// Read a session record; report with [`Exchange::handle_session`](super::Exchange::handle_session).
    LoadSession(SessionId),
    /// Forget a session (a rejected resume, a DELETE); nothing to report.
    ForgetSession(SessionId),
    /// Keep a session's record a full retention from now (the session is in use and its
    /// record was written or touched over half a retention ago, or was just read from the
    /// store, where how long it is still kept is not known); nothing to report. A record the
    /// store no longer holds stays absent.
    TouchSession(SessionId),
    /// Claim a key; report with [`Exchange::handle_claim`](super::Exchange::handle_claim).
    Claim(Claim),
    /// Extend a held claim's lease by `lease` (the call still runs).
    Renew {
        /// The key.
        key: IdempotencyKey,
        /// Its holder.
        token: ClaimToken,
        /// The new lease, from now.
        lease: Duration,
    },
    /// Store a held key's answer: later claims get it.
    Finish {
        /// The key.
        key: IdempotencyKey,
        /// Its holder.
        token: ClaimToken,
        /// The answer.
        outcome: StoredOutcome,
    },
    /// Free a held key: the call provably did not run (the inner server refused it).
    Release {
        /// The key.
        key: IdempotencyKey,
        /// Its holder.
        token: ClaimToken,
    },
    /// Mark a held key lost: the call may have run but its answer cannot be stored.
    MarkLost {
        /// The key.
        key: IdempotencyKey,
        /// Its holder.
        token: ClaimToken,
    },
}
