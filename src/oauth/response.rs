//! The checks on an authorization response (the redirect back to the client): RFC 9207's
//! `iss`, then `state`, then the code or the error.

use url::Url;

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
}

impl<'a> ExpectedResponse<'a> {
    /// What to check a response against.
    pub fn new(state: &'a str, issuer: &'a str, iss_parameter_supported: bool) -> Self {
        ExpectedResponse {
            state,
            issuer,
            iss_parameter_supported,
        }
    }
}

/// The authorization code of the redirect `response`, once it passed every check, in this
/// order:
///
/// 1. `iss` (RFC 9207 §2.4 as the specification profiles it): when present it must equal the
///    recorded issuer by simple string comparison, whether or not the server advertised it
///    (no normalization: a trailing `/` is a mismatch); when absent the response is refused
///    only if the server advertised `authorization_response_iss_parameter_supported`. A
///    response failing here is refused without reading its `error`.
/// 2. `state` must be the one sent.
/// 3. An `error` is reported; otherwise the `code` is returned.
pub fn authorization_code(
    response: &Url,
    expected: &ExpectedResponse<'_>,
) -> Result<String, OAuthError> {
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

    fn urlencode(s: &str) -> String {
        url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
    }
}
