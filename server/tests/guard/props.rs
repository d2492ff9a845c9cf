//! Property tests over interleavings of two claims of one key: whatever the order of claims,
//! renewals, answers, releases, deaths and the passing of time, a key runs at most once
//! (a release proves its run never happened), a lost key is never granted again, and a
//! stored answer is the one every later claim gets.

use std::time::{Duration, Instant};

use mcp_resume_server::guard::claims::{self, KeyState};
use mcp_resume_server::guard::{Claim, ClaimOutcome, StoredOutcome};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone, Copy)]
enum Step {
    /// Actor claims the key (with its own digest: `same` or another call).
    Claim { actor: usize, same: bool },
    /// The holder renews.
    Renew(usize),
    /// The holder stores its answer.
    Finish(usize),
    /// The holder releases (its call did not run).
    Release(usize),
    /// The holder gives up (its call may have run).
    Lost(usize),
    /// Time passes (a dead holder's lease lapses).
    Tick(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..2usize, prop::bool::weighted(0.9)).prop_map(|(actor, same)| Step::Claim { actor, same }),
        2 => (0..2usize).prop_map(Step::Renew),
        2 => (0..2usize).prop_map(Step::Finish),
        1 => (0..2usize).prop_map(Step::Release),
        1 => (0..2usize).prop_map(Step::Lost),
        2 => (0..250u64).prop_map(Step::Tick),
    ]
}

const LEASE: Duration = Duration::from_millis(100);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn two_claims_of_one_key(steps in prop::collection::vec(step(), 1..40)) {
        let key = mcp_resume_server::ids::IdempotencyKey::new("k").unwrap();
        let same = mcp_resume_server::wire::arguments_digest("bump", &json!({"n": 1}));
        let other = mcp_resume_server::wire::arguments_digest("bump", &json!({"n": 2}));
        let mut now = Instant::now();
        let mut state: Option<KeyState> = None;
        // What each actor holds: the token of its granted claim, and its claim count.
        let mut held: [Option<Claim>; 2] = [None, None];
        let mut claims_made = 0u64;
        // Executions that may have happened: grants minus proven non-runs.
        let mut runs: i64 = 0;
        let mut lost_seen = false;
        let mut stored: Option<StoredOutcome> = None;
        let mut finished_by_holder: Option<StoredOutcome> = None;
        // The digest the key was granted for (while it exists).
        let mut bound: Option<bool> = None;
        for s in steps {
            match s {
                Step::Claim { actor, same: is_same } => {
                    claims_made += 1;
                    let token = mcp_resume_server::ids::ClaimToken::from_stored(format!("{actor}-{claims_made}"));
                    let digest = if is_same { same.clone() } else { other.clone() };
                    let claim = Claim::new(key.clone(), digest, token, LEASE);
                    let existed = state.is_some();
                    let out = claims::claim(&mut state, &claim, now);
                    if existed && bound != Some(is_same) {
                        prop_assert_eq!(&out, &ClaimOutcome::Mismatch, "another call under a taken key");
                    }
                    match &out {
                        ClaimOutcome::Granted => {
                            prop_assert!(!lost_seen, "a lost key was granted again");
                            prop_assert!(stored.is_none(), "a finished key was granted again");
                            runs += 1;
                            prop_assert!(runs <= 1, "two runs of one key");
                            bound = Some(is_same);
                            held[actor] = Some(claim);
                        }
                        ClaimOutcome::Lost => lost_seen = true,
                        ClaimOutcome::Done(o) => {
                            prop_assert_eq!(Some(o), finished_by_holder.as_ref());
                            stored = Some(o.clone());
                        }
                        ClaimOutcome::InUse | ClaimOutcome::Mismatch => {}
                        _ => prop_assert!(false, "an unknown outcome"),
                    }
                }
                Step::Renew(actor) => {
                    if let Some(c) = &held[actor] {
                        claims::renew(&mut state, c.token(), LEASE, now);
                    }
                }
                Step::Finish(actor) => {
                    if let Some(c) = held[actor].take() {
                        let o = StoredOutcome::from_stored(&json!({"result": {"by": c.token().as_str()}}).to_string()).unwrap();
                        let holds = state.as_ref().is_some_and(|_| true);
                        claims::finish(&mut state, c.token(), o.clone());
                        if holds && finished_by_holder.is_none() {
                            finished_by_holder = Some(o);
                        }
                    }
                }
                Step::Release(actor) => {
                    if let Some(c) = held[actor].take() {
                        let was_running = state.as_ref().is_some_and(KeyState::is_running);
                        claims::release(&mut state, c.token());
                        if was_running && state.is_none() {
                            runs -= 1;
                            bound = None;
                        }
                    }
                }
                Step::Lost(actor) => {
                    if let Some(c) = held[actor].take() {
                        claims::mark_lost(&mut state, c.token());
                    }
                }
                Step::Tick(ms) => now += Duration::from_millis(ms),
            }
            // A lost key stays lost or takes its own holder's answer; it never frees.
            if lost_seen {
                prop_assert!(state.is_some());
            }
        }
    }
}

/// A lease no clock can add (`Duration::MAX`, from a store's own claim: `Claim::new` takes
/// any) is for ever, as the builder's longest lease is, instead of overflowing the clock in
/// the claim and the renewal.
#[test]
fn a_lease_no_clock_can_add_is_for_ever() {
    let key = mcp_resume_server::ids::IdempotencyKey::new("k").unwrap();
    let digest = mcp_resume_server::wire::arguments_digest("bump", &json!({}));
    let token = |t: &str| mcp_resume_server::ids::ClaimToken::from_stored(t);
    let now = Instant::now();
    let mut state: Option<KeyState> = None;
    let first = Claim::new(key.clone(), digest.clone(), token("a"), Duration::MAX);
    assert!(matches!(
        claims::claim(&mut state, &first, now),
        ClaimOutcome::Granted
    ));
    assert!(claims::renew(&mut state, &token("a"), Duration::MAX, now));
    let later = now + Duration::from_secs(10 * 365 * 24 * 3600);
    let second = Claim::new(key, digest, token("b"), LEASE);
    assert!(
        matches!(
            claims::claim(&mut state, &second, later),
            ClaimOutcome::InUse
        ),
        "a key held for ever is still running ten years on"
    );
}
