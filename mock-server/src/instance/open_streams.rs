//! The standalone GET streams an instance holds open, one per session.

use std::collections::HashMap;

use bytes::Bytes;
use tokio::sync::mpsc::UnboundedSender;

/// Standalone streams held open at once by one instance, beyond which one is ended to make
/// room (its client reconnects, as after a dropped connection).
pub(super) const MAX_OPEN_STREAMS: usize = 10_000;

/// The sender that keeps each session's standalone stream open (a stream ends when its
/// sender is dropped). A session's entry goes when the session ends or its stream is
/// replaced, and also once its client has gone (the receiver dropped), so sessions that are
/// never deleted do not pile up.
#[derive(Debug)]
pub(super) struct OpenStreams {
    senders: HashMap<String, UnboundedSender<Bytes>>,
    cap: usize,
}

impl OpenStreams {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            senders: HashMap::new(),
            cap,
        }
    }

    /// Holds `tx` open as `session`'s stream, replacing (and so ending) its previous one.
    pub(super) fn insert(&mut self, session: String, tx: UnboundedSender<Bytes>) {
        if !self.senders.contains_key(&session) && self.senders.len() >= self.cap {
            self.senders.retain(|_, tx| !tx.is_closed());
            if self.senders.len() >= self.cap {
                // All still open: any one of them goes.
                let any = self.senders.keys().next().cloned();
                if let Some(k) = any {
                    self.senders.remove(&k);
                }
            }
        }
        self.senders.insert(session, tx);
    }

    /// Ends `session`'s stream, if it has one.
    pub(super) fn remove(&mut self, session: &str) {
        self.senders.remove(session);
    }

    /// Ends every stream.
    pub(super) fn clear(&mut self) {
        self.senders.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    #[test]
    fn closed_streams_go_first_and_the_open_ones_are_bounded() {
        let mut open = OpenStreams::new(2);
        let (a, _a_rx) = mpsc::unbounded_channel();
        let (b, b_rx) = mpsc::unbounded_channel();
        open.insert("a".into(), a);
        open.insert("b".into(), b);
        drop(b_rx);
        let (c, _c_rx) = mpsc::unbounded_channel();
        open.insert("c".into(), c);
        assert!(open.senders.contains_key("a") && open.senders.contains_key("c"));
        assert!(!open.senders.contains_key("b"));
        let (d, _d_rx) = mpsc::unbounded_channel();
        open.insert("d".into(), d);
        assert_eq!(open.senders.len(), 2);
        assert!(open.senders.contains_key("d"));
        // Replacing a session's stream takes no room.
        let (d2, _d2_rx) = mpsc::unbounded_channel();
        open.insert("d".into(), d2);
        assert_eq!(open.senders.len(), 2);
    }
}
