//! The SDK's `Client` for Python: construction from keyword arguments, and every network
//! method as an asyncio awaitable driven by the binding's tokio runtime.
//!
//! `mcp_resume.Client` (Python) wraps this class so that its methods are true coroutine
//! functions: an awaitable made here belongs to the event loop running when the method is
//! called, which `asyncio.run(client.connect())` would not have yet.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use mcp_resume::client::models::CompleteRequest;
use mcp_resume::{Client, ClientBuilder, Error, ToolCall};
use pyo3::exceptions::PyTypeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyMapping, PyModule, PyString};
use pyo3::PyTraverseError;

use crate::convert::{from_py, opt_from_py, seconds, size, IntoPython, Reply};
use crate::errors;
use crate::handler::{Handlers, Kind};
use crate::ledger::{Recovered, Unclaimed};
use crate::models::{logging_level, reference_from_py};
use crate::oauth::PyOAuth;
use crate::streams::{EventStream, NotificationStream};
use crate::telemetry::caller_context;
use crate::types::{era_to_py, parse_name, PyEraCache, PyExtensionStatus, PyReconnectPolicy};
use mcp_resume::client::oauth::OAuthProvider;
use mcp_resume::client::telemetry::Otlp;
use mcp_resume::client::Telemetry;
use opentelemetry::trace::FutureExt as _;

/// The low-level client; use `mcp_resume.Client`.
///
/// The SDK's client is built at construction (which checks the configuration), and built
/// again at its first use if typed handlers were registered in between: a typed handler
/// declares its capability at `initialize`, so the SDK takes it when the client is built.
/// From its first use on, the client is fixed.
#[pyclass(frozen, module = "mcp_resume._mcp_resume", name = "RawClient")]
pub struct RawClient {
    url: String,
    /// The constructor's settings on a builder, cloned for each client built (handlers and
    /// authorization are added then).
    template: ClientBuilder,
    oauth: Option<OAuthProvider>,
    /// The OTLP exporters, when `otlp_endpoint` was given.
    otlp: Option<Arc<Otlp>>,
    handlers: Arc<Handlers>,
    built: Mutex<Built>,
    /// Calls `recover()` picked up whose task was gone before it could take them.
    unclaimed: Unclaimed,
}

struct Built {
    client: Client,
    /// Which typed handlers (`Kind::TYPED`) `client` was built with.
    declared: [bool; 3],
    /// Used: `client` is the one every call goes to from now on.
    fixed: bool,
}

impl RawClient {
    /// The SDK's client, with the typed handlers `declared` says forwarding to their slots.
    fn build_client(&self, declared: [bool; 3]) -> Result<Client, Error> {
        build_client(
            &self.template,
            self.oauth.as_ref(),
            &self.handlers,
            declared,
        )
    }
}

/// A client from `template`, with the typed handlers `declared` says forwarding to their
/// slots, and the authorization the constructor set.
fn build_client(
    template: &ClientBuilder,
    oauth: Option<&OAuthProvider>,
    handlers: &Arc<Handlers>,
    declared: [bool; 3],
) -> Result<Client, Error> {
    let mut b = template.clone();
    let forward = handlers.clone();
    b = b.on_server_request(move |request| forward.clone().server_request(request));
    if declared[0] {
        let forward = handlers.clone();
        b = b.on_sampling(move |request, ctx| forward.clone().sampling(request, ctx));
    }
    if declared[1] {
        let forward = handlers.clone();
        b = b.on_elicitation(move |request, ctx| forward.clone().elicitation(request, ctx));
    }
    if declared[2] {
        let forward = handlers.clone();
        b = b.on_roots(move |ctx| forward.clone().roots(ctx));
    }
    if handlers.is_set(Kind::TokenProvider) {
        let forward = handlers.clone();
        b = b.auth(move |request| forward.clone().token(request));
    }
    if let Some(provider) = oauth {
        b = b.auth(provider.clone());
    }
    b.build()
}

impl RawClient {
    /// This client's settings (not its handlers): the message bridge's session is configured
    /// like the client it was made from.
    pub(crate) fn template(&self) -> ClientBuilder {
        self.template.clone()
    }
}

