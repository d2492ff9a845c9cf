//! [`RedisStore`]: the store of a fleet, on Redis or Redis Cluster.
//!
//! Every key lives under the namespace (`mcp-resume:` by default) and has the form
//! `<namespace>{<kind>:<digest>}`: the hash tag is a digest of the identifier (never the raw
//! value, which may hold braces), and every operation touches exactly one key, so each is one
//! atomic step on whichever Cluster node owns its slot.
//!
//! | key | type | what | expiry |
//! |---|---|---|---|
//! | `{s:<digest of session id>}` | string (JSON) | session record | `retention` after its write or its last touch (`PEXPIRE`, while the session is in use) |
//! | `{k:<digest of idempotency key>}` | hash `state`, `digest`, `holder`, `until`, `outcome` | a key's life ([`claims`](crate::guard::claims)) | `retention` (a lost key, and a running one past its lease: `lost_retention`) |
//!
//! Leases are judged by the Redis server's clock (`TIME` inside the scripts), so replicas'
//! clocks never disagree about them. A keyed call costs two round trips: the claim and the
//! stored answer (one `EVALSHA` each; scripts are loaded at connect).
//!
//! The Redis must not evict keys (`maxmemory-policy noeviction`): every key here has an
//! expiry, so a `volatile-*` or `allkeys-*` policy may drop a running or finished key under
//! memory pressure, and the call's re-send would run again.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Client, RedisError, Script, ScriptInvocation};
use sha2::{Digest, Sha256};

use super::{Store, StoreFuture};
use crate::guard::{Claim, ClaimOutcome, SessionRecord, StoredOutcome};
use crate::ids::{ClaimToken, IdempotencyKey, SessionId};
use crate::wire::hex;
use crate::{Error, ErrorKind};

/// Settings of a [`RedisStore`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// Prefix of every key; stores with different namespaces share a server without seeing
    /// each other. Default: `mcp-resume:`.
    pub namespace: String,
    /// How long a session record, and a key's stored answer, live after their last write (a
    /// session record: or its last touch; the guard touches a record in use once half of
    /// this has passed, so a session in use keeps its record). Default: 24 hours.
    pub retention: Duration,
    /// How long a key whose outcome is unknown is remembered (it never runs again while it
    /// is). Default: 7 days.
    pub lost_retention: Duration,
    /// Deadline to connect. Default: 1 s.
    pub connect_timeout: Duration,
    /// Deadline of every command: a store that does not answer in time is unavailable (keyed
    /// calls are refused, retryably). Default: 1 s.
    pub response_timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            namespace: "mcp-resume:".into(),
            retention: Duration::from_secs(24 * 3600),
            lost_retention: Duration::from_secs(7 * 24 * 3600),
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
        }
    }
}

/// The store on Redis (one server) or Redis Cluster. Cheap to clone.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("namespace", &self.inner.opts.namespace)
            .field("cluster", &matches!(self.inner.conn, Conn::Cluster(_)))
            .finish()
    }
}

