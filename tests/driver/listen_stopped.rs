//! The standalone stream given up, as the app sees it on `Client::events()`.

use crate::support;

use std::time::Duration;

use axum::http::Method;
use mcp_resume::proto::ListenStopReason;
use mcp_resume::{Client, ReconnectPolicy, SessionEvent};
use support::*;

/// A server that refuses every GET (500): the client tries `max_attempts` times, then says it
/// stopped, once, and never that it listens.
#[tokio::test]
async fn a_listen_stream_refused_every_time_is_reported_stopped() {
    const MAX: u32 = 3;
    let server = TestServer::start(|req| match req.method {
        Method::GET => status(500),
        _ => default_reply(req),
    })
    .await;
    let client = Client::builder(&server.url)
        .reconnect(
            ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(1))
                .with_max_delay(Duration::from_millis(5))
                .with_max_attempts(MAX),
        )
        .jitter_seed(1)
        .build()
        .unwrap();
    let mut events = client.events();
    guarded(client.connect()).await.unwrap();
    let reason = loop {
        match guarded(events.recv()).await.expect("event stream ended") {
            SessionEvent::ListenStopped { reason } => break reason,
            SessionEvent::Listening => panic!("listening on a server refusing every GET"),
            _ => {}
        }
    };
    assert_eq!(reason, ListenStopReason::GaveUp { attempts: MAX });
    let gets = server
        .requests()
        .iter()
        .filter(|r| r.method == Method::GET)
        .count();
    assert_eq!(gets, MAX as usize, "{:?}", server.labels());
    // Nothing more is said of the stream: the next event is the close.
    guarded(client.close()).await.unwrap();
    while let Some(event) = guarded(events.recv()).await {
        assert!(
            !matches!(
                event,
                SessionEvent::ListenStopped { .. } | SessionEvent::Listening
            ),
            "{event:?}"
        );
    }
}
