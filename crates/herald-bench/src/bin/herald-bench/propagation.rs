//! Section 4, propagation: a kube-sim write → herald's long-poll wake (`GET /sd/v1/bench?wait=30s`
//! with If-None-Match) and → a Kubernetes watch event through herald's API face (and, for reference,
//! → the same watch on kube-sim directly), at 10, 100 and 1,000 writes/s.
//!
//! The writes are the churn: a writer PUTs pods `bench-0..K` in namespace `default` (label
//! `app=bench`, which herald's `bench` job selects) round-robin at the rate, each carrying its send
//! time (ns since the epoch) in label `t`. A long-poll wake's latency is its receipt time minus the
//! earliest send time among the pods whose `t` changed since the previous body (the write that woke
//! it); a watch event's is its receipt time minus its own `t`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use anyhow::Context as _;
use herald_bench::hist::Hist;
use herald_bench::pace::paced;
use herald_bench::watchers::{Meter, Target, now_ns, watcher};
use serde_json::{Value, json};

use crate::cluster::{ClusterSpec, Env, WRITER_UA, herald_jobs};

#[derive(Debug, Clone)]
pub struct Plan {
    pub spec: ClusterSpec,
    pub rates: Vec<f64>,
    pub seconds: f64,
    pub pods: usize,
}

const BENCH_JOB: &str =
    "- name: bench\n  role: pod\n  selectors:\n  - role: pod\n    label: app=bench\n";
const WATCH_PATH: &str =
    "/api/v1/namespaces/default/pods?watch=true&allowWatchBookmarks=true&labelSelector=app%3Dbench";

