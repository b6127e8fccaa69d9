//! Section 7, a restart in the steady state (issue 22): kube-sim churns, the steady state's shard
//! consumers poll herald, and thousands of kubelet-shaped informers (LIST then WATCH of the pods of one
//! node, `fieldSelector=spec.nodeName=…`, client-go's backoff) watch through herald's Kubernetes API.
//! Once every informer is receiving, herald is killed (SIGKILL) and started again at once with the same
//! arguments and ports. Reported: how long until herald is ready and every informer is receiving events
//! again, herald's RSS and CPU through the storm against the baseline before it, body bytes held against
//! the body budget, requests refused with 429, and the LISTs and WATCHes kube-sim saw from herald.
//!
//! NB: with one node per selector most informers would wait minutes for an event of their own, so the
//! section writes one marker pod per node and rewrites a node's marker whenever one of its informers
//! has a watch open that has delivered nothing yet (at most once a second per node): "receiving again"
//! is then an event really delivered, and its time includes one marker write's propagation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use herald_bench::informers::informer;
use herald_bench::watchers::{Meter, Target, now_ns};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::cluster::{ClusterSpec, Env, HERALD_UA, WRITER_UA, free_port, herald_jobs};
use crate::load::{Samples, Seen, herald_metrics, marker_ip, marker_pod, spawn_consumers};

#[derive(Debug, Clone)]
pub struct Plan {
    pub spec: ClusterSpec,
    /// Informers, one node each, round-robin over the cluster's nodes.
    pub watchers: usize,
    pub poll_interval: f64,
    /// Identity consumers, one per shard of `shards`.
    pub shards: u64,
    /// Consumers with Accept-Encoding: gzip.
    pub gzip_consumers: u64,
    /// The steady baseline measured before the kill, seconds.
    pub baseline: f64,
    /// How long the informers get to attach before the kill, and to resync after it.
    pub attach_timeout: Duration,
    pub storm_timeout: Duration,
    pub sync_timeout: Duration,
    /// RSS and CPU sampling period.
    pub sample_every: Duration,
}

/// The goal of issue 22: every informer receiving again within this long of the restart.
const GOAL_SECONDS: f64 = 60.0;
/// Marker pods are `default/storm-N` (N the node's index), labelled `app=storm`, in 127.32.0.0/16.
const MARKER_APP: &str = "storm";
const MARKER_NET: u8 = 32;
/// A node's marker is rewritten again after this long when one of its informers still waits. NB:
/// one write reaches every informer of the node whose watch is open; a second is needed only when
/// a watch restarted in between. Retouching every second multiplied the writes (76,230 for 5,000
/// nodes while herald was busy relisting them) and the upstream's event window with them.
const RETOUCH: Duration = Duration::from_secs(5);
/// Marker writes in flight at most (creation and rewrites).
const WRITES_IN_FLIGHT: usize = 16;

/// The names of kube-sim's nodes, in its order.
async fn node_names(env: &Env, sim: &str) -> anyhow::Result<Vec<String>> {
    let list = env.get_json(&format!("{sim}/api/v1/nodes")).await?;
    let names: Vec<String> = list["items"]
        .as_array()
        .context("a node list without items")?
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    anyhow::ensure!(!names.is_empty(), "kube-sim has no nodes");
    Ok(names)
}

/// Creates (`create`) or rewrites node `n`'s marker pod, sent now.
async fn write_marker(
    http: &reqwest::Client,
    sim: &str,
    n: usize,
    node: &str,
    create: bool,
) -> anyhow::Result<()> {
    let name = format!("storm-{n}");
    let body = marker_pod(&name, MARKER_APP, node, &marker_ip(MARKER_NET, n), now_ns());
    let req = if create {
        http.post(format!("{sim}/api/v1/namespaces/default/pods"))
    } else {
        http.put(format!("{sim}/api/v1/namespaces/default/pods/{name}"))
    };
    let r = req
        .header("user-agent", WRITER_UA)
        .json(&body)
        .send()
        .await?;
    anyhow::ensure!(
        r.status().is_success() || (create && r.status().as_u16() == 409),
        "writing marker {name}: {}",
        r.status()
    );
    Ok(())
}