#[pymethods]
impl RawClient {
    #[new]
    #[pyo3(signature = (url, *, capabilities=None, client_info=None, protocol_version=None,
        era=None, era_cache=None, bearer_token=None, headers=None, call_timeout=None,
        connect_timeout=None, reconnect=None, resend_policy=None, max_event_size=None,
        max_body_size=None, open_listen_stream=None, jitter_seed=None, on_server_request=None,
        on_sampling=None, on_elicitation=None, on_roots=None, token_provider=None,
        oauth=None, ledger=None, ledger_identity=None, record_session_ids=None,
        otlp_endpoint=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: String,
        capabilities: Option<Bound<'_, PyAny>>,
        client_info: Option<(String, String)>,
        protocol_version: Option<String>,
        era: Option<String>,
        era_cache: Option<PyRef<'_, PyEraCache>>,
        bearer_token: Option<String>,
        headers: Option<Bound<'_, PyAny>>,
        call_timeout: Option<f64>,
        connect_timeout: Option<f64>,
        reconnect: Option<PyRef<'_, PyReconnectPolicy>>,
        resend_policy: Option<String>,
        max_event_size: Option<i64>,
        max_body_size: Option<i64>,
        open_listen_stream: Option<bool>,
        jitter_seed: Option<u64>,
        on_server_request: Option<Py<PyAny>>,
        on_sampling: Option<Py<PyAny>>,
        on_elicitation: Option<Py<PyAny>>,
        on_roots: Option<Py<PyAny>>,
        token_provider: Option<Py<PyAny>>,
        oauth: Option<PyRef<'_, PyOAuth>>,
        ledger: Option<Bound<'_, PyAny>>,
        ledger_identity: Option<String>,
        record_session_ids: Option<bool>,
        otlp_endpoint: Option<String>,
    ) -> PyResult<Self> {
        if token_provider.is_some() && oauth.is_some() {
            // Both would answer for the Authorization header; one would silently lose.
            return Err(errors::invalid_config(
                py,
                "token_provider and oauth both supply the Authorization header: choose one",
            ));
        }
        let handlers = Arc::new(Handlers::default());
        for (kind, callback) in [
            (Kind::ServerRequest, on_server_request),
            (Kind::Sampling, on_sampling),
            (Kind::Elicitation, on_elicitation),
            (Kind::Roots, on_roots),
            (Kind::TokenProvider, token_provider),
        ] {
            if let Some(callback) = callback {
                let previous = handlers.replace(kind, Some(callable(py, kind, callback)?));
                drop(previous);
            }
        }
        let oauth = oauth
            .map(|o| o.provider(py, &url, &handlers))
            .transpose()
            .map_err(|e| errors::to_py_err(py, &e))?;
        let mut b = Client::builder(url.clone());
        if let Some(caps) = opt_from_py(capabilities.as_ref())? {
            b = b.client_capabilities(caps);
        }
        if let Some((name, version)) = client_info {
            b = b.client_info(name, version);
        }
        if let Some(version) = protocol_version {
            b = b.protocol_version(parse_name(py, &version)?);
        }
        if let Some(era) = era {
            b = b.era(parse_name(py, &era)?);
        }
        if let Some(cache) = era_cache {
            b = b.era_cache(cache.inner.clone());
        }
        if let Some(token) = bearer_token {
            b = b.bearer_token(token);
        }
        for (name, value) in headers
            .map(|h| header_pairs(&h))
            .transpose()?
            .unwrap_or_default()
        {
            b = b.header(name, value);
        }
        if let Some(t) = call_timeout {
            b = b.call_timeout(seconds(py, t, "call_timeout")?);
        }
        if let Some(t) = connect_timeout {
            b = b.connect_timeout(seconds(py, t, "connect_timeout")?);
        }
        if let Some(policy) = reconnect {
            b = b.reconnect(policy.inner.clone());
        }
        if let Some(policy) = resend_policy {
            b = b.resend_policy(parse_name(py, &policy)?);
        }
        if let Some(n) = max_event_size {
            b = b.max_event_size(size(py, n, "max_event_size")?);
        }
        if let Some(n) = max_body_size {
            b = b.max_body_size(size(py, n, "max_body_size")?);
        }
        if let Some(open) = open_listen_stream {
            b = b.open_listen_stream(open);
        }
        if let Some(seed) = jitter_seed {
            b = b.jitter_seed(seed);
        }
        b = crate::ledger::configure(py, b, ledger.as_ref(), ledger_identity, record_session_ids)?;
        let otlp = otlp_endpoint
            .map(|endpoint| Otlp::new(&endpoint).map(Arc::new))
            .transpose()
            .map_err(|e| errors::to_py_err(py, &e))?;
        // Without an endpoint, no telemetry at all (not the Rust global providers, which
        // nothing in a Python process sets).
        b = b.telemetry(match &otlp {
            Some(otlp) => otlp.telemetry(),
            None => Telemetry::disabled(),
        });
        let declared = Kind::TYPED.map(|kind| handlers.is_set(kind));
        let client = build_client(&b, oauth.as_ref(), &handlers, declared)
            .map_err(|e| errors::to_py_err(py, &e))?;
        Ok(RawClient {
            url,
            template: b,
            oauth,
            otlp,
            handlers,
            built: Mutex::new(Built {
                client,
                declared,
                fixed: false,
            }),
            unclaimed: Unclaimed::default(),
        })
    }

    fn connect<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move { client.connect().await })
    }

    fn list_tools<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move { client.list_tools().await })
    }

    #[pyo3(signature = (name, arguments=None, *, idempotency_key=None, timeout=None,
        progress=None, meta=None))]
    #[allow(clippy::too_many_arguments)]
    fn call_tool<'py>(
        &self,
        py: Python<'py>,
        name: String,
        arguments: Option<Bound<'py, PyAny>>,
        idempotency_key: Option<Bound<'py, PyAny>>,
        timeout: Option<f64>,
        progress: Option<Bound<'py, PyAny>>,
        meta: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arguments = opt_from_py(arguments.as_ref())?.unwrap_or_default();
        let mut call = ToolCall::new(name, arguments);
        if let Some(key) = idempotency_key {
            call = call.idempotency_key(key_string(py, &key)?);
        }
        if let Some(t) = timeout {
            call = call.timeout(seconds(py, t, "timeout")?);
        }
        if let Some(meta) = meta {
            let meta = meta.cast::<PyMapping>().map_err(|_| {
                PyTypeError::new_err("meta must be a mapping of str to JSON values")
            })?;
            for item in meta.items()?.iter() {
                let (key, value): (String, Bound<'py, PyAny>) = item.extract()?;
                call = call.meta(key, from_py(&value)?);
            }
        }
        if let Some(token) = opt_from_py(progress.as_ref())? {
            call = call.progress_token(token);
        }
        let client = self.client(py)?;
        self.run(py, async move { client.call_tool(call).await })
    }

    #[pyo3(signature = (method, params=None))]
    fn request<'py>(
        &self,
        py: Python<'py>,
        method: String,
        params: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let params = opt_from_py(params.as_ref())?;
        let client = self.client(py)?;
        self.run(py, async move {
            client
                .request::<serde_json::Value>(mcp_resume::Request::new(method, params))
                .await
        })
    }

    #[pyo3(signature = (method, params=None))]
    fn notify<'py>(
        &self,
        py: Python<'py>,
        method: String,
        params: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let params = opt_from_py(params.as_ref())?;
        let client = self.client(py)?;
        self.run(py, async move { client.notify(&method, params) })
    }

    fn ping<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move { client.ping().await })
    }

    #[pyo3(signature = (task_id, *, timeout=None))]
    fn resume_task<'py>(
        &self,
        py: Python<'py>,
        task_id: String,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = timeout.map(|t| seconds(py, t, "timeout")).transpose()?;
        let client = self.client(py)?;
        self.run(
            py,
            async move { client.resume_task(&task_id, timeout).await },
        )
    }

    fn recover<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let unclaimed = self.unclaimed.clone();
        self.run(py, async move {
            let mut recovered = Recovered::taking_back(unclaimed);
            recovered.extend(client.recover().await?);
            Ok(recovered)
        })
    }

    #[pyo3(signature = (cursor=None))]
    fn list_tools_page<'py>(
        &self,
        py: Python<'py>,
        cursor: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move {
            client.list_tools_page(cursor.as_deref()).await
        })
    }

    fn list_resources<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move { client.list_resources().await })
    }

    #[pyo3(signature = (cursor=None))]
    fn list_resources_page<'py>(
        &self,
        py: Python<'py>,
        cursor: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move {
            client.list_resources_page(cursor.as_deref()).await
        })
    }

    fn list_resource_templates<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move { client.list_resource_templates().await })
    }

    #[pyo3(signature = (cursor=None))]
    fn list_resource_templates_page<'py>(
        &self,
        py: Python<'py>,
        cursor: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move {
            client.list_resource_templates_page(cursor.as_deref()).await
        })
    }

    fn read_resource<'py>(&self, py: Python<'py>, uri: String) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move { client.read_resource(&uri).await })
    }

    fn subscribe_resource<'py>(&self, py: Python<'py>, uri: String) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move { client.subscribe_resource(&uri).await })
    }

    fn unsubscribe_resource<'py>(
        &self,
        py: Python<'py>,
        uri: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move { client.unsubscribe_resource(&uri).await })
    }

    fn list_prompts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move { client.list_prompts().await })
    }

    #[pyo3(signature = (cursor=None))]
    fn list_prompts_page<'py>(
        &self,
        py: Python<'py>,
        cursor: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move {
            client.list_prompts_page(cursor.as_deref()).await
        })
    }

    #[pyo3(signature = (name, arguments=None))]
    fn get_prompt<'py>(
        &self,
        py: Python<'py>,
        name: String,
        arguments: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arguments = match arguments {
            Some(a) if !a.is_none() => string_pairs(&a, "arguments")?,
            _ => Vec::new(),
        };
        let client = self.client(py)?;
        self.run(py, async move { client.get_prompt(&name, arguments).await })
    }

    #[pyo3(signature = (r#ref, argument_name, argument_value, *, context=None))]
    fn complete<'py>(
        &self,
        py: Python<'py>,
        r#ref: Bound<'py, PyAny>,
        argument_name: String,
        argument_value: String,
        context: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut request =
            CompleteRequest::new(reference_from_py(&r#ref)?, argument_name, argument_value);
        if let Some(context) = context.filter(|c| !c.is_none()) {
            for (name, value) in string_pairs(&context, "context")? {
                request = request.context_argument(name, value);
            }
        }
        let client = self.client(py)?;
        self.run(py, async move { client.complete(request).await })
    }

    fn set_logging_level<'py>(
        &self,
        py: Python<'py>,
        level: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let level = logging_level(py, &level)?;
        let client = self.client(py)?;
        self.run(py, async move { client.set_logging_level(level).await })
    }

    fn notify_roots_changed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        self.run(py, async move { client.notify_roots_changed() })
    }

    /// Closes the session, then exports what telemetry is waiting.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let otlp = self.otlp.clone();
        self.run(py, async move {
            let closed = client.close().await;
            if let Some(otlp) = otlp {
                let _ = tokio::task::spawn_blocking(move || otlp.flush()).await;
            }
            closed
        })
    }

    #[getter]
    fn era(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let era = self.lock().client.era();
        era.map(|era| era_to_py(py, era)).transpose()
    }

    #[getter]
    fn extension_status(&self) -> Option<PyExtensionStatus> {
        self.lock()
            .client
            .extension_status()
            .map(PyExtensionStatus::from)
    }

    #[getter]
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    fn events(&self, py: Python<'_>) -> PyResult<EventStream> {
        Ok(EventStream::new(self.client(py)?.events()))
    }

    fn notifications(&self, py: Python<'_>) -> PyResult<NotificationStream> {
        Ok(NotificationStream::new(self.client(py)?.notifications()))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.handlers.traverse(&visit)
    }

    fn __clear__(&self) {
        self.handlers.clear();
    }

    #[getter]
    fn server_request_handler(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.handlers.callback(py, Kind::ServerRequest)
    }

    #[setter]
    fn set_server_request_handler(
        &self,
        py: Python<'_>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        self.set_handler(py, Kind::ServerRequest, callback)
    }

    #[getter]
    fn sampling_handler(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.handlers.callback(py, Kind::Sampling)
    }

    #[setter]
    fn set_sampling_handler(&self, py: Python<'_>, callback: Option<Py<PyAny>>) -> PyResult<()> {
        self.set_handler(py, Kind::Sampling, callback)
    }

    #[getter]
    fn elicitation_handler(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.handlers.callback(py, Kind::Elicitation)
    }

    #[setter]
    fn set_elicitation_handler(&self, py: Python<'_>, callback: Option<Py<PyAny>>) -> PyResult<()> {
        self.set_handler(py, Kind::Elicitation, callback)
    }

    #[getter]
    fn roots_handler(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.handlers.callback(py, Kind::Roots)
    }

    #[setter]
    fn set_roots_handler(&self, py: Python<'_>, callback: Option<Py<PyAny>>) -> PyResult<()> {
        self.set_handler(py, Kind::Roots, callback)
    }
}

