//! The oracle: what really happened in the cluster, recorded outside the instances' view.
//!
//! Instances report to it; they never read it. It knows the context each session id was
//! truly negotiated under (from the `initialize` that created it), so it can tell an
//! execution under a made-up or drifted context from a correct one. A 2026-07-28 request has
//! no session: its truth is the context the request itself carried, read from the request
//! before the instance acts on it.
//!
//! What that truth cannot see: in the 2026-07-28 era an instance builds the context it runs
//! under from the very capabilities the request carried, so judged only against the request
//! an execution is wrong solely when the instance departs from what it was sent; a client
//! that sends the wrong capabilities (another temperature, none at all) is not caught. Told
//! the client capabilities the cluster's clients are configured with
//! ([`ClusterConfig::expected_client_capabilities`](crate::ClusterConfig::expected_client_capabilities)),
//! the oracle also judges every execution, in either era, against them, from outside any
//! request: a context whose client capabilities do not hold them is a wrong capability. An
//! unknown record cannot be recorded in the 2026-07-28 era at all: a `prepare` handle lives in
//! the shared store, and a `commit` of a handle no instance knows is refused, never run.
//!
//! Instances in other processes cannot reach this process's oracle, so an oracle can also
//! write what it is told to a journal in the shared store (see [`Store::journal_append`]);
//! [`OracleReport::from_journal`] replays the journal into the same report, with the same
//! joins. A report is written to the journal before the instance acts on it (an execution is
//! journaled before the tool runs): when the journal cannot be written, the instance fails
//! the request instead of acting unrecorded.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;

use crate::store::{Bounded, Store, StoreError, MAX_SESSIONS};

/// Default of [`ClusterConfig::oracle_record_limit`](crate::ClusterConfig::oracle_record_limit):
/// records kept in detail per list (executions, resumes). Totals keep counting beyond it, and
/// say how many records were dropped.
pub const DEFAULT_ORACLE_RECORD_LIMIT: usize = 200_000;

/// One tool execution (an idempotent replay is not an execution).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// The caller's tag from `params._meta["io.github.mcp-resume/tag"]`, if any.
    pub tag: Option<String>,
    /// Tool name.
    pub tool: String,
    /// Instance that executed it.
    pub instance: usize,
    /// Session id the call carried (empty in the 2026-07-28 era: there are no sessions).
    pub session: String,
    /// Capability hash in force on the executing instance.
    pub capability_hash: String,
    /// Capability hash the session was truly negotiated under (None: never initialized here),
    /// or in the 2026-07-28 era the hash of the context the request carried.
    pub expected_capability_hash: Option<String>,
    /// 2026-07-28 era: the client capabilities the request carried in its `_meta`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried_capabilities: Option<Value>,
    /// It ran under another context than the negotiated one, or under client capabilities
    /// that do not hold the expected ones (see `unexpected_client_capabilities`).
    pub wrong_capability: bool,
    /// The client capabilities it ran under do not hold the ones the cluster was told its
    /// clients are configured with
    /// ([`ClusterConfig::expected_client_capabilities`](crate::ClusterConfig::expected_client_capabilities)).
    #[serde(default)]
    pub unexpected_client_capabilities: bool,
    /// A dependent call (`commit`) ran against a record the instance did not know.
    pub unknown_record: bool,
    /// The tool has a side effect (`prepare`, `commit`, `counter_increment`).
    #[serde(default)]
    pub side_effect: bool,
    /// The call carried an idempotency key the instance honoured (extension on).
    #[serde(default)]
    pub keyed: bool,
    /// A side effect whose tag had already been executed once.
    pub duplicate_side_effect: bool,
}

/// One resume attempt (a GET with `Last-Event-ID`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeRecord {
    /// Session id of the GET.
    pub session: String,
    /// Stream named by `Last-Event-ID` (empty when unparsable).
    pub stream: String,
    /// Instance that answered.
    pub instance: usize,
    /// Instance that opened the stream, when known.
    pub owner: Option<usize>,
    /// Answered by another instance than the owner.
    pub cross_instance: bool,
    /// Replay was served (as opposed to rejected).
    pub honored: bool,
    /// Rejection reason (§5 vocabulary), when rejected.
    pub reason: Option<String>,
}

