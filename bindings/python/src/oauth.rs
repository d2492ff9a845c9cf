//! MCP authorization for Python: the Rust SDK's OAuth provider, configured from Python, with
//! the authorization code grant's user step (open the URL, return the redirect) a Python
//! callable run on the client's event loop.

use std::sync::Arc;

use mcp_resume::client::oauth::{
    AuthorizationRequest, ClientCredentials, DpopKey, IdentityAssertion, OAuth, OAuthProvider,
    WorkloadIdentity,
};
use pyo3::prelude::*;

use crate::errors;
use crate::handler::{Handlers, Kind};

/// How the client gets its tokens: `OAuth.client_credentials(...)`,
/// `OAuth.authorization_code(...)`, `OAuth.workload_identity(...)` or
/// `OAuth.identity_assertion(...)`, given to `Client(oauth=...)`. `dpop=True` proves
/// possession of the tokens with a key generated for the process (RFC 9449), where the
/// authorization server issues DPoP-bound tokens.
///
/// The three grants without a user take `issuer`, the authorization server their
/// credentials belong to: without it, whichever server the MCP server names would receive
/// the secret, the workload token or the identity assertion grant. Leaving it out needs
/// `dangerous_trust_discovered_issuer=True`.
#[pyclass(frozen, module = "mcp_resume", name = "OAuth")]
pub struct PyOAuth {
    grant: Grant,
    scopes: Option<Vec<String>>,
    dpop: bool,
    /// The authorization server machine credentials are bound to; `None` only when the
    /// application opted out.
    issuer: Option<String>,
}

/// The issuer of machine credentials, or the application's explicit opt-out; an
/// `InvalidConfigError` without either.
fn machine_issuer(py: Python<'_>, issuer: Option<String>, trust: bool) -> PyResult<Option<String>> {
    match issuer {
        Some(issuer) => Ok(Some(issuer)),
        None if trust => Ok(None),
        None => Err(errors::invalid_config(
            py,
            "client credentials need issuer=, the authorization server they belong to: without it the MCP server decides who receives them (dangerous_trust_discovered_issuer=True opts out)",
        )),
    }
}

/// `credentials` bound to `issuer`, or opted out of the binding.
fn bound(credentials: ClientCredentials, issuer: &Option<String>) -> ClientCredentials {
    match issuer {
        Some(issuer) => credentials.issuer(issuer.clone()),
        None => credentials.dangerous_trust_discovered_issuer(),
    }
}

enum Grant {
    ClientCredentials {
        client_id: String,
        client_secret: String,
    },
    AuthorizationCode {
        authorize: Py<PyAny>,
        redirect_uri: Option<String>,
        client_name: Option<String>,
    },
    Workload {
        client_id: String,
        token: String,
    },
    Enterprise {
        client_id: String,
        client_secret: String,
        idp_token_endpoint: String,
        id_token: String,
        idp_client_id: Option<String>,
    },
}

#[pymethods]
impl PyOAuth {
    /// A machine client (no user): `client_id` and `client_secret`, sent as the
    /// authorization server prefers, only to the authorization server `issuer`.
    #[staticmethod]
    #[pyo3(signature = (client_id, client_secret, *, issuer=None, dangerous_trust_discovered_issuer=false, scopes=None, dpop=false))]
    fn client_credentials(
        py: Python<'_>,
        client_id: String,
        client_secret: String,
        issuer: Option<String>,
        dangerous_trust_discovered_issuer: bool,
        scopes: Option<Vec<String>>,
        dpop: bool,
    ) -> PyResult<Self> {
        Ok(PyOAuth {
            grant: Grant::ClientCredentials {
                client_id,
                client_secret,
            },
            scopes,
            dpop,
            issuer: machine_issuer(py, issuer, dangerous_trust_discovered_issuer)?,
        })
    }

    /// Workload identity federation: the jwt-bearer grant with the workload's token (whose
    /// audience is the authorization server `issuer`, the only one it is sent to), as the
    /// public client `client_id`.
    #[staticmethod]
    #[pyo3(signature = (client_id, token, *, issuer=None, dangerous_trust_discovered_issuer=false, scopes=None, dpop=false))]
    fn workload_identity(
        py: Python<'_>,
        client_id: String,
        token: String,
        issuer: Option<String>,
        dangerous_trust_discovered_issuer: bool,
        scopes: Option<Vec<String>>,
        dpop: bool,
    ) -> PyResult<Self> {
        Ok(PyOAuth {
            grant: Grant::Workload { client_id, token },
            scopes,
            dpop,
            issuer: machine_issuer(py, issuer, dangerous_trust_discovered_issuer)?,
        })
    }

