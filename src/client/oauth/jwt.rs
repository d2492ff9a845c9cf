//! `private_key_jwt` (RFC 7523 §2.2): the signed assertion that authenticates the client at
//! the token endpoint, made with `jsonwebtoken`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;

use crate::oauth::OAuthError;

/// How long an assertion is valid: long enough for one token request.
const LIFETIME: Duration = Duration::from_secs(300);

/// A private key and the algorithm to sign client assertions with.
#[derive(Clone)]
pub(crate) struct ClientAssertion {
    key: EncodingKey,
    algorithm: Algorithm,
    key_id: Option<String>,
}

impl std::fmt::Debug for ClientAssertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAssertion")
            .field("algorithm", &self.algorithm)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
    jti: String,
}

/// A JOSE algorithm name (`ES256`, `RS256`, …).
pub(crate) fn parse_algorithm(name: &str) -> Result<Algorithm, OAuthError> {
    name.parse()
        .map_err(|_| OAuthError::Config(format!("unknown signing algorithm {name}")))
}

/// A PEM private key (PKCS#8, or PKCS#1 for RSA) for the asymmetric `algorithm`.
pub(crate) fn private_key(pem: &str, algorithm: Algorithm) -> Result<EncodingKey, OAuthError> {
    let bad = |e: jsonwebtoken::errors::Error| OAuthError::Config(format!("private key: {e}"));
    match algorithm {
        Algorithm::ES256 | Algorithm::ES384 => {
            EncodingKey::from_ec_pem(pem.as_bytes()).map_err(bad)
        }
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(bad),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()).map_err(bad),
        // An HMAC "key" would be a shared secret: that is client_secret_jwt, not this.
        other => Err(OAuthError::Config(format!(
            "{other:?} is not an asymmetric algorithm"
        ))),
    }
}

impl ClientAssertion {
    /// A PEM private key (PKCS#8, or PKCS#1 for RSA) for `algorithm` (`ES256`, `ES384`,
    /// `RS256`…, `PS256`…, `EdDSA`).
    pub(crate) fn from_pem(
        pem: &str,
        algorithm: &str,
        key_id: Option<String>,
    ) -> Result<Self, OAuthError> {
        let algorithm = parse_algorithm(algorithm)?;
        let key = private_key(pem, algorithm)?;
        let assertion = ClientAssertion {
            key,
            algorithm,
            key_id,
        };
        // A key that does not fit the algorithm fails now rather than at the first request.
        assertion.sign("probe", "https://probe.invalid")?;
        Ok(assertion)
    }

    /// An assertion for `client_id` (issuer and subject) whose audience is the authorization
    /// server's issuer identifier.
    pub(crate) fn sign(&self, client_id: &str, audience: &str) -> Result<String, OAuthError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let claims = Claims {
            iss: client_id,
            sub: client_id,
            aud: audience,
            iat: now,
            exp: now + LIFETIME.as_secs(),
            jti: uuid::Uuid::new_v4().to_string(),
        };
        let mut header = Header::new(self.algorithm);
        header.kid = self.key_id.clone();
        jsonwebtoken::encode(&header, &claims, &self.key)
            .map_err(|e| OAuthError::Config(format!("signing the client assertion: {e}")))
    }
}
