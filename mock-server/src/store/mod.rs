//! The store behind the instances: events, session records, request records, prepared
//! records and idempotency results.
//!
//! Every method returns a boxed future and owned data, so a networked store (Redis, SQL, a
//! replicated log) can implement [`Store`] as well as the in-memory [`MemoryStore`]. The
//! cluster gives each instance two stores: the *shared* one (one for the whole cluster) and a
//! *local* one that dies with the instance; the preset decides which record kinds go where.
//!
//! [`RedisStore`] is the networked implementation: the store the seed's instances shared. The
//! same test suite (`tests/cluster/store.rs`) runs against both.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;

use crate::oracle::OracleReport;

mod redis;

pub use self::redis::{RedisOptions, RedisStore};

/// A failure of the store itself (a networked store may lose its connection).
#[derive(Debug, Clone)]
pub struct StoreError(pub String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store error: {}", self.0)
    }
}

impl std::error::Error for StoreError {}

/// What every store method returns.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, StoreError>>;

/// A session as the instance that holds it knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The `Mcp-Session-Id`.
    pub id: String,
    /// Negotiated protocol version.
    pub protocol_version: String,
    /// Client capabilities from `initialize` (empty for a default session).
    pub client_capabilities: Value,
    /// Server capabilities answered at `initialize`.
    pub server_capabilities: Value,
    /// `sha256:<hex>` of the context above.
    pub capability_hash: String,
    /// Index of the instance that created the record.
    pub created_by: usize,
    /// True when a permissive instance made this record up for a session id it did not know.
    pub default_context: bool,
}

/// Which kind of SSE stream a [`StreamRecord`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamKind {
    /// The response stream of a POST; finished once every response on it was written.
    Post,
    /// The standalone GET stream of a session.
    Standalone,
}

/// Metadata of one SSE stream: who opened it, under which context, for which requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// Stream id, the part of an event id before the separator.
    pub id: String,
    /// Session the stream belongs to.
    pub session: String,
    /// Instance that served the request that opened the stream.
    pub owner: usize,
    /// POST response stream or standalone GET stream.
    pub kind: StreamKind,
    /// Capability hash in force on the owner when the stream was opened.
    pub capability_hash: String,
    /// Protocol version of the session when the stream was opened.
    pub protocol_version: String,
    /// JSON-RPC ids of the requests answered on this stream.
    pub request_ids: Vec<Value>,
    /// Set once the last event was issued; `head` is final then.
    pub finished: bool,
    /// Highest sequence number issued on the stream, known once `finished`.
    pub head: u64,
}

/// What a stored event carries, as far as resume checks care.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EventKind {
    /// The priming event: an id and empty data.
    Priming,
    /// A notification (progress, log message).
    Notification,
    /// A JSON-RPC response to the request with this id.
    Response {
        /// The request's JSON-RPC id.
        request_id: Value,
    },
}

/// One SSE event in the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Position in its stream, from 1, one per id-carrying event.
    pub seq: u64,
    /// The `id:` field as sent.
    pub id: String,
    /// The `data:` field (empty for the priming event).
    pub data: String,
    /// What the event is.
    pub kind: EventKind,
}

/// Life of a request record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestState {
    /// The instance is still working on it.
    Running,
    /// Its response was written.
    Done,
    /// The instance working on it died: it will never be answered.
    Lost,
}

/// A request an instance accepted, so that responses replayed later can be resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Session of the request.
    pub session: String,
    /// The stream its response goes to, if any (JSON responses have none).
    pub stream: Option<String>,
    /// Its JSON-RPC id.
    pub request_id: Value,
    /// Instance that executes it.
    pub instance: usize,
    /// Where it stands.
    pub state: RequestState,
}

/// The record `prepare` creates and `commit` depends on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreparedRecord {
    /// Record id returned by `prepare`.
    pub id: String,
    /// Session that prepared it.
    pub session: String,
    /// The prepared item.
    pub item: Value,
    /// Instance that prepared it.
    pub instance: usize,
}

/// Where a task (the tasks extension of the 2026-07-28 era) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The instance that created it is still working on it.
    Working,
    /// Done: `result` holds what the call would have returned.
    Completed,
    /// Ended with `error`.
    Failed,
    /// Cancelled by the client.
    Cancelled,
    /// The instance working on it died: it will never end.
    Lost,
}

