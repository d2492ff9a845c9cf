//! What the host set on its session and a new session does not have: the log level and the
//! resource subscriptions. The host never sees a re-initialization, so the bridge sets them
//! again on the new session.

use std::collections::BTreeSet;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::lock;
use crate::client::Client;
use crate::proto::CallRequest;

#[derive(Default)]
pub(crate) struct SessionState {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The params of the host's last successful `logging/setLevel`.
    log_level: Option<Value>,
    /// The URIs the host is subscribed to.
    subscriptions: BTreeSet<String>,
}

impl SessionState {
    /// Records a host request that succeeded, if it set session state.
    pub(crate) fn record(&self, method: &str, params: Option<&Value>) {
        let uri = || {
            params
                .and_then(|p| p.get("uri"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let mut state = lock(&self.inner);
        match method {
            "logging/setLevel" => state.log_level = params.cloned(),
            "resources/subscribe" => {
                if let Some(uri) = uri() {
                    state.subscriptions.insert(uri);
                }
            }
            "resources/unsubscribe" => {
                if let Some(uri) = uri() {
                    state.subscriptions.remove(&uri);
                }
            }
            _ => {}
        }
    }

    /// Sets the recorded state on the client's new session (best effort: a failure is
    /// logged, the host's calls are not held up by it).
    pub(crate) fn restore(&self, client: &Client) {
        let requests: Vec<CallRequest> = {
            let state = lock(&self.inner);
            state
                .log_level
                .iter()
                .map(|params| CallRequest::new("logging/setLevel", Some(params.clone())))
                .chain(state.subscriptions.iter().map(|uri| {
                    CallRequest::new("resources/subscribe", Some(json!({ "uri": uri })))
                }))
                .collect()
        };
        if requests.is_empty() {
            return;
        }
        let client = client.clone();
        tokio::spawn(async move {
            for request in requests {
                let method = request.method().to_owned();
                if let Err(error) = client.send_core(request).await {
                    tracing::warn!(%method, %error, "could not restore the host's session state");
                }
            }
        });
    }
}
