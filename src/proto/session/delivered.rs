//! Event ids already delivered in the current session.
//!
//! Event ids are unique across all streams of a session, so one bounded set serves the call
//! streams and the standalone stream alike. A server that replays its whole session log on a
//! resume (the reference server does) then re-sends events the client already handled: those
//! are skipped, payload and cursor alike, so nothing reaches the app twice and no cursor
//! moves backwards.

use std::collections::{HashSet, VecDeque};

use crate::ids::EventId;

/// Ids remembered; the oldest are forgotten first. A replay reaching further back than this
/// is delivered again (bounded memory wins over perfect recall of an unbounded log).
pub const MAX_REMEMBERED_EVENT_IDS: usize = 4096;

/// A bounded, insertion-ordered set of delivered event ids.
#[derive(Debug, Default)]
pub(super) struct Delivered {
    set: HashSet<EventId>,
    order: VecDeque<EventId>,
}

impl Delivered {
    /// Records `id`; `false` when it was already delivered.
    pub(super) fn insert(&mut self, id: &EventId) -> bool {
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

    /// Forgets everything: a new session has its own ids.
    pub(super) fn clear(&mut self) {
        self.set.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: usize) -> EventId {
        EventId::parse(&format!("e{n}")).unwrap()
    }

    #[test]
    fn remembers_and_forgets_the_oldest() {
        let mut d = Delivered::default();
        assert!(d.insert(&id(1)));
        assert!(!d.insert(&id(1)));
        for n in 2..=MAX_REMEMBERED_EVENT_IDS + 1 {
            assert!(d.insert(&id(n)));
        }
        assert_eq!(d.order.len(), MAX_REMEMBERED_EVENT_IDS);
        // The first id fell out; the newest are still known.
        assert!(d.insert(&id(1)));
        assert!(!d.insert(&id(MAX_REMEMBERED_EVENT_IDS)));
    }
}
