//! Section 6, steady state (issue 22): herald as users run it, side by side with one vmagent doing the
//! same discovery on the same kube-sim in the same run. kube-sim churns; Prometheus-like consumers poll
//! their shard of both jobs (`?shard=i&shards=N`, no Accept-Encoding, as Prometheus's http_sd does),
//! two more poll with gzip, and Kubernetes API watchers watch pods through herald. Reported: herald's
//! and vmagent's peak and mean RSS and CPU cores over the window, their first syncs, the yardstick (a
//! client reading and discarding the same lists from kube-sim), and how stale the bodies consumers get
//! are (a marker pod write → the first body holding it).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use herald_bench::hist::Hist;
use herald_bench::watchers::{Meter, Target, now_ns, watcher};
use serde_json::{Value, json};

use crate::cluster::{ClusterSpec, Env, SETUP_UA, WRITER_UA, herald_jobs, vmagent_kubernetes_sd};
use crate::load::{Samples, Seen, herald_metrics, marker_ip, marker_pod, spawn_consumers};

#[derive(Debug, Clone)]
pub struct Plan {
    pub spec: ClusterSpec,
    /// The measured window, after both syncs and the first round of polls.
    pub seconds: f64,
    pub poll_interval: f64,
    /// Identity consumers, one per shard of `shards`.
    pub shards: u64,
    /// Consumers with Accept-Encoding: gzip (shards 0, 1, …).
    pub gzip_consumers: u64,
    pub watchers: usize,
    /// Marker pods, each rewritten every `markers × marker_interval` seconds (longer than a poll,
    /// so every write has a body that should hold it).
    pub markers: usize,
    pub marker_interval: f64,
    pub sync_timeout: Duration,
}

/// Marker `i` of the steady state, sent at `t`.
fn marker(i: usize, t: u64) -> Value {
    marker_pod(
        &format!("steady-{i}"),
        "steady",
        "node-0",
        &marker_ip(31, i),
        t,
    )
}

/// The yardstick: the lists herald's jobs need (pods, EndpointSlices, Services), read at once from
/// kube-sim and discarded, as fast as one client can.
async fn read_lists(env: &Env, sim: &str) -> anyhow::Result<Value> {
    let t = Instant::now();
    let mut tasks = Vec::new();
    for path in [
        "/api/v1/pods",
        "/apis/discovery.k8s.io/v1/endpointslices",
        "/api/v1/services",
    ] {
        let (http, url) = (env.http.clone(), format!("{sim}{path}"));
        tasks.push(tokio::spawn(async move {
            let mut res = http
                .get(&url)
                .header("user-agent", SETUP_UA)
                .send()
                .await?
                .error_for_status()?;
            let mut n = 0u64;
            while let Some(chunk) = res.chunk().await? {
                n += chunk.len() as u64;
            }
            anyhow::Ok(n)
        }));
    }
    let mut bytes = 0;
    for t in tasks {
        bytes += t.await??;
    }
    Ok(json!({"seconds": t.elapsed().as_secs_f64(), "bytes": bytes}))
}

