//! The typed client surface against the official TypeScript SDK server
//! (`tests/interop/ts-server.mjs`): every typed method, the typed notifications, the
//! server-request handlers and the token provider, each checked on the server's own log.

use crate::interop_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use mcp_resume::client::models::{
    CompleteRequest, CompletionReference, Content, CreateMessageResult, ElicitAction, ElicitResult,
    ListKind, LoggingLevel, Role, Root, TypedNotification,
};
use mcp_resume::{Client, ErrorKind, RequestContext, SessionEvent, TokenRequest, ToolCall};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use interop_support::TsServer;

/// Hang guard for anything awaited in these tests.
const GUARD: Duration = Duration::from_secs(20);

fn client(server: &TsServer) -> mcp_resume::ClientBuilder {
    Client::builder(&server.url).call_timeout(GUARD)
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {GUARD:?}"))
}

/// The next notification whose typed view `pick` accepts (hang-guarded).
async fn next_typed<T>(
    notifications: &mut mcp_resume::NotificationStream,
    what: &str,
    pick: impl Fn(&mcp_resume::ServerNotification, TypedNotification) -> Option<T>,
) -> T {
    within(what, async {
        loop {
            let n = notifications
                .recv()
                .await
                .expect("notification stream ended");
            if let Some(found) = pick(&n, n.typed()) {
                return found;
            }
        }
    })
    .await
}

