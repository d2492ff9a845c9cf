//! [`Authorizer`]: the application's part of the authorization code flow, showing the
//! authorization page and handing back where it redirected.

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::Url;

use crate::error::{Error, ErrorKind};
use crate::oauth::{is_loopback_host, same_endpoint, shown_url};

/// What the user must be shown: the authorization URL (PKCE challenge, `state`, `resource`
/// and scopes included) and the redirect URI the answer will come back to.
///
/// The URL is the authorization endpoint of the authorization server that the MCP server
/// named (and whose metadata passed the provider's checks): the server chose it, not the
/// application. Show it in the user's browser, where the user sees which site asks; do not
/// fetch it with the application's own credentials or cookies.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AuthorizationRequest {
    /// Open this in a browser (or follow it headlessly).
    pub url: Url,
    /// The redirect URI registered for this client at this authorization server; the
    /// authorization server sends the user agent there with `code`, `state` and `iss`. It
    /// may be the configured one with a segment naming the server appended
    /// ([`OAuthBuilder::redirect_uri`](super::OAuthBuilder::redirect_uri)): return the URL
    /// the answer arrived at, whatever its path; the provider refuses one that arrived
    /// elsewhere than here.
    pub redirect_uri: String,
}

/// Opens the authorization URL and returns the full redirect URL the authorization server
/// sent the user agent to (query included). A desktop agent opens a browser and listens on
/// its loopback redirect URI; tests and unattended clients use [`HeadlessAuthorizer`].
///
/// The provider checks what comes back (`state`, RFC 9207 `iss`, `error`) before sending the
/// code anywhere. An error here (the user closed the window, declined) fails the
/// authorization. Any `Fn(AuthorizationRequest) -> impl Future<Output = Result<Url, Error>>`
/// is an authorizer. The call itself, before it returns its future, must not block: only
/// the future is bounded (`authorization_timeout`); wait for the user in the future.
pub trait Authorizer: Send + Sync + 'static {
    /// Shows `request.url` and waits for the redirect.
    fn authorize(&self, request: AuthorizationRequest) -> BoxFuture<'static, Result<Url, Error>>;
}

impl<F, Fut> Authorizer for F
where
    F: Fn(AuthorizationRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Url, Error>> + Send + 'static,
{
    fn authorize(&self, request: AuthorizationRequest) -> BoxFuture<'static, Result<Url, Error>> {
        Box::pin(self(request))
    }
}

/// An [`Authorizer`] without a user: it GETs the authorization URL and follows the
/// authorization server's redirects (at most 10) until one points at the redirect URI, which
/// it returns without requesting it. For authorization servers that approve without
/// interaction: test servers, the conformance suite's, a server that trusts this machine.
/// A page that wants a user (any answer other than a redirect) is an error.
///
/// It follows a redirect only to an `https` URL off loopback, within the origin of the
/// authorization URL it started from, or (from an authorization server on this machine) to
/// another loopback URL: an authorization server elsewhere cannot make it request services
/// on this machine, or plain `http` anywhere. A redirect to this client's redirect endpoint
/// with another path than the request's redirect URI (another authorization server's
/// answer, in a mix-up) stops it.
#[derive(Clone, Debug)]
pub struct HeadlessAuthorizer {
    http: reqwest::Client,
}

const MAX_REDIRECTS: usize = 10;

impl HeadlessAuthorizer {
    /// With its own HTTP client (no automatic redirects, 30 s per request).
    pub fn new() -> Self {
        Self::with_http(reqwest::Client::builder()).unwrap_or_else(|_| HeadlessAuthorizer {
            http: reqwest::Client::default(),
        })
    }

    /// With the HTTP client `builder` makes (proxies, root certificates, DNS overrides), set
    /// to follow no redirect (the authorizer follows each itself, after its checks) and to a
    /// 30 s timeout per request. [`ErrorKind::InvalidConfig`] when the client cannot be
    /// built.
    pub fn with_http(builder: reqwest::ClientBuilder) -> Result<Self, Error> {
        let http = builder
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| Error::with_source(ErrorKind::InvalidConfig, "HTTP client", e))?;
        Ok(HeadlessAuthorizer { http })
    }
}

impl Default for HeadlessAuthorizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Authorizer for HeadlessAuthorizer {
    fn authorize(&self, request: AuthorizationRequest) -> BoxFuture<'static, Result<Url, Error>> {
        let http = self.http.clone();
        Box::pin(async move {
            let fail = |m: String| Error::new(ErrorKind::Unauthorized, m);
            let target = Url::parse(&request.redirect_uri)
                .map_err(|e| fail(format!("invalid redirect URI: {e}")))?;
            let start = request.url.origin();
            let local_start = is_loopback_host(&request.url);
            let mut url = request.url;
            for _ in 0..MAX_REDIRECTS {
                let response = http
                    .get(url.clone())
                    .send()
                    .await
                    .map_err(|e| fail(format!("authorization page: {}", e.without_url())))?;
                let status = response.status();
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .filter(|_| status.is_redirection())
                    .ok_or_else(|| {
                        fail(format!(
                            "the authorization page answered {status} instead of redirecting: it wants a user"
                        ))
                    })?;
                let next = url
                    .join(location)
                    .map_err(|e| fail(format!("bad redirect: {e}")))?;
                if same_endpoint(&next, &target) {
                    return Ok(next);
                }
                // Within the authorization server's own origin: its login and consent pages.
                let within = next.origin() == start;
                if !within && next.origin() == target.origin() {
                    return Err(fail(format!(
                        "the answer went to {}, not to this request's redirect URI: another authorization server's answer",
                        shown_url(&next)
                    )));
                }
                let local = is_loopback_host(&next);
                let followable =
                    within || (next.scheme() == "https" && !local) || (local_start && local);
                if !followable {
                    return Err(fail(format!(
                        "the authorization server redirected to {}: neither https off loopback, nor its own origin, nor this request's redirect URI; not followed",
                        shown_url(&next)
                    )));
                }
                url = next;
            }
            Err(fail(format!(
                "more than {MAX_REDIRECTS} redirects before the redirect URI"
            )))
        })
    }
}
