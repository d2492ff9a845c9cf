//! DPoP (RFC 9449), the parts that need no key and no network: what a proof claims, the
//! `htu` and `ath` values, and how a server asks for a nonce.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::Serialize;

/// The response header a server hands its nonce out in (RFC 9449 §8, §9).
pub(crate) const DPOP_NONCE_HEADER: &str = "DPoP-Nonce";

/// The error code of a server that wants a proof carrying its nonce.
pub(crate) const USE_DPOP_NONCE: &str = "use_dpop_nonce";

/// The `token_type` of a DPoP-bound access token, and the `Authorization` scheme it is
/// presented with.
pub const DPOP_TOKEN_TYPE: &str = "DPoP";

/// The claims of one DPoP proof (RFC 9449 §4.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DpopClaims {
    /// Unique per proof, so that a server can refuse a replayed one.
    pub jti: String,
    /// The HTTP method of the request.
    pub htm: String,
    /// The request's URL without user info, query and fragment.
    pub htu: String,
    /// When the proof was made, in seconds since the Unix epoch.
    pub iat: u64,
    /// The base64url SHA-256 of the access token the request presents; absent on token
    /// requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ath: Option<String>,
    /// The nonce the server handed out, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
}

impl DpopClaims {
    /// The claims of a proof for `method` `url`, made at `iat` with identifier `jti`, for a
    /// request presenting `access_token` (none for a token request) with the server's
    /// `nonce`, if it gave one.
    pub fn new(
        jti: impl Into<String>,
        method: &str,
        url: &url::Url,
        iat: u64,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> Self {
        DpopClaims {
            jti: jti.into(),
            htm: method.to_ascii_uppercase(),
            htu: htu(url),
            iat,
            ath: access_token.map(ath),
            nonce: nonce.map(str::to_owned),
        }
    }
}

/// The `htu` of a request to `url`: the URL without its query and fragment, which a proof
/// must not carry (§4.2), and without user info, which is no part of the HTTP target URI
/// either: neither leaks into a server's proof logs or replay cache.
pub(crate) fn htu(url: &url::Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.set_fragment(None);
    // Fails only for URLs that cannot have user info, which then have none.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.into()
}

/// The `ath` of a proof presenting `access_token`: the base64url SHA-256 of its ASCII bytes.
pub(crate) fn ath(access_token: &str) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, access_token.as_bytes());
    URL_SAFE_NO_PAD.encode(digest.as_ref())
}

/// Where a server's nonce applies: its origin (scheme, host, port). An authorization server
/// and a resource server each have their own.
pub(crate) fn nonce_scope(url: &url::Url) -> String {
    url.origin().ascii_serialization()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn htu_drops_query_and_fragment() {
        let url = url::Url::parse("https://rs.example:8443/mcp?session=1#frag").unwrap();
        assert_eq!(htu(&url), "https://rs.example:8443/mcp");
        let url = url::Url::parse("https://user:hunter2@rs.example/mcp").unwrap();
        assert_eq!(htu(&url), "https://rs.example/mcp");
    }

    #[test]
    fn ath_is_the_rfc_example() {
        // RFC 9449 §7.1's token and its `ath`.
        assert_eq!(
            ath("Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"),
            "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo"
        );
    }

    #[test]
    fn claims_serialize_only_what_applies() {
        let url = url::Url::parse("https://as.example/token?x=1").unwrap();
        let claims = DpopClaims::new("id", "post", &url, 7, None, None);
        let json = serde_json::to_value(&claims).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"jti": "id", "htm": "POST", "htu": "https://as.example/token", "iat": 7})
        );
        let claims = DpopClaims::new("id", "GET", &url, 7, Some("t"), Some("n"));
        let json = serde_json::to_value(&claims).unwrap();
        assert_eq!(json["ath"], ath("t"));
        assert_eq!(json["nonce"], "n");
    }

    #[test]
    fn nonces_are_per_origin() {
        let a = url::Url::parse("http://localhost:1/token").unwrap();
        let b = url::Url::parse("http://localhost:2/mcp").unwrap();
        assert_ne!(nonce_scope(&a), nonce_scope(&b));
        assert_eq!(nonce_scope(&b), "http://localhost:2");
    }
}
