//! Heap held by a freshly built client with the default builder, counted by a global
//! allocator. The only test in this binary, so no other thread allocates while it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only the counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A plain-http endpoint does not load the platform's trust anchors (about 85 KB of the
/// ~105 KB a default `reqwest::Client` holds); an https endpoint still does.
#[test]
fn a_plain_http_client_does_not_hold_trust_anchors() {
    let built = |url: &str| {
        let before = LIVE.load(Ordering::Relaxed);
        let client = mcp_resume::Client::builder(url)
            .build()
            .expect("a valid configuration");
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        drop(client);
        bytes
    };
    // The first build pays for process-wide lazies (the crypto provider, proxy settings).
    built("https://127.0.0.1:1/mcp");
    built("http://127.0.0.1:1/mcp");
    let plain = built("http://127.0.0.1:1/mcp");
    assert!(plain < 40 * 1024, "a plain-http client holds {plain} B");
    if cfg!(feature = "rustls") {
        let tls = built("https://127.0.0.1:1/mcp");
        assert!(
            tls > plain + 40 * 1024,
            "an https client ({tls} B) should hold the trust anchors a plain one ({plain} B) does not"
        );
    }
}
