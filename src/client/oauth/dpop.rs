//! [`DpopKey`]: the key a client proves possession of its DPoP-bound tokens with (RFC 9449),
//! and the nonces servers hand out for its proofs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use jsonwebtoken::jwk::{Jwk, ThumbprintHash};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::Url;

use super::jwt::{parse_algorithm, private_key};
use crate::error::{Error, ErrorKind};
use crate::oauth::{nonce_scope, DpopClaims, OAuthError, DPOP_NONCE_HEADER};

/// The private key of a DPoP client: it signs a fresh proof for every token request and
/// every request presenting a DPoP-bound token, and its public half (in each proof's `jwk`
/// header) is what the authorization server binds the tokens to.
///
/// One key per client, kept for as long as its tokens are: a token bound to a key is
/// useless with another. Cheap to clone (clones share the key and the nonces servers gave).
#[derive(Clone)]
pub struct DpopKey {
    inner: Arc<KeyInner>,
}

struct KeyInner {
    key: EncodingKey,
    algorithm: Algorithm,
    jwk: Jwk,
    thumbprint: String,
    /// The last nonce each server (by origin) handed out: at most [`MAX_NONCES`] of them.
    nonces: Mutex<HashMap<String, String>>,
}

/// How many servers' nonces a key keeps. A client talks to a handful of servers; every
/// answer of any of them may name a nonce, and an unbounded map would grow with each new
/// origin for the life of the key.
const MAX_NONCES: usize = 32;

/// The longest nonce kept. Servers' nonces are short random strings; a longer one would be
/// copied into every proof, and a server could make the client hold any amount of it.
const MAX_NONCE_LEN: usize = 1024;

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopKey")
            .field("algorithm", &self.inner.algorithm)
            .field("thumbprint", &self.inner.thumbprint)
            .finish_non_exhaustive()
    }
}

