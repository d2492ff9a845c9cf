//! Stream cursors: where each stream (a call's, or the standalone one) stands, and the event
//! ids already delivered in the session.
//!
//! Event ids are unique across all streams of a session, so one bounded set of delivered ids
//! serves every stream of it. A server that replays its whole session log on a resume (the
//! reference server does) re-sends events the client already handled: those are skipped,
//! payload and cursor alike, so nothing reaches the app twice and no cursor moves backwards.
//! Each session has its own set ([`DeliveredBySession`]): another session numbers its events
//! on its own, and a stream of the session being replaced may still replay.

use crate::proto::limits::MAX_REMEMBERED_EVENT_IDS;
use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use tracing::{debug, warn};

use crate::ids::{EventId, SequencedEventId};
use crate::sse::SseEvent;

/// A server's `retry` above this is clamped: a hostile value must not park a stream forever.
const MAX_RETRY: Duration = Duration::from_secs(3600);

/// Where one stream stands.
#[derive(Debug, Default, Clone)]
pub(super) struct Cursor {
    /// The last event id seen: what a resume presents as `Last-Event-ID`.
    pub(super) last: Option<EventId>,
    /// The server's `retry`: the floor of the next reconnect's delay.
    pub(super) retry: Option<Duration>,
}

/// What one SSE event means for its stream.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Observed {
    /// Already delivered in this session: ignore it entirely.
    Duplicate,
    /// A sequenced id that does not follow the previous one on a resumed stream.
    Gap,
    /// A new event: the cursor advanced (if it had an id) and its data, if any, is to be read.
    New {
        /// The event moved the cursor or carried data: the stream is alive.
        progressed: bool,
    },
}

impl Cursor {
    /// Takes in one event's `id` and `retry`.
    ///
    /// `expect`: on a resumed stream of a server with sequenced ids, the id that must come
    /// next (updated as events arrive). `replay`: the stream is a resume (a GET with
    /// `Last-Event-ID`), the one place a server replays: there an event whose id was
    /// delivered already is skipped. Elsewhere ids are recorded and the event read, whatever
    /// its id: servers that give every event of a session the same id (the session id) or
    /// number each stream from 1 break the uniqueness the specification asks for, and their
    /// answers must not be dropped for it.
    pub(super) fn observe(
        &mut self,
        event: &SseEvent,
        expect: Option<&mut Option<SequencedEventId>>,
        delivered: &mut Delivered,
        replay: bool,
    ) -> Observed {
        let mut moved = false;
        match event.id.as_deref() {
            None => {}
            // Per the SSE specification an empty id resets the cursor.
            Some("") => {
                self.last = None;
                moved = true;
            }
            Some(raw) => match EventId::parse(raw) {
                Ok(id) => {
                    if let Some(expect) = expect {
                        if expect.as_ref().is_some_and(|e| !e.is(&id)) {
                            warn!(event_id = %id, "event ids not contiguous on a resumed stream");
                            return Observed::Gap;
                        }
                        *expect = SequencedEventId::of(&id).map(|s| s.next());
                    }
                    if !delivered.insert(&id) && replay {
                        debug!(event_id = %id, "event already delivered; skipped");
                        return Observed::Duplicate;
                    }
                    self.last = Some(id);
                    moved = true;
                }
                Err(e) => warn!(error = %e, "invalid SSE event id ignored"),
            },
        }
        if let Some(ms) = event.retry {
            self.retry = Some(Duration::from_millis(ms).min(MAX_RETRY));
        }
        Observed::New {
            progressed: moved || !event.data.is_empty(),
        }
    }
}

/// Sessions whose delivered ids are kept: the current one and the one it replaced, whose
/// streams (a resume in flight when the re-initialization began) may still replay.
const KEPT_SESSIONS: usize = 2;

/// The delivered event ids of the latest sessions, each under its generation.
#[derive(Debug, Default)]
pub(super) struct DeliveredBySession {
    /// Oldest first, at most [`KEPT_SESSIONS`]; the newest is the current session's once it
    /// has one.
    sets: VecDeque<(u64, Delivered)>,
    /// What a stream of a session older than every one kept observes against: emptied on
    /// each use, it remembers nothing.
    forgotten: Delivered,
}

impl DeliveredBySession {
    /// The ids delivered on the streams of session `generation`. A session newer than any
    /// seen so far starts its own set, and the oldest kept is forgotten; one older than the
    /// newest kept and without a set of its own gets an empty one each time, so it can never
    /// push out the current session's.
    pub(super) fn of(&mut self, generation: u64) -> &mut Delivered {
        if let Some(i) = self.sets.iter().position(|(g, _)| *g == generation) {
            return &mut self.sets[i].1;
        }
        if self
            .sets
            .back()
            .is_some_and(|(newest, _)| *newest > generation)
        {
            self.forgotten = Delivered::default();
            return &mut self.forgotten;
        }
        if self.sets.len() >= KEPT_SESSIONS {
            self.sets.pop_front();
        }
        self.sets.push_back((generation, Delivered::default()));
        let last = self.sets.len() - 1;
        &mut self.sets[last].1
    }
}

