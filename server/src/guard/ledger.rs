//! What one guard remembers locally: the sessions it knows, the sessions it forgot, and for
//! each SSE stream it numbered the map from its sequence numbers to the inner server's event
//! ids and the requests answered on it. Everything is bounded; what is evicted is gone, and a
//! resume that needs it is refused (`event_gap`), never replayed on trust. So is what came
//! before an event the inner server gave an empty id (it reset its client's cursor there:
//! see [`StreamLog::reset`]).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use rustc_hash::FxHashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::records::SessionRecord;
use crate::ids::{CapabilityHash, SessionId, StreamId};

/// A map that forgets, beyond a capacity, the entries unused the longest: an entry used
/// ([`Bounded::touch`]) since it was queued goes to the back of the order instead of out.
/// This approximates least-recent-use at the cost of a stamp per use, with no queue work on
/// the path that uses an entry.
#[derive(Debug)]
pub(crate) struct Bounded<K, V> {
    map: FxHashMap<K, Slot<V>>,
    /// Keys in eviction order, each with the stamp it was queued under: an entry whose slot
    /// holds another stamp (removed, inserted again, or queued again) is stale and skipped.
    order: VecDeque<(K, u64)>,
    capacity: usize,
    /// Counts insertions: the stamps of queueing and use.
    tick: u64,
}

#[derive(Debug)]
struct Slot<V> {
    value: V,
    queued: u64,
    used: u64,
}

impl<K: Hash + Eq + Clone, V> Bounded<K, V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            map: FxHashMap::default(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            tick: 0,
        }
    }

    pub(crate) fn insert(&mut self, k: K, v: V) {
        // One look-up per key: the new key's entry, each candidate's for eviction.
        if self.map.len() >= self.capacity {
            if let Some(slot) = self.map.get_mut(&k) {
                slot.value = v;
                slot.used = self.tick;
                return;
            }
            // Room is made before the new entry is queued: it is never the one evicted.
            self.evict();
        }
        let slot = match self.map.entry(k) {
            Entry::Occupied(mut held) => {
                let slot = held.get_mut();
                slot.value = v;
                slot.used = self.tick;
                return;
            }
            Entry::Vacant(slot) => slot,
        };
        self.tick += 1;
        let tick = self.tick;
        self.order.push_back((slot.key().clone(), tick));
        slot.insert(Slot {
            value: v,
            queued: tick,
            used: tick,
        });
        // Stale keys linger in `order`; compact once they are most of it.
        if self.order.len() > 2 * self.capacity {
            let map = &self.map;
            self.order
                .retain(|(k, stamp)| map.get(k).is_some_and(|s| s.queued == *stamp));
        }
    }

    /// Evicts until there is room for one more entry.
    fn evict(&mut self) {
        while self.map.len() >= self.capacity {
            let Some((old, stamp)) = self.order.pop_front() else {
                break;
            };
            let Entry::Occupied(mut held) = self.map.entry(old) else {
                continue;
            };
            let slot = held.get_mut();
            if slot.queued != stamp {
                continue;
            }
            if slot.used > slot.queued {
                // Used since it was queued: it goes round once more. Its stamp is then its
                // last use, so it is not sent round again before it is used again, and the
                // loop ends.
                slot.queued = self.tick;
                slot.used = self.tick;
                self.order.push_back((held.key().clone(), self.tick));
                continue;
            }
            held.remove();
        }
    }

    /// Marks an entry used: it is not among the next evicted.
    pub(crate) fn touch<Q: Hash + Eq + ?Sized>(&mut self, k: &Q)
    where
        K: std::borrow::Borrow<Q>,
    {
        if let Some(slot) = self.map.get_mut(k) {
            slot.used = self.tick;
        }
    }

    pub(crate) fn get<Q: Hash + Eq + ?Sized>(&self, k: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
    {
        self.map.get(k).map(|s| &s.value)
    }

    /// The entry, marked used (it is not among the next evicted).
    pub(crate) fn get_used<Q: Hash + Eq + ?Sized>(&mut self, k: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
    {
        let tick = self.tick;
        self.map.get_mut(k).map(|s| {
            s.used = tick;
            &s.value
        })
    }

    /// The entry, marked used.
    pub(crate) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        let tick = self.tick;
        self.map.get_mut(k).map(|s| {
            s.used = tick;
            &mut s.value
        })
    }

    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        self.map.remove(k).map(|s| s.value)
    }

    pub(crate) fn contains<Q: Hash + Eq + ?Sized>(&self, k: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
    {
        self.map.contains_key(k)
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.map.retain(|k, s| keep(k, &mut s.value));
    }
}

/// Streams longer than this get an index of their inner ids.
const INDEX_FROM: usize = 16;

/// Where a request answered on a stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestState {
    /// Forwarded; its response has not passed yet.
    Running,
    /// Its response passed as the event at this position (or, in an event whose inner id
    /// was empty, which takes no position, right after it).
    Answered(u64),
    /// The inner server failed the stream before answering it: it will never be answered.
    Lost,
}

/// The most bytes of an inner event id kept inline.
const INLINE_ID: usize = 22;