/// The W3C trace context one HTTP request carried, for a client whose spans are to join the
/// server's trace. Recorded only for requests that carried any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Instance that received it.
    pub instance: usize,
    /// `POST`, `GET` or `DELETE`.
    pub http_method: String,
    /// A POST's JSON-RPC method (a single message's).
    pub mcp_method: Option<String>,
    /// The caller's tag from `params._meta`, if any.
    pub tag: Option<String>,
    /// The `traceparent` header.
    pub traceparent: Option<String>,
    /// `params._meta.traceparent` of a POST's message.
    pub meta_traceparent: Option<String>,
}

/// Counters of an [`OracleReport`]. They are never capped: they stay exact when the
/// per-execution records are not (see `execution_records_dropped`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OracleTotals {
    /// Tool executions.
    pub executions: u64,
    /// Executions under a context other than the negotiated one.
    pub wrong_capability: u64,
    /// Dependent calls executed against unknown records.
    pub unknown_record: u64,
    /// Side effects executed more than once for the same tag.
    pub duplicate_side_effects: u64,
    /// Tagged executions whose tag had already executed (any tool, keyed or not).
    pub repeated_executions: u64,
    /// The part of `repeated_executions` that carried no idempotency key.
    pub repeated_unkeyed_executions: u64,
    /// Calls answered from the idempotency store without running.
    pub idempotent_replays: u64,
    /// Successful `initialize` requests.
    pub initializes: u64,
    /// Sessions a permissive instance made up for an id it did not know.
    pub sessions_made_up: u64,
    /// Resume attempts (GET with `Last-Event-ID`).
    pub resumes: u64,
    /// Resume attempts honored (the stream replayed), on any instance.
    pub honored_resumes: u64,
    /// Resumes honored by another instance than the stream's owner.
    pub cross_instance_resumes: u64,
    /// Rejected resumes by reason.
    pub rejections: BTreeMap<String, u64>,
    /// HTTP requests handled per instance (index = instance).
    pub requests_per_instance: Vec<u64>,
    /// Executions counted above but missing from `executions` (the record limit was
    /// reached): a join of calls with `executions` is incomplete unless this is 0.
    pub execution_records_dropped: u64,
    /// Resume attempts counted above but missing from `resumes`.
    pub resume_records_dropped: u64,
    /// Journal entries the store dropped (its journal is capped) since the last reset, for a
    /// report replayed from the journal: unless this is 0, the totals above miss whatever
    /// those entries reported, and `executions` may too.
    pub journal_entries_dropped: u64,
}

/// What the oracle saw since the last reset. Serialized as the admin route's JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OracleReport {
    /// Counters.
    pub totals: OracleTotals,
    /// Every execution, in order.
    pub executions: Vec<ExecutionRecord>,
    /// Every resume attempt, in order.
    pub resumes: Vec<ResumeRecord>,
    /// The trace context of every request that carried one, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<TraceRecord>,
}

impl OracleReport {
    /// Executions carrying this tag.
    pub fn executions_tagged<'a>(
        &'a self,
        tag: &'a str,
    ) -> impl Iterator<Item = &'a ExecutionRecord> {
        self.executions
            .iter()
            .filter(move |e| e.tag.as_deref() == Some(tag))
    }

    /// Rejections with this reason.
    pub fn rejections(&self, reason: &str) -> u64 {
        self.totals.rejections.get(reason).copied().unwrap_or(0)
    }

    /// Whether `executions` holds every execution counted in the totals (the record limit
    /// was not reached). A per-call join over an incomplete list misses executions silently.
    pub fn executions_complete(&self) -> bool {
        self.totals.execution_records_dropped == 0 && self.totals.journal_entries_dropped == 0
    }
}

