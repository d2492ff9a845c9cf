//! The metadata documents of RFC 9728 (protected resource) and RFC 8414 / OpenID Connect
//! Discovery (authorization server), where they are looked for, and the checks made on them.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use url::Url;

use super::trust::{shown, shown_url};
use super::{OAuthError, UrlPolicy};

/// A protected resource metadata document (RFC 9728): which authorization servers issue
/// tokens for the MCP server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProtectedResourceMetadata {
    /// The resource identifier, kept exactly as published: it is what the `resource`
    /// parameter of authorization and token requests carries.
    pub resource: String,
    /// Issuer identifiers of the authorization servers, in the server's order.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// The scopes the resource uses, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes_supported: Option<Vec<String>>,
    /// Every other member, as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An authorization server metadata document (RFC 8414, or OpenID Connect Discovery).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuthorizationServerMetadata {
    /// The issuer identifier; must be exactly the one the document's URL was built from.
    pub issuer: String,
    /// Where the user authorizes (authorization code grant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_endpoint: Option<String>,
    /// Where codes, refresh tokens and client credentials are exchanged for tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    /// Dynamic client registration (RFC 7591).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration_endpoint: Option<String>,
    /// Scopes the server knows; `offline_access` here allows asking for a refresh token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes_supported: Option<Vec<String>>,
    /// Grant types the server supports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_types_supported: Option<Vec<String>>,
    /// PKCE methods; without `S256` an MCP client does not proceed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// Client authentication methods at the token endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// Signing algorithms accepted for `private_key_jwt` assertions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_signing_alg_values_supported: Option<Vec<String>>,
    /// RFC 9207: the server puts `iss` in every authorization response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_response_iss_parameter_supported: Option<bool>,
    /// The server accepts a client ID metadata document URL as `client_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id_metadata_document_supported: Option<bool>,
    /// The algorithms the server accepts DPoP proofs signed with (RFC 9449 §5.1): it
    /// issues DPoP-bound tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop_signing_alg_values_supported: Option<Vec<String>>,
    /// Every other member, as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AuthorizationServerMetadata {
    /// The RFC 8414 §3.3 check: the document's `issuer` is identical (simple string
    /// comparison, no normalization) to the issuer its well-known URL was built from, and
    /// `policy` allows the endpoints it names.
    pub fn validate(&self, expected_issuer: &str, policy: &UrlPolicy) -> Result<(), OAuthError> {
        if self.issuer != expected_issuer {
            return Err(OAuthError::IssuerMismatch {
                expected: expected_issuer.to_owned(),
                found: self.issuer.clone(),
            });
        }
        for endpoint in [
            &self.authorization_endpoint,
            &self.token_endpoint,
            &self.registration_endpoint,
        ]
        .into_iter()
        .flatten()
        {
            policy.check(endpoint)?;
        }
        Ok(())
    }

    /// The check for a 2025-03-26 server's metadata, found under its authorization base URL
    /// (the MCP server's origin, a value the client derived itself rather than one a server
    /// published): the document's `issuer` is that origin, with or without a terminating `/`
    /// (the one normalization allowed, since the origin has no canonical spelling of its
    /// empty path). The document's own `issuer` is then the one recorded for RFC 9207.
    pub fn validate_legacy(&self, base: &str, policy: &UrlPolicy) -> Result<(), OAuthError> {
        let base = base.trim_end_matches('/');
        match self.issuer.strip_prefix(base) {
            Some("") | Some("/") => self.validate(&self.issuer, policy),
            _ => Err(OAuthError::IssuerMismatch {
                expected: base.to_owned(),
                found: self.issuer.clone(),
            }),
        }
    }

    /// Whether the server advertises PKCE with `S256`: the only evidence of PKCE support
    /// an MCP client may rely on.
    pub fn supports_pkce_s256(&self) -> bool {
        has(&self.code_challenge_methods_supported, "S256")
    }

    /// Whether the server accepts DPoP proofs signed with `algorithm`.
    pub fn supports_dpop(&self, algorithm: &str) -> bool {
        has(&self.dpop_signing_alg_values_supported, algorithm)
    }

    /// Whether `scope` is among `scopes_supported`.
    pub fn supports_scope(&self, scope: &str) -> bool {
        has(&self.scopes_supported, scope)
    }

    /// Whether the server accepts a client ID metadata document URL as `client_id`.
    pub fn supports_client_id_metadata_documents(&self) -> bool {
        self.client_id_metadata_document_supported == Some(true)
    }

    /// Whether the server promised `iss` in every authorization response (RFC 9207).
    pub fn iss_parameter_supported(&self) -> bool {
        self.authorization_response_iss_parameter_supported == Some(true)
    }
}

