//! kube-watchers: N Kubernetes watch clients on one herald versus the same N on kube-sim directly.
//!
//! For each N and each path (`herald`: watchers on herald's Kubernetes API face, herald on kube-sim;
//! `direct`: watchers on a fresh kube-sim), this starts `kube-sim` (and `herald`) as child processes on
//! free loopback ports, creates the ConfigMaps to churn, opens N watches of ConfigMaps in namespace
//! `default` at a bounded rate (retrying 429 after its Retry-After), then PUTs `--rate` ConfigMap updates
//! per second to kube-sim, round-robin over `--configmaps` objects, each carrying its send time (ns since
//! the UNIX epoch) in `data.t`. Every watcher is one task reading its socket with a hand-rolled chunked
//! decoder and a line scanner (no JSON tree per event) and records receipt time minus `t`. After a
//! warm-up, a window of `--seconds` is measured: deliveries per second, latency of the writes sent in
//! the window, CPU (utime+stime from /proc) of herald, kube-sim and this client, RSS, kube-sim's meter
//! (`/sim/stats`: bytes sent to and watches open by its readers) and herald's `/metrics`. Then the writer
//! stops and every watcher must catch up to every write (missing events are reported).
//!
//! It measures and prints; it asserts nothing about speed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use herald_bench::hist::Hist;
use herald_bench::{median, metric_sum, procfs, scan, wire};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

/// The User-Agent of every watcher: kube-sim's meter groups its counts by User-Agent (and keeps at most
/// 1,000 distinct ones), so one shared name keeps 10,000 watchers in one row.
const WATCHER_UA: &str = "bench-watcher";
const WRITER_UA: &str = "bench-writer";
const SETUP_UA: &str = "bench-setup";
const WATCH_PATH: &str =
    "/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true";
/// Socket read size per watcher.
const READ_BUF: usize = 8 * 1024;
/// Latency histogram shards: watcher i records into shard i % SHARDS, once per read.
const SHARDS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
enum Via {
    /// Watchers on herald's Kubernetes API face; herald holds one watch on kube-sim.
    Herald,
    /// Watchers on kube-sim itself.
    Direct,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Herald => "herald",
            Via::Direct => "direct",
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "kube-watchers",
    about = "Kubernetes API watch fan-out: N watchers through herald versus directly on kube-sim"
)]
struct Args {
    /// Watcher counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    watchers: Vec<usize>,
    /// Which paths to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "herald,direct")]
    via: Vec<Via>,
    /// Length of the measured window, in seconds.
    #[arg(long, default_value_t = 30.0)]
    seconds: f64,
    /// Seconds of writes before the window opens.
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// ConfigMap updates per second written to kube-sim.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// ConfigMaps the updates go round-robin over.
    #[arg(long, default_value_t = 50)]
    configmaps: usize,
    /// New watches opened per second.
    #[arg(long, default_value_t = 1000.0)]
    attach_rate: f64,
    /// Repetitions of every (N, path); the table shows medians, the JSON every run.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// The kube-sim binary [default: $CARGO_TARGET_DIR/release/kube-sim, else next to this binary].
    #[arg(long)]
    kube_sim: Option<PathBuf>,
    /// The herald binary [default: $CARGO_TARGET_DIR/release/herald, else next to this binary].
    #[arg(long)]
    herald: Option<PathBuf>,
    /// Write every run and the medians here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Measure nothing: print the tables of a JSON file this tool wrote.
    #[arg(long, value_name = "PATH")]
    from_json: Option<PathBuf>,
    /// Write the markdown tables here too.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Where child logs and herald's config go [default: a new directory under the temp dir].
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// How long watchers get to catch up with the last write after the writer stops.
    #[arg(long, default_value_t = 20.0)]
    drain_timeout: f64,
    /// Extra seconds allowed for all watches to open, beyond N / attach-rate.
    #[arg(long, default_value_t = 60.0)]
    attach_timeout: f64,
    /// RUST_LOG for the children.
    #[arg(long, default_value = "warn")]
    child_log: String,
    /// Before each measurement, wait up to this many seconds for the machine to be quiet (other
    /// processes' CPU below --idle-below cores over 3 s); 0 to start at once.
    #[arg(long, default_value_t = 0.0)]
    wait_idle: f64,
    /// What "quiet" means for --wait-idle, in busy cores.
    #[arg(long, default_value_t = 0.3)]
    idle_below: f64,
    /// herald's kube_api.admission_rate (new lists and watches per second).
    #[arg(long, default_value_t = 100_000.0)]
    admission_rate: f64,
    /// herald's kube_api.admission_burst.
    #[arg(long, default_value_t = 20_000)]
    admission_burst: u32,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

// ---------------------------------------------------------------------------------------------------
// Watchers

/// What all watchers of one run share. Counters are touched once per socket read, not per event.
struct Meter {
    /// Send-time window (ns since the epoch) of the writes whose latency is recorded; also the
    /// receipt-time window of `delivered_in_window`. `u64::MAX` until set.
    window_start: AtomicU64,
    window_end: AtomicU64,
    shards: Vec<Mutex<Hist>>,
    delivered_in_window: AtomicU64,
    /// MODIFIED events received per watcher, over the whole run.
    per_watcher: Vec<AtomicU64>,
    /// Watchers that got a 200 at least once.
    attached: AtomicU64,
    attached_flags: Vec<AtomicBool>,
    /// Watches with a 200 response open right now.
    streaming: AtomicU64,
    /// Streams the server ended (EOF or the last chunk); the watcher resumed from its last RV.
    server_ended: AtomicU64,
    /// ERROR events (410 Expired): the watcher restarted from scratch.
    expired: AtomicU64,
    refused_429: AtomicU64,
    other_status: Mutex<BTreeMap<u16, u64>>,
    errors: Mutex<BTreeMap<String, u64>>,
    bookmarks: AtomicU64,
}

impl Meter {
    fn new(n: usize) -> Meter {
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
        }
    }

