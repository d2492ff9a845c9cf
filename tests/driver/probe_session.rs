//! The probe rule carried out by the sans-IO `Session`, in virtual time: what the wire tests
//! cannot time exactly.

use std::time::{Duration, Instant};

use mcp_resume::proto::{Output, Session, SessionConfig, Transmit, TransportFailure};
use mcp_resume::{ErrorKind, ReconnectPolicy};

fn probes_sent(session: &mut Session) -> Vec<mcp_resume::proto::HttpId> {
    let mut sent = Vec::new();
    while let Some(t) = session.poll_transmit() {
        if let Transmit::Send(req) = t {
            let body = req.body.as_deref().unwrap_or_default();
            assert!(
                std::str::from_utf8(body)
                    .unwrap()
                    .contains("server/discover"),
                "only probes here: {req:?}"
            );
            sent.push(req.id);
        }
    }
    sent
}

/// A first connect that timed out while its probe waited to be sent again leaves nothing
/// armed: the next connect's probe is the only one, even when the old backoff's time comes.
#[test]
fn a_timed_out_probe_backoff_does_not_fire_into_the_next_connect() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let config = SessionConfig::default()
        .with_call_timeout(Duration::from_millis(100))
        .with_reconnect(
            ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(150))
                .with_max_delay(Duration::from_millis(150))
                .with_jitter(0.0),
        );
    let mut session = Session::new(config, t0);
    let first = session.connect(t0);
    let probe = probes_sent(&mut session);
    assert_eq!(probe.len(), 1);
    // No answer at all (a 5xx would fall back to `initialize` instead).
    session.handle_error(probe[0], TransportFailure::Lost("cut".into()), ms(5));
    assert!(
        probes_sent(&mut session).is_empty(),
        "waits out the backoff"
    );
    session.handle_timeout(ms(105));
    let mut failed = None;
    while let Some(out) = session.poll_output() {
        if let Output::Completed { call, result } = out {
            if call == first {
                failed = Some(result.unwrap_err());
            }
        }
    }
    let err = failed.expect("the first connect ended");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.to_string().contains("server/discover"), "{err}");

    let _second = session.connect(ms(110));
    assert_eq!(probes_sent(&mut session).len(), 1);
    // The first connect's backoff would have ended here, before the second one's deadline.
    session.handle_timeout(ms(160));
    assert!(
        probes_sent(&mut session).is_empty(),
        "a second probe while the first is in flight"
    );
}
