//! [`RedisStore`]: the [`Store`] on Redis, as the seed's instances shared it.
//!
//! Layout, every key under the namespace (`mcp:` by default):
//!
//! | key | type | what |
//! |---|---|---|
//! | `session:<id>` | string (JSON) | session record |
//! | `events:<session>` | stream | the session's event log: every event of every SSE stream of the session, fields `s` (SSE stream id), `seq`, `id`, `data`, `kind`; a finished stream adds an entry `s`, `fin` |
//! | `stream:<id>` | hash `rec`, `session`, `finished`, `head`, `from` | SSE stream record; `from` is the session log's last entry id when the stream was created |
//! | `request:<session>:<rpc id>` | hash `rec`, `state`, `instance`, `holder` | request record |
//! | `prepared:<id>` | string (JSON) | `prepare`'s record |
//! | `task:<id>` | hash `rec`, `state`, `instance`, `holder` | task record (2026-07-28 tasks extension); `state` is `running` while it works |
//! | `idem:<key>` | hash `state`, `fp`, `instance`, `holder`, `claim`, `outcome` | idempotency key; `claim` names the claim that took it |
//! | `running-requests:<i>`, `running-keys:<i>` | set | what instance `i` holds while it runs (working tasks are in the first) |
//! | `lease:<holder>` | string with expiry | this handle is alive |
//! | `counter:<name>` | integer | `counter_increment` |
//! | `journal:oracle` | stream, fields `e` (entry), `n` (its number) | the oracle's journal |
//! | `journal:appended` | integer | entries ever appended to the journal (trimmed ones too) |
//!
//! The event log is a Redis stream keyed by session id, as in the incident. `Last-Event-ID`
//! names one SSE stream: a read takes the session log from the stream's `from` on and keeps
//! that stream's entries (a Lua script, one round trip). A resume on another instance follows
//! the live tail with `XREAD BLOCK` from the log's last entry id (on a connection of its own,
//! so the shared one never blocks) and reads again when anything is appended; finishing a
//! stream appends an entry too, so a blocked reader wakes on the finish. The log is trimmed
//! (`MAXLEN ~`) per session: a resume from before what is kept is rejected as a gap.
//!
//! Claims (an idempotency key, a request record in state `Running`) name the handle that
//! made them. Each handle keeps a lease key alive; a claim whose holder's lease has expired
//! belongs to a dead process and reads as lost, exactly as [`Store::release_instance`] would
//! make it, so a killed instance process needs nobody to clean up after it. A key found lost
//! that way stays lost (it never runs again); an outcome stored later still wins.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::streams::StreamRangeReply;
use redis::{AsyncConnectionConfig, Client, RedisError, Script};
use serde_json::Value;

use crate::oracle::OracleReport;

use super::{
    EventKind, IdempotencyBegin, PreparedRecord, RequestRecord, RequestState, SessionRecord, Store,
    StoreError, StoreFuture, StoredEvent, StoredOutcome, StreamRecord, TaskRecord, TaskStatus,
};

/// Settings of a [`RedisStore`].
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Prefix of every key. Stores with different namespaces share a server without seeing
    /// each other (tests use one namespace each).
    pub namespace: String,
    /// How long records, event logs and finished idempotency results live after their last
    /// write. Keys whose outcome is unknown (their instance died mid-call) never expire.
    pub retention: Duration,
    /// Entries kept per session log (`XADD MAXLEN ~`); older ones are trimmed, and a resume
    /// from before them is rejected as a gap.
    pub max_events_per_session: usize,
    /// Entries kept in the oracle's journal (`MAXLEN ~`).
    pub max_journal: usize,
    /// Lifetime of this handle's lease: how long after its process dies its claims start
    /// reading as lost. Renewed every third of it.
    pub lease: Duration,
    /// Deadline of every command; a store that does not answer in time is an error.
    pub response_timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            namespace: "mcp:".into(),
            retention: Duration::from_secs(3600),
            max_events_per_session: 10_000,
            max_journal: 1_000_000,
            lease: Duration::from_secs(3),
            response_timeout: Duration::from_secs(2),
        }
    }
}

/// Blocked reads idle in the pool beyond this many are closed.
const MAX_IDLE_BLOCKING: usize = 16;

