//! The oracle: what really happened in the cluster, recorded outside the instances' view.
//!
//! Instances report to it; they never read it. It knows the context each session id was
//! truly negotiated under (from the `initialize` that created it), so it can tell an
//! execution under a made-up or drifted context from a correct one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

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
    /// Session id the call carried.
    pub session: String,
    /// Capability hash in force on the executing instance.
    pub capability_hash: String,
    /// Capability hash the session was truly negotiated under (None: never initialized here).
    pub expected_capability_hash: Option<String>,
    /// It ran under another context than the negotiated one.
    pub wrong_capability: bool,
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
        self.totals.execution_records_dropped == 0
    }
}

#[derive(Debug, Default)]
struct OracleState {
    truth: HashMap<String, String>,
    /// Every tag that executed since the last reset. Not capped: the repeat and duplicate
    /// totals depend on it (about 100 bytes per distinct tag).
    executed_tags: HashSet<String>,
    record_limit: usize,
    report: OracleReport,
    running: u64,
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
}

/// Shared handle to the oracle. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Oracle {
    state: Arc<Mutex<OracleState>>,
    idle: Arc<Notify>,
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
            s.running == 0
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
        }
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
        self.with(|s| {
            let n = s.report.totals.requests_per_instance.len();
            s.report = OracleReport::default();
            s.report.totals.requests_per_instance = vec![0; n];
            s.executed_tags.clear();
        });
    }

    /// Waits until no tool execution is in flight anywhere in the cluster, or `timeout`.
    /// Returns false on timeout.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.with(|s| s.running == 0) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.with(|s| s.running == 0);
            }
        }
    }

    pub(crate) fn request(&self, instance: usize) {
        self.with(|s| {
            if let Some(c) = s.report.totals.requests_per_instance.get_mut(instance) {
                *c += 1;
            }
        });
    }

    pub(crate) fn initialized(&self, session: &str, capability_hash: &str) {
        self.with(|s| {
            s.truth
                .insert(session.to_owned(), capability_hash.to_owned());
            s.report.totals.initializes += 1;
        });
    }

    pub(crate) fn session_made_up(&self) {
        self.with(|s| s.report.totals.sessions_made_up += 1);
    }

    pub(crate) fn idempotent_replay(&self) {
        self.with(|s| s.report.totals.idempotent_replays += 1);
    }

    /// Records an execution starting now and returns the guard that marks it in flight.
    pub(crate) fn execution(&self, e: Execution<'_>) -> RunningGuard {
        self.with(|s| {
            let expected = s.truth.get(e.session).cloned();
            let wrong_capability = expected.as_deref().is_some_and(|h| h != e.capability_hash);
            // Untagged calls cannot be told apart, so they are never counted as repeats.
            let repeated = match &e.tag {
                Some(t) => !s.executed_tags.insert(t.clone()),
                None => false,
            };
            let duplicate_side_effect = e.side_effect && repeated;
            let t = &mut s.report.totals;
            t.executions += 1;
            t.wrong_capability += u64::from(wrong_capability);
            t.unknown_record += u64::from(e.unknown_record);
            t.duplicate_side_effects += u64::from(duplicate_side_effect);
            t.repeated_executions += u64::from(repeated);
            t.repeated_unkeyed_executions += u64::from(repeated && !e.keyed);
            if s.report.executions.len() < s.record_limit {
                s.report.executions.push(ExecutionRecord {
                    tag: e.tag,
                    tool: e.tool.to_owned(),
                    instance: e.instance,
                    session: e.session.to_owned(),
                    capability_hash: e.capability_hash.to_owned(),
                    expected_capability_hash: expected,
                    wrong_capability,
                    unknown_record: e.unknown_record,
                    side_effect: e.side_effect,
                    keyed: e.keyed,
                    duplicate_side_effect,
                });
            } else {
                s.report.totals.execution_records_dropped += 1;
            }
            s.running += 1;
        });
        RunningGuard {
            oracle: self.clone(),
        }
    }

    pub(crate) fn resume(&self, record: ResumeRecord) {
        self.with(|s| {
            let t = &mut s.report.totals;
            t.resumes += 1;
            if record.honored && record.cross_instance {
                t.cross_instance_resumes += 1;
            }
            if let Some(reason) = &record.reason {
                *t.rejections.entry(reason.clone()).or_insert(0) += 1;
            }
            if s.report.resumes.len() < s.record_limit {
                s.report.resumes.push(record);
            } else {
                t.resume_records_dropped += 1;
            }
        });
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
        }
    }

    #[test]
    fn flags_wrong_capability_and_duplicates() {
        let o = Oracle::new(2, DEFAULT_ORACLE_RECORD_LIMIT);
        o.initialized("s", "h1");
        drop(o.execution(exec(Some("a"), "generate", 0, "h1")));
        drop(o.execution(exec(Some("b"), "generate", 1, "h0")));
        drop(o.execution(exec(Some("c"), "counter_increment", 1, "h1")));
        drop(o.execution(exec(Some("c"), "counter_increment", 0, "h1")));
        drop(o.execution(Execution {
            keyed: true,
            ..exec(Some("p"), "prepare", 0, "h1")
        }));
        drop(o.execution(Execution {
            keyed: true,
            ..exec(Some("p"), "prepare", 1, "h1")
        }));
        drop(o.execution(Execution {
            session: "unknown",
            ..exec(None, "generate", 0, "h0")
        }));
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

    #[test]
    fn the_record_limit_is_reported_and_totals_keep_counting() {
        let o = Oracle::new(1, 2);
        o.initialized("s", "h1");
        for tag in ["a", "b", "c", "c"] {
            drop(o.execution(exec(Some(tag), "counter_increment", 0, "h0")));
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
            });
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
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["totals"]["execution_records_dropped"], 2);
        o.reset();
        assert!(o.report().executions_complete());
    }
}