    fn error(&self, e: &anyhow::Error) {
        let msg: String = format!("{e:#}").chars().take(160).collect();
        *self
            .errors
            .lock()
            .expect("no panics under lock")
            .entry(msg)
            .or_default() += 1;
    }

    fn hist(&self) -> Hist {
        let mut h = Hist::default();
        for s in &self.shards {
            h.merge(&s.lock().expect("no panics under lock"));
        }
        h
    }
}

enum Outcome {
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
async fn watcher(id: usize, addr: SocketAddr, start_rv: u64, m: Arc<Meter>) {
    let mut rv = Some(start_rv);
    let mut samples = Vec::new();
    loop {
        match watch_once(id, addr, &mut rv, &m, &mut samples).await {
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

async fn watch_once(
    id: usize,
    addr: SocketAddr,
    rv: &mut Option<u64>,
    m: &Meter,
    samples: &mut Vec<u64>,
) -> anyhow::Result<Outcome> {
    let mut s = TcpStream::connect(addr).await.context("connect")?;
    s.set_nodelay(true)?;
    let path = match rv {
        Some(v) => format!("{WATCH_PATH}&resourceVersion={v}"),
        None => WATCH_PATH.to_string(),
    };
    s.write_all(&wire::get_request(&path, &addr.to_string(), WATCHER_UA))
        .await
        .context("sending the request")?;
    let mut raw: Vec<u8> = Vec::with_capacity(READ_BUF);
    let head = loop {
        if s.read_buf(&mut raw).await.context("reading the head")? == 0 {
            bail!("connection closed before the response head");
        }
        if let Some(h) = wire::parse_head(&raw).map_err(anyhow::Error::msg)? {
            break h;
        }
    };
    match head.status {
        200 => {}
        429 => return Ok(Outcome::Refused(head.retry_after)),
        code => return Ok(Outcome::Status(code)),
    }
    raw.drain(..head.len);
    m.streaming.fetch_add(1, Relaxed);
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
            let batch = scan::take_lines(&mut body, |t| {
                if t >= ws && t <= we {
                    samples.push(now.saturating_sub(t) / 1000);
                }
            });
            if !samples.is_empty() {
                let mut h = m.shards[id % SHARDS].lock().expect("no panics under lock");
                for &v in samples.iter() {
                    h.record(v);
                }
                samples.clear();
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

// ---------------------------------------------------------------------------------------------------
// Writer

#[derive(Default)]
struct WriteCounts {
    ok: AtomicU64,
    failed: AtomicU64,
    in_window: AtomicU64,
}

/// PUTs `rate` updates per second (round-robin over `k` ConfigMaps) until `stop`, at most 64 in flight;
/// returns when every write has been answered.
async fn writer(
    client: reqwest::Client,
    sim: String,
    k: usize,
    rate: f64,
    m: Arc<Meter>,
    counts: Arc<WriteCounts>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
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
        let name = format!("bench-{}", i % k);
        i += 1;
        let (client, sim, m, counts) = (client.clone(), sim.clone(), m.clone(), counts.clone());
        tokio::spawn(async move {
            let t = now_ns();
            let body = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default"},
                "data": {"t": t.to_string()},
            });
            let r = client
                .put(format!("{sim}/api/v1/namespaces/default/configmaps/{name}"))
                .header(reqwest::header::USER_AGENT, WRITER_UA)
                .json(&body)
                .send()
                .await;
            match r {
                Ok(resp) if resp.status().is_success() => {
                    counts.ok.fetch_add(1, Relaxed);
                    if t >= m.window_start.load(Relaxed) && t <= m.window_end.load(Relaxed) {
                        counts.in_window.fetch_add(1, Relaxed);
                    }
                }
                _ => {
                    counts.failed.fetch_add(1, Relaxed);
                }
            }
            drop(permit);
        });
    }
    let _ = sem.acquire_many(64).await;
}

// ---------------------------------------------------------------------------------------------------
// Child processes

struct Proc {
    name: &'static str,
    child: Child,
    pid: u32,
}

impl Proc {
    /// Starts `bin args…` with stderr to `dir/NAME.log`, and returns it with the stdout lines the caller
    /// waits for (each the first line that starts with one of `wanted`, rest of line returned).
    async fn start(
        name: &'static str,
        bin: &Path,
        args: &[String],
        dir: &Path,
        log: &str,
        wanted: &[&str],
    ) -> anyhow::Result<(Proc, Vec<String>)> {
        let stderr = std::fs::File::create(dir.join(format!("{name}.log")))?;
        let mut child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("child pid")?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let mut found = vec![None; wanted.len()];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while found.iter().any(Option::is_none) {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .with_context(|| format!("{name} did not print its address within 120 s"))??
                .with_context(|| {
                    format!(
                        "{name} exited before printing its address (see {})",
                        dir.join(format!("{name}.log")).display()
                    )
                })?;
            for (i, w) in wanted.iter().enumerate() {
                if found[i].is_none()
                    && let Some(rest) = line.strip_prefix(w)
                {
                    found[i] = Some(rest.trim().to_string());
                }
            }
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok((
            Proc { name, child, pid },
            found.into_iter().map(Option::unwrap_or_default).collect(),
        ))
    }

    fn cpu(&self) -> f64 {
        procfs::cpu_seconds(&self.pid.to_string()).unwrap_or(f64::NAN)
    }

    fn rss(&self) -> f64 {
        procfs::rss_bytes(&self.pid.to_string()).map_or(f64::NAN, |b| b as f64)
    }

    async fn stop(mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            eprintln!("  note: {} had already exited: {status}", self.name);
            return;
        }
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

fn default_bin(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("release").join(name);
    }
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from("target/release").join(name))
}

// ---------------------------------------------------------------------------------------------------
// One measurement

struct Ctx {
    args: Args,
    kube_sim: PathBuf,
    herald: PathBuf,
    work: PathBuf,
    http: reqwest::Client,
}

impl Ctx {
    async fn get_json(&self, url: &str) -> anyhow::Result<Value> {
        let r = self
            .http
            .get(url)
            .header(reqwest::header::USER_AGENT, SETUP_UA)
            .send()
            .await?
            .error_for_status()?;
        Ok(r.json().await?)
    }

    async fn get_text(&self, url: &str) -> anyhow::Result<String> {
        let r = self
            .http
            .get(url)
            .header(reqwest::header::USER_AGENT, SETUP_UA)
            .send()
            .await?
            .error_for_status()?;
        Ok(r.text().await?)
    }

    async fn wait_ok(&self, url: &str, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(r) = self.http.get(url).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{url} not ready within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn start_kube_sim(&self, dir: &Path) -> anyhow::Result<(Proc, String)> {
        let args: Vec<String> = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--preset",
            "small",
            "--seed",
            "1",
            "--churn",
            "0",
            "--pod-cidr",
            "127.16.0.0/12",
            "--node-cidr",
            "127.8.0.0/16",
        ]
        .map(String::from)
        .to_vec();
        let (p, found) = Proc::start(
            "kube-sim",
            &self.kube_sim,
            &args,
            dir,
            &self.args.child_log,
            &["http://"],
        )
        .await?;
        let url = format!("http://{}", found[0]);
        self.wait_ok(&format!("{url}/healthz"), Duration::from_secs(60))
            .await?;
        Ok((p, url))
    }

    /// herald on `sim`; returns it with (its own URL, its Kubernetes API URL).
    async fn start_herald(&self, dir: &Path, sim: &str) -> anyhow::Result<(Proc, String, String)> {
        let config = dir.join("herald.yaml");
        std::fs::write(
            &config,
            format!(
                "jobs: []\nkube_api:\n  kinds: [configmaps]\n  admission_rate: {}\n  admission_burst: {}\n",
                self.args.admission_rate, self.args.admission_burst
            ),
        )?;
        let args: Vec<String> = vec![
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            "--apiserver".into(),
            sim.into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--kube-listen".into(),
            "127.0.0.1:0".into(),
        ];
        let (p, found) = Proc::start(
            "herald",
            &self.herald,
            &args,
            dir,
            &self.args.child_log,
            &["herald serving on", "kubernetes API on"],
        )
        .await?;
        let (own, kube) = (found[0].clone(), found[1].clone());
        self.wait_ok(&format!("{own}/readyz"), Duration::from_secs(120))
            .await?;
        Ok((p, own, kube))
    }

    /// Creates bench-0..k in namespace default (an existing one is fine).
    async fn create_configmaps(&self, sim: &str) -> anyhow::Result<()> {
        for i in 0..self.args.configmaps {
            let body = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": format!("bench-{i}"), "namespace": "default"},
                "data": {"t": "0"},
            });
            let r = self
                .http
                .post(format!("{sim}/api/v1/namespaces/default/configmaps"))
                .header(reqwest::header::USER_AGENT, SETUP_UA)
                .json(&body)
                .send()
                .await?;
            if !r.status().is_success() && r.status().as_u16() != 409 {
                bail!("creating bench-{i}: {}", r.status());
            }
        }
        Ok(())
    }

    /// Lists ConfigMaps in default on `target` until the bench ones are all there; returns the list's RV.
    async fn list_rv(&self, target: &str) -> anyhow::Result<u64> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self
                .get_json(&format!("{target}/api/v1/namespaces/default/configmaps"))
                .await?;
            let bench = v["items"].as_array().map_or(0, |items| {
                items
                    .iter()
                    .filter(|i| {
                        i["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with("bench-"))
                    })
                    .count()
            });
            if bench >= self.args.configmaps {
                return v["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .context("list without a resourceVersion");
            }
            if Instant::now() > deadline {
                bail!(
                    "{target} lists {bench} of {} bench ConfigMaps after 60 s",
                    self.args.configmaps
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// What kube-sim's meter says about the clients that read from it (everything but this tool's writer
/// and setup requests): `(bytes sent, watches open)`, and its open watches over all resources.
fn sim_readers(stats: &Value) -> (f64, f64, f64) {
    let mut bytes = 0.0;
    let mut open = 0.0;
    if let Some(uas) = stats["by_user_agent"].as_object() {
        for (ua, c) in uas {
            if ua == WRITER_UA || ua == SETUP_UA {
                continue;
            }
            bytes += c["bytes_sent"].as_f64().unwrap_or(0.0);
            open += c["watches_open"].as_f64().unwrap_or(0.0);
        }
    }
    let all_open = stats["by_resource"].as_object().map_or(0.0, |r| {
        r.values().filter_map(|c| c["watches_open"].as_f64()).sum()
    });
    (bytes, open, all_open)
}

struct Snap {
    at: Instant,
    server_cpu: f64,
    sim_cpu: f64,
    self_cpu: f64,
    machine: procfs::MachineCpu,
    sim_stats: Value,
    herald_metrics: Option<String>,
}

async fn snapshot(
    ctx: &Ctx,
    server: &Proc,
    sim: &Proc,
    sim_url: &str,
    herald_url: Option<&str>,
) -> Snap {
    let snap = Snap {
        at: Instant::now(),
        server_cpu: server.cpu(),
        sim_cpu: sim.cpu(),
        self_cpu: procfs::cpu_seconds("self").unwrap_or(f64::NAN),
        machine: procfs::machine_cpu().unwrap_or(procfs::MachineCpu {
            busy: f64::NAN,
            irq: f64::NAN,
            total: f64::NAN,
        }),
        sim_stats: Value::Null,
        herald_metrics: None,
    };
    let sim_stats = ctx
        .get_json(&format!("{sim_url}/sim/stats"))
        .await
        .unwrap_or(Value::Null);
    let herald_metrics = match herald_url {
        Some(u) => ctx.get_text(&format!("{u}/metrics")).await.ok(),
        None => None,
    };
    Snap {
        sim_stats,
        herald_metrics,
        ..snap
    }
}

/// A herald metric summed over its series: 0 when herald has no series of it yet (a counter family
/// appears at its first increment), NaN when /metrics could not be read.
fn hm(s: &Snap, name: &str) -> f64 {
    s.herald_metrics
        .as_deref()
        .map_or(f64::NAN, |t| metric_sum(t, name).unwrap_or(0.0))
}

fn ms(us: Option<u64>) -> Value {
    us.map_or(Value::Null, |u| json!(u as f64 / 1000.0))
}

/// Waits, at most `max_s` seconds, until the machine's busy CPU over 3 s is below `below` cores (other
/// processes: builds, tests); returns how long it waited.
async fn wait_idle(max_s: f64, below: f64) -> f64 {
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < max_s {
        let Some(m0) = procfs::machine_cpu() else {
            break;
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        let Some(m1) = procfs::machine_cpu() else {
            break;
        };
        if (m1.busy - m0.busy) / 3.0 < below {
            break;
        }
    }
    start.elapsed().as_secs_f64()
}

async fn measure(ctx: &Ctx, n: usize, via: Via, run: usize) -> anyhow::Result<Value> {
    let a = &ctx.args;
    let dir = ctx.work.join(format!("n{n}-{}-run{run}", via.name()));
    std::fs::create_dir_all(&dir)?;
    let idle_wait = wait_idle(a.wait_idle, a.idle_below).await;
    eprintln!(
        "[{} watchers via {}, run {run}] starting (waited {idle_wait:.0} s for a quiet machine)",
        n,
        via.name()
    );
    let (sim, sim_url) = ctx.start_kube_sim(&dir).await?;
    ctx.create_configmaps(&sim_url).await?;
    let (herald, herald_url, target) = match via {
        Via::Herald => {
            let (h, own, kube) = ctx.start_herald(&dir, &sim_url).await?;
            (Some(h), Some(own), kube)
        }
        Via::Direct => (None, None, sim_url.clone()),
    };
    let rv = ctx.list_rv(&target).await?;
    let server = herald.as_ref().unwrap_or(&sim);
    let addr: SocketAddr = target
        .strip_prefix("http://")
        .context("an http:// URL")?
        .trim_end_matches('/')
        .parse()
        .context("target address")?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = server.rss();

    // Attach.
    let m = Arc::new(Meter::new(n));
    let mut set = JoinSet::new();
    let t_attach = Instant::now();
    let mut iv = tokio::time::interval(Duration::from_secs_f64(1.0 / a.attach_rate));
    for id in 0..n {
        iv.tick().await;
        set.spawn(watcher(id, addr, rv, m.clone()));
    }
    let attach_deadline =
        t_attach + Duration::from_secs_f64(n as f64 / a.attach_rate + a.attach_timeout);
    while (m.attached.load(Relaxed) as usize) < n && Instant::now() < attach_deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let attach_s = t_attach.elapsed().as_secs_f64();
    let attached = m.attached.load(Relaxed);
    eprintln!(
        "  {attached}/{n} watches streaming after {attach_s:.1} s (429: {}, errors: {:?})",
        m.refused_429.load(Relaxed),
        m.errors.lock().expect("lock")
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_attached = server.rss();

    // Write, warm up, measure.
    let counts = Arc::new(WriteCounts::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(writer(
        ctx.http.clone(),
        sim_url.clone(),
        a.configmaps,
        a.rate,
        m.clone(),
        counts.clone(),
        stop_rx,
    ));
    tokio::time::sleep(Duration::from_secs_f64(a.warmup)).await;
    let s0 = snapshot(ctx, server, &sim, &sim_url, herald_url.as_deref()).await;
    let writes0 = counts.ok.load(Relaxed);
    let ended0 = m.server_ended.load(Relaxed);
    m.window_start.store(now_ns(), Relaxed);
    m.window_end.store(u64::MAX - 1, Relaxed);
    let streaming_at_start = m.streaming.load(Relaxed);
    tokio::time::sleep(Duration::from_secs_f64(a.seconds)).await;
    m.window_end.store(now_ns(), Relaxed);
    let s1 = snapshot(ctx, server, &sim, &sim_url, herald_url.as_deref()).await;
    let writes1 = counts.ok.load(Relaxed);
    let streaming_at_end = m.streaming.load(Relaxed);
    let rss_end = server.rss();
    // How far herald's cache is behind kube-sim when the window closes, in resourceVersions (one per
    // write here: nothing else changes in the cluster).
    let rv_lag = if via == Via::Herald {
        let sim_rv = s1.sim_stats["resource_version"].as_f64();
        let herald_rv = ctx
            .get_json(&format!(
                "{target}/api/v1/namespaces/default/configmaps?limit=1"
            ))
            .await
            .ok()
            .and_then(|v| {
                v["metadata"]["resourceVersion"]
                    .as_str()?
                    .parse::<f64>()
                    .ok()
            });
        match (sim_rv, herald_rv) {
            (Some(s), Some(h)) => s - h,
            _ => f64::NAN,
        }
    } else {
        0.0
    };
    let sim_rss_end = sim.rss();
    let window = s1.at.duration_since(s0.at).as_secs_f64();
    let delivered_in_window = m.delivered_in_window.load(Relaxed);

    // Stop writing; every attached watcher should catch up to every write.
    let _ = stop_tx.send(true);
    let _ = writer.await;
    let writes_total = counts.ok.load(Relaxed);
    let drain_start = Instant::now();
    let behind = |m: &Meter| {
        let mut incomplete = 0u64;
        let mut missing = 0u64;
        for (i, c) in m.per_watcher.iter().enumerate() {
            if !m.attached_flags[i].load(Relaxed) {
                continue;
            }
            let got = c.load(Relaxed);
            if got < writes_total {
                incomplete += 1;
                missing += writes_total - got;
            }
        }
        (incomplete, missing)
    };
    while behind(&m).0 > 0 && drain_start.elapsed().as_secs_f64() < a.drain_timeout {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drain_s = drain_start.elapsed().as_secs_f64();
    let (incomplete, missing) = behind(&m);
    let extra: u64 = m
        .per_watcher
        .iter()
        .map(|c| c.load(Relaxed).saturating_sub(writes_total))
        .sum();
    let s2 = snapshot(ctx, server, &sim, &sim_url, herald_url.as_deref()).await;
    let h = m.hist();
    let server_name = server.name;

    set.abort_all();
    while set.join_next().await.is_some() {}
    if let Some(h) = herald {
        h.stop().await;
    }
    sim.stop().await;

    let (sim_bytes0, _, _) = sim_readers(&s0.sim_stats);
    let (sim_bytes1, sim_reader_watches, sim_all_watches) = sim_readers(&s1.sim_stats);
    let sim_bytes = sim_bytes1 - sim_bytes0;
    let server_cpu = s1.server_cpu - s0.server_cpu;
    let writes_in_window = counts.in_window.load(Relaxed);
    let expected_samples = attached * writes_in_window;
    let machine_busy = (s1.machine.busy - s0.machine.busy) / window;
    let irq_cores = (s1.machine.irq - s0.machine.irq) / window;
    let ours = server_cpu
        + if via == Via::Herald {
            s1.sim_cpu - s0.sim_cpu
        } else {
            0.0
        }
        + (s1.self_cpu - s0.self_cpu);
    let ours_cores = ours / window;
    let mut herald_json = Value::Null;
    if via == Via::Herald {
        herald_json = json!({
            "watches_open": hm(&s1, "herald_kube_watches_open"),
            "upstream_events_per_s": (hm(&s1, "herald_upstream_events_total") - hm(&s0, "herald_upstream_events_total")) / window,
            "cache_rv_lag_at_window_end": rv_lag,
            "bytes_sent_per_s": (hm(&s1, "herald_kube_bytes_sent_total") - hm(&s0, "herald_kube_bytes_sent_total")) / window,
            "writes_to_watchers_per_s": (hm(&s1, "herald_kube_events_sent_total") - hm(&s0, "herald_kube_events_sent_total")) / window,
            "watchers_closed_slow_total": hm(&s2, "herald_kube_watchers_closed_slow_total"),
            "admission_refused_total": hm(&s2, "herald_kube_admission_refused_total"),
        });
    }
    let result = json!({
        "watchers": n,
        "via": via.name(),
        "run": run,
        "attached": attached,
        "attach_seconds": attach_s,
        "streaming_at_window_start": streaming_at_start,
        "streaming_at_window_end": streaming_at_end,
        "window_seconds": window,
        "writes_per_s": (writes1 - writes0) as f64 / window,
        "writes_failed": counts.failed.load(Relaxed),
        "writes_in_window": writes_in_window,
        "delivered_per_s": delivered_in_window as f64 / window,
        "expected_per_s": attached as f64 * (writes1 - writes0) as f64 / window,
        "latency_ms": {
            "p50": ms(h.quantile(0.5)),
            "p90": ms(h.quantile(0.9)),
            "p99": ms(h.quantile(0.99)),
            "p999": ms(h.quantile(0.999)),
            "max": ms((h.count() > 0).then(|| h.max())),
            "mean": h.mean().map_or(Value::Null, |u| json!(u / 1000.0)),
            "over_1s": h.count_at_least(1_000_000),
            "samples": h.count(),
            "expected_samples": expected_samples,
        },
        "server": {
            "process": server_name,
            "cpu_cores": server_cpu / window,
            "cpu_us_per_delivered_event": server_cpu * 1e6 / delivered_in_window.max(1) as f64,
            "rss_before_mib": rss_before / 1048576.0,
            "rss_attached_mib": rss_attached / 1048576.0,
            "rss_end_mib": rss_end / 1048576.0,
            "kib_per_watcher_attached": (rss_attached - rss_before) / 1024.0 / attached.max(1) as f64,
            "kib_per_watcher_end": (rss_end - rss_before) / 1024.0 / attached.max(1) as f64,
        },
        "kube_sim": {
            "cpu_cores": (s1.sim_cpu - s0.sim_cpu) / window,
            "rss_end_mib": sim_rss_end / 1048576.0,
            "reader_bytes_per_s": sim_bytes / window,
            "reader_bytes_in_window": sim_bytes,
            "reader_watches_open": sim_reader_watches,
            "watches_open_all_resources": sim_all_watches,
        },
        "herald": herald_json,
        "client": {
            "cpu_cores": (s1.self_cpu - s0.self_cpu) / window,
            "server_ended_streams_in_window": m.server_ended.load(Relaxed) - ended0,
            "server_ended_streams": m.server_ended.load(Relaxed),
            "expired": m.expired.load(Relaxed),
            "refused_429": m.refused_429.load(Relaxed),
            "other_status": format!("{:?}", m.other_status.lock().expect("lock")),
            "errors": format!("{:?}", m.errors.lock().expect("lock")),
            "bookmarks": m.bookmarks.load(Relaxed),
        },
        "machine_busy_cores": machine_busy,
        "irq_softirq_cores": irq_cores,
        "bench_processes_cores": ours_cores,
        "rest_of_machine_cores": machine_busy - ours_cores,
        "idle_wait_seconds": idle_wait,
        "completeness": {
            "writes_total": writes_total,
            "incomplete_watchers": incomplete,
            "missing_events": missing,
            "extra_events": extra,
            "drain_seconds": drain_s,
        },
    });
    eprintln!(
        "  delivered {:.0}/s of {:.0}/s expected; p50 {} ms, p99 {} ms, max {} ms; {} CPU {:.2} cores; missing {missing}",
        result["delivered_per_s"].as_f64().unwrap_or(0.0),
        result["expected_per_s"].as_f64().unwrap_or(0.0),
        result["latency_ms"]["p50"],
        result["latency_ms"]["p99"],
        result["latency_ms"]["max"],
        server_name,
        server_cpu / window,
    );
    Ok(result)
}

// ---------------------------------------------------------------------------------------------------
// Report

fn get(v: &Value, path: &str) -> Option<f64> {
    path.split('.')
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
}

/// Medians of every numeric leaf over `runs` (non-numeric leaves from the first run).
fn median_doc(runs: &[&Value]) -> Value {
    fn go(runs: &[&Value]) -> Value {
        match runs[0] {
            Value::Object(o) => Value::Object(
                o.keys()
                    .map(|k| {
                        let sub: Vec<&Value> = runs.iter().map(|r| &r[k]).collect();
                        (k.clone(), go(&sub))
                    })
                    .collect(),
            ),
            Value::Number(_) => {
                let xs: Vec<f64> = runs.iter().filter_map(|r| r.as_f64()).collect();
                median(&xs).map_or(Value::Null, |m| json!(m))
            }
            other => other.clone(),
        }
    }
    go(runs)
}

fn f(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(x) if x.is_finite() => {
            let s = format!("{x:.decimals$}");
            // thousands separators on the integer part
            let (int, frac) = s
                .split_once('.')
                .map_or((s.as_str(), None), |(i, f)| (i, Some(f)));
            let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
            let mut grouped = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i) % 3 == 0 {
                    grouped.push(',');
                }
                grouped.push(c);
            }
            match frac {
                Some(fr) => format!("{sign}{grouped}.{fr}"),
                None => format!("{sign}{grouped}"),
            }
        }
        _ => "—".into(),
    }
}

fn markdown(meds: &[Value], ratios: &[Value], runs: usize) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "Medians over {runs} run(s) per row. After the window the writer stops and watchers get up to the drain timeout to receive every write; what is still missing then is the last column. Latency = receipt by the watcher − send time of the PUT to kube-sim (write, kube-sim, [herald], client). \"server\" is the process the watchers are attached to (herald, or kube-sim for `direct`). CPU is utime+stime from /proc over the window; \"rest of the machine\" is the machine's busy time (/proc/stat) minus herald's, kube-sim's and the client's: other processes, and kernel time (loopback TCP softirq) not charged to any of them.\n\n"
    ));
    out.push_str("| watchers | via | streaming | delivered events/s (expected) | writes/s → herald ingested/s (herald's RV behind kube-sim's at the end) | p50 ms | p99 ms | max ms | server CPU cores | server CPU µs / delivered event | server RSS KiB / watcher | kube-sim CPU cores | client CPU cores | rest of the machine, cores | closed as slow / 429 / stream ends / events undelivered when the drain ended |\n");
    out.push_str("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for m in meds {
        let herald = m["via"] == "herald";
        let slow = if herald {
            f(get(m, "herald.watchers_closed_slow_total"), 0)
        } else {
            "n/a".into()
        };
        let ingest = if herald {
            format!(
                "{} → {} ({})",
                f(get(m, "writes_per_s"), 1),
                f(get(m, "herald.upstream_events_per_s"), 1),
                f(
                    get(m, "herald.cache_rv_lag_at_window_end").map(|l| l.max(0.0)),
                    0
                )
            )
        } else {
            format!("{} → n/a", f(get(m, "writes_per_s"), 1))
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} / {} |\n",
            f(get(m, "watchers"), 0),
            m["via"].as_str().unwrap_or("?"),
            f(get(m, "attached"), 0),
            f(get(m, "delivered_per_s"), 0),
            f(get(m, "expected_per_s"), 0),
            ingest,
            f(get(m, "latency_ms.p50"), 1),
            f(get(m, "latency_ms.p99"), 1),
            f(get(m, "latency_ms.max"), 1),
            f(get(m, "server.cpu_cores"), 2),
            f(get(m, "server.cpu_us_per_delivered_event"), 2),
            f(get(m, "server.kib_per_watcher_end"), 1),
            f(get(m, "kube_sim.cpu_cores"), 2),
            f(get(m, "client.cpu_cores"), 2),
            f(get(m, "rest_of_machine_cores"), 2),
            slow,
            f(get(m, "client.refused_429"), 0),
            f(get(m, "client.server_ended_streams"), 0),
            f(get(m, "completeness.missing_events"), 0),
        ));
    }
    if !ratios.is_empty() {
        out.push_str("\nkube-sim's load, same watchers direct versus through herald (kube-sim's `/sim/stats`, readers other than the benchmark's writer; bytes over the measured window; ratio within one run, median over runs):\n\n");
        out.push_str("| watchers | kube-sim bytes/s direct | via herald | ratio | kube-sim open watches direct | via herald | ratio |\n");
        out.push_str("|---:|---:|---:|---:|---:|---:|---:|\n");
        for r in ratios {
            out.push_str(&format!(
                "| {} | {} | {} | **{}×** | {} | {} | **{}×** |\n",
                f(get(r, "watchers"), 0),
                f(get(r, "direct_bytes_per_s"), 0),
                f(get(r, "herald_bytes_per_s"), 0),
                f(get(r, "bytes_ratio"), 0),
                f(get(r, "direct_watches"), 0),
                f(get(r, "herald_watches"), 0),
                f(get(r, "watches_ratio"), 0),
            ));
        }
    }
    out
}

/// Medians per (N, path) in first-seen order, and the direct/herald ratios of kube-sim's load per N
/// (within each run, then the median over runs). Fills `rest_of_machine_cores` in runs recorded
/// before it existed.
fn summarise(all: &mut [Value]) -> (Vec<Value>, Vec<Value>) {
    for r in all.iter_mut() {
        if r.get("rest_of_machine_cores").is_none() {
            let sim = if r["via"] == "herald" {
                get(r, "kube_sim.cpu_cores").unwrap_or(0.0)
            } else {
                0.0
            };
            let ours = get(r, "server.cpu_cores").unwrap_or(f64::NAN)
                + sim
                + get(r, "client.cpu_cores").unwrap_or(f64::NAN);
            r["rest_of_machine_cores"] =
                json!(get(r, "machine_busy_cores").unwrap_or(f64::NAN) - ours);
        }
    }
    let mut keys: Vec<(u64, String)> = Vec::new();
    for r in all.iter() {
        let k = (
            r["watchers"].as_u64().unwrap_or(0),
            r["via"].as_str().unwrap_or("").to_string(),
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut meds = Vec::new();
    for (n, via) in &keys {
        let runs: Vec<&Value> = all
            .iter()
            .filter(|v| v["watchers"] == *n && v["via"] == via.as_str())
            .collect();
        meds.push(median_doc(&runs));
    }
    let mut ns: Vec<u64> = keys.iter().map(|k| k.0).collect();
    ns.dedup();
    let mut ratios = Vec::new();
    for n in ns {
        let mut per_run = Vec::new();
        let mut run_ids: Vec<u64> = all
            .iter()
            .filter(|v| v["watchers"] == n)
            .filter_map(|v| v["run"].as_u64())
            .collect();
        run_ids.sort_unstable();
        run_ids.dedup();
        for run in run_ids {
            let pick = |via: &str| {
                all.iter()
                    .find(|v| v["watchers"] == n && v["via"] == via && v["run"] == run)
            };
            if let (Some(d), Some(h)) = (pick("direct"), pick("herald")) {
                let db = get(d, "kube_sim.reader_bytes_per_s").unwrap_or(f64::NAN);
                let hb = get(h, "kube_sim.reader_bytes_per_s").unwrap_or(f64::NAN);
                let dw = get(d, "kube_sim.reader_watches_open").unwrap_or(f64::NAN);
                let hw = get(h, "kube_sim.reader_watches_open").unwrap_or(f64::NAN);
                per_run.push(json!({
                    "watchers": n, "run": run,
                    "direct_bytes_per_s": db, "herald_bytes_per_s": hb, "bytes_ratio": db / hb,
                    "direct_watches": dw, "herald_watches": hw, "watches_ratio": dw / hw,
                }));
            }
        }
        if !per_run.is_empty() {
            let refs: Vec<&Value> = per_run.iter().collect();
            let mut med = median_doc(&refs);
            med["per_run"] = json!(per_run);
            ratios.push(med);
        }
    }
    (meds, ratios)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.from_json {
        let doc: Value = serde_json::from_slice(
            &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        )?;
        let mut all: Vec<Value> = doc["runs"].as_array().cloned().unwrap_or_default();
        let runs = all
            .iter()
            .filter_map(|r| r["run"].as_u64())
            .max()
            .unwrap_or(0) as usize;
        let (meds, ratios) = summarise(&mut all);
        println!("{}", markdown(&meds, &ratios, runs));
        return Ok(());
    }
    anyhow::ensure!(
        args.rate > 0.0 && args.attach_rate > 0.0,
        "rates must be positive"
    );
    anyhow::ensure!(
        args.configmaps > 0 && args.runs > 0,
        "--configmaps and --runs must be positive"
    );
    let kube_sim = args
        .kube_sim
        .clone()
        .unwrap_or_else(|| default_bin("kube-sim"));
    let herald = args.herald.clone().unwrap_or_else(|| default_bin("herald"));
    for b in [&kube_sim, &herald] {
        anyhow::ensure!(
            b.exists(),
            "{} not found (build it, or pass its path)",
            b.display()
        );
    }
    let work = match &args.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("kube-watchers-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work)?;
    eprintln!("logs under {}", work.display());
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(64)
        .build()?;
    let ctx = Ctx {
        args,
        kube_sim,
        herald,
        work,
        http,
    };

    let mut all = Vec::new();
    let mut failures = Vec::new();
    for &n in &ctx.args.watchers {
        for run in 1..=ctx.args.runs {
            for &via in &ctx.args.via {
                match measure(&ctx, n, via, run).await {
                    Ok(v) => all.push(v),
                    Err(e) => {
                        eprintln!("  FAILED: {e:#}");
                        failures.push(json!({"watchers": n, "via": via.name(), "run": run, "error": format!("{e:#}")}));
                    }
                }
                // Let the closed sockets leave the tables before the next run.
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
    let (meds, ratios) = summarise(&mut all);
    let md = markdown(&meds, &ratios, ctx.args.runs);
    println!("{md}");
    if !failures.is_empty() {
        println!("Failed measurements:");
        for f in &failures {
            println!("- {f}");
        }
    }
    if let Some(p) = &ctx.args.markdown {
        std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &ctx.args.json {
        let doc = json!({
            "args": format!("{:?}", ctx.args),
            "runs": all,
            "medians": meds,
            "ratios": ratios,
            "failures": failures,
        });
        std::fs::write(p, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