/// A bounded, insertion-ordered set of delivered event ids.
#[derive(Debug, Default)]
pub(super) struct Delivered {
    set: HashSet<EventId>,
    order: VecDeque<EventId>,
}

impl Delivered {
    /// Records `id`; `false` when it was already delivered.
    fn insert(&mut self, id: &EventId) -> bool {
        if self.set.contains(id) {
            return false;
        }
        if self.order.len() >= MAX_REMEMBERED_EVENT_IDS {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        self.set.insert(id.clone());
        self.order.push_back(id.clone());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: usize) -> EventId {
        EventId::parse(&format!("s-{n}")).unwrap()
    }

    fn event(id: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            id: id.map(str::to_owned),
            data: data.to_owned(),
            ..SseEvent::default()
        }
    }

    #[test]
    fn delivered_ids_are_bounded_and_forget_the_oldest() {
        let mut d = Delivered::default();
        assert!(d.insert(&id(1)));
        assert!(!d.insert(&id(1)));
        for n in 2..=MAX_REMEMBERED_EVENT_IDS + 1 {
            assert!(d.insert(&id(n)));
        }
        assert_eq!(d.order.len(), MAX_REMEMBERED_EVENT_IDS);
        assert!(d.insert(&id(1)));
        assert!(!d.insert(&id(MAX_REMEMBERED_EVENT_IDS)));
    }

    #[test]
    fn each_session_has_its_own_delivered_ids_and_the_current_ones_stay() {
        let mut by = DeliveredBySession::default();
        assert!(by.of(1).insert(&id(1)));
        assert!(by.of(2).insert(&id(1)), "another session's id 1");
        assert!(
            !by.of(1).insert(&id(1)),
            "session 1 still remembers its own"
        );
        // A third session forgets the first; a stream of the first then remembers nothing,
        // and takes nothing from the others.
        assert!(by.of(3).insert(&id(1)));
        assert!(by.of(1).insert(&id(1)));
        assert!(by.of(1).insert(&id(1)));
        assert!(!by.of(2).insert(&id(1)));
        assert!(!by.of(3).insert(&id(1)));
    }

    #[test]
    fn a_replayed_event_moves_nothing() {
        let mut d = Delivered::default();
        let mut a = Cursor::default();
        let mut b = Cursor::default();
        assert_eq!(
            a.observe(&event(Some("s-1"), "x"), None, &mut d, false),
            Observed::New { progressed: true }
        );
        assert_eq!(
            b.observe(&event(Some("s-2"), "y"), None, &mut d, false),
            Observed::New { progressed: true }
        );
        // Stream b's resume replays a's event: skipped, b's cursor stays.
        assert_eq!(
            b.observe(&event(Some("s-1"), "x"), None, &mut d, true),
            Observed::Duplicate
        );
        assert_eq!(b.last.as_ref().map(EventId::as_str), Some("s-2"));
        // On a stream that is not a resume the same id is another event of a server that
        // reuses ids: read, and the cursor follows it.
        let mut c = Cursor::default();
        assert_eq!(
            c.observe(&event(Some("s-1"), "z"), None, &mut d, false),
            Observed::New { progressed: true }
        );
        assert_eq!(c.last.as_ref().map(EventId::as_str), Some("s-1"));
    }

    #[test]
    fn sequenced_ids_must_be_contiguous_on_a_resumed_stream() {
        let mut d = Delivered::default();
        let mut c = Cursor::default();
        let mut expect = SequencedEventId::of(&id(5)).map(|s| s.next());
        assert_eq!(
            c.observe(&event(Some("s-6"), ""), Some(&mut expect), &mut d, true),
            Observed::New { progressed: true }
        );
        assert_eq!(
            c.observe(&event(Some("s-8"), ""), Some(&mut expect), &mut d, true),
            Observed::Gap
        );
    }

    #[test]
    fn retry_is_clamped_and_an_empty_id_resets() {
        let mut d = Delivered::default();
        let mut c = Cursor::default();
        let mut e = event(Some("s-1"), "");
        e.retry = Some(u64::MAX);
        c.observe(&e, None, &mut d, false);
        assert_eq!(c.retry, Some(MAX_RETRY));
        c.observe(&event(Some(""), ""), None, &mut d, false);
        assert_eq!(c.last, None);
        assert_eq!(
            c.observe(&event(None, ""), None, &mut d, false),
            Observed::New { progressed: false }
        );
    }
}
