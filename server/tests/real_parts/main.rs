//! Real servers, real parts: three rmcp 3.11 replicas (the `replica` example) behind nginx,
//! sharing a `redis-server`; faults from the outside (nginx cutting idle streams mid-call, a
//! rolling restart's drain landing on the replica running a call, `kill -9` of the replica
//! running a call). The truth is the tool's own side-effect counter in Redis, joined per call
//! with what the client reported; the replicas' own counts show that each fault bit each call
//! (its answer cut before it went, its run drained or killed mid-call, its re-sends).
//!
//! The same run with the guard and without it (the client then assuming the server
//! deduplicates keys, as an application would for a server it trusts) is the README's table:
//! `cargo test -p mcp-resume-server --test real_parts -- --nocapture` prints it.
//!
//! `restart`: a client process killed mid-call and its calls picked up from a Redis ledger
//! by the next one, on the guarded replicas.
//!
//! Needs `redis-server` and `nginx` (`apt-get install redis-server nginx-light`).

mod clients;
mod deployment;
mod restart;

use std::fmt::Write as _;

use futures::future::join_all;
use mcp_resume::Era;

use clients::{Call, Reported, Via};
use deployment::Deployment;

/// Longer than nginx's idle timeout: the stream is cut while the tool waits after its effect.
const CUT_DELAY_MS: u64 = 800;
/// Long enough for the test to see the effect and kill the replica mid-call.
const KILL_DELAY_MS: u64 = 500;
/// Shorter than the idle timeout: only the drain interrupts these (it begins right after the
/// effect, while the tool still waits).
const DRAIN_DELAY_MS: u64 = 250;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Cut,
    Drain,
    Kill,
}

/// One call and its truth.
#[derive(Debug)]
struct Row {
    fault: Fault,
    era: Era,
    keyed: bool,
    tag: String,
    reported: Reported,
    effects: u64,
    /// Its `tools/call` requests that reached a replica (a re-send makes two).
    posts: u64,
    /// Its requests whose connection closed before their answer went.
    cut: u64,
    /// Its runs that reached their end.
    done: u64,
    /// Its runs a drain found in flight.
    drained: u64,
}

impl Row {
    fn first_answer(&self) -> Reported {
        Reported::Ok(format!("{}:1", self.tag))
    }

    /// A success that is not the answer of the call's one run.
    fn wrong_answer(&self) -> bool {
        matches!(&self.reported, Reported::Ok(_))
            && (self.reported != self.first_answer() || self.effects != 1)
    }
}

fn calls(era: Era, fault: Fault, delay_ms: u64, run: &str) -> Vec<Call> {
    let mut out = Vec::new();
    for via in [Via::Native, Via::Rmcp] {
        for keyed in [true, false] {
            let tag = format!(
                "{run}-{fault:?}-{era:?}-{via:?}-{}",
                if keyed { "k" } else { "u" }
            );
            out.push(Call {
                via,
                era,
                key: keyed.then(|| format!("key-{tag}")),
                tag,
                delay_ms,
            });
        }
    }
    out
}

async fn judge(d: &Deployment, fault: Fault, calls: &[Call], reported: Vec<Reported>) -> Vec<Row> {
    let mut rows = Vec::new();
    for (call, reported) in calls.iter().zip(reported) {
        rows.push(Row {
            fault,
            era: call.era,
            keyed: call.key.is_some(),
            tag: call.tag.clone(),
            reported,
            effects: d.effects(&call.tag).await,
            posts: d.count("posts", &call.tag).await,
            cut: d.count("cut", &call.tag).await,
            done: d.count("done", &call.tag).await,
            drained: d.count("drained", &call.tag).await,
        });
    }
    rows
}

/// nginx cuts each call's stream while the tool waits after its effect; the replica lives on.
async fn cut(d: &Deployment, era: Era, run: &str) -> Vec<Row> {
    let calls = calls(era, Fault::Cut, CUT_DELAY_MS, run);
    let url = d.url();
    let reported = join_all(calls.iter().map(|c| clients::make(c, &url, !d.guarded))).await;
    judge(d, Fault::Cut, &calls, reported).await
}

