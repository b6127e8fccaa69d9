//! Waiting for changes of cached resources: how the tasks that read the cache (monitors, Istio's
//! policies) learn that what they read changed, taking bursts of changes together.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// marks them all seen. `false` once `stop` is cancelled or the cache is gone.
pub async fn next_change(
    stop: &CancellationToken,
    changes: &mut [tokio::sync::watch::Receiver<u64>],
    listed: bool,
    quiet: Duration,
) -> bool {
    let settle = if listed {
        Duration::MAX
    } else {
        Duration::from_millis(100)
    };
    let any = async {
        if changes.is_empty() {
            return std::future::pending().await;
        }
        let waits = changes.iter_mut().map(|rx| Box::pin(rx.changed()));
        futures::future::select_all(waits).await.0.is_ok()
    };
    tokio::select! {
        () = stop.cancelled() => return false,
        // A sender gone: the cache is being dropped.
        ok = any => if !ok { return false },
        () = tokio::time::sleep(settle) => {}
    }
    tokio::time::sleep(quiet).await;
    for rx in changes.iter_mut() {
        rx.borrow_and_update();
    }
    !stop.is_cancelled()
}