/// An inner server's event id. Most are a few bytes (a counter, `0/3`) and are kept inline:
/// a stream's log then costs one allocation, not one per event, and forgetting it as few.
///
/// Equal ids are equal values: an id is inline exactly when it is short enough, and the bytes
/// past an inline id's length are zeros (compared whole, a word at a time).
#[derive(Debug, Clone, PartialEq, Eq)]
enum InnerId {
    Inline { len: u8, bytes: [u8; INLINE_ID] },
    Heap(Box<[u8]>),
}

impl InnerId {
    const EMPTY: InnerId = InnerId::Inline {
        len: 0,
        bytes: [0; INLINE_ID],
    };

    fn new(id: &[u8]) -> Self {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= INLINE_ID => {
                let mut bytes = [0; INLINE_ID];
                bytes[..id.len()].copy_from_slice(id);
                InnerId::Inline { len, bytes }
            }
            _ => InnerId::Heap(id.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            InnerId::Inline { len, bytes } => &bytes[..usize::from(*len)],
            InnerId::Heap(id) => id,
        }
    }
}

/// How many inner ids a stream keeps inline, without a heap allocation.
const FEW: usize = 2;

/// A stream's inner event ids, oldest first. Most streams carry two events (a priming event
/// and the answer): those are kept inline, so that a numbered stream, which the ledger keeps
/// for thousands of calls after it ended, holds no heap memory of its own. Long-lived small
/// allocations, one per call, scattered the allocator's free lists among the short-lived
/// ones every request makes, and every call paid for it.
#[derive(Debug)]
struct Events {
    /// The oldest ids (the first `few` of these).
    inline: [InnerId; FEW],
    few: u8,
    /// The ids after them, once there are more than `FEW`.
    more: VecDeque<InnerId>,
}

impl Events {
    fn new() -> Self {
        Self {
            inline: [InnerId::EMPTY; FEW],
            few: 0,
            more: VecDeque::new(),
        }
    }

    fn len(&self) -> usize {
        usize::from(self.few) + self.more.len()
    }

    fn get(&self, at: usize) -> Option<&InnerId> {
        let few = usize::from(self.few);
        if at < few {
            self.inline.get(at)
        } else {
            self.more.get(at - few)
        }
    }

    /// How far from the newest `id` is (0: the newest), when held.
    fn position_from_back(&self, id: &InnerId) -> Option<usize> {
        if let Some(back) = self.more.iter().rev().position(|i| i == id) {
            return Some(back);
        }
        let few = &self.inline[..usize::from(self.few)];
        let back = few.iter().rev().position(|i| i == id)?;
        Some(self.more.len() + back)
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = &InnerId> {
        self.inline[..usize::from(self.few)]
            .iter()
            .chain(self.more.iter())
    }

    fn push_back(&mut self, id: InnerId) {
        let few = usize::from(self.few);
        // Inline only while nothing follows in `more`: the order stays inline, then more.
        if few < FEW && self.more.is_empty() {
            self.inline[few] = id;
            self.few += 1;
        } else {
            self.more.push_back(id);
        }
    }

    fn pop_front(&mut self) -> Option<InnerId> {
        if self.few == 0 {
            return self.more.pop_front();
        }
        let first = std::mem::replace(&mut self.inline[0], InnerId::EMPTY);
        self.inline.rotate_left(1);
        self.few -= 1;
        Some(first)
    }
}

/// The JSON-RPC ids of the requests a POST carries: most carry one, kept without an
/// allocation.
#[derive(Debug, Default)]
pub(crate) struct RequestIds {
    first: Option<Value>,
    more: Vec<Value>,
    /// The body could not be read: it may carry requests whose ids are not known.
    unread: bool,
}

impl RequestIds {
    /// No request (a notification, a response, a GET's stream).
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// A body the guard cannot read (over its bound, nested past its reader's depth): what
    /// requests it carries is not known.
    pub(crate) fn unread() -> Self {
        Self {
            unread: true,
            ..Self::default()
        }
    }