struct Inner {
    conn: Conn,
    opts: RedisOptions,
    scripts: Scripts,
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

struct Scripts {
    claim: Script,
    renew: Script,
    finish: Script,
    release: Script,
    lost: Script,
}

// Every script touches KEYS[1] only. `now` is the server's clock, in milliseconds.
const NOW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"#;

// ARGV: digest, holder, lease ms, retention ms, lost retention ms. A key this crate cannot
// read (a value of another type under its name, a running key's lease end that is no
// number: another version's, or damaged) may have run: lost, as its answer would be, rather
// than an error every claim of it would meet for as long as it is kept.
const CLAIM: &str = r#"
local k = KEYS[1]
local st = redis.pcall('HGET', k, 'state')
if type(st) == 'table' and st.err then return {'lost'} end
if not st then
  redis.call('HSET', k, 'state', 'running', 'digest', ARGV[1], 'holder', ARGV[2], 'until', now + tonumber(ARGV[3]))
  redis.call('PEXPIRE', k, math.max(tonumber(ARGV[4]), tonumber(ARGV[3]) + tonumber(ARGV[5])))
  return {'granted'}
end
local ends = tonumber(redis.call('HGET', k, 'until'))
if st == 'running' and (not ends or ends <= now) then
  redis.call('HSET', k, 'state', 'lost')
  redis.call('PEXPIRE', k, ARGV[5])
  st = 'lost'
end
if redis.call('HGET', k, 'digest') ~= ARGV[1] then return {'mismatch'} end
if st == 'done' then return {'done', redis.call('HGET', k, 'outcome')} end
if st == 'running' and redis.call('HGET', k, 'holder') == ARGV[2] then return {'granted'} end
if st == 'running' then return {'in_use'} end
return {'lost'}
"#;

// ARGV: holder, lease ms, retention ms, lost retention ms.
const RENEW: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'state') ~= 'running' or redis.call('HGET', k, 'holder') ~= ARGV[1] then
  return 0
end
redis.call('HSET', k, 'until', now + tonumber(ARGV[2]))
redis.call('PEXPIRE', k, math.max(tonumber(ARGV[3]), tonumber(ARGV[2]) + tonumber(ARGV[4])))
return 1
"#;

// ARGV: holder, outcome JSON, retention ms. A lost key takes its holder's answer too. 0: no
// such key (nothing stored; its holder claims it again, then stores).
const FINISH: &str = r#"
local k = KEYS[1]
local st = redis.call('HGET', k, 'state')
if not st then return 0 end
if st == 'done' or redis.call('HGET', k, 'holder') ~= ARGV[1] then return 1 end
redis.call('HSET', k, 'state', 'done', 'outcome', ARGV[2])
redis.call('PEXPIRE', k, ARGV[3])
return 1
"#;

// ARGV: holder.
const RELEASE: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'state') ~= 'running' or redis.call('HGET', k, 'holder') ~= ARGV[1] then
  return 0
end
redis.call('DEL', k)
return 1
"#;

// ARGV: holder, lost retention ms.
const LOST: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'state') ~= 'running' or redis.call('HGET', k, 'holder') ~= ARGV[1] then
  return 0
end
redis.call('HSET', k, 'state', 'lost')
redis.call('PEXPIRE', k, ARGV[2])
return 1
"#;

fn script(body: &str) -> Script {
    Script::new(&format!("{NOW}{body}"))
}

fn unavailable(e: RedisError) -> Error {
    Error::with_source(ErrorKind::StoreUnavailable, "redis is unavailable", e)
}

/// Whether Redis refused a command for the type of the value under its key.
fn is_wrong_type(e: &Error) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<RedisError>())
        .is_some_and(|e| e.code() == Some("WRONGTYPE"))
}

fn malformed(what: &'static str) -> Error {
    Error::new(ErrorKind::StoreData, what)
}

/// Milliseconds for Redis, at least 1 and at most [`LONGEST_MS`].
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, LONGEST_MS)
}

/// The longest a duration is told to Redis (about 31,000 years: for ever, in effect). The
/// scripts add two of them to the server's clock as Lua numbers, which are doubles: past
/// 2^53 they are no longer whole, and an expiry past what Redis takes is refused, after
/// the script's earlier writes landed without it.
const LONGEST_MS: u64 = 1_000_000_000_000_000;

impl RedisStore {
    /// Connects to one Redis server (`redis://host:port[/db]`) with default
    /// [`RedisOptions`]. Fails when it cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to one Redis server with `opts`.
    pub async fn connect_with(url: &str, opts: RedisOptions) -> Result<Self, Error> {
        let client = Client::open(url)
            .map_err(|e| Error::with_source(ErrorKind::InvalidConfig, "invalid Redis URL", e))?;
        // Fail fast while the server is away: a keyed call is refused at once (retryably)
        // rather than waiting on a reconnection schedule.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200))
            .set_connection_timeout(Some(opts.connect_timeout))
            .set_response_timeout(Some(opts.response_timeout));
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(unavailable)?;
        Self::ready(Conn::Single(conn), opts).await
    }