fn has(list: &Option<Vec<String>>, item: &str) -> bool {
    list.as_deref()
        .unwrap_or_default()
        .iter()
        .any(|s| s == item)
}

/// Where the protected resource metadata of the MCP server at `server` may be, in the order
/// the specification has clients try them when the 401 names none: the well-known URI with
/// the endpoint's path inserted, then the root one. A server at the root has only the latter.
pub(crate) fn protected_resource_metadata_urls(server: &Url) -> Vec<Url> {
    let mut urls = Vec::with_capacity(2);
    let path = server.path().trim_end_matches('/');
    if !path.is_empty() {
        if let Ok(url) = with_path(
            server,
            &format!("/.well-known/oauth-protected-resource{path}"),
        ) {
            urls.push(url);
        }
    }
    if let Ok(url) = with_path(server, "/.well-known/oauth-protected-resource") {
        urls.push(url);
    }
    urls
}

/// Where an authorization server's metadata may be, in the specification's order: for an
/// issuer with a path, RFC 8414 and OpenID Connect with the path inserted after the
/// well-known prefix, then OpenID Connect appended to the path; for one without, RFC 8414
/// then OpenID Connect. A terminating `/` of the issuer's path is dropped first (RFC 8414
/// §3.1). The issuer must be a URL `policy` allows, without query or fragment.
pub(crate) fn authorization_server_metadata_urls(
    issuer: &str,
    policy: &UrlPolicy,
) -> Result<Vec<Url>, OAuthError> {
    let url = policy.check(issuer)?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err(OAuthError::Discovery(format!(
            "issuer {} has a query or fragment",
            shown(issuer)
        )));
    }
    let path = url.path().trim_end_matches('/');
    let candidates = if path.is_empty() {
        vec![
            "/.well-known/oauth-authorization-server".to_owned(),
            "/.well-known/openid-configuration".to_owned(),
        ]
    } else {
        vec![
            format!("/.well-known/oauth-authorization-server{path}"),
            format!("/.well-known/openid-configuration{path}"),
            format!("{path}/.well-known/openid-configuration"),
        ]
    };
    candidates
        .iter()
        .map(|p| with_path(&url, p).map_err(|e| OAuthError::Discovery(e.to_string())))
        .collect()
}

/// The 2025-03-26 revision's authorization base URL: the MCP server's URL with its path
/// discarded. Servers of that revision publish no protected resource metadata; their
/// authorization server metadata, if any, is under this URL.
pub(crate) fn legacy_authorization_base(server: &Url) -> String {
    server.origin().ascii_serialization()
}

/// The 2025-03-26 revision's default endpoints, for a server with neither protected resource
/// nor authorization server metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LegacyEndpoints {
    /// `<base>/authorize`.
    pub authorization_endpoint: String,
    /// `<base>/token`.
    pub token_endpoint: String,
    /// `<base>/register`.
    pub registration_endpoint: String,
}

