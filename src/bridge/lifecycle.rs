//! The virtual session's lifecycle: the host's `initialize` builds the real client and is
//! answered with the server's result in the shape the host asked for; what the host sends
//! before it; its notifications.

use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::OwnedSemaphorePermit;

use super::codes::{self, to_rpc};
use super::host_calls::Waiting;
use super::message::response;
use super::{closed, lock, pumps, Inner, Phase, CANCELLED};
use crate::client::{Client, ClientBuilder, InitializeResult};
use crate::error::{Error, ErrorKind, RpcError};
use crate::proto::ProtocolVersion;

/// What the host's `initialize` says of itself.
struct HostInit {
    /// The protocol version it asked for, when it is one mcp-resume speaks in the legacy era.
    version: Option<ProtocolVersion>,
    capabilities: Value,
    info: Option<(String, String)>,
}

impl HostInit {
    fn read(params: Option<&Value>) -> Self {
        let get = |name: &str| params.and_then(|p| p.get(name));
        let version = get("protocolVersion")
            .and_then(Value::as_str)
            .and_then(ProtocolVersion::parse)
            .filter(|v| !v.is_modern());
        let capabilities = match get("capabilities") {
            Some(caps @ Value::Object(_)) => caps.clone(),
            _ => json!({}),
        };
        let info = get("clientInfo").and_then(|info| {
            let name = info.get("name")?.as_str()?.to_owned();
            let version = info
                .get("version")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            Some((name, version))
        });
        HostInit {
            version,
            capabilities,
            info,
        }
    }

    /// The real session's configuration: the application's, with the host's lifecycle
    /// parameters, and every server request forwarded to the host.
    fn configure(&self, builder: ClientBuilder, inner: &Inner) -> ClientBuilder {
        let mut builder = builder
            .client_capabilities(self.capabilities.clone())
            .on_server_request(inner.server_requests.handler());
        if let Some((name, version)) = &self.info {
            if !name.is_empty() {
                builder = builder.client_info(name.clone(), version.clone());
            }
        }
        if let Some(version) = self.version {
            builder = builder.protocol_version(version);
        }
        builder
    }

    /// The server's answer as the host must see it: a 2026-07-28 server's discovery carries
    /// the legacy version the host asked for (or the latest), so a legacy host accepts it.
    fn answer(&self, init: InitializeResult) -> Value {
        let mut raw = init.raw;
        let modern = ProtocolVersion::parse(&init.protocol_version).is_some_and(|v| v.is_modern());
        if modern && raw.is_object() {
            let version = self.version.unwrap_or(ProtocolVersion::LATEST);
            raw["protocolVersion"] = json!(version.as_str());
        }
        raw
    }
}

impl Inner {
    /// The real client, once built.
    pub(crate) fn client(&self) -> Option<Client> {
        match &*lock(&self.phase) {
            Phase::Ready(client) => Some(client.clone()),
            _ => None,
        }
    }

    /// A host request, now that it has its place: lifecycle ones here, the others as calls.
    /// One the host cancelled while it waited is dropped: neither run nor answered.
    pub(crate) fn request(
        self: &Arc<Self>,
        waiting: Waiting,
        method: String,
        params: Option<Value>,
        permit: OwnedSemaphorePermit,
    ) -> Result<(), Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::InvalidConfig,
                "the bridge must be used inside a tokio runtime",
            )
        })?;
        match method.as_str() {
            "initialize" => {
                let Some(id) = self.calls.take(waiting) else {
                    return Ok(());
                };
                return self.initialize(&runtime, id, params.as_ref(), permit);
            }
            // As a legacy server answers it: a dual-era host falls back to `initialize`.
            "server/discover" => {
                if let Some(id) = self.calls.take(waiting) {
                    let error = rpc(codes::METHOD_NOT_FOUND, "method not found: server/discover");
                    self.answer_now(&runtime, id, Err(error), permit);
                }
                return Ok(());
            }
            _ => {}
        }
        let client = match &*lock(&self.phase) {
            Phase::Ready(client) => client.clone(),
            Phase::Closed => return Err(closed()),
            Phase::Failed(error) => {
                if let Some(id) = self.calls.take(waiting) {
                    self.answer_now(&runtime, id, Err(to_rpc(error)), permit);
                }
                return Ok(());
            }
            Phase::Idle(_) => {
                let Some(id) = self.calls.take(waiting) else {
                    return Ok(());
                };
                let answer = match method.as_str() {
                    "ping" => Ok(json!({})),
                    _ => Err(rpc(
                        codes::INVALID_REQUEST,
                        &format!("{method} before initialize"),
                    )),
                };
                self.answer_now(&runtime, id, answer, permit);
                return Ok(());
            }
        };
        self.calls
            .start(&runtime, client, waiting, method, params, permit);
        Ok(())
    }

    fn initialize(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        id: Value,
        params: Option<&Value>,
        permit: OwnedSemaphorePermit,
    ) -> Result<(), Error> {
        let host = HostInit::read(params);
        let client = {
            let mut phase = lock(&self.phase);
            match std::mem::replace(&mut *phase, Phase::Closed) {
                Phase::Idle(builder) => match host.configure(*builder, self).build() {
                    Ok(client) => {
                        // Subscribed before the first exchange, so nothing is missed.
                        lock(&self.pumps).extend(pumps::start(runtime, &client, self));
                        *phase = Phase::Ready(client.clone());
                        client
                    }
                    Err(error) => {
                        *phase = Phase::Failed(error.clone());
                        drop(phase);
                        self.answer_now(runtime, id, Err(to_rpc(&error)), permit);
                        return Ok(());
                    }
                },
                // Initializing again: the session's answer again (the client connects once).
                Phase::Ready(client) => {
                    *phase = Phase::Ready(client.clone());
                    client
                }
                Phase::Failed(error) => {
                    *phase = Phase::Failed(error.clone());
                    drop(phase);
                    self.answer_now(runtime, id, Err(to_rpc(&error)), permit);
                    return Ok(());
                }
                Phase::Closed => return Err(closed()),
            }
        };
        let out = self.out.clone();
        let server_capabilities = Arc::clone(&self.server_capabilities);
        runtime.spawn(async move {
            let _permit = permit;
            let answer = match client.connect().await {
                Ok(init) => {
                    *lock(&server_capabilities) = Some(init.capabilities.clone());
                    Ok(host.answer(init))
                }
                Err(error) => Err(to_rpc(&error)),
            };
            let _ = out.send(response(id, answer)).await;
        });
        Ok(())
    }

    /// Answers a host request the bridge answers itself.
    fn answer_now(
        &self,
        runtime: &tokio::runtime::Handle,
        id: Value,
        answer: Result<Value, RpcError>,
        permit: OwnedSemaphorePermit,
    ) {
        let out = self.out.clone();
        runtime.spawn(async move {
            let _permit = permit;
            let _ = out.send(response(id, answer)).await;
        });
    }

    /// A host notification: `initialized` is absorbed (the client sent its own), as is
    /// `cancelled` (`Bridge::send` applied it when the host handed it over, in the host's
    /// order), the others go to the server.
    pub(crate) async fn notification(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), Error> {
        match method {
            "notifications/initialized" | CANCELLED => Ok(()),
            _ => match self.client() {
                Some(client) => client.notify(method, params),
                // Before `initialize` the server has no session to tell.
                None => Ok(()),
            },
        }
    }
}

fn rpc(code: i64, message: &str) -> RpcError {
    RpcError {
        code,
        message: message.to_owned(),
        data: None,
    }
}
