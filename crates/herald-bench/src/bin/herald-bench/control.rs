//! Section 2, control-plane load, direct versus through herald: N consumers attached to kube-sim
//! directly, or to one herald that alone watches kube-sim. Consumers:
//! - `watchers`: kube-rs-style informers of every pod (a LIST, then a WATCH from its
//!   resourceVersion), on kube-sim or on herald's Kubernetes API face;
//! - `vmagent`: real vmagents, kubernetes_sd (pod and endpointslice) on kube-sim, or http_sd on
//!   herald's `/sd/v1/pod` and `/sd/v1/endpointslice` (every target dropped either way);
//! - `http_sd`: Prometheus-like pollers of herald's `/sd/v1/pod` and `/sd/v1/endpointslice` every
//!   `poll_interval`, identity or gzip, whole jobs or shard i of N.
//!
//! Each row runs from just before the consumers attach to the end of its window (attach, LISTs and
//! syncs included) on one kube-sim with churn; figures are deltas of kube-sim's meter (direct rows:
//! the consumers' User-Agents; herald rows: herald's), `/proc` CPU and herald's `/metrics` over that
//! interval. kube-sim's CPU includes its churn, which is the same in both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use herald_bench::procs::Proc;
use herald_bench::watchers::{Meter, Target, watcher};
use herald_bench::{procfs, scan};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::cluster::{
    ClusterSpec, Env, HERALD_UA, SETUP_UA, SimLoad, WRITER_UA, herald_jobs, vmagent_kubernetes_sd,
};

#[derive(Debug, Clone)]
pub struct Plan {
    pub spec: ClusterSpec,
    pub consumers: Vec<usize>,
    pub max_vmagents: usize,
    pub warmup: f64,
    pub seconds: f64,
    pub poll_interval: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Watchers,
    Vmagent,
    HttpSd { gzip: bool, sharded: bool },
}

impl Kind {
    fn name(self) -> String {
        match self {
            Kind::Watchers => "watchers".into(),
            Kind::Vmagent => "vmagent".into(),
            Kind::HttpSd { gzip, sharded } => format!(
                "http_sd {}{}",
                if gzip { "gzip" } else { "identity" },
                if sharded { ", sharded" } else { "" }
            ),
        }
    }
}

struct Ends<'a> {
    sim: &'a str,
    herald: &'a str,
    kube: &'a str,
}

pub async fn run(env: &Env, plan: &Plan) -> anyhow::Result<Value> {
    let dir = env.dir("control")?;
    eprintln!("[control] {}", plan.spec.describe());
    let sim = env.start_sim(&plan.spec, &dir).await?;
    let (herald, hurl, kube) = env
        .start_herald(&sim.url, &herald_jobs(""), true, &dir)
        .await?;
    let kube = kube.context("herald printed no Kubernetes API address")?;
    env.wait_ok(&format!("{hurl}/readyz"), Duration::from_secs(600))
        .await?;
    let stats = env.get_json(&format!("{}/sim/stats", sim.url)).await?;
    let herald_sync = SimLoad::of(&stats, |u| u.starts_with(HERALD_UA));
    let ends = Ends {
        sim: &sim.url,
        herald: &hurl,
        kube: &kube,
    };
    let mut kinds = vec![Kind::Watchers];
    if env.vmagent.is_some() {
        kinds.push(Kind::Vmagent);
    }
    for gzip in [false, true] {
        for sharded in [false, true] {
            kinds.push(Kind::HttpSd { gzip, sharded });
        }
    }
    let mut rows = Vec::new();
    for kind in kinds {
        for &n in &plan.consumers {
            if kind == Kind::Vmagent && n > plan.max_vmagents {
                continue;
            }
            let vias: &[bool] = if matches!(kind, Kind::HttpSd { .. }) {
                &[true]
            } else {
                &[false, true]
            };
            for &via_herald in vias {
                let row = measure(
                    env, plan, &ends, &sim.proc, &herald, kind, n, via_herald, &dir,
                )
                .await?;
                eprintln!("  {row}");
                rows.push(row);
            }
        }
    }
    herald.stop().await;
    sim.proc.stop().await;
    let ratios = ratios(&rows);
    Ok(json!({
        "cluster": plan.spec.describe(),
        "warmup_seconds": plan.warmup, "window_seconds": plan.seconds,
        "poll_interval_seconds": plan.poll_interval,
        "herald_initial_sync_from_kube_sim": herald_sync.json(),
        "rows": rows, "ratios_direct_over_herald": ratios,
    }))
}

