//! The checks on an authorization response (the redirect back to the client): where it
//! arrived, RFC 9207's `iss`, then `state`, then the code or the error.

use url::Url;

use super::trust::{shown, shown_url};
use super::OAuthError;

/// What the client recorded before sending the user to the authorization endpoint.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ExpectedResponse<'a> {
    /// The `state` sent with the request.
    pub state: &'a str,
    /// The issuer of the authorization server's validated metadata (for a 2025-03-26 server
    /// without metadata, its authorization base URL).
    pub issuer: &'a str,
    /// The metadata's `authorization_response_iss_parameter_supported`.
    pub iss_parameter_supported: bool,
    /// The redirect URI the request named: the response must have arrived there (scheme,
    /// host, port and path). `None`: not checked.
    pub redirect_uri: Option<&'a str>,
}

impl<'a> ExpectedResponse<'a> {
    /// What to check a response against.
    pub fn new(state: &'a str, issuer: &'a str, iss_parameter_supported: bool) -> Self {
        ExpectedResponse {
            state,
            issuer,
            iss_parameter_supported,
            redirect_uri: None,
        }
    }

    /// The response must have arrived at `redirect_uri`, the one the request named: with a
    /// redirect URI per authorization server, an answer that another authorization server
    /// sent to its own is refused (the mix-up defence of RFC 9700 §4.4.2 for servers without
    /// `iss`).
    pub fn redirect_uri(mut self, redirect_uri: &'a str) -> Self {
        self.redirect_uri = Some(redirect_uri);
        self
    }
}

/// The authorization code of the redirect `response`, once it passed every check, in this
/// order:
///
/// 0. When [`ExpectedResponse::redirect_uri`] is set, the response arrived there: same
///    scheme, host, port and path. Nothing else in it is read otherwise.
/// 1. `iss` (RFC 9207 §2.4 as the specification profiles it): when present it must equal the
///    recorded issuer by simple string comparison, whether or not the server advertised it
///    (no normalization: a trailing `/` is a mismatch); when absent the response is refused
///    only if the server advertised `authorization_response_iss_parameter_supported`. A
///    response failing here is refused without reading its `error`.
/// 2. `state` must be the one sent.
/// 3. An `error` is reported; otherwise the `code` is returned.
pub(crate) fn authorization_code(
    response: &Url,
    expected: &ExpectedResponse<'_>,
) -> Result<String, OAuthError> {
    if let Some(redirect_uri) = expected.redirect_uri {
        let arrived_there = Url::parse(redirect_uri).is_ok_and(|r| same_endpoint(&r, response));
        if !arrived_there {
            return Err(OAuthError::AuthorizationResponse(format!(
                "the response arrived at {}, not at this request's redirect URI {}: another authorization server's answer",
                shown_url(response),
                shown(redirect_uri)
            )));
        }
    }
    let mut iss = None;
    let mut state = None;
    let mut code = None;
    let mut error = None;
    let mut description = None;
    for (name, value) in response.query_pairs() {
        let slot = match name.as_ref() {
            "iss" => &mut iss,
            "state" => &mut state,
            "code" => &mut code,
            "error" => &mut error,
            "error_description" => &mut description,
            _ => continue,
        };
        if slot.is_some() {
            // A repeated parameter has no single meaning; refuse rather than pick one.
            return Err(OAuthError::AuthorizationResponse(format!(
                "parameter {name} appears twice"
            )));
        }
        *slot = Some(value.into_owned());
    }
    match iss {
        Some(iss) if iss != expected.issuer => {
            return Err(OAuthError::AuthorizationResponse(format!(
                "iss {iss:?} is not the authorization server's issuer {:?}",
                expected.issuer
            )))
        }
        None if expected.iss_parameter_supported => {
            return Err(OAuthError::AuthorizationResponse(
                "the authorization server advertises iss but the response has none".into(),
            ))
        }
        _ => {}
    }
    if state.as_deref() != Some(expected.state) {
        return Err(OAuthError::AuthorizationResponse(
            "state does not match the request's".into(),
        ));
    }
    if let Some(error) = error {
        let description = description.map(|d| format!(": {d}")).unwrap_or_default();
        return Err(OAuthError::AuthorizationResponse(format!(
            "{error}{description}"
        )));
    }
    code.filter(|c| !c.is_empty())
        .ok_or_else(|| OAuthError::AuthorizationResponse("no code in the response".into()))
}

/// Whether `a` and `b` are the same endpoint: scheme, host, port and path.
pub(crate) fn same_endpoint(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
        && a.path() == b.path()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUER: &str = "https://as.example";

    fn check(query: &str, supported: bool) -> Result<String, OAuthError> {
        let url = Url::parse(&format!("http://127.0.0.1/cb?{query}")).unwrap();
        authorization_code(&url, &ExpectedResponse::new("s1", ISSUER, supported))
    }

    #[test]
    fn the_rfc_9207_table() {
        // advertised, present and equal
        assert_eq!(
            check("code=c&state=s1&iss=https%3A%2F%2Fas.example", true).unwrap(),
            "c"
        );
        // advertised, absent
        assert!(check("code=c&state=s1", true).is_err());
        // not advertised, present and different
        assert!(check("code=c&state=s1&iss=https://evil.example", false).is_err());
        // not advertised, present and equal
        assert_eq!(
            check("code=c&state=s1&iss=https://as.example", false).unwrap(),
            "c"
        );
        // not advertised, absent
        assert_eq!(check("code=c&state=s1", false).unwrap(), "c");
        // no normalization
        for variant in [
            "https://as.example/",
            "HTTPS://as.example",
            "https://as.example:443",
        ] {
            let q = format!("code=c&state=s1&iss={}", urlencode(variant));
            assert!(check(&q, true).is_err(), "{variant}");
        }
    }

    #[test]
    fn state_error_and_code() {
        assert!(check("code=c&state=other", false).is_err());
        assert!(check("code=c", false).is_err());
        let e = check("error=access_denied&error_description=no&state=s1", false).unwrap_err();
        assert!(e.to_string().contains("access_denied: no"));
        // An error from the wrong issuer is not acted on.
        let e = check(
            "error=access_denied&state=s1&iss=https://evil.example",
            false,
        )
        .unwrap_err();
        assert!(!e.to_string().contains("access_denied"));
        assert!(check("state=s1", false).is_err());
        assert!(check("code=a&code=b&state=s1", false).is_err());
    }

    #[test]
    fn the_response_must_arrive_at_the_requests_redirect_uri() {
        let mine = "http://127.0.0.1:9/callback/as-1";
        let expected = ExpectedResponse::new("s1", ISSUER, false).redirect_uri(mine);
        let at = |url: &str| authorization_code(&Url::parse(url).unwrap(), &expected);
        assert_eq!(at(&format!("{mine}?code=c&state=s1")).unwrap(), "c");
        // Another authorization server's redirect URI: refused before the code is read,
        // whatever the state says.
        for other in [
            "http://127.0.0.1:9/callback/as-2?code=c&state=s1",
            "http://127.0.0.1:9/callback?code=c&state=s1",
            "http://127.0.0.1:10/callback/as-1?code=c&state=s1",
            "https://127.0.0.1:9/callback/as-1?code=c&state=s1",
            "http://localhost:9/callback/as-1?code=c&state=s1",
        ] {
            let err = at(other).unwrap_err();
            assert!(
                matches!(err, OAuthError::AuthorizationResponse(ref m) if m.contains("redirect URI")),
                "{other}: {err}"
            );
        }
    }

    fn urlencode(s: &str) -> String {
        url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
    }
}
