//! A request body's trailers reach the inner service, as its bytes do: the guard reads the
//! body, and forwards it unchanged.

use std::convert::Infallible;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use mcp_resume_server::{GuardedRequestBody, MemoryStore, ResumeSafetyLayer};
use serde_json::json;
use tower_layer::Layer;
use tower_service::Service;

type Frames = futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>;

/// Answers with the request's body and its trailer `x-sum`, as it received them.
#[derive(Clone)]
struct Echo;

impl Service<Request<GuardedRequestBody<StreamBody<Frames>>>> for Echo {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Full<Bytes>>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<GuardedRequestBody<StreamBody<Frames>>>) -> Self::Future {
        Box::pin(async move {
            let got = req.into_body().collect().await.unwrap();
            let sum = got
                .trailers()
                .and_then(|t| t.get("x-sum"))
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_owned();
            let body = String::from_utf8_lossy(&got.to_bytes()).into_owned();
            Ok(Response::new(Full::new(Bytes::from(format!(
                "{sum} {body}"
            )))))
        })
    }
}

#[tokio::test]
async fn a_request_bodys_trailers_reach_the_inner_service() {
    let mut svc = ResumeSafetyLayer::new(MemoryStore::default()).layer(Echo);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let mut trailers = HeaderMap::new();
    trailers.insert("x-sum", HeaderValue::from_static("abc"));
    let frames = vec![
        Ok(Frame::data(Bytes::from(body.clone()))),
        Ok(Frame::trailers(trailers)),
    ];
    let req = Request::post("/mcp")
        .header("content-type", "application/json")
        .body(StreamBody::new(futures::stream::iter(frames)))
        .unwrap();
    futures::future::poll_fn(|cx| Service::<Request<StreamBody<Frames>>>::poll_ready(&mut svc, cx))
        .await
        .unwrap();
    let resp = svc.call(req).await.unwrap();
    let got = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(String::from_utf8_lossy(&got), format!("abc {body}"));
}