/// [`LegacyEndpoints`] under [`legacy_authorization_base`].
pub(crate) fn legacy_endpoints(server: &Url) -> LegacyEndpoints {
    let base = legacy_authorization_base(server);
    LegacyEndpoints {
        authorization_endpoint: format!("{base}/authorize"),
        token_endpoint: format!("{base}/token"),
        registration_endpoint: format!("{base}/register"),
    }
}

/// Whether the protected resource metadata's `resource` may speak for the MCP server at
/// `server`: same scheme, host and port, and its path is the server's path or a parent of it
/// on a segment boundary (root metadata of a path-bearing endpoint names the origin). Any
/// other resource is refused: its authorization servers are not this server's.
pub(crate) fn check_resource(resource: &str, server: &Url) -> Result<(), OAuthError> {
    // The server's URL as configured may carry credentials (user info, query): not shown.
    let mismatch = || OAuthError::ResourceMismatch {
        resource: resource.to_owned(),
        server: shown_url(server),
    };
    let parsed = Url::parse(resource).map_err(|_| mismatch())?;
    if parsed.fragment().is_some() || parsed.origin() != server.origin() {
        return Err(mismatch());
    }
    let base = parsed.path().trim_end_matches('/');
    let path = server.path().trim_end_matches('/');
    let within =
        path == base || (path.starts_with(base) && path.as_bytes().get(base.len()) == Some(&b'/'));
    if within {
        Ok(())
    } else {
        Err(mismatch())
    }
}

/// Whether `url` may carry OAuth traffic: `https`, or `http` to a loopback host (OAuth 2.1
/// §1.5's exception).
pub(crate) fn is_secure_url(url: &Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => match url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
            None => false,
        },
        _ => false,
    }
}

