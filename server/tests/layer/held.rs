//! The bytes each thread of this test binary holds, counted by its allocator: what a test
//! asserts the guard keeps or holds at most.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the bytes each thread holds, and the most it held since [`reset_peak`].
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(change: isize) {
    let _ = HELD.try_with(|held| {
        let now = held.get() + change;
        held.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        note(size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The most this thread held above what it held when asked to start counting.
pub(crate) fn peak_since(start: isize) -> isize {
    PEAK.with(Cell::get) - start
}

/// Starts counting the peak from now; says what this thread holds now.
pub(crate) fn reset_peak() -> isize {
    let now = HELD.with(Cell::get);
    PEAK.with(|p| p.set(now));
    now
}

/// What this thread holds now above `start`.
pub(crate) fn held_since(start: isize) -> isize {
    HELD.with(Cell::get) - start
}
