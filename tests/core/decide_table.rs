//! The recovery table (`guide::recovery`), one named test per row, against the pure
//! recovery decision.

use mcp_resume::proto::decide::{decide, CallFate, Decision, Failure, State};
use mcp_resume::proto::{ReinitReason, RejectReason};
use mcp_resume::ErrorKind;

use CallFate::Fail as FateFail;
use Decision::*;

/// An unkeyed (or unsafe keyed) call on its first failure, with the default limits.
fn unkeyed() -> State {
    State::new(&mcp_resume::ReconnectPolicy::default(), false, false)
}

/// A keyed call that is safe to re-send, on its first failure, with the default limits.
fn safe() -> State {
    State::new(&mcp_resume::ReconnectPolicy::default(), true, false)
}

#[test]
fn the_table_starts_from_the_default_policy() {
    for state in [unkeyed(), safe()] {
        assert_eq!(
            (
                state.attempts,
                state.resumes_without_progress,
                state.reinit_failures
            ),
            (1, 0, 0)
        );
        assert_eq!(
            (
                state.max_attempts,
                state.max_resumes_without_progress,
                state.max_reinit_failures
            ),
            (10, 3, 5)
        );
        assert!(state.resumable && !state.trust_replay);
        assert!(!state.calls_waiting && !state.awaiting_reinit);
    }
    assert!(!unkeyed().resend_safe && safe().resend_safe);
}

fn reinit(reason: ReinitReason, call: CallFate) -> Decision {
    Reinitialize { reason, call }
}

const UNKNOWN: Decision = Fail(ErrorKind::OutcomeUnknown);

// | POST answered 404 and it carried a session id | re-initialize; re-sent whatever its key |
#[test]
fn post_404_with_session_id_reinitializes_and_resends_unkeyed_call() {
    assert_eq!(
        decide(&Failure::PostSessionNotFound, &unkeyed()),
        reinit(ReinitReason::SessionNotFound, CallFate::Resend)
    );
}

#[test]
fn post_404_with_session_id_resends_keyed_call_too() {
    assert_eq!(
        decide(&Failure::PostSessionNotFound, &safe()),
        reinit(ReinitReason::SessionNotFound, CallFate::Resend)
    );
}

// | … the same call keeps drawing "session gone" | after `max_attempts` it fails alone with
// `SessionLost`; the session is kept (no re-initialization) |
#[test]
fn post_404_resends_are_bounded_by_max_attempts() {
    assert_eq!(
        decide(&Failure::PostSessionNotFound, &unkeyed().attempts(9)),
        reinit(ReinitReason::SessionNotFound, CallFate::Resend)
    );
    for state in [unkeyed(), safe(), unkeyed().trusting()] {
        assert_eq!(
            decide(&Failure::PostSessionNotFound, &state.attempts(10)),
            Fail(ErrorKind::SessionLost)
        );
    }
}

// | session gone on a resume, a safe keyed call with no attempts left | re-initialize; the
// call is not re-sent again: `OutcomeUnknown` |
#[test]
fn resume_404_resends_are_bounded_by_max_attempts() {
    assert_eq!(
        decide(&Failure::ResumeNotFound, &safe().attempts(10)),
        reinit(
            ReinitReason::SessionNotFound,
            FateFail(ErrorKind::OutcomeUnknown)
        )
    );
    assert_eq!(
        decide(&Failure::SessionReplaced, &safe().attempts(10)),
        UNKNOWN
    );
}

// | POST answered without its response after delivery (202, 5xx, another id) | may have run |
#[test]
fn answered_without_response_unkeyed_is_outcome_unknown() {
    assert_eq!(
        decide(&Failure::AnsweredWithoutResponse, &unkeyed()),
        UNKNOWN
    );
}

#[test]
fn answered_without_response_safe_keyed_is_resent() {
    assert_eq!(decide(&Failure::AnsweredWithoutResponse, &safe()), Resend);
    assert_eq!(
        decide(&Failure::AnsweredWithoutResponse, &safe().attempts(10)),
        UNKNOWN
    );
}

