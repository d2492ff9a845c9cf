//! The cluster in the 2026-07-28 era, over raw HTTP and checked against the oracle: discovery,
//! the server validation of the mirrored headers, statelessness behind round-robin (shared
//! `prepare` handles, idempotency keys and tasks), cancellation by a closed stream, crashes
//! mid-call, MRTR, `subscriptions/listen`, and a dual-era cluster.
//!
//! Routing is deterministic: the n-th request of a test lands on instance n mod N.

use crate::common;

use common::modern::*;
use common::*;
use mock_server::{Cluster, ClusterConfig, ClusterEra, Preset};
use serde_json::{json, Value};

const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";
const SAFETY_EXT: &str = "io.github.mcp-resume/resume-safety";

fn caps(temperature: f64) -> Value {
    json!({"experimental": {"sampling": {"temperature": temperature}}})
}

async fn cluster(preset: Preset, instances: usize, cut_after: Option<u32>) -> Cluster {
    Cluster::start(ClusterConfig {
        preset,
        era: ClusterEra::Modern,
        instances,
        idle_timeout: None,
        cut_after_events: cut_after,
        ..Default::default()
    })
    .await
    .expect("cluster starts")
}

fn result(reply: &Reply) -> Value {
    let resp = reply.response().unwrap_or_else(|| panic!("{reply:?}"));
    resp.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("no result: {resp}"))
}

#[tokio::test]
async fn discovery_advertises_the_revision_list_changes_tasks_and_idempotency() {
    for extension in [true, false] {
        let c = Cluster::start(ClusterConfig {
            era: ClusterEra::Modern,
            extension,
            ..Default::default()
        })
        .await
        .unwrap();
        let mcp = Mcp::new(c.url());
        let r = mcp
            .modern(Req::new(1, "server/discover", json!({}), &json!({})))
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.header("mcp-session-id").is_none());
        let d = result(&r);
        assert_eq!(d["resultType"], "complete");
        assert_eq!(d["supportedVersions"], json!([MODERN]));
        assert_eq!(d["capabilities"]["tools"]["listChanged"], true);
        assert!(d["capabilities"]["extensions"][TASKS_EXT].is_object());
        assert_eq!(
            d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "mcp-resume-mock"
        );
        let safety = &d["capabilities"]["extensions"][SAFETY_EXT];
        if extension {
            assert_eq!(
                *safety,
                json!({"version": 1, "idempotency": {
                    "metaKey": "io.github.mcp-resume/idempotency-key",
                    "header": "Idempotency-Key"}})
            );
        } else {
            assert!(safety.is_null(), "{d}");
            assert!(d["capabilities"].get("experimental").is_none(), "{d}");
        }
        let tools = result(
            &mcp.modern(Req::new(2, "tools/list", json!({}), &json!({})))
                .await,
        );
        assert_eq!(tools["resultType"], "complete");
        assert_eq!(tools["cacheScope"], "public");
        let names: Vec<&str> = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        for tool in ["echo", "slow", "generate", "prepare", "commit"] {
            assert!(names.contains(&tool), "{names:?}");
        }
        for tool in ["counter_increment", "confirm", "batch_job"] {
            assert!(names.contains(&tool), "{names:?}");
        }
        c.shutdown().await;
    }
}