/// The replica running each call is killed (SIGKILL) right after the call's effect.
async fn kill(d: &mut Deployment, era: Era, run: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    // One at a time: each kill takes one replica down for good.
    for call in calls(era, Fault::Kill, KILL_DELAY_MS, run)
        .into_iter()
        .filter(|c| c.via == Via::Native)
    {
        let url = d.url();
        let (reported, ()) = tokio::join!(clients::make(&call, &url, !d.guarded), async {
            let pid = d.wait_effect(&call.tag).await;
            d.kill9(pid);
        });
        rows.extend(judge(d, Fault::Kill, std::slice::from_ref(&call), vec![reported]).await);
        d.revive().await;
    }
    rows
}

/// A rolling restart's step lands on each call: the replica running it is drained (SIGTERM)
/// right after the call's effect, while the tool still waits, then started again. The drain
/// closes the call's connection before its answer and lets its run end.
async fn drain(d: &mut Deployment, era: Era, run: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    // One at a time: each drain lands on the one replica running its call.
    for call in calls(era, Fault::Drain, DRAIN_DELAY_MS, run) {
        let url = d.url();
        let (reported, ()) = tokio::join!(clients::make(&call, &url, !d.guarded), async {
            let pid = d.wait_effect(&call.tag).await;
            d.drain_and_restart(pid).await;
        });
        rows.extend(judge(d, Fault::Drain, std::slice::from_ref(&call), vec![reported]).await);
    }
    rows
}

/// Whether the row's fault bit its call (an error saying how it did not): a fault that never
/// interrupts anything proves nothing about the guard.
fn bit(r: &Row) -> Result<(), String> {
    let fail = |why: &str| Err(format!("{why}: {r:?}"));
    match r.fault {
        // nginx closed the stream before the answer; with nothing to resume in 2026-07-28, a
        // keyed call was re-sent.
        Fault::Cut if r.cut == 0 => fail("nginx never cut the call before its answer"),
        Fault::Cut if r.keyed && r.era == Era::Modern && r.posts < 2 => {
            fail("a keyed call cut in 2026-07-28 was never re-sent")
        }
        // A 2025-11-25 stream carries event ids: the client resumes it, keyed or not, and a
        // second `tools/call` would mean it re-sent what it could have resumed.
        Fault::Cut if r.era == Era::Legacy && r.posts != 1 => {
            fail("a call cut in 2025-11-25 was re-sent, not resumed")
        }
        // The drain found the run in flight, let it end, and closed the connection before the
        // answer went: a keyed call was re-sent, an unkeyed one never got its answer.
        Fault::Drain if r.drained == 0 => fail("the drain found the call's run ended"),
        Fault::Drain if r.done == 0 => fail("the drained run did not end"),
        Fault::Drain if r.cut == 0 => fail("the drain did not close the call before its answer"),
        Fault::Drain if r.keyed && r.posts < 2 => fail("the drained keyed call was not re-sent"),
        Fault::Drain if !r.keyed && !matches!(r.reported, Reported::Unknown(_)) => {
            fail("an unkeyed call reported other than unknown after its answer was cut")
        }
        // The killed run never reached its end.
        Fault::Kill if r.done >= r.effects => fail("the killed run ended"),
        // Both runs' clients re-send a keyed call to a server that (says it) deduplicates: an
        // unknown reported without asking again would be a guess, not the guard's answer.
        Fault::Kill if r.keyed && r.posts < 2 => fail("the killed keyed call was not re-sent"),
        _ if !r.keyed && r.posts != 1 => fail("an unkeyed call was sent other than once"),
        _ => Ok(()),
    }
}

async fn run_all(guarded: bool) -> Vec<Row> {
    let mut d = Deployment::start(guarded).await;
    let run = if guarded { "g" } else { "n" };
    let mut rows = Vec::new();
    for era in [Era::Legacy, Era::Modern] {
        rows.extend(cut(&d, era, run).await);
        rows.extend(kill(&mut d, era, run).await);
        rows.extend(drain(&mut d, era, run).await);
    }
    eprintln!("{}", table(guarded, &rows));
    if rows
        .iter()
        .any(|r| matches!(r.reported, Reported::Failed(_)))
    {
        eprintln!("{}", d.access_log());
    }
    rows
}