fn ratios(rows: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    let find = |kind: &str, n: u64, via: &str| {
        rows.iter()
            .find(|r| r["consumer"] == kind && r["n"] == n && r["via"] == via)
    };
    for h in rows.iter().filter(|r| r["via"] == "herald") {
        let kind = h["consumer"].as_str().unwrap_or("");
        let n = h["n"].as_u64().unwrap_or(0);
        // http_sd pollers have no direct form: compare with the same number of direct informers.
        let base = if kind.starts_with("http_sd") {
            "watchers"
        } else {
            kind
        };
        let Some(d) = find(base, n, "direct") else {
            continue;
        };
        let r = |k: &str| {
            let a = d["kube_sim"][k].as_f64().unwrap_or(f64::NAN);
            let b = h["kube_sim"][k].as_f64().unwrap_or(f64::NAN);
            json!(a / b)
        };
        out.push(json!({
            "consumer": kind, "n": n, "direct_row": base,
            "bytes": r("bytes"), "watches_open": r("watches_open"),
            "watch_events": r("watch_events"), "cpu_seconds": r("cpu_seconds"),
        }));
    }
    out
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    env: &Env,
    plan: &Plan,
    ends: &Ends<'_>,
    sim: &Proc,
    herald: &Proc,
    kind: Kind,
    n: usize,
    via_herald: bool,
    dir: &std::path::Path,
) -> anyhow::Result<Value> {
    let stats0 = env.get_json(&format!("{}/sim/stats", ends.sim)).await?;
    let metrics0 = env.get_text(&format!("{}/metrics", ends.herald)).await?;
    let (sim_cpu0, herald_cpu0) = (sim.cpu(), herald.cpu());
    let self0 = procfs::cpu_seconds("self").unwrap_or(f64::NAN);
    let t0 = Instant::now();
    let mut tasks = JoinSet::new();
    let mut vms = Vec::new();
    let meter = Arc::new(Meter::new(n));
    match kind {
        Kind::Watchers => {
            let base = if via_herald { ends.kube } else { ends.sim }.to_string();
            let target = Arc::new(Target {
                addr: herald_bench::addr_of(&base)?,
                path: "/api/v1/pods?watch=true&allowWatchBookmarks=true".into(),
                user_agent: "bench-watcher",
                protobuf: false,
            });
            for id in 0..n {
                tasks.spawn(informer(
                    id,
                    env.http.clone(),
                    base.clone(),
                    target.clone(),
                    meter.clone(),
                ));
            }
        }
        Kind::Vmagent => {
            for i in 0..n {
                let (config, extra) = if via_herald {
                    let mut s = String::from("scrape_configs:\n");
                    for job in ["pod", "endpointslice"] {
                        s.push_str(&format!(
                            "- job_name: {job}\n  http_sd_configs: [{{url: \"{}/sd/v1/{job}\"}}]\n  relabel_configs: [{{source_labels: [__address__], regex: '.*', action: drop}}]\n",
                            ends.herald
                        ));
                    }
                    (
                        s,
                        vec![format!(
                            "-promscrape.httpSDCheckInterval={}s",
                            plan.poll_interval
                        )],
                    )
                } else {
                    (vmagent_kubernetes_sd(ends.sim), vec![])
                };
                let name = format!("vm-{}-{n}-{i}", if via_herald { "h" } else { "d" });
                vms.push(env.start_vmagent(&name, &config, &extra, dir).await?.0);
            }
        }
        Kind::HttpSd { gzip, sharded } => {
            for i in 0..n {
                let q = if sharded {
                    format!("?shard={i}&shards={n}")
                } else {
                    String::new()
                };
                tasks.spawn(poller(
                    env.http.clone(),
                    ends.herald.to_string(),
                    q,
                    gzip,
                    plan.poll_interval,
                ));
            }
        }
    }
    tokio::time::sleep(Duration::from_secs_f64(plan.warmup + plan.seconds)).await;
    let secs = t0.elapsed().as_secs_f64();
    let stats1 = env.get_json(&format!("{}/sim/stats", ends.sim)).await?;
    let metrics1 = env.get_text(&format!("{}/metrics", ends.herald)).await?;
    let sim_cpu = sim.cpu() - sim_cpu0;
    let herald_cpu = herald.cpu() - herald_cpu0;
    let consumer_cpu = procfs::cpu_seconds("self").unwrap_or(f64::NAN) - self0
        + vms.iter().map(Proc::cpu).sum::<f64>();
    let streaming = meter.streaming.load(std::sync::atomic::Ordering::Relaxed);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    for v in vms {
        v.stop().await;
    }
    // Direct rows: the consumers' load only (herald stays attached, but is not part of that setup);
    // herald rows: everything that reads from kube-sim (herald, whose consumers attach to it).
    let pick = |s: &Value| {
        if via_herald {
            SimLoad::readers(s)
        } else {
            SimLoad::of(s, |ua| {
                ua != SETUP_UA && ua != WRITER_UA && !ua.starts_with(HERALD_UA)
            })
        }
    };
    let load = pick(&stats1).minus(&pick(&stats0));
    let hm = |t: &str, name: &str| herald_bench::metric_sum(t, name).unwrap_or(0.0);
    let egress =
        |t: &str| hm(t, "herald_kube_bytes_sent_total") + hm(t, "herald_sd_bytes_served_total");
    let mut ks = load.json();
    ks["cpu_seconds"] = json!(sim_cpu);
    Ok(json!({
        "consumer": kind.name(), "n": n, "via": if via_herald { "herald" } else { "direct" },
        "seconds": secs,
        "kube_sim": ks,
        "herald": {
            "cpu_seconds": herald_cpu,
            "egress_bytes": egress(&metrics1) - egress(&metrics0),
            "sd_bytes": hm(&metrics1, "herald_sd_bytes_served_total") - hm(&metrics0, "herald_sd_bytes_served_total"),
            "kube_bytes": hm(&metrics1, "herald_kube_bytes_sent_total") - hm(&metrics0, "herald_kube_bytes_sent_total"),
            // Whether herald kept up with kube-sim's churn: objects it took in, against kube-sim's
            // writes (resourceVersions) over the row.
            "upstream_events": hm(&metrics1, "herald_upstream_events_total") - hm(&metrics0, "herald_upstream_events_total"),
        },
        "kube_sim_writes": stats1["resource_version"].as_f64().unwrap_or(f64::NAN)
            - stats0["resource_version"].as_f64().unwrap_or(f64::NAN),
        "consumers_cpu_seconds": consumer_cpu,
        "watchers_streaming": streaming,
    }))
}