    /// Connects to a Redis Cluster through any of its nodes, with default [`RedisOptions`].
    pub async fn connect_cluster(nodes: &[&str]) -> Result<Self, Error> {
        Self::connect_cluster_with(nodes, RedisOptions::default()).await
    }

    /// Connects to a Redis Cluster with `opts`.
    pub async fn connect_cluster_with(nodes: &[&str], opts: RedisOptions) -> Result<Self, Error> {
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(opts.connect_timeout)
            .response_timeout(opts.response_timeout)
            .retries(2)
            .build()
            .map_err(|e| {
                Error::with_source(ErrorKind::InvalidConfig, "invalid cluster nodes", e)
            })?;
        let conn = client.get_async_connection().await.map_err(unavailable)?;
        Self::ready(Conn::Cluster(conn), opts).await
    }

    async fn ready(conn: Conn, opts: RedisOptions) -> Result<Self, Error> {
        let scripts = Scripts {
            claim: script(CLAIM),
            renew: script(RENEW),
            finish: script(FINISH),
            release: script(RELEASE),
            lost: script(LOST),
        };
        let store = Self {
            inner: Arc::new(Inner {
                conn,
                opts,
                scripts,
            }),
        };
        // Loaded now, so that a keyed call's two steps are one EVALSHA each.
        let s = &store.inner.scripts;
        for sc in [&s.claim, &s.renew, &s.finish, &s.release, &s.lost] {
            match store.inner.conn.clone() {
                Conn::Single(mut c) => sc.load_async(&mut c).await,
                Conn::Cluster(mut c) => sc.load_async(&mut c).await,
            }
            .map_err(unavailable)?;
        }
        Ok(store)
    }

    /// The options this store runs with.
    pub fn options(&self) -> &RedisOptions {
        &self.inner.opts
    }

    fn key(&self, kind: &str, id: &str) -> String {
        let digest = hex(&Sha256::digest(id.as_bytes())[..16]);
        format!("{}{{{kind}:{digest}}}", self.inner.opts.namespace)
    }

    fn idem(&self, key: &IdempotencyKey) -> String {
        self.key("k", key.as_str())
    }

    async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: ScriptInvocation<'_>,
    ) -> Result<T, Error> {
        match self.inner.conn.clone() {
            Conn::Single(mut c) => invocation.invoke_async(&mut c).await,
            Conn::Cluster(mut c) => invocation.invoke_async(&mut c).await,
        }
        .map_err(unavailable)
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        match self.inner.conn.clone() {
            Conn::Single(mut c) => run_cmd(cmd, &mut c).await,
            Conn::Cluster(mut c) => run_cmd(cmd, &mut c).await,
        }
        .map_err(unavailable)
    }
}

async fn run_cmd<T: redis::FromRedisValue, C: ConnectionLike>(
    cmd: &redis::Cmd,
    conn: &mut C,
) -> Result<T, RedisError> {
    cmd.query_async(conn).await
}

