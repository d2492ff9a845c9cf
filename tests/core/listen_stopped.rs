//! The standalone stream given up: the app is told once, and told again when it reopens.

use std::time::Duration;

use crate::sim;

use mcp_resume::proto::{ListenStopReason, SessionConfig, SessionEvent};
use mcp_resume::ReconnectPolicy;
use sim::{Headers, SeedGuard, ServerConfig, Sim};

const SEC: Duration = Duration::from_secs(1);

const CHALLENGE: Headers = &[(
    "www-authenticate",
    r#"Bearer error="invalid_token", resource_metadata="https://as.example/prm""#,
)];

fn connected(server: ServerConfig, seed: u64) -> Sim {
    let mut s = Sim::new(SessionConfig::default(), server, seed);
    let c = s.connect();
    s.run_until_complete(c, SEC);
    assert!(s.result(c).is_ok(), "connect failed: {:?}", s.result(c));
    s
}

/// What the app was told about the stream, in order (re-initializations included, as a new
/// session's stream is reported afresh).
fn stream_events(s: &Sim) -> Vec<String> {
    s.events()
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Listening => Some("listening".to_owned()),
            SessionEvent::ListenStopped { reason } => Some(match reason {
                ListenStopReason::GaveUp { attempts } => format!("gave_up after {attempts}"),
                other => other.as_str().to_owned(),
            }),
            SessionEvent::Reinitialized { .. } => Some("reinitialized".to_owned()),
            _ => None,
        })
        .collect()
}

/// A stream the core stops trying to open is reported once, whatever the number of tries
/// behind it; a stream refused its credentials is reopened once a call is answered, and
/// reported open then, or given up once refused as many times as it may be; a server that
/// does not offer one (405) has nothing to stop.
#[test]
fn a_listen_stream_given_up_is_reported_once() {
    let max = ReconnectPolicy::default().max_attempts;
    let gave_up = format!("gave_up after {max}");
    // | GETs answered | so many times | calls answered after | what the app was told |
    let rows: [(u16, Headers, u32, u32, Vec<&str>); 6] = [
        (500, &[], u32::MAX, 0, vec![&gave_up]),
        (503, &[], u32::MAX, 3, vec![&gave_up]),
        (500, &[], 1, 0, vec!["listening"]),
        (
            401,
            CHALLENGE,
            u32::MAX,
            2 * max,
            vec!["unauthorized", &gave_up],
        ),
        (401, CHALLENGE, 1, 1, vec!["unauthorized", "listening"]),
        (401, CHALLENGE, 2, 3, vec!["unauthorized", "listening"]),
    ];
    for (status, headers, times, calls, told) in rows {
        let _g = SeedGuard(3101);
        let server = ServerConfig {
            listen_refusal: Some((status, headers, times)),
            ..ServerConfig::default()
        };
        let mut s = connected(server, 3101);
        s.run_for(Duration::from_secs(120));
        for n in 0..calls {
            let c = s.call(&format!("c{n}"), None);
            s.run_until_complete(c, SEC);
            assert!(s.result(c).is_ok(), "{:?}", s.result(c));
            s.run_for(s.elapsed() + Duration::from_secs(5));
        }
        assert_eq!(
            stream_events(&s),
            told,
            "{status} {times} times, {calls} calls"
        );
    }
}

/// A server that does not offer the stream is not one that stopped it: nothing is said.
#[test]
fn a_listen_stream_not_offered_is_not_reported_stopped() {
    for listen_404 in [false, true] {
        let _g = SeedGuard(3102);
        let server = ServerConfig {
            listen: false,
            listen_404,
            ..ServerConfig::default()
        };
        let mut s = connected(server, 3102);
        s.run_for(Duration::from_secs(120));
        let told = stream_events(&s);
        assert!(
            told.iter().all(|e| e == "reinitialized"),
            "404: {listen_404}: {told:?}"
        );
    }
}

/// A session whose stream was given up is replaced: the new session's stream is reported
/// open, and given up again, reported again.
#[test]
fn a_new_session_reports_its_own_listen_stream() {
    let max = ReconnectPolicy::default().max_attempts;
    let gave_up = format!("gave_up after {max}");
    for (times, told) in [
        (max, vec![&*gave_up, "reinitialized", "listening"]),
        (2 * max, vec![&*gave_up, "reinitialized", &*gave_up]),
    ] {
        let _g = SeedGuard(3103);
        let server = ServerConfig {
            listen_refusal: Some((500, &[], times)),
            ..ServerConfig::default()
        };
        let mut s = connected(server, 3103);
        s.run_for(Duration::from_secs(120));
        s.server.forget_sessions();
        let c = s.call("a", None);
        s.run_until_complete(c, 5 * SEC);
        assert!(s.result(c).is_ok(), "{:?}", s.result(c));
        s.run_for(s.elapsed() + Duration::from_secs(120));
        assert_eq!(stream_events(&s), told, "{times} GETs refused");
    }
}

