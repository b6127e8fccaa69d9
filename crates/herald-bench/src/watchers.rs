//! Kubernetes watch clients cheap enough to run by the thousand: one task and one socket each, a
//! hand-rolled HTTP/1.1 head parser and chunked decoder ([`crate::wire`]), a line scanner that pulls the
//! send time out of each event without building a JSON tree ([`crate::scan`]), resuming from the last
//! resourceVersion when the server ends a stream (as an informer does).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::hist::Hist;
use crate::{scan, wire};

/// Socket read size per watcher.
const READ_BUF: usize = 8 * 1024;
/// Latency histogram shards: watcher i records into shard i % SHARDS, once per read.
const SHARDS: usize = 64;

/// Nanoseconds since the UNIX epoch (the send-time unit the writers put in objects).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Where and how every watcher of a run watches.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// Path and query of the watch, with `watch=true` (a `resourceVersion` is appended).
    pub path: String,
    pub user_agent: &'static str,
    /// Ask for protobuf (`application/vnd.kubernetes.protobuf`) instead of JSON.
    pub protobuf: bool,
}

/// What all watchers of one run share. Counters are touched once per socket read, not per event.
pub struct Meter {
    /// Send-time window (ns since the epoch) of the writes whose latency is recorded; also the
    /// receipt-time window of `delivered_in_window`. `u64::MAX` until set.
    pub window_start: AtomicU64,
    pub window_end: AtomicU64,
    pub shards: Vec<Mutex<Hist>>,
    pub delivered_in_window: AtomicU64,
    /// MODIFIED events received per watcher, over the whole run.
    pub per_watcher: Vec<AtomicU64>,
    /// Watchers that got a 200 at least once.
    pub attached: AtomicU64,
    pub attached_flags: Vec<AtomicBool>,
    /// Watches with a 200 response open right now.
    pub streaming: AtomicU64,
    /// Streams the server ended (EOF or the last chunk); the watcher resumed from its last RV.
    pub server_ended: AtomicU64,
    /// ERROR events (410 Expired): the watcher restarted from scratch.
    pub expired: AtomicU64,
    pub refused_429: AtomicU64,
    pub other_status: Mutex<BTreeMap<u16, u64>>,
    pub errors: Mutex<BTreeMap<String, u64>>,
    pub bookmarks: AtomicU64,
    /// Per watcher, ns since the epoch: when its latest watch got its 200, and when the first event
    /// or bookmark arrived on that watch (0 until one has).
    pub watch_ns: Vec<AtomicU64>,
    pub first_event_ns: Vec<AtomicU64>,
    /// Per watcher: the resourceVersion its latest watch started from (0: from the current state).
    pub watch_rv: Vec<AtomicU64>,
    /// Per watcher, ns since the epoch: when its latest 200 LIST was read to the end (informers only,
    /// [`crate::informers`]).
    pub listed_ns: Vec<AtomicU64>,
    /// 200 LISTs read (informers only).
    pub lists: AtomicU64,
    /// 200 LISTs whose resourceVersion was 0: a server answering before it has synced.
    pub lists_at_rv0: AtomicU64,
}

impl Meter {
    pub fn new(n: usize) -> Meter {
        Meter {
            window_start: AtomicU64::new(u64::MAX),
            window_end: AtomicU64::new(u64::MAX),
            shards: (0..SHARDS).map(|_| Mutex::new(Hist::default())).collect(),
            delivered_in_window: AtomicU64::new(0),
            per_watcher: (0..n).map(|_| AtomicU64::new(0)).collect(),
            attached: AtomicU64::new(0),
            attached_flags: (0..n).map(|_| AtomicBool::new(false)).collect(),
            streaming: AtomicU64::new(0),
            server_ended: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            refused_429: AtomicU64::new(0),
            other_status: Mutex::new(BTreeMap::new()),
            errors: Mutex::new(BTreeMap::new()),
            bookmarks: AtomicU64::new(0),
            watch_ns: (0..n).map(|_| AtomicU64::new(0)).collect(),
            first_event_ns: (0..n).map(|_| AtomicU64::new(0)).collect(),
            watch_rv: (0..n).map(|_| AtomicU64::new(0)).collect(),
            listed_ns: (0..n).map(|_| AtomicU64::new(0)).collect(),
            lists: AtomicU64::new(0),
            lists_at_rv0: AtomicU64::new(0),
        }
    }

    pub fn error(&self, e: &anyhow::Error) {
        let msg: String = format!("{e:#}").chars().take(160).collect();
        *self
            .errors
            .lock()
            .expect("no panics under lock")
            .entry(msg)
            .or_default() += 1;
    }

    pub fn hist(&self) -> Hist {
        let mut h = Hist::default();
        for s in &self.shards {
            h.merge(&s.lock().expect("no panics under lock"));
        }
        h
    }
}

pub enum Outcome {
    /// The server ended the stream.
    Ended,
    /// An ERROR event: resuming from the last RV is not possible.
    Expired,
    /// 429, with Retry-After seconds.
    Refused(Option<u64>),
    /// Any other non-200 status.
    Status(u16),
}

/// Counts a watch as streaming while it lives.
struct Streaming<'a>(&'a Meter);
impl Drop for Streaming<'_> {
    fn drop(&mut self) {
        self.0.streaming.fetch_sub(1, Relaxed);
    }
}