    /// One request.
    pub(crate) fn one(id: Value) -> Self {
        Self {
            first: Some(id),
            more: Vec::new(),
            unread: false,
        }
    }

    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Value> {
        self.first.iter().chain(self.more.iter())
    }
}

impl FromIterator<Value> for RequestIds {
    fn from_iter<T: IntoIterator<Item = Value>>(iter: T) -> Self {
        let mut iter = iter.into_iter();
        Self {
            first: iter.next(),
            more: iter.collect(),
            unread: false,
        }
    }
}

/// The requests a stream answers: most streams answer one, kept inline.
#[derive(Debug, Default)]
struct Requests {
    first: Option<(Value, RequestState)>,
    more: Vec<(Value, RequestState)>,
    /// Requests of a body that could not be read: no answer can be matched to them, so
    /// they are never known answered, only running until the stream fails (then lost) or
    /// ends cleanly.
    unread: Option<RequestState>,
}

/// The most requests a stream's log keeps by id, and the most bytes of (string) ids it keeps
/// in all: a log is kept long after its stream ended, for resumes, so its size must not
/// follow what a client writes. One budget for the whole log, not one per id: bounds per id
/// and per count alone let a batch of 1,000 ids of 1 KiB each be kept, 1 MiB a log, 11 GB
/// over the 10,000 logs a guard keeps. So a log's ids hold at most 64 entries of 48 bytes and
/// 4 KiB of text, about 7 KiB (70 MiB over 10,000 logs): room for a batch of 64 requests
/// with UUID ids, more than clients send. Past either bound the requests are kept as
/// unread, none of their ids held: never known answered, lost if the stream fails, so a
/// resume of a stream that failed is refused, never authorized on ids no longer held (a
/// stream that ended cleanly or still runs lost nothing; a resume of it owes no answer the
/// ids would prove). The count bound also bounds the work of marking an answer, done under
/// the guard's lock.
const MAX_REQUESTS: usize = 64;
const MAX_ID_BYTES: usize = 4 << 10;

impl Requests {
    fn running(ids: RequestIds) -> Self {
        let count = usize::from(ids.first.is_some()) + ids.more.len();
        let text: usize = ids
            .first
            .iter()
            .chain(&ids.more)
            .map(|id| id.as_str().map_or(0, str::len))
            .sum();
        if count > MAX_REQUESTS || text > MAX_ID_BYTES {
            return Self {
                unread: Some(RequestState::Running),
                ..Self::default()
            };
        }
        let running = |id| (id, RequestState::Running);
        Self {
            first: ids.first.map(running),
            more: if ids.more.is_empty() {
                Vec::new()
            } else {
                ids.more.into_iter().map(running).collect()
            },
            unread: ids.unread.then_some(RequestState::Running),
        }
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut (Value, RequestState)> {
        self.first.iter_mut().chain(self.more.iter_mut())
    }

    fn iter(&self) -> impl Iterator<Item = &(Value, RequestState)> {
        self.first.iter().chain(self.more.iter())
    }
}

/// The most bytes of inner event ids a stream's log keeps: the inner server picks its ids,
/// and a log is kept long after its stream ended, so what it costs must not follow their
/// length (an id as long as an SSE block, 4 MiB, on each of a log's 4,096 events, was 16 GiB
/// a log). Ids of a few dozen bytes (a counter, a UUID) keep more than a thousand positions
/// within it; past it the oldest are forgotten, as past the count.
const MAX_INNER_BYTES: usize = 64 << 10;

/// One numbered SSE stream.
#[derive(Debug)]
pub(crate) struct StreamLog {
    session: SessionId,
    hash: CapabilityHash,
    /// Inner event ids from position `first` on.
    inner: Events,
    first: u64,
    /// An index of `inner`, built once a stream is long enough for a scan to cost more than
    /// the map (most streams carry two or three events). Boxed: a log is moved into the
    /// ledger and out when evicted, and most never build one.
    #[allow(clippy::box_collection)]
    by_inner: Option<Box<HashMap<Box<[u8]>, u64>>>,
    max_events: usize,
    /// Bytes of the inner ids in `inner` (at most [`MAX_INNER_BYTES`]).
    inner_bytes: usize,
    requests: Requests,
    /// The stream passed something the guard could not number (a block over the bound):
    /// continuity from any cursor on it cannot be proven any more.
    broken: bool,
}

impl StreamLog {
    fn new(session: SessionId, hash: CapabilityHash, requests: RequestIds, max: usize) -> Self {
        Self {
            session,
            hash,
            inner: Events::new(),
            first: 1,
            by_inner: None,
            max_events: max.max(1),
            inner_bytes: 0,
            requests: Requests::running(requests),
            broken: false,
        }
    }

    /// The last position issued (0 before any).
    pub(crate) fn head(&self) -> u64 {
        self.first + self.inner.len() as u64 - 1
    }

    /// The earliest position whose inner id is still known.
    pub(crate) fn earliest(&self) -> u64 {
        self.first
    }

    pub(crate) fn session(&self) -> &SessionId {
        &self.session
    }

    pub(crate) fn hash(&self) -> &CapabilityHash {
        &self.hash
    }

    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }

    /// The inner id of position `seq`, when still known.
    pub(crate) fn inner_id(&self, seq: u64) -> Option<&[u8]> {
        let i = seq.checked_sub(self.first)?;
        self.inner
            .get(usize::try_from(i).ok()?)
            .map(InnerId::as_bytes)
    }

    /// The position of an inner event id: the one it already has (its latest, when the inner
    /// server used it more than once), or the next one. A known position before `anew_below`
    /// is not taken: the id is numbered again, as a new event (`u64::MAX`: always).
    fn record(&mut self, inner: &[u8], anew_below: u64) -> u64 {
        let id = InnerId::new(inner);
        let known = match &self.by_inner {
            _ if anew_below == u64::MAX => None,
            Some(map) => map.get(inner).copied(),
            None => self
                .inner
                .position_from_back(&id)
                .map(|back| self.head() - back as u64),
        };
        if let Some(seq) = known.filter(|&seq| seq >= anew_below) {
            return seq;
        }
        let seq = self.head() + 1;
        if let Some(map) = &mut self.by_inner {
            map.insert(inner.into(), seq);
        }
        self.inner.push_back(id);
        if self.by_inner.is_none() && self.inner.len() > INDEX_FROM {
            let first = self.first;
            let map = self
                .inner
                .iter()
                .enumerate()
                .map(|(at, i)| (i.as_bytes().into(), first + at as u64))
                .collect();
            self.by_inner = Some(Box::new(map));
        }
        self.inner_bytes += inner.len();
        // The oldest positions are forgotten past either bound; an id longer than the byte
        // budget on its own is not kept at all (it is still numbered, and a resume from it
        // is refused as any from a forgotten position).
        while self.inner.len() > self.max_events || self.inner_bytes > MAX_INNER_BYTES {
            let Some(old) = self.inner.pop_front() else {
                break;
            };
            self.inner_bytes -= old.as_bytes().len();
            if let Some(map) = &mut self.by_inner {
                // The id may have been numbered again since: its later position stays.
                if map.get(old.as_bytes()) == Some(&self.first) {
                    map.remove(old.as_bytes());
                }
            }
            self.first += 1;
        }
        seq
    }