/// One thing an instance reports: what the oracle applies and what the journal stores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum OracleEvent {
    Request {
        instance: usize,
    },
    Initialized {
        session: String,
        capability_hash: String,
    },
    SessionMadeUp,
    IdempotentReplay,
    Execution {
        tag: Option<String>,
        tool: String,
        instance: usize,
        session: String,
        capability_hash: String,
        unknown_record: bool,
        side_effect: bool,
        keyed: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        carried_capability_hash: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        carried_capabilities: Option<Value>,
        /// Its context did not hold the expected client capabilities (judged by the oracle
        /// that received the report, which was told what to expect).
        #[serde(default, skip_serializing_if = "is_false")]
        unexpected_client_capabilities: bool,
    },
    Resume {
        record: ResumeRecord,
    },
    Trace {
        record: TraceRecord,
    },
    /// [`Oracle::reset`] as a journal entry: counters and records restart, the truth stays.
    Reset,
    /// Not reported by anyone: what a capped journal reads back first when it has dropped
    /// `entries` older entries (see [`OracleReport::journal_trimmed_entry`]).
    JournalTrimmed {
        entries: u64,
    },
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Whether `actual` holds `expected`: every member of an expected object present in `actual`
/// and holding the expected value in turn; any other expected value equal.
fn holds(actual: &Value, expected: &Value) -> bool {
    match expected {
        Value::Object(members) => members
            .iter()
            .all(|(k, v)| actual.get(k).is_some_and(|a| holds(a, v))),
        other => actual == other,
    }
}

impl OracleEvent {
    fn of(e: Execution<'_>, unexpected_client_capabilities: bool) -> Self {
        OracleEvent::Execution {
            tag: e.tag,
            tool: e.tool.to_owned(),
            instance: e.instance,
            session: e.session.to_owned(),
            capability_hash: e.capability_hash.to_owned(),
            unknown_record: e.unknown_record,
            side_effect: e.side_effect,
            keyed: e.keyed,
            carried_capability_hash: e.carried.map(|(h, _)| h.to_owned()),
            carried_capabilities: e.carried.map(|(_, c)| c.clone()),
            unexpected_client_capabilities,
        }
    }
}

impl OracleReport {
    /// Replays an oracle journal (see [`Store::journal_entries`]) into the report an
    /// in-process oracle would have produced from the same reports in the same order,
    /// keeping up to `record_limit` records per list. Fails on an entry it cannot read.
    pub fn from_journal(
        entries: &[Value],
        record_limit: usize,
    ) -> Result<OracleReport, serde_json::Error> {
        let mut state = OracleState {
            record_limit,
            ..OracleState::default()
        };
        for entry in entries {
            let event: OracleEvent = serde_json::from_value(entry.clone())?;
            state.apply(event);
        }
        Ok(state.report)
    }

    /// A journal entry that resets the counters and records of a report replayed from the
    /// journal (what [`Cluster::reset_oracle`](crate::Cluster::reset_oracle) does in process).
    pub fn journal_reset_entry() -> Value {
        serde_json::to_value(OracleEvent::Reset).unwrap_or(Value::Null)
    }

    /// The entry a store's [`Store::journal_entries`] reads back first when its journal has
    /// dropped `entries` older entries, so a report replayed from it counts them in
    /// `journal_entries_dropped` and does not claim to be complete.
    pub fn journal_trimmed_entry(entries: u64) -> Value {
        serde_json::to_value(OracleEvent::JournalTrimmed { entries }).unwrap_or(Value::Null)
    }
}

#[derive(Debug)]
struct OracleState {
    /// The capability hash each session was negotiated under, for as many sessions as the
    /// store keeps (an older one is forgotten there too, so nothing can run under it).
    truth: Bounded<String, String>,
    /// Every tag that executed since the last reset. Not capped: the repeat and duplicate
    /// totals depend on it (about 100 bytes per distinct tag).
    executed_tags: HashSet<String>,
    record_limit: usize,
    report: OracleReport,
    /// Tool executions in flight.
    running: u64,
    /// Requests that may still execute a tool, from their acceptance until the work they
    /// started has ended (see [`Oracle::in_flight`]).
    in_flight: u64,
}

impl Default for OracleState {
    fn default() -> Self {
        Self {
            truth: Bounded::new(MAX_SESSIONS),
            executed_tags: HashSet::new(),
            record_limit: 0,
            report: OracleReport::default(),
            running: 0,
            in_flight: 0,
        }
    }
}

impl OracleState {
    fn idle(&self) -> bool {
        self.running == 0 && self.in_flight == 0
    }
}