fn pod(i: usize, t: u64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": format!("bench-{i}"),
                     "labels": {"app": "bench", "t": t.to_string()}},
        "spec": {"nodeName": "node-0", "containers": [
            {"name": "main", "image": "x", "ports": [{"name": "metrics", "containerPort": 9100}]}]},
        "status": {"phase": "Running", "podIP": format!("127.30.{}.{}", i / 250, 1 + i % 250),
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

pub async fn run(env: &Env, plan: &Plan) -> anyhow::Result<Value> {
    let dir = env.dir("propagation")?;
    eprintln!("[propagation] {}", plan.spec.describe());
    let sim = env.start_sim(&plan.spec, &dir).await?;
    for i in 0..plan.pods {
        let r = env
            .http
            .post(format!("{}/api/v1/namespaces/default/pods", sim.url))
            .header("user-agent", WRITER_UA)
            .json(&pod(i, 0))
            .send()
            .await?;
        anyhow::ensure!(
            r.status().is_success() || r.status().as_u16() == 409,
            "creating bench-{i}: {}",
            r.status()
        );
    }
    let (herald, hurl, kube) = env
        .start_herald(&sim.url, &herald_jobs(BENCH_JOB), true, &dir)
        .await?;
    let kube = kube.context("herald printed no Kubernetes API address")?;
    env.wait_ok(&format!("{hurl}/readyz"), Duration::from_secs(600))
        .await?;
    let mut rows = Vec::new();
    for &rate in &plan.rates {
        let row = at_rate(env, plan, rate, &sim.url, &hurl, &kube).await?;
        eprintln!("  {rate}/s: {row}");
        rows.push(row);
    }
    herald.stop().await;
    sim.proc.stop().await;
    Ok(json!({
        "cluster": plan.spec.describe(), "bench_pods": plan.pods,
        "seconds_per_rate": plan.seconds, "rows": rows,
    }))
}

fn lat(h: &Hist) -> Value {
    let q = |p| h.quantile(p).map(|u| u as f64 / 1000.0);
    json!({"samples": h.count(), "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": q(1.0)})
}

async fn at_rate(
    env: &Env,
    plan: &Plan,
    rate: f64,
    sim: &str,
    herald: &str,
    kube: &str,
) -> anyhow::Result<Value> {
    // Watchers from "now": through herald and directly on kube-sim.
    let mut watchers = Vec::new();
    let mut meters = Vec::new();
    for base in [kube, sim] {
        let m = Arc::new(Meter::new(1));
        let target = Arc::new(Target {
            addr: herald_bench::addr_of(base)?,
            path: WATCH_PATH.to_string(),
            user_agent: "bench-watcher",
            protobuf: false,
        });
        let rv: u64 = env
            .get_json(&format!(
                "{base}/api/v1/namespaces/default/pods?labelSelector=app%3Dbench"
            ))
            .await?["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .context("list without a resourceVersion")?;
        watchers.push(tokio::spawn(watcher(0, target, Some(rv), m.clone())));
        meters.push(m);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let poll = tokio::spawn(long_poll(
        env.http.clone(),
        format!("{herald}/sd/v1/bench"),
        stop_rx.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = now_ns();
    for m in &meters {
        m.window_start.store(start, Relaxed);
        m.window_end.store(u64::MAX - 1, Relaxed);
    }
    let written = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let w = tokio::spawn(writer(
        env.http.clone(),
        sim.to_string(),
        plan.pods,
        rate,
        written.clone(),
        failed.clone(),
        stop_rx,
    ));
    tokio::time::sleep(Duration::from_secs_f64(plan.seconds)).await;
    let end = now_ns();
    let _ = stop_tx.send(true);
    let _ = w.await;
    // Let the last writes arrive before the watchers stop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for m in &meters {
        m.window_end.store(end, Relaxed);
    }
    let poll_hist = poll.await.context("long-poll task")?;
    for w in watchers {
        w.abort();
    }
    let secs = (end - start) as f64 / 1e9;
    Ok(json!({
        "rate": rate,
        "writes_per_s": written.load(Relaxed) as f64 / secs,
        "writes_failed": failed.load(Relaxed),
        "long_poll_wake": lat(&poll_hist),
        "watch_via_herald": lat(&meters[0].hist()),
        "watch_direct": lat(&meters[1].hist()),
    }))
}

/// PUTs `rate` pod updates per second round-robin over `k` pods until `stop`, at most 64 in flight.
async fn writer(
    http: reqwest::Client,
    sim: String,
    k: usize,
    rate: f64,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    paced(rate, 64, stop, |i| {
        let n = i % k;
        let (http, sim, ok, failed) = (http.clone(), sim.clone(), ok.clone(), failed.clone());
        async move {
            let r = http
                .put(format!("{sim}/api/v1/namespaces/default/pods/bench-{n}"))
                .header("user-agent", WRITER_UA)
                .json(&pod(n, now_ns()))
                .send()
                .await;
            match r {
                Ok(r) if r.status().is_success() => ok.fetch_add(1, Relaxed),
                _ => failed.fetch_add(1, Relaxed),
            };
        }
    })
    .await;
}

/// The `t` label of every target in an HTTP SD body, by pod name.
fn send_times(body: &[u8]) -> HashMap<String, u64> {
    let groups: Vec<Value> = serde_json::from_slice(body).unwrap_or_default();
    let mut out = HashMap::new();
    for g in groups {
        let l = &g["labels"];
        if let (Some(name), Some(t)) = (
            l["__meta_kubernetes_pod_name"].as_str(),
            l["__meta_kubernetes_pod_label_t"]
                .as_str()
                .and_then(|s| s.parse().ok()),
        ) {
            out.insert(name.to_string(), t);
        }
    }
    out
}

/// Long-polls `url` until `stop`; one sample per wake whose body holds a newer write.
async fn long_poll(
    http: reqwest::Client,
    url: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Hist {
    let mut hist = Hist::default();
    let mut etag = String::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    while !*stop.borrow() {
        let mut req = http
            .get(format!("{url}?wait=30s"))
            .header("user-agent", "bench-poller");
        if !etag.is_empty() {
            req = req.header("if-none-match", etag.as_str());
        }
        let resp = tokio::select! {
            r = req.send() => r,
            _ = stop.changed() => break,
        };
        let Ok(resp) = resp else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let woke = now_ns();
        if resp.status() != 200 {
            continue;
        }
        if let Some(e) = resp.headers().get("etag").and_then(|v| v.to_str().ok()) {
            etag = e.to_string();
        }
        let Ok(body) = resp.bytes().await else {
            continue;
        };
        let now = send_times(&body);
        let first_new = now
            .iter()
            .filter(|(k, t)| seen.get(*k) != Some(t) && **t > 0)
            .map(|(_, t)| *t)
            .min();
        if !seen.is_empty()
            && let Some(t) = first_new
        {
            hist.record(woke.saturating_sub(t) / 1000);
        }
        seen = now;
    }
    hist
}