impl TaskStatus {
    /// Whether the task can still change.
    pub fn is_working(self) -> bool {
        self == TaskStatus::Working
    }
}

/// A task, kept in the shared store so that any instance can answer `tasks/get` for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The `taskId`.
    pub id: String,
    /// Instance that works on it.
    pub instance: usize,
    /// Where it stands.
    pub status: TaskStatus,
    /// The call's result, once completed.
    pub result: Option<Value>,
    /// The JSON-RPC error, once failed.
    pub error: Option<Value>,
}

/// A finished call remembered under its idempotency key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredOutcome {
    /// `{"result": ...}` or `{"error": ...}`: the JSON-RPC response minus `jsonrpc` and `id`.
    pub response: Value,
    /// Capability hash in force when it was produced.
    pub capability_hash: String,
}

/// Answer of [`Store::idempotency_begin`].
#[derive(Debug, Clone, PartialEq)]
pub enum IdempotencyBegin {
    /// The key was free: the caller now owns it and must finish or abandon it.
    Started,
    /// The same key is being executed right now.
    Running,
    /// The key was used for a different call (other tool or arguments).
    Mismatch,
    /// The call already ran: here is what it produced.
    Done(StoredOutcome),
    /// The instance running the call died: it may or may not have applied its effect, so
    /// the key can never run again (that would risk a second execution).
    Lost,
}

/// Everything an instance stores. See the module docs.
pub trait Store: Send + Sync + 'static {
    /// Creates or replaces a session record.
    fn put_session(&self, record: SessionRecord) -> StoreFuture<'_, ()>;
    /// Looks a session up.
    fn get_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>>;
    /// Forgets a session; true when it existed.
    fn remove_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool>;

    /// Registers a new stream.
    fn create_stream(&self, record: StreamRecord) -> StoreFuture<'_, ()>;
    /// Looks a stream up.
    fn get_stream<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<StreamRecord>>;
    /// Appends an event to a stream's log and wakes readers waiting on it.
    fn append_event<'a>(&'a self, stream: &'a str, event: StoredEvent) -> StoreFuture<'a, ()>;
    /// Marks a stream finished with `head` its last issued sequence number.
    fn finish_stream<'a>(&'a self, stream: &'a str, head: u64) -> StoreFuture<'a, ()>;
    /// The stored events of a stream with `seq > after`, in order.
    fn events_after<'a>(&'a self, stream: &'a str, after: u64)
        -> StoreFuture<'a, Vec<StoredEvent>>;
    /// Like [`Store::events_after`] but waits up to `timeout` for at least one such event,
    /// returning early (possibly empty) once the stream is finished.
    fn wait_events<'a>(
        &'a self,
        stream: &'a str,
        after: u64,
        timeout: Duration,
    ) -> StoreFuture<'a, Vec<StoredEvent>>;

    /// Creates or replaces a request record.
    fn put_request(&self, record: RequestRecord) -> StoreFuture<'_, ()>;
    /// Looks a request record up by session and JSON-RPC id.
    fn get_request<'a>(
        &'a self,
        session: &'a str,
        request_id: &'a Value,
    ) -> StoreFuture<'a, Option<RequestRecord>>;

    /// Stores a prepared record.
    fn put_prepared(&self, record: PreparedRecord) -> StoreFuture<'_, ()>;
    /// Looks a prepared record up.
    fn get_prepared<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<PreparedRecord>>;

    /// Claims an idempotency key for a call with this fingerprint on behalf of `instance`;
    /// `claim` names this claim (unique to it), the one [`Store::idempotency_abandon`] must
    /// name to let the key go.
    fn idempotency_begin<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        instance: usize,
        claim: &'a str,
    ) -> StoreFuture<'a, IdempotencyBegin>;
    /// Records the outcome of a claimed key.
    fn idempotency_finish<'a>(
        &'a self,
        key: &'a str,
        outcome: StoredOutcome,
    ) -> StoreFuture<'a, ()>;
    /// Releases a claimed key without an outcome (the call was cancelled before it ran, or
    /// its claim failed): only a running key taken by `claim`. A claim whose reply was lost
    /// may have found the key another call's; the release must leave that one alone, or
    /// the call would run twice.
    fn idempotency_abandon<'a>(&'a self, key: &'a str, claim: &'a str) -> StoreFuture<'a, ()>;
    /// Marks a claimed key lost: its call ran and ended without an outcome (cancelled
    /// mid-run), so it may have applied its effect and must never run again. A key that is
    /// not running is left as it is.
    fn idempotency_lose<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()>;

    /// Creates or replaces a task record.
    fn put_task(&self, record: TaskRecord) -> StoreFuture<'_, ()>;
    /// Looks a task up; a working task whose instance died reads as [`TaskStatus::Lost`].
    fn get_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>>;

    /// Adds one to a named counter and returns the new value.
    fn increment_counter<'a>(&'a self, name: &'a str) -> StoreFuture<'a, u64>;

    /// The instance died: its running requests become [`RequestState::Lost`], its working
    /// tasks [`TaskStatus::Lost`], and so do the idempotency keys it held: a lease expiring must not free a key whose effect may have
    /// been applied, or a re-send would apply it twice.
    fn release_instance(&self, instance: usize) -> StoreFuture<'_, ()>;

    /// Appends one entry to the oracle's journal, an append-only log that instances in other
    /// processes write to and a test reads back (see `OracleReport::from_journal`). Entries
    /// keep the order in which the store accepted them.
    fn journal_append<'a>(&'a self, entry: &'a Value) -> StoreFuture<'a, ()> {
        let _ = entry;
        Box::pin(futures::future::ready(Err(StoreError(
            "this store keeps no journal".into(),
        ))))
    }

    /// Every journal entry still retained, oldest first, preceded by
    /// [`OracleReport::journal_trimmed_entry`](crate::OracleReport::journal_trimmed_entry) when
    /// the journal (which is capped) has dropped older entries.
    fn journal_entries(&self) -> StoreFuture<'_, Vec<Value>> {
        Box::pin(futures::future::ready(Err(StoreError(
            "this store keeps no journal".into(),
        ))))
    }
}