#[tokio::test]
async fn the_mirrored_headers_are_validated_against_the_body() {
    let c = cluster(Preset::Strict, 1, None).await;
    let mcp = Mcp::new(c.url());
    let echo = || {
        Req::new(
            1,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
            &json!({}),
        )
    };
    let refused = |r: &Reply, code: i64| {
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(rpc_code(r), Some(code), "{}", r.body);
    };
    refused(
        &mcp.modern(echo().header("mcp-protocol-version", None))
            .await,
        -32020,
    );
    refused(&mcp.modern(echo().header("mcp-method", None)).await, -32020);
    refused(
        &mcp.modern(echo().header("mcp-method", Some("tools/list")))
            .await,
        -32020,
    );
    refused(&mcp.modern(echo().header("mcp-name", None)).await, -32020);
    refused(
        &mcp.modern(echo().header("mcp-name", Some("generate")))
            .await,
        -32020,
    );
    refused(
        &mcp.modern(echo().meta(META_VERSION, json!("2025-11-25")))
            .await,
        -32020,
    );
    // A version the server does not speak, consistently in header and body.
    let r = mcp
        .modern(
            echo()
                .meta(META_VERSION, json!("2099-01-01"))
                .header("mcp-protocol-version", Some("2099-01-01")),
        )
        .await;
    refused(&r, -32022);
    let data = &r.response().unwrap()["error"]["data"];
    assert_eq!(data["supported"], json!([MODERN]));
    assert_eq!(data["requested"], "2099-01-01");
    // Without client capabilities in `_meta` the request says nothing of its context.
    let mut no_caps = echo();
    no_caps.params["_meta"]
        .as_object_mut()
        .unwrap()
        .remove(META_CAPS);
    refused(&mcp.modern(no_caps).await, -32602);
    // A name in the base64 sentinel is decoded before it is compared.
    let ok = mcp
        .modern(echo().header("mcp-name", Some("=?base64?ZWNobw==?=")))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(result_text(&ok.response().unwrap()), "hi");
    assert_eq!(result(&ok)["resultType"], "complete");
    // Legacy traffic: initialize names the versions spoken here; GET and DELETE are not
    // served; an unknown method is a modern 404.
    let init = mcp
        .post(
            None,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "legacy", "version": "0"}}}),
        )
        .await;
    refused(&init, -32022);
    assert_eq!(
        init.json()["error"]["data"]["supported"],
        json!([MODERN]),
        "{}",
        init.body
    );
    assert!(init.header("mcp-session-id").is_none());
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = mcp
            .http
            .request(method, &mcp.url)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 405);
        assert_eq!(r.headers()["allow"], "POST");
    }
    let unknown = mcp.modern(Req::new(9, "ping", json!({}), &json!({}))).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(rpc_code(&unknown), Some(-32601));
    assert_eq!(
        c.oracle().totals.executions,
        1,
        "only the accepted echo ran"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn each_request_runs_under_the_context_it_carried_on_any_instance() {
    // Every preset: the modern era has no session to place; `prepare` handles are shared.
    for preset in Preset::ALL {
        let c = cluster(preset, 3, None).await;
        let mcp = Mcp::new(c.url());
        for (i, t) in [0.2, 0.7, 0.2].into_iter().enumerate() {
            let r = mcp
                .modern_call(
                    i as u64,
                    "generate",
                    json!({"prompt": "p"}),
                    &format!("g{i}"),
                    &caps(t),
                )
                .await;
            assert_eq!(result(&r)["structuredContent"]["temperature"], t);
        }
        let prepared = mcp
            .modern_call(10, "prepare", json!({"item": "x"}), "prep", &json!({}))
            .await; // I0
        let record = result(&prepared)["structuredContent"]["record"]
            .as_str()
            .unwrap()
            .to_owned();
        let commit = mcp
            .modern_call(
                11,
                "commit",
                json!({"record": record}),
                "commit",
                &json!({}),
            )
            .await; // I1
        assert!(result_text(&commit.response().unwrap()).starts_with("committed"));
        let o = c.oracle();
        assert_eq!(o.totals.wrong_capability, 0, "{preset}");
        assert_eq!(o.totals.unknown_record, 0, "{preset}");
        assert_eq!(o.totals.initializes, 0, "{preset}");
        let instances: Vec<usize> = o.executions.iter().map(|e| e.instance).collect();
        assert_eq!(instances, [0, 1, 2, 0, 1], "{preset}: round-robin");
        for e in &o.executions {
            assert_eq!(e.session, "");
            assert_eq!(
                e.expected_capability_hash.as_deref(),
                Some(e.capability_hash.as_str())
            );
        }
        let g1 = o.executions_tagged("g1").next().unwrap();
        assert_eq!(g1.carried_capabilities, Some(caps(0.7)));
        c.shutdown().await;
    }
}

/// Judged only against what each request carried, a request carrying other capabilities than
/// its client negotiated looks right (above: 0.7 passes). Told the capabilities the clients
/// are configured with, the oracle flags it, on every instance; more capabilities are fine.
#[tokio::test]
async fn told_the_expected_capabilities_the_oracle_flags_a_request_carrying_others() {
    let c = Cluster::start(ClusterConfig {
        era: ClusterEra::Modern,
        instances: 2,
        idle_timeout: None,
        expected_client_capabilities: Some(caps(0.2)),
        ..Default::default()
    })
    .await
    .unwrap();
    let mcp = Mcp::new(c.url());
    let mut more = caps(0.2);
    more["elicitation"] = json!({});
    let sent = [
        ("right", caps(0.2)),
        ("more", more),
        ("hot", caps(1.0)),
        ("bare", json!({})),
    ];
    for (i, (tag, carried)) in sent.iter().enumerate() {
        let r = mcp
            .modern_call(i as u64, "generate", json!({"prompt": "p"}), tag, carried)
            .await;
        // The instance runs under what the request carried, whatever the oracle expects.
        assert_eq!(
            result(&r)["structuredContent"]["temperature"],
            if matches!(*tag, "hot" | "bare") {
                1.0
            } else {
                0.2
            },
            "{tag}"
        );
    }
    let o = c.oracle();
    for (tag, wrong) in [
        ("right", false),
        ("more", false),
        ("hot", true),
        ("bare", true),
    ] {
        let e = o.executions_tagged(tag).next().unwrap();
        assert_eq!(e.wrong_capability, wrong, "{tag}: {e:?}");
        assert_eq!(e.unexpected_client_capabilities, wrong, "{tag}");
    }
    assert_eq!(o.totals.wrong_capability, 2);
    c.shutdown().await;
}

#[tokio::test]
async fn keys_are_deduplicated_across_instances_and_a_repeat_without_one_runs_again() {
    let c = cluster(Preset::Naive, 3, None).await;
    let mcp = Mcp::new(c.url());
    let keyed = |id: u64| {
        Req::new(
            id,
            "tools/call",
            json!({"name": "counter_increment", "arguments": {},
                   "_meta": {TAG: "k", KEY: "key-1"}}),
            &json!({}),
        )
    };
    let first = result(&mcp.modern(keyed(1)).await);
    let second = result(&mcp.modern(keyed(2)).await);
    assert_eq!(first["structuredContent"], second["structuredContent"]);
    for id in 3..5 {
        mcp.modern_call(id, "counter_increment", json!({}), "u", &json!({}))
            .await;
    }
    let t = c.oracle().totals;
    assert_eq!(t.idempotent_replays, 1);
    assert_eq!(t.executions, 3);
    assert_eq!(t.duplicate_side_effects, 1, "the unkeyed repeat ran twice");
    c.shutdown().await;
}

/// A key the guard refuses (here a header and a `_meta` key that disagree) is refused as the
/// guard refuses it, in this era too: 400 `IDEMPOTENCY_KEY_INVALID`, nothing run.
#[tokio::test]
async fn a_conflicting_idempotency_key_is_refused_as_the_guard_refuses_it() {
    let c = cluster(Preset::Strict, 2, None).await;
    let mcp = Mcp::new(c.url());
    let req = Req::new(
        7,
        "tools/call",
        json!({"name": "counter_increment", "arguments": {},
               "_meta": {TAG: "conflict", KEY: "b"}}),
        &json!({}),
    )
    .header("Idempotency-Key", Some("a"));
    let r = mcp.modern(req).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["error"]["data"]["code"], "IDEMPOTENCY_KEY_INVALID", "{v}");
    assert_eq!(v["id"], 7);
    assert_eq!(c.oracle().totals.executions, 0);
    c.shutdown().await;
}

