//! How the client identifies itself to an authorization server: the choice between
//! pre-registered credentials, a client ID metadata document and dynamic registration, the
//! registration request, and the token endpoint authentication method.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use url::Url;

use super::{is_secure_url, OAuthError, Secret};

/// A client identity at one authorization server. Credentials are bound to the issuer that
/// issued them: a client never presents them to another authorization server.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegisteredClient {
    /// The issuer identifier of the authorization server the identity belongs to.
    pub issuer: String,
    /// `client_id`.
    pub client_id: String,
    /// `client_secret`, for a confidential client.
    pub client_secret: Option<Secret>,
    /// The `token_endpoint_auth_method` the registration settled on, if it said.
    pub token_endpoint_auth_method: Option<String>,
    /// The redirect URI registered for this client at this authorization server. `None`:
    /// the provider's configured one.
    pub redirect_uri: Option<String>,
}

impl RegisteredClient {
    /// A client identity at `issuer`.
    pub fn new(issuer: impl Into<String>, client_id: impl Into<String>) -> Self {
        RegisteredClient {
            issuer: issuer.into(),
            client_id: client_id.into(),
            client_secret: None,
            token_endpoint_auth_method: None,
            redirect_uri: None,
        }
    }

    /// With the redirect URI registered at this authorization server. One that no other
    /// authorization server redirects to is what tells their answers apart when a server
    /// does not send `iss` (RFC 9700 §4.4.2).
    pub fn redirect_uri(mut self, uri: impl Into<String>) -> Self {
        self.redirect_uri = Some(uri.into());
        self
    }

    /// With a client secret.
    pub fn secret(mut self, secret: impl Into<Secret>) -> Self {
        self.client_secret = Some(secret.into());
        self
    }

    /// With the token endpoint authentication method the registration settled on.
    pub fn auth_method(mut self, method: impl Into<String>) -> Self {
        self.token_endpoint_auth_method = Some(method.into());
        self
    }
}

/// How to obtain a `client_id` at an authorization server.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Registration {
    /// Credentials the application configured for this issuer.
    PreRegistered,
    /// The application's client ID metadata document URL is the `client_id`.
    ClientIdMetadataDocument,
    /// Dynamic client registration (RFC 7591) at this endpoint.
    Dynamic(String),
    /// None of the above is possible.
    Unavailable,
}

/// The specification's order of preference: pre-registered credentials for this issuer; a
/// client ID metadata document when the server supports them; dynamic registration when the
/// server has a registration endpoint.
pub(crate) fn choose_registration(
    has_pre_registered: bool,
    has_metadata_document: bool,
    metadata_documents_supported: bool,
    registration_endpoint: Option<&str>,
) -> Registration {
    if has_pre_registered {
        Registration::PreRegistered
    } else if has_metadata_document && metadata_documents_supported {
        Registration::ClientIdMetadataDocument
    } else if let Some(endpoint) = registration_endpoint {
        Registration::Dynamic(endpoint.to_owned())
    } else {
        Registration::Unavailable
    }
}

/// The redirect URI of the authorization code flow at the authorization server `issuer`:
/// `base` (the application's redirect URI) with a segment naming that server appended to its
/// path, e.g. `http://127.0.0.1:8976/callback/as-1f0c9a4e2b7d5c38`.
///
/// With one redirect URI per authorization server, an answer always arrives where the server
/// that produced it was told to send it; a malicious authorization server that forwards the
/// user to an honest one (a mix-up attack) gets the honest one's code delivered to the honest
/// one's redirect URI, which the client refuses for the flow it started with the malicious
/// one (RFC 9700 §4.4.2). The segment is derived from the issuer (the first 64 bits of its
/// SHA-256), so it is the same across runs and registrations. A `base` whose path cannot
/// take a segment (`app:callback`) is returned as it is.
pub(crate) fn redirect_uri_for(base: &str, issuer: &str) -> String {
    let Ok(mut url) = Url::parse(base) else {
        return base.to_owned();
    };
    if url.cannot_be_a_base() {
        return base.to_owned();
    }
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, issuer.as_bytes());
    let tag = URL_SAFE_NO_PAD.encode(&digest.as_ref()[..8]);
    let path = format!("{}/as-{tag}", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url.into()
}

/// Whether `uri` may be a redirect URI (OAuth 2.1 §2.3.1, RFC 8252): no fragment; `https`;
/// `http` only to a loopback host; or an app's private-use scheme. Never a scheme a browser
/// would run or read locally (`javascript:`, `data:`, `file:`, …).
pub(crate) fn check_redirect_uri(uri: &str) -> Result<(), OAuthError> {
    let bad = |why: &str| OAuthError::Config(format!("redirect URI {uri}: {why}"));
    let url = Url::parse(uri).map_err(|e| bad(&e.to_string()))?;
    if url.fragment().is_some() {
        return Err(bad("a redirect URI has no fragment"));
    }
    match url.scheme() {
        "https" => Ok(()),
        "http" if is_secure_url(&url) => Ok(()),
        "http" => Err(bad("plain http only to a loopback host")),
        "javascript" | "data" | "file" | "vbscript" | "about" | "blob" | "ftp" | "ws" | "wss" => {
            Err(bad("not a scheme a redirect may use"))
        }
        _ => Ok(()),
    }
}