struct Inner {
    client: Client,
    conn: ConnectionManager,
    /// Dedicated connections for `XREAD BLOCK`: a blocked read would stall every other
    /// command multiplexed on the shared connection.
    blocking: Mutex<Vec<MultiplexedConnection>>,
    opts: RedisOptions,
    holder: String,
    heartbeat: tokio::task::AbortHandle,
    scripts: Scripts,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

struct Scripts {
    create_stream: Script,
    append: Script,
    read_after: Script,
    finish_stream: Script,
    get_request: Script,
    begin: Script,
    finish: Script,
    abandon: Script,
    lose: Script,
    release: Script,
    journal_append: Script,
}

/// The [`Store`] on Redis (see the module docs for the layout). Cheap to clone.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("namespace", &self.inner.opts.namespace)
            .field("holder", &self.inner.holder)
            .finish()
    }
}

fn err(e: RedisError) -> StoreError {
    StoreError(format!("redis: {e}"))
}

fn json_err(e: serde_json::Error) -> StoreError {
    StoreError(format!("redis: malformed record: {e}"))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn state_name(s: RequestState) -> &'static str {
    match s {
        RequestState::Running => "running",
        RequestState::Done => "done",
        RequestState::Lost => "lost",
    }
}

// The session log's key is computed from the stream record (the session id), so these
// scripts touch a key they do not declare: one Redis server, not Redis Cluster.

// KEYS: stream record. ARGV: namespace, stream id, record JSON, session, retention ms.
// Replaces a stream of the same id; its reads start after what the log holds now.
const CREATE_STREAM: &str = r#"
local log = ARGV[1] .. 'events:' .. ARGV[4]
local top = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)
local from = '0-0'
if top[1] then from = top[1][1] end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'rec', ARGV[3], 'session', ARGV[4], 'finished', 0, 'head', 0, 'from', from)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"#;

// KEYS: stream record. ARGV: namespace, stream id, seq, event id, data, kind JSON, maxlen,
// retention ms. An event of an unknown stream is dropped, as in memory.
const APPEND: &str = r#"
local session = redis.call('HGET', KEYS[1], 'session')
if not session then return 0 end
local log = ARGV[1] .. 'events:' .. session
redis.call('XADD', log, 'MAXLEN', '~', ARGV[7], '*', 's', ARGV[2], 'seq', ARGV[3], 'id', ARGV[4], 'data', ARGV[5], 'kind', ARGV[6])
redis.call('PEXPIRE', log, ARGV[8])
return 1
"#;

// KEYS: stream record. ARGV: namespace, stream id, head, retention ms. Finishing an unknown
// stream does nothing (as in memory).
const FINISH_STREAM: &str = r#"
local session = redis.call('HGET', KEYS[1], 'session')
if not session then return 0 end
redis.call('HSET', KEYS[1], 'finished', 1, 'head', ARGV[3])
local log = ARGV[1] .. 'events:' .. session
redis.call('XADD', log, '*', 's', ARGV[2], 'fin', ARGV[3])
redis.call('PEXPIRE', log, ARGV[4])
return 1
"#;

// KEYS: stream record. ARGV: namespace, stream id, after. Returns {exists, finished, log key,
// last entry id of the log, {{seq, id, data, kind}...}}: the stream's events with seq > after.
const READ_AFTER: &str = r#"
local v = redis.call('HMGET', KEYS[1], 'session', 'finished', 'from')
if not v[1] then return {0, 0, '', '0-0', {}} end
local log = ARGV[1] .. 'events:' .. v[1]
local last = '0-0'
local top = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)
if top[1] then last = top[1][1] end
local out = {}
local after = tonumber(ARGV[3])
for _, e in ipairs(redis.call('XRANGE', log, '(' .. v[3], '+')) do
  local f = e[2]
  local h = {}
  for i = 1, #f, 2 do h[f[i]] = f[i + 1] end
  if h['s'] == ARGV[2] and h['seq'] and tonumber(h['seq']) > after then
    table.insert(out, {h['seq'], h['id'], h['data'], h['kind']})
  end
end
local finished = 0
if v[2] == '1' then finished = 1 end
return {1, finished, log, last, out}
"#;

const GET_REQUEST: &str = r#"
local v = redis.call('HMGET', KEYS[1], 'rec', 'state', 'holder')
if not v[1] then return false end
local state = v[2]
if state == 'running' and redis.call('EXISTS', ARGV[1] .. 'lease:' .. v[3]) == 0 then
  state = 'lost'
