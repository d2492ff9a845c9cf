//! [`RedisLedger`]: the ledger on Redis, one namespace per client identity.
//!
//! Layout, every key under `mcp-resume:ledger:{<identity>}:` (the braces are a hash tag: on
//! Redis Cluster ([`RedisLedger::cluster`]) one worker's keys share a slot, so each script,
//! transaction and read below runs on the one node that owns it):
//!
//! | key | type | what |
//! |---|---|---|
//! | `entry:<id>` | string (an entry's JSON, [`LedgerEntry::to_json`]) with a TTL | one call in flight, expiring with its deadline |
//! | `index` | sorted set: entry id by expiry (ms since the epoch), with a TTL | the entries, for reading them all; its TTL is the longest of theirs |
//!
//! A write is one round trip (a Lua script sets the entry and indexes it); a removal is one
//! (`DEL` and `ZREM` in a transaction); reading them is one, then one per batch of at most 64
//! entries and 16 MiB of them, which a command's time bound lets arrive (a Lua script that
//! reads each entry unless it is too long, or past the bytes the batch or the read has left),
//! and one more when it found ids whose entries are gone (dropped from the index unless written
//! again since). What one read takes is bounded whatever was written to the namespace ([`RedisLedger`] says
//! how); a write refuses an entry longer than a read takes, so that what the ledger takes is
//! read back.

use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::FutureExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Script, Value};
use tokio::sync::OnceCell;

use super::entry::{unix_ms, MAX_ID_LEN};
use super::{EntryId, Ledger, LedgerEntry};
use crate::error::{Error, ErrorKind};

/// Writes an entry and indexes it; the index lives as long as its longest-lived entry, and
/// sheds the ids of entries that expired unremoved (a task left behind, a removal given up in
/// an outage), which a worker that keeps writing would otherwise keep for ever. An index of
/// another type (someone else's write, damage) lists no entry: replaced.
/// KEYS: entry, index. ARGV: the entry's JSON, its TTL (ms), its expiry (ms since the epoch),
/// its id, now (ms since the epoch).
const PUT: &str = r"
local kind = redis.call('TYPE', KEYS[2]).ok
if kind ~= 'zset' and kind ~= 'none' then
  redis.call('DEL', KEYS[2])
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
";

/// Reads the index: drops the ids of expired entries, then answers how many ids it holds,
/// and the first of those due (at most ARGV[2]) no longer than any entry's id; the longer
/// ones (someone else's write: no entry read back is named so) are dropped from it unread,
/// and counted.
/// An index of another type (someone else's write, damage) lists no entry: answered as
/// empty, and as such (-1 ids in it), left for the next write to replace.
/// KEYS: index. ARGV: now (ms since the epoch), the most ids read, the longest id.
const INDEX: &str = r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'zset' and kind ~= 'none' then
  return {-1, 0, {}}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'LIMIT', 0, ARGV[2])