#[tokio::test]
async fn a_closed_stream_cancels_an_unkeyed_call_and_a_keyed_one_runs_on_to_its_key() {
    let c = cluster(Preset::Strict, 2, Some(2)).await;
    let mcp = Mcp::new(c.url());
    let slow = json!({"steps": 1000, "delay_ms": 10});
    let progress = |tag: &str| json!({TAG: tag, "progressToken": tag});
    let unkeyed = mcp
        .modern(Req::new(
            1,
            "tools/call",
            json!({"name": "slow", "arguments": slow, "_meta": progress("u")}),
            &json!({}),
        ))
        .await;
    assert!(unkeyed.cut, "{:?}", unkeyed.events);
    assert_eq!(unkeyed.events.len(), 2, "two progress events, no ids");
    assert!(unkeyed.events.iter().all(|e| e.id.is_none()));
    // The 1000-step call stops once its stream is gone.
    assert!(c.wait_idle(STOPS).await, "the cancelled call went on");

    let short = json!({"steps": 4, "delay_ms": 5});
    let keyed = |id: u64| {
        Req::new(
            id,
            "tools/call",
            json!({"name": "slow", "arguments": short,
                   "_meta": {TAG: "k", KEY: "slow-key", "progressToken": "k"}}),
            &json!({}),
        )
    };
    let first = mcp.modern(keyed(2)).await;
    assert!(first.cut);
    assert!(c.wait_idle(STEP).await);
    let again = mcp.modern(keyed(3)).await;
    assert!(!again.cut);
    assert_eq!(
        result_text(&again.response().unwrap()),
        "slow: done after 4 steps"
    );
    let o = c.oracle();
    assert_eq!(o.executions_tagged("k").count(), 1);
    assert_eq!(o.totals.idempotent_replays, 1);
    c.shutdown().await;
}

