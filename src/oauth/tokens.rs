//! [`TokenSet`]: what a token endpoint granted, bound to its issuer and resource.

use std::time::{Duration, SystemTime};

use super::Secret;

/// The longest lifetime an `expires_in` is taken at: one year. A server may say more (any
/// `u64` of seconds is valid JSON), and [`SystemTime`] cannot represent every such instant;
/// a token is renewed after a year at the latest, whatever it claimed.
pub const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// When a token granted at `now` with `expires_in` expires: `expires_in` capped at
/// [`MAX_TOKEN_LIFETIME`], so that no answer of a server makes the instant overflow. `None`
/// only on a clock so far in the future that a year more cannot be represented.
pub(crate) fn token_expiry(now: SystemTime, expires_in: Duration) -> Option<SystemTime> {
    now.checked_add(expires_in.min(MAX_TOKEN_LIFETIME))
}

/// The tokens one grant produced, with what they are bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenSet {
    /// The access token sent to the MCP server.
    pub access_token: Secret,
    /// The refresh token, when the server issued one.
    pub refresh_token: Option<Secret>,
    /// When the access token expires, when the server said (`expires_in`).
    pub expires_at: Option<SystemTime>,
    /// The scopes granted: the response's `scope`, or those requested when it has none.
    pub scopes: Vec<String>,
    /// The issuer of the authorization server that granted them.
    pub issuer: String,
    /// The `resource` they were requested for, when there was one.
    pub resource: Option<String>,
    /// The access token is DPoP-bound (`token_type: DPoP`): it is presented with the
    /// `DPoP` scheme and a proof of the key it is bound to, never as `Bearer`.
    pub dpop_bound: bool,
}

impl TokenSet {
    /// An access token granted by `issuer`.
    pub fn new(access_token: impl Into<Secret>, issuer: impl Into<String>) -> Self {
        TokenSet {
            access_token: access_token.into(),
            refresh_token: None,
            expires_at: None,
            scopes: Vec::new(),
            issuer: issuer.into(),
            resource: None,
            dpop_bound: false,
        }
    }

    /// Whether the access token expires within `margin` of `now` (a token without an expiry
    /// never does; every token does within a margin too large to add to `now`).
    pub fn expires_within(&self, now: SystemTime, margin: Duration) -> bool {
        self.expires_at
            .is_some_and(|at| now.checked_add(margin).is_none_or(|limit| at <= limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut t = TokenSet::new("a", "https://as.example");
        assert!(!t.expires_within(now, Duration::from_secs(60)));
        t.expires_at = Some(now + Duration::from_secs(30));
        assert!(t.expires_within(now, Duration::from_secs(60)));
        assert!(!t.expires_within(now, Duration::from_secs(10)));
        assert_eq!(format!("{:?}", t.access_token), "<redacted>");
        // A margin past what the clock can represent: every expiry is within it.
        assert!(t.expires_within(now, Duration::MAX));
    }

    #[test]
    fn any_expires_in_is_an_instant() {
        let now = SystemTime::now();
        let at = token_expiry(now, Duration::from_secs(u64::MAX)).unwrap();
        assert_eq!(at, now + MAX_TOKEN_LIFETIME);
        assert_eq!(
            token_expiry(now, Duration::from_secs(60)),
            Some(now + Duration::from_secs(60))
        );
        assert_eq!(
            token_expiry(now, Duration::MAX),
            Some(now + MAX_TOKEN_LIFETIME)
        );
    }
}