impl RawClient {
    fn lock(&self) -> MutexGuard<'_, Built> {
        self.built
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The SDK's client every call goes to; the first use fixes it, built again first if
    /// typed handlers were registered or removed since construction.
    fn client(&self, py: Python<'_>) -> PyResult<Client> {
        // Python code (building an exception, finalizers) runs only once the lock is released.
        let outcome = {
            let mut built = self.lock();
            let mut unused = None;
            let mut failed = None;
            if !built.fixed {
                let declared = Kind::TYPED.map(|kind| self.handlers.is_set(kind));
                if declared != built.declared {
                    match self.build_client(declared) {
                        Ok(client) => {
                            unused = Some(std::mem::replace(&mut built.client, client));
                            built.declared = declared;
                        }
                        Err(e) => failed = Some(e),
                    }
                }
                built.fixed = failed.is_none();
            }
            match failed {
                Some(e) => Err(e),
                None => Ok((built.client.clone(), unused)),
            }
        };
        let (client, unused) = outcome.map_err(|e| errors::to_py_err(py, &e))?;
        drop(unused);
        Ok(client)
    }

    /// Sets or empties a handler's slot. A typed handler the client was not built with
    /// cannot be added once it is in use: its capability was not declared.
    fn set_handler(&self, py: Python<'_>, kind: Kind, callback: Option<Py<PyAny>>) -> PyResult<()> {
        let callback = match callback {
            Some(c) if !c.is_none(py) => Some(callable(py, kind, c)?),
            _ => None,
        };
        let refused = {
            let built = self.lock();
            let undeclared = Kind::TYPED
                .iter()
                .position(|&k| k == kind)
                .is_some_and(|i| !built.declared[i]);
            if built.fixed && undeclared && callback.is_some() {
                Err(callback)
            } else {
                Ok(self.handlers.replace(kind, callback))
            }
        };
        // The previous callback (or the refused one) is dropped, and Python code runs, once
        // no lock is held.
        match refused {
            Ok(previous) => {
                drop(previous);
                Ok(())
            }
            Err(refused) => {
                drop(refused);
                Err(errors::invalid_config(
                    py,
                    &format!(
                        "{0} must be registered before the client is first used (connect(), a \
                         call, events() or notifications()): it declares its capability at \
                         initialize. Pass {0}= to Client(...) or register it right after \
                         constructing the client",
                        kind.registration()
                    ),
                ))
            }
        }
    }

