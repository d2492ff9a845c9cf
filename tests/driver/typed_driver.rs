//! The driver's part of the typed surface over a scriptable server: capabilities declared by
//! handlers, the token provider on every kind of request, the server's cancellation of its
//! own request.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::Method;
use mcp_resume::client::models::CreateMessageResult;
use mcp_resume::{Client, ErrorKind, RpcError, TokenRequest, ToolCall};
use serde_json::{json, Value};
use support::*;
use tokio::sync::mpsc;

fn builder(server: &TestServer) -> mcp_resume::ClientBuilder {
    Client::builder(&server.url)
        .call_timeout(Duration::from_secs(10))
        .jitter_seed(3)
}

#[tokio::test]
async fn handlers_declare_their_capabilities_beside_the_applications() {
    let server = TestServer::start(default_reply).await;
    let client = builder(&server)
        .client_capabilities(json!({"experimental": {"x": 1}, "roots": {"listChanged": false}}))
        .on_sampling(|_, _| async { Ok(CreateMessageResult::new("m", "t")) })
        .on_roots(|_| async { Ok(vec![]) })
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    let init = server.wait_for(|r| r.is_rpc("initialize")).await;
    assert_eq!(
        init.params()["capabilities"],
        json!({"experimental": {"x": 1}, "roots": {"listChanged": false}, "sampling": {}})
    );
}

#[test]
fn a_static_token_and_a_provider_cannot_both_be_set() {
    let err = Client::builder("http://127.0.0.1:1/mcp")
        .bearer_token("t")
        .auth(|_: TokenRequest| async { Ok::<_, mcp_resume::Error>("u".to_owned()) })
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}

/// The call's POST stream ends after one event without the response; the resume GET
/// (`Last-Event-ID`) delivers it. Every request, the resume and the DELETE included, carries
/// the provider's token.
#[tokio::test]
async fn the_providers_token_goes_on_every_request_resumes_and_delete_included() {
    let call_id: Arc<Mutex<Option<Value>>> = Arc::default();
    let seen = call_id.clone();
    let server = TestServer::start(move |req| {
        if req.method == Method::GET {
            return match req.header("last-event-id") {
                Some("e1") => {
                    let id = seen.lock().unwrap().clone().unwrap_or(Value::Null);
                    let answer = json!({"jsonrpc": "2.0", "id": id,
                        "result": {"content": [{"type": "text", "text": "resumed"}]}});
                    sse_text(sse_event(Some("e2"), &answer))
                }
                _ => status(405),
            };
        }
        if req.is_rpc("tools/call") {
            *seen.lock().unwrap() = Some(req.rpc_id());
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": "info", "data": "working"}});
            return sse_text(sse_event(Some("e1"), &note));
        }
        default_reply(req)
    })
    .await;
    let asked = Arc::new(Mutex::new(0u32));
    let count = asked.clone();
    let client = builder(&server)
        .auth(move |request: TokenRequest| {
            assert!(!request.is_refresh());
            *count.lock().unwrap() += 1;
            async { Ok::<_, mcp_resume::Error>("t-1".to_owned()) }
        })
        .build()
        .unwrap();
    let reply = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "x"}))))
        .await
        .unwrap();
    assert_eq!(reply.text(), "resumed");
    guarded(client.close()).await.unwrap();
    server.wait_for(|r| r.method == Method::DELETE).await;

    let requests = server.requests();
    assert!(requests
        .iter()
        .any(|r| r.method == Method::GET && r.header("last-event-id") == Some("e1")));
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some("Bearer t-1"),
            "{}",
            r.label()
        );
    }
    assert_eq!(*asked.lock().unwrap() as usize, requests.len());
}

