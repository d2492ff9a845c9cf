//! MCP authorization for Python: the Rust SDK's OAuth provider, configured from Python, with
//! the authorization code grant's user step (open the URL, return the redirect) a Python
//! callable run on the client's event loop.

use std::sync::Arc;

use mcp_resume::client::oauth::{AuthorizationRequest, ClientCredentials, OAuth, OAuthProvider};
use pyo3::prelude::*;

use crate::handler::{Handlers, Kind};

/// How the client gets its tokens: `OAuth.client_credentials(...)` or
/// `OAuth.authorization_code(...)`, given to `Client(oauth=...)`.
#[pyclass(frozen, module = "mcp_resume", name = "OAuth")]
pub struct PyOAuth {
    grant: Grant,
    scopes: Option<Vec<String>>,
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
}

#[pymethods]
impl PyOAuth {
    /// A machine client (no user): `client_id` and `client_secret`, sent as the
    /// authorization server prefers.
    #[staticmethod]
    #[pyo3(signature = (client_id, client_secret, *, scopes=None))]
    fn client_credentials(
        client_id: String,
        client_secret: String,
        scopes: Option<Vec<String>>,
    ) -> Self {
        PyOAuth {
            grant: Grant::ClientCredentials {
                client_id,
                client_secret,
            },
            scopes,
        }
    }

    /// A user's authorization (authorization code with PKCE, the client registered
    /// dynamically): `authorize` gets the authorization URL to show the user and returns the
    /// full URL the authorization server redirected to (`async def` or plain, run on the
    /// client's event loop).
    #[staticmethod]
    #[pyo3(signature = (authorize, *, redirect_uri=None, client_name=None, scopes=None))]
    fn authorization_code(
        py: Python<'_>,
        authorize: Py<PyAny>,
        redirect_uri: Option<String>,
        client_name: Option<String>,
        scopes: Option<Vec<String>>,
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
        })
    }

    fn __repr__(&self) -> String {
        match &self.grant {
            Grant::ClientCredentials { client_id, .. } => {
                format!("OAuth.client_credentials(client_id={client_id:?})")
            }
            Grant::AuthorizationCode { .. } => "OAuth.authorization_code(...)".to_owned(),
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
        }
        builder.build()
    }
}
