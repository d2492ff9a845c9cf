//! [`LedgerEntry`]: one call's record, and its stored form (versioned JSON).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::error::{Error, ErrorKind};
use crate::ids::{EventId, IdempotencyKey, SessionId};
use crate::proto::limits::MAX_INPUT_ROUNDS;
use crate::proto::{CallStage, Checkpoint, Era};

/// How long the record of a call that became a task is kept, past the call's own deadline:
/// a task may run far longer than anyone waits for it, and a new process polls it again.
pub const TASK_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// The stored form's version: a reader refuses any other.
const FORMAT: u64 = 1;
/// The longest id accepted when read back.
pub(crate) const MAX_ID_LEN: usize = 128;

/// Names one entry: unique across processes (a per-process random prefix and a counter), and
/// the same for the whole life of its call, across every write and every pick-up. A task
/// polled by its id alone (`Client::resume_task`) has an entry named after the task instead,
/// which each call polling it writes: one entry per task.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(Arc<str>);

impl EntryId {
    /// A fresh id.
    pub(crate) fn fresh() -> Self {
        static PREFIX: OnceLock<String> = OnceLock::new();
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let prefix = PREFIX.get_or_init(|| {
            let mut simple = uuid::Uuid::new_v4().simple().to_string();
            simple.truncate(16);
            simple
        });
        // Built by hand on the stack, then one allocation: `format!` costs a call several
        // hundred instructions, and every call recorded makes one.
        let mut n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut buf = [0u8; 64];
        let mut end = buf.len();
        loop {
            end -= 1;
            buf[end] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        end -= 1;
        buf[end] = b'-';
        let start = end - prefix.len();
        buf[start..end].copy_from_slice(prefix.as_bytes());
        // Hex digits, a dash and decimal digits: ASCII.
        let text = std::str::from_utf8(&buf[start..]).unwrap_or("entry");
        EntryId(Arc::from(text))
    }

    /// The id of task `task_id`'s entry at `endpoint` (a task resumed by id, left behind
    /// where only tasks are written, or a call's entry once the call became the task): the
    /// same in every process, so that each write for the task replaces the last and the ledger holds one
    /// entry per task, not one per attempt to poll it. Never equal to a fresh id (those
    /// start with hex digits), and the stable digest entries use elsewhere ([`fnv1a64`]) of
    /// the endpoint's and the task's: task ids are the server's and as long as it likes.
    pub(crate) fn of_task(endpoint: &EntryEndpoint, task_id: &str) -> Self {
        let named = fnv1a64(&format!("{}\n{task_id}", endpoint.digest));
        EntryId(Arc::from(format!("task-{named}")))
    }

    /// An id read back from storage: 1 to 128 visible ASCII characters.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let valid = !text.is_empty()
            && text.len() <= MAX_ID_LEN
            && text.bytes().all(|b| b.is_ascii_graphic());
        if valid {
            Ok(EntryId(text.into()))
        } else {
            Err(malformed(
                "an entry id must be 1 to 128 visible ASCII characters",
            ))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EntryId({})", self.0)
    }
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One call's record in a [`Ledger`](super::Ledger): what was asked (method, params,
/// idempotency key), where it stands ([`CallStage`]), and until when it matters.
///
/// What it holds is what a new process needs and no more: the endpoint without its query
/// string or user info (its path is kept) and a digest of the whole URL, never a token or a
/// header; the session id only when the application
/// asked for it ([`ClientBuilder::record_session_ids`](crate::ClientBuilder::record_session_ids)).
/// The params are kept as sent, so that a keyed call can be re-sent and an unkeyed one
/// reported with its arguments: tool arguments that are secrets are written as they are.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LedgerEntry {
    id: EntryId,
    endpoint: Arc<str>,
    /// A digest of the whole URL, which entries are matched to clients by; `None` in an
    /// entry written before entries carried one (never picked up: whose it is is unknown).
    endpoint_digest: Option<Arc<str>>,
    method: String,
    params: Option<Value>,
    idempotency_key: Option<IdempotencyKey>,
    stage: CallStage,
    era: Option<Era>,
    session_id: Option<SessionId>,
    last_event_id: Option<EventId>,
    /// The server it was sent to deduplicates keyed calls (only then may a new process send
    /// it again under its key).
    server_dedups: bool,
    deadline: SystemTime,
    expires_at: SystemTime,
    /// The client that wrote it (one run of one client: an id no other shares), for telling
    /// a live client's calls from those a stopped one left.
    owner: Option<Arc<str>>,
}

impl LedgerEntry {
    /// The record of `checkpoint`, a call of `endpoint` due at `deadline`; its session id
    /// only when `keep_session_id`.
    pub(crate) fn from_checkpoint(
        id: EntryId,
        endpoint: &EntryEndpoint,
        checkpoint: Checkpoint,
        deadline: SystemTime,
        keep_session_id: bool,
        now: SystemTime,
    ) -> Self {
        let expires_at = match checkpoint.stage {
            CallStage::Task { .. } => deadline.max(now + TASK_RETENTION),
            _ => deadline,
        };
        LedgerEntry {
            id,
            endpoint: endpoint.shown.clone(),
            endpoint_digest: Some(endpoint.digest.clone()),
            method: checkpoint.method,
            params: checkpoint.params,
            idempotency_key: checkpoint.idempotency_key,
            stage: checkpoint.stage,
            era: checkpoint.era,
            session_id: checkpoint.session_id.filter(|_| keep_session_id),
            last_event_id: checkpoint.last_event_id,
            server_dedups: checkpoint.server_dedups,
            deadline,
            expires_at,
            owner: None,
        }
    }