/// Rewrites the marker of every node one of whose informers has a watch open that has delivered
/// nothing yet, at most once per `RETOUCH` per node, `WRITES_IN_FLIGHT` at a time; counts the writes.
/// NB: a pass waits for write slots rather than stopping at the first busy one: stopping capped the
/// writes at 16 a tick (~64 a second), so 5,000 nodes' first events took over a minute to be
/// written after their informers were watching — the bench's delay, not herald's.
async fn toucher(
    http: reqwest::Client,
    sim: String,
    nodes: Arc<Vec<String>>,
    m: Arc<Meter>,
    writes: Arc<AtomicU64>,
) {
    let sem = Arc::new(Semaphore::new(WRITES_IN_FLIGHT));
    let mut last: Vec<Option<Instant>> = vec![None; nodes.len()];
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        for w in 0..m.watch_ns.len() {
            if m.watch_ns[w].load(Relaxed) == 0 || m.first_event_ns[w].load(Relaxed) != 0 {
                continue;
            }
            let n = w % nodes.len();
            if last[n].is_some_and(|t| now.duration_since(t) < RETOUCH) {
                continue;
            }
            let Ok(permit) = sem.clone().acquire_owned().await else {
                break;
            };
            last[n] = Some(Instant::now());
            let (http, sim, nodes, writes) =
                (http.clone(), sim.clone(), nodes.clone(), writes.clone());
            tokio::spawn(async move {
                if write_marker(&http, &sim, n, &nodes[n], false).await.is_ok() {
                    writes.fetch_add(1, Relaxed);
                }
                drop(permit);
            });
        }
    }
}

/// Informers whose watch, opened after `after_ns`, has delivered an event.
fn receiving(m: &Meter, after_ns: u64) -> usize {
    (0..m.watch_ns.len())
        .filter(|&w| {
            let opened = m.watch_ns[w].load(Relaxed);
            opened > after_ns && m.first_event_ns[w].load(Relaxed) >= opened
        })
        .count()
}

/// The `q` quantile (nearest rank) of sorted `v`.
fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[i])
}

fn distribution(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    json!({"count": v.len(), "p50_s": quantile(&v, 0.5), "p99_s": quantile(&v, 0.99),
           "max_s": quantile(&v, 1.0)})
}

/// kube-sim's LIST and WATCH counts per resource, and herald's own (every User-Agent `herald…`).
fn upstream(stats: &Value) -> Value {
    let mut per = serde_json::Map::new();
    if let Some(rs) = stats["by_resource"].as_object() {
        for (r, c) in rs {
            per.insert(
                r.clone(),
                json!({"lists": c["lists"], "watches": c["watches_total"]}),
            );
        }
    }
    let (mut lists, mut watches) = (0.0, 0.0);
    if let Some(uas) = stats["by_user_agent"].as_object() {
        for c in uas
            .iter()
            .filter(|(ua, _)| ua.starts_with(HERALD_UA))
            .map(|(_, c)| c)
        {
            lists += c["lists"].as_f64().unwrap_or(0.0);
            watches += c["watches_total"].as_f64().unwrap_or(0.0);
        }
    }
    json!({"by_resource": per, "herald": {"lists": lists, "watches": watches}})
}

/// `after − before` of two [`upstream`] documents, resources with no LIST or WATCH left out.
fn upstream_delta(before: &Value, after: &Value) -> Value {
    let d = |a: &Value, b: &Value| a.as_f64().unwrap_or(0.0) - b.as_f64().unwrap_or(0.0);
    let mut per = serde_json::Map::new();
    if let Some(rs) = after["by_resource"].as_object() {
        for (r, a) in rs {
            let b = &before["by_resource"][r];
            let (lists, watches) = (d(&a["lists"], &b["lists"]), d(&a["watches"], &b["watches"]));
            if lists > 0.0 || watches > 0.0 {
                per.insert(r.clone(), json!({"lists": lists, "watches": watches}));
            }
        }
    }
    json!({
        "by_resource": per,
        "herald": {
            "lists": d(&after["herald"]["lists"], &before["herald"]["lists"]),
            "watches": d(&after["herald"]["watches"], &before["herald"]["watches"]),
        },
    })
}

