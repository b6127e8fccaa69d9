//! Who fetched service discovery recently: one entry per (client address, job, shard), kept for
//! `CONSUMER_WINDOW`, bounded so a scan of random job names cannot grow it without limit.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use herald_index::encoded::Shard;

/// How long a consumer counts as current after its last request.
pub const CONSUMER_WINDOW: Duration = Duration::from_secs(300);

/// Entries kept at most; past it the oldest are forgotten first.
const MAX_CONSUMERS: usize = 10_000;

/// (client address, job index, shard): plain values, so recording a repeat fetch allocates nothing —
/// it runs on every SD request, 304s included.
type Key = (Option<IpAddr>, usize, Option<(u64, u64)>);

/// Recent SD consumers.
#[derive(Debug, Default)]
pub struct Consumers {
    seen: Mutex<HashMap<Key, Instant>>,
}

/// One recent consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    pub addr: Option<IpAddr>,
    /// Index of the job in `Shared::jobs`.
    pub job: usize,
    pub shard: Option<Shard>,
}

impl Consumers {
    /// `addr` fetched job `job` (its index; one shard of it).
    pub fn record(&self, addr: Option<IpAddr>, job: usize, shard: Option<Shard>) {
        let key = (addr, job, shard.map(|s| (s.index, s.count)));
        let now = Instant::now();
        let mut seen = self.seen.lock().expect("consumers lock is never poisoned");
        if let Some(at) = seen.get_mut(&key) {
            *at = now;
            return;
        }
        if seen.len() >= MAX_CONSUMERS {
            seen.retain(|_, at| now.duration_since(*at) < CONSUMER_WINDOW);
            while seen.len() >= MAX_CONSUMERS {
                let Some(oldest) = seen.iter().min_by_key(|(_, at)| **at).map(|(k, _)| *k) else {
                    break;
                };
                seen.remove(&oldest);
            }
        }
        seen.insert(key, now);
    }

    /// The consumers seen within `CONSUMER_WINDOW`.
    pub fn recent(&self) -> Vec<Consumer> {
        let seen = self.seen.lock().expect("consumers lock is never poisoned");
        let now = Instant::now();
        seen.iter()
            .filter(|(_, at)| now.duration_since(**at) < CONSUMER_WINDOW)
            .map(|((addr, job, shard), _)| Consumer {
                addr: *addr,
                job: *job,
                shard: shard.map(|(index, count)| Shard { index, count }),
            })
            .collect()
    }
}
