//! Giving freed memory back after a burst of allocation. herald-server does not choose the allocator
//! (the `herald` binary does, see `herald-alloc`): the binary registers how to return free pages to the
//! OS, and code that ends a large transient burst (an explain) asks for it with [`release_when_quiet`].
//! Without it the allocator keeps those pages resident until later activity purges them (issue 23:
//! herald's RSS grew 12 MiB over its first hundred explains at a tenth of `k8s-limits`, 29 MiB at full
//! size).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static RELEASE: OnceLock<fn()> = OnceLock::new();
/// Bursts asked to be released so far: a release runs only if no later burst asked since.
static ASKED: AtomicU64 = AtomicU64::new(0);

/// Registers how the process returns its free pages to the OS (the first call wins).
pub fn set_release(f: fn()) {
    let _ = RELEASE.set(f);
}

/// Returns the process's free pages to the OS, if the binary said how; otherwise does nothing.
pub fn release() {
    if let Some(f) = RELEASE.get() {
        f();
    }
}

/// Releases free pages once `quiet` has passed without another call: one release after a run of
/// explains rather than one per explain (a release purges pages the next explain would fault back
/// in). Must be called within a Tokio runtime.
pub fn release_when_quiet(quiet: Duration) {
    if RELEASE.get().is_none() {
        return;
    }
    let mine = ASKED.fetch_add(1, Ordering::Relaxed) + 1;
    tokio::spawn(async move {
        tokio::time::sleep(quiet).await;
        if ASKED.load(Ordering::Relaxed) == mine {
            // NB: a blocking thread: a forced collect walks every arena (well under a millisecond).
            let _ = tokio::task::spawn_blocking(release).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    static RELEASED: AtomicU64 = AtomicU64::new(0);

    #[tokio::test]
    async fn a_run_of_bursts_is_released_once_it_pauses() {
        super::set_release(|| {
            RELEASED.fetch_add(1, Ordering::Relaxed);
        });
        let quiet = Duration::from_secs(2);
        for _ in 0..5 {
            super::release_when_quiet(quiet);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            RELEASED.load(Ordering::Relaxed),
            0,
            "released before the pause"
        );
        let asked = Instant::now();
        while RELEASED.load(Ordering::Relaxed) == 0 && asked.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Every earlier burst's timer has fired by now too: they saw a later burst and did nothing.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(RELEASED.load(Ordering::Relaxed), 1);
    }
}
