//! The application's hooks ([`Authorizer`], [`TokenStore`]) bounded in time, and the
//! authorizer by the life of the clients it serves.
//!
//! A flow holds the provider's state from its first step to its last (see `detached` in the
//! provider): a hook that never answers would hold it for ever, every later request waiting
//! behind it to its deadline and `sign_out` never returning. Bounded, the hook's silence is
//! a failure like any other, and the state is free again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::Url;
use tokio::sync::watch;

use super::authorizer::{AuthorizationRequest, Authorizer};
use super::store::TokenStore;
use crate::error::{Error, ErrorKind};
use crate::oauth::{RegisteredClient, TokenSet};

/// An [`Authorizer`] that fails once `limit` has passed without an answer.
pub(super) struct BoundedAuthorizer {
    pub(super) inner: Arc<dyn Authorizer>,
    pub(super) limit: Duration,
}

impl Authorizer for BoundedAuthorizer {
    fn authorize(&self, request: AuthorizationRequest) -> BoxFuture<'static, Result<Url, Error>> {
        bounded(self.inner.authorize(request), self.limit, "the authorizer")
    }
}

/// An [`Authorizer`] no longer waited for (its future dropped, the authorization failed) once
/// `ended` is `true`: every client whose requests wanted this authorization is gone, and
/// nothing of theirs may keep the user's browser, a redirect listener or other application
/// code running for them until the authorization timeout.
pub(super) struct OwnedAuthorizer {
    pub(super) inner: Arc<dyn Authorizer>,
    pub(super) ended: watch::Receiver<bool>,
}

impl Authorizer for OwnedAuthorizer {
    fn authorize(&self, request: AuthorizationRequest) -> BoxFuture<'static, Result<Url, Error>> {
        let hook = self.inner.authorize(request);
        let mut ended = self.ended.clone();
        Box::pin(async move {
            let ended = async move {
                if ended.wait_for(|ended| *ended).await.is_err() {
                    // No longer told: only the authorizer's own answer or timeout ends it.
                    futures::future::pending::<()>().await;
                }
            };
            futures::pin_mut!(ended);
            match futures::future::select(hook, ended).await {
                futures::future::Either::Left((answer, _)) => answer,
                futures::future::Either::Right(_) => Err(Error::new(
                    ErrorKind::Closed,
                    "the clients that wanted this authorization have ended",
                )),
            }
        })
    }
}

/// A [`TokenStore`] whose every operation fails once `limit` has passed without an answer.
pub(super) struct BoundedStore {
    pub(super) inner: Arc<dyn TokenStore>,
    pub(super) limit: Duration,
}

const STORE: &str = "the token store";

impl TokenStore for BoundedStore {
    fn load_tokens(&self, server: &str) -> BoxFuture<'static, Result<Option<TokenSet>, Error>> {
        bounded(self.inner.load_tokens(server), self.limit, STORE)
    }

    fn save_tokens(
        &self,
        server: &str,
        tokens: Option<TokenSet>,
    ) -> BoxFuture<'static, Result<(), Error>> {
        bounded(self.inner.save_tokens(server, tokens), self.limit, STORE)
    }

    fn load_client(
        &self,
        issuer: &str,
    ) -> BoxFuture<'static, Result<Option<RegisteredClient>, Error>> {
        bounded(self.inner.load_client(issuer), self.limit, STORE)
    }

    fn save_client(&self, client: RegisteredClient) -> BoxFuture<'static, Result<(), Error>> {
        bounded(self.inner.save_client(client), self.limit, STORE)
    }
}

/// `hook` within `limit`, else a [`ErrorKind::Timeout`] naming `who`. Outside a tokio runtime
/// (where a flow runs inline, see the provider's `detached`) there is no timer to bound it
/// with: it runs unbounded, as the flow around it does.
fn bounded<T: Send + 'static>(
    hook: impl Future<Output = Result<T, Error>> + Send + 'static,
    limit: Duration,
    who: &'static str,
) -> BoxFuture<'static, Result<T, Error>> {
    Box::pin(async move {
        if tokio::runtime::Handle::try_current().is_err() {
            return hook.await;
        }
        match tokio::time::timeout(limit, hook).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!("{who} did not answer within {limit:?}"),
            )),
        }
    })
}
