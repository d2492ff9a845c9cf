//! MCP authorization for Python: the Rust SDK's OAuth provider, configured from Python, with
//! the authorization code grant's user step (open the URL, return the redirect) a Python
//! callable run on the client's event loop.

use std::sync::Arc;

use mcp_resume::client::oauth::{
    AuthorizationRequest, ClientCredentials, DpopKey, IdentityAssertion, OAuth, OAuthProvider,
    WorkloadIdentity,
};
use pyo3::prelude::*;

use crate::handler::{Handlers, Kind};

/// How the client gets its tokens: `OAuth.client_credentials(...)`,
/// `OAuth.authorization_code(...)`, `OAuth.workload_identity(...)` or
/// `OAuth.identity_assertion(...)`, given to `Client(oauth=...)`. `dpop=True` proves
/// possession of the tokens with a key generated for the process (RFC 9449), where the
/// authorization server issues DPoP-bound tokens.
#[pyclass(frozen, module = "mcp_resume", name = "OAuth")]
pub struct PyOAuth {
    grant: Grant,
    scopes: Option<Vec<String>>,
    dpop: bool,
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
    /// authorization server prefers.
    #[staticmethod]
    #[pyo3(signature = (client_id, client_secret, *, scopes=None, dpop=false))]
    fn client_credentials(
        client_id: String,
        client_secret: String,
        scopes: Option<Vec<String>>,
        dpop: bool,
    ) -> Self {
        PyOAuth {
            grant: Grant::ClientCredentials {
                client_id,
                client_secret,
            },
            scopes,
            dpop,
        }
    }

    /// Workload identity federation: the jwt-bearer grant with the workload's token (whose
    /// audience is the authorization server), as the public client `client_id`.
    #[staticmethod]
    #[pyo3(signature = (client_id, token, *, scopes=None, dpop=false))]
    fn workload_identity(
        client_id: String,
        token: String,
        scopes: Option<Vec<String>>,
        dpop: bool,
    ) -> Self {
        PyOAuth {
            grant: Grant::Workload { client_id, token },
            scopes,
            dpop,
        }
    }

    /// Enterprise-managed authorization: the user's `id_token` is exchanged at the IdP's
    /// `idp_token_endpoint` for an identity assertion grant, presented in the jwt-bearer
    /// grant by the client `client_id`/`client_secret`.
    #[staticmethod]
    #[pyo3(signature = (client_id, client_secret, idp_token_endpoint, id_token, *, idp_client_id=None, scopes=None, dpop=false))]
    #[allow(clippy::too_many_arguments)]
    fn identity_assertion(
        client_id: String,
        client_secret: String,
        idp_token_endpoint: String,
        id_token: String,
        idp_client_id: Option<String>,
        scopes: Option<Vec<String>>,
        dpop: bool,
    ) -> Self {
        PyOAuth {
            grant: Grant::Enterprise {
                client_id,
                client_secret,
                idp_token_endpoint,
                id_token,
                idp_client_id,
            },
            scopes,
            dpop,
        }
    }

    /// A user's authorization (authorization code with PKCE, the client registered
    /// dynamically): `authorize` gets the authorization URL to show the user and returns the
    /// full URL the authorization server redirected to (`async def` or plain, run on the
    /// client's event loop).
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
        })
    }

    fn __repr__(&self) -> String {
        match &self.grant {
            Grant::ClientCredentials { client_id, .. } => {
                format!("OAuth.client_credentials(client_id={client_id:?})")
            }
            Grant::AuthorizationCode { .. } => "OAuth.authorization_code(...)".to_owned(),
            Grant::Workload { client_id, .. } => {
                format!("OAuth.workload_identity(client_id={client_id:?})")
            }
            Grant::Enterprise { client_id, .. } => {
                format!("OAuth.identity_assertion(client_id={client_id:?})")
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
                builder = builder.client_credentials(ClientCredentials::secret(
                    client_id.clone(),
                    client_secret.clone(),
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
                    .client_credentials(ClientCredentials::public(client_id.clone()))
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
                    .client_credentials(ClientCredentials::secret(
                        client_id.clone(),
                        client_secret.clone(),
                    ))
                    .identity_assertion(idp);
            }
        }
        builder.build()
    }
}