/// Whether `url` may be a client ID metadata document URL (the document's `client_id`):
/// `https`, with a path beyond `/`, without fragment, user info or dot segments.
pub(crate) fn check_client_metadata_document(url: &str) -> Result<(), OAuthError> {
    let bad = |why: &str| OAuthError::Config(format!("client metadata document URL {url}: {why}"));
    let parsed = Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if parsed.scheme() != "https" {
        return Err(bad("must be https"));
    }
    if parsed.path() == "/" {
        return Err(bad("must have a path"));
    }
    if parsed.fragment().is_some() || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad("no fragment and no user info"));
    }
    // The parser resolves `.` and `..`: the URL would no longer be the one written, and the
    // `client_id` must be byte for byte the document's.
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let dot_segment = |segment: &str| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "." || decoded == ".."
    };
    if path.split('/').any(dot_segment) {
        return Err(bad("no dot segments"));
    }
    Ok(())
}

/// How the client authenticates to the token endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenEndpointAuth {
    /// A public client: `client_id` in the body, no secret.
    None,
    /// HTTP Basic with the form-encoded id and secret (RFC 6749 §2.3.1).
    ClientSecretBasic,
    /// `client_id` and `client_secret` in the body.
    ClientSecretPost,
    /// A JWT signed with the client's private key (RFC 7523).
    PrivateKeyJwt,
}

impl TokenEndpointAuth {
    /// The registered name, e.g. `client_secret_basic`.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenEndpointAuth::None => "none",
            TokenEndpointAuth::ClientSecretBasic => "client_secret_basic",
            TokenEndpointAuth::ClientSecretPost => "client_secret_post",
            TokenEndpointAuth::PrivateKeyJwt => "private_key_jwt",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "none" => TokenEndpointAuth::None,
            "client_secret_basic" => TokenEndpointAuth::ClientSecretBasic,
            "client_secret_post" => TokenEndpointAuth::ClientSecretPost,
            "private_key_jwt" => TokenEndpointAuth::PrivateKeyJwt,
            _ => return None,
        })
    }
}

/// The token endpoint authentication method for a client with (or without) a secret: the
/// one its registration settled on when the server supports it; else, with a secret,
/// `client_secret_basic` then `client_secret_post` among those the server lists (RFC 8414's
/// default list is `client_secret_basic`); else `none`.
pub(crate) fn select_token_endpoint_auth(
    registered: Option<&str>,
    has_secret: bool,
    supported: Option<&[String]>,
) -> TokenEndpointAuth {
    let default = [String::from("client_secret_basic")];
    let supported = supported.unwrap_or(&default);
    let offered = |m: TokenEndpointAuth| supported.iter().any(|s| s == m.as_str());
    if let Some(method) = registered.and_then(TokenEndpointAuth::parse) {
        let usable = match method {
            TokenEndpointAuth::ClientSecretBasic | TokenEndpointAuth::ClientSecretPost => {
                has_secret
            }
            TokenEndpointAuth::None => true,
            TokenEndpointAuth::PrivateKeyJwt => false,
        };
        if usable {
            return method;
        }
    }
    if has_secret {
        for method in [
            TokenEndpointAuth::ClientSecretBasic,
            TokenEndpointAuth::ClientSecretPost,
        ] {
            if offered(method) {
                return method;
            }
        }
        if !offered(TokenEndpointAuth::None) {
            return TokenEndpointAuth::ClientSecretBasic;
        }
    }
    TokenEndpointAuth::None
}

/// `native` when every redirect URI stays on this machine (loopback http, or a private-use
/// scheme), `web` otherwise (OpenID Connect registration's `application_type`, which MCP
/// clients must send).
pub(crate) fn application_type(redirect_uris: &[String]) -> &'static str {
    let native = redirect_uris.iter().all(|uri| match Url::parse(uri) {
        Ok(url) if url.scheme() == "http" => is_secure_url(&url),
        Ok(url) => url.scheme() != "https",
        Err(_) => false,
    });
    if native {
        "native"
    } else {
        "web"
    }
}