#[tokio::test]
async fn a_crash_mid_call_applies_the_effect_once_and_loses_the_key() {
    let c = cluster(Preset::Replicated, 2, None).await;
    let mcp = Mcp::new(c.url());
    let args = json!({"steps": 3, "delay_ms": 5});
    c.crash_mid_call("u", 1);
    let r = mcp
        .modern(Req::new(
            1,
            "tools/call",
            json!({"name": "counter_increment", "arguments": args,
                   "_meta": {TAG: "u", "progressToken": 1}}),
            &json!({}),
        ))
        .await; // I0, killed after its first progress event (which may not get out first)
    assert!(r.cut, "{r:?}");
    assert!(r.events.len() <= 1, "{r:?}");
    assert!(c.wait_idle(STEP).await);
    let keyed = |id: u64| {
        Req::new(
            id,
            "tools/call",
            json!({"name": "counter_increment", "arguments": args,
                   "_meta": {TAG: "k", KEY: "crash-key", "progressToken": 2}}),
            &json!({}),
        )
    };
    c.crash_mid_call("k", 2);
    let cut = mcp.modern(keyed(2)).await; // I1
    assert!(cut.cut);
    assert!(c.wait_idle(STEP).await);
    let again = mcp.modern(keyed(3)).await;
    assert_eq!(
        again.response().unwrap()["error"]["data"]["code"],
        "IDEMPOTENCY_OUTCOME_UNKNOWN",
        "{again:?}"
    );
    // Both crashed instances are back (restarted empty), and nothing ran twice.
    assert!(c.is_up(0) && c.is_up(1));
    let o = c.oracle();
    assert_eq!(o.totals.executions, 2);
    assert_eq!(o.totals.duplicate_side_effects, 0);
    let counter = mcp
        .modern_call(4, "counter_increment", json!({}), "after", &json!({}))
        .await;
    assert_eq!(result(&counter)["structuredContent"]["value"], 3);
    c.shutdown().await;
}

