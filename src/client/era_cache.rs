//! [`EraCache`]: which era each origin was found to speak, shared by the clients that hold
//! the same handle, so only the first of them probes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use reqwest::Url;

use crate::proto::Era;

/// Origins most recently found, kept at most (an agent talks to a bounded set of servers;
/// a cache that outgrew this is cleared rather than left to grow).
const MAX_ORIGINS: usize = 1024;

/// Which era (legacy or modern) each origin (`scheme://host:port`) speaks, as found by the
/// clients sharing this handle. A client tries the cached era first and probes again when the
/// server answers like the other one (a redeploy), so a stale entry costs one round trip,
/// never a wrong answer. Only an era an answer said is recorded: one a client fell back to
/// because its probe met a 5xx, or a 401, 403, 407, 408 or 429 (a rate limiter, a gateway, no
/// token yet), holds for that client alone, and the next one probes again.
///
/// Cheap to clone; clones share the entries. [`EraCache::global`] is the process-wide one
/// every client uses unless given another with
/// [`ClientBuilder::era_cache`](super::ClientBuilder::era_cache).
#[derive(Clone, Default)]
pub struct EraCache {
    entries: Arc<Mutex<HashMap<String, Era>>>,
}

impl std::fmt::Debug for EraCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EraCache")
            .field("origins", &self.lock().len())
            .finish()
    }
}

impl EraCache {
    /// An empty cache of its own.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide cache.
    pub fn global() -> Self {
        static GLOBAL: OnceLock<EraCache> = OnceLock::new();
        GLOBAL.get_or_init(EraCache::new).clone()
    }

    /// The era `url`'s origin was found to speak, if known.
    pub fn get(&self, url: &str) -> Option<Era> {
        let origin = origin(&Url::parse(url).ok()?);
        self.lock().get(&origin).copied()
    }

    /// Records that `url`'s origin speaks `era` (an era persisted by the app, restored).
    /// Ignored for a URL that does not parse.
    pub fn remember(&self, url: &str, era: Era) {
        if let Ok(url) = Url::parse(url) {
            self.record(&url, era);
        }
    }

    /// Forgets every origin.
    pub fn clear(&self) {
        self.lock().clear();
    }

    pub(crate) fn lookup(&self, url: &Url) -> Option<Era> {
        self.lock().get(&origin(url)).copied()
    }

    pub(crate) fn record(&self, url: &Url, era: Era) {
        let mut entries = self.lock();
        if entries.len() >= MAX_ORIGINS {
            entries.clear();
        }
        entries.insert(origin(url), era);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Era>> {
        match self.entries.lock() {
            Ok(guard) => guard,
            // A panic while holding the lock cannot leave a half-written entry.
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// `scheme://host:port`: what the specification caches an era by.
fn origin(url: &Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_per_origin_and_shared_by_clones() {
        let cache = EraCache::new();
        let a = Url::parse("http://127.0.0.1:8080/mcp").unwrap();
        cache.clone().record(&a, Era::Modern);
        assert_eq!(cache.get("http://127.0.0.1:8080/other"), Some(Era::Modern));
        assert_eq!(cache.get("http://127.0.0.1:8081/mcp"), None);
        assert_eq!(cache.get("https://127.0.0.1:8080/mcp"), None);
        cache.clear();
        assert_eq!(cache.lookup(&a), None);
    }
}