    /// Enterprise-managed authorization: the user's `id_token` is exchanged at the IdP's
    /// `idp_token_endpoint` for an identity assertion grant for the authorization server
    /// `issuer`, presented there in the jwt-bearer grant by the client
    /// `client_id`/`client_secret`.
    #[staticmethod]
    #[pyo3(signature = (client_id, client_secret, idp_token_endpoint, id_token, *, issuer=None, dangerous_trust_discovered_issuer=false, idp_client_id=None, scopes=None, dpop=false))]
    #[allow(clippy::too_many_arguments)]
    fn identity_assertion(
        py: Python<'_>,
        client_id: String,
        client_secret: String,
        idp_token_endpoint: String,
        id_token: String,
        issuer: Option<String>,
        dangerous_trust_discovered_issuer: bool,
        idp_client_id: Option<String>,
        scopes: Option<Vec<String>>,
        dpop: bool,
    ) -> PyResult<Self> {
        Ok(PyOAuth {
            grant: Grant::Enterprise {
                client_id,
                client_secret,
                idp_token_endpoint,
                id_token,
                idp_client_id,
            },
            scopes,
            dpop,
            issuer: machine_issuer(py, issuer, dangerous_trust_discovered_issuer)?,
        })
    }

    /// A user's authorization (authorization code with PKCE, the client registered
    /// dynamically): `authorize` gets the authorization URL to show the user and returns the
    /// full URL the authorization server redirected to (`async def` or plain, run on the
    /// client's event loop). That URL is the authorization endpoint of the authorization
    /// server the MCP server named: open it in the user's browser, where the user sees which
    /// site asks; never fetch it with the application's own credentials. The answer arrives
    /// at the redirect URI with a segment naming that server appended to its path: return
    /// the URL it arrived at, whatever the path (one meant for another server is refused).
    #[staticmethod]
    #[pyo3(signature = (authorize, *, redirect_uri=None, client_name=None, scopes=None, dpop=false))]
    fn authorization_code(
        py: Python<'_>,
        authorize: Py<PyAny>,
        redirect_uri: Option<String>,
        client_name: Option<String>,
        scopes: Option<Vec<String>>,
        dpop: bool,
    ) -> PyResult<Self> {
        if !authorize.bind(py).is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "authorize must be a callable taking the authorization URL",
            ));
        }
        Ok(PyOAuth {
            grant: Grant::AuthorizationCode {
                authorize,
                redirect_uri,
                client_name,
            },
            scopes,
            dpop,
            issuer: None,
        })
    }

    fn __repr__(&self) -> String {
        let issuer = match &self.issuer {
            Some(issuer) => format!(", issuer={issuer:?}"),
            None => String::new(),
        };
        match &self.grant {
            Grant::ClientCredentials { client_id, .. } => {
                format!("OAuth.client_credentials(client_id={client_id:?}{issuer})")
            }
            Grant::AuthorizationCode { .. } => "OAuth.authorization_code(...)".to_owned(),
            Grant::Workload { client_id, .. } => {
                format!("OAuth.workload_identity(client_id={client_id:?}{issuer})")
            }
            Grant::Enterprise { client_id, .. } => {
                format!("OAuth.identity_assertion(client_id={client_id:?}{issuer})")
            }
        }
    }
}

impl PyOAuth {
    /// The SDK's provider for the endpoint `url`; an authorization code grant's callable
    /// goes to `handlers`' authorizer slot.
    pub fn provider(
        &self,
        py: Python<'_>,
        url: &str,
        handlers: &Arc<Handlers>,
    ) -> Result<OAuthProvider, mcp_resume::Error> {
        let mut builder = OAuth::builder().server_url(url);
        if let Some(scopes) = &self.scopes {
            builder = builder.scopes(scopes.iter().cloned());
        }
        if self.dpop {
            builder = builder.dpop(DpopKey::generate()?);
        }
        match &self.grant {
            Grant::ClientCredentials {
                client_id,
                client_secret,
            } => {
                builder = builder.client_credentials(bound(
                    ClientCredentials::secret(client_id.clone(), client_secret.clone()),
                    &self.issuer,
                ));
            }
            Grant::AuthorizationCode {
                authorize,
                redirect_uri,
                client_name,
            } => {
                let previous = handlers.replace(Kind::Authorizer, Some(authorize.clone_ref(py)));
                drop(previous);
                let forward = handlers.clone();
                builder = builder.authorizer(move |request: AuthorizationRequest| {
                    forward.clone().authorize(request)
                });
                if let Some(uri) = redirect_uri {
                    builder = builder.redirect_uri(uri.clone());
                }
                if let Some(name) = client_name {
                    builder = builder.client_name(name.clone());
                }
            }
            Grant::Workload { client_id, token } => {
                builder = builder
                    .client_credentials(bound(
                        ClientCredentials::public(client_id.clone()),
                        &self.issuer,
                    ))
                    .workload_identity(WorkloadIdentity::token(token.clone()));
            }
            Grant::Enterprise {
                client_id,
                client_secret,
                idp_token_endpoint,
                id_token,
                idp_client_id,
            } => {
                let mut idp = IdentityAssertion::new(idp_token_endpoint.clone(), id_token.clone());
                if let Some(id) = idp_client_id {
                    idp = idp.client_id(id.clone());
                }
                builder = builder
                    .client_credentials(bound(
                        ClientCredentials::secret(client_id.clone(), client_secret.clone()),
                        &self.issuer,
                    ))
                    .identity_assertion(idp);
            }
        }
        builder.build()
    }
}