impl DpopKey {
    /// A new P-256 key for `ES256`, generated in process and never stored: tokens bound to
    /// it die with the process.
    pub fn generate() -> Result<Self, Error> {
        use aws_lc_rs::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let invalid = || Error::new(ErrorKind::InvalidConfig, "DPoP: key generation failed");
        let pair =
            EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).map_err(|_| invalid())?;
        let der = pair.to_pkcs8v1().map_err(|_| invalid())?;
        Self::new(EncodingKey::from_ec_der(der.as_ref()), Algorithm::ES256)
    }

    /// The application's key: PKCS#8 PEM (PKCS#1 for RSA) for `algorithm`, one of `ES256`,
    /// `ES384`, `RS256`, `RS384`, `RS512`, `PS256`, `PS384`, `PS512`. Fails with
    /// [`ErrorKind::InvalidConfig`] when the key does not parse or fit the algorithm.
    pub fn from_pem(private_key_pem: &str, algorithm: &str) -> Result<Self, Error> {
        let invalid = |e: OAuthError| {
            Error::with_source(ErrorKind::InvalidConfig, format!("DPoP key: {e}"), e)
        };
        let algorithm = parse_algorithm(algorithm).map_err(invalid)?;
        // jsonwebtoken cannot express an Ed25519 public key as a JWK.
        if algorithm == Algorithm::EdDSA {
            return Err(invalid(OAuthError::Config(
                "EdDSA is not supported for DPoP".into(),
            )));
        }
        Self::new(
            private_key(private_key_pem, algorithm).map_err(invalid)?,
            algorithm,
        )
    }

    fn new(key: EncodingKey, algorithm: Algorithm) -> Result<Self, Error> {
        let jwk = Jwk::from_encoding_key(&key, algorithm).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("DPoP key: no public key: {e}"),
            )
        })?;
        let thumbprint = jwk.thumbprint(ThumbprintHash::SHA256);
        let key = DpopKey {
            inner: Arc::new(KeyInner {
                key,
                algorithm,
                jwk,
                thumbprint,
                nonces: Mutex::new(HashMap::new()),
            }),
        };
        // A key that does not fit its algorithm fails now rather than at the first request.
        let probe = Url::parse("https://probe.invalid/").expect("a valid URL");
        key.proof("POST", &probe, None)?;
        Ok(key)
    }

    /// The algorithm the proofs are signed with (`ES256`, …), as authorization servers list
    /// it in `dpop_signing_alg_values_supported`.
    pub fn algorithm(&self) -> String {
        format!("{:?}", self.inner.algorithm)
    }

    /// The RFC 7638 SHA-256 thumbprint of the public key: the `cnf.jkt` of the tokens bound
    /// to it.
    pub fn thumbprint(&self) -> &str {
        &self.inner.thumbprint
    }

    /// A fresh proof (new `jti`, current `iat`) for a `method` request to `url`, presenting
    /// `access_token` (`None` for a token request), with the nonce `url`'s server handed out
    /// last, if any. [`ErrorKind::InvalidConfig`] when the key does not sign (never for a key
    /// this type accepted).
    pub fn proof(
        &self,
        method: &str,
        url: &Url,
        access_token: Option<&str>,
    ) -> Result<String, Error> {
        let nonce = self.nonce(url);
        let iat = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let jti = uuid::Uuid::new_v4().to_string();
        let claims = DpopClaims::new(jti, method, url, iat, access_token, nonce.as_deref());
        let mut header = Header::new(self.inner.algorithm);
        header.typ = Some("dpop+jwt".to_owned());
        header.jwk = Some(self.inner.jwk.clone());
        jsonwebtoken::encode(&header, &claims, &self.inner.key).map_err(|e| {
            let e = OAuthError::Dpop(format!("signing a proof: {e}"));
            Error::with_source(ErrorKind::InvalidConfig, e.to_string(), e)
        })
    }

    /// Keeps the `DPoP-Nonce` of a response from `url`'s server. `true` when the response
    /// names one: a request refused for want of a nonce is worth sending again, once, with
    /// it. Not only when the nonce is new to this key: of several requests that went out
    /// with the old nonce and are refused together, the first one seen stores the new nonce,
    /// and the others need their retry as much. A nonce longer than 1 KiB is not kept (and
    /// is not worth a retry).
    pub fn observe_nonce(&self, url: &Url, headers: &HeaderMap) -> bool {
        let Some(nonce) = headers
            .get(DPOP_NONCE_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|n| !n.is_empty() && n.len() <= MAX_NONCE_LEN)
        else {
            return false;
        };
        let scope = nonce_scope(url);
        let mut nonces = self.inner.nonces.lock().unwrap_or_else(|p| p.into_inner());
        if nonces.len() >= MAX_NONCES && !nonces.contains_key(&scope) {
            // Any other server's will do: one evicted only costs it a retry for a new nonce.
            if let Some(evicted) = nonces.keys().next().cloned() {
                nonces.remove(&evicted);
            }
        }
        nonces.insert(scope, nonce.to_owned());
        true
    }

    fn nonce(&self, url: &Url) -> Option<String> {
        let nonces = self.inner.nonces.lock().unwrap_or_else(|p| p.into_inner());
        nonces.get(&nonce_scope(url)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nonce_from(key: &DpopKey, origin: &str, nonce: &str) -> bool {
        let url = Url::parse(&format!("{origin}/token")).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(DPOP_NONCE_HEADER, nonce.parse().unwrap());
        key.observe_nonce(&url, &headers)
    }

    fn nonce_for(key: &DpopKey, origin: &str) -> Option<String> {
        key.nonce(&Url::parse(&format!("{origin}/token")).unwrap())
    }

    #[test]
    fn the_nonces_kept_are_bounded_in_number_and_size() {
        let key = DpopKey::generate().unwrap();
        for i in 0..1000 {
            assert!(nonce_from(
                &key,
                &format!("https://as{i}.example"),
                &format!("n{i}")
            ));
        }
        let kept = key.inner.nonces.lock().unwrap().len();
        assert!(kept <= MAX_NONCES, "{kept} nonces kept");
        // The latest is kept: the retry of the request it answered needs it.
        assert_eq!(
            nonce_for(&key, "https://as999.example").as_deref(),
            Some("n999")
        );

        // A nonce no server needs this long is not kept, nor worth a retry.
        let huge = "n".repeat(2048);
        assert!(!nonce_from(&key, "https://as999.example", &huge));
        assert_eq!(
            nonce_for(&key, "https://as999.example").as_deref(),
            Some("n999")
        );
    }
}