local longest = tonumber(ARGV[3])
local ids = {}
local long = 0
for _, id in ipairs(due) do
  if string.len(id) <= longest then
    ids[#ids + 1] = id
  else
    long = long + 1
    redis.call('ZREM', KEYS[1], id)
  end
end
return {redis.call('ZCARD', KEYS[1]), long, ids}
";

/// Drops from the index the ids whose entries a read found gone (or of another type than an
/// entry's), each only if it is so still: an entry written again meanwhile (a task's) stays
/// indexed.
/// KEYS: index, then the entries. ARGV: their ids, in the same order.
const GONE: &str = r"
for i, id in ipairs(ARGV) do
  if redis.call('TYPE', KEYS[i + 1]).ok ~= 'string' then
    redis.call('ZREM', KEYS[1], id)
  end
end
return 1
";

/// Reads a batch of entries, each only if it is no longer than the bound and fits in the
/// bytes the batch may answer: an entry over the bound is answered with its length, one that
/// does not fit (nor any after it) with -1, one that is gone (or not a string) with nothing.
/// KEYS: the entries. ARGV: the longest entry read, the bytes the batch may answer.
const READ: &str = r"
local out = {}
local most = tonumber(ARGV[1])
local left = tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  local len = redis.pcall('STRLEN', key)
  if type(len) ~= 'number' or len == 0 then
    out[i] = false
  elseif len > most then
    out[i] = len
  elseif len > left then
    left = -1
    out[i] = -1
  else
    left = left - len
    out[i] = redis.call('GET', key)
  end
end
return out
";

/// The most entries one read ([`Ledger::entries`]) takes: those due first. Anyone who can
/// write the namespace could otherwise make every recovery hold all it wrote at once; the
/// rest are read by a later recovery, once these have been removed.
const MAX_ENTRIES_READ: usize = 10_000;
/// The longest entry, in bytes, as stored ([`LedgerEntry::to_json`] as text): a write of a
/// longer one is refused (a client, told by [`Ledger::max_entry_bytes`], tries none), and a longer one found on reading (written by someone else) is
/// skipped, never read whole, as a malformed one is. One bound for both: an entry taken and
/// then skipped would be a call in flight that no recovery sees.
const MAX_ENTRY_BYTES: usize = 16 * 1024 * 1024;
/// The most bytes of entries one read takes: those of the entries past it are skipped, left
/// for a later recovery as those past [`MAX_ENTRIES_READ`] are.
const MAX_READ_BYTES: usize = 256 * 1024 * 1024;
/// Entries read per round trip, at most.
const READ_BATCH: usize = 64;
/// The most bytes of entries one round trip answers (at least one entry's bound, so that each
/// reads one at least): its answer has a command's time ([`TIMEOUT`]) to arrive, and 64
/// entries of [`MAX_ENTRY_BYTES`] would take longer than that on most networks.
const READ_BATCH_BYTES: usize = MAX_ENTRY_BYTES;

/// The longest a key is kept, in ms (about 31,000 years): Redis refuses an expiry past what
/// its clock holds, and an entry whose call may wait longer (a timeout meant as for good) is
/// kept this long rather than not written at all (which held its call back until it failed).
const MAX_TTL_MS: u64 = 1_000_000_000_000_000;

/// The longest identity accepted.
const MAX_IDENTITY_LEN: usize = 128;
/// The bound on connecting, and on each command's answer.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A [`Ledger`] on Redis ([`RedisLedger::new`]) or Redis Cluster ([`RedisLedger::cluster`]),
/// under the name of one client identity: the worker a process is (a StatefulSet pod's name,
/// a systemd instance), the same in the process that replaces it. One identity belongs to one
/// process at a time.
///
/// Entries expire with their calls' deadlines (Redis TTLs; at most about 31,000 years, the
/// longest Redis surely takes), so what a fleet leaves behind is bounded. It connects on
/// first use and reconnects by itself (on a cluster, following the slots as they move);
/// every command is bounded (2 s; one that must connect first to a server that does not
/// answer, about 4 s: the connection is tried twice), and a failure is an
/// [`ErrorKind::Ledger`] error: the call it was for is held back and tried again, never sent
/// unrecorded.
///
/// An entry is at most 16 MiB ([`LedgerEntry::to_json`] as text: about the call's params and
/// a few hundred bytes more), its [`Ledger::max_entry_bytes`]. A client never writes a longer
/// one: the call it was for is never sent and ends at once with [`ErrorKind::Ledger`], saying
/// why (not tried again: no write of it can succeed). The client bounds the responses it
/// takes ([`ClientBuilder::max_body_size`](crate::ClientBuilder::max_body_size)), not the
/// requests it sends, so no setting of its own stops such a call before the ledger does. A
/// rewrite that outgrows the bound (a round's answers added to its entry) is not written
/// either, the entry keeping its last write, and a round's request waiting for that rewrite
/// is never sent: its call ends the same way. A write of a longer entry made otherwise (by a
/// ledger in front of this one that does not pass its bound on, say) is refused with
/// [`ErrorKind::Ledger`] and stores nothing.
///
/// One read of its entries (a recovery's) is bounded, whatever anyone who can write the
/// namespace put there: it takes the 10,000 entries due first, and at most 256 MiB of them;
/// an entry longer than 16 MiB (the bound on writes: only someone else's write makes one) is
/// skipped, as a malformed one is (logged, left where it is, never acted on), and so is an
/// entry under the key of another id than its own (its removal would miss it); an id in the
/// index longer than any entry's (128 bytes) is dropped from it unread, and an index of
/// another type, which lists nothing, is read as empty and replaced by the next write.
/// Entries past those bounds are left for a later recovery, once the calls picked up have
/// ended and their entries are gone.
pub struct RedisLedger {
    backend: Backend,
    /// `mcp-resume:ledger:{<identity>}:`
    prefix: String,
    put: Script,
    index: Script,
    read: Script,
    gone: Script,
}

/// One server, or a cluster.
enum Backend {
    Single {
        client: redis::Client,
        conn: OnceCell<ConnectionManager>,
    },
    Cluster {
        // Boxed: a cluster's client is several times a server's.
        client: Box<ClusterClient>,
        conn: OnceCell<ClusterConnection>,
    },
}

/// A connection to either.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

impl std::fmt::Debug for RedisLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("RedisLedger")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisLedger {
    /// The ledger of `identity` on the Redis server at `url` (`redis://host:port[/db]`, or
    /// `rediss://` for TLS when the `redis` crate is built with it). Checks its arguments and
    /// connects on first use; `identity` is 1 to 128 visible ASCII characters, braces
    /// excluded. A bad URL or identity is [`ErrorKind::InvalidConfig`].
    pub fn new(url: &str, identity: &str) -> Result<Self, Error> {
        let prefix = prefix(identity)?;
        let client = redis::Client::open(url).map_err(|e| {
            Error::with_source(
                ErrorKind::InvalidConfig,
                "invalid Redis URL for the ledger",
                e,
            )
        })?;
        Ok(RedisLedger {
            backend: Backend::Single {
                client,
                conn: OnceCell::new(),
            },
            prefix,
            put: Script::new(PUT),
            index: Script::new(INDEX),
            read: Script::new(READ),
            gone: Script::new(GONE),
        })
    }

    /// The ledger of `identity` on the Redis Cluster that `nodes` belong to (`redis://` URLs
    /// of one or more of its nodes, from which it finds the others). One identity's keys
    /// share a hash slot: each operation runs on the node that owns it, and redirections
    /// (`MOVED`, `ASK`) are followed. Checks its arguments and connects on first use; a bad
    /// URL, no node at all, or a bad identity is [`ErrorKind::InvalidConfig`].
    pub fn cluster(nodes: &[&str], identity: &str) -> Result<Self, Error> {
        let prefix = prefix(identity)?;
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            // Fail fast while the cluster is away, as on one server.
            .retries(2)
            .build()
            .map_err(|e| {
                Error::with_source(
                    ErrorKind::InvalidConfig,
                    "invalid Redis Cluster nodes for the ledger",
                    e,
                )
            })?;
        Ok(RedisLedger {
            backend: Backend::Cluster {
                client: Box::new(client),
                conn: OnceCell::new(),
            },
            prefix,
            put: Script::new(PUT),
            index: Script::new(INDEX),
            read: Script::new(READ),
            gone: Script::new(GONE),
        })
    }

    async fn conn(&self) -> Result<Conn, Error> {
        match &self.backend {
            Backend::Single { client, conn } => {
                let conn = conn
                    .get_or_try_init(|| async {
                        // Fail fast while the server is away: a write that cannot be made
                        // holds its call back, and the call tries again within its deadline.
                        let config = ConnectionManagerConfig::new()
                            .set_number_of_retries(1)
                            .set_min_delay(Duration::from_millis(20))
                            .set_max_delay(Duration::from_millis(200))
                            .set_connection_timeout(Some(TIMEOUT))
                            .set_response_timeout(Some(TIMEOUT));
                        ConnectionManager::new_with_config(client.clone(), config)
                            .await
                            .map_err(failed)
                    })
                    .await?;
                Ok(Conn::Single(conn.clone()))
            }
            Backend::Cluster { client, conn } => {
                let conn = conn
                    .get_or_try_init(|| async {
                        client.get_async_connection().await.map_err(failed)
                    })
                    .await?;
                Ok(Conn::Cluster(conn.clone()))
            }
        }
    }

    fn entry_key(&self, id: &EntryId) -> String {
        format!("{}entry:{}", self.prefix, id.as_str())
    }

    fn index_key(&self) -> String {
        format!("{}index", self.prefix)
    }

    async fn write(&self, entry: LedgerEntry) -> Result<(), Error> {
        let now = SystemTime::now();
        let ttl = entry
            .expires_at()
            .duration_since(now)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .min(MAX_TTL_MS);
        if ttl == 0 {
            // Past its deadline already: nothing to keep.
            return self.delete(entry.id().clone()).await;
        }
        let json = entry.to_json().to_string();
        if json.len() > MAX_ENTRY_BYTES {
            // A read would skip it: taken, it would be a call no recovery sees.
            return Err(Error::new(
                ErrorKind::Ledger,
                format!(
                    "a ledger entry of {} bytes is longer than the {MAX_ENTRY_BYTES} bytes a \
                     Redis ledger reads back",
                    json.len()
                ),
            ));
        }
        let mut conn = self.conn().await?;
        let id = entry.id().clone();
        self.put
            .key(self.entry_key(&id))
            .key(self.index_key())
            .arg(json)
            .arg(ttl)
            .arg(unix_ms(entry.expires_at()))
            .arg(id.as_str())
            .arg(unix_ms(now))
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(failed)
    }

    async fn delete(&self, id: EntryId) -> Result<(), Error> {
        let mut conn = self.conn().await?;
        redis::pipe()
            .atomic()
            .del(self.entry_key(&id))
            .zrem(self.index_key(), id.as_str())
            .exec_async(&mut conn)
            .await
            .map_err(failed)
    }

    async fn read(&self) -> Result<Vec<LedgerEntry>, Error> {
        let mut conn = self.conn().await?;
        let now = unix_ms(SystemTime::now());
        let index = self.index_key();
        // Read as bytes, each checked alone: a value that is not UTF-8 (damage, or someone
        // else's write) costs its entry, not the reading of every other. An id longer than
        // any entry's is not sent at all: ids are read by the thousand.
        let (indexed, long, members): (i64, usize, Vec<Vec<u8>>) = self
            .index
            .key(&index)
            .arg(now)
            .arg(MAX_ENTRIES_READ)
            .arg(MAX_ID_LEN)
            .invoke_async(&mut conn)
            .await
            .map_err(failed)?;
        if long > 0 {
            tracing::error!(
                ids = long,
                "ledger index ids longer than any entry's dropped unread"
            );
        }
        if indexed < 0 {
            tracing::error!("ledger index of another type than an index: read as empty");
        }
        if usize::try_from(indexed).is_ok_and(|indexed| indexed > members.len()) {
            tracing::warn!(
                indexed,
                read = members.len(),
                "more ledger entries than one read takes: the rest are left for a later one"
            );
        }
        let mut ids: std::collections::VecDeque<String> = members
            .into_iter()
            .filter_map(|member| match String::from_utf8(member) {
                Ok(id) => Some(id),
                Err(_) => {
                    tracing::error!("ledger index member that is not UTF-8 skipped");
                    None
                }
            })
            .collect();
        let mut entries = Vec::new();
        let mut gone = Vec::new();
        let mut bytes_read = 0;
        // In batches, each parsed before the next is asked for, and each answering at most
        // what one round trip carries in time and what the read has left: those past the
        // round trip's bytes go in the next, those past the read's are left for a later one.
        while !ids.is_empty() {
            let budget = READ_BATCH_BYTES.min(MAX_READ_BYTES.saturating_sub(bytes_read));
            let batch: Vec<String> = ids.drain(..ids.len().min(READ_BATCH)).collect();
            let mut read = self.read.prepare_invoke();
            for id in &batch {
                read.key(format!("{}entry:{id}", self.prefix));
            }
            let stored: Vec<Value> = read
                .arg(MAX_ENTRY_BYTES)
                .arg(budget)
                .invoke_async(&mut conn)
                .await
                .map_err(failed)?;
            let mut unread = Vec::new();
            for (id, value) in batch.iter().zip(stored) {
                let bytes = match value {
                    Value::BulkString(bytes) => bytes,
                    Value::Int(len) if len < 0 => {
                        unread.push(id.clone());
                        continue;
                    }
                    Value::Int(len) => {
                        // Left where it is, for whoever looks: never read, never acted on.
                        tracing::error!(
                            entry = %id,
                            len,
                            "ledger entry longer than {MAX_ENTRY_BYTES} bytes skipped"
                        );
                        continue;
                    }
                    _ => {
                        // Gone (expired between the two reads), or of another type.
                        gone.push(id.clone());
                        continue;
                    }
                };
                bytes_read += bytes.len();
                // `from_slice` refuses text that is not UTF-8 as it refuses bad JSON.
                let parsed = serde_json::from_slice(&bytes)
                    .map_err(|e| Error::with_source(ErrorKind::Ledger, "malformed ledger entry", e))
                    .and_then(|value| LedgerEntry::from_json(&value));
                match parsed {
                    // Its removal goes to the id it names: taken from another id's key (a
                    // copy, a rename, damage), it would be left there for every later
                    // recovery to pick up again.
                    Ok(entry) if entry.id().as_str() != id => tracing::error!(
                        entry = %id,
                        names = %entry.id(),
                        "ledger entry under another id's key skipped"
                    ),
                    Ok(entry) => entries.push(entry),
                    // Left where it is, for whoever looks: never acted on.
                    Err(error) => tracing::error!(entry = %id, %error, "ledger entry skipped"),
                }
            }
            if unread.is_empty() {
                continue;
            }
            if budget < READ_BATCH_BYTES {
                tracing::warn!(
                    bytes_read,
                    "ledger entries past the bytes one read takes: left for a later one"
                );
                break;
            }
            // A round trip's full answer: the next takes them first. Each round trip reads
            // one entry at least (none is longer than its bytes).
            for id in unread.into_iter().rev() {
                ids.push_front(id);
            }
        }
        if !gone.is_empty() {
            let mut drop = self.gone.prepare_invoke();
            drop.key(&index);
            for id in &gone {
                drop.key(format!("{}entry:{id}", self.prefix)).arg(id);
            }
            let _ = drop.invoke_async::<i64>(&mut conn).await;
        }
        Ok(entries)
    }
}

impl Ledger for RedisLedger {
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), Error>> {
        self.write(entry).boxed()
    }

    fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), Error>> {
        self.delete(id).boxed()
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, Error>> {
        self.read().boxed()
    }

    fn max_entry_bytes(&self) -> Option<usize> {
        Some(MAX_ENTRY_BYTES)
    }
}

fn failed(error: redis::RedisError) -> Error {
    Error::ledger(error)
}

/// The keys' prefix for `identity`: 1 to 128 visible ASCII characters, braces excluded.
fn prefix(identity: &str) -> Result<String, Error> {
    let valid = !identity.is_empty()
        && identity.len() <= MAX_IDENTITY_LEN
        && identity
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}');
    if !valid {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            "a ledger identity is 1 to 128 visible ASCII characters, without braces",
        ));
    }
    Ok(format!("mcp-resume:ledger:{{{identity}}}:"))
}