/// Caps that keep a long-running in-memory store bounded.
const MAX_STREAMS: usize = 50_000;
const MAX_EVENTS_PER_STREAM: usize = 10_000;
const MAX_REQUESTS: usize = 100_000;
const MAX_PREPARED: usize = 100_000;
/// Sessions kept; the oracle keeps the truth of as many.
pub(crate) const MAX_SESSIONS: usize = 100_000;
const MAX_KEYS: usize = 100_000;
const MAX_TASKS: usize = 100_000;
const MAX_JOURNAL: usize = 1_000_000;

#[derive(Debug)]
struct StreamLog {
    record: StreamRecord,
    events: VecDeque<StoredEvent>,
}

#[derive(Debug)]
enum KeyState {
    Running {
        fingerprint: String,
        instance: usize,
        /// The claim that took it (see [`Store::idempotency_abandon`]).
        claim: String,
    },
    Done {
        fingerprint: String,
        outcome: StoredOutcome,
    },
    /// Held by an instance that died mid-call: outcome unknown, never runs again.
    Lost { fingerprint: String },
}

/// A map that forgets its oldest entries beyond a capacity.
#[derive(Debug)]
pub(crate) struct Bounded<K, V> {
    /// Each entry with the insertion that made it.
    map: HashMap<K, (u64, V)>,
    /// Insertions, oldest first: one whose entry was removed (or removed and inserted again,
    /// a later insertion) is stale, skipped on eviction and dropped when they pile up.
    order: VecDeque<(K, u64)>,
    inserted: u64,
    cap: usize,
}