    /// The same entry under `id` (a call's entry moved to its task's id).
    pub(crate) fn with_id(mut self, id: EntryId) -> Self {
        self.id = id;
        self
    }

    /// The same entry, written by client `owner`.
    pub(crate) fn with_owner(mut self, owner: Arc<str>) -> Self {
        self.owner = Some(owner);
        self
    }

    /// The client that wrote it, when it says.
    pub(crate) fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The checkpoint a session picks the call up from, due at `deadline` there.
    pub(crate) fn to_checkpoint(&self, deadline: Instant) -> Checkpoint {
        let mut checkpoint = Checkpoint::new(self.method.clone(), self.params.clone(), deadline)
            .with_idempotency_key(self.idempotency_key.clone())
            .with_stage(self.stage.clone())
            .with_server_dedups(self.server_dedups);
        checkpoint.era = self.era;
        checkpoint.session_id = self.session_id.clone();
        checkpoint.last_event_id = self.last_event_id.clone();
        checkpoint
    }

    /// Its id.
    pub fn id(&self) -> &EntryId {
        &self.id
    }

    /// The endpoint the call was made to: scheme, host, port and path (its query and user
    /// info, which may carry credentials, are not kept).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Whether it is a call of `endpoint` (compared by the whole URL, query and user info
    /// included: two tenants of one path are two endpoints).
    pub(crate) fn is_for(&self, endpoint: &EntryEndpoint) -> bool {
        self.endpoint_digest.as_deref() == Some(&*endpoint.digest)
    }

    /// Whether it was written before entries named their endpoint's digest.
    pub(crate) fn has_no_endpoint_digest(&self) -> bool {
        self.endpoint_digest.is_none()
    }

    /// The JSON-RPC method.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The params of its current request (an MRTR round's carry `inputResponses` and
    /// `requestState`).
    pub fn params(&self) -> Option<&Value> {
        self.params.as_ref()
    }

    /// For a `tools/call`, the tool's name.
    pub fn tool_name(&self) -> Option<&str> {
        self.params
            .as_ref()
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
    }

    /// For a `tools/call`, the tool's arguments.
    pub fn arguments(&self) -> Option<&Value> {
        self.params.as_ref().and_then(|p| p.get("arguments"))
    }

