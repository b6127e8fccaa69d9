//! Informer-shaped watch clients, cheap enough to run by the ten thousand: LIST, then WATCH from the
//! list's resourceVersion, re-watching from the last resourceVersion when the server ends a stream and
//! relisting when that version is gone (410), with client-go's reflector backoff and its REST client's
//! Retry-After retries. Such a client never gives up: it retries until the run aborts it.
//!
//! The watch half is [`crate::watchers`]'s; the per-watcher timestamps it keeps in the
//! [`Meter`] say when each informer last listed, last got a watch and first
//! heard from that watch.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

use crate::watchers::{Meter, Outcome, Target, connect, now_ns, read_head, watch_once};
use crate::{scan, wire};

/// client-go's reflector backoff (`k8s.io/client-go/tools/cache/reflector.go`:
/// `NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`): 800 ms doubling to 30 s, each wait
/// stretched by up to 100 % jitter, back to 800 ms after 2 minutes without a failure. Before a 429
/// reaches the reflector, client-go's REST client (`rest/request.go`, `maxRetries` 10) waits the
/// response's Retry-After and retries, up to 10 times per request.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// Doublings taken since the last reset.
    step: u32,
    /// Retry-After retries of the current request.
    retries: u32,
    last: Option<Instant>,
    /// State of the jitter's generator (splitmix64).
    seed: u64,
}

impl Backoff {
    const INITIAL: f64 = 0.8;
    const MAX: f64 = 30.0;
    const RESET: Duration = Duration::from_secs(120);
    const MAX_RETRIES: u32 = 10;

    pub fn new(seed: u64) -> Backoff {
        Backoff {
            step: 0,
            retries: 0,
            last: None,
            seed,
        }
    }

    /// A uniform draw in [0, 1).
    fn jitter(&mut self) -> f64 {
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as f64 / (u64::MAX as f64 + 1.0)
    }

    /// The reflector's wait after a failed list or watch at `now`.
    pub fn failed(&mut self, now: Instant) -> Duration {
        self.retries = 0;
        if self
            .last
            .is_some_and(|t| now.duration_since(t) > Self::RESET)
        {
            self.step = 0;
        }
        self.last = Some(now);
        let base = (Self::INITIAL * 2f64.powi(self.step.min(16) as i32)).min(Self::MAX);
        self.step += 1;
        Duration::from_secs_f64(base * (1.0 + self.jitter()))
    }

    /// The wait after a 429: Retry-After (1 s when absent) for the request's first 10 refusals, then
    /// the reflector's backoff.
    pub fn refused(&mut self, retry_after: Option<u64>, now: Instant) -> Duration {
        if self.retries < Self::MAX_RETRIES {
            self.retries += 1;
            return Duration::from_secs(retry_after.unwrap_or(1).max(1));
        }
        self.failed(now)
    }

    /// A request succeeded: the next one gets its own Retry-After retries.
    pub fn succeeded(&mut self) {
        self.retries = 0;
    }
}

/// What one LIST got.
enum Listed {
    /// 200: the list's resourceVersion.
    At(u64),
    Refused(Option<u64>),
    Status(u16),
}

/// One informer for the life of the run: `list_path` then `target.path` from the list's version.
pub async fn informer(id: usize, target: Target, list_path: String, m: Arc<Meter>) {
    let mut rv: Option<u64> = None;
    let mut backoff = Backoff::new(id as u64);
    let mut samples = Vec::new();
    loop {
        let wait = if rv.is_none() {
            match list_once(id, &target, &list_path, &m).await {
                Ok(Listed::At(v)) => {
                    backoff.succeeded();
                    rv = Some(v);
                    continue;
                }
                Ok(Listed::Refused(after)) => {
                    m.refused_429.fetch_add(1, Relaxed);
                    backoff.refused(after, Instant::now())
                }
                Ok(Listed::Status(code)) => {
                    other_status(&m, code);
                    backoff.failed(Instant::now())
                }
                Err(e) => {
                    m.error(&e);
                    backoff.failed(Instant::now())
                }
            }
        } else {
            match watch_once(id, &target, &mut rv, &m, &mut samples).await {
                // The reflector re-watches at once from its last version after a clean end.
                Ok(Outcome::Ended) => {
                    backoff.succeeded();
                    m.server_ended.fetch_add(1, Relaxed);
                    continue;
                }
                Ok(Outcome::Expired) | Ok(Outcome::Status(410)) => {
                    m.expired.fetch_add(1, Relaxed);
                    rv = None;
                    continue;
                }
                Ok(Outcome::Refused(after)) => {
                    m.refused_429.fetch_add(1, Relaxed);
                    backoff.refused(after, Instant::now())
                }
                Ok(Outcome::Status(code)) => {
                    other_status(&m, code);
                    backoff.failed(Instant::now())
                }
                // A refused or reset connection: the reflector backs off and watches again from
                // the same version (`isWatchErrorRetriable`).
                Err(e) => {
                    m.error(&e);
                    backoff.failed(Instant::now())
                }
            }
        };
        tokio::time::sleep(wait).await;
    }
}