impl<K: std::hash::Hash + Eq + Clone, V> Bounded<K, V> {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            inserted: 0,
            cap,
        }
    }

    pub(crate) fn get<Q>(&self, k: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.map.get(k).map(|(_, v)| v)
    }

    fn get_mut<Q>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.map.get_mut(k).map(|(_, v)| v)
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.map.values_mut().map(|(_, v)| v)
    }

    /// Inserts or replaces `k`'s entry; a replaced one keeps its place in the order.
    pub(crate) fn insert(&mut self, k: K, v: V) {
        if let Some((_, old)) = self.map.get_mut(&k) {
            *old = v;
            return;
        }
        self.inserted += 1;
        self.map.insert(k.clone(), (self.inserted, v));
        self.order.push_back((k, self.inserted));
        while self.map.len() > self.cap {
            let Some((old, at)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&old).is_some_and(|(born, _)| *born == at) {
                self.map.remove(&old);
            }
        }
        // Removals leave their insertions behind: drop them before they outgrow the map.
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order
                .retain(|(k, at)| map.get(k).is_some_and(|(born, _)| born == at));
        }
    }

    /// Like [`Bounded::insert`], but only an entry `evictable` allows is forgotten to make
    /// room for a new key; `false`, with nothing inserted, when every entry must stay.
    fn insert_evicting(&mut self, k: K, v: V, evictable: impl Fn(&V) -> bool) -> bool {
        if !self.map.contains_key(&k) && self.map.len() >= self.cap {
            let map = &self.map;
            let oldest = self.order.iter().position(|(k, at)| {
                map.get(k)
                    .is_some_and(|(born, v)| born == at && evictable(v))
            });
            let Some(i) = oldest else {
                return false;
            };
            if let Some((old, _)) = self.order.remove(i) {
                self.map.remove(&old);
            }
        }
        self.insert(k, v);
        true
    }

    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        self.map.remove(k).map(|(_, v)| v)
    }

    /// Entries kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[derive(Debug)]
struct MemoryState {
    sessions: Bounded<String, SessionRecord>,
    streams: Bounded<String, StreamLog>,
    requests: Bounded<(String, String), RequestRecord>,
    prepared: Bounded<String, PreparedRecord>,
    tasks: Bounded<String, TaskRecord>,
    keys: Bounded<String, KeyState>,
    counters: HashMap<String, u64>,
    journal: VecDeque<Value>,
    /// Entries kept in `journal`, the oldest dropped beyond it.
    journal_cap: usize,
    /// Entries dropped from the front of `journal`.
    journal_dropped: u64,
}

#[derive(Debug)]
struct MemoryInner {
    state: Mutex<MemoryState>,
    appended: Notify,
}

/// The in-memory [`Store`]: one mutex, bounded maps (oldest entries are forgotten first).
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<MemoryInner>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

fn request_key(session: &str, id: &Value) -> (String, String) {
    (session.to_owned(), id.to_string())
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::with_journal_cap(MAX_JOURNAL)
    }

    /// An empty store whose journal keeps `cap` entries.
    pub(crate) fn with_journal_cap(cap: usize) -> Self {
        Self {
            inner: Arc::new(MemoryInner {
                state: Mutex::new(MemoryState {
                    sessions: Bounded::new(MAX_SESSIONS),
                    streams: Bounded::new(MAX_STREAMS),
                    requests: Bounded::new(MAX_REQUESTS),
                    prepared: Bounded::new(MAX_PREPARED),
                    tasks: Bounded::new(MAX_TASKS),
                    keys: Bounded::new(MAX_KEYS),
                    counters: HashMap::new(),
                    journal: VecDeque::new(),
                    journal_cap: cap,
                    journal_dropped: 0,
                }),
                appended: Notify::new(),
            }),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut MemoryState) -> T) -> T {
        // A panic while holding the lock cannot leave a half-written record behind that
        // matters to a mock, so a poisoned lock is simply reused.
        let mut guard = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    fn ready<'a, T: Send + 'a>(v: T) -> StoreFuture<'a, T> {
        Box::pin(futures::future::ready(Ok(v)))
    }

    fn collect_after(&self, stream: &str, after: u64) -> (Vec<StoredEvent>, bool) {
        self.with(|s| match s.streams.get(stream) {
            Some(log) => (
                log.events
                    .iter()
                    .filter(|e| e.seq > after)
                    .cloned()
                    .collect(),
                log.record.finished,
            ),
            None => (Vec::new(), true),
        })
    }
}