end
return {v[1], state}
"#;

// KEYS: idem key, running-keys set of the instance. ARGV: fingerprint, instance, holder,
// namespace, claim.
const BEGIN: &str = r#"
local k = KEYS[1]
local st = redis.call('HGET', k, 'state')
if not st then
  redis.call('HSET', k, 'state', 'running', 'fp', ARGV[1], 'instance', ARGV[2], 'holder', ARGV[3], 'claim', ARGV[5])
  redis.call('SADD', KEYS[2], k)
  return {'started'}
end
if st == 'running' then
  local holder = redis.call('HGET', k, 'holder')
  if redis.call('EXISTS', ARGV[4] .. 'lease:' .. holder) == 0 then
    redis.call('HSET', k, 'state', 'lost')
    redis.call('PERSIST', k)
    st = 'lost'
  end
end
if redis.call('HGET', k, 'fp') ~= ARGV[1] then return {'mismatch'} end
if st == 'done' then return {'done', redis.call('HGET', k, 'outcome')} end
return {st}
"#;

// KEYS: idem key. ARGV: outcome JSON, retention ms, namespace.
const FINISH: &str = r#"
local k = KEYS[1]
if redis.call('EXISTS', k) == 0 then return 0 end
local i = redis.call('HGET', k, 'instance')
redis.call('HSET', k, 'state', 'done', 'outcome', ARGV[1])
redis.call('PEXPIRE', k, ARGV[2])
if i then redis.call('SREM', ARGV[3] .. 'running-keys:' .. i, k) end
return 1
"#;

// KEYS: idem key. ARGV: namespace, claim. Only the claim that took the key lets it go; a
// key written before keys named their claim (no `claim` field) is let go by any, or no
// release would ever free it.
const ABANDON: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'state') ~= 'running' then return 0 end
local c = redis.call('HGET', k, 'claim')
if c and c ~= ARGV[2] then return 0 end
local i = redis.call('HGET', k, 'instance')
redis.call('DEL', k)
if i then redis.call('SREM', ARGV[1] .. 'running-keys:' .. i, k) end
return 1
"#;

// KEYS: idem key. ARGV: namespace. Lost for good, as a dead instance's keys are.
const LOSE: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'state') ~= 'running' then return 0 end
local i = redis.call('HGET', k, 'instance')
redis.call('HSET', k, 'state', 'lost')
redis.call('PERSIST', k)
if i then redis.call('SREM', ARGV[1] .. 'running-keys:' .. i, k) end
return 1
"#;

// KEYS: journal stream, its count of entries ever appended. ARGV: cap (`MAXLEN ~`), entry.
// Numbers each entry, so a reader that finds entry n first knows n - 1 were trimmed.
const JOURNAL_APPEND: &str = r#"
local n = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'e', ARGV[2], 'n', n)
return n
"#;

// KEYS: running-requests set, running-keys set. ARGV: instance.
const RELEASE: &str = r#"
for _, r in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('HGET', r, 'state') == 'running' and redis.call('HGET', r, 'instance') == ARGV[1] then
    redis.call('HSET', r, 'state', 'lost')
  end
end
redis.call('DEL', KEYS[1])
for _, k in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if redis.call('HGET', k, 'state') == 'running' and redis.call('HGET', k, 'instance') == ARGV[1] then
    redis.call('HSET', k, 'state', 'lost')
    redis.call('PERSIST', k)
  end
end
redis.call('DEL', KEYS[2])
return 1
"#;