// | POST refused with a status that proves it was not processed | the refusal is the answer |
#[test]
fn refused_unprocessed_is_reported_whatever_the_key() {
    let refused = Failure::Refused {
        retry_within_deadline: false,
    };
    assert_eq!(decide(&refused, &unkeyed()), Report);
    assert_eq!(decide(&refused, &safe()), Report);
}

// | … with `Retry-After` within the deadline | wait that long, then re-send |
#[test]
fn refused_with_retry_after_within_deadline_is_resent_until_attempts_run_out() {
    let refused = Failure::Refused {
        retry_within_deadline: true,
    };
    assert_eq!(decide(&refused, &unkeyed()), Resend);
    assert_eq!(decide(&refused, &unkeyed().attempts(10)), Report);
}

// | POST could not even connect | re-send after backoff |
#[test]
fn post_connect_failure_resends_unkeyed_call() {
    assert_eq!(decide(&Failure::PostConnectFailed, &unkeyed()), Resend);
}

#[test]
fn post_connect_failure_gives_up_after_max_attempts() {
    assert_eq!(
        decide(&Failure::PostConnectFailed, &unkeyed().attempts(10)),
        Fail(ErrorKind::Transport)
    );
}

// | POST connection lost after sending, before a response head | keyed+safe re-send, else unknown |
#[test]
fn post_lost_unkeyed_is_outcome_unknown() {
    assert_eq!(decide(&Failure::PostLost, &unkeyed()), UNKNOWN);
}

#[test]
fn post_lost_safe_keyed_is_resent() {
    assert_eq!(decide(&Failure::PostLost, &safe()), Resend);
}

#[test]
fn post_lost_safe_keyed_out_of_attempts_is_outcome_unknown() {
    assert_eq!(decide(&Failure::PostLost, &safe().attempts(10)), UNKNOWN);
}

// | response stream ends before the pending response, no event id seen | as the row above |
#[test]
fn stream_end_without_event_id_unkeyed_is_outcome_unknown() {
    let f = Failure::StreamEnded {
        event_id_seen: false,
    };
    assert_eq!(decide(&f, &unkeyed()), UNKNOWN);
}

#[test]
fn stream_end_without_event_id_safe_keyed_is_resent() {
    let f = Failure::StreamEnded {
        event_id_seen: false,
    };
    assert_eq!(decide(&f, &safe()), Resend);
}

// | … with an event id seen | resume |
#[test]
fn stream_end_with_event_id_resumes() {
    let f = Failure::StreamEnded {
        event_id_seen: true,
    };
    assert_eq!(decide(&f, &unkeyed()), Resume);
    assert_eq!(decide(&f, &safe()), Resume);
}

#[test]
fn stream_end_with_event_id_out_of_attempts_is_outcome_unknown() {
    let f = Failure::StreamEnded {
        event_id_seen: true,
    };
    assert_eq!(decide(&f, &unkeyed().attempts(10)), UNKNOWN);
}

// | resume GET could not connect, or answered 409 (the stream still held), 429 or a 5xx | resume
// again after the backoff, up to `max_attempts` in a row |
#[test]
fn resume_connect_failure_resumes_again() {
    assert_eq!(decide(&Failure::ResumeConnectFailed, &unkeyed()), Resume);
}

#[test]
fn resume_connect_failure_out_of_attempts_is_outcome_unknown() {
    let f = Failure::ResumeConnectFailed;
    assert_eq!(decide(&f, &unkeyed().attempts(10)), UNKNOWN);
}

// | resume GET answered 404 (any body) | re-initialize; safe keyed re-sent, rest unknown |
#[test]
fn resume_404_unkeyed_reinitializes_with_outcome_unknown() {
    assert_eq!(
        decide(&Failure::ResumeNotFound, &unkeyed()),
        reinit(
            ReinitReason::SessionNotFound,
            FateFail(ErrorKind::OutcomeUnknown)
        )
    );
}

#[test]
fn resume_404_safe_keyed_reinitializes_and_resends() {
    assert_eq!(
        decide(&Failure::ResumeNotFound, &safe()),
        reinit(ReinitReason::SessionNotFound, CallFate::Resend)
    );
}