    /// An event whose inner id is empty passed: the inner server resets its client's
    /// cursor there, saying it has no resume point for it. The event takes no position (its
    /// client's cursor is reset to nothing, as without the guard), and every position issued
    /// before it is forgotten, as positions past the bounds are: a resume from one would need
    /// the inner server's replay to bring the event back, and it gave the event no id to be
    /// found by, so nothing proves it would (a replay that skipped it would check out, event
    /// by event, with the event lost). Such a resume is refused `event_gap`. The numbering
    /// goes on from the head, never from 1 again: a position is issued once, so no cursor
    /// from before the reset names an event after it.
    fn reset(&mut self) {
        self.first = self.head() + 1;
        self.inner = Events::new();
        self.by_inner = None;
        self.inner_bytes = 0;
    }

    fn answered(&mut self, request: &Value, seq: u64) {
        if let Some((_, state)) = self
            .requests
            .iter_mut()
            .find(|(id, _)| crate::wire::same_id(id, request))
        {
            if *state == RequestState::Running {
                *state = RequestState::Answered(seq);
            }
        }
    }

    fn lose_running(&mut self) {
        let Requests {
            first,
            more,
            unread,
        } = &mut self.requests;
        let known = first.iter_mut().chain(more.iter_mut()).map(|(_, s)| s);
        for state in known.chain(unread.iter_mut()) {
            if *state == RequestState::Running {
                *state = RequestState::Lost;
            }
        }
    }

    /// Whether a request on the stream can no longer be resolved: the inner server failed the
    /// stream before answering it, so a replay would end without its answer (or with an
    /// answer whose request nobody holds).
    pub(crate) fn has_orphans(&self) -> bool {
        self.requests.unread == Some(RequestState::Lost)
            || self.requests.iter().any(|(_, s)| *s == RequestState::Lost)
    }
}

/// Capacities of a [`Ledger`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Capacities {
    pub(crate) sessions: usize,
    pub(crate) streams: usize,
    pub(crate) events_per_stream: usize,
}

/// A session known here: its record, and when this guard last had the store keep it (wrote
/// or touched it), which tells when to touch it again.
#[derive(Debug)]
struct Known {
    record: Arc<SessionRecord>,
    kept_at: Instant,
}

/// A guard's local memory.
#[derive(Debug)]
pub(crate) struct Ledger {
    sessions: Bounded<SessionId, Known>,
    forgotten: Bounded<SessionId, ()>,
    streams: Bounded<StreamId, StreamLog>,
    events_per_stream: usize,
}

impl Ledger {
    pub(crate) fn new(caps: Capacities) -> Self {
        Self {
            sessions: Bounded::new(caps.sessions),
            forgotten: Bounded::new(caps.sessions),
            streams: Bounded::new(caps.streams),
            events_per_stream: caps.events_per_stream,
        }
    }

    /// The record of a session known here (by its id or the id's text), marked used: a
    /// session in use is kept over the ones unused longer, else its keyed calls would find no
    /// record once enough newer sessions came.
    pub(crate) fn session<Q: Hash + Eq + ?Sized>(&mut self, id: &Q) -> Option<&Arc<SessionRecord>>
    where
        SessionId: std::borrow::Borrow<Q>,
    {
        self.sessions.get_used(id).map(|k| &k.record)
    }

    /// [`Ledger::session`] for a request at `now`, and whether the store must be asked to
    /// keep the record again: its last write or touch from here is `every` or more ago. Then
    /// it counts as kept at `now`, so one request per `every` asks.
    pub(crate) fn session_in_use(
        &mut self,
        id: &SessionId,
        now: Instant,
        every: Duration,
    ) -> Option<(&Arc<SessionRecord>, bool)> {
        let known = self.sessions.get_mut(id)?;
        let due = now.saturating_duration_since(known.kept_at) >= every;
        if due {
            known.kept_at = now;
        }
        Some((&known.record, due))
    }

    /// Knows a session from now on; the store was last asked to keep its record at
    /// `kept_at`.
    pub(crate) fn remember(&mut self, record: Arc<SessionRecord>, kept_at: Instant) {
        self.forgotten.remove(record.session());
        let id = record.session().clone();
        self.sessions.insert(id, Known { record, kept_at });
    }

    /// Whether a session was forgotten here (never one [`Ledger::session`] knows: remembering
    /// a session takes it off the forgotten ones, forgetting it drops its record).
    pub(crate) fn is_forgotten<Q: Hash + Eq + ?Sized>(&self, id: &Q) -> bool
    where
        SessionId: std::borrow::Borrow<Q>,
    {
        self.forgotten.contains(id)
    }

    /// Forgets a session and its streams; `tombstone` answers its later requests 404 here.
    pub(crate) fn forget(&mut self, id: &SessionId, tombstone: bool) {
        self.sessions.remove(id);
        self.streams.retain(|_, log| log.session() != id);
        if tombstone {
            self.forgotten.insert(id.clone(), ());
        }
    }

