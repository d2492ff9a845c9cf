//! What a server says when it refuses credentials: the `WWW-Authenticate` challenge of a 401
//! (or of a 403 asking for more scope), read into [`AuthChallenge`].
//!
//! Pure parsing, no I/O: the driver attaches the challenge to the error of a call whose
//! credentials were refused ([`Error::auth_challenge`](crate::Error::auth_challenge)), and a
//! token provider receives it when asked for a fresh token.

use std::fmt;

/// A server's refusal of the credentials, as its `WWW-Authenticate` header describes it
/// (RFC 6750 and RFC 9728's `resource_metadata`).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthChallenge {
    /// The HTTP status: 401, or 403 for `insufficient_scope`.
    pub status: u16,
    /// The challenge's scheme, e.g. `Bearer`.
    pub scheme: Option<String>,
    /// `error`, e.g. `invalid_token` or `insufficient_scope`.
    pub error: Option<String>,
    /// `error_description`.
    pub error_description: Option<String>,
    /// `scope`: the scopes the server asks for, space-separated.
    pub scope: Option<String>,
    /// `resource_metadata`: the URL of the server's OAuth protected-resource metadata, where
    /// an OAuth client learns which authorization server to ask.
    pub resource_metadata: Option<String>,
    /// `realm`.
    pub realm: Option<String>,
    /// The whole header value, when there was one.
    pub header: Option<String>,
}

impl AuthChallenge {
    /// The challenge of a response refusing the credentials: any 401, and a 403 whose
    /// `WWW-Authenticate` asks for more scope (a plain 403 is an ordinary refusal); `None`
    /// for any other response. Every `WWW-Authenticate` field is read: a server may send each
    /// challenge in a field of its own (RFC 9110 §11.6.1), and they are one list.
    pub fn from_response(status: u16, headers: &http::HeaderMap) -> Option<Self> {
        if status != 401 && status != 403 {
            return None;
        }
        let mut fields = headers
            .get_all(http::header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok());
        let first = fields.next();
        let joined = match fields.next() {
            None => first.map(std::borrow::Cow::Borrowed),
            Some(second) => {
                let mut all = [first.unwrap_or_default(), second].join(", ");
                for field in fields {
                    all.push_str(", ");
                    all.push_str(field);
                }
                Some(std::borrow::Cow::Owned(all))
            }
        };
        let header = joined.as_deref();
        match status {
            401 => Some(AuthChallenge::parse(status, header)),
            403 if header.is_some_and(|h| h.contains("insufficient_scope")) => {
                Some(AuthChallenge::parse(status, header))
            }
            _ => None,
        }
    }

    /// Reads the challenge of a refused response: `status` and its `WWW-Authenticate` value,
    /// if any (several header fields joined with `, `). With several challenges in the
    /// value, the one read is the first `Bearer` or `DPoP` challenge carrying an `error` (what
    /// went wrong with this request: a DPoP server wanting its nonce names it in its `DPoP`
    /// challenge, beside a plain `Bearer` one), else the first `Bearer` or `DPoP` one, else
    /// the first; `resource_metadata` and `scope` missing from it are taken from the other
    /// `Bearer` or `DPoP` challenges.
    pub fn parse(status: u16, www_authenticate: Option<&str>) -> Self {
        let mut challenge = AuthChallenge {
            status,
            scheme: None,
            error: None,
            error_description: None,
            scope: None,
            resource_metadata: None,
            realm: None,
            header: www_authenticate.map(str::to_owned),
        };
        let Some(value) = www_authenticate else {
            return challenge;
        };
        let challenges = split_challenges(value);
        let oauth = |scheme: &str| {
            scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("dpop")
        };
        let chosen = challenges
            .iter()
            .position(|(scheme, params)| oauth(scheme) && param(params, "error").is_some())
            .or_else(|| challenges.iter().position(|(scheme, _)| oauth(scheme)))
            .or_else(|| (!challenges.is_empty()).then_some(0));
        let Some(chosen) = chosen else {
            return challenge;
        };
        let (scheme, params) = &challenges[chosen];
        challenge.scheme = Some(scheme.clone());
        challenge.error = param(params, "error");
        challenge.error_description = param(params, "error_description");
        challenge.scope = param(params, "scope");
        challenge.resource_metadata = param(params, "resource_metadata");
        challenge.realm = param(params, "realm");
        let others = challenges
            .iter()
            .enumerate()
            .filter(|&(i, (scheme, _))| i != chosen && oauth(scheme))
            .map(|(_, (_, params))| params);
        for params in others {
            if challenge.resource_metadata.is_none() {
                challenge.resource_metadata = param(params, "resource_metadata");
            }
            if challenge.scope.is_none() {
                challenge.scope = param(params, "scope");
            }
        }
        challenge
    }

    /// The scopes of [`AuthChallenge::scope`], one by one.
    pub fn scopes(&self) -> impl Iterator<Item = &str> {
        self.scope.as_deref().unwrap_or_default().split_whitespace()
    }
}