// | resume GET answered with the resume-rejection body | same as 404, the event names the reason |
#[test]
fn resume_rejection_body_reinitializes_with_reason() {
    let f = Failure::ResumeRejected(RejectReason::NotOwner);
    assert_eq!(
        decide(&f, &unkeyed()),
        reinit(
            ReinitReason::ResumeRejected(RejectReason::NotOwner),
            FateFail(ErrorKind::OutcomeUnknown)
        )
    );
    assert_eq!(
        decide(&f, &safe()),
        reinit(
            ReinitReason::ResumeRejected(RejectReason::NotOwner),
            CallFate::Resend
        )
    );
}

// | resume GET answered 405 | keyed+safe re-send on the same session; rest unknown |
#[test]
fn resume_405_unkeyed_is_outcome_unknown() {
    assert_eq!(decide(&Failure::ResumeNotAllowed, &unkeyed()), UNKNOWN);
}

#[test]
fn resume_405_safe_keyed_is_resent_on_same_session() {
    assert_eq!(decide(&Failure::ResumeNotAllowed, &safe()), Resend);
}

// | resumed stream: capability hash header differs | treat as rejection: re-initialize |
#[test]
fn resumed_stream_capability_hash_change_reinitializes() {
    assert_eq!(
        decide(&Failure::ResumeCapabilityHashChanged, &unkeyed()),
        reinit(
            ReinitReason::CapabilityMismatch,
            FateFail(ErrorKind::OutcomeUnknown)
        )
    );
    assert_eq!(
        decide(&Failure::ResumeCapabilityHashChanged, &safe()),
        reinit(ReinitReason::CapabilityMismatch, CallFate::Resend)
    );
}

// | any other response carries another capability hash | context mismatch, never re-sent; re-init |
#[test]
fn other_response_capability_hash_mismatch_fails_call_and_reinitializes() {
    let expected = reinit(
        ReinitReason::CapabilityMismatch,
        FateFail(ErrorKind::ContextMismatch),
    );
    assert_eq!(
        decide(&Failure::CapabilityHashMismatch, &unkeyed()),
        expected
    );
    // Even a safe keyed call is not re-sent: it already ran.
    assert_eq!(decide(&Failure::CapabilityHashMismatch, &safe()), expected);
}

// | resumed stream: event ids not contiguous | gap: re-initialize |
#[test]
fn resumed_stream_event_gap_reinitializes() {
    assert_eq!(
        decide(&Failure::EventGap, &unkeyed()),
        reinit(ReinitReason::EventGap, FateFail(ErrorKind::OutcomeUnknown))
    );
    assert_eq!(
        decide(&Failure::EventGap, &safe()),
        reinit(ReinitReason::EventGap, CallFate::Resend)
    );
}

// | resumed stream delivers a response to a request that is not pending | orphan: re-initialize |
#[test]
fn resumed_stream_orphaned_response_reinitializes() {
    assert_eq!(
        decide(&Failure::OrphanedResponse, &unkeyed()),
        reinit(
            ReinitReason::OrphanedResponse,
            FateFail(ErrorKind::OutcomeUnknown)
        )
    );
    assert_eq!(
        decide(&Failure::OrphanedResponse, &safe()),
        reinit(ReinitReason::OrphanedResponse, CallFate::Resend)
    );
}

// | resumed stream ends cleanly without the response and made no progress | unverifiable clean end |
#[test]
fn resumed_stream_clean_end_without_progress_is_unverifiable() {
    let f = Failure::ResumedStreamEnded {
        clean: true,
        progress: false,
    };
    assert_eq!(
        decide(&f, &unkeyed().without_progress(1)),
        reinit(
            ReinitReason::UnverifiableCleanEnd,
            FateFail(ErrorKind::OutcomeUnknown)
        )
    );
    assert_eq!(
        decide(&f, &safe().without_progress(1)),
        reinit(ReinitReason::UnverifiableCleanEnd, CallFate::Resend)
    );
}

// | … but new events arrived (polling server) | resume again; bounded without progress |
#[test]
fn resumed_stream_clean_end_with_progress_resumes_again() {
    let f = Failure::ResumedStreamEnded {
        clean: true,
        progress: true,
    };
    assert_eq!(decide(&f, &unkeyed()), Resume);
}

