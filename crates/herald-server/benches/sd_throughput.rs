//! herald's serving benchmark (`cargo bench -p herald-server --bench sd_throughput`): kube-sim and
//! herald in one process on loopback. Reports time to first sync and herald's memory after it (process
//! RSS growth across herald's start: kube-sim's own memory is already counted before), requests/s and
//! latency percentiles for a ~10,000-target body as 200 (gzip) and as 304 with many concurrent clients,
//! and the propagation delay from a kube-sim write to a long-poll wake under churn.
//!
//! Environment: HERALD_BENCH_PRESET=small|k8s-limits (default k8s-limits), HERALD_BENCH_CLIENTS
//! (default 64), HERALD_BENCH_SECONDS per phase (default 10).

use std::sync::Arc;

// The same allocator as the herald binary, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::time::{Duration, Instant};

use herald_server::{Herald, ServeOptions, job_specs};
use kube_sim::generate::ClusterSpec;
use kube_sim::{Object as SimObject, Sim, SimConfig, Write};

const JOBS: &str = "\
jobs:
- name: pods
  role: pod
- name: endpointslices
  role: endpointslice
- name: endpoints
  role: endpoints
- name: nodes
  role: node
- name: bench
  role: pod
  selectors:
  - role: pod
    label: app=bench
";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// `clients` tasks GET `url` with `headers` for `seconds`; returns (requests/s, p50, p99, bytes/req).
async fn load(
    url: &str,
    headers: &[(&str, String)],
    clients: usize,
    seconds: u64,
) -> (f64, Duration, Duration, u64) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let url = url.to_string();
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        tasks.push(tokio::spawn(async move {
            // gzip off in the client: herald's gzip body is counted as sent, not inflated here.
            let client = reqwest::Client::builder()
                .no_gzip()
                .build()
                .expect("client");
            let mut lat = Vec::new();
            let mut bytes = 0u64;
            while Instant::now() < deadline {
                let mut req = client.get(&url);
                for (k, v) in &headers {
                    req = req.header(k, v);
                }
                let t = Instant::now();
                let res = req.send().await.expect("herald answers");
                assert!(
                    res.status().is_success() || res.status() == 304,
                    "{}",
                    res.status()
                );
                bytes += res.bytes().await.expect("body").len() as u64;
                lat.push(t.elapsed());
            }
            (lat, bytes)
        }));
    }
    let mut all = Vec::new();
    let mut bytes = 0;
    for t in tasks {
        let (lat, b) = t.await.expect("client task");
        all.extend(lat);
        bytes += b;
    }
    all.sort();
    let n = all.len().max(1) as u64;
    (
        all.len() as f64 / seconds as f64,
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        bytes / n,
    )
}

fn mk_pod(i: usize) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "default", "name": format!("bench-{i}"), "uid": format!("bench-uid-{i}"),
                     "labels": {"app": "bench"}},
        "spec": {"nodeName": "node-0", "containers": [
            {"name": "main", "image": "x", "ports": [{"name": "metrics", "containerPort": 9100}]}]},
        "status": {"phase": "Running", "podIP": format!("127.30.{}.{}", i / 250, 1 + i % 250),
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("valid pod")
}