    /// The call's own idempotency key (an MRTR round's derives from it). From an entry an
    /// earlier release wrote, it may begin or end with a space, which
    /// [`IdempotencyKey::new`] refuses now: such a call is never sent again under it.
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.idempotency_key.as_ref()
    }

    /// Where the call stood at its last write.
    pub fn stage(&self) -> &CallStage {
        &self.stage
    }

    /// The era of the session it went out on, when known.
    pub fn era(&self) -> Option<Era> {
        self.era
    }

    /// The session it went out on (legacy era), when the application asked for session ids
    /// to be recorded.
    pub fn session_id(&self) -> Option<&SessionId> {
        self.session_id.as_ref()
    }

    /// Its response stream's cursor at its last write (legacy era).
    pub fn last_event_id(&self) -> Option<&EventId> {
        self.last_event_id.as_ref()
    }

    /// The call's deadline.
    pub fn deadline(&self) -> SystemTime {
        self.deadline
    }

    /// When the entry may be dropped: the deadline, or for a task [`TASK_RETENTION`] after
    /// it became one, whichever is later.
    pub fn expires_at(&self) -> SystemTime {
        self.expires_at
    }

    /// Whether it has expired at `now`.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        now >= self.expires_at
    }

    /// The stored form: a JSON object, versioned, with a digest of the params that
    /// [`LedgerEntry::from_json`] checks (against corruption, not tampering: whoever can write
    /// the entry can write its digest). What a [`Ledger`](super::Ledger) of your own stores.
    pub fn to_json(&self) -> Value {
        let params = self.params.clone().unwrap_or(Value::Null);
        let mut stored = json!({
            "v": FORMAT,
            "id": &*self.id.0,
            "endpoint": &*self.endpoint,
            "method": self.method,
            "digest": digest(&params),
            "params": params,
            "stage": self.stage.as_str(),
            "deadlineMs": unix_ms(self.deadline),
            "expiresMs": unix_ms(self.expires_at),
        });
        let Value::Object(map) = &mut stored else {
            return stored;
        };
        if let Some(key) = &self.idempotency_key {
            map.insert("key".into(), Value::String(key.as_str().to_owned()));
        }
        if self.server_dedups {
            map.insert("serverDedups".into(), Value::Bool(true));
        }
        match &self.stage {
            CallStage::Sent { round } => {
                map.insert("round".into(), json!(round));
            }
            CallStage::AwaitingInput {
                round,
                request_state,
                input_requests,
            } => {
                map.insert("round".into(), json!(round));
                if let Some(state) = request_state {
                    map.insert("requestState".into(), Value::String(state.clone()));
                }
                map.insert(
                    "inputRequests".into(),
                    Value::Object(input_requests.clone()),
                );
            }
            CallStage::Task { task_id } => {
                map.insert("taskId".into(), Value::String(task_id.clone()));
            }
        }
        if let Some(era) = self.era {
            map.insert("era".into(), Value::String(era.as_str().to_owned()));
        }
        if let Some(session) = &self.session_id {
            map.insert(
                "sessionId".into(),
                Value::String(session.expose().to_owned()),
            );
        }
        if let Some(cursor) = &self.last_event_id {
            map.insert(
                "lastEventId".into(),
                Value::String(cursor.as_str().to_owned()),
            );
        }
        if let Some(owner) = &self.owner {
            map.insert("owner".into(), Value::String(owner.to_string()));
        }
        if let Some(endpoint_digest) = &self.endpoint_digest {
            map.insert(
                "endpointDigest".into(),
                Value::String(endpoint_digest.to_string()),
            );
        }
        stored
    }

    /// An entry read back from its stored form ([`LedgerEntry::to_json`]). Anything
    /// malformed (a field of the wrong type included, never read as absent), of another
    /// version, or whose params do not match their digest is an
    /// [`ErrorKind::Ledger`] error: such an entry is never acted on. A key with a space at an
    /// edge, which an earlier release took, is read as written (the call under it may have
    /// run); picked up, that call ends `OutcomeUnknown` rather than be sent under it again.
    pub fn from_json(stored: &Value) -> Result<Self, Error> {
        let map = stored
            .as_object()
            .ok_or_else(|| malformed("an entry is a JSON object"))?;
        if map.get("v").and_then(Value::as_u64) != Some(FORMAT) {
            return Err(malformed("an entry of an unknown version"));
        }
        // A field present with a value of another type is damage, never read as absent:
        // absent, a key would make a keyed call unkeyed, a round would be sent without its
        // state or answers, an owner would leave a live client's call to another.
        let wrong = |name: &str| malformed(&format!("an entry whose {name} is of the wrong type"));
        let optional = |name: &str| map.get(name).filter(|v| !v.is_null());
        let opt_text = |name: &str| -> Result<Option<&str>, Error> {
            optional(name)
                .map(|v| v.as_str().ok_or_else(|| wrong(name)))
                .transpose()
        };
        let text = |name: &str| map.get(name).and_then(Value::as_str);
        let required = |name: &str| {
            text(name).ok_or_else(|| malformed(&format!("an entry without its {name}")))
        };
        let id = EntryId::parse(required("id")?)?;
        let params = match map.get("params") {
            None | Some(Value::Null) => None,
            Some(params) => Some(params.clone()),
        };
        let check = params.clone().unwrap_or(Value::Null);
        if !digest_matches(text("digest"), &check) {
            return Err(malformed("an entry whose params do not match their digest"));
        }
        // No call goes past the core's last round: a higher one is damage (or a hostile
        // write), never a call to pick up.
        let round = || {
            let round = map
                .get("round")
                .and_then(Value::as_u64)
                .ok_or_else(|| malformed("an entry without its round"))?;
            u32::try_from(round)
                .ok()
                .filter(|r| *r <= MAX_INPUT_ROUNDS)
                .ok_or_else(|| malformed("an entry whose round is past the last one"))
        };
        let stage = match required("stage")? {
            "sent" => CallStage::Sent { round: round()? },
            "awaiting_input" => CallStage::AwaitingInput {
                round: round()?,
                request_state: opt_text("requestState")?.map(str::to_owned),
                input_requests: optional("inputRequests")
                    .map(|v| v.as_object().cloned().ok_or_else(|| wrong("inputRequests")))
                    .transpose()?
                    .unwrap_or_else(Map::new),
            },
            "task" => CallStage::Task {
                task_id: required("taskId")?.to_owned(),
            },
            _ => return Err(malformed("an entry of an unknown stage")),
        };
        // A key an earlier release took with a space at an edge is read as it was written:
        // the call under it may have run, and skipped it would be one no recovery reports.
        // Picked up, it is never sent again under that key.
        let idempotency_key = opt_text("key")?
            .map(|k| {
                IdempotencyKey::from_earlier_release(k)
                    .map_err(|_| malformed("an invalid idempotency key"))
            })
            .transpose()?;
        let era = opt_text("era")?.and_then(|e| e.parse().ok());
        let session_id = opt_text("sessionId")?.and_then(|s| SessionId::parse(s.as_bytes()).ok());
        let last_event_id = opt_text("lastEventId")?.and_then(|c| EventId::parse(c).ok());
        // Only ever compared with the ids of this process's clients: text that could be none
        // of them is as good as none.
        let owner = opt_text("owner")?
            .filter(|o| EntryId::parse(o).is_ok())
            .map(Arc::from);
        let endpoint_digest = opt_text("endpointDigest")?.map(Arc::from);
        let server_dedups = optional("serverDedups")
            .map(|v| v.as_bool().ok_or_else(|| wrong("serverDedups")))
            .transpose()?
            == Some(true);
        // A time this platform's clock cannot hold (any u64 of milliseconds is written) is
        // damage, as a missing one is: refused, never a panic.
        let time = |name: &str| {
            let ms = map
                .get(name)
                .and_then(Value::as_u64)
                .ok_or_else(|| malformed(&format!("an entry without its {name}")))?;
            UNIX_EPOCH
                .checked_add(Duration::from_millis(ms))
                .ok_or_else(|| malformed(&format!("an entry whose {name} cannot be represented")))
        };
        Ok(LedgerEntry {
            id,
            endpoint: required("endpoint")?.into(),
            endpoint_digest,
            method: required("method")?.to_owned(),
            params,
            idempotency_key,
            stage,
            era,
            session_id,
            last_event_id,
            // Absent (an entry of an earlier release, or a server that ignored keys): a
            // second send is not safe.
            server_dedups,
            deadline: time("deadlineMs")?,
            expires_at: time("expiresMs")?,
            owner,
        })
    }
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// FNV-1a (64 bits) of the params' JSON text with every object's members sorted and every
/// number as read: enough to catch a truncated or corrupted entry, and cheap. So written, it
/// is the same in every build, whether its `serde_json` keeps members in their order
/// (`preserve_order`, which any crate of a program may turn on) or sorts them, keeps numbers
/// as written (`arbitrary_precision`) or reads them: an entry one build wrote, another reads
/// back. It is the text a build with neither serializes, as earlier releases digested it.
fn digest(params: &Value) -> String {
    let mut hash = Fnv1a64::default();
    sorted_json(params, &mut hash);
    hash.to_string()
}

