//! [`TokenProvider`]: where the client gets the bearer token of each request, and a fresh one
//! when the server refuses it.

use std::future::Future;

use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Method};
use reqwest::Url;

use super::http::redacted_url;
use crate::auth::AuthChallenge;
use crate::error::{Error, ErrorKind};

/// Supplies the token of every request (`Authorization: Bearer <token>`, or `DPoP <token>`
/// with a proof per request, see [`TokenProvider::present`]), resumes, the standalone stream
/// and DELETE included. Set with
/// [`ClientBuilder::auth`](super::ClientBuilder::auth).
///
/// The client asks before each HTTP request, so a provider should answer from a cache and
/// renew only when needed. When the server answers 401 (or 403 with `insufficient_scope`)
/// the request was not processed: the client asks **once** more, with
/// [`TokenRequest::challenge`] set, and sends the same request again with the new token. If
/// that one is refused too, the call fails with
/// [`ErrorKind::Unauthorized`](crate::ErrorKind::Unauthorized) and the server's challenge
/// ([`Error::auth_challenge`]); the session itself is kept.
///
/// Several requests may be refused at once when a token expires; each asks for a fresh
/// token. [`TokenRequest::refused_token`] lets a provider renew once: when its current token
/// is no longer the refused one, another request already renewed it.
///
/// Any `Fn(TokenRequest) -> impl Future<Output = Result<String, Error>>` is a provider:
///
/// ```no_run
/// use std::sync::{Arc, Mutex};
/// use mcp_resume::{Client, TokenRequest};
///
/// # fn fetch_new_token(scope: Option<&str>) -> String { String::new() }
/// let current = Arc::new(Mutex::new(String::from("initial-token")));
/// let client = Client::builder("https://mcp.example.com/mcp")
///     .auth(move |request: TokenRequest| {
///         let current = current.clone();
///         async move {
///             let mut token = current.lock().unwrap();
///             let refused = request.refused_token.as_deref();
///             if request.challenge.is_some() && refused == Some(token.as_str()) {
///                 let scope = request.challenge.as_ref().and_then(|c| c.scope.as_deref());
///                 *token = fetch_new_token(scope);
///             }
///             Ok(token.clone())
///         }
///     })
///     .build()?;
/// # Ok::<(), mcp_resume::Error>(())
/// ```
pub trait TokenProvider: Send + Sync + 'static {
    /// The token for the next request. An error fails the exchange as never sent: the client
    /// retries it like a refused connection, within its reconnect policy.
    fn token(&self, request: TokenRequest) -> BoxFuture<'static, Result<String, Error>>;

    /// What the client actually asks for each request: a token, or `None` to send the request
    /// without credentials. The default answers [`TokenProvider::token`].
    ///
    /// A provider that has no token yet, and learns how to get one from the server's refusal
    /// (an OAuth client discovering the authorization server from the 401's
    /// `WWW-Authenticate`), answers `None` to an ordinary request; the server's refusal then
    /// comes back as a [`TokenRequest`] with its challenge, and the request is sent again
    /// with the token that answer gives.
    fn credential(
        &self,
        request: TokenRequest,
    ) -> BoxFuture<'static, Result<Option<String>, Error>> {
        let token = self.token(request);
        Box::pin(async move { token.await.map(Some) })
    }

    /// How `token` is presented on one HTTP request (`method` to `url`), asked for each
    /// request sent, retries included. The default presents it as `Bearer`. A provider of
    /// sender-constrained tokens answers [`Presentation::dpop`] with a proof made for this
    /// one request (RFC 9449: a fresh `jti` every time). An error fails the exchange as never
    /// sent, like an error of [`TokenProvider::credential`].
    fn present(&self, token: &str, method: &Method, url: &Url) -> Result<Presentation, Error> {
        let _ = (method, url);
        Presentation::bearer(token)
    }

    /// Sees the head of every response from the MCP endpoint `url`: `status`, its `headers`,
    /// and its challenge when the credentials were refused. For a request that presented a
    /// token, `true` asks the client to send it once more with the same token and a fresh
    /// [`TokenProvider::present`]: a DPoP server that refused the proof for want of its
    /// nonce (`use_dpop_nonce`, the nonce in `DPoP-Nonce`). At most once per request; the
    /// default answers `false`.
    fn observe(
        &self,
        url: &Url,
        status: u16,
        headers: &HeaderMap,
        challenge: Option<&AuthChallenge>,
    ) -> bool {
        let _ = (url, status, headers, challenge);
        false
    }

    /// The client this provider was given to has stopped (closed, dropped, or its runtime
    /// shut down): end what the provider runs on that client's behalf alone, such as an
    /// authorization waiting on the user, so that no application code keeps running for a
    /// client that is gone. Called without the client's locks, possibly more than once for
    /// one client (each of its driver's tasks stops it). A panic here is caught and logged:
    /// it costs the provider's own cleanup, nothing else of the close. The default does
    /// nothing.
    fn close(&self) {}

    /// This provider for one more client: a [`ClientBuilder`](crate::ClientBuilder) is a
    /// template, and every client built from it (or from its clones) would share the one
    /// provider it was given. A provider that keeps state per client, such as what
    /// [`TokenProvider::close`] ends, answers an instance of its own for each client, sharing
    /// the rest (tokens, the flow in progress), so that one client's close ends only its own
    /// part. The default, `None`, shares this one.
    fn for_client(&self) -> Option<std::sync::Arc<dyn TokenProvider>> {
        None
    }
}