/// A kube-rs-style informer: LIST every pod, then watch from the list's resourceVersion.
async fn informer(
    id: usize,
    http: reqwest::Client,
    base: String,
    target: Arc<Target>,
    m: Arc<Meter>,
) {
    let rv = loop {
        match list_rv(&http, &base).await {
            Ok(rv) => break rv,
            Err(e) => {
                m.error(&e);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    watcher(id, target, rv, m).await;
}

/// Reads a whole `GET /api/v1/pods` and returns its resourceVersion (the list's metadata comes
/// before its items).
async fn list_rv(http: &reqwest::Client, base: &str) -> anyhow::Result<Option<u64>> {
    let mut resp = http
        .get(format!("{base}/api/v1/pods"))
        .header("user-agent", "bench-watcher")
        .send()
        .await?
        .error_for_status()?;
    let mut head = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if head.len() < 4096 {
            head.extend_from_slice(&chunk[..chunk.len().min(4096 - head.len())]);
        }
    }
    Ok(scan::resource_version(&head))
}

/// Polls `herald/sd/v1/{pod,endpointslice}QUERY` every `interval` seconds, reading each body.
async fn poller(http: reqwest::Client, herald: String, query: String, gzip: bool, interval: f64) {
    let mut iv = tokio::time::interval(Duration::from_secs_f64(interval));
    loop {
        iv.tick().await;
        for job in ["pod", "endpointslice"] {
            let mut req = http
                .get(format!("{herald}/sd/v1/{job}{query}"))
                .header("user-agent", "bench-poller");
            if gzip {
                req = req.header("accept-encoding", "gzip");
            }
            if let Ok(mut r) = req.send().await {
                while let Ok(Some(_)) = r.chunk().await {}
            }
        }
    }
}