#[test]
fn resumed_stream_errors_without_progress_are_bounded() {
    let f = Failure::ResumedStreamEnded {
        clean: false,
        progress: false,
    };
    assert_eq!(decide(&f, &unkeyed().without_progress(3)), Resume);
    assert_eq!(
        decide(&f, &unkeyed().without_progress(4)),
        reinit(
            ReinitReason::UnverifiableCleanEnd,
            FateFail(ErrorKind::OutcomeUnknown)
        )
    );
}

// | re-initialize | the old session's streams cannot be resumed; safe keyed re-sent, rest unknown |
#[test]
fn stream_of_replaced_session_is_not_resumed() {
    assert_eq!(decide(&Failure::SessionReplaced, &unkeyed()), UNKNOWN);
    assert_eq!(decide(&Failure::SessionReplaced, &safe()), Resend);
}

// | re-initialize keeps failing, a call waiting | keep trying, backing off: the call ends at
// its own deadline |
#[test]
fn reinit_failure_is_retried_while_a_call_waits() {
    for failures in [1, 5, 6, 1000, u32::MAX] {
        assert_eq!(
            decide(
                &Failure::ReinitFailed,
                &unkeyed().reinit_failures(failures).calls_waiting(true)
            ),
            RetryReinitialize,
            "{failures}"
        );
    }
}

// | re-initialize keeps failing, no call waiting | after N consecutive failures stop:
// `SessionLost` (the next call reconnects) |
#[test]
fn reinit_failure_without_calls_is_retried_then_session_lost() {
    assert_eq!(
        decide(&Failure::ReinitFailed, &unkeyed().reinit_failures(4)),
        RetryReinitialize
    );
    assert_eq!(
        decide(&Failure::ReinitFailed, &unkeyed().reinit_failures(5)),
        Fail(ErrorKind::SessionLost)
    );
}

// | any call: one deadline spans all its resumes and re-sends | Timeout |
#[test]
fn deadline_expiry_fails_with_timeout() {
    assert_eq!(
        decide(&Failure::DeadlineExpired, &safe()),
        Fail(ErrorKind::Timeout)
    );
    assert_eq!(
        decide(&Failure::DeadlineExpired, &unkeyed()),
        Fail(ErrorKind::Timeout)
    );
}

// | … while waiting for a re-initialization whose last attempt failed | `SessionLost`, the
// last failure as its cause |
#[test]
fn deadline_expiry_awaiting_reinit_is_session_lost() {
    for state in [unkeyed(), safe()] {
        assert_eq!(
            decide(&Failure::DeadlineExpired, &state.awaiting_reinit()),
            Fail(ErrorKind::SessionLost)
        );
    }
}

// Idempotency refusals (resume-safety extension): a re-sent keyed call can race its first
// execution, which still holds the key; the stored result comes once that one ends.
#[test]
fn key_in_use_resends_safe_keyed_call_after_backoff() {
    assert_eq!(decide(&Failure::KeyInUse, &safe()), Resend);
}

// `attempts` counts failures to reach the server; "key in use" refusals are not counted (the
// session waits them out to the call's deadline), so this row is met only when earlier
// failures of the call used its attempts up.
#[test]
fn key_in_use_gives_up_as_outcome_unknown_when_attempts_run_out() {
    assert_eq!(decide(&Failure::KeyInUse, &safe().attempts(10)), UNKNOWN);
    assert_eq!(decide(&Failure::KeyInUse, &unkeyed()), UNKNOWN);
}

#[test]
fn key_outcome_lost_is_outcome_unknown() {
    assert_eq!(decide(&Failure::KeyOutcomeLost, &safe()), UNKNOWN);
    assert_eq!(decide(&Failure::KeyOutcomeLost, &unkeyed()), UNKNOWN);
}

// `dangerous_trust_replay`: the stock behaviour, kept for comparison.
#[test]
fn trusting_mode_ignores_extension_signals() {
    let t = unkeyed().trusting();
    for f in [
        Failure::ResumeCapabilityHashChanged,
        Failure::CapabilityHashMismatch,
        Failure::EventGap,
        Failure::OrphanedResponse,
    ] {
        assert_eq!(decide(&f, &t), Continue, "{f:?}");
    }
    assert_eq!(
        decide(&Failure::ResumeRejected(RejectReason::NotOwner), &t),
        reinit(
            ReinitReason::SessionNotFound,
            FateFail(ErrorKind::OutcomeUnknown)
        )
    );
}

