//! The client against a hostile server: a hand-written HTTP/1.1 server that answers
//! `initialize` correctly and then misbehaves in scripted ways (endless or oversized lines,
//! bodies and headers, invalid UTF-8, broken framing, wrong content types, trickles, hangs,
//! redirects, hostile `retry` and event ids, floods and reconnect storms, every error status),
//! and the same server speaking the modern era (`hostile/modern_server.rs`) misbehaving in the
//! modern era's own ways (`hostile/modern.rs`).
//!
//! Each case checks what the client returns (`ErrorKind`), how fast, how much memory it took
//! (a counting allocator, below), how many requests it made, and that the same client works
//! again once the server behaves, unless the outcome is terminal.
//!
//! Memory is counted per thread: every case runs on a current-thread tokio runtime, so the
//! client's driver and its exchanges allocate on the test's own thread, while the server runs
//! on a thread of its own and cases running in parallel use theirs; neither blurs the client's
//! peak. The heaviest cases still run one at a time ([`harness::heavy`]) to keep the machine's
//! two cores for them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

#[path = "hostile/harness.rs"]
mod harness;
#[path = "hostile/modern_server.rs"]
mod modern_server;
#[path = "hostile/server.rs"]
mod server;

#[path = "hostile/bodies.rs"]
mod bodies;
#[path = "hostile/defects.rs"]
mod defects;
#[path = "hostile/deploy.rs"]
mod deploy;
#[path = "hostile/hangs.rs"]
mod hangs;
#[path = "hostile/modern.rs"]
mod modern;
#[path = "hostile/owned.rs"]
mod owned;
#[path = "hostile/probe.rs"]
mod probe;
#[path = "hostile/protocol.rs"]
mod protocol;
#[path = "hostile/retry_and_checks.rs"]
mod retry_and_checks;
#[path = "hostile/statuses.rs"]
mod statuses;
#[path = "hostile/trust.rs"]
mod trust;

struct Counting;

static CURRENT: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    // Const-initialised and without destructors: touching them never allocates, which an
    // allocator must not do.
    static THREAD_CURRENT: Cell<isize> = const { Cell::new(0) };
    static THREAD_PEAK: Cell<isize> = const { Cell::new(0) };
}

fn grew(bytes: usize) {
    let bytes = bytes as isize;
    let now = CURRENT.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
    let _ = THREAD_CURRENT.try_with(|current| {
        let now = current.get() + bytes;
        current.set(now);
        let _ = THREAD_PEAK.try_with(|peak| {
            if now > peak.get() {
                peak.set(now);
            }
        });
    });
}

fn shrank(bytes: usize) {
    let bytes = bytes as isize;
    CURRENT.fetch_sub(bytes, Ordering::Relaxed);
    let _ = THREAD_CURRENT.try_with(|current| current.set(current.get() - bytes));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc(layout);
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc_zeroed(layout);
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = System.realloc(ptr, layout, new_size);
        if !new.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Live heap bytes: process-wide and on this thread.
pub fn heap_now() -> (isize, isize) {
    (
        CURRENT.load(Ordering::Relaxed),
        THREAD_CURRENT.with(Cell::get),
    )
}

/// The process-wide peak since start (for messages only: other tests move it).
pub fn process_peak() -> isize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new peak on this thread at the current level; returns that level.
pub fn reset_thread_peak() -> isize {
    let now = THREAD_CURRENT.with(Cell::get);
    THREAD_PEAK.with(|peak| peak.set(now));
    now
}

pub(crate) fn thread_peak() -> isize {
    THREAD_PEAK.with(Cell::get)
}