    /// `fut` as an awaitable of the running event loop, which must be the client's own (see
    /// `Handlers::bind_loop`: nothing is sent otherwise); dropping it (the task was
    /// cancelled) drops the SDK's future, which cancels the call.
    fn run<'py, T: IntoPython>(
        &self,
        py: Python<'py>,
        fut: impl Future<Output = Result<T, Error>> + Send + 'static,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.handlers.bind_loop(py)?;
        // The call's span is a child of the Python caller's current one.
        let parent = self.otlp.as_ref().and_then(|_| caller_context(py));
        crate::bridge::awaitable(py, async move {
            Reply(match parent {
                Some(parent) => fut.with_context(parent).await,
                None => fut.await,
            })
        })
    }
}

fn callable(py: Python<'_>, kind: Kind, callback: Py<PyAny>) -> PyResult<Py<PyAny>> {
    if callback.bind(py).is_callable() {
        Ok(callback)
    } else {
        let takes = match kind {
            Kind::ServerRequest => "a ServerRequest",
            Kind::Sampling => "a CreateMessageRequest",
            Kind::Elicitation => "an ElicitRequest",
            Kind::Roots => "a ListRootsRequest",
            Kind::TokenProvider => "a token request dict and returning the token",
            Kind::Authorizer => "the authorization URL and returning the redirect URL",
        };
        Err(PyTypeError::new_err(format!(
            "{} must be a callable (an async def taking {takes})",
            kind.registration()
        )))
    }
}

