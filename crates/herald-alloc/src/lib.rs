//! herald's allocator, and the one call into it that safe Rust cannot make.
//!
//! herald's hot paths (decoding objects, building label sets) allocate many small, short-lived values;
//! mimalloc handles that pattern far better than glibc malloc (see bench/RESULTS.md). Its one cost is
//! that memory freed in a burst is returned to the OS lazily: a freed page is purged only once it has
//! been free for `purge_delay` (1 s in mimalloc 3) *and* some later free or collect gets to it. A burst
//! of work that allocates megabytes and then stops (an explain at `k8s-limits` walks 4,951 jobs) leaves
//! its pages resident: herald's RSS grew 12–30 MiB over its first hundred explains (issue 23).
//! [`release_free_memory`] hands them back at once, for the callers that know a burst has ended.
//!
//! This crate exists so that the rest of the workspace keeps `unsafe_code = "forbid"`: the FFI call
//! lives here, alone, and is audited below.

pub use mimalloc::MiMalloc;

/// Returns every page mimalloc holds free to the OS now: the calling thread's empty pages, and the
/// freed ranges of every arena, whether or not their purge delay has passed. Costs a walk of the
/// calling thread's heap and of the arenas' bitmaps (microseconds); meant for the end of a burst, not
/// for a hot path. Harmless when mimalloc is not the global allocator (it then holds nothing).
pub fn release_free_memory() {
    // SAFETY: `mi_collect` takes no pointers and only touches mimalloc's own bookkeeping, which is
    // thread-safe; it is documented as callable from any thread at any time.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn releasing_after_a_burst_keeps_the_heap_usable() {
        let burst: Vec<Vec<u8>> = (0..1_000).map(|i| vec![i as u8; 4096]).collect();
        drop(burst);
        super::release_free_memory();
        let after: Vec<u8> = vec![7; 1 << 20];
        assert!(after.iter().all(|b| *b == 7));
    }
}