/// The body of a dynamic client registration request (RFC 7591) for a public client using
/// the authorization code grant with refresh tokens.
pub(crate) fn dynamic_registration_request(
    client_name: &str,
    redirect_uris: &[String],
    scope: Option<&str>,
) -> Value {
    let mut body = json!({
        "client_name": client_name,
        "redirect_uris": redirect_uris,
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": application_type(redirect_uris),
    });
    if let Some(scope) = scope {
        body["scope"] = Value::String(scope.to_owned());
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn registration_preference() {
        let endpoint = Some("https://as.example/register");
        assert_eq!(
            choose_registration(true, true, true, endpoint),
            Registration::PreRegistered
        );
        assert_eq!(
            choose_registration(false, true, true, endpoint),
            Registration::ClientIdMetadataDocument
        );
        assert_eq!(
            choose_registration(false, true, false, endpoint),
            Registration::Dynamic("https://as.example/register".into())
        );
        assert_eq!(
            choose_registration(false, false, true, endpoint),
            Registration::Dynamic("https://as.example/register".into())
        );
        assert_eq!(
            choose_registration(false, true, false, None),
            Registration::Unavailable
        );
    }

    #[test]
    fn auth_method_selection() {
        use TokenEndpointAuth::{ClientSecretBasic, ClientSecretPost};
        const NONE: TokenEndpointAuth = TokenEndpointAuth::None;
        let basic = v(&["client_secret_basic"]);
        let post = v(&["client_secret_post"]);
        let none = v(&["none"]);
        assert_eq!(
            select_token_endpoint_auth(Some("client_secret_post"), true, Some(&post)),
            ClientSecretPost
        );
        assert_eq!(
            select_token_endpoint_auth(Option::<&str>::None, true, Some(&basic)),
            ClientSecretBasic
        );
        assert_eq!(
            select_token_endpoint_auth(Option::<&str>::None, true, Some(&post)),
            ClientSecretPost
        );
        assert_eq!(
            select_token_endpoint_auth(Some("none"), false, Some(&none)),
            NONE
        );
        assert_eq!(
            select_token_endpoint_auth(Option::<&str>::None, false, Some(&basic)),
            NONE
        );
        // A secret the server has no use for: the public method it lists.
        assert_eq!(
            select_token_endpoint_auth(Option::<&str>::None, true, Some(&none)),
            NONE
        );
        // No list: RFC 8414's default.
        assert_eq!(
            select_token_endpoint_auth(Option::<&str>::None, true, Option::<&[String]>::None),
            ClientSecretBasic
        );
        // A registered secret method without a secret cannot be used.
        assert_eq!(
            select_token_endpoint_auth(Some("client_secret_basic"), false, Some(&basic)),
            NONE
        );
    }

    #[test]
    fn a_redirect_uri_per_authorization_server() {
        let base = "http://127.0.0.1:8976/callback";
        let a = redirect_uri_for(base, "https://as-a.example");
        let b = redirect_uri_for(base, "https://as-b.example");
        assert_ne!(a, b);
        assert!(a.starts_with("http://127.0.0.1:8976/callback/as-"), "{a}");
        assert_eq!(a, redirect_uri_for(base, "https://as-a.example"), "stable");
        assert_eq!(
            redirect_uri_for("http://127.0.0.1:8976/callback/", "https://as-a.example"),
            a
        );
        assert!(
            redirect_uri_for("com.example.app:/cb", "https://as-a.example")
                .starts_with("com.example.app:/cb/as-")
        );
        assert_eq!(redirect_uri_for("app:cb", "https://as-a.example"), "app:cb");
        assert!(check_redirect_uri(&a).is_ok());
    }

    #[test]
    fn redirect_uris_and_metadata_document_urls_are_checked() {
        for ok in [
            "https://app.example/cb",
            "http://127.0.0.1:3/cb",
            "http://localhost/cb",
            "http://[::1]:8/cb",
            "com.example.app:/oauth2redirect",
        ] {
            assert!(check_redirect_uri(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://app.example/cb",
            "https://app.example/cb#x",
            "javascript:alert(1)",
            "data:text/html,x",
            "file:///tmp/cb",
            "not a url",
        ] {
            assert!(
                matches!(check_redirect_uri(bad), Err(OAuthError::Config(_))),
                "{bad}"
            );
        }
        assert!(check_client_metadata_document("https://app.example/oauth/client.json").is_ok());
        for bad in [
            "http://app.example/client.json",
            "https://app.example",
            "https://app.example/",
            "https://app.example/client.json#x",
            "https://user:pw@app.example/client.json",
            "https://app.example/a/../client.json",
            "https://app.example/./client.json",
            "https://app.example/a/%2E%2e/client.json",
            "not a url",
        ] {
            assert!(
                matches!(
                    check_client_metadata_document(bad),
                    Err(OAuthError::Config(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn application_types_and_body() {
        assert_eq!(
            application_type(&v(&["http://127.0.0.1:3/cb", "http://localhost/cb"])),
            "native"
        );
        assert_eq!(application_type(&v(&["com.example.app:/cb"])), "native");
        assert_eq!(application_type(&v(&["https://app.example/cb"])), "web");
        assert_eq!(application_type(&v(&["http://app.example/cb"])), "web");
        let body =
            dynamic_registration_request("c", &v(&["http://localhost:3000/callback"]), Some("a b"));
        assert_eq!(body["application_type"], "native");
        assert_eq!(body["grant_types"][1], "refresh_token");
        assert_eq!(body["scope"], "a b");
        assert!(dynamic_registration_request("c", &[], None)
            .get("scope")
            .is_none());
    }
}