/// A 401 answered with a fresh token: the same body is sent again and the call succeeds;
/// the provider is asked with the refused token and the challenge.
#[tokio::test]
async fn a_refused_token_is_replaced_once_and_the_request_sent_again() {
    let server = TestServer::start(|req| {
        if req.header("authorization") != Some("Bearer fresh") {
            let mut refused = status(401);
            refused.headers_mut().insert(
                "www-authenticate",
                r#"Bearer error="invalid_token", scope="tools""#.parse().unwrap(),
            );
            return refused;
        }
        default_reply(req)
    })
    .await;
    let refreshes: Arc<Mutex<Vec<TokenRequest>>> = Arc::default();
    let log = refreshes.clone();
    let token = Arc::new(Mutex::new("stale".to_owned()));
    let client = builder(&server)
        .open_listen_stream(false)
        .auth(move |request: TokenRequest| {
            let mut current = token.lock().unwrap();
            if request.is_refresh() {
                // Renew only if nobody did since the refusal.
                if request.refused_token.as_deref() == Some(current.as_str()) {
                    *current = "fresh".to_owned();
                }
                log.lock().unwrap().push(request);
            }
            let value = current.clone();
            async move { Ok::<_, mcp_resume::Error>(value) }
        })
        .build()
        .unwrap();
    guarded(client.ping()).await.unwrap();
    let requests = server.requests();
    // initialize refused once and sent again with the same body, then ping and initialized.
    assert_eq!(requests[0].header("authorization"), Some("Bearer stale"));
    assert_eq!(requests[1].header("authorization"), Some("Bearer fresh"));
    assert_eq!(requests[0].body, requests[1].body);
    let refreshes = refreshes.lock().unwrap();
    assert_eq!(refreshes.len(), 1);
    assert_eq!(refreshes[0].refused_token.as_deref(), Some("stale"));
    assert_eq!(
        refreshes[0].challenge.as_ref().unwrap().scope.as_deref(),
        Some("tools")
    );
}

/// The server cancels a request it sent: the handler's future is dropped and no answer is
/// posted for it. The id is free again: a later request under it is handled and answered (it
/// used to stay held for good, the later request ignored and never answered).
#[tokio::test]
async fn the_servers_cancellation_drops_the_handler_and_sends_no_answer() {
    let server = TestServer::start(|req| {
        if req.method == Method::GET {
            let ask = json!({"jsonrpc": "2.0", "id": "s1", "method": "x/slow"});
            let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "s1", "reason": "changed my mind"}});
            return sse_open(sse_event(None, &ask) + &sse_event(None, &cancel));
        }
        if req.is_rpc("x/trigger") {
            // The server asks again under the id it cancelled, on the trigger's stream.
            let ask = json!({"jsonrpc": "2.0", "id": "s1", "method": "x/quick"});
            let done = result_msg(req, json!({}));
            return sse_text(sse_event(None, &ask) + &sse_event(None, &done));
        }
        default_reply(req)
    })
    .await;
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel::<()>();
    struct OnDrop(mpsc::UnboundedSender<()>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    let client = builder(&server)
        .on_server_request(move |req| {
            let guard = OnDrop(dropped_tx.clone());
            let slow = req.method == "x/slow";
            async move {
                let _guard = guard;
                if slow {
                    std::future::pending::<()>().await;
                }
                Ok::<Value, RpcError>(json!({"again": true}))
            }
        })
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    guarded(dropped.recv()).await.unwrap();
    // The dropped handler has no answer to post; a round trip leaves a stray one time to show.
    guarded(client.ping()).await.unwrap();
    let answered = server
        .requests()
        .iter()
        .any(|r| r.method == Method::POST && r.rpc_id() == json!("s1"));
    assert!(!answered, "{:?}", server.labels());

    let _: Value = guarded(client.request(mcp_resume::Request::new("x/trigger", None)))
        .await
        .unwrap();
    let answer = server
        .wait_for(|r| r.method == Method::POST && r.rpc_id() == json!("s1"))
        .await;
    assert_eq!(answer.body.unwrap()["result"], json!({"again": true}));
}

/// A handler may use the client from the moment it is called, before its future runs: the
/// handler is called outside the session's lock, so a notification sent from its body goes
/// out, and so does its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_may_call_the_client_as_soon_as_it_is_called() {
    let server = TestServer::start(|req| {
        if req.method == Method::GET {
            let ask = json!({"jsonrpc": "2.0", "id": "s1", "method": "x/ask"});
            return sse_open(sse_event(None, &ask));
        }
        default_reply(req)
    })
    .await;
    let slot: Arc<std::sync::OnceLock<Client>> = Arc::default();
    let client = builder(&server)
        .on_server_request({
            let slot = slot.clone();
            move |_req| {
                if let Some(client) = slot.get() {
                    client.notify("notifications/x/asked", None).unwrap();
                }
                async { Ok::<Value, RpcError>(json!({"ok": true})) }
            }
        })
        .build()
        .unwrap();
    // Through a weak link in a real program; a test may leak one client.
    let _ = slot.set(client.clone());
    guarded(client.connect()).await.unwrap();
    server.wait_for(|r| r.is_rpc("notifications/x/asked")).await;
    let answer = server
        .wait_for(|r| r.method == Method::POST && r.rpc_id() == json!("s1"))
        .await;
    assert_eq!(answer.body.unwrap()["result"], json!({"ok": true}));
}