/// The README's table: per fault and era, what happened to keyed and unkeyed calls.
fn table(guarded: bool, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{}\n| fault | era | calls keyed/unkeyed | keyed side effects twice (runs) | unkeyed run twice | keyed completed once with its first answer | OutcomeUnknown | silent wrong answers | other errors |",
        if guarded { "with the guard" } else { "without the guard (client trusting the server to deduplicate)" }
    );
    for fault in [Fault::Cut, Fault::Drain, Fault::Kill] {
        for era in [Era::Legacy, Era::Modern] {
            let of: Vec<&Row> = rows
                .iter()
                .filter(|r| r.fault == fault && r.era == era)
                .collect();
            let keyed = of.iter().filter(|r| r.keyed).count();
            let twice: Vec<u64> = of
                .iter()
                .filter(|r| r.keyed && r.effects > 1)
                .map(|r| r.effects)
                .collect();
            let twice_u = of.iter().filter(|r| !r.keyed && r.effects > 1).count();
            let once = of
                .iter()
                .filter(|r| r.keyed && r.reported == r.first_answer() && r.effects == 1)
                .count();
            let unknown = of
                .iter()
                .filter(|r| matches!(r.reported, Reported::Unknown(_)))
                .count();
            let wrong = of.iter().filter(|r| r.wrong_answer()).count();
            let other = of
                .iter()
                .filter(|r| matches!(r.reported, Reported::Failed(_)))
                .count();
            let _ = writeln!(
                out,
                "| {fault:?} | {era:?} | {keyed}/{} | {} {twice:?} | {twice_u} | {once}/{keyed} | {unknown} | {wrong} | {other} |",
                of.len() - keyed,
                twice.len(),
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn guarded_replicas_run_each_keyed_call_once_and_never_lie() {
    let rows = run_all(true).await;
    for r in &rows {
        let what = format!("{r:?}\n{}", table(true, &rows));
        assert!(r.effects <= 1, "ran twice: {what}");
        assert!(!r.wrong_answer(), "a silent wrong answer: {what}");
        assert!(
            !matches!(r.reported, Reported::Failed(_)),
            "an error: {what}"
        );
        assert_eq!(r.effects, 1, "never ran: {what}");
        if let Err(why) = bit(r) {
            panic!("{why}\n{}", table(true, &rows));
        }
        match (r.fault, r.keyed) {
            // Its execution finished: exactly once, with its stored (first) answer.
            (Fault::Cut | Fault::Drain, true) => assert_eq!(r.reported, r.first_answer(), "{what}"),
            // A 2025-11-25 stream is resumed, so even an unkeyed call gets its answer.
            (Fault::Cut, false) if r.era == Era::Legacy => {
                assert_eq!(r.reported, r.first_answer(), "{what}")
            }
            // Its replica died mid-execution: never success, never a second run.
            (Fault::Kill, _) => assert!(matches!(r.reported, Reported::Unknown(_)), "{what}"),
            // Unkeyed: the answer if the client got it, else an honest unknown.
            (_, false) => assert!(
                r.reported == r.first_answer() || matches!(r.reported, Reported::Unknown(_)),
                "{what}"
            ),
        }
    }
}

/// Without the guard, a client that trusts the server to deduplicate re-sends keyed calls
/// into a server that does not: the duplicates the guard prevents, per fault and era where
/// the fault leaves the client only a re-send (every fault but a 2025-11-25 cut, which the
/// client resumes).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unguarded_replicas_run_resent_keyed_calls_twice() {
    let rows = run_all(false).await;
    for r in &rows {
        let what = format!("{r:?}\n{}", table(false, &rows));
        if let Err(why) = bit(r) {
            panic!("{why}\n{what}");
        }
        if !r.keyed {
            assert!(r.effects <= 1, "the client re-sent an unkeyed call: {what}");
        } else if (r.fault, r.era) != (Fault::Cut, Era::Legacy) {
            assert!(r.effects > 1, "a re-sent keyed call ran once: {what}");
        }
        // Resumed, not re-sent: the one run's answer, guard or no guard.
        if (r.fault, r.era) == (Fault::Cut, Era::Legacy) {
            assert_eq!(r.effects, 1, "a resumed call ran other than once: {what}");
            assert_eq!(
                r.reported,
                r.first_answer(),
                "a resumed call's answer: {what}"
            );
        }
    }
}