async fn wait_vmagent(env: &Env, url: &str, want: f64, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let n = env
            .metric(url, "vm_promscrape_discovery_kubernetes_objects")
            .await;
        // Churn moves the count while vmagent lists: within 0.5 % is synced.
        if n >= want * 0.995 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "vmagent holds {n} of {want} objects"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn run(env: &Env, plan: &Plan) -> anyhow::Result<Value> {
    let dir = env.dir("steady")?;
    eprintln!("[steady] {}", plan.spec.describe());
    let sim = env.start_sim(&plan.spec, &dir).await?;
    let yardstick = read_lists(env, &sim.url).await?;
    eprintln!("  yardstick: {yardstick}");
    for i in 0..plan.markers {
        let r = env
            .http
            .post(format!("{}/api/v1/namespaces/default/pods", sim.url))
            .header("user-agent", WRITER_UA)
            .json(&marker(i, 0))
            .send()
            .await?;
        anyhow::ensure!(
            r.status().is_success() || r.status().as_u16() == 409,
            "creating marker {i}: {}",
            r.status()
        );
    }

    // herald, then vmagent, each syncing alone; then both run side by side.
    let t = Instant::now();
    let (herald, hurl, kube) = env
        .start_herald(&sim.url, &herald_jobs(""), true, &dir)
        .await?;
    let kube = kube.context("herald printed no Kubernetes API address")?;
    env.wait_ok(&format!("{hurl}/readyz"), plan.sync_timeout)
        .await
        .context("herald's first sync")?;
    let herald_sync = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let herald_after_sync = json!({"sync_seconds": herald_sync, "rss_mib": herald.rss() / 1048576.0,
                                   "cpu_seconds": herald.cpu()});
    eprintln!("  herald synced: {herald_after_sync}");
    let mut vm = None;
    let mut vm_after_sync = Value::Null;
    if env.vmagent.is_some() {
        let stats = env.get_json(&format!("{}/sim/stats", sim.url)).await?;
        let want = ["pods", "endpointslices", "services"]
            .iter()
            .map(|k| stats["objects"][*k].as_f64().unwrap_or(0.0))
            .sum::<f64>();
        let t = Instant::now();
        let (p, url) = env
            .start_vmagent("vmagent", &vmagent_kubernetes_sd(&sim.url), &[], &dir)
            .await?;
        wait_vmagent(env, &url, want, plan.sync_timeout).await?;
        let sync = t.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(2)).await;
        vm_after_sync =
            json!({"sync_seconds": sync, "rss_mib": p.rss() / 1048576.0, "cpu_seconds": p.cpu()});
        eprintln!("  vmagent synced: {vm_after_sync}");
        vm = Some(p);
    }

    // Watchers of every pod through herald, from now.
    let meter = Arc::new(Meter::new(plan.watchers));
    let rv: u64 =
        env.get_json(&format!("{kube}/api/v1/pods?limit=1")).await?["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .context("a pod list without a resourceVersion")?;
    let target = Arc::new(Target {
        addr: herald_bench::addr_of(&kube)?,
        path: "/api/v1/pods?watch=true&allowWatchBookmarks=true".into(),
        user_agent: "bench-watcher",
        protobuf: false,
    });
    let mut tasks = Vec::new();
    for i in 0..plan.watchers {
        tasks.push(tokio::spawn(watcher(
            i,
            target.clone(),
            Some(rv),
            meter.clone(),
        )));
    }

    // Consumers, spread over the interval as independent Prometheus servers would be.
    let seen = Arc::new(Seen::default());
    let interval = Duration::from_secs_f64(plan.poll_interval);
    tasks.extend(spawn_consumers(
        env,
        &hurl,
        plan.shards,
        plan.gzip_consumers,
        interval,
        &seen,
    ));
    // Markers: one write per interval, round-robin; each write's send time is its `t`.
    let writes: Arc<Mutex<Vec<u64>>> = Arc::default();
    {
        let (http, sim_url, writes) = (env.http.clone(), sim.url.clone(), writes.clone());
        let (k, every) = (plan.markers, Duration::from_secs_f64(plan.marker_interval));
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            for n in 0.. {
                tick.tick().await;
                let t = now_ns();
                let r = http
                    .put(format!(
                        "{sim_url}/api/v1/namespaces/default/pods/steady-{}",
                        n % k
                    ))
                    .header("user-agent", WRITER_UA)
                    .json(&marker(n % k, t))
                    .send()
                    .await;
                if r.is_ok_and(|r| r.status().is_success()) {
                    writes.lock().expect("no panics under lock").push(t);
                }
            }
        }));
    }

    // The first round of polls builds every body; the window starts after it.
    tokio::time::sleep(interval).await;
    let window_start_ns = now_ns();
    let held0 = env.metric(&hurl, "herald_sd_body_bytes_held").await;
    let (mut hs, mut vs) = (Samples::default(), Samples::default());
    let mut held_peak = held0;
    let end = Instant::now() + Duration::from_secs_f64(plan.seconds);
    let mut second = 0u64;
    while Instant::now() < end {
        hs.take(&herald);
        if let Some(p) = &vm {
            vs.take(p);
        }
        if second.is_multiple_of(5) {
            held_peak = held_peak.max(env.metric(&hurl, "herald_sd_body_bytes_held").await);
        }
        second += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    hs.take(&herald);
    if let Some(p) = &vm {
        vs.take(p);
    }
    let window_end_ns = now_ns();
    let mut metrics = herald_metrics(env, &hurl).await?;
    metrics["body_bytes_held_peak_sampled"] = json!(held_peak);
    for t in &tasks {
        t.abort();
    }
    let herald_peak_hwm = herald.peak_rss() / 1048576.0;
    herald.stop().await;
    if let Some(p) = vm {
        p.stop().await;
    }
    sim.proc.stop().await;

    // Staleness: every marker write in the window (but the last poll interval's, which no poll
    // may have reached yet) → the first body holding it.
    let first = seen.first_seen.lock().expect("no panics under lock");
    let mut stale = Hist::default();
    let mut unseen = 0;
    let last = window_end_ns.saturating_sub(2 * interval.as_nanos() as u64);
    for &t in writes
        .lock()
        .expect("no panics under lock")
        .iter()
        .filter(|t| **t >= window_start_ns && **t <= last)
    {
        match first.get(&t) {
            Some(&s) => stale.record(s.saturating_sub(t) / 1000),
            None => unseen += 1,
        }
    }
    let q = |h: &Hist, p| h.quantile(p).map(|u| u as f64 / 1000.0);
    let latency = seen.latency.lock().expect("no panics under lock");
    let hj = hs.json();
    let vj = vs.json();
    let div = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => json!(a / b),
        _ => Value::Null,
    };
    let ratios = json!({
        "herald_peak_rss_over_vmagent_rss_after_sync":
            div(hj["peak_rss_mib"].as_f64(), vm_after_sync["rss_mib"].as_f64()),
        "herald_peak_rss_over_vmagent_peak_rss":
            div(hj["peak_rss_mib"].as_f64(), vj["peak_rss_mib"].as_f64()),
        "herald_mean_cores_over_vmagent":
            div(hj["mean_cores"].as_f64(), vj["mean_cores"].as_f64()),
        "herald_sync_over_vmagent":
            div(herald_after_sync["sync_seconds"].as_f64(), vm_after_sync["sync_seconds"].as_f64()),
        "herald_rss_after_sync_over_vmagent":
            div(herald_after_sync["rss_mib"].as_f64(), vm_after_sync["rss_mib"].as_f64()),
        "herald_sync_over_yardstick":
            div(herald_after_sync["sync_seconds"].as_f64(), yardstick["seconds"].as_f64()),
    });
    // The README's sizing for this load, and whether it holds what was measured: the steady peak
    // within the request, the high-water mark (the first sync's included) within the limit.
    let sizing = herald_bench::sizing::Load::benchmark(
        plan.spec.pods(),
        plan.watchers as u64,
        metrics["body_budget_bytes"].as_f64().unwrap_or(0.0) as u64,
    )
    .sizing();
    let mut sized = sizing.json();
    sized["steady_peak_within_request"] =
        json!(hj["peak_rss_mib"].as_f64().map(|p| p <= sizing.request));
    sized["hwm_within_limit"] = json!(herald_peak_hwm <= sizing.limit);
    Ok(json!({
        "cluster": plan.spec.describe(),
        "sizing": sized,
        "seconds": plan.seconds,
        "poll_interval_seconds": plan.poll_interval,
        "shards": plan.shards,
        "gzip_consumers": plan.gzip_consumers,
        "watchers": plan.watchers,
        "yardstick": yardstick,
        "herald": {"after_sync": herald_after_sync, "steady": hj, "peak_rss_hwm_mib": herald_peak_hwm,
                   "metrics": metrics},
        "vmagent": {"after_sync": vm_after_sync, "steady": if vs.rss.is_empty() { Value::Null } else { vj }},
        "ratios": ratios,
        "consumers": {
            "requests": seen.requests.load(Relaxed), "failed": seen.failed.load(Relaxed),
            "identity_bytes": seen.identity_bytes.load(Relaxed),
            "gzip_bytes": seen.gzip_bytes.load(Relaxed),
            "request_p50_ms": q(&latency, 0.5), "request_p99_ms": q(&latency, 0.99),
        },
        "staleness": {"writes": stale.count() + unseen, "unseen": unseen,
                      "p50_ms": q(&stale, 0.5), "p99_ms": q(&stale, 0.99), "max_ms": q(&stale, 1.0)},
        "kube_watchers": {
            "attached": meter.attached.load(Relaxed),
            "events": meter.per_watcher.iter().map(|c| c.load(Relaxed)).sum::<u64>(),
            "refused_429": meter.refused_429.load(Relaxed),
            "expired": meter.expired.load(Relaxed),
            "server_ended": meter.server_ended.load(Relaxed),
        },
    }))
}