fn other_status(m: &Meter, code: u16) {
    *m.other_status
        .lock()
        .expect("no panics under lock")
        .entry(code)
        .or_default() += 1;
}

/// One LIST, read to its end; a 200's resourceVersion is the first in the body (the list's
/// `metadata`, written before its items).
async fn list_once(id: usize, target: &Target, path: &str, m: &Meter) -> anyhow::Result<Listed> {
    let mut s = connect(target.addr).await?;
    s.write_all(&wire::get_request(
        path,
        &target.addr.to_string(),
        target.user_agent,
    ))
    .await
    .context("sending the list")?;
    let mut raw: Vec<u8> = Vec::with_capacity(16 * 1024);
    let head = read_head(&mut s, &mut raw).await?;
    match head.status {
        200 => {}
        429 => return Ok(Listed::Refused(head.retry_after)),
        code => return Ok(Listed::Status(code)),
    }
    raw.drain(..head.len);
    let mut body = Vec::with_capacity(raw.len());
    let mut chunked = head.chunked.then(wire::Chunked::default);
    loop {
        match &mut chunked {
            Some(d) => {
                let used = d.decode(&raw, &mut body).map_err(anyhow::Error::msg)?;
                raw.drain(..used);
                if d.done() {
                    break;
                }
            }
            None => {
                body.append(&mut raw);
                if head.content_length.is_some_and(|n| body.len() as u64 >= n) {
                    break;
                }
            }
        }
        if s.read_buf(&mut raw).await.context("reading the list")? == 0 {
            if chunked.is_none() && head.content_length.is_none() {
                break;
            }
            bail!("connection closed inside the list");
        }
    }
    let rv = scan::resource_version(&body).context("a list without a resourceVersion")?;
    m.lists.fetch_add(1, Relaxed);
    if rv == 0 {
        m.lists_at_rv0.fetch_add(1, Relaxed);
    }
    m.listed_ns[id].store(now_ns(), Relaxed);
    Ok(Listed::At(rv))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_30_s_with_jitter_and_resets_after_2_minutes_quiet() {
        let t0 = Instant::now();
        let mut b = Backoff::new(7);
        let waits: Vec<f64> = (0..8)
            .map(|i| b.failed(t0 + Duration::from_secs(i)).as_secs_f64())
            .collect();
        for (i, w) in waits.iter().enumerate() {
            let base = (0.8 * 2f64.powi(i as i32)).min(30.0);
            assert!(
                *w >= base && *w < 2.0 * base,
                "wait {i}: {w} for base {base}"
            );
        }
        let w = b.failed(t0 + Duration::from_secs(300)).as_secs_f64();
        assert!((0.8..1.6).contains(&w), "reset: {w}");
    }

    #[test]
    fn a_429_waits_retry_after_ten_times_then_backs_off() {
        let t0 = Instant::now();
        let mut b = Backoff::new(1);
        for _ in 0..10 {
            assert_eq!(b.refused(Some(3), t0), Duration::from_secs(3));
        }
        let w = b.refused(Some(3), t0).as_secs_f64();
        assert!((0.8..1.6).contains(&w), "{w}");
        assert_eq!(b.refused(None, t0), Duration::from_secs(1));
        b.succeeded();
        assert_eq!(b.refused(Some(0), t0), Duration::from_secs(1));
    }
}