    pub(crate) fn open_stream(
        &mut self,
        stream: StreamId,
        session: SessionId,
        hash: CapabilityHash,
        requests: RequestIds,
    ) {
        let log = StreamLog::new(session, hash, requests, self.events_per_stream);
        self.streams.insert(stream, log);
    }

    pub(crate) fn stream(&self, id: StreamId) -> Option<&StreamLog> {
        self.streams.get(&id)
    }

    /// Marks a stream used (a resume of it was authorized): kept over streams unused longer.
    pub(crate) fn touch_stream(&mut self, id: StreamId) {
        self.streams.touch(&id);
    }

    /// Numbers an inner event on `stream`; `None` when the stream was forgotten.
    #[cfg(test)]
    pub(crate) fn record(&mut self, stream: StreamId, inner: &[u8]) -> Option<u64> {
        self.record_anew_below(stream, inner, 0)
    }

    /// Numbers an inner event on `stream` (`None` when the stream was forgotten); an id whose
    /// known position is before `below` is numbered as a new event (a resumed stream past its
    /// proven replay: a message that comes is new, whatever its id).
    pub(crate) fn record_anew_below(
        &mut self,
        stream: StreamId,
        inner: &[u8],
        below: u64,
    ) -> Option<u64> {
        self.streams
            .get_mut(&stream)
            .map(|log| log.record(inner, below))
    }

    /// [`Ledger::record_anew_below`], then the event marks `request` answered by it, in one
    /// look-up of the stream.
    pub(crate) fn record_answer(
        &mut self,
        stream: StreamId,
        inner: &[u8],
        request: &Value,
        below: u64,
    ) -> Option<u64> {
        self.streams.get_mut(&stream).map(|log| {
            let seq = log.record(inner, below);
            log.answered(request, seq);
            seq
        })
    }

    /// An event whose inner id is empty passed on `stream` (see [`StreamLog::reset`]),
    /// answering `request` when it carries an answer: the client has it, and a resume, from
    /// a cursor after the event, never owes it.
    pub(crate) fn reset_stream(&mut self, stream: StreamId, request: Option<&Value>) {
        if let Some(log) = self.streams.get_mut(&stream) {
            log.reset();
            if let Some(request) = request {
                let at = log.head();
                log.answered(request, at);
            }
        }
    }

    pub(crate) fn answered(&mut self, stream: StreamId, request: &Value, seq: u64) {
        if let Some(log) = self.streams.get_mut(&stream) {
            log.answered(request, seq);
        }
    }

    pub(crate) fn lose_running(&mut self, stream: StreamId) {
        if let Some(log) = self.streams.get_mut(&stream) {
            log.lose_running();
        }
    }

    /// Sets the hash of a stream opened before its session's context was known (the
    /// `initialize` response's own stream).
    pub(crate) fn set_stream_hash(&mut self, stream: StreamId, hash: CapabilityHash) {
        if let Some(log) = self.streams.get_mut(&stream) {
            log.hash = hash;
        }
    }

    pub(crate) fn break_stream(&mut self, stream: StreamId) {
        if let Some(log) = self.streams.get_mut(&stream) {
            log.broken = true;
        }
    }

