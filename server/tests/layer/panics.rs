//! Application code that panics behind the layer: an inner service whose `call`, response
//! future or body panics fails that one request; the guard keeps serving, and the key of a
//! keyed call that may have run reads as lost, never as running for good.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use mcp_resume_server::{GuardedRequestBody, MemoryStore, ResumeSafetyLayer};
use serde_json::json;
use tower_layer::Layer;
use tower_service::Service;

/// Where the inner service panics.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Where {
    Call,
    Future,
    /// After an SSE event that is not the answer.
    Body,
    Nowhere,
}

/// An SSE body: one progress event, then (unless it panics) the answer to id 1.
struct Events {
    sent: usize,
    panic: bool,
}

impl Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.sent += 1;
        match self.sent {
            1 => {
                let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": 1, "progress": 1}});
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(format!(
                    "data: {note}\n\n"
                ))))))
            }
            2 if self.panic => panic!("the inner body panics"),
            2 => {
                let answer = json!({"jsonrpc": "2.0", "id": 1,
                    "result": {"content": [{"type": "text", "text": "done"}]}});
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(format!(
                    "data: {answer}\n\n"
                ))))))
            }
            _ => Poll::Ready(None),
        }
    }
}

#[derive(Clone)]
struct Panicky(Where);

type Fut = Pin<Box<dyn std::future::Future<Output = Result<Response<Events>, Infallible>> + Send>>;

impl<B: Send + 'static> Service<Request<GuardedRequestBody<B>>> for Panicky {
    type Response = Response<Events>;
    type Error = Infallible;
    type Future = Fut;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<GuardedRequestBody<B>>) -> Fut {
        let at = self.0;
        if at == Where::Call {
            panic!("the inner service panics in call");
        }
        Box::pin(async move {
            if at == Where::Future {
                panic!("the inner response future panics");
            }
            Ok(Response::builder()
                .header("content-type", "text/event-stream")
                .body(Events {
                    sent: 0,
                    panic: at == Where::Body,
                })
                .unwrap())
        })
    }
}

fn keyed(id: i64, key: &str) -> Request<Full<Bytes>> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "bump", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("idempotency-key", key)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// The whole answer: its status and body, or the body's error.
async fn answer(
    svc: &mut (impl Service<
        Request<Full<Bytes>>,
        Response = Response<mcp_resume_server::GuardedBody<Events>>,
        Error = Infallible,
    > + Send),
    req: Request<Full<Bytes>>,
) -> (u16, Result<String, String>) {
    futures::future::poll_fn(|cx| svc.poll_ready(cx))
        .await
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), svc.call(req))
        .await
        .expect("answered in time")
        .unwrap();
    let status = resp.status().as_u16();
    let body = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .expect("the body ends in time");
    (
        status,
        body.map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .map_err(|e| e.to_string()),
    )
}

/// A keyed call whose inner body panics mid-stream: the client's stream fails (it is not
/// the whole answer), and the key reads as lost, not as running.
#[tokio::test]
async fn a_keyed_call_whose_body_panics_fails_its_stream() {
    let store = MemoryStore::default();
    let layer = ResumeSafetyLayer::new(store.clone()).lease(Duration::from_secs(30));
    let mut svc = layer.clone().layer(Panicky(Where::Body));
    let (status, body) = answer(&mut svc, keyed(1, "k-body")).await;
    assert_eq!(status, 200);
    assert!(
        body.is_err(),
        "a stream cut by a panic ends as a failure: {body:?}"
    );
    assert_eq!(
        lost_or_in_use(&mut svc, "k-body").await,
        "IDEMPOTENCY_OUTCOME_UNKNOWN"
    );
}

/// The code a re-send of `key` is refused with, once it is no longer "in use".
async fn lost_or_in_use(
    svc: &mut (impl Service<
        Request<Full<Bytes>>,
        Response = Response<mcp_resume_server::GuardedBody<Events>>,
        Error = Infallible,
    > + Send),
    key: &str,
) -> &'static str {
    for _ in 0..1000 {
        let (_, body) = answer(svc, keyed(2, key)).await;
        let body = body.unwrap();
        if body.contains("IDEMPOTENCY_OUTCOME_UNKNOWN") {
            return "IDEMPOTENCY_OUTCOME_UNKNOWN";
        }
        assert!(body.contains("IDEMPOTENCY_KEY_IN_USE"), "{body}");
        tokio::task::yield_now().await;
    }
    "IDEMPOTENCY_KEY_IN_USE"
}

/// A keyed call whose inner service panics (in `call`, in its future): that request gets an
/// error, its key reads as lost, and the guard serves the next request.
#[tokio::test]
async fn a_keyed_call_whose_service_panics_fails_alone() {
    for at in [Where::Call, Where::Future] {
        let store = MemoryStore::default();
        let layer = ResumeSafetyLayer::new(store.clone()).lease(Duration::from_secs(30));
        let mut svc = layer.clone().layer(Panicky(at));
        let (status, _) = answer(&mut svc, keyed(1, "k-call")).await;
        assert_eq!(status, 500, "{at:?}");
        assert_eq!(
            lost_or_in_use(&mut svc, "k-call").await,
            "IDEMPOTENCY_OUTCOME_UNKNOWN",
            "{at:?}"
        );
        let mut fine = layer.clone().layer(Panicky(Where::Nowhere));
        let (status, body) = answer(&mut fine, keyed(3, "k-other")).await;
        assert_eq!(status, 200, "{at:?}");
        assert!(body.unwrap().contains("done"), "{at:?}");
    }
}

/// A lease told as for ever (`Duration::MAX`: a key whose instance died is never taken for
/// lost) runs keyed calls as a long lease does, instead of overflowing the clock in each.
#[tokio::test]
async fn a_lease_for_ever_runs_keyed_calls() {
    let layer = ResumeSafetyLayer::new(MemoryStore::default()).lease(Duration::MAX);
    let mut svc = layer.layer(Panicky(Where::Nowhere));
    for id in [1, 2] {
        let (status, body) = answer(&mut svc, keyed(id, "k-ever")).await;
        assert_eq!(status, 200);
        assert!(body.unwrap().contains("done"));
    }
}