#[test]
fn trusting_mode_resumes_clean_ends_until_attempts_run_out() {
    let f = Failure::ResumedStreamEnded {
        clean: true,
        progress: false,
    };
    let t = unkeyed().trusting();
    assert_eq!(decide(&f, &t.without_progress(10)), Resume);
    assert_eq!(decide(&f, &t.attempts(10)), Fail(ErrorKind::Transport));
}

#[test]
fn trusting_mode_follows_spec_on_404() {
    assert_eq!(
        decide(&Failure::PostSessionNotFound, &unkeyed().trusting()),
        reinit(ReinitReason::SessionNotFound, CallFate::Resend)
    );
}

#[test]
fn table_constants_use_the_default_policy() {
    use mcp_resume::policy::ReconnectPolicy;
    let p = ReconnectPolicy::default();
    assert_eq!(State::new(&p, false, false), unkeyed());
    assert_eq!(State::new(&p, true, false), safe());
}

// ---------------------------------------------------------------- the modern era (2026-07-28)

fn modern_unkeyed() -> State {
    unkeyed().modern()
}
fn modern_safe() -> State {
    safe().modern()
}

// | POST could not connect | not sent: re-sent after backoff |
#[test]
fn modern_post_connect_failure_is_resent() {
    assert_eq!(
        decide(&Failure::PostConnectFailed, &modern_unkeyed()),
        Resend
    );
}

// | connection lost before the response head | a safe keyed call re-issued, else unknown |
#[test]
fn modern_post_lost_reissues_only_safe_keyed_calls() {
    assert_eq!(decide(&Failure::PostLost, &modern_unkeyed()), UNKNOWN);
    assert_eq!(decide(&Failure::PostLost, &modern_safe()), Resend);
}

// | the stream broke before the response | no resumption: a safe keyed call re-issued, else unknown |
#[test]
fn modern_broken_stream_is_never_resumed() {
    let broke = Failure::StreamEnded {
        event_id_seen: true,
    };
    assert_eq!(decide(&broke, &modern_unkeyed()), UNKNOWN);
    assert_eq!(decide(&broke, &modern_safe()), Resend);
    // The same event in the legacy era resumes.
    assert_eq!(decide(&broke, &unkeyed()), Resume);
}

// | 400 -32020 (Mcp-Param) | never executed: fetch the tools again and re-send, once |
#[test]
fn modern_header_mismatch_refreshes_once_then_reports() {
    assert_eq!(
        decide(
            &Failure::HeaderMismatch { refreshed: false },
            &modern_unkeyed()
        ),
        RefreshTools
    );
    assert_eq!(
        decide(
            &Failure::HeaderMismatch { refreshed: true },
            &modern_unkeyed()
        ),
        Report
    );
}

// | 400 -32022 | never executed: handshake again with a version the server speaks, re-send |
#[test]
fn modern_version_refused_rehandshakes_and_resends_whatever_the_key() {
    assert_eq!(
        decide(&Failure::VersionRefused, &modern_unkeyed()),
        reinit(ReinitReason::VersionRefused, CallFate::Resend)
    );
}

// | … the server keeps refusing the version it was probed for | after `max_attempts` the
// refusal is the call's answer, instead of probing again until the deadline |
#[test]
fn modern_version_refusals_are_bounded_by_max_attempts() {
    assert_eq!(
        decide(&Failure::VersionRefused, &modern_unkeyed().attempts(9)),
        reinit(ReinitReason::VersionRefused, CallFate::Resend)
    );
    assert_eq!(
        decide(&Failure::VersionRefused, &modern_unkeyed().attempts(10)),
        Report
    );
}

// | deadline | close the stream (that is the cancel); Timeout |
#[test]
fn modern_deadline_is_a_timeout() {
    assert_eq!(
        decide(&Failure::DeadlineExpired, &modern_safe()),
        Fail(ErrorKind::Timeout)
    );
}