#[tokio::test]
async fn confirm_asks_through_an_input_required_round_trip() {
    let c = cluster(Preset::Strict, 3, None).await;
    let mcp = Mcp::new(c.url());
    let ask = |caps: &Value| {
        Req::new(
            1,
            "tools/call",
            json!({"name": "confirm", "arguments": {"question": "ship it?"}, "_meta": {TAG: "c"}}),
            caps,
        )
    };
    let missing = mcp.modern(ask(&json!({}))).await;
    assert_eq!(missing.status, 400);
    assert_eq!(rpc_code(&missing), Some(-32021));
    assert_eq!(
        missing.json()["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}})
    );
    let elicit = json!({"elicitation": {}});
    let round0 = result(&mcp.modern(ask(&elicit)).await);
    assert_eq!(round0["resultType"], "input_required");
    assert_eq!(
        round0["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );
    let state = round0["requestState"].as_str().unwrap().to_owned();
    assert_eq!(c.oracle().totals.executions, 0, "asking runs nothing");
    let mut answer = ask(&elicit);
    answer.id = json!(2);
    answer.params["inputResponses"] =
        json!({"confirm": {"action": "accept", "content": {"confirmed": true}}});
    let mut forged = Req {
        id: json!(3),
        method: answer.method.clone(),
        params: answer.params.clone(),
        headers: Vec::new(),
    };
    answer.params["requestState"] = json!(state);
    let done = result(&mcp.modern(answer).await); // another instance: stateless
    assert_eq!(done["resultType"], "complete");
    assert_eq!(done["structuredContent"]["action"], "accept");
    forged.params["requestState"] = json!("confirm.v1.forged");
    let refused = mcp.modern(forged).await;
    assert_eq!(
        refused.response().unwrap()["error"]["data"]["code"],
        "BAD_REQUEST_STATE"
    );
    assert_eq!(c.oracle().totals.executions, 1);
    c.shutdown().await;
}

#[tokio::test]
async fn a_task_is_answered_by_any_instance_and_lost_with_its_instance() {
    let c = cluster(Preset::Naive, 3, None).await;
    let mcp = Mcp::new(c.url());
    let with_tasks = json!({"extensions": {TASKS_EXT: {}}});
    let created = result(
        &mcp.modern_call(
            1,
            "batch_job",
            json!({"steps": 2, "delay_ms": 5}),
            "job",
            &with_tasks,
        )
        .await,
    ); // I0
    assert_eq!(created["resultType"], "task");
    assert_eq!(created["status"], "working");
    let task_id = created["taskId"].as_str().unwrap().to_owned();
    assert!(c.wait_idle(STEP).await, "the job ran to its end");
    let get = |id: u64| Req::new(id, "tasks/get", json!({"taskId": task_id}), &with_tasks);
    for id in 2..4 {
        // I1, I2: the task lives in the shared store.
        let status = result(&mcp.modern(get(id)).await);
        assert_eq!(status["status"], "completed", "{status}");
        assert_eq!(
            status["result"]["content"][0]["text"],
            "batch_job: done after 2 steps"
        );
    }
    // Without the extension declared, the same tool runs inline.
    let inline = mcp
        .modern_call(
            4,
            "batch_job",
            json!({"steps": 1, "delay_ms": 0}),
            "inline",
            &json!({}),
        )
        .await;
    assert_eq!(result(&inline)["resultType"], "complete");
    // A task whose instance dies is reported failed, its outcome unknown.
    let long = result(
        &mcp.modern_call(
            5,
            "batch_job",
            json!({"steps": 1000, "delay_ms": 10}),
            "long",
            &with_tasks,
        )
        .await,
    ); // I1
    let long_id = long["taskId"].as_str().unwrap().to_owned();
    assert!(c.kill_instance(1).await);
    let lost = result(
        &mcp.modern(Req::new(
            6,
            "tasks/get",
            json!({"taskId": long_id}),
            &with_tasks,
        ))
        .await,
    );
    assert_eq!(lost["status"], "failed");
    assert_eq!(lost["error"]["data"]["code"], "TASK_LOST");
    c.shutdown().await;
}

#[tokio::test]
async fn subscriptions_listen_acknowledges_and_stays_open() {
    let c = cluster(Preset::Strict, 1, None).await;
    let mcp = Mcp::new(c.url());
    let body = json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true, "promptsListChanged": true},
                   "_meta": {META_VERSION: MODERN, META_CAPS: {}, META_INFO: {"name": "t", "version": "0"}}}});
    let mut resp = mcp
        .http
        .post(&mcp.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["x-accel-buffering"], "no");
    let chunk = tokio::time::timeout(STEP, resp.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let events = parse_sse(&String::from_utf8_lossy(&chunk));
    let ack = events[0].json().unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "sub-1"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "only what this server sends"
    );
    // Still open: nothing more arrives, and the stream has not ended.
    let more = tokio::time::timeout(std::time::Duration::from_millis(50), resp.chunk()).await;
    assert!(more.is_err(), "{more:?}");
    c.shutdown().await;
}

#[tokio::test]
async fn a_dual_era_cluster_serves_sessions_and_stateless_requests_side_by_side() {
    let c = Cluster::start(ClusterConfig {
        preset: Preset::Replicated,
        era: ClusterEra::Dual,
        instances: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let mcp = Mcp::new(c.url());
    let (sid, hash, init) = mcp.initialize(Some(0.2)).await;
    assert!(hash.is_some());
    assert!(init.json()["result"]["capabilities"]["experimental"]["resumeSafety"].is_object());
    let legacy = mcp
        .call(&sid, 1, "generate", json!({"prompt": "p"}), "legacy")
        .await;
    assert_eq!(
        legacy.response().unwrap()["result"]["structuredContent"]["temperature"],
        0.2
    );
    let discover = result(
        &mcp.modern(Req::new(2, "server/discover", json!({}), &json!({})))
            .await,
    );
    assert_eq!(
        discover["supportedVersions"],
        json!([MODERN, "2025-11-25", "2025-06-18", "2025-03-26"])
    );
    let modern = mcp
        .modern_call(3, "generate", json!({"prompt": "p"}), "modern", &caps(0.7))
        .await;
    assert_eq!(result(&modern)["structuredContent"]["temperature"], 0.7);
    // A legacy version in a sessionless request is refused with the list to pick from.
    let old = mcp
        .modern(
            Req::new(4, "tools/list", json!({}), &json!({}))
                .meta(META_VERSION, json!("2025-11-25"))
                .header("mcp-protocol-version", Some("2025-11-25")),
        )
        .await;
    assert_eq!(rpc_code(&old), Some(-32022));
    let deleted = mcp
        .http
        .delete(&mcp.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 200, "sessions are still served");
    let o = c.oracle();
    assert_eq!(o.totals.wrong_capability, 0);
    assert_eq!(o.totals.initializes, 1);
    c.shutdown().await;
}