/// One watcher for the life of the run: watch, and when the stream ends resume from the last RV seen
/// (as an informer does), restarting from scratch after an ERROR event.
pub async fn watcher(id: usize, target: Arc<Target>, start_rv: Option<u64>, m: Arc<Meter>) {
    let mut rv = start_rv;
    let mut samples = Vec::new();
    loop {
        match watch_once(id, &target, &mut rv, &m, &mut samples).await {
            Ok(Outcome::Ended) => {
                m.server_ended.fetch_add(1, Relaxed);
            }
            Ok(Outcome::Expired) => {
                m.expired.fetch_add(1, Relaxed);
                rv = None;
            }
            Ok(Outcome::Refused(after)) => {
                m.refused_429.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_secs(after.unwrap_or(1).max(1))).await;
            }
            Ok(Outcome::Status(code)) => {
                *m.other_status
                    .lock()
                    .expect("no panics under lock")
                    .entry(code)
                    .or_default() += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                m.error(&e);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// A client's dead-connection bound: request bytes the server has not acknowledged for this long
/// end the connection. Models client-go's TLS handshake timeout (10 s, `net/http`'s
/// `DefaultTransport`), which is what ends a kubelet's connection that a server dropped at accept
/// (a full listen backlog with SYN cookies leaves the client ESTABLISHED and the server without the
/// connection; plain TCP would retransmit for minutes, `tcp_retries2`).
pub const DEAD_CONNECTION: Duration = Duration::from_secs(10);

/// A connection to `addr` with Nagle off and [`DEAD_CONNECTION`] as its TCP user timeout.
pub(crate) async fn connect(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let s = TcpStream::connect(addr).await.context("connect")?;
    s.set_nodelay(true)?;
    socket2::SockRef::from(&s).set_tcp_user_timeout(Some(DEAD_CONNECTION))?;
    Ok(s)
}

/// Reads from `s` into `raw` until the response head is complete (the head stays in `raw`).
pub(crate) async fn read_head(s: &mut TcpStream, raw: &mut Vec<u8>) -> anyhow::Result<wire::Head> {
    loop {
        if s.read_buf(raw).await.context("reading the head")? == 0 {
            bail!("connection closed before the response head");
        }
        if let Some(h) = wire::parse_head(raw).map_err(anyhow::Error::msg)? {
            return Ok(h);
        }
    }
}

/// One watch from `rv` (or from the current state when `None`) until it ends; `rv` follows the
/// events read.
pub(crate) async fn watch_once(
    id: usize,
    target: &Target,
    rv: &mut Option<u64>,
    m: &Meter,
    samples: &mut Vec<u64>,
) -> anyhow::Result<Outcome> {
    let addr = target.addr;
    let mut s = connect(addr).await?;
    let path = match rv {
        Some(v) => format!("{}&resourceVersion={v}", target.path),
        None => target.path.clone(),
    };
    let accept = if target.protobuf {
        "application/vnd.kubernetes.protobuf, application/json"
    } else {
        "application/json"
    };
    s.write_all(&wire::get_request_accepting(
        &path,
        &addr.to_string(),
        target.user_agent,
        accept,
    ))
    .await
    .context("sending the request")?;
    let mut raw: Vec<u8> = Vec::with_capacity(READ_BUF);
    let head = read_head(&mut s, &mut raw).await?;
    match head.status {
        200 => {}
        429 => return Ok(Outcome::Refused(head.retry_after)),
        code => return Ok(Outcome::Status(code)),
    }
    raw.drain(..head.len);
    m.streaming.fetch_add(1, Relaxed);
    m.first_event_ns[id].store(0, Relaxed);
    m.watch_rv[id].store(rv.unwrap_or(0), Relaxed);
    m.watch_ns[id].store(now_ns(), Relaxed);
    let _streaming = Streaming(m);
    if !m.attached_flags[id].swap(true, Relaxed) {
        m.attached.fetch_add(1, Relaxed);
    }
    let mut chunked = head.chunked.then(wire::Chunked::default);
    let mut body: Vec<u8> = Vec::with_capacity(READ_BUF);
    loop {
        match &mut chunked {
            Some(d) => {
                let used = d.decode(&raw, &mut body).map_err(anyhow::Error::msg)?;
                raw.drain(..used);
            }
            None => {
                body.append(&mut raw);
            }
        }
        if !body.is_empty() {
            let now = now_ns();
            let ws = m.window_start.load(Relaxed);
            let we = m.window_end.load(Relaxed);
            let sample = |t: u64| {
                if t >= ws && t <= we {
                    samples.push(now.saturating_sub(t) / 1000);
                }
            };
            let batch = if target.protobuf {
                scan::take_frames(&mut body, sample)
            } else {
                scan::take_lines(&mut body, sample)
            };
            if !samples.is_empty() {
                let mut h = m.shards[id % SHARDS].lock().expect("no panics under lock");
                for &v in samples.iter() {
                    h.record(v);
                }
                samples.clear();
            }
            if batch.lines() > 0 && m.first_event_ns[id].load(Relaxed) == 0 {
                m.first_event_ns[id].store(now, Relaxed);
            }
            if batch.modified > 0 {
                m.per_watcher[id].fetch_add(batch.modified, Relaxed);
                if now >= ws && now <= we {
                    m.delivered_in_window.fetch_add(batch.modified, Relaxed);
                }
            }
            if batch.bookmarks > 0 {
                m.bookmarks.fetch_add(batch.bookmarks, Relaxed);
            }
            if let Some(v) = batch.last_rv {
                *rv = Some(v);
            }
            if batch.error {
                return Ok(Outcome::Expired);
            }
        }
        if chunked.as_ref().is_some_and(wire::Chunked::done) {
            return Ok(Outcome::Ended);
        }
        if raw.capacity() - raw.len() < READ_BUF / 2 {
            raw.reserve(READ_BUF);
        }
        if s.read_buf(&mut raw).await.context("reading the stream")? == 0 {
            return Ok(Outcome::Ended);
        }
    }
}
