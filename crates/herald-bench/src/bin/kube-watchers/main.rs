//! kube-watchers: N Kubernetes watch clients on one herald versus the same N on kube-sim directly.
//!
//! For each N and each path (`herald`: watchers on herald's Kubernetes API face, herald on kube-sim;
//! `direct`: watchers on a fresh kube-sim), this starts `kube-sim` (and `herald`) as child processes on
//! free loopback ports, creates the ConfigMaps to churn, opens N watches of ConfigMaps in namespace
//! `default` at a bounded rate (retrying 429 after its Retry-After), then PUTs `--rate` ConfigMap updates
//! per second to kube-sim, round-robin over `--objects` objects, each carrying its send time (ns since
//! the UNIX epoch) in `data.t`. With `--kind pods` or `--kind endpointslices` the watchers watch every
//! Pod or EndpointSlice of the cluster instead, and the writer updates the first `--objects` of the
//! generated ones (their whole objects, as kubelets and kube-proxy receive them), with the send time
//! in the annotation `t`. Every watcher is one task reading its socket with a hand-rolled chunked
//! decoder and a line scanner (no JSON tree per event) and records receipt time minus `t`. After a
//! warm-up, a window of `--seconds` is measured: deliveries per second, latency of the writes sent in
//! the window, CPU (utime+stime from /proc) of herald, kube-sim and this client, RSS, kube-sim's meter
//! (`/sim/stats`: bytes sent to and watches open by its readers) and herald's `/metrics`. Then the writer
//! stops and every watcher must catch up to every write (missing events are reported).
//!
//! It measures and prints; it asserts nothing about speed.

mod report;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use herald_bench::cluster::ClusterSpec;
use herald_bench::pace::paced;
use herald_bench::procs::{Proc, default_bin};
use herald_bench::watchers::{Meter, Target, now_ns, watcher};
use herald_bench::{metric_sum, procfs};
use report::{markdown, summarise};
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// The User-Agent of every watcher: kube-sim's meter groups its counts by User-Agent (and keeps at most
/// 1,000 distinct ones), so one shared name keeps 10,000 watchers in one row.
const WATCHER_UA: &str = "bench-watcher";
const WRITER_UA: &str = "bench-writer";
const SETUP_UA: &str = "bench-setup";

/// What the watchers watch and the writer updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// Small ConfigMaps in `default`, created by this tool (the send time in `data.t`).
    Configmaps,
    /// Every Pod of kube-sim's generated cluster (the send time in the annotation `t`).
    Pods,
    /// Every EndpointSlice of the cluster (the send time in the annotation `t`).
    Endpointslices,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Configmaps => "configmaps",
            Kind::Pods => "pods",
            Kind::Endpointslices => "endpointslices",
        }
    }

    /// The collection the watchers list and watch.
    fn list_path(self) -> &'static str {
        match self {
            Kind::Configmaps => "/api/v1/namespaces/default/configmaps",
            Kind::Pods => "/api/v1/pods",
            Kind::Endpointslices => "/apis/discovery.k8s.io/v1/endpointslices",
        }
    }

    fn watch_path(self) -> String {
        format!("{}?watch=true&allowWatchBookmarks=true", self.list_path())
    }

    /// The URL path of one object.
    fn object_path(self, ns: &str, name: &str) -> String {
        match self {
            Kind::Configmaps => format!("/api/v1/namespaces/{ns}/configmaps/{name}"),
            Kind::Pods => format!("/api/v1/namespaces/{ns}/pods/{name}"),
            Kind::Endpointslices => {
                format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/{name}")
            }
        }
    }

    /// `obj` carrying send time `t`, to PUT unconditionally (no resourceVersion).
    fn stamped(self, obj: &Value, t: u64) -> Value {
        let mut obj = obj.clone();
        if self == Kind::Configmaps {
            obj["data"] = json!({"t": t.to_string()});
            return obj;
        }
        let meta = &mut obj["metadata"];
        if let Some(m) = meta.as_object_mut() {
            m.remove("resourceVersion");
        }
        if !meta["annotations"].is_object() {
            meta["annotations"] = json!({});
        }
        meta["annotations"]["t"] = json!(t.to_string());
        obj
    }
}

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
    /// What the watchers watch and the writer updates.
    #[arg(long, value_enum, default_value = "configmaps")]
    kind: Kind,
    /// Updates per second written to kube-sim.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Objects the updates go round-robin over.
    #[arg(long, alias = "configmaps", default_value_t = 50)]
    objects: usize,
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
    /// Watch in protobuf (`application/vnd.kubernetes.protobuf;stream=watch`) instead of JSON.
    #[arg(long)]
    protobuf: bool,
    /// herald's kube_api.admission_rate (new lists and watches per second).
    #[arg(long, default_value_t = 100_000.0)]
    admission_rate: f64,
    /// herald's kube_api.admission_burst.
    #[arg(long, default_value_t = 20_000)]
    admission_burst: u32,
    /// herald's kube_api.watch_batch_ms [default: herald's].
    #[arg(long)]
    watch_batch_ms: Option<u64>,
}

// ---------------------------------------------------------------------------------------------------
// Writer

#[derive(Default)]
struct WriteCounts {
    ok: AtomicU64,
    failed: AtomicU64,
    in_window: AtomicU64,
}