impl RedisStore {
    /// Connects with default [`RedisOptions`] (`url` like `redis://127.0.0.1:6379`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects, takes this handle's lease and starts renewing it. Fails when the server
    /// cannot be reached.
    pub async fn connect_with(url: &str, opts: RedisOptions) -> Result<Self, StoreError> {
        let client = Client::open(url).map_err(err)?;
        // Fail fast while the server is away: every command during an outage is an error at
        // once (and starts a reconnection), never a request hanging on a retry schedule.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200))
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(opts.response_timeout));
        let conn = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(err)?;
        let holder = uuid::Uuid::new_v4().simple().to_string();
        let lease_key = format!("{}lease:{holder}", opts.namespace);
        let lease_ms = ms(opts.lease);
        let mut c = conn.clone();
        redis::cmd("SET")
            .arg(&lease_key)
            .arg(1)
            .arg("PX")
            .arg(lease_ms)
            .exec_async(&mut c)
            .await
            .map_err(err)?;
        let period = (opts.lease / 3).max(Duration::from_millis(10));
        let heartbeat = tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // A failed renewal is not fatal here: if the server stays away, every
                // command fails anyway; if the lease lapses, this handle's claims read as
                // lost, which is the safe side.
                let _ = redis::cmd("SET")
                    .arg(&lease_key)
                    .arg(1)
                    .arg("PX")
                    .arg(lease_ms)
                    .exec_async(&mut c)
                    .await;
            }
        })
        .abort_handle();
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                conn,
                blocking: Mutex::new(Vec::new()),
                opts,
                holder,
                heartbeat,
                scripts: Scripts {
                    create_stream: Script::new(CREATE_STREAM),
                    append: Script::new(APPEND),
                    read_after: Script::new(READ_AFTER),
                    finish_stream: Script::new(FINISH_STREAM),
                    get_request: Script::new(GET_REQUEST),
                    begin: Script::new(BEGIN),
                    finish: Script::new(FINISH),
                    abandon: Script::new(ABANDON),
                    lose: Script::new(LOSE),
                    release: Script::new(RELEASE),
                    journal_append: Script::new(JOURNAL_APPEND),
                },
            }),
        })
    }

    /// The options this store runs with.
    pub fn options(&self) -> &RedisOptions {
        &self.inner.opts
    }

    /// Deletes every key of this store's namespace (tests and fresh starts).
    pub async fn clear(&self) -> Result<(), StoreError> {
        let mut c = self.conn();
        let pattern = format!("{}*", self.inner.opts.namespace);
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut c)
                .await
                .map_err(err)?;
            if !keys.is_empty() {
                redis::cmd("DEL")
                    .arg(&keys)
                    .exec_async(&mut c)
                    .await
                    .map_err(err)?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    fn conn(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }

    fn key(&self, kind: &str, id: &str) -> String {
        format!("{}{kind}:{id}", self.inner.opts.namespace)
    }

    /// Runs `script` (abandon, lose) on an idempotency key's record, with `claim` (the
    /// abandoning claim) after the namespace when given.
    async fn settle_key(
        &self,
        script: &Script,
        key: &str,
        claim: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut invocation = script.key(self.key("idem", key));
        invocation.arg(&self.inner.opts.namespace);
        if let Some(claim) = claim {
            invocation.arg(claim);
        }
        let _: i64 = invocation
            .invoke_async(&mut self.conn())
            .await
            .map_err(err)?;
        Ok(())
    }

    fn request_key(&self, session: &str, request_id: &Value) -> String {
        format!(
            "{}request:{session}:{request_id}",
            self.inner.opts.namespace
        )
    }

    fn retention_ms(&self) -> u64 {
        ms(self.inner.opts.retention)
    }

    async fn put_json(&self, key: String, value: &impl serde::Serialize) -> Result<(), StoreError> {
        let body = serde_json::to_string(value).map_err(json_err)?;
        redis::cmd("SET")
            .arg(key)
            .arg(body)
            .arg("PX")
            .arg(self.retention_ms())
            .exec_async(&mut self.conn())
            .await
            .map_err(err)
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        key: String,
    ) -> Result<Option<T>, StoreError> {
        let body: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.conn())
            .await
            .map_err(err)?;
        body.map(|b| serde_json::from_str(&b).map_err(json_err))
            .transpose()
    }

    /// One read of a stream: its events with `seq > after`, in one round trip.
    async fn read_after(&self, stream: &str, after: u64) -> Result<Read, StoreError> {
        type Raw = (
            u8,
            u8,
            String,
            String,
            Vec<(String, String, String, String)>,
        );
        let (exists, finished, log, last, raw): Raw = self
            .inner
            .scripts
            .read_after
            .key(self.key("stream", stream))
            .arg(&self.inner.opts.namespace)
            .arg(stream)
            .arg(after)
            .invoke_async(&mut self.conn())
            .await
            .map_err(err)?;
        let events = raw
            .into_iter()
            .map(|(seq, id, data, kind)| {
                Ok(StoredEvent {
                    seq: seq
                        .parse()
                        .map_err(|_| StoreError(format!("redis: malformed event seq {seq:?}")))?,
                    id,
                    data,
                    kind: serde_json::from_str::<EventKind>(&kind).map_err(json_err)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Read {
            events,
            finished: finished == 1,
            exists: exists == 1,
            log,
            last,
        })
    }

    async fn blocking_conn(&self) -> Result<MultiplexedConnection, StoreError> {
        let pooled = self
            .inner
            .blocking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        if let Some(c) = pooled {
            return Ok(c);
        }
        // No per-command deadline here: the read bounds itself with BLOCK, and the caller
        // puts a deadline around it.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(None);
        self.inner
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(err)
    }

    fn return_blocking(&self, c: MultiplexedConnection) {
        let mut pool = self
            .inner
            .blocking
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if pool.len() < MAX_IDLE_BLOCKING {
            pool.push(c);
        }
    }
}

/// What [`RedisStore::read_after`] found.
struct Read {
    events: Vec<StoredEvent>,
    finished: bool,
    exists: bool,
    /// The session log's key and its last entry id: where a blocked read starts.
    log: String,
    last: String,
}

impl Store for RedisStore {
    fn put_session(&self, record: SessionRecord) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            self.put_json(self.key("session", &record.id), &record)
                .await
        })
    }

    fn get_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(async move { self.get_json(self.key("session", id)).await })
    }

    fn remove_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let n: u64 = redis::cmd("DEL")
                .arg(self.key("session", id))
                .query_async(&mut self.conn())
                .await
                .map_err(err)?;
            Ok(n > 0)
        })
    }

    fn create_stream(&self, record: StreamRecord) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let rec = serde_json::to_string(&record).map_err(json_err)?;
            let _: i64 = self
                .inner
                .scripts
                .create_stream
                .key(self.key("stream", &record.id))
                .arg(&self.inner.opts.namespace)
                .arg(&record.id)
                .arg(rec)
                .arg(&record.session)
                .arg(self.retention_ms())
                .invoke_async(&mut self.conn())
                .await
                .map_err(err)?;
            Ok(())
        })
    }

    fn get_stream<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<StreamRecord>> {
        Box::pin(async move {
            let (rec, finished, head): (Option<String>, Option<String>, Option<u64>) =
                redis::cmd("HMGET")
                    .arg(self.key("stream", id))
                    .arg("rec")
                    .arg("finished")
                    .arg("head")
                    .query_async(&mut self.conn())
                    .await
                    .map_err(err)?;
            let Some(rec) = rec else { return Ok(None) };
            let mut record: StreamRecord = serde_json::from_str(&rec).map_err(json_err)?;
            record.finished = finished.as_deref() == Some("1");
            record.head = head.unwrap_or(0);
            Ok(Some(record))
        })
    }

    fn append_event<'a>(&'a self, stream: &'a str, event: StoredEvent) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let kind = serde_json::to_string(&event.kind).map_err(json_err)?;
            let _: i64 = self
                .inner
                .scripts
                .append
                .key(self.key("stream", stream))
                .arg(&self.inner.opts.namespace)
                .arg(stream)
                .arg(event.seq)
                .arg(&event.id)
                .arg(&event.data)
                .arg(kind)
                .arg(self.inner.opts.max_events_per_session)
                .arg(self.retention_ms())
                .invoke_async(&mut self.conn())
                .await
                .map_err(err)?;
            Ok(())
        })
    }

    fn finish_stream<'a>(&'a self, stream: &'a str, head: u64) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let _: i64 = self
                .inner
                .scripts
                .finish_stream
                .key(self.key("stream", stream))
                .arg(&self.inner.opts.namespace)
                .arg(stream)
                .arg(head)
                .arg(self.retention_ms())
                .invoke_async(&mut self.conn())
                .await
                .map_err(err)?;
            Ok(())
        })
    }

    fn events_after<'a>(
        &'a self,
        stream: &'a str,
        after: u64,
    ) -> StoreFuture<'a, Vec<StoredEvent>> {
        Box::pin(async move { Ok(self.read_after(stream, after).await?.events) })
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
                let read = self.read_after(stream, after).await?;
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                if !read.events.is_empty() || read.finished || !read.exists || left.is_zero() {
                    return Ok(read.events);
                }
                // Blocks until anything is appended to the session's log after what was just
                // read (this stream's events, its finish, or another stream's), then reads
                // again.
                let mut c = self.blocking_conn().await?;
                let mut xread = redis::cmd("XREAD");
                xread
                    .arg("COUNT")
                    .arg(1)
                    .arg("BLOCK")
                    .arg(ms(left))
                    .arg("STREAMS")
                    .arg(&read.log)
                    .arg(&read.last);
                let blocked = xread.query_async::<redis::Value>(&mut c);
                tokio::time::timeout(left + Duration::from_secs(1), blocked)
                    .await
                    .map_err(|_| StoreError("redis: blocked read overran its deadline".into()))?
                    .map_err(err)?;
                self.return_blocking(c);
            }
        })
    }

    fn put_request(&self, record: RequestRecord) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let key = self.request_key(&record.session, &record.request_id);
            let running = self.key("running-requests", &record.instance.to_string());
            let rec = serde_json::to_string(&record).map_err(json_err)?;
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("HSET")
                .arg(&key)
                .arg("rec")
                .arg(rec)
                .arg("state")
                .arg(state_name(record.state))
                .arg("instance")
                .arg(record.instance)
                .arg("holder")
                .arg(&self.inner.holder)
                .ignore()
                .cmd("PEXPIRE")
                .arg(&key)
                .arg(self.retention_ms())
                .ignore();
            if record.state == RequestState::Running {
                pipe.cmd("SADD").arg(&running).arg(&key).ignore();
            } else {
                pipe.cmd("SREM").arg(&running).arg(&key).ignore();
            }
            pipe.exec_async(&mut self.conn()).await.map_err(err)
        })
    }

    fn get_request<'a>(
        &'a self,
        session: &'a str,
        request_id: &'a Value,
    ) -> StoreFuture<'a, Option<RequestRecord>> {
        Box::pin(async move {
            let got: Option<(String, String)> = self
                .inner
                .scripts
                .get_request
                .key(self.request_key(session, request_id))
                .arg(&self.inner.opts.namespace)
                .invoke_async(&mut self.conn())
                .await
                .map_err(err)?;
            let Some((rec, state)) = got else {
                return Ok(None);
            };
            let mut record: RequestRecord = serde_json::from_str(&rec).map_err(json_err)?;
            record.state = match state.as_str() {
                "running" => RequestState::Running,
                "done" => RequestState::Done,
                _ => RequestState::Lost,
            };
            Ok(Some(record))
        })
    }

    fn put_prepared(&self, record: PreparedRecord) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            self.put_json(self.key("prepared", &record.id), &record)
                .await
        })
    }

    fn get_prepared<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<PreparedRecord>> {
        Box::pin(async move { self.get_json(self.key("prepared", id)).await })
    }

    fn idempotency_begin<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        instance: usize,
        claim: &'a str,
    ) -> StoreFuture<'a, IdempotencyBegin> {
        Box::pin(async move {
            let answer: Vec<String> = self
                .inner
                .scripts
                .begin
                .key(self.key("idem", key))
                .key(self.key("running-keys", &instance.to_string()))
                .arg(fingerprint)
                .arg(instance)
                .arg(&self.inner.holder)
                .arg(&self.inner.opts.namespace)
                .arg(claim)
                .invoke_async(&mut self.conn())
                .await
                .map_err(err)?;
            match answer.first().map(String::as_str) {
                Some("started") => Ok(IdempotencyBegin::Started),
                Some("running") => Ok(IdempotencyBegin::Running),
                Some("mismatch") => Ok(IdempotencyBegin::Mismatch),
                Some("lost") => Ok(IdempotencyBegin::Lost),
                Some("done") => {
                    let outcome = answer.get(1).ok_or_else(|| {
                        StoreError("redis: idempotency result without outcome".into())
                    })?;
                    Ok(IdempotencyBegin::Done(
                        serde_json::from_str(outcome).map_err(json_err)?,
                    ))
                }
                other => Err(StoreError(format!(
                    "redis: unexpected idempotency answer {other:?}"
                ))),
            }
        })
    }

    fn idempotency_finish<'a>(
        &'a self,
        key: &'a str,
        outcome: StoredOutcome,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let body = serde_json::to_string(&outcome).map_err(json_err)?;
            let _: i64 = self
                .inner
                .scripts
                .finish
                .key(self.key("idem", key))
                .arg(body)
                .arg(self.retention_ms())
                .arg(&self.inner.opts.namespace)
                .invoke_async(&mut self.conn())
                .await
                .map_err(err)?;
            Ok(())
        })
    }

    fn idempotency_abandon<'a>(&'a self, key: &'a str, claim: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(self.settle_key(&self.inner.scripts.abandon, key, Some(claim)))
    }

    fn idempotency_lose<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(self.settle_key(&self.inner.scripts.lose, key, None))
    }

    fn put_task(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            // The same fields as a request record, so that the lease check and the release
            // of a dead instance treat a working task as they treat a running request.
            let key = self.key("task", &record.id);
            let running = self.key("running-requests", &record.instance.to_string());
            let rec = serde_json::to_string(&record).map_err(json_err)?;
            let working = record.status.is_working();
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("HSET")
                .arg(&key)
                .arg("rec")
                .arg(rec)
                .arg("state")
                .arg(if working { "running" } else { "done" })
                .arg("instance")
                .arg(record.instance)
                .arg("holder")
                .arg(&self.inner.holder)
                .ignore()
                .cmd("PEXPIRE")
                .arg(&key)
                .arg(self.retention_ms())
                .ignore();
            if working {
                pipe.cmd("SADD").arg(&running).arg(&key).ignore();
            } else {
                pipe.cmd("SREM").arg(&running).arg(&key).ignore();
            }
            pipe.exec_async(&mut self.conn()).await.map_err(err)
        })
    }

    fn get_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(async move {
            let got: Option<(String, String)> = self
                .inner
                .scripts
                .get_request
                .key(self.key("task", id))
                .arg(&self.inner.opts.namespace)
                .invoke_async(&mut self.conn())
                .await
                .map_err(err)?;
            let Some((rec, state)) = got else {
                return Ok(None);
            };
            let mut record: TaskRecord = serde_json::from_str(&rec).map_err(json_err)?;
            if state == "lost" && record.status.is_working() {
                record.status = TaskStatus::Lost;
            }
            Ok(Some(record))
        })
    }

    fn increment_counter<'a>(&'a self, name: &'a str) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            redis::cmd("INCR")
                .arg(self.key("counter", name))
                .query_async(&mut self.conn())
                .await
                .map_err(err)
        })
    }

    fn release_instance(&self, instance: usize) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let i = instance.to_string();
            let _: i64 = self
                .inner
                .scripts
                .release
                .key(self.key("running-requests", &i))
                .key(self.key("running-keys", &i))
                .arg(&i)
                .invoke_async(&mut self.conn())
                .await
                .map_err(err)?;
            Ok(())
        })
    }

    fn journal_append<'a>(&'a self, entry: &'a Value) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let _: i64 = self
                .inner
                .scripts
                .journal_append
                .key(self.key("journal", "oracle"))
                .key(self.key("journal", "appended"))
                .arg(self.inner.opts.max_journal)
                .arg(entry.to_string())
                .invoke_async(&mut self.conn())
                .await
                .map_err(err)?;
            Ok(())
        })
    }

    fn journal_entries(&self) -> StoreFuture<'_, Vec<Value>> {
        Box::pin(async move {
            let key = self.key("journal", "oracle");
            let mut out = Vec::new();
            let mut from = "-".to_owned();
            loop {
                let page: StreamRangeReply = redis::cmd("XRANGE")
                    .arg(&key)
                    .arg(&from)
                    .arg("+")
                    .arg("COUNT")
                    .arg(10_000)
                    .query_async(&mut self.conn())
                    .await
                    .map_err(err)?;
                let Some(last) = page.ids.last() else {
                    return Ok(out);
                };
                from = format!("({}", last.id);
                if out.is_empty() {
                    // The first entry kept tells how many before it were trimmed.
                    let first: Option<u64> = page.ids[0].get("n");
                    if let Some(dropped) = first.and_then(|n| n.checked_sub(1)).filter(|d| *d > 0) {
                        out.push(OracleReport::journal_trimmed_entry(dropped));
                    }
                }
                for entry in &page.ids {
                    let body: String = entry.get("e").ok_or_else(|| {
                        StoreError(format!("redis: malformed journal entry {}", entry.id))
                    })?;
                    out.push(serde_json::from_str(&body).map_err(json_err)?);
                }
            }
        })
    }
}
