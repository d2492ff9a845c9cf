//! [`Authorizer`]: the application's part of the authorization code flow, showing the
//! authorization page and handing back where it redirected.

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::Url;

use crate::error::{Error, ErrorKind};

/// What the user must be shown: the authorization URL (PKCE challenge, `state`, `resource`
/// and scopes included) and the redirect URI the answer will come back to.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AuthorizationRequest {
    /// Open this in a browser (or follow it headlessly).
    pub url: Url,
    /// The redirect URI registered for this client; the authorization server sends the user
    /// agent there with `code`, `state` and `iss`.
    pub redirect_uri: String,
}

/// Opens the authorization URL and returns the full redirect URL the authorization server
/// sent the user agent to (query included). A desktop agent opens a browser and listens on
/// its loopback redirect URI; tests and unattended clients use [`HeadlessAuthorizer`].
///
/// The provider checks what comes back (`state`, RFC 9207 `iss`, `error`) before sending the
/// code anywhere. An error here (the user closed the window, declined) fails the
/// authorization. Any `Fn(AuthorizationRequest) -> impl Future<Output = Result<Url, Error>>`
/// is an authorizer.
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
#[derive(Clone, Debug)]
pub struct HeadlessAuthorizer {
    http: reqwest::Client,
}

const MAX_REDIRECTS: usize = 10;

impl HeadlessAuthorizer {
    /// With its own HTTP client (no automatic redirects, 30 s per request).
    pub fn new() -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        HeadlessAuthorizer { http }
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
                url = next;
            }
            Err(fail(format!(
                "more than {MAX_REDIRECTS} redirects before the redirect URI"
            )))
        })
    }
}

fn same_endpoint(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
        && a.path() == b.path()
}
