//! The benches' global allocator: mimalloc (the `riffle` binary's), counting the bytes allocated
//! while [`COUNTING`] is on, so that state memory can be measured exactly.

use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// Mimalloc with a byte counter.
pub struct Counting;

/// Bytes allocated minus bytes freed while counting.
pub static ALLOCATED: AtomicIsize = AtomicIsize::new(0);
/// Counting is on only while memory is measured: a shared counter would slow the other benchmarks.
pub static COUNTING: AtomicBool = AtomicBool::new(false);

fn count(delta: isize) {
    if COUNTING.load(Ordering::Relaxed) {
        ALLOCATED.fetch_add(delta, Ordering::Relaxed);
    }
}

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count(layout.size() as isize);
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        count(-(layout.size() as isize));
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}