impl Store for MemoryStore {
    fn put_session(&self, record: SessionRecord) -> StoreFuture<'_, ()> {
        self.with(|s| s.sessions.insert(record.id.clone(), record));
        Self::ready(())
    }

    fn get_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>> {
        Self::ready(self.with(|s| s.sessions.get(id).cloned()))
    }

    fn remove_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        Self::ready(self.with(|s| s.sessions.remove(&id.to_owned()).is_some()))
    }

    fn create_stream(&self, record: StreamRecord) -> StoreFuture<'_, ()> {
        self.with(|s| {
            s.streams.insert(
                record.id.clone(),
                StreamLog {
                    record,
                    events: VecDeque::new(),
                },
            )
        });
        Self::ready(())
    }

    fn get_stream<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<StreamRecord>> {
        Self::ready(self.with(|s| s.streams.get(id).map(|l| l.record.clone())))
    }

    fn append_event<'a>(&'a self, stream: &'a str, event: StoredEvent) -> StoreFuture<'a, ()> {
        self.with(|s| {
            if let Some(log) = s.streams.get_mut(stream) {
                log.events.push_back(event);
                if log.events.len() > MAX_EVENTS_PER_STREAM {
                    log.events.pop_front();
                }
            }
        });
        self.inner.appended.notify_waiters();
        Self::ready(())
    }

    fn finish_stream<'a>(&'a self, stream: &'a str, head: u64) -> StoreFuture<'a, ()> {
        self.with(|s| {
            if let Some(log) = s.streams.get_mut(stream) {
                log.record.finished = true;
                log.record.head = head;
            }
        });
        self.inner.appended.notify_waiters();
        Self::ready(())
    }

    fn events_after<'a>(
        &'a self,
        stream: &'a str,
        after: u64,
    ) -> StoreFuture<'a, Vec<StoredEvent>> {
        Self::ready(self.collect_after(stream, after).0)
    }

    fn wait_events<'a>(
        &'a self,
        stream: &'a str,
        after: u64,
        timeout: Duration,
    ) -> StoreFuture<'a, Vec<StoredEvent>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                // Register before checking so an append between the check and the wait
                // is not missed.
                let notified = self.inner.appended.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let (events, finished) = self.collect_after(stream, after);
                if !events.is_empty() || finished {
                    return Ok(events);
                }
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    return Ok(Vec::new());
                }
            }
        })
    }

    fn put_request(&self, record: RequestRecord) -> StoreFuture<'_, ()> {
        self.with(|s| {
            s.requests
                .insert(request_key(&record.session, &record.request_id), record)
        });
        Self::ready(())
    }

    fn get_request<'a>(
        &'a self,
        session: &'a str,
        request_id: &'a Value,
    ) -> StoreFuture<'a, Option<RequestRecord>> {
        Self::ready(self.with(|s| s.requests.get(&request_key(session, request_id)).cloned()))
    }

    fn put_prepared(&self, record: PreparedRecord) -> StoreFuture<'_, ()> {
        self.with(|s| s.prepared.insert(record.id.clone(), record));
        Self::ready(())
    }

    fn get_prepared<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<PreparedRecord>> {
        Self::ready(self.with(|s| s.prepared.get(id).cloned()))
    }

    fn idempotency_begin<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        instance: usize,
        claim: &'a str,
    ) -> StoreFuture<'a, IdempotencyBegin> {
        let answer = self.with(|s| match s.keys.get(key) {
            None => {
                let running = KeyState::Running {
                    fingerprint: fingerprint.to_owned(),
                    instance,
                    claim: claim.to_owned(),
                };
                // Forgetting a running or lost key would let its call run again: only a
                // finished one makes room, and with none the claim fails like a store that
                // cannot answer (the call is refused, never run unguarded).
                let done = |k: &KeyState| matches!(k, KeyState::Done { .. });
                if !s.keys.insert_evicting(key.to_owned(), running, done) {
                    return Err(StoreError(
                        "idempotency store full: every key is running or lost".into(),
                    ));
                }
                Ok(IdempotencyBegin::Started)
            }
            Some(KeyState::Running { fingerprint: f, .. })
            | Some(KeyState::Done { fingerprint: f, .. })
            | Some(KeyState::Lost { fingerprint: f })
                if f != fingerprint =>
            {
                Ok(IdempotencyBegin::Mismatch)
            }
            Some(KeyState::Running { .. }) => Ok(IdempotencyBegin::Running),
            Some(KeyState::Done { outcome, .. }) => Ok(IdempotencyBegin::Done(outcome.clone())),
            Some(KeyState::Lost { .. }) => Ok(IdempotencyBegin::Lost),
        });
        Box::pin(futures::future::ready(answer))
    }

    fn idempotency_finish<'a>(
        &'a self,
        key: &'a str,
        outcome: StoredOutcome,
    ) -> StoreFuture<'a, ()> {
        self.with(|s| {
            if let Some(state) = s.keys.get_mut(key) {
                let fingerprint = match state {
                    KeyState::Running { fingerprint, .. }
                    | KeyState::Done { fingerprint, .. }
                    | KeyState::Lost { fingerprint } => std::mem::take(fingerprint),
                };
                *state = KeyState::Done {
                    fingerprint,
                    outcome,
                };
            }
        });
        Self::ready(())
    }

    fn idempotency_abandon<'a>(&'a self, key: &'a str, claim: &'a str) -> StoreFuture<'a, ()> {
        self.with(|s| {
            if matches!(s.keys.get(key), Some(KeyState::Running { claim: c, .. }) if c == claim) {
                s.keys.remove(&key.to_owned());
            }
        });
        Self::ready(())
    }

    fn idempotency_lose<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        self.with(|s| {
            if let Some(state) = s.keys.get_mut(key) {
                if let KeyState::Running { fingerprint, .. } = state {
                    *state = KeyState::Lost {
                        fingerprint: std::mem::take(fingerprint),
                    };
                }
            }
        });
        Self::ready(())
    }

    fn put_task(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
        self.with(|s| s.tasks.insert(record.id.clone(), record));
        Self::ready(())
    }

    fn get_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Self::ready(self.with(|s| s.tasks.get(id).cloned()))
    }

    fn increment_counter<'a>(&'a self, name: &'a str) -> StoreFuture<'a, u64> {
        Self::ready(self.with(|s| {
            let c = s.counters.entry(name.to_owned()).or_insert(0);
            *c += 1;
            *c
        }))
    }

    fn release_instance(&self, instance: usize) -> StoreFuture<'_, ()> {
        self.with(|s| {
            for r in s.requests.values_mut() {
                if r.instance == instance && r.state == RequestState::Running {
                    r.state = RequestState::Lost;
                }
            }
            for t in s.tasks.values_mut() {
                if t.instance == instance && t.status.is_working() {
                    t.status = TaskStatus::Lost;
                }
            }
            for state in s.keys.values_mut() {
                if let KeyState::Running {
                    fingerprint,
                    instance: i,
                    ..
                } = state
                {
                    if *i == instance {
                        *state = KeyState::Lost {
                            fingerprint: std::mem::take(fingerprint),
                        };
                    }
                }
            }
        });
        self.inner.appended.notify_waiters();
        Self::ready(())
    }

    fn journal_append<'a>(&'a self, entry: &'a Value) -> StoreFuture<'a, ()> {
        self.with(|s| {
            s.journal.push_back(entry.clone());
            if s.journal.len() > s.journal_cap {
                s.journal.pop_front();
                s.journal_dropped += 1;
            }
        });
        Self::ready(())
    }

    fn journal_entries(&self) -> StoreFuture<'_, Vec<Value>> {
        Self::ready(self.with(|s| {
            let trimmed = (s.journal_dropped > 0)
                .then(|| OracleReport::journal_trimmed_entry(s.journal_dropped));
            trimmed
                .into_iter()
                .chain(s.journal.iter().cloned())
                .collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::Bounded;

    #[test]
    fn a_bounded_map_forgets_its_oldest_live_entry() {
        let mut map = Bounded::new(2);
        map.insert("a", 1);
        map.insert("b", 2);
        // `a` removed and inserted again is the newest entry, not the oldest.
        map.remove(&"a");
        map.insert("a", 3);
        map.insert("c", 4);
        assert_eq!(map.get(&"a"), Some(&3));
        assert_eq!(map.get(&"b"), None);
        assert_eq!(map.get(&"c"), Some(&4));
    }

    #[test]
    fn removals_do_not_grow_a_bounded_map() {
        let mut map = Bounded::new(4);
        for i in 0..10_000 {
            map.insert(i, i);
            map.remove(&i);
        }
        assert!(
            map.order.len() <= 64 + 1,
            "{} insertions kept",
            map.order.len()
        );
    }
}