/// A stream refused its credentials, then reopened once they work and failing until its
/// attempts run out, is reported stopped for good: the app was told it would be reopened,
/// and must hear that it will not. Refused its credentials as many times as it may be, it is
/// reported given up at once.
#[test]
fn a_listen_stream_given_up_after_its_credentials_were_refused_is_reported() {
    let max = ReconnectPolicy::default().max_attempts;
    let _g = SeedGuard(3107);
    let server = ServerConfig {
        listen_refusal: Some((401, CHALLENGE, 1)),
        ..ServerConfig::default()
    };
    let mut s = connected(server, 3107);
    s.run_for(Duration::from_secs(10));
    s.server.cfg.listen_refusal = Some((500, &[], u32::MAX));
    let c = s.call("a", None);
    s.run_until_complete(c, SEC);
    assert!(s.result(c).is_ok(), "{:?}", s.result(c));
    s.run_for(s.elapsed() + Duration::from_secs(300));
    assert_eq!(
        stream_events(&s),
        ["unauthorized".to_owned(), format!("gave_up after {max}")]
    );

    // Reopened, and then not offered (a server checking credentials before it routes):
    // told it will not be reopened after all.
    let _g = SeedGuard(3109);
    let server = ServerConfig {
        listen_refusal: Some((401, CHALLENGE, 1)),
        ..ServerConfig::default()
    };
    let mut s = connected(server, 3109);
    s.run_for(Duration::from_secs(10));
    s.server.cfg.listen_refusal = Some((405, &[], u32::MAX));
    let c = s.call("a", None);
    s.run_until_complete(c, SEC);
    assert!(s.result(c).is_ok(), "{:?}", s.result(c));
    s.run_for(s.elapsed() + Duration::from_secs(300));
    assert_eq!(stream_events(&s), ["unauthorized", "refused"]);

    let _g = SeedGuard(3108);
    let config =
        SessionConfig::default().with_reconnect(ReconnectPolicy::default().with_max_attempts(1));
    let server = ServerConfig {
        listen_refusal: Some((401, CHALLENGE, u32::MAX)),
        ..ServerConfig::default()
    };
    let mut s = Sim::new(config, server, 3108);
    let c = s.connect();
    s.run_until_complete(c, SEC);
    s.run_for(Duration::from_secs(10));
    assert_eq!(stream_events(&s), ["gave_up after 1"]);
}

/// A stream that sends an event past the size bound is not opened again (a hostile stream
/// would only repeat itself): the app is told it stopped, as for any other stop.
#[test]
fn a_listen_stream_broken_by_an_oversized_event_is_reported_stopped() {
    use http::HeaderMap;
    use mcp_resume::proto::{HttpMethod, Output, Transmit};

    let config = SessionConfig::default()
        .with_era(mcp_resume::Era::Legacy)
        .with_max_event_size(1024);
    let (mut session, now, get) = crate::hardening::legacy_connected(config, serde_json::json!({}));
    let get = get.expect("the standalone stream is opened");
    let mut sse = HeaderMap::new();
    sse.insert("content-type", "text/event-stream".parse().unwrap());
    session.handle_head(get, 200, &sse, now);
    session.handle_data(
        get,
        format!("data: {}\n\n", "x".repeat(4096)).as_bytes(),
        now,
    );
    let told: Vec<SessionEvent> = std::iter::from_fn(|| session.poll_output())
        .filter_map(|o| match o {
            Output::Event(e @ (SessionEvent::Listening | SessionEvent::ListenStopped { .. })) => {
                Some(e)
            }
            _ => None,
        })
        .collect();
    assert!(
        matches!(
            told.as_slice(),
            [
                SessionEvent::Listening,
                SessionEvent::ListenStopped {
                    reason: ListenStopReason::Refused
                }
            ]
        ),
        "{told:?}"
    );
    // Not opened again.
    session.handle_timeout(now + Duration::from_secs(60));
    assert!(!std::iter::from_fn(|| session.poll_transmit())
        .any(|t| matches!(t, Transmit::Send(r) if r.method == HttpMethod::Get)));
}