/// Whether `stored` is the digest of `params`: sorted, or in the members' order as read (what
/// an earlier release that kept them in their order digested).
fn digest_matches(stored: Option<&str>, params: &Value) -> bool {
    let Some(stored) = stored else {
        return false;
    };
    stored == digest(params) || stored == fnv1a64(&params.to_string())
}

/// Writes `value` as compact JSON, each object's members sorted by name, into `out`.
fn sorted_json(value: &Value, out: &mut Fnv1a64) {
    use std::io::Write as _;
    // Writing into a hash cannot fail, nor can serializing a `Value`'s leaves.
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let _ = out.write_all(b"{");
            for (n, (name, member)) in members.into_iter().enumerate() {
                if n > 0 {
                    let _ = out.write_all(b",");
                }
                let _ = serde_json::to_writer(&mut *out, name);
                let _ = out.write_all(b":");
                sorted_json(member, out);
            }
            let _ = out.write_all(b"}");
        }
        Value::Array(items) => {
            let _ = out.write_all(b"[");
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    let _ = out.write_all(b",");
                }
                sorted_json(item, out);
            }
            let _ = out.write_all(b"]");
        }
        // As a build that reads numbers writes them (an integer that fits 64 bits as one, any
        // other as the nearest f64), whether this one does or keeps their text as written
        // (`arbitrary_precision`: `1e2`, `1.50`, integers past 64 bits).
        Value::Number(number) => {
            let _ = if let Some(n) = number.as_u64() {
                serde_json::to_writer(&mut *out, &n)
            } else if let Some(n) = number.as_i64() {
                serde_json::to_writer(&mut *out, &n)
            } else if let Some(n) = number.as_f64().filter(|n| n.is_finite()) {
                serde_json::to_writer(&mut *out, &n)
            } else {
                serde_json::to_writer(&mut *out, number)
            };
        }
        leaf => {
            let _ = serde_json::to_writer(&mut *out, leaf);
        }
    }
}