/// Waits until the standalone stream is open. This server drops a notification sent outside
/// any request when no such stream is open, so a test that triggers one waits for this first.
async fn listening(events: &mut mcp_resume::EventStream) {
    within("listening", async {
        while let Some(event) = events.recv().await {
            if matches!(event, SessionEvent::Listening) {
                return;
            }
        }
        panic!("event stream ended before the standalone stream opened");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_follow_cursors_and_keep_unknown_members() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();

    let resources = within("list_resources", client.list_resources())
        .await
        .unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "mem://notes/1",
            "mem://notes/2",
            "mem://notes/3",
            "mem://notes/4",
            "mem://notes/5",
            "mem://blob"
        ]
    );
    // Three pages, each asked for with the previous page's cursor.
    let cursors: Vec<Value> = server
        .wait_count("list", 3, GUARD, |e| e["method"] == "resources/list")
        .await
        .iter()
        .map(|e| e["cursor"].clone())
        .collect();
    assert_eq!(cursors, [json!(null), json!("2"), json!("4")]);
    let note = &resources[2];
    assert_eq!(note.title.as_deref(), Some("Note 3"));
    assert_eq!(note.mime_type.as_deref(), Some("text/plain"));
    assert_eq!(note.size, Some(11));
    let annotations = note.annotations.as_ref().unwrap();
    assert_eq!(annotations.audience, Some(vec![Role::User]));
    assert_eq!(annotations.priority, Some(0.3));
    assert_eq!(note.extra["x-vendor"], json!({"shard": 1}));
    // Serialized back, a resource is what the server sent.
    assert_eq!(
        serde_json::to_value(note).unwrap(),
        json!({"uri": "mem://notes/3", "name": "note-3", "title": "Note 3",
               "mimeType": "text/plain", "size": 11,
               "annotations": {"audience": ["user"], "priority": 0.3},
               "x-vendor": {"shard": 1}})
    );

    let first = within("page", client.list_resources_page(None))
        .await
        .unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.next_cursor.as_deref(), Some("2"));
    assert_eq!(first.raw["_meta"], json!({"x-page-note": "kept"}));
    let last = within("page", client.list_resources_page(Some("4")))
        .await
        .unwrap();
    assert_eq!(last.items.len(), 2);
    assert_eq!(last.next_cursor, None);
    let bad = within("page", client.list_resources_page(Some("nope")))
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::Rpc);
    assert_eq!(bad.rpc_error().unwrap().code, -32602);

    let templates = within("templates", client.list_resource_templates())
        .await
        .unwrap();
    assert_eq!(templates.len(), 1);
    assert_eq!(templates[0].uri_template, "mem://notes/{id}");
    assert_eq!(templates[0].title.as_deref(), Some("A note by id"));

    let prompts = within("prompts", client.list_prompts()).await.unwrap();
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["greet", "summarize"]);
    assert_eq!(prompts[0].arguments.len(), 2);
    assert_eq!(prompts[0].arguments[0].required, Some(true));
    assert_eq!(
        prompts[1].extra["icons"],
        json!([{"src": "https://example.com/icon.png", "mimeType": "image/png"}])
    );
    let page = within("prompts page", client.list_prompts_page(None))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.next_cursor.as_deref(), Some("1"));

    // JSON Schemas arrive verbatim: `$ref` unresolved, 2020-12 keywords kept.
    let tools = within("tools", client.list_tools()).await.unwrap();
    let rich = tools.iter().find(|t| t.name == "schema_rich").unwrap();
    assert_eq!(
        rich.input_schema,
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"positive": {"type": "integer", "exclusiveMinimum": 0}},
            "properties": {
                "n": {"$ref": "#/$defs/positive"},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}],
                         "items": false}
            },
            "dependentRequired": {"pair": ["n"]},
            "unevaluatedProperties": false
        })
    );
    assert_eq!(
        rich.output_schema.as_ref().unwrap()["properties"]["doubled"],
        json!({"$ref": "#/$defs/positive"})
    );
    assert!(rich.is_read_only_hint() && rich.is_idempotent_hint());
    assert_eq!(rich.raw["x-vendor"], json!({"tier": "gold"}));
    let tools_page = within("tools page", client.list_tools_page(None))
        .await
        .unwrap();
    assert_eq!(tools_page.items.len(), tools.len());
    assert_eq!(tools_page.next_cursor, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_are_read_as_text_or_blob() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();

    let note = within("read", client.read_resource("mem://notes/3"))
        .await
        .unwrap();
    assert_eq!(note.text(), "note 3 body");
    assert_eq!(note.contents[0].uri, "mem://notes/3");
    assert_eq!(note.contents[0].mime_type.as_deref(), Some("text/plain"));

    let blob = within("read", client.read_resource("mem://blob"))
        .await
        .unwrap();
    assert_eq!(blob.contents[0].blob.as_deref(), Some("AQID"));
    assert_eq!(blob.contents[0].text, None);

    let missing = within("read", client.read_resource("mem://nothing"))
        .await
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::Rpc);
    let rpc = missing.rpc_error().unwrap();
    assert_eq!(rpc.code, -32002);
    assert_eq!(rpc.data, Some(json!({"uri": "mem://nothing"})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_render_with_typed_content_and_arguments_complete() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();

    let greet = within(
        "get_prompt",
        client.get_prompt("greet", [("name", "Ada"), ("language", "fr")]),
    )
    .await
    .unwrap();
    assert_eq!(greet.description.as_deref(), Some("A greeting"));
    assert_eq!(greet.messages[0].role, Role::User);
    assert_eq!(greet.messages[0].content.as_text(), Some("Greet Ada in fr"));
    match &greet.messages[1].content {
        Content::Resource(embedded) => {
            assert_eq!(embedded.resource.uri, "mem://notes/1");
            assert_eq!(embedded.resource.text.as_deref(), Some("note 1 body"));
        }
        other => panic!("expected an embedded resource, got {other:?}"),
    }
    let summarize = within(
        "get_prompt",
        client.get_prompt("summarize", [("uri", "mem://notes/4")]),
    )
    .await
    .unwrap();
    match &summarize.messages[0].content {
        Content::ResourceLink(link) => assert_eq!(link.uri, "mem://notes/4"),
        other => panic!("expected a resource link, got {other:?}"),
    }
    let unknown = within(
        "get_prompt",
        client.get_prompt("nope", std::iter::empty::<(String, String)>()),
    )
    .await
    .unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::Rpc);

    let languages = within(
        "complete",
        client.complete(CompleteRequest::new(
            CompletionReference::prompt("greet"),
            "language",
            "e",
        )),
    )
    .await
    .unwrap();
    assert_eq!(languages.values, ["en", "es"]);
    assert_eq!(languages.total, Some(2));
    assert_eq!(languages.has_more, Some(false));
    let with_context = within(
        "complete",
        client.complete(
            CompleteRequest::new(CompletionReference::prompt("greet"), "language", "e")
                .context_argument("name", "Ada"),
        ),
    )
    .await
    .unwrap();
    assert_eq!(with_context.values, ["en-formal", "es-formal"]);
    let ids = within(
        "complete",
        client.complete(CompleteRequest::new(
            CompletionReference::resource("mem://notes/{id}"),
            "id",
            "",
        )),
    )
    .await
    .unwrap();
    assert_eq!(ids.values, ["1", "2", "3", "4", "5"]);
    let sent = server
        .wait_count("complete", 1, GUARD, |e| !e["context"].is_null())
        .await;
    assert_eq!(sent[0]["context"], json!({"arguments": {"name": "Ada"}}));
    assert_eq!(
        sent[0]["ref"],
        json!({"type": "ref/prompt", "name": "greet"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_level_filters_and_messages_name_their_call() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();
    let mut notifications = client.notifications();

    within("setLevel", client.set_logging_level(LoggingLevel::Warning))
        .await
        .unwrap();
    let call = client
        .start(ToolCall::new(
            "log",
            json!({"levels": ["debug", "info", "warning", "error"]}),
        ))
        .unwrap();
    let id = call.id();
    let result = within("log", call).await.unwrap();
    assert_eq!(result.text(), "logged warning,error");

    let mut seen = Vec::new();
    while seen.len() < 2 {
        let (call, message) = next_typed(&mut notifications, "log message", |n, t| match t {
            TypedNotification::LoggingMessage(m) => Some((n.call, m)),
            _ => None,
        })
        .await;
        assert_eq!(
            call,
            Some(id),
            "a message on the call's stream names the call"
        );
        assert_eq!(message.logger.as_deref(), Some("interop"));
        seen.push(message.level);
    }
    assert_eq!(seen, [LoggingLevel::Warning, LoggingLevel::Error]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_deliver_resource_updates() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();
    let mut events = client.events();
    within("connect", client.connect()).await.unwrap();
    let mut notifications = client.notifications();
    // The update travels on the standalone stream: touch only once it is up.
    listening(&mut events).await;

    within("subscribe", client.subscribe_resource("mem://notes/2"))
        .await
        .unwrap();
    server
        .wait_for("subscribed", GUARD, |e| e["uri"] == "mem://notes/2")
        .await;
    let touched = within(
        "touch",
        client.call_tool(ToolCall::new(
            "touch_resource",
            json!({"uri": "mem://notes/2"}),
        )),
    )
    .await
    .unwrap();
    assert_eq!(touched.text(), "updated mem://notes/2");
    let uri = next_typed(&mut notifications, "resource update", |n, t| match t {
        // Sent on the standalone stream: it belongs to no call.
        TypedNotification::ResourceUpdated { uri } if n.call.is_none() => Some(uri),
        _ => None,
    })
    .await;
    assert_eq!(uri, "mem://notes/2");
    // Read it again, as the update asks.
    let note = within("read", client.read_resource(&uri)).await.unwrap();
    assert_eq!(note.text(), "note 2 body");

    within("unsubscribe", client.unsubscribe_resource("mem://notes/2"))
        .await
        .unwrap();
    let after = within(
        "touch",
        client.call_tool(ToolCall::new(
            "touch_resource",
            json!({"uri": "mem://notes/2"}),
        )),
    )
    .await
    .unwrap();
    assert_eq!(after.text(), "not subscribed to mem://notes/2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_is_observed_and_the_list_fetched_again() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();
    let mut events = client.events();
    within("connect", client.connect()).await.unwrap();
    let mut notifications = client.notifications();
    // The notification travels on the standalone stream.
    listening(&mut events).await;
    let before = within("tools", client.list_tools()).await.unwrap();
    assert!(!before.iter().any(|t| t.name == "fresh"));

    within(
        "add_tool",
        client.call_tool(ToolCall::new("add_tool", json!({"name": "fresh"}))),
    )
    .await
    .unwrap();
    next_typed(&mut notifications, "list_changed", |_, t| {
        (t == TypedNotification::ListChanged(ListKind::Tools)).then_some(())
    })
    .await;
    let after = within("tools", client.list_tools()).await.unwrap();
    assert_eq!(after.len(), before.len() + 1);
    assert!(after.iter().any(|t| t.name == "fresh"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_stream_their_own_progress() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();

    // No progress token given: the handle brings its own.
    let mut call = client
        .start(ToolCall::new("progress", json!({"steps": 4})))
        .unwrap();
    let mut progress = call.progress();
    let result = within("progress", &mut call).await.unwrap();
    assert_eq!(result.text(), "progress done after 4 steps");
    let steps: Vec<f64> = within("progress stream", progress.by_ref().collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|p| {
            assert_eq!(p.total, Some(4.0));
            p.progress
        })
        .collect();
    assert_eq!(steps, [1.0, 2.0, 3.0, 4.0]);
    server.settle().await;
    let run = server
        .find("tool", |e| e["name"] == "progress")
        .pop()
        .unwrap();
    // The client's own token: this process's mark, then the call's id.
    let token = run["meta"]["progressToken"].as_str().unwrap_or_default();
    assert!(
        token.starts_with("mcp-resume-") && token.ends_with(&format!("-{}", call.id().get())),
        "{token}"
    );

    // Any request can be a handle, with its result typed by the caller.
    #[derive(serde::Deserialize)]
    struct Listed {
        tools: Vec<Value>,
    }
    let listed: Listed = within(
        "typed handle",
        client
            .start(mcp_resume::Request::new("tools/list", json!({})))
            .unwrap()
            .typed::<Listed>(),
    )
    .await
    .unwrap();
    assert!(!listed.tools.is_empty());
    let as_typed: Listed = within(
        "request",
        client.request(mcp_resume::Request::new("tools/list", None)),
    )
    .await
    .unwrap();
    assert_eq!(as_typed.tools.len(), listed.tools.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_with_a_reason_stops_the_server_side_call() {
    let server = TsServer::start(&[]);
    let client = client(&server).build().unwrap();
    within("connect", client.connect()).await.unwrap();

    let call = client.start(ToolCall::new("block", json!({}))).unwrap();
    server
        .wait_for("tool", GUARD, |e| e["name"] == "block")
        .await;
    call.cancel("the user pressed stop");
    server.wait_for("cancelled", GUARD, |_| true).await;
    let cancel = server
        .wait_for("http_in", GUARD, |e| {
            e["rpc_method"] == "notifications/cancelled"
        })
        .await;
    assert_eq!(cancel["method"], "POST");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_handler_answers_and_declares_its_capability() {
    let server = TsServer::start(&[]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let client = client(&server)
        .on_sampling(move |request, ctx| {
            let record = record.clone();
            async move {
                assert_eq!(ctx.method(), "sampling/createMessage");
                let prompt = request.messages[0].text();
                record.lock().unwrap().push(request);
                Ok(
                    CreateMessageResult::new("rust-model", format!("echo {prompt}"))
                        .stop_reason("endTurn"),
                )
            }
        })
        .build()
        .unwrap();
    let init = within("connect", client.connect()).await.unwrap();
    assert_eq!(init.server_name, "mcp-resume-interop-ts");

    let result = within(
        "sample",
        client.call_tool(ToolCall::new(
            "sample",
            json!({"prompt": "capital of France?"}),
        )),
    )
    .await
    .unwrap();
    assert_eq!(result.text(), "rust-model: echo capital of France?");
    let request = seen.lock().unwrap().pop().unwrap();
    assert_eq!(request.system_prompt.as_deref(), Some("Answer briefly."));
    assert_eq!(request.max_tokens, 64);
    assert_eq!(request.temperature, Some(0.3));
    assert_eq!(request.metadata, Some(json!({"x-trace": "abc"})));
    let sampled = server.wait_for("sampled", GUARD, |_| true).await;
    assert_eq!(sampled["result"]["stopReason"], "endTurn");
    assert_eq!(sampled["result"]["role"], "assistant");

    // Without the handler the capability is not declared, and the server will not ask.
    let bare = client_without_handlers(&server);
    let refused = within(
        "sample",
        bare.call_tool(ToolCall::new("sample", json!({"prompt": "x"}))),
    )
    .await;
    let message = match refused {
        Ok(r) => r.text(),
        Err(e) => e.to_string(),
    };
    assert!(message.contains("sampling"), "{message}");
}

fn client_without_handlers(server: &TsServer) -> Client {
    client(server).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_and_roots_handlers_answer_typed() {
    let server = TsServer::start(&[]);
    let client = client(&server)
        .on_elicitation(|request, _ctx| async move {
            assert_eq!(request.message, "What is your name?");
            assert!(!request.is_url_mode());
            // The form's schema arrives verbatim, defaults included.
            let schema = request.requested_schema.unwrap();
            assert_eq!(schema["properties"]["name"]["default"], "anonymous");
            Ok(ElicitResult::accept(json!({"name": "Ada"})))
        })
        .on_roots(|_ctx| async move {
            Ok(vec![
                Root::new("file:///work/project").name("project"),
                Root::new("file:///tmp"),
            ])
        })
        .build()
        .unwrap();

    let elicited = within(
        "elicit",
        client.call_tool(ToolCall::new("elicit", json!({}))),
    )
    .await
    .unwrap();
    assert_eq!(
        elicited.structured_content,
        Some(json!({"action": "accept", "content": {"name": "Ada"}}))
    );
    let roots = within("roots", client.call_tool(ToolCall::new("roots", json!({}))))
        .await
        .unwrap();
    assert_eq!(
        roots.structured_content,
        Some(
            json!({"roots": [{"uri": "file:///work/project", "name": "project"},
                              {"uri": "file:///tmp"}]})
        )
    );
    // The capabilities were declared at initialize by the handlers alone.
    let init = server
        .wait_for("http_in", GUARD, |e| e["rpc_method"] == "initialize")
        .await;
    assert_eq!(init["rpc_method"], "initialize");
    client.notify_roots_changed().unwrap();
    server
        .wait_for("http_in", GUARD, |e| {
            e["rpc_method"] == "notifications/roots/list_changed"
        })
        .await;

    let declining = Client::builder(&server.url)
        .call_timeout(GUARD)
        .on_elicitation(|_, _| async { Ok(ElicitResult::decline()) })
        .build()
        .unwrap();
    let declined = within(
        "elicit",
        declining.call_tool(ToolCall::new("elicit", json!({}))),
    )
    .await
    .unwrap();
    let action = declined.structured_content.unwrap()["action"].clone();
    assert_eq!(
        serde_json::from_value::<ElicitAction>(action).unwrap(),
        ElicitAction::Decline
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_cancellation_reaches_the_handler_and_no_answer_is_sent() {
    let server = TsServer::start(&[]);
    let (started_tx, mut started) = mpsc::unbounded_channel::<RequestContext>();
    let client = client(&server)
        .on_sampling(move |_request, ctx| {
            let started_tx = started_tx.clone();
            async move {
                let _ = started_tx.send(ctx);
                // A model call that never ends: only the cancellation stops it.
                std::future::pending::<()>().await;
                Ok(CreateMessageResult::new("never", "never"))
            }
        })
        .build()
        .unwrap();

    let call = client
        .start(ToolCall::new("sample_then_cancel", json!({})))
        .unwrap();
    let ctx = within("handler started", started.recv()).await.unwrap();
    assert!(!ctx.is_cancelled());
    server.admin("/admin/release").await;
    let reason = within("cancellation", ctx.cancelled()).await;
    assert_eq!(reason, "the tool no longer needs it");
    assert!(ctx.is_cancelled());

    let result = within("tool", call).await.unwrap();
    assert!(result.text().starts_with("rejected"), "{}", result.text());
    // The cancelled request was never answered.
    let id = ctx.request_id().to_json();
    let answers = server.find("http_in", |e| {
        e["rpc_method"].is_null() && e["rpc_id"] == id
    });
    assert!(
        answers.is_empty(),
        "answered after cancellation:\n{}",
        server.dump()
    );
}

/// A client for the token tests: without the standalone stream, whose GET opens after
/// `connect()` returns and, when a loaded machine sends it after the token was rotated or
/// refused, asks for a refresh of its own (each refused request does, as documented), so the
/// refreshes counted would depend on timing.
fn client_for_tokens(server: &TsServer) -> mcp_resume::ClientBuilder {
    client(server).open_listen_stream(false)
}

/// A token provider backed by the server's token endpoint, counting what it was asked.
fn provider(
    server: &TsServer,
    asked: Arc<Mutex<Vec<TokenRequest>>>,
) -> impl mcp_resume::TokenProvider {
    let base = server.url.trim_end_matches("/mcp").to_owned();
    let cached: Arc<Mutex<Option<String>>> = Arc::default();
    move |request: TokenRequest| {
        let base = base.clone();
        let cached = cached.clone();
        asked.lock().unwrap().push(request.clone());
        async move {
            if !request.is_refresh() {
                if let Some(token) = cached.lock().unwrap().clone() {
                    return Ok(token);
                }
            }
            let body = reqwest::Client::new()
                .post(format!("{base}/admin/token"))
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .map_err(mcp_resume::Error::token_unavailable)?
                .bytes()
                .await
                .map_err(mcp_resume::Error::token_unavailable)?;
            let token = serde_json::from_slice::<Value>(&body).unwrap()["token"]
                .as_str()
                .unwrap()
                .to_owned();
            *cached.lock().unwrap() = Some(token.clone());
            Ok(token)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_is_refreshed_once_and_the_session_kept() {
    let server = TsServer::start(&["--auth"]);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let client = client_for_tokens(&server)
        .auth(provider(&server, asked.clone()))
        .build()
        .unwrap();
    within("connect", client.connect()).await.unwrap();
    within(
        "echo",
        client.call_tool(ToolCall::new("echo", json!({"text": "a"}))),
    )
    .await
    .unwrap();
    assert!(
        server.find("auth_refused", |_| true).is_empty(),
        "{}",
        server.dump()
    );

    server.admin("/admin/rotate").await;
    let reply = within(
        "echo",
        client.call_tool(ToolCall::new("echo", json!({"text": "b"}))),
    )
    .await
    .unwrap();
    assert_eq!(reply.text(), "b");

    // One refusal of the call's POST, one refresh, the same request sent again, same session.
    let refused = server
        .wait_count("auth_refused", 1, GUARD, |e| e["method"] == "POST")
        .await;
    assert_eq!(refused.len(), 1, "{}", server.dump());
    assert_eq!(refused[0]["presented"], "tok-1");
    let sessions = server.find("session_created", |_| true);
    assert_eq!(
        sessions.len(),
        1,
        "the session was kept:\n{}",
        server.dump()
    );
    let runs = server
        .wait_count("tool", 2, GUARD, |e| e["name"] == "echo")
        .await;
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r["session"] == sessions[0]["session"]));
    let refreshes: Vec<TokenRequest> = asked
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.is_refresh())
        .cloned()
        .collect();
    assert_eq!(refreshes.len(), 1);
    let challenge = refreshes[0].challenge.as_ref().unwrap();
    assert_eq!(refreshes[0].refused_token.as_deref(), Some("tok-1"));
    assert_eq!(challenge.status, 401);
    assert_eq!(challenge.error.as_deref(), Some("invalid_token"));
    assert_eq!(
        challenge.scopes().collect::<Vec<_>>(),
        ["mcp:tools", "mcp:resources"]
    );

    // DELETE carries the fresh token too.
    within("close", client.close()).await.unwrap();
    let delete = server
        .wait_for("http_done", GUARD, |e| e["method"] == "DELETE")
        .await;
    assert_eq!(delete["status"], 200, "{}", server.dump());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_fresh_token_is_an_unauthorized_error_with_the_challenge() {
    let server = TsServer::start(&["--auth"]);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let client = client_for_tokens(&server)
        .auth(provider(&server, asked.clone()))
        .build()
        .unwrap();
    within("connect", client.connect()).await.unwrap();

    server.admin("/admin/refuse").await;
    let err = within(
        "echo",
        client.call_tool(ToolCall::new("echo", json!({"text": "x"}))),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err:?}");
    let challenge = err.auth_challenge().expect("the challenge is on the error");
    assert_eq!(challenge.status, 401);
    assert_eq!(challenge.error.as_deref(), Some("invalid_token"));
    assert_eq!(challenge.scope.as_deref(), Some("mcp:tools mcp:resources"));
    let metadata = challenge.resource_metadata.as_deref().unwrap();
    assert!(
        metadata.starts_with("http://127.0.0.1:")
            && metadata.ends_with("/.well-known/oauth-protected-resource"),
        "{metadata}"
    );
    // Sent twice (the first token, then the fresh one), never run.
    let refused = server
        .wait_count("auth_refused", 2, GUARD, |e| e["method"] == "POST")
        .await;
    assert_eq!(refused.len(), 2, "{}", server.dump());
    server.settle().await;
    assert!(server.find("tool", |e| e["name"] == "echo").is_empty());
    assert_eq!(
        asked
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.is_refresh())
            .count(),
        1
    );

    // A static token the server refuses gives the same typed error, without a retry.
    let fixed = Client::builder(&server.url)
        .call_timeout(GUARD)
        .bearer_token("tok-1")
        .build()
        .unwrap();
    let err = within("connect", fixed.connect()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err:?}");
    assert!(err.auth_challenge().unwrap().resource_metadata.is_some());
}