/// `herald_upstream_relists_total` per kind, from herald's metrics text.
fn relists_per_kind(text: &str) -> Value {
    let prefix = "herald_upstream_relists_total{kind=\"";
    text.lines()
        .filter_map(|l| {
            let (kind, rest) = l.strip_prefix(prefix)?.split_once('"')?;
            let v: f64 = rest.rsplit(' ').next()?.parse().ok()?;
            Some((kind.to_string(), json!(v)))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn meter_counts(m: &Meter) -> Value {
    json!({
        "lists": m.lists.load(Relaxed),
        "lists_at_rv0": m.lists_at_rv0.load(Relaxed),
        "refused_429": m.refused_429.load(Relaxed),
        "expired_410": m.expired.load(Relaxed),
        "server_ended": m.server_ended.load(Relaxed),
        "bookmarks": m.bookmarks.load(Relaxed),
        "streaming": m.streaming.load(Relaxed),
    })
}

fn count_delta(before: &Value, after: &Value) -> Value {
    let mut o = serde_json::Map::new();
    if let Some(a) = after.as_object() {
        for (k, v) in a {
            let d = v.as_f64().unwrap_or(0.0) - before[k].as_f64().unwrap_or(0.0);
            o.insert(k.clone(), json!(d));
        }
    }
    Value::Object(o)
}

pub async fn run(env: &Env, plan: &Plan) -> anyhow::Result<Value> {
    let dir = env.dir("restart")?;
    eprintln!("[restart] {}", plan.spec.describe());
    let sim = env.start_sim(&plan.spec, &dir).await?;
    let nodes = Arc::new(node_names(env, &sim.url).await?);
    {
        let sem = Arc::new(Semaphore::new(WRITES_IN_FLIGHT));
        let mut tasks = Vec::new();
        for n in 0..nodes.len() {
            let permit = sem.clone().acquire_owned().await?;
            let (http, sim, nodes) = (env.http.clone(), sim.url.clone(), nodes.clone());
            tasks.push(tokio::spawn(async move {
                let r = write_marker(&http, &sim, n, &nodes[n], true).await;
                drop(permit);
                r
            }));
        }
        for t in tasks {
            t.await??;
        }
    }
    eprintln!("  {} marker pods written", nodes.len());

    // herald on fixed ports, so the restarted one answers where the first one did.
    let listen = format!("127.0.0.1:{}", free_port()?);
    let kube_listen = format!("127.0.0.1:{}", free_port()?);
    let jobs = herald_jobs("");
    let t = Instant::now();
    let (mut herald, hurl, kube) = env
        .start_herald_at(&sim.url, &jobs, &listen, Some(&kube_listen), &[], &dir)
        .await?;
    let kube = kube.context("herald printed no Kubernetes API address")?;
    env.wait_ok(&format!("{hurl}/readyz"), plan.sync_timeout)
        .await
        .context("herald's first sync")?;
    let first_sync = t.elapsed().as_secs_f64();
    eprintln!("  herald synced in {first_sync:.1} s");

    // Informers, kubelet-shaped: the pods of one node each.
    let meter = Arc::new(Meter::new(plan.watchers));
    let addr = herald_bench::addr_of(&kube)?;
    let t = Instant::now();
    let mut informers: Vec<JoinHandle<()>> = Vec::with_capacity(plan.watchers);
    for i in 0..plan.watchers {
        let selector = format!("fieldSelector=spec.nodeName%3D{}", nodes[i % nodes.len()]);
        let target = Target {
            addr,
            path: format!("/api/v1/pods?watch=true&allowWatchBookmarks=true&{selector}"),
            user_agent: "bench-kubelet",
            protobuf: false,
        };
        informers.push(tokio::spawn(informer(
            i,
            target,
            format!("/api/v1/pods?{selector}"),
            meter.clone(),
        )));
    }
    let seen = Arc::new(Seen::default());
    let interval = Duration::from_secs_f64(plan.poll_interval);
    let mut tasks = spawn_consumers(
        env,
        &hurl,
        plan.shards,
        plan.gzip_consumers,
        interval,
        &seen,
    );
    let marker_writes = Arc::new(AtomicU64::new(0));
    tasks.push(tokio::spawn(toucher(
        env.http.clone(),
        sim.url.clone(),
        nodes.clone(),
        meter.clone(),
        marker_writes.clone(),
    )));

    // Every informer receiving, and every consumer has polled once.
    let deadline = Instant::now() + plan.attach_timeout;
    let mut attached = 0;
    while Instant::now() < deadline {
        attached = receiving(&meter, 0);
        if attached == plan.watchers && t.elapsed() >= interval {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let attach_seconds = t.elapsed().as_secs_f64();
    eprintln!(
        "  {attached} of {} informers receiving after {attach_seconds:.1} s",
        plan.watchers
    );

    // The baseline.
    let mut base = Samples::default();
    let held_budget_before = herald_metrics(env, &hurl).await?;
    let base_end = Instant::now() + Duration::from_secs_f64(plan.baseline);
    while Instant::now() < base_end {
        base.take(&herald);
        tokio::time::sleep(plan.sample_every).await;
    }
    base.take(&herald);
    let base_hwm = herald.peak_rss() / 1048576.0;
    let metrics_before = herald_metrics(env, &hurl).await?;
    let up_before = upstream(&env.get_json(&format!("{}/sim/stats", sim.url)).await?);
    let counts_before = meter_counts(&meter);
    let consumers_before = (seen.requests.load(Relaxed), seen.failed.load(Relaxed));
    let writes_before = marker_writes.load(Relaxed);

    // The kill, and the restart at once.
    let loadavg_at_kill = crate::loadavg();
    let killed_ns = now_ns();
    let killed = Instant::now();
    herald.stop().await;
    let herald_dir = dir.join("after");
    std::fs::create_dir_all(&herald_dir)?;
    let (h2, _, _) = env
        .start_herald_at(
            &sim.url,
            &jobs,
            &listen,
            Some(&kube_listen),
            &[],
            &herald_dir,
        )
        .await
        .context("restarting herald on the same ports")?;
    herald = h2;
    let listening = killed.elapsed().as_secs_f64();
    let ready_at: Arc<std::sync::Mutex<Option<f64>>> = Arc::default();
    {
        let (env, url, ready_at, timeout) = (
            env.clone(),
            format!("{hurl}/readyz"),
            ready_at.clone(),
            plan.sync_timeout,
        );
        tasks.push(tokio::spawn(async move {
            if env.wait_ok(&url, timeout).await.is_ok() {
                *ready_at.lock().expect("no panics under lock") =
                    Some(killed.elapsed().as_secs_f64());
            }
        }));
    }

    // The storm: sample herald, and note when each informer receives again.
    let mut storm = Samples::default();
    let mut series: Vec<[f64; 3]> = Vec::new();
    let mut resynced: Vec<Option<(f64, f64, bool)>> = vec![None; plan.watchers];
    let mut held_peak = f64::NAN;
    let mut last_held = Instant::now() - Duration::from_secs(10);
    let mut done_at: Option<Instant> = None;
    let storm_end = killed + plan.storm_timeout;
    loop {
        let now = Instant::now();
        storm.take(&herald);
        series.push([
            killed.elapsed().as_secs_f64(),
            herald.rss() / 1048576.0,
            herald.cpu(),
        ]);
        if now.duration_since(last_held) >= Duration::from_secs(2) {
            last_held = now;
            let h = env.metric(&hurl, "herald_sd_body_bytes_held").await;
            if h.is_finite() {
                held_peak = held_peak.max(h);
            }
        }
        for (w, r) in resynced.iter_mut().enumerate() {
            if r.is_some() {
                continue;
            }
            let opened = meter.watch_ns[w].load(Relaxed);
            let first = meter.first_event_ns[w].load(Relaxed);
            if opened > killed_ns && first >= opened && meter.watch_rv[w].load(Relaxed) > 0 {
                let s = |ns: u64| ns.saturating_sub(killed_ns) as f64 / 1e9;
                *r = Some((
                    s(first),
                    s(opened),
                    meter.listed_ns[w].load(Relaxed) > killed_ns,
                ));
            }
        }
        if done_at.is_none() && resynced.iter().all(Option::is_some) {
            done_at = Some(now);
            eprintln!(
                "  every informer receiving again {:.1} s after the kill",
                killed.elapsed().as_secs_f64()
            );
        }
        // A few seconds past the last resync, to see herald settle.
        if done_at.is_some_and(|d| now.duration_since(d) >= Duration::from_secs(5))
            || now >= storm_end
        {
            break;
        }
        tokio::time::sleep(plan.sample_every).await;
    }
    let storm_seconds = killed.elapsed().as_secs_f64();
    let storm_hwm = herald.peak_rss() / 1048576.0;
    let storm_cpu = herald.cpu();
    let metrics_after = herald_metrics(env, &hurl).await?;
    let relists = relists_per_kind(&env.get_text(&format!("{hurl}/metrics")).await?);
    let up_after = upstream(&env.get_json(&format!("{}/sim/stats", sim.url)).await?);
    let counts_after = meter_counts(&meter);
    let gave_up = informers.iter().filter(|t| t.is_finished()).count();
    for t in informers.iter().chain(&tasks) {
        t.abort();
    }
    let errors: Value = meter
        .errors
        .lock()
        .expect("no panics under lock")
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let other_status: Value = meter
        .other_status
        .lock()
        .expect("no panics under lock")
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    herald.stop().await;
    sim.proc.stop().await;

    let ready = *ready_at.lock().expect("no panics under lock");
    let done: Vec<&(f64, f64, bool)> = resynced.iter().flatten().collect();
    let resync = distribution(done.iter().map(|r| r.0).collect());
    let watching = distribution(done.iter().map(|r| r.1).collect());
    let relisted = done.iter().filter(|r| r.2).count();
    let all_within =
        done.len() == plan.watchers && resync["max_s"].as_f64().is_some_and(|m| m <= GOAL_SECONDS);
    let budget = metrics_after["body_budget_bytes"].as_f64();
    let held_max = held_peak.max(
        metrics_after["body_bytes_held"]
            .as_f64()
            .unwrap_or(f64::NAN),
    );
    let rss_peak = storm.json()["peak_rss_mib"]
        .as_f64()
        .unwrap_or(f64::NAN)
        .max(storm_hwm);
    let upstream_storm = upstream_delta(&up_before, &up_after);
    // A kind synced once: herald's own count of full syncs (`herald_upstream_relists_total`, a LIST
    // or a streaming list) is 1 for every kind kube-sim saw it list or watch, and kube-sim saw at
    // most one LIST of it. NB: kube-sim counts a streaming list (a WATCH with sendInitialEvents) as
    // a WATCH, and herald resumes its watches after their timeoutSeconds (5–10 min): WATCHes > 1
    // are not relists.
    let one_list_per_kind = upstream_storm["by_resource"].as_object().is_some_and(|rs| {
        !rs.is_empty()
            && rs.iter().all(|(kind, c)| {
                relists[kind].as_f64() == Some(1.0) && c["lists"].as_f64().is_some_and(|l| l <= 1.0)
            })
    });
    // The README's sizing for this load (the informers' watches); the limit is what the manifests
    // would have the pod killed above.
    let sizing = herald_bench::sizing::Load::benchmark(
        plan.spec.pods(),
        plan.watchers as u64,
        budget.unwrap_or(0.0) as u64,
    )
    .sizing();
    // herald runs with its default admission (the bench sets none).
    let admission = herald_server::KubeApiOptions::default();
    Ok(json!({
        "cluster": plan.spec.describe(),
        "admission": {"rate": admission.admission_rate, "burst": admission.admission_burst},
        "nodes": nodes.len(),
        "watchers": plan.watchers,
        "shards": plan.shards,
        "gzip_consumers": plan.gzip_consumers,
        "poll_interval_seconds": plan.poll_interval,
        "baseline_seconds": plan.baseline,
        "sample_every_seconds": plan.sample_every.as_secs_f64(),
        "storm_timeout_seconds": plan.storm_timeout.as_secs_f64(),
        "loadavg_at_kill": loadavg_at_kill,
        "before": {
            "first_sync_seconds": first_sync,
            "attach_seconds": attach_seconds,
            "receiving_at_kill": attached,
            "herald": base.json(),
            "peak_rss_hwm_mib": base_hwm,
            "metrics": metrics_before,
            "metrics_at_baseline_start": held_budget_before,
        },
        "storm": {
            "seconds_followed": storm_seconds,
            "listening_seconds": listening,
            "ready_seconds": ready,
            "resynced": done.len(),
            "relisted": relisted,
            "resync": resync,
            "watching": watching,
            "gave_up": gave_up,
            "herald": storm.json(),
            "herald_cpu_seconds_since_start": storm_cpu,
            "peak_rss_hwm_mib": storm_hwm,
            "body_bytes_held_peak_sampled": held_peak,
            "metrics": metrics_after,
            "informers": count_delta(&counts_before, &counts_after),
            "informer_errors": errors,
            "informer_other_status": other_status,
            "consumers": {
                "requests": seen.requests.load(Relaxed) - consumers_before.0,
                "failed": seen.failed.load(Relaxed) - consumers_before.1,
            },
            "marker_writes": marker_writes.load(Relaxed) - writes_before,
            "upstream": upstream_storm,
            "herald_upstream_relists": relists,
            "series_t_rss_mib_cpu_s": series,
        },
        "goal": {
            "seconds": GOAL_SECONDS,
            "all_resynced_within": all_within,
            "none_gave_up": gave_up == 0,
            "one_list_per_kind": one_list_per_kind,
            "body_bytes_held_within_budget": budget.map(|b| held_max <= b),
            "peak_rss_within_budget": budget.map(|b| rss_peak * 1048576.0 <= b),
            "peak_rss_within_sizing_limit": rss_peak <= sizing.limit,
            "sizing": sizing.json(),
            "body_bytes_held_max": held_max,
            "peak_rss_mib": rss_peak,
            "budget_bytes": budget,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&v, 1.0), Some(100.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn relists_are_read_per_kind() {
        let text = "# HELP herald_upstream_relists_total x\n\
                    herald_upstream_relists_total{kind=\"pods\"} 1\n\
                    herald_upstream_relists_total{kind=\"services\"} 2\n\
                    herald_upstream_watches_total{kind=\"pods\"} 5\n";
        assert_eq!(
            relists_per_kind(text),
            json!({"pods": 1.0, "services": 2.0})
        );
    }

    #[test]
    fn the_upstream_delta_keeps_resources_herald_listed_or_watched() {
        let before = upstream(&json!({
            "by_resource": {"pods": {"lists": 1, "watches_total": 1},
                            "nodes": {"lists": 2, "watches_total": 0}},
            "by_user_agent": {"herald/0.1.0": {"lists": 1, "watches_total": 1},
                              "bench-setup": {"lists": 2, "watches_total": 0}},
        }));
        let after = upstream(&json!({
            "by_resource": {"pods": {"lists": 2, "watches_total": 3},
                            "nodes": {"lists": 2, "watches_total": 0}},
            "by_user_agent": {"herald/0.1.0": {"lists": 2, "watches_total": 3},
                              "bench-setup": {"lists": 2, "watches_total": 0}},
        }));
        let d = upstream_delta(&before, &after);
        assert_eq!(
            d["by_resource"]["pods"],
            json!({"lists": 1.0, "watches": 2.0})
        );
        assert!(d["by_resource"]["nodes"].is_null(), "{d}");
        assert_eq!(d["herald"], json!({"lists": 1.0, "watches": 2.0}));
    }
}
