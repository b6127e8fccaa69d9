//! Paced work: start one task per tick at a fixed rate until told to stop, with a bound on how many
//! are in flight, and wait for the last of them (the benchmarks' writers).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};

/// Spawns `task(i)` for i = 0, 1, … `rate` times per second until `stop` changes, at most
/// `in_flight` at a time (a tick waits for a free slot); returns when every task has finished.
pub async fn paced<F, Fut>(rate: f64, in_flight: u32, mut stop: watch::Receiver<bool>, mut task: F)
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let sem = Arc::new(Semaphore::new(in_flight as usize));
    let mut iv = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let mut i = 0usize;
    loop {
        tokio::select! {
            _ = iv.tick() => {}
            _ = stop.changed() => break,
        }
        let Ok(permit) = sem.clone().acquire_owned().await else {
            break;
        };
        let fut = task(i);
        i += 1;
        tokio::spawn(async move {
            fut.await;
            drop(permit);
        });
    }
    let _ = sem.acquire_many(in_flight).await;
}