impl OracleState {
    fn apply(&mut self, event: OracleEvent) {
        match event {
            OracleEvent::Request { instance } => {
                let per = &mut self.report.totals.requests_per_instance;
                if per.len() <= instance {
                    per.resize(instance + 1, 0);
                }
                per[instance] += 1;
            }
            OracleEvent::Initialized {
                session,
                capability_hash,
            } => {
                self.truth.insert(session, capability_hash);
                self.report.totals.initializes += 1;
            }
            OracleEvent::SessionMadeUp => self.report.totals.sessions_made_up += 1,
            OracleEvent::IdempotentReplay => self.report.totals.idempotent_replays += 1,
            OracleEvent::Execution {
                tag,
                tool,
                instance,
                session,
                capability_hash,
                unknown_record,
                side_effect,
                keyed,
                carried_capability_hash,
                carried_capabilities,
                unexpected_client_capabilities,
            } => {
                let expected =
                    carried_capability_hash.or_else(|| self.truth.get(&session).cloned());
                let wrong_capability = unexpected_client_capabilities
                    || expected.as_deref().is_some_and(|h| h != capability_hash);
                // Untagged calls cannot be told apart, so they are never counted as repeats.
                let repeated = match &tag {
                    Some(t) => !self.executed_tags.insert(t.clone()),
                    None => false,
                };
                let duplicate_side_effect = side_effect && repeated;
                let t = &mut self.report.totals;
                t.executions += 1;
                t.wrong_capability += u64::from(wrong_capability);
                t.unknown_record += u64::from(unknown_record);
                t.duplicate_side_effects += u64::from(duplicate_side_effect);
                t.repeated_executions += u64::from(repeated);
                t.repeated_unkeyed_executions += u64::from(repeated && !keyed);
                if self.report.executions.len() < self.record_limit {
                    self.report.executions.push(ExecutionRecord {
                        tag,
                        tool,
                        instance,
                        session,
                        capability_hash,
                        expected_capability_hash: expected,
                        wrong_capability,
                        unexpected_client_capabilities,
                        unknown_record,
                        side_effect,
                        keyed,
                        duplicate_side_effect,
                        carried_capabilities,
                    });
                } else {
                    self.report.totals.execution_records_dropped += 1;
                }
            }
            OracleEvent::Resume { record } => {
                let t = &mut self.report.totals;
                t.resumes += 1;
                if record.honored {
                    t.honored_resumes += 1;
                    t.cross_instance_resumes += u64::from(record.cross_instance);
                }
                if let Some(reason) = &record.reason {
                    *t.rejections.entry(reason.clone()).or_insert(0) += 1;
                }
                if self.report.resumes.len() < self.record_limit {
                    self.report.resumes.push(record);
                } else {
                    t.resume_records_dropped += 1;
                }
            }
            OracleEvent::Trace { record } => {
                if self.report.traces.len() < self.record_limit {
                    self.report.traces.push(record);
                }
            }
            OracleEvent::JournalTrimmed { entries } => {
                self.report.totals.journal_entries_dropped += entries;
            }
            OracleEvent::Reset => {
                let n = self.report.totals.requests_per_instance.len();
                self.report = OracleReport::default();
                self.report.totals.requests_per_instance = vec![0; n];
                self.executed_tags.clear();
            }
        }
    }
}

/// One execution as an instance reports it.
pub(crate) struct Execution<'a> {
    pub tag: Option<String>,
    pub tool: &'a str,
    pub instance: usize,
    pub session: &'a str,
    pub capability_hash: &'a str,
    pub unknown_record: bool,
    pub side_effect: bool,
    pub keyed: bool,
    /// 2026-07-28 era: the hash of the context the request carried, and its client
    /// capabilities (the truth the execution is judged against).
    pub carried: Option<(&'a str, &'a Value)>,
    /// The client capabilities of the context it runs under (judged against the expected
    /// ones, when the oracle was told any).
    pub client_capabilities: &'a Value,
}

/// Shared handle to the oracle. Cheap to clone.
#[derive(Clone)]
pub struct Oracle {
    state: Arc<Mutex<OracleState>>,
    idle: Arc<Notify>,
    journal: Option<Arc<dyn Store>>,
    /// The client capabilities every execution's context must hold, when known.
    expected: Option<Arc<Value>>,
}

impl std::fmt::Debug for Oracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oracle")
            .field("journal", &self.journal.is_some())
            .field("expected", &self.expected)
            .finish_non_exhaustive()
    }
}

/// Marks one execution in flight; dropping it (also on abort) marks it over.
#[derive(Debug)]
pub(crate) struct RunningGuard {
    oracle: Oracle,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        let now_idle = self.oracle.with(|s| {
            s.running = s.running.saturating_sub(1);
            s.idle()
        });
        if now_idle {
            self.oracle.idle.notify_waiters();
        }
    }
}