impl fmt::Debug for AuthChallenge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Everything here came from the server; none of it is a secret of the client's.
        f.debug_struct("AuthChallenge")
            .field("status", &self.status)
            .field("scheme", &self.scheme)
            .field("error", &self.error)
            .field("scope", &self.scope)
            .field("resource_metadata", &self.resource_metadata)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for AuthChallenge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HTTP {}", self.status)?;
        if let Some(error) = &self.error {
            write!(f, " ({error})")?;
        }
        if let Some(scope) = &self.scope {
            write!(f, ", scope \"{scope}\"")?;
        }
        if let Some(url) = &self.resource_metadata {
            write!(f, ", resource metadata at {url}")?;
        }
        Ok(())
    }
}

type Params = Vec<(String, String)>;

/// The first value of the parameter `name` (case-insensitive).
fn param(params: &Params, name: &str) -> Option<String> {
    params
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

/// Splits a `WWW-Authenticate` value into its challenges: a scheme followed by
/// `name=value` parameters (token or quoted string), separated by commas. A token68 value
/// is skipped.
fn split_challenges(value: &str) -> Vec<(String, Params)> {
    let mut out: Vec<(String, Params)> = Vec::new();
    let mut rest = value;
    loop {
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_ascii_whitespace());
        if rest.is_empty() {
            break;
        }
        let (word, after) = take_token(rest);
        if word.is_empty() {
            // Not a token: skip one character so that hostile input cannot stall us.
            let mut chars = rest.chars();
            chars.next();
            rest = chars.as_str();
            continue;
        }
        let after_ws = after.trim_start();
        if let Some(value_part) = after_ws.strip_prefix('=') {
            let value_part = value_part.trim_start();
            let (value, remaining) = if let Some(quoted) = value_part.strip_prefix('"') {
                take_quoted(quoted)
            } else {
                let (v, r) = take_token(value_part);
                (v.to_owned(), r)
            };
            if let Some((_, params)) = out.last_mut() {
                params.push((word.to_owned(), value));
            }
            rest = remaining;
        } else {
            out.push((word.to_owned(), Vec::new()));
            rest = after;
        }
    }
    out
}

/// A token (or token68) and what follows it.
fn take_token(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| c == ',' || c == '=' || c == '"' || c.is_ascii_whitespace())
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// The content of a quoted string (after its opening quote), unescaped, and what follows.
fn take_quoted(s: &str) -> (String, &str) {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (value, &s[i + 1..]),
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            c => value.push(c),
        }
    }
    (value, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_bearer_challenge() {
        let c = AuthChallenge::parse(
            401,
            Some(
                r#"Basic realm="x", Bearer realm="mcp", error="invalid_token", error_description="expired \"now\"", scope="read write", resource_metadata="https://rs.example/.well-known/oauth-protected-resource""#,
            ),
        );
        assert_eq!(c.scheme.as_deref(), Some("Bearer"));
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(c.error_description.as_deref(), Some(r#"expired "now""#));
        assert_eq!(c.scopes().collect::<Vec<_>>(), ["read", "write"]);
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://rs.example/.well-known/oauth-protected-resource")
        );
        assert_eq!(c.realm.as_deref(), Some("mcp"));
    }

    #[test]
    fn the_challenge_naming_the_error_wins() {
        // A DPoP server that wants its nonce, offering Bearer too: the nonce request is read,
        // not the Bearer challenge listed first.
        let c = AuthChallenge::parse(
            401,
            Some(
                r#"Bearer realm="mcp", resource_metadata="https://rs.example/prm", DPoP algs="ES256", error="use_dpop_nonce""#,
            ),
        );
        assert_eq!(c.scheme.as_deref(), Some("DPoP"));
        assert_eq!(c.error.as_deref(), Some("use_dpop_nonce"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://rs.example/prm"),
            "taken from the Bearer challenge"
        );
        // Without an error anywhere, the first Bearer or DPoP challenge, not Basic.
        let c = AuthChallenge::parse(401, Some(r#"Basic realm="x", DPoP algs="ES256""#));
        assert_eq!(c.scheme.as_deref(), Some("DPoP"));
    }

    #[test]
    fn tolerates_odd_headers() {
        let c = AuthChallenge::parse(401, None);
        assert_eq!(c.scheme, None);
        let c = AuthChallenge::parse(401, Some("Bearer"));
        assert_eq!(c.scheme.as_deref(), Some("Bearer"));
        let c = AuthChallenge::parse(403, Some(r#"Bearer error=insufficient_scope, scope="a"#));
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scope.as_deref(), Some("a"));
        for hostile in [
            "",
            "=",
            "\"",
            ",,,",
            "Bearer ===",
            "Bearer a=\"\\",
            "Bearer \u{1F600}=x",
        ] {
            let _ = AuthChallenge::parse(401, Some(hostile));
        }
    }
}
