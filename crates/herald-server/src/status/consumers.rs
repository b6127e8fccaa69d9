//! Who fetched service discovery recently: one entry per (client address, job, shard), kept for
//! `CONSUMER_WINDOW`, bounded so a scan of random job names cannot grow it without limit.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::http::SdQuery;
use crate::snapshot::Shard;
use crate::state::Shared;

/// How long a consumer counts as current after its last request.
pub const CONSUMER_WINDOW: Duration = Duration::from_secs(300);

/// Entries kept at most; past it the oldest are forgotten first.
const MAX_CONSUMERS: usize = 10_000;

type Key = (Option<IpAddr>, String, Option<(u64, u64)>);

/// Recent SD consumers.
#[derive(Debug, Default)]
pub struct Consumers {
    seen: Mutex<HashMap<Key, Instant>>,
}

/// One recent consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    pub addr: Option<IpAddr>,
    pub job: String,
    pub shard: Option<Shard>,
}

impl Consumers {
    /// `addr` fetched `job` (one shard of it).
    pub fn record(&self, addr: Option<IpAddr>, job: &str, shard: Option<Shard>) {
        let mut seen = self.seen.lock().expect("consumers lock is never poisoned");
        let now = Instant::now();
        if seen.len() >= MAX_CONSUMERS {
            seen.retain(|_, at| now.duration_since(*at) < CONSUMER_WINDOW);
            while seen.len() >= MAX_CONSUMERS {
                let Some(oldest) = seen
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                seen.remove(&oldest);
            }
        }
        seen.insert(
            (addr, job.to_string(), shard.map(|s| (s.index, s.count))),
            now,
        );
    }

    /// The consumers seen within `CONSUMER_WINDOW`.
    pub fn recent(&self) -> Vec<Consumer> {
        let seen = self.seen.lock().expect("consumers lock is never poisoned");
        let now = Instant::now();
        seen.iter()
            .filter(|(_, at)| now.duration_since(**at) < CONSUMER_WINDOW)
            .map(|((addr, job, shard), _)| Consumer {
                addr: *addr,
                job: job.clone(),
                shard: shard.map(|(index, count)| Shard { index, count }),
            })
            .collect()
    }
}

/// Middleware on the SD routes: records a successful fetch of a known job.
pub async fn record_consumer(
    State(shared): State<Arc<Shared>>,
    req: Request,
    next: Next,
) -> Response {
    let addr = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let job = req
        .uri()
        .path()
        .strip_prefix("/sd/v1/")
        .filter(|j| !j.is_empty())
        .map(str::to_string);
    let shard = SdQuery::parse(req.uri().query()).ok().and_then(|q| q.shard);
    let res = next.run(req).await;
    if let Some(job) = job
        && (res.status().is_success() || res.status() == axum::http::StatusCode::NOT_MODIFIED)
        && shared.job(&job).is_some()
    {
        shared.consumers.record(addr, &job, shard);
    }
    res
}