/// PUTs `rate` updates per second (round-robin over `objects`, each stamped with its send time) until
/// `stop`, at most 64 in flight; returns when every write has been answered.
#[allow(clippy::too_many_arguments)]
async fn writer(
    client: reqwest::Client,
    sim: String,
    kind: Kind,
    objects: Arc<Vec<Value>>,
    rate: f64,
    m: Arc<Meter>,
    counts: Arc<WriteCounts>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    paced(rate, 64, stop, |i| {
        let obj = &objects[i % objects.len()];
        let path = kind.object_path(
            obj["metadata"]["namespace"].as_str().unwrap_or_default(),
            obj["metadata"]["name"].as_str().unwrap_or_default(),
        );
        let t = now_ns();
        let body = kind.stamped(obj, t);
        let (client, sim, m, counts) = (client.clone(), sim.clone(), m.clone(), counts.clone());
        async move {
            let r = client
                .put(format!("{sim}{path}"))
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
        }
    })
    .await;
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
    async fn get(&self, url: &str) -> anyhow::Result<reqwest::Response> {
        Ok(self
            .http
            .get(url)
            .header(reqwest::header::USER_AGENT, SETUP_UA)
            .send()
            .await?
            .error_for_status()?)
    }

    async fn get_json(&self, url: &str) -> anyhow::Result<Value> {
        Ok(self.get(url).await?.json().await?)
    }

    async fn get_text(&self, url: &str) -> anyhow::Result<String> {
        Ok(self.get(url).await?.text().await?)
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
        let args = ClusterSpec {
            preset: "small",
            scale: 1.0,
            seed: 1,
            churn: 0.0,
        }
        .args();
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
                "jobs: []\nkube_api:\n  kinds: [{}]\n  admission_rate: {}\n  admission_burst: {}\n{}",
                self.args.kind.name(),
                self.args.admission_rate,
                self.args.admission_burst,
                self.args
                    .watch_batch_ms
                    .map(|ms| format!("  watch_batch_ms: {ms}\n"))
                    .unwrap_or_default()
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

    /// The objects the writer updates: for ConfigMaps bench-0..k, created in namespace default (an
    /// existing one is fine); for the other kinds the first k of kube-sim's.
    async fn objects(&self, sim: &str) -> anyhow::Result<Vec<Value>> {
        let kind = self.args.kind;
        if kind != Kind::Configmaps {
            let list = self.get_json(&format!("{sim}{}", kind.list_path())).await?;
            let items: Vec<Value> = list["items"]
                .as_array()
                .map(|i| i.iter().take(self.args.objects).cloned().collect())
                .unwrap_or_default();
            anyhow::ensure!(!items.is_empty(), "kube-sim has no {}", kind.name());
            return Ok(items);
        }
        let mut out = Vec::new();
        for i in 0..self.args.objects {
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
            out.push(body);
        }
        Ok(out)
    }

    /// Lists the watched collection on `target` until the writer's objects are all there; returns the
    /// list's RV.
    async fn list_rv(&self, target: &str, objects: &[Value]) -> anyhow::Result<u64> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let key = |o: &Value| {
            (
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                o["metadata"]["name"].as_str().unwrap_or("").to_string(),
            )
        };
        let wanted: std::collections::HashSet<_> = objects.iter().map(key).collect();
        loop {
            let v = self
                .get_json(&format!("{target}{}", self.args.kind.list_path()))
                .await?;
            let bench = v["items"].as_array().map_or(0, |items| {
                items.iter().filter(|i| wanted.contains(&key(i))).count()
            });
            if bench >= wanted.len() {
                return v["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .context("list without a resourceVersion");
            }
            if Instant::now() > deadline {
                bail!(
                    "{target} lists {bench} of the {} bench {} after 60 s",
                    wanted.len(),
                    self.args.kind.name()
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
    let objects = Arc::new(ctx.objects(&sim_url).await?);
    let (herald, herald_url, target) = match via {
        Via::Herald => {
            let (h, own, kube) = ctx.start_herald(&dir, &sim_url).await?;
            (Some(h), Some(own), kube)
        }
        Via::Direct => (None, None, sim_url.clone()),
    };
    let rv = ctx.list_rv(&target, &objects).await?;
    let server = herald.as_ref().unwrap_or(&sim);
    let addr: SocketAddr = herald_bench::addr_of(&target)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = server.rss();

    // Attach.
    let m = Arc::new(Meter::new(n));
    let mut set = JoinSet::new();
    let t_attach = Instant::now();
    let mut iv = tokio::time::interval(Duration::from_secs_f64(1.0 / a.attach_rate));
    let watch_target = Arc::new(Target {
        addr,
        path: a.kind.watch_path(),
        user_agent: WATCHER_UA,
        protobuf: a.protobuf,
    });
    for id in 0..n {
        iv.tick().await;
        set.spawn(watcher(id, watch_target.clone(), Some(rv), m.clone()));
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
        a.kind,
        objects.clone(),
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
            .get_json(&format!("{target}{}?limit=1", a.kind.list_path()))
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
            "bytes_per_delivered_event": (hm(&s1, "herald_kube_bytes_sent_total") - hm(&s0, "herald_kube_bytes_sent_total")) / delivered_in_window.max(1) as f64,
            "events_sent_per_s": (hm(&s1, "herald_kube_events_sent_total") - hm(&s0, "herald_kube_events_sent_total")) / window,
            "watch_writes_per_s": (hm(&s1, "herald_kube_watch_writes_total") - hm(&s0, "herald_kube_watch_writes_total")) / window,
            "watchers_closed_slow_total": hm(&s2, "herald_kube_watchers_closed_slow_total"),
            "admission_refused_total": hm(&s2, "herald_kube_admission_refused_total"),
        });
    }
    let result = json!({
        "watchers": n,
        "via": via.name(),
        "kind": a.kind.name(),
        "content_type": if a.protobuf { "protobuf" } else { "json" },
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
        args.objects > 0 && args.runs > 0,
        "--objects and --runs must be positive"
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