    #[cfg(test)]
    pub(crate) fn stream_count(&self) -> usize {
        self.streams.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::InstanceId;

    impl InnerId {
        fn as_str(&self) -> &str {
            std::str::from_utf8(self.as_bytes()).unwrap()
        }
    }

    fn sid(s: &str) -> SessionId {
        SessionId::parse(s.as_bytes()).unwrap()
    }

    proptest::proptest! {
        /// A stream's ids, inline or on the heap, read as one queue would: oldest first.
        #[test]
        fn events_keep_the_order_of_a_queue(ops in proptest::collection::vec(0u8..4, 0..40)) {
            let mut events = Events::new();
            let mut model = VecDeque::new();
            for (n, op) in ops.into_iter().enumerate() {
                if op == 0 {
                    let popped = events.pop_front().map(|i| i.as_str().to_owned());
                    proptest::prop_assert_eq!(popped, model.pop_front());
                } else {
                    // Some ids too long to keep inline.
                    let id = if op == 3 { format!("{n}-{}", "x".repeat(30)) } else { n.to_string() };
                    events.push_back(InnerId::new(id.as_bytes()));
                    model.push_back(id);
                }
                proptest::prop_assert_eq!(events.len(), model.len());
                let read: Vec<&str> = events.iter().map(InnerId::as_str).collect();
                proptest::prop_assert_eq!(&read, &model.iter().map(String::as_str).collect::<Vec<_>>());
                for (at, id) in model.iter().enumerate() {
                    proptest::prop_assert_eq!(events.get(at).map(InnerId::as_str), Some(id.as_str()));
                }
                proptest::prop_assert!(events.get(model.len()).is_none());
            }
        }
    }

    fn hash() -> CapabilityHash {
        CapabilityHash::from_stored("sha256:00")
    }

    #[test]
    fn bounded_maps_forget_the_oldest_first() {
        let mut m = Bounded::new(2);
        m.insert(1, "a");
        m.insert(2, "b");
        m.remove(&1);
        m.insert(3, "c");
        m.insert(4, "d");
        assert!(!m.contains(&2));
        assert!(m.contains(&3) && m.contains(&4));
        for i in 0..100 {
            m.insert(i, "x");
            m.remove(&i);
        }
        assert!(m.order.len() <= 4);
    }

    #[test]
    fn bounded_maps_keep_what_was_used_over_what_was_not() {
        let mut m = Bounded::new(3);
        m.insert(1, "a");
        m.insert(2, "b");
        m.insert(3, "c");
        m.touch(&1);
        m.insert(4, "d");
        assert!(
            m.contains(&1) && !m.contains(&2),
            "the unused oldest goes first"
        );
        m.insert(5, "e");
        assert!(m.contains(&1) && !m.contains(&3));
        m.insert(6, "f");
        assert!(!m.contains(&1), "unused since it went round, it goes");
        // A key forgotten and inserted again is as new: its old place in the order is stale.
        m.remove(&4);
        m.insert(4, "d");
        m.insert(7, "g");
        assert!(m.contains(&4) && !m.contains(&5));
        for i in 0..100 {
            m.insert(100 + i, "x");
            m.touch(&(100 + i));
        }
        assert!(m.order.len() <= 7);
    }

    #[test]
    fn a_stream_numbers_each_inner_id_once_and_forgets_the_oldest() {
        let mut ledger = Ledger::new(Capacities {
            sessions: 4,
            streams: 4,
            events_per_stream: 3,
        });
        let s = StreamId::from_u64(1);
        ledger.open_stream(s, sid("a"), hash(), RequestIds::none());
        assert_eq!(ledger.record(s, b"x"), Some(1));
        assert_eq!(ledger.record(s, b"y"), Some(2));
        assert_eq!(ledger.record(s, b"x"), Some(1));
        assert_eq!(ledger.record(s, b"z"), Some(3));
        assert_eq!(ledger.record(s, b"w"), Some(4));
        let log = ledger.stream(s).unwrap();
        assert_eq!((log.earliest(), log.head()), (2, 4));
        assert_eq!(log.inner_id(1), None);
        assert_eq!(log.inner_id(4), Some(&b"w"[..]));
        assert_eq!(
            ledger.record(s, b"x"),
            Some(5),
            "a forgotten id is a new event"
        );
    }

    // | an event with an empty inner id between numbered ones, on a short stream and on an
    // indexed one; one carrying a request's answer | it takes no position; every position
    // before it is forgotten (head kept, earliest past it: a resume from before it is a
    // gap), an id seen before it is a new event after it, the numbering goes on from the
    // head; the answer it carries marks its request answered |
    #[test]
    fn an_empty_inner_id_forgets_every_position_before_it() {
        let mut ledger = Ledger::new(Capacities {
            sessions: 4,
            streams: 4,
            events_per_stream: 40,
        });
        for (n, events) in [2u64, INDEX_FROM as u64 + 2].into_iter().enumerate() {
            let s = StreamId::from_u64(n as u64 + 1);
            ledger.open_stream(s, sid("a"), hash(), RequestIds::one(Value::from(7)));
            for i in 0..events {
                assert_eq!(ledger.record(s, format!("e{i}").as_bytes()), Some(i + 1));
            }
            ledger.reset_stream(s, Some(&Value::from(7)));
            let log = ledger.stream(s).unwrap();
            assert_eq!((log.head(), log.earliest()), (events, events + 1));
            assert_eq!(log.inner_id(events), None);
            assert_eq!(ledger.record(s, b"e0"), Some(events + 1), "a new event");
            assert_eq!(ledger.record(s, b"f"), Some(events + 2));
            assert_eq!(ledger.record(s, b"e0"), Some(events + 1), "known since");
            ledger.lose_running(s);
            let log = ledger.stream(s).unwrap();
            assert_eq!(log.earliest(), events + 1);
            assert!(!log.has_orphans(), "answered in the reset event");
        }
    }

    #[test]
    fn long_streams_are_indexed_and_still_forget_the_oldest() {
        let mut ledger = Ledger::new(Capacities {
            sessions: 4,
            streams: 4,
            events_per_stream: 40,
        });
        let s = StreamId::from_u64(1);
        ledger.open_stream(s, sid("a"), hash(), RequestIds::none());
        for i in 0..50u64 {
            assert_eq!(ledger.record(s, format!("e{i}").as_bytes()), Some(i + 1));
        }
        assert_eq!(
            ledger.record(s, b"e30"),
            Some(31),
            "an id already numbered keeps its position"
        );
        assert_eq!(
            ledger.record(s, b"e5"),
            Some(51),
            "a forgotten id is a new event"
        );
        let log = ledger.stream(s).unwrap();
        assert_eq!((log.earliest(), log.head()), (12, 51));
        assert_eq!(log.inner_id(12), Some(&b"e11"[..]));
    }

    #[test]
    fn an_id_numbered_again_keeps_its_later_position_when_its_first_is_forgotten() {
        let mut ledger = Ledger::new(Capacities {
            sessions: 4,
            streams: 4,
            events_per_stream: 20,
        });
        let s = StreamId::from_u64(1);
        ledger.open_stream(s, sid("a"), hash(), RequestIds::none());
        for i in 0..20u64 {
            assert_eq!(ledger.record(s, format!("e{i}").as_bytes()), Some(i + 1));
        }
        assert_eq!(ledger.record_anew_below(s, b"e0", 21), Some(21));
        assert_eq!(ledger.record(s, b"e0"), Some(21), "its latest position");
        assert_eq!(ledger.record(s, b"e20"), Some(22));
        assert_eq!(ledger.stream(s).unwrap().earliest(), 3);
        assert_eq!(ledger.record(s, b"e0"), Some(21), "still known");
    }

    #[test]
    fn ids_of_any_length_are_kept_and_each_request_is_followed() {
        let mut ledger = Ledger::new(Capacities {
            sessions: 4,
            streams: 4,
            events_per_stream: 40,
        });
        let s = StreamId::from_u64(1);
        let ids = [Value::from(1), Value::from("two"), Value::from(3)];
        ledger.open_stream(s, sid("a"), hash(), ids.iter().cloned().collect());
        let long = "x".repeat(INLINE_ID + 1);
        let exact = "y".repeat(INLINE_ID);
        for (at, id) in [long.as_str(), exact.as_str(), "z"].into_iter().enumerate() {
            assert_eq!(ledger.record(s, id.as_bytes()), Some(at as u64 + 1));
        }
        assert_eq!(ledger.record(s, long.as_bytes()), Some(1));
        let log = ledger.stream(s).unwrap();
        assert_eq!(log.inner_id(1), Some(long.as_bytes()));
        assert_eq!(log.inner_id(2), Some(exact.as_bytes()));
        ledger.answered(s, &ids[0], 1);
        ledger.answered(s, &ids[1], 2);
        ledger.lose_running(s);
        assert!(
            ledger.stream(s).unwrap().has_orphans(),
            "the third was never answered"
        );
        let t = StreamId::from_u64(2);
        ledger.open_stream(t, sid("a"), hash(), ids[..2].iter().cloned().collect());
        ledger.answered(t, &ids[1], 1);
        ledger.answered(t, &ids[0], 2);
        ledger.lose_running(t);
        assert!(!ledger.stream(t).unwrap().has_orphans());
    }

    // | a request id over the bound, or more requests than the bound | kept as unread: its
    // answer is never matched, and a stream that fails after it reads as orphaned (a resume
    // is refused, never trusted) |
    #[test]
    fn requests_past_the_bounds_are_kept_as_unread() {
        let mut ledger = Ledger::new(Capacities {
            sessions: 4,
            streams: 4,
            events_per_stream: 40,
        });
        let long = Value::from("x".repeat(MAX_ID_BYTES + 1));
        let many: RequestIds = (0..=MAX_REQUESTS).map(Value::from).collect();
        let at_bounds: RequestIds = (0..MAX_REQUESTS - 1)
            .map(Value::from)
            .chain([Value::from("y".repeat(MAX_ID_BYTES))])
            .collect();
        for (n, (ids, kept)) in [
            (RequestIds::one(long.clone()), false),
            (many, false),
            (at_bounds, true),
        ]
        .into_iter()
        .enumerate()
        {
            let s = StreamId::from_u64(n as u64 + 1);
            let first = ids.iter().next().cloned().unwrap();
            let all: Vec<Value> = ids.iter().cloned().collect();
            ledger.open_stream(s, sid("a"), hash(), ids);
            for (at, id) in all.iter().enumerate() {
                ledger.answered(s, id, at as u64 + 1);
            }
            ledger.lose_running(s);
            let log = ledger.stream(s).unwrap();
            assert_eq!(!log.has_orphans(), kept, "stream {n}");
            assert_eq!(
                log.requests.iter().next().map(|(id, _)| id),
                kept.then_some(&first)
            );
        }
    }

    // | a batch of 1,000 requests with 1,000-byte ids; 64 ids of 64 bytes (both budgets
    // exactly); one id more; one byte more | the first kept as unread, its ids not held; the
    // second kept by id; the others unread: a log's ids cost at most the count and byte
    // budgets whatever the client writes, and a stream past them that fails is orphaned |
    #[test]
    fn a_logs_ids_stay_within_one_byte_budget() {
        let mut ledger = Ledger::new(Capacities {
            sessions: 4,
            streams: 4,
            events_per_stream: 40,
        });
        let id = |n: usize, len: usize| Value::from(format!("{n:0len$}"));
        let big: RequestIds = (0..1_000).map(|n| id(n, 1_000)).collect();
        let each = MAX_ID_BYTES / MAX_REQUESTS;
        let at_budget: RequestIds = (0..MAX_REQUESTS).map(|n| id(n, each)).collect();
        let past_budget: RequestIds = (0..MAX_REQUESTS)
            .map(|n| id(n, each))
            .chain([Value::from(0)])
            .collect();
        let bytes_past: RequestIds = (0..MAX_REQUESTS)
            .map(|n| id(n, if n == 0 { each + 1 } else { each }))
            .collect();
        for (n, (ids, kept)) in [
            (big, false),
            (at_budget, true),
            (past_budget, false),
            (bytes_past, false),
        ]
        .into_iter()
        .enumerate()
        {
            let s = StreamId::from_u64(n as u64 + 1);
            ledger.open_stream(s, sid("a"), hash(), ids);
            let requests = &ledger.stream(s).unwrap().requests;
            let held: usize = requests
                .iter()
                .map(|(id, _)| id.as_str().map_or(0, str::len))
                .sum();
            assert!(held <= MAX_ID_BYTES, "stream {n}: {held} bytes of ids");
            assert!(requests.iter().count() <= MAX_REQUESTS, "stream {n}");
            assert_eq!(requests.unread.is_none(), kept, "stream {n}");
            ledger.lose_running(s);
            assert!(ledger.stream(s).unwrap().has_orphans(), "stream {n}");
        }
    }

    // | an inner server whose event ids are 4 KiB, then one of 1 MiB, on a stream kept for
    // 4,096 events | the oldest ids are forgotten once the log holds 64 KiB of them, and
    // the 1 MiB one is not kept at all: a log's inner ids cost at most that budget, whatever
    // the inner server writes (a resume from a forgotten position is refused, `event_gap`) |
    #[test]
    fn a_logs_inner_ids_stay_within_one_byte_budget() {
        let budget = MAX_INNER_BYTES;
        let mut ledger = Ledger::new(Capacities {
            sessions: 4,
            streams: 4,
            events_per_stream: 4096,
        });
        let s = StreamId::from_u64(1);
        ledger.open_stream(s, sid("a"), hash(), RequestIds::none());
        let held = |l: &Ledger| {
            let log = l.stream(s).unwrap();
            (log.earliest()..=log.head())
                .filter_map(|seq| log.inner_id(seq))
                .map(<[u8]>::len)
                .sum::<usize>()
        };
        for n in 0..200u64 {
            let id = format!("{n:04096}");
            assert_eq!(ledger.record(s, id.as_bytes()), Some(n + 1));
            assert!(
                held(&ledger) <= budget,
                "event {n}: {} bytes",
                held(&ledger)
            );
        }
        let log = ledger.stream(s).unwrap();
        assert_eq!(log.head(), 200);
        assert_eq!(log.inner_id(200), Some(format!("{:04096}", 199).as_bytes()));
        assert_eq!(log.inner_id(200 - 16), None, "the oldest went");
        assert_eq!(
            ledger.record(s, format!("{:04096}", 199).as_bytes()),
            Some(200),
            "a kept id keeps its position"
        );
        let huge = vec![b'h'; 1 << 20];
        assert_eq!(ledger.record(s, &huge), Some(201));
        assert!(held(&ledger) <= budget);
        let log = ledger.stream(s).unwrap();
        assert_eq!(log.head(), 201, "numbered all the same");
        assert_eq!(
            log.inner_id(201),
            None,
            "not kept: a resume from it is refused"
        );
        assert_eq!(ledger.record(s, b"next"), Some(202));
    }

    // | a session looked up (in use) while newer ones are remembered | kept over the ones
    // unused longer: an active session's record is not the first evicted |
    #[test]
    fn a_session_looked_up_is_kept_over_newer_ones_unused() {
        let mut ledger = Ledger::new(Capacities {
            sessions: 2,
            streams: 4,
            events_per_stream: 3,
        });
        let rec = |s: &str| {
            Arc::new(SessionRecord::new(
                sid(s),
                InstanceId::random(),
                hash(),
                "v".into(),
            ))
        };
        let now = t0();
        ledger.remember(rec("a"), now);
        ledger.remember(rec("b"), now);
        assert!(ledger.session(&sid("a")).is_some());
        ledger.remember(rec("c"), now);
        assert!(ledger.session(&sid("a")).is_some(), "a was in use");
        assert!(ledger.session(&sid("b")).is_none());
    }

    /// A test's own start of time.
    #[allow(clippy::disallowed_methods)]
    fn t0() -> Instant {
        Instant::now()
    }

    // | a session in use, its record kept at t0; refresh every 10 s | due at t0 + 10 s, not
    // again before t0 + 20 s; unknown sessions are not due |
    #[test]
    fn a_session_in_use_is_due_for_a_touch_once_per_interval() {
        let mut ledger = Ledger::new(Capacities {
            sessions: 4,
            streams: 4,
            events_per_stream: 3,
        });
        let every = Duration::from_secs(10);
        let t = t0();
        let rec = SessionRecord::new(sid("a"), InstanceId::random(), hash(), "v".into());
        ledger.remember(Arc::new(rec), t);
        let due = |l: &mut Ledger, s: u64| {
            l.session_in_use(&sid("a"), t + Duration::from_secs(s), every)
                .map(|(_, due)| due)
        };
        assert_eq!(due(&mut ledger, 9), Some(false));
        assert_eq!(due(&mut ledger, 10), Some(true));
        assert_eq!(due(&mut ledger, 11), Some(false));
        assert_eq!(due(&mut ledger, 19), Some(false));
        assert_eq!(due(&mut ledger, 25), Some(true));
        assert!(ledger.session_in_use(&sid("b"), t, every).is_none());
    }

    #[test]
    fn forgetting_a_session_drops_its_streams_and_answers_it_404_after() {
        let mut ledger = Ledger::new(Capacities {
            sessions: 4,
            streams: 4,
            events_per_stream: 3,
        });
        let rec = SessionRecord::new(sid("a"), InstanceId::random(), hash(), "v".into());
        ledger.remember(Arc::new(rec), t0());
        ledger.open_stream(StreamId::from_u64(1), sid("a"), hash(), RequestIds::none());
        ledger.open_stream(StreamId::from_u64(2), sid("b"), hash(), RequestIds::none());
        ledger.forget(&sid("a"), true);
        assert!(ledger.session(&sid("a")).is_none());
        assert!(ledger.is_forgotten(&sid("a")));
        assert_eq!(ledger.stream_count(), 1);
    }
}