impl Store for RedisStore {
    fn put_session<'a>(&'a self, record: &'a SessionRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let json = serde_json::to_string(record)
                .map_err(|_| malformed("a session record that cannot be serialized"))?;
            let mut cmd = redis::cmd("SET");
            cmd.arg(self.key("s", record.session().expose()))
                .arg(json)
                .arg("PX")
                .arg(ms(self.inner.opts.retention));
            self.query::<()>(&cmd).await
        })
    }

    fn session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("GET");
            cmd.arg(self.key("s", id.expose()));
            // Bytes, not text: a record that is no text is one this crate cannot read, below.
            let json: Option<Vec<u8>> = match self.query(&cmd).await {
                Ok(json) => json,
                // Another type under the record's name (another version's): no record this
                // crate can read, as below.
                Err(e) if is_wrong_type(&e) => {
                    tracing::warn!("a session record this crate cannot read: read as absent");
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            let Some(json) = json else { return Ok(None) };
            let record = serde_json::from_slice::<SessionRecord>(&json)
                .ok()
                .filter(|r| r.session() == id);
            if record.is_none() {
                // Another version's record, or a damaged one: the session's context cannot be
                // known here, as when it has no record. Read as a store outage, its keyed
                // calls would be refused as retryable until their clients gave up.
                tracing::warn!("a session record this crate cannot read: read as absent");
            }
            Ok(record)
        })
    }

    fn forget_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(self.key("s", id.expose()));
            self.query::<()>(&cmd).await
        })
    }

    fn touch_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            // On a missing key PEXPIRE does nothing: a forgotten record stays forgotten.
            let mut cmd = redis::cmd("PEXPIRE");
            cmd.arg(self.key("s", id.expose()))
                .arg(ms(self.inner.opts.retention));
            self.query::<i64>(&cmd).await.map(drop)
        })
    }

    fn session_retention(&self) -> Option<Duration> {
        Some(self.inner.opts.retention)
    }

    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ClaimOutcome> {
        Box::pin(async move {
            let o = &self.inner.opts;
            let mut inv = self.inner.scripts.claim.key(self.idem(claim.key()));
            inv.arg(claim.digest().as_str())
                .arg(claim.token().as_str())
                .arg(ms(claim.lease()))
                .arg(ms(o.retention))
                .arg(ms(o.lost_retention));
            // Bytes, not text: a stored answer that is no text (another version's, kept
            // compressed) is read as one this crate cannot read, below, not as an outage.
            let answer: Vec<Vec<u8>> = self.invoke(inv).await?;
            match answer.first().map(Vec::as_slice) {
                Some(b"granted") => Ok(ClaimOutcome::Granted),
                Some(b"in_use") => Ok(ClaimOutcome::InUse),
                Some(b"mismatch") => Ok(ClaimOutcome::Mismatch),
                Some(b"lost") => Ok(ClaimOutcome::Lost),
                // The key ran; an answer this crate cannot read (another version's, or
                // damaged) is gone: an unknown outcome, and the key never runs again. Read as
                // a store outage, a client would retry it to its deadline.
                Some(b"done") => Ok(
                    match answer
                        .get(1)
                        .and_then(|j| std::str::from_utf8(j).ok())
                        .and_then(StoredOutcome::from_stored)
                    {
                        Some(outcome) => ClaimOutcome::Done(outcome),
                        None => {
                            tracing::warn!(
                                "a stored answer this crate cannot read: outcome unknown"
                            );
                            ClaimOutcome::Lost
                        }
                    },
                ),
                _ => Err(malformed("an unexpected claim answer")),
            }
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut inv = self.inner.scripts.renew.key(self.idem(key));
            inv.arg(token.as_str())
                .arg(ms(lease))
                .arg(ms(self.inner.opts.retention))
                .arg(ms(self.inner.opts.lost_retention));
            let renewed: i64 = self.invoke(inv).await?;
            Ok(renewed == 1)
        })
    }

    fn finish<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        outcome: &'a StoredOutcome,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut inv = self.inner.scripts.finish.key(self.idem(key));
            inv.arg(token.as_str())
                .arg(outcome.response())
                .arg(ms(self.inner.opts.retention));
            let known: i64 = self.invoke(inv).await?;
            Ok(known == 1)
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut inv = self.inner.scripts.release.key(self.idem(key));
            inv.arg(token.as_str());
            self.invoke::<i64>(inv).await.map(drop)
        })
    }

    fn mark_lost<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut inv = self.inner.scripts.lost.key(self.idem(key));
            inv.arg(token.as_str())
                .arg(ms(self.inner.opts.lost_retention));
            self.invoke::<i64>(inv).await.map(drop)
        })
    }
}
