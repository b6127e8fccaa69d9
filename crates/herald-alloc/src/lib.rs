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

/// mimalloc 3's `mi_option_purge_delay`: its place in `mi_option_e` (include/mimalloc.h of the v3
/// sources libmimalloc-sys builds; the crate names no constant for it). A test checks it reads
/// mimalloc's default for that option, 1,000 ms.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// From now on, pages mimalloc frees go back to the OS at once instead of after `purge_delay` (1 s),
/// unless the operator chose a delay (`MIMALLOC_PURGE_DELAY`, or its old name
/// `MIMALLOC_RESET_DELAY`). Returns whether it changed the delay.
///
/// Why, and why not from the start: under churn with consumers attached, each round of body builds
/// frees what the last round built while the next allocates; with the delay, both are resident at
/// the peak. Measured at `k8s-limits` with the steady-state consumers (DESIGN-NOTES section 8):
/// peak RSS 652 → 621 MiB for 3 % more CPU in the steady state; but purging at once during the
/// first sync, which frees and allocates far more, cost 47 % more CPU to ready. So herald calls
/// this once its first sync is done.
pub fn purge_freed_pages_at_once() -> bool {
    if ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        return false;
    }
    // SAFETY: `mi_option_set` takes an option index and a value, no pointers; mimalloc documents it
    // as callable at any time (options are read again where they are used).
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
    true
}

/// Turns transparent huge pages off for the process, unless `MIMALLOC_ALLOW_THP` is set (then
/// mimalloc does as that says). Call it first thing in `main`: the flag covers every mapping, those
/// made before it too, from the next page fault on.
///
/// Why: mimalloc asks for huge pages on its arenas (`madvise`), so a page touched for a few small
/// objects costs 2 MiB of zeroed, resident memory. Measured at `k8s-limits` with the consumers of the
/// steady-state benchmark attached (DESIGN-NOTES section 8): 40–53 MiB less RSS, mean and peak; the
/// first sync spent 10–16 % of its CPU zeroing huge pages. Returns whether the flag is set (an old
/// kernel without `PR_SET_THP_DISABLE` refuses it; huge pages then stay as the system has them).
pub fn disable_transparent_huge_pages() -> bool {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_thp_disable(true).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
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

    #[test]
    fn the_purge_delay_option_is_the_one_set_to_zero() {
        if ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some())
        {
            assert!(!super::purge_freed_pages_at_once());
            return;
        }
        // SAFETY: as in `purge_freed_pages_at_once`: an index in, a value out.
        #[allow(unsafe_code)]
        let get = || unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        // mimalloc 3's default purge delay: the index names that option and no other.
        assert_eq!(get(), 1000);
        assert!(super::purge_freed_pages_at_once());
        assert_eq!(get(), 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn huge_pages_are_turned_off_for_the_process() {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            assert!(!super::disable_transparent_huge_pages());
            return;
        }
        assert!(super::disable_transparent_huge_pages());
        assert_eq!(nix::sys::prctl::get_thp_disable(), Ok(true));
        // Kernels since 6.4 show it in the process's status too.
        let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
        if let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) {
            assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
        }
    }
}