/// Marks one request in flight that may still execute a tool; dropping it (also on abort)
/// marks it over.
#[derive(Debug)]
pub(crate) struct InFlightGuard {
    oracle: Oracle,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let now_idle = self.oracle.with(|s| {
            s.in_flight = s.in_flight.saturating_sub(1);
            s.idle()
        });
        if now_idle {
            self.oracle.idle.notify_waiters();
        }
    }
}

impl Oracle {
    pub(crate) fn new(instances: usize, record_limit: usize) -> Self {
        let mut state = OracleState {
            record_limit,
            ..OracleState::default()
        };
        state.report.totals.requests_per_instance = vec![0; instances];
        Self {
            state: Arc::new(Mutex::new(state)),
            idle: Arc::new(Notify::new()),
            journal: None,
            expected: None,
        }
    }

    /// This oracle, judging every execution against `expected` client capabilities too
    /// (None: only against the negotiated or carried context).
    pub(crate) fn expecting(self, expected: Option<Value>) -> Self {
        Self {
            expected: expected.map(Arc::new),
            ..self
        }
    }

    /// An oracle that also writes every report to `journal` before applying it.
    pub(crate) fn with_journal(
        instances: usize,
        record_limit: usize,
        journal: Arc<dyn Store>,
    ) -> Self {
        Self {
            journal: Some(journal),
            ..Self::new(instances, record_limit)
        }
    }

    /// Journals the event (when this oracle has a journal), then applies it.
    async fn record(&self, event: OracleEvent) -> Result<(), StoreError> {
        if let Some(journal) = &self.journal {
            let entry = serde_json::to_value(&event)
                .map_err(|e| StoreError(format!("oracle entry: {e}")))?;
            journal.journal_append(&entry).await?;
        }
        self.with(|s| s.apply(event));
        Ok(())
    }

