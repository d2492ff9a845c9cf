//! [`TokenStore`]: where an [`OAuthProvider`](super::OAuthProvider) keeps tokens and client
//! registrations between requests and, with a persistent store, between runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::error::Error;
use crate::oauth::{RegisteredClient, TokenSet};

/// Keeps the tokens of each MCP server and the client registration at each authorization
/// server. The provider reads a server's tokens once, then writes each change (a grant, a
/// refresh, tokens dropped after the authorization server changed); it reads a registration
/// before registering and writes the one it obtained by dynamic registration.
///
/// Values carry [`Secret`](crate::oauth::Secret)s: a store that persists them reads them with
/// `expose()` and should encrypt or keep them in the platform's credential store. The default
/// is an [`InMemoryTokenStore`]. A server's key is its URL without user info or fragment.
///
/// The authorization server, and so the issuer a registration is kept under, is the one the
/// MCP server names: a hostile one can name a new issuer on every refusal, each registering
/// the client anew. A store that keeps every registration grows with each; the default keeps
/// a bounded number.
///
/// One provider serializes its own refreshes; the store is not asked to. A store shared by
/// several processes (or providers) has no compare-and-swap here: two of them refreshing at
/// once both redeem the same refresh token, and an authorization server that detects refresh
/// token reuse may answer by revoking the whole grant. Where that matters, let one process
/// refresh, or hold a lock per server in the store from `load_tokens` to `save_tokens`.
pub trait TokenStore: Send + Sync + 'static {
    /// The tokens kept for the MCP server at `server` (its URL, without user info).
    fn load_tokens(&self, server: &str) -> BoxFuture<'static, Result<Option<TokenSet>, Error>>;
    /// Replaces the tokens of `server`; `None` forgets them.
    fn save_tokens(
        &self,
        server: &str,
        tokens: Option<TokenSet>,
    ) -> BoxFuture<'static, Result<(), Error>>;
    /// The registration kept for the authorization server `issuer`.
    fn load_client(
        &self,
        issuer: &str,
    ) -> BoxFuture<'static, Result<Option<RegisteredClient>, Error>>;
    /// Keeps a registration, under its issuer.
    fn save_client(&self, client: RegisteredClient) -> BoxFuture<'static, Result<(), Error>>;
}

/// A [`TokenStore`] in memory: tokens last as long as the process. Clones share the same
/// contents. It keeps the registrations of the last 32 authorization servers: a registration
/// older than that is dropped, and made again should its server be named again.
#[derive(Clone, Default)]
pub struct InMemoryTokenStore {
    inner: Arc<Mutex<Contents>>,
}

/// How many registrations the in-memory store keeps. A client meets a handful of
/// authorization servers; a server naming a new one on every refusal would otherwise grow
/// the store by a registration (its `client_id` and secret as long as the answer that gave
/// them) each time.
const MAX_REGISTRATIONS: usize = 32;

#[derive(Default)]
struct Contents {
    tokens: HashMap<String, TokenSet>,
    /// Per issuer, the registration and when it was saved (a count), for the oldest to go.
    clients: HashMap<String, (u64, RegisteredClient)>,
    saved: u64,
}

impl InMemoryTokenStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Contents) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl std::fmt::Debug for InMemoryTokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (tokens, clients) = self.with(|c| (c.tokens.len(), c.clients.len()));
        f.debug_struct("InMemoryTokenStore")
            .field("servers", &tokens)
            .field("registrations", &clients)
            .finish()
    }
}

impl TokenStore for InMemoryTokenStore {
    fn load_tokens(&self, server: &str) -> BoxFuture<'static, Result<Option<TokenSet>, Error>> {
        let tokens = self.with(|c| c.tokens.get(server).cloned());
        Box::pin(async move { Ok(tokens) })
    }

    fn save_tokens(
        &self,
        server: &str,
        tokens: Option<TokenSet>,
    ) -> BoxFuture<'static, Result<(), Error>> {
        self.with(|c| match tokens {
            Some(tokens) => c.tokens.insert(server.to_owned(), tokens),
            None => c.tokens.remove(server),
        });
        Box::pin(async { Ok(()) })
    }

    fn load_client(
        &self,
        issuer: &str,
    ) -> BoxFuture<'static, Result<Option<RegisteredClient>, Error>> {
        let client = self.with(|c| c.clients.get(issuer).map(|(_, client)| client.clone()));
        Box::pin(async move { Ok(client) })
    }

    fn save_client(&self, client: RegisteredClient) -> BoxFuture<'static, Result<(), Error>> {
        self.with(|c| {
            if c.clients.len() >= MAX_REGISTRATIONS && !c.clients.contains_key(&client.issuer) {
                let oldest = c
                    .clients
                    .iter()
                    .min_by_key(|(_, (saved, _))| *saved)
                    .map(|(issuer, _)| issuer.clone());
                if let Some(oldest) = oldest {
                    c.clients.remove(&oldest);
                }
            }
            c.saved += 1;
            c.clients.insert(client.issuer.clone(), (c.saved, client));
        });
        Box::pin(async { Ok(()) })
    }
}