/// A mapping of argument names to string values.
fn string_pairs(mapping: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<(String, String)>> {
    let wrong = || PyTypeError::new_err(format!("{what} must be a mapping of str to str"));
    let mapping = mapping.cast::<PyMapping>().map_err(|_| wrong())?;
    mapping
        .items()?
        .iter()
        .map(|item| item.extract::<(String, String)>().map_err(|_| wrong()))
        .collect()
}

/// A mapping of names to values, or an iterable of `(name, value)` pairs (to repeat a name).
fn header_pairs(headers: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    let pairs = match headers.cast::<PyMapping>() {
        Ok(mapping) => mapping.items()?.into_any(),
        Err(_) => headers.clone(),
    };
    pairs
        .try_iter()?
        .map(|pair| pair?.extract::<(String, String)>())
        .collect::<PyResult<Vec<_>>>()
        .map_err(|_| {
            PyTypeError::new_err(
                "headers must be a mapping of str to str or an iterable of (str, str) pairs",
            )
        })
}

/// A `str` or a `uuid.UUID` (its canonical text, as the SDK formats its own UUID keys).
fn key_string(py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = key.cast::<PyString>() {
        return Ok(s.to_str()?.to_owned());
    }
    static UUID: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let uuid = UUID.get_or_try_init(py, || Ok::<_, PyErr>(py.import("uuid")?.unbind()))?;
    if key.is_instance(&uuid.bind(py).getattr("UUID")?)? {
        return Ok(key.str()?.to_str()?.to_owned());
    }
    Err(PyTypeError::new_err(
        "idempotency_key must be a str or a uuid.UUID",
    ))
}