    fn with<T>(&self, f: impl FnOnce(&mut OracleState) -> T) -> T {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    /// A copy of everything recorded since the last reset.
    pub fn report(&self) -> OracleReport {
        self.with(|s| s.report.clone())
    }

    /// Clears the counters and records; the truth about live sessions is kept.
    pub fn reset(&self) {
        self.with(|s| s.apply(OracleEvent::Reset));
    }

    /// Number of tool executions in flight on the instances reporting here.
    pub(crate) fn running(&self) -> u64 {
        self.with(|s| s.running)
    }

    /// Counts a request that may execute a tool as in flight until the guard is dropped.
    /// The balancer takes one for a POST it accepts and holds it until the instance has
    /// answered its head; the instance takes one for the POST it handles, and one for the
    /// work it spawns for it, held until that work ends. Held end to end, a request never
    /// reads as idle between its acceptance and the end of its execution, however long it
    /// waits before the execution starts (on the store, on the scheduler).
    pub(crate) fn in_flight(&self) -> InFlightGuard {
        self.with(|s| s.in_flight += 1);
        InFlightGuard {
            oracle: self.clone(),
        }
    }

    /// Waits until nothing that could still execute a tool is in flight anywhere in the
    /// cluster (no execution, and no request between its acceptance and the end of the work
    /// it started: see [`Oracle::in_flight`]), or `timeout`. Returns false on timeout.
    ///
    /// What it cannot see: a request on its way to the balancer, and one whose client left
    /// while the balancer was handing it to an instance.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.with(|s| s.idle()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.with(|s| s.idle());
            }
        }
    }

    /// Counts a request. Not worth failing a request for: a lost count is only a count.
    pub(crate) async fn request(&self, instance: usize) {
        if let Err(e) = self.record(OracleEvent::Request { instance }).await {
            tracing::warn!("oracle: request not journaled: {e}");
        }
    }

    /// Records the trace context a request carried. Not worth failing a request for.
    pub(crate) async fn trace(&self, record: TraceRecord) {
        if let Err(e) = self.record(OracleEvent::Trace { record }).await {
            tracing::warn!("oracle: trace context not journaled: {e}");
        }
    }

    pub(crate) async fn initialized(
        &self,
        session: &str,
        capability_hash: &str,
    ) -> Result<(), StoreError> {
        self.record(OracleEvent::Initialized {
            session: session.to_owned(),
            capability_hash: capability_hash.to_owned(),
        })
        .await
    }

    pub(crate) async fn session_made_up(&self) -> Result<(), StoreError> {
        self.record(OracleEvent::SessionMadeUp).await
    }

    pub(crate) async fn idempotent_replay(&self) -> Result<(), StoreError> {
        self.record(OracleEvent::IdempotentReplay).await
    }

    /// Records an execution starting now and returns the guard that marks it in flight; an
    /// error when the journal cannot take it (the tool must not run then).
    pub(crate) async fn execution(&self, e: Execution<'_>) -> Result<RunningGuard, StoreError> {
        let unexpected = self
            .expected
            .as_deref()
            .is_some_and(|expected| !holds(e.client_capabilities, expected));
        self.record(OracleEvent::of(e, unexpected)).await?;
        self.with(|s| s.running += 1);
        Ok(RunningGuard {
            oracle: self.clone(),
        })
    }

    pub(crate) async fn resume(&self, record: ResumeRecord) -> Result<(), StoreError> {
        self.record(OracleEvent::Resume { record }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec<'a>(tag: Option<&str>, tool: &'a str, instance: usize, hash: &'a str) -> Execution<'a> {
        Execution {
            tag: tag.map(str::to_owned),
            tool,
            instance,
            session: "s",
            capability_hash: hash,
            unknown_record: false,
            side_effect: tool != "generate",
            keyed: false,
            carried: None,
            client_capabilities: &Value::Null,
        }
    }

    /// The truth of each session is kept as long as the store keeps the session, and no
    /// longer: an `initialize` flood cannot grow it without bound.
    #[test]
    fn session_truth_keeps_the_newest_sessions_only() {
        let mut state = OracleState::default();
        let n = crate::store::MAX_SESSIONS + 10;
        for i in 0..n {
            state.apply(OracleEvent::Initialized {
                session: format!("s{i}"),
                capability_hash: "h".into(),
            });
        }
        assert_eq!(state.truth.len(), crate::store::MAX_SESSIONS);
        assert!(state.truth.get("s0").is_none());
        assert_eq!(
            state.truth.get(&format!("s{}", n - 1)).map(String::as_str),
            Some("h")
        );
    }

    #[tokio::test]
    async fn flags_wrong_capability_and_duplicates() {
        let o = Oracle::new(2, DEFAULT_ORACLE_RECORD_LIMIT);
        o.initialized("s", "h1").await.unwrap();
        drop(
            o.execution(exec(Some("a"), "generate", 0, "h1"))
                .await
                .unwrap(),
        );
        drop(
            o.execution(exec(Some("b"), "generate", 1, "h0"))
                .await
                .unwrap(),
        );
        drop(
            o.execution(exec(Some("c"), "counter_increment", 1, "h1"))
                .await
                .unwrap(),
        );
        drop(
            o.execution(exec(Some("c"), "counter_increment", 0, "h1"))
                .await
                .unwrap(),
        );
        drop(
            o.execution(Execution {
                keyed: true,
                ..exec(Some("p"), "prepare", 0, "h1")
            })
            .await
            .unwrap(),
        );
        drop(
            o.execution(Execution {
                keyed: true,
                ..exec(Some("p"), "prepare", 1, "h1")
            })
            .await
            .unwrap(),
        );
        drop(
            o.execution(Execution {
                session: "unknown",
                ..exec(None, "generate", 0, "h0")
            })
            .await
            .unwrap(),
        );
        let r = o.report();
        assert_eq!(r.totals.executions, 7);
        assert_eq!(r.totals.wrong_capability, 1);
        assert!(r.executions_tagged("b").all(|e| e.wrong_capability));
        assert_eq!(r.totals.duplicate_side_effects, 2);
        assert!(
            r.executions_tagged("p")
                .last()
                .unwrap()
                .duplicate_side_effect
        );
        assert_eq!(r.totals.repeated_executions, 2);
        assert_eq!(r.totals.repeated_unkeyed_executions, 1);
        assert!(r.executions_complete());
        o.reset();
        assert_eq!(o.report().totals.executions, 0);
        assert_eq!(o.report().totals.requests_per_instance, vec![0, 0]);
    }

    #[tokio::test]
    async fn a_sessionless_execution_is_judged_by_what_its_request_carried() {
        let o = Oracle::new(1, DEFAULT_ORACLE_RECORD_LIMIT);
        let caps = serde_json::json!({"experimental": {"sampling": {"temperature": 0.2}}});
        for ran_under in ["h1", "h2"] {
            drop(
                o.execution(Execution {
                    session: "",
                    carried: Some(("h1", &caps)),
                    ..exec(Some(ran_under), "generate", 0, ran_under)
                })
                .await
                .unwrap(),
            );
        }
        let r = o.report();
        assert_eq!(r.totals.wrong_capability, 1);
        let wrong = r.executions_tagged("h2").next().unwrap();
        assert!(wrong.wrong_capability);
        assert_eq!(wrong.expected_capability_hash.as_deref(), Some("h1"));
        assert_eq!(wrong.carried_capabilities.as_ref(), Some(&caps));
        let store: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::new());
        let journaled = Oracle::with_journal(1, DEFAULT_ORACLE_RECORD_LIMIT, store.clone());
        drop(
            journaled
                .execution(Execution {
                    session: "",
                    carried: Some(("h1", &caps)),
                    ..exec(Some("j"), "generate", 0, "h2")
                })
                .await
                .unwrap(),
        );
        let entries = store.journal_entries().await.unwrap();
        let replayed = OracleReport::from_journal(&entries, DEFAULT_ORACLE_RECORD_LIMIT).unwrap();
        assert_eq!(replayed.executions, journaled.report().executions);
        assert_eq!(replayed.totals.wrong_capability, 1);
    }

    #[tokio::test]
    async fn executions_are_judged_against_the_expected_client_capabilities() {
        let caps = |t: f64| serde_json::json!({"experimental": {"sampling": {"temperature": t}}});
        let expected = caps(0.2);
        let mut more = caps(0.2);
        more["elicitation"] = serde_json::json!({});
        let none = serde_json::json!({});
        let store: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::new());
        let o = Oracle::with_journal(1, DEFAULT_ORACLE_RECORD_LIMIT, store.clone())
            .expecting(Some(expected.clone()));
        o.initialized("s", "h1").await.unwrap();
        // Each request carried what it ran under (its own hash): only the expectation can
        // tell the ones whose client sent other capabilities.
        for (tag, ran_under) in [("same", &expected), ("more", &more), ("hot", &caps(1.0))]
            .into_iter()
            .chain([("none", &none)])
        {
            drop(
                o.execution(Execution {
                    session: "",
                    carried: Some((tag, ran_under)),
                    client_capabilities: ran_under,
                    ..exec(Some(tag), "generate", 0, tag)
                })
                .await
                .unwrap(),
            );
        }
        // A session negotiated under other capabilities, executing under them.
        drop(
            o.execution(Execution {
                client_capabilities: &caps(0.7),
                ..exec(Some("session"), "generate", 0, "h1")
            })
            .await
            .unwrap(),
        );
        let r = o.report();
        let flagged = |tag: &str| {
            let e = r.executions_tagged(tag).next().unwrap();
            assert_eq!(
                e.wrong_capability, e.unexpected_client_capabilities,
                "{tag}"
            );
            e.wrong_capability
        };
        assert!(!flagged("same") && !flagged("more"));
        assert!(flagged("hot") && flagged("none") && flagged("session"));
        assert_eq!(r.totals.wrong_capability, 3);
        let entries = store.journal_entries().await.unwrap();
        let replayed = OracleReport::from_journal(&entries, DEFAULT_ORACLE_RECORD_LIMIT).unwrap();
        assert_eq!(replayed.executions, r.executions);
        assert_eq!(replayed.totals.wrong_capability, 3);
        // Told nothing, the oracle sees none of them.
        let blind = Oracle::new(1, DEFAULT_ORACLE_RECORD_LIMIT);
        drop(
            blind
                .execution(Execution {
                    session: "",
                    carried: Some(("hot", &caps(1.0))),
                    client_capabilities: &caps(1.0),
                    ..exec(Some("hot"), "generate", 0, "hot")
                })
                .await
                .unwrap(),
        );
        assert_eq!(blind.report().totals.wrong_capability, 0);
    }

    #[tokio::test]
    async fn the_record_limit_is_reported_and_totals_keep_counting() {
        let o = Oracle::new(1, 2);
        o.initialized("s", "h1").await.unwrap();
        for tag in ["a", "b", "c", "c"] {
            drop(
                o.execution(exec(Some(tag), "counter_increment", 0, "h0"))
                    .await
                    .unwrap(),
            );
        }
        for _ in 0..3 {
            o.resume(ResumeRecord {
                session: "s".into(),
                stream: "x".into(),
                instance: 0,
                owner: Some(0),
                cross_instance: false,
                honored: true,
                reason: None,
            })
            .await
            .unwrap();
        }
        let r = o.report();
        assert_eq!(r.executions.len(), 2);
        assert_eq!(r.totals.executions, 4);
        assert_eq!(r.totals.execution_records_dropped, 2);
        assert!(!r.executions_complete());
        // Past the limit the counters are still exact.
        assert_eq!(r.totals.wrong_capability, 4);
        assert_eq!(r.totals.duplicate_side_effects, 1);
        assert_eq!((r.resumes.len(), r.totals.resume_records_dropped), (2, 1));
        assert_eq!(r.totals.honored_resumes, 3);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["totals"]["execution_records_dropped"], 2);
        o.reset();
        assert!(o.report().executions_complete());
    }

    /// A journal that dropped its oldest entries cannot vouch for the executions they held:
    /// the report replayed from it says so instead of under-counting silently.
    #[tokio::test]
    async fn a_trimmed_journal_replays_into_an_incomplete_report() {
        let store: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::with_journal_cap(3));
        let o = Oracle::with_journal(1, DEFAULT_ORACLE_RECORD_LIMIT, store.clone());
        for tag in ["a", "b", "c", "d", "e"] {
            drop(o.execution(exec(Some(tag), "echo", 0, "h")).await.unwrap());
        }
        let entries = store.journal_entries().await.unwrap();
        let replayed = OracleReport::from_journal(&entries, DEFAULT_ORACLE_RECORD_LIMIT).unwrap();
        assert_eq!(replayed.totals.executions, 3);
        assert_eq!(replayed.totals.journal_entries_dropped, 2);
        assert!(!replayed.executions_complete());
        // Entries dropped before a reset are no loss to what follows it.
        store
            .journal_append(&OracleReport::journal_reset_entry())
            .await
            .unwrap();
        drop(o.execution(exec(Some("f"), "echo", 0, "h")).await.unwrap());
        let entries = store.journal_entries().await.unwrap();
        let replayed = OracleReport::from_journal(&entries, DEFAULT_ORACLE_RECORD_LIMIT).unwrap();
        assert_eq!(replayed.totals.executions, 1);
        assert!(replayed.executions_complete());
    }

    #[tokio::test]
    async fn a_journal_replays_into_the_same_report() {
        let store: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::new());
        let o = Oracle::with_journal(2, DEFAULT_ORACLE_RECORD_LIMIT, store.clone());
        o.request(1).await;
        o.initialized("s", "h1").await.unwrap();
        drop(
            o.execution(exec(Some("a"), "counter_increment", 0, "h1"))
                .await
                .unwrap(),
        );
        o.reset();
        store
            .journal_append(&OracleReport::journal_reset_entry())
            .await
            .unwrap();
        drop(
            o.execution(exec(Some("a"), "counter_increment", 1, "h0"))
                .await
                .unwrap(),
        );
        drop(
            o.execution(exec(Some("a"), "counter_increment", 1, "h1"))
                .await
                .unwrap(),
        );
        o.session_made_up().await.unwrap();
        o.idempotent_replay().await.unwrap();
        o.resume(ResumeRecord {
            session: "s".into(),
            stream: "x".into(),
            instance: 1,
            owner: Some(0),
            cross_instance: true,
            honored: false,
            reason: Some("not_owner".into()),
        })
        .await
        .unwrap();
        let entries = store.journal_entries().await.unwrap();
        let replayed = OracleReport::from_journal(&entries, DEFAULT_ORACLE_RECORD_LIMIT).unwrap();
        assert_eq!(replayed, o.report());
        // The truth survived the reset: the drifted execution is flagged.
        assert_eq!(replayed.totals.wrong_capability, 1);
        assert_eq!(replayed.totals.duplicate_side_effects, 1);
        assert_eq!(replayed.rejections("not_owner"), 1);
        assert_eq!(
            (replayed.totals.resumes, replayed.totals.honored_resumes),
            (1, 0)
        );
    }
}