/// A stable digest (the same in every process and every build): against corruption and for
/// telling endpoints apart, not against whoever can write the ledger.
fn fnv1a64(text: &str) -> String {
    let mut hash = Fnv1a64::default();
    hash.add(text.as_bytes());
    hash.to_string()
}

/// FNV-1a, 64 bits, fed as bytes are written.
struct Fnv1a64(u64);

impl Default for Fnv1a64 {
    fn default() -> Self {
        Fnv1a64(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a64 {
    fn add(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

impl std::io::Write for Fnv1a64 {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.add(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl fmt::Display for Fnv1a64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fnv1a64:{:016x}", self.0)
    }
}

/// A client's endpoint as its entries name it: shown without what may carry credentials,
/// matched by a digest of the whole URL.
#[derive(Debug, Clone)]
pub(crate) struct EntryEndpoint {
    shown: Arc<str>,
    digest: Arc<str>,
}

impl EntryEndpoint {
    /// The endpoint at `url` (as the client was given it).
    pub(crate) fn of(url: &str) -> Self {
        EntryEndpoint {
            shown: crate::client::http::redacted_url(url).into(),
            digest: fnv1a64(url).into(),
        }
    }
}

fn malformed(what: &str) -> Error {
    Error::new(ErrorKind::Ledger, format!("malformed ledger entry: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task's entry id is the same wherever it is made, its task's alone at its endpoint,
    /// and reads back as written.
    #[test]
    fn a_tasks_entry_id_names_the_task_at_its_endpoint() {
        let here = EntryEndpoint::of("http://h/mcp");
        let there = EntryEndpoint::of("http://h/mcp?tenant=2");
        let id = EntryId::of_task(&here, "t1");
        assert_eq!(
            id,
            EntryId::of_task(&EntryEndpoint::of("http://h/mcp"), "t1")
        );
        assert_ne!(id, EntryId::of_task(&here, "t2"));
        assert_ne!(id, EntryId::of_task(&there, "t1"));
        assert_ne!(id, EntryId::fresh());
        assert_eq!(EntryId::parse(id.as_str()).unwrap(), id);
        let long = "x".repeat(4096);
        assert!(EntryId::parse(EntryId::of_task(&here, &long).as_str()).is_ok());
    }

    fn entry(stage: CallStage) -> LedgerEntry {
        let now = SystemTime::now();
        let checkpoint = Checkpoint::new(
            "tools/call",
            Some(json!({"name": "charge", "arguments": {"cents": 500}})),
            Instant::now(),
        )
        .with_idempotency_key(Some(IdempotencyKey::new("k-1").unwrap()))
        .with_stage(stage);
        LedgerEntry::from_checkpoint(
            EntryId::fresh(),
            &EntryEndpoint::of("http://127.0.0.1:9/mcp"),
            checkpoint,
            now + Duration::from_secs(60),
            false,
            now,
        )
    }

    /// A deadline as far off as a stored time goes is read without a panic: as that time
    /// where the clock can hold it, refused as malformed where it cannot.
    #[test]
    fn the_farthest_stored_time_is_read_or_refused() {
        let mut stored = entry(CallStage::Sent { round: 0 }).to_json();
        stored["deadlineMs"] = json!(u64::MAX);
        stored["expiresMs"] = json!(u64::MAX);
        match LedgerEntry::from_json(&stored) {
            Ok(read) => assert_eq!(unix_ms(read.deadline()), u64::MAX),
            Err(error) => assert_eq!(error.kind(), ErrorKind::Ledger, "{error}"),
        }
    }

    /// Every stage survives its stored form, to the millisecond.
    #[test]
    fn entries_round_trip_through_their_stored_form() {
        let stages = [
            CallStage::Sent { round: 2 },
            CallStage::AwaitingInput {
                round: 1,
                request_state: Some("s-1".into()),
                input_requests: json!({"confirm": {"method": "elicitation/create"}})
                    .as_object()
                    .cloned()
                    .unwrap(),
            },
            CallStage::Task {
                task_id: "t-9".into(),
            },
        ];
        for stage in stages {
            let written = entry(stage);
            let read = LedgerEntry::from_json(&written.to_json()).unwrap();
            assert_eq!(read.stage(), written.stage());
            assert_eq!(read.params(), written.params());
            assert_eq!(read.arguments(), Some(&json!({"cents": 500})));
            assert_eq!(read.idempotency_key(), written.idempotency_key());
            assert_eq!(unix_ms(read.deadline()), unix_ms(written.deadline()));
            assert_eq!(read.id(), written.id());
            assert_eq!(read.owner(), None);
            let owned = written.clone().with_owner("client-1".into());
            let read = LedgerEntry::from_json(&owned.to_json()).unwrap();
            assert_eq!(read.owner(), Some("client-1"));
        }
    }

    /// A task's record outlives its call's deadline; a call's does not.
    #[test]
    fn a_task_is_kept_past_its_calls_deadline() {
        let sent = entry(CallStage::Sent { round: 0 });
        assert_eq!(sent.expires_at(), sent.deadline());
        let task = entry(CallStage::Task {
            task_id: "t".into(),
        });
        assert!(task.expires_at() >= SystemTime::now() + TASK_RETENTION - Duration::from_secs(5));
    }

    /// A changed byte, a missing field or another version is refused, never acted on.
    #[test]
    fn damaged_entries_are_refused() {
        let good = entry(CallStage::Sent { round: 0 }).to_json();
        let mut tampered = good.clone();
        tampered["params"]["arguments"]["cents"] = json!(50_000);
        let mut future = good.clone();
        future["v"] = json!(2);
        let mut no_stage = good.clone();
        no_stage.as_object_mut().unwrap().remove("stage");
        let mut last = good.clone();
        last["round"] = json!(MAX_INPUT_ROUNDS);
        assert!(
            LedgerEntry::from_json(&last).is_ok(),
            "the last round is one"
        );
        let past = |round: u64, stage: CallStage| {
            let mut stored = entry(stage).to_json();
            stored["round"] = json!(round);
            stored
        };
        let awaiting = CallStage::AwaitingInput {
            round: 1,
            request_state: None,
            input_requests: Map::new(),
        };
        let rounds = [
            past(
                u64::from(MAX_INPUT_ROUNDS) + 1,
                CallStage::Sent { round: 0 },
            ),
            past(u64::from(u32::MAX), CallStage::Sent { round: 0 }),
            past(u64::from(u32::MAX), awaiting),
            past(u64::MAX, CallStage::Sent { round: 0 }),
        ];
        for bad in [tampered, future, no_stage, json!([1]), json!({"v": 1})]
            .into_iter()
            .chain(rounds)
        {
            let err = LedgerEntry::from_json(&bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Ledger, "{err}");
        }
    }

    /// A key an earlier release took and this one refuses for a space at an edge is still
    /// read back: its entry is a call that may have run, and skipped as malformed it would be
    /// one no recovery reports. A key no release took (a tab is not printable) is damage.
    #[test]
    fn a_key_with_edge_whitespace_an_earlier_release_wrote_is_read_back() {
        for edged in ["k ", " k", " ", "order-1 "] {
            let mut stored = entry(CallStage::Sent { round: 0 }).to_json();
            stored["key"] = json!(edged);
            let read = LedgerEntry::from_json(&stored).expect(edged);
            assert_eq!(
                read.idempotency_key().map(IdempotencyKey::as_str),
                Some(edged)
            );
        }
        for bad in ["", "k\t", "\tk", "k\u{7f}", &"k ".repeat(129)] {
            let mut stored = entry(CallStage::Sent { round: 0 }).to_json();
            stored["key"] = json!(bad);
            let err = LedgerEntry::from_json(&stored).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Ledger, "{bad:?}: {err}");
        }
    }

    /// A field present with a value of the wrong type (damage, or a write of something
    /// else) refuses the entry instead of reading as absent: absent, a key would make a keyed
    /// call an unkeyed one, a round's state or answers would be sent without them, an owner
    /// would leave a live client's call to another.
    #[test]
    fn a_field_of_the_wrong_type_refuses_the_entry() {
        let awaiting = CallStage::AwaitingInput {
            round: 1,
            request_state: Some("s-1".into()),
            input_requests: Map::new(),
        };
        let fields = [
            ("key", json!(7)),
            ("requestState", json!(7)),
            ("inputRequests", json!("confirm")),
            ("owner", json!(7)),
            ("endpointDigest", json!(7)),
            ("serverDedups", json!("yes")),
            ("era", json!(7)),
            ("sessionId", json!(7)),
            ("lastEventId", json!(7)),
        ];
        for (name, value) in fields {
            let mut stored = entry(awaiting.clone()).to_json();
            stored[name] = value;
            let err = LedgerEntry::from_json(&stored).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Ledger, "{name}: {err}");
        }
    }

    /// The digest an entry is written with is the same whatever order its params' members
    /// are in (a build whose `serde_json` keeps their order, `preserve_order`, which any crate
    /// of a program may turn on, or sorts them), and the one a build that sorts them computes
    /// on reading: an entry one build writes, any other reads back. (Run with
    /// `--features serde_json/preserve_order` too: only such a build keeps their order.)
    #[test]
    fn the_digest_does_not_depend_on_the_order_of_members() {
        let sorted = r#"{"arguments":{"cents":500,"currency":"eur"},"name":"charge"}"#;
        let given = r#"{"name":"charge","arguments":{"currency":"eur","cents":500}}"#;
        for text in [given, sorted] {
            let params: Value = serde_json::from_str(text).unwrap();
            assert_eq!(digest(&params), fnv1a64(sorted), "{text}");
            let mut stored = entry(CallStage::Sent { round: 0 }).to_json();
            stored["params"] = params.clone();
            stored["digest"] = json!(digest(&params));
            let read = LedgerEntry::from_json(&stored).unwrap();
            assert_eq!(read.params(), Some(&params));
        }
    }

    /// The digest an entry is written with is the same whether its params' numbers are kept
    /// as they were written (a build whose `serde_json` keeps them: `arbitrary_precision`)
    /// or read as numbers, and the one a build that reads them computes: an entry one build
    /// writes, any other reads back. (Run with `--features serde_json/arbitrary_precision`
    /// too: only such a build keeps their text.)
    #[test]
    fn the_digest_does_not_depend_on_how_numbers_are_kept() {
        let read = r#"{"amount":100.0,"big":1.2345678901234568e29,"rate":1.5,"n":-7,"m":7}"#;
        let given =
            r#"{"amount":1e2,"big":123456789012345678901234567890,"rate":1.50,"n":-7,"m":7}"#;
        let canonical = digest(&serde_json::from_str::<Value>(read).unwrap());
        for text in [given, read] {
            let params: Value = serde_json::from_str(text).unwrap();
            assert_eq!(digest(&params), canonical, "{text}");
            let mut stored = entry(CallStage::Sent { round: 0 }).to_json();
            stored["params"] = params.clone();
            stored["digest"] = json!(digest(&params));
            assert!(LedgerEntry::from_json(&stored).is_ok(), "{text}");
        }
    }

    /// Session ids are written only when asked for.
    #[test]
    fn session_ids_are_kept_only_on_request() {
        let now = SystemTime::now();
        let mut checkpoint = Checkpoint::new("tools/call", None, Instant::now());
        checkpoint.session_id = Some(SessionId::parse(b"secret-session").unwrap());
        let kept = |keep| {
            LedgerEntry::from_checkpoint(
                EntryId::fresh(),
                &EntryEndpoint::of("http://h/mcp"),
                checkpoint.clone(),
                now,
                keep,
                now,
            )
            .to_json()
        };
        assert!(kept(false).get("sessionId").is_none());
        assert_eq!(kept(true)["sessionId"], "secret-session");
    }

    #[test]
    fn ids_are_unique_and_checked() {
        assert_ne!(EntryId::fresh(), EntryId::fresh());
        assert!(EntryId::parse("").is_err());
        assert!(EntryId::parse("a b").is_err());
        assert!(EntryId::parse(&"x".repeat(129)).is_err());
        assert_eq!(EntryId::parse("ab-1").unwrap().as_str(), "ab-1");
    }
}