/// How one request presents its token: the `Authorization` header, and for a DPoP-bound
/// token the `DPoP` proof beside it. Both are marked sensitive (kept out of HTTP/2 header
/// compression tables and `Debug`).
#[derive(Clone, Debug)]
pub struct Presentation {
    pub(crate) authorization: HeaderValue,
    pub(crate) proof: Option<HeaderValue>,
}

impl Presentation {
    /// `Authorization: Bearer <token>`. [`ErrorKind::Unauthorized`] for a token that is not
    /// a valid header value.
    pub fn bearer(token: &str) -> Result<Self, Error> {
        Ok(Presentation {
            authorization: sensitive(format!("Bearer {token}"))?,
            proof: None,
        })
    }

    /// `Authorization: DPoP <token>` with `DPoP: <proof>`, the proof signed for this request
    /// (RFC 9449 §7.1). A DPoP-bound token is never sent as `Bearer`.
    pub fn dpop(token: &str, proof: &str) -> Result<Self, Error> {
        Ok(Presentation {
            authorization: sensitive(format!("DPoP {token}"))?,
            proof: Some(sensitive(proof.to_owned())?),
        })
    }

    /// Whether the token goes out with the `DPoP` scheme and a proof.
    pub fn is_dpop(&self) -> bool {
        self.proof.is_some()
    }
}

fn sensitive(value: String) -> Result<HeaderValue, Error> {
    let mut value = HeaderValue::try_from(value).map_err(|_| {
        Error::new(
            ErrorKind::Unauthorized,
            "the token provider returned an invalid header value",
        )
    })?;
    value.set_sensitive(true);
    Ok(value)
}

impl<F, Fut> TokenProvider for F
where
    F: Fn(TokenRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, Error>> + Send + 'static,
{
    fn token(&self, request: TokenRequest) -> BoxFuture<'static, Result<String, Error>> {
        Box::pin(self(request))
    }
}

/// Why the client asks a [`TokenProvider`] for a token.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct TokenRequest {
    /// `None` for an ordinary request. For the one re-send after a refusal, what the server
    /// said: the scopes it wants, where its resource metadata is.
    pub challenge: Option<AuthChallenge>,
    /// The token the server just refused, for the re-send after a refusal.
    pub refused_token: Option<String>,
    /// The URL of the MCP endpoint the token is for (`None` when a provider is asked outside
    /// a client). A provider bound to one server refuses to hand its token for another.
    pub url: Option<String>,
}

impl TokenRequest {
    /// Whether the previous token was refused and a fresh one is needed.
    pub fn is_refresh(&self) -> bool {
        self.challenge.is_some()
    }
}

impl std::fmt::Debug for TokenRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The refused token is still a credential.
        f.debug_struct("TokenRequest")
            .field("challenge", &self.challenge)
            .field(
                "refused_token",
                &self.refused_token.as_ref().map(|_| "<redacted>"),
            )
            // Its query string (and user info) may carry credentials too.
            .field("url", &self.url.as_deref().map(redacted_url))
            .finish()
    }
}