#[tokio::main]
async fn main() {
    let preset: String = env_or("HERALD_BENCH_PRESET", "k8s-limits".to_string());
    let clients: usize = env_or("HERALD_BENCH_CLIENTS", 64);
    let seconds: u64 = env_or("HERALD_BENCH_SECONDS", 10);
    let base = match preset.as_str() {
        "small" => ClusterSpec::small(),
        _ => ClusterSpec::k8s_limits(),
    };
    let spec = ClusterSpec {
        pod_cidr: "127.16.0.0/12".parse().expect("cidr"),
        node_cidr: "127.8.0.0/16".parse().expect("cidr"),
        service_cidr: "127.4.0.0/16".parse().expect("cidr"),
        ..base
    };
    println!("preset={preset} clients={clients} seconds_per_phase={seconds}");
    let t = Instant::now();
    let sim = Sim::start(SimConfig {
        spec,
        seed: 1,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    println!("kube-sim generated in {:.1}s", t.elapsed().as_secs_f64());

    let rss_before = rss_mib();
    let cfg = herald_core::parse_config(JOBS).expect("jobs");
    let t = Instant::now();
    let herald = Herald::start(
        job_specs(&cfg, None).expect("specs"),
        kube::Config::new(sim.url().parse().expect("url")),
        ServeOptions::default(),
    )
    .await
    .expect("herald starts");
    herald.ready().await;
    let sync = t.elapsed();
    let rss_after = rss_mib();
    let shared = herald.shared().clone();
    let objects: usize = shared.object_counts().values().sum();
    println!(
        "herald synced {objects} objects in {:.1}s; RSS {rss_before:.0} MiB -> {rss_after:.0} MiB (herald: +{:.0} MiB)",
        sync.as_secs_f64(),
        rss_after - rss_before
    );
    for (j, job) in shared.jobs().iter().enumerate() {
        println!("  job {}: {} targets", job.name, shared.job_counts(j).1);
    }

    // A ~10,000-target body: a shard of the pods job.
    let pods_targets = shared.job_counts(0).1 as u64;
    let shards = (pods_targets / 10_000).max(1);
    let url = format!("{}/sd/v1/pods?shard=0&shards={shards}", herald.url());
    let first = reqwest::get(&url).await.expect("get");
    let etag = first.headers()["etag"].to_str().expect("etag").to_string();
    let body = first.bytes().await.expect("body");
    let targets = serde_json::from_slice::<Vec<serde_json::Value>>(&body)
        .expect("json")
        .len();
    println!("body: {targets} targets, {} KiB JSON", body.len() / 1024);

    let (rps, p50, p99, bytes) = load(
        &url,
        &[("accept-encoding", "gzip".into())],
        clients,
        seconds,
    )
    .await;
    println!(
        "200 gzip: {rps:.0} req/s, p50 {p50:?}, p99 {p99:?}, {} KiB/response",
        bytes / 1024
    );
    let (rps, p50, p99, _) = load(&url, &[("if-none-match", etag)], clients, seconds).await;
    println!("304:      {rps:.0} req/s, p50 {p50:?}, p99 {p99:?}");

    // Propagation: a write to kube-sim → a waiting long-poll returns, under churn. The long-poll is
    // on a job only these writes change, while churn keeps the shared pods watch busy.
    sim.handle().set_churn(20.0);
    let handle = sim.handle();
    let client = reqwest::Client::new();
    let pods_url = format!("{}/sd/v1/bench", herald.url());
    let mut delays = Vec::new();
    for i in 0..50 {
        let etag = client.get(&pods_url).send().await.expect("get").headers()["etag"]
            .to_str()
            .expect("etag")
            .to_string();
        let poll = {
            let client = client.clone();
            let url = format!("{pods_url}?wait=30s");
            tokio::spawn(async move {
                let res = client
                    .get(&url)
                    .header("if-none-match", etag)
                    .send()
                    .await
                    .expect("poll");
                (Instant::now(), res.status())
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!poll.is_finished(), "only our writes change the bench job");
        let written = Instant::now();
        handle.apply(vec![Write::Put(SimObject::Pod(mk_pod(i)))]);
        let (woke, status) = poll.await.expect("poll task");
        assert_eq!(status, 200);
        delays.push(woke.saturating_duration_since(written));
    }
    delays.sort();
    println!(
        "write -> long-poll wake ({} samples, churn 20/s): p50 {:?}, p99 {:?}",
        delays.len(),
        percentile(&delays, 0.5),
        percentile(&delays, 0.99)
    );
    let served = shared.served.load(std::sync::atomic::Ordering::Relaxed);
    let stats = sim.stats();
    println!(
        "served {served} SD responses; kube-sim saw from herald: {}",
        stats["by_user_agent"][herald_server::USER_AGENT]
    );
    let herald = Arc::new(herald);
    Arc::into_inner(herald).expect("sole owner").stop().await;
    sim.shutdown().await;
}