fn with_path(base: &Url, path: &str) -> Result<Url, url::ParseError> {
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    url.set_path(path);
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn strs(urls: Vec<Url>) -> Vec<String> {
        urls.into_iter().map(String::from).collect()
    }

    /// The policy of a remote MCP endpoint, and of one on this machine.
    fn remote() -> UrlPolicy {
        UrlPolicy::for_server(&u("https://rs.example/mcp"))
    }

    fn local() -> UrlPolicy {
        UrlPolicy::for_server(&u("http://127.0.0.1:3000/mcp"))
    }

    #[test]
    fn protected_resource_metadata_path_then_root() {
        assert_eq!(
            strs(protected_resource_metadata_urls(&u(
                "https://rs.example/public/mcp?x=1"
            ))),
            [
                "https://rs.example/.well-known/oauth-protected-resource/public/mcp",
                "https://rs.example/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(
            strs(protected_resource_metadata_urls(&u("https://rs.example/"))),
            ["https://rs.example/.well-known/oauth-protected-resource"]
        );
    }

    #[test]
    fn authorization_server_metadata_orders() {
        assert_eq!(
            strs(
                authorization_server_metadata_urls("https://as.example/tenant1", &remote())
                    .unwrap()
            ),
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/.well-known/openid-configuration/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration",
            ]
        );
        for issuer in ["https://as.example", "https://as.example/"] {
            assert_eq!(
                strs(authorization_server_metadata_urls(issuer, &remote()).unwrap()),
                [
                    "https://as.example/.well-known/oauth-authorization-server",
                    "https://as.example/.well-known/openid-configuration",
                ]
            );
        }
        // A terminating slash of the path is not part of the insertion.
        assert_eq!(
            strs(authorization_server_metadata_urls("https://as.example/t/", &remote()).unwrap())
                [0],
            "https://as.example/.well-known/oauth-authorization-server/t"
        );
        assert!(authorization_server_metadata_urls("http://as.example", &remote()).is_err());
        assert!(authorization_server_metadata_urls("https://as.example?q=1", &remote()).is_err());
        assert!(authorization_server_metadata_urls("http://127.0.0.1:9/x", &local()).is_ok());
        // A remote endpoint's authorization server is never on this machine.
        assert!(matches!(
            authorization_server_metadata_urls("http://127.0.0.1:9/x", &remote()),
            Err(OAuthError::LoopbackUrl(_))
        ));
    }

    #[test]
    fn issuer_is_compared_exactly() {
        let doc: AuthorizationServerMetadata = serde_json::from_value(serde_json::json!({
            "issuer": "https://as.example",
            "token_endpoint": "https://as.example/token",
            "code_challenge_methods_supported": ["S256"],
            "unknown": 1,
        }))
        .unwrap();
        assert!(doc.validate("https://as.example", &remote()).is_ok());
        for other in [
            "https://as.example/",
            "HTTPS://as.example",
            "https://AS.example",
        ] {
            assert!(matches!(
                doc.validate(other, &remote()),
                Err(OAuthError::IssuerMismatch { .. })
            ));
        }
        assert!(doc.supports_pkce_s256());
        assert_eq!(doc.extra["unknown"], 1);
        let mut insecure = doc.clone();
        insecure.token_endpoint = Some("http://as.example/token".into());
        assert!(matches!(
            insecure.validate("https://as.example", &remote()),
            Err(OAuthError::InsecureUrl(_))
        ));
        // Endpoints on this machine, named for a remote endpoint: SSRF, refused.
        let mut local_sink = doc.clone();
        local_sink.registration_endpoint = Some("http://127.0.0.1:6379/register".into());
        assert!(matches!(
            local_sink.validate("https://as.example", &remote()),
            Err(OAuthError::LoopbackUrl(_))
        ));
        assert!(local_sink.validate("https://as.example", &local()).is_ok());
    }

    #[test]
    fn a_legacy_issuer_may_end_with_a_slash() {
        let doc = |issuer: &str| -> AuthorizationServerMetadata {
            serde_json::from_value(serde_json::json!({"issuer": issuer})).unwrap()
        };
        for ok in ["https://rs.example", "https://rs.example/"] {
            assert!(
                doc(ok)
                    .validate_legacy("https://rs.example", &remote())
                    .is_ok(),
                "{ok}"
            );
        }
        for bad in [
            "https://rs.example//",
            "https://rs.example/x",
            "https://rs.example.evil",
            "https://other.example",
        ] {
            assert!(
                doc(bad)
                    .validate_legacy("https://rs.example", &remote())
                    .is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn resource_must_be_the_server_or_a_parent() {
        let server = u("http://localhost:3000/mcp");
        for ok in [
            "http://localhost:3000/mcp",
            "http://localhost:3000/mcp/",
            "http://localhost:3000",
            "http://localhost:3000/",
            "HTTP://LOCALHOST:3000/mcp",
        ] {
            assert!(check_resource(ok, &server).is_ok(), "{ok}");
        }
        for bad in [
            "https://evil.example.com/mcp",
            "http://localhost:3001/mcp",
            "https://localhost:3000/mcp",
            "http://localhost:3000/mc",
            "http://localhost:3000/mcp/sub",
            "http://localhost:3000/other",
            "http://localhost:3000/mcp#frag",
            "not a url",
        ] {
            assert!(
                matches!(
                    check_resource(bad, &server),
                    Err(OAuthError::ResourceMismatch { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn legacy_endpoints_at_the_origin() {
        let e = legacy_endpoints(&u("http://localhost:8/some/mcp"));
        assert_eq!(e.authorization_endpoint, "http://localhost:8/authorize");
        assert_eq!(e.token_endpoint, "http://localhost:8/token");
        assert_eq!(e.registration_endpoint, "http://localhost:8/register");
    }

    #[test]
    fn secure_urls() {
        for ok in [
            "https://x.example/a",
            "http://localhost:1/",
            "http://127.0.0.7/",
            "http://[::1]:8/",
        ] {
            assert!(is_secure_url(&u(ok)), "{ok}");
        }
        for bad in ["http://x.example/", "http://10.0.0.1/", "ftp://x.example/"] {
            assert!(!is_secure_url(&u(bad)), "{bad}");
        }
    }
}
