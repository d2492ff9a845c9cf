//! What a call's sends prove: the JSON-RPC id of the last one, the session and context it went
//! out under, and the ids of earlier sends on that session that may still be running.

use crate::ids::{CapabilityHash, RequestId};
use crate::proto::session::negotiated::Negotiated;

/// Earlier sends of one call remembered for its cancellation: re-sends are bounded by the
/// reconnect policy's attempts, but progress resets that count.
const MAX_EARLIER_SENDS: usize = 16;

/// One send of a call, and what the sends before it on the same session left running.
#[derive(Debug, Default)]
pub(in crate::proto::session) struct Attempt {
    /// The JSON-RPC id it went out under.
    rpc: Option<RequestId>,
    /// The session generation it went out on.
    generation: u64,
    /// The capability hash its answers must carry (the extension's check, when in force).
    hash: Option<CapabilityHash>,
    /// Its session deduplicates keyed calls.
    server_dedups: bool,
    /// It went out in the modern era: its answers are read in that era's terms (a
    /// `resultType`), whatever era the client is in when they arrive.
    modern: bool,
    /// Ids of earlier sends on the same session that may still be running.
    earlier: Vec<RequestId>,
}

impl Attempt {
    /// A send under `rpc` on the established `session`.
    pub(super) fn on(rpc: RequestId, session: &Negotiated) -> Self {
        Attempt {
            rpc: Some(rpc),
            generation: session.generation,
            // Hash checks (head and replayed result) are the extension's: only for a session
            // whose server advertised them.
            hash: session.expected_hash().cloned(),
            server_dedups: session.dedups(),
            modern: session.version.is_modern(),
            earlier: Vec::new(),
        }
    }

    /// What a checkpoint recorded of a send another process made: only whether its server
    /// deduplicated keyed calls.
    pub(super) fn recorded(server_dedups: bool) -> Self {
        Attempt {
            server_dedups,
            ..Attempt::default()
        }
    }

    pub(in crate::proto::session) fn rpc(&self) -> Option<&RequestId> {
        self.rpc.as_ref()
    }

    pub(in crate::proto::session) fn generation(&self) -> u64 {
        self.generation
    }

    pub(super) fn hash(&self) -> Option<&CapabilityHash> {
        self.hash.as_ref()
    }

    pub(in crate::proto::session) fn server_dedups(&self) -> bool {
        self.server_dedups
    }

    pub(in crate::proto::session) fn is_modern(&self) -> bool {
        self.modern
    }

    pub(super) fn earlier(&self) -> impl Iterator<Item = &RequestId> {
        self.earlier.iter()
    }

    /// `next` replaces this send. This one stays to be told of a cancellation when it may
    /// still be running on the same session (`running`); a send on a replaced session has
    /// nobody to tell.
    pub(super) fn follow(&mut self, next: Attempt, running: bool) {
        let mut earlier = std::mem::take(&mut self.earlier);
        if next.generation != self.generation {
            earlier.clear();
        } else if let Some(old) = self.rpc.take().filter(|_| running) {
            if earlier.len() == MAX_EARLIER_SENDS {
                earlier.remove(0);
            }
            earlier.push(old);
        }
        *self = Attempt { earlier, ..next };
    }
}
