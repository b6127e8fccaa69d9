//! Section 1, discovery cost versus a real peer: herald and vmagent, each alone against the same
//! kube-sim cluster (jobs `pod` and `endpointslice`), at several scales of a preset: time to the first
//! complete sync, RSS after it, CPU seconds, bytes taken from kube-sim.
//!
//! herald is synced when `/readyz` answers (every job's targets built); at the main scale it also
//! runs with `--initial-list list`, as against an apiserver without streaming lists (before 1.32, or
//! WatchList off), so both of its list paths are measured. vmagent is synced when its
//! informers hold every pod, EndpointSlice and Service of the cluster
//! (`vm_promscrape_discovery_kubernetes_objects`); it builds targets from them lazily afterwards,
//! which the CPU seconds (read 2 s after the sync) partly include.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use herald_bench::median;
use serde_json::{Value, json};

use crate::cluster::{
    ClusterSpec, Env, HERALD_UA, SimLoad, VMAGENT_UA, herald_jobs, mem_available,
    vmagent_kubernetes_sd,
};

/// How the section runs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub preset: &'static str,
    pub seed: u64,
    /// Scales of the preset, ascending; the runs at `main_scale` are repeated `main_runs` times.
    pub scales: Vec<f64>,
    pub main_scale: f64,
    pub main_runs: usize,
    pub other_runs: usize,
    /// Give up on a sync after this long.
    pub sync_timeout: Duration,
}

pub async fn run(env: &Env, plan: &Plan) -> anyhow::Result<Value> {
    let mut points = Vec::new();
    let mut skipped = Vec::new();
    // Bytes of memory per pod that kube-sim plus the larger of the two processes took at the largest
    // scale measured so far: the guard against a scale that would not fit.
    let mut bytes_per_pod: Option<f64> = None;
    let mut last_scale = 0.0;
    for &asked in &plan.scales {
        let mut scale = asked;
        let base_pods = ClusterSpec {
            preset: plan.preset,
            scale: 1.0,
            seed: plan.seed,
            churn: 0.0,
        }
        .pods() as f64;
        if let (Some(bpp), Some(avail)) = (bytes_per_pod, mem_available()) {
            let need = bpp * base_pods * scale * 1.2;
            if need > avail as f64 {
                // Cap at the largest half step that fits, when it is above the last scale measured.
                let fits = ((avail as f64 / (bpp * base_pods * 1.2)) * 2.0).floor() / 2.0;
                let why = format!(
                    "scale {asked}: needs ~{:.1} GiB (kube-sim + the larger process, extrapolated per pod from scale {last_scale}, +20 %), {:.1} GiB available{}",
                    need / 1073741824.0,
                    avail as f64 / 1073741824.0,
                    if fits > last_scale {
                        format!("; measured at {fits} instead")
                    } else {
                        String::new()
                    }
                );
                eprintln!("[discovery] {why}");
                skipped.push(json!(why));
                if fits <= last_scale {
                    continue;
                }
                scale = fits;
            }
        }
        let spec = ClusterSpec {
            preset: plan.preset,
            scale,
            seed: plan.seed,
            churn: 0.0,
        };
        let runs = if (scale - plan.main_scale).abs() < 1e-9 {
            plan.main_runs
        } else {
            plan.other_runs
        };
        // A scale that fails (a timeout on a busy machine) is reported; the others still count.
        let point = match measure_scale(env, plan, &spec, runs).await {
            Ok(p) => p,
            Err(e) => {
                let why = format!("scale {scale}: failed: {e:#}");
                eprintln!("[discovery] {why}");
                skipped.push(json!(why));
                continue;
            }
        };
        let largest = ["herald", "vmagent"]
            .iter()
            .filter_map(|w| point[*w]["median"]["peak_rss_mib"].as_f64())
            .fold(0.0, f64::max);
        let sim_rss = point["kube_sim"]["peak_rss_mib"].as_f64().unwrap_or(0.0);
        bytes_per_pod = Some((sim_rss + largest) * 1048576.0 / spec.pods().max(1) as f64);
        last_scale = scale;
        points.push(point);
    }
    Ok(json!({
        "preset": plan.preset,
        "seed": plan.seed,
        "jobs": ["pod", "endpointslice"],
        "runs": {"main_scale": plan.main_scale, "at_main_scale": plan.main_runs, "elsewhere": plan.other_runs},
        "vmagent_installed": env.vmagent.is_some(),
        "points": points,
        "skipped": skipped,
    }))
}

async fn measure_scale(
    env: &Env,
    plan: &Plan,
    spec: &ClusterSpec,
    runs: usize,
) -> anyhow::Result<Value> {
    let dir = env.dir(&format!("discovery-{}", spec.scale))?;
    eprintln!("[discovery] {}: generating", spec.describe());
    let sim = env.start_sim(spec, &dir).await?;
    let stats = env.get_json(&format!("{}/sim/stats", sim.url)).await?;
    let objects = &stats["objects"];
    let want = ["pods", "endpointslices", "services"]
        .iter()
        .map(|k| objects[*k].as_f64().unwrap_or(0.0))
        .sum::<f64>();
    let sim_rss = sim.proc.rss() / 1048576.0;
    eprintln!(
        "  kube-sim up in {:.1} s, RSS {sim_rss:.0} MiB, objects {objects}",
        sim.generate_seconds
    );
    let mut herald_runs = Vec::new();
    let mut paged_runs = Vec::new();
    let mut vm_runs = Vec::new();
    let main = (spec.scale - plan.main_scale).abs() < 1e-9;
    for run in 1..=runs {
        let h = herald_once(env, plan, &sim.url, &dir, run, false).await?;
        eprintln!("  herald run {run}: {h}");
        herald_runs.push(h);
        if main {
            let h = herald_once(env, plan, &sim.url, &dir, run, true).await?;
            eprintln!("  herald (paged LIST) run {run}: {h}");
            paged_runs.push(h);
        }
        if env.vmagent.is_some() {
            let v = vmagent_once(env, plan, &sim.url, want, &dir, run).await?;
            eprintln!("  vmagent run {run}: {v}");
            vm_runs.push(v);
        }
    }
    let sim_peak = sim.proc.peak_rss() / 1048576.0;
    sim.proc.stop().await;
    let summary = |rs: &[Value]| {
        if rs.is_empty() {
            return Value::Null;
        }
        let med = |k: &str| {
            let xs: Vec<f64> = rs.iter().filter_map(|r| r[k].as_f64()).collect();
            median(&xs).map_or(Value::Null, |m| json!(m))
        };
        json!({
            "median": {
                "sync_seconds": med("sync_seconds"), "rss_mib": med("rss_mib"),
                "peak_rss_mib": med("peak_rss_mib"),
                "cpu_seconds": med("cpu_seconds"), "upstream_bytes": med("upstream_bytes"),
                "targets": med("targets"),
            },
            "runs": rs,
        })
    };
    Ok(json!({
        "scale": spec.scale,
        "cluster": spec.describe(),
        "pods": spec.pods(),
        "objects": objects,
        "kube_sim": {"generate_seconds": sim.generate_seconds, "rss_mib": sim_rss, "peak_rss_mib": sim_peak},
        "herald": summary(&herald_runs),
        "herald_paged": summary(&paged_runs),
        "vmagent": summary(&vm_runs),
    }))
}

async fn upstream(env: &Env, sim: &str, ua: &str) -> anyhow::Result<f64> {
    let stats = env.get_json(&format!("{sim}/sim/stats")).await?;
    Ok(SimLoad::of(&stats, |u| u.starts_with(ua)).bytes)
}

/// One herald run; `paged`: lists by pages (`--initial-list list`) instead of a streaming list.
async fn herald_once(
    env: &Env,
    plan: &Plan,
    sim: &str,
    dir: &std::path::Path,
    run: usize,
    paged: bool,
) -> anyhow::Result<Value> {
    let bytes0 = upstream(env, sim, HERALD_UA).await?;
    let t = Instant::now();
    let (extra, name): (&[&str], _) = if paged {
        (&["--initial-list", "list"], "herald-paged")
    } else {
        (&[], "herald")
    };
    let run_dir = dir.join(format!("{name}-{run}"));
    std::fs::create_dir_all(&run_dir)?;
    let (p, url, _) = env
        .start_herald_at(sim, &herald_jobs(""), "127.0.0.1:0", None, extra, &run_dir)
        .await?;
    env.wait_ok(&format!("{url}/readyz"), plan.sync_timeout)
        .await
        .context("herald's first sync")?;
    let sync = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss, cpu, peak) = (p.rss() / 1048576.0, p.cpu(), p.peak_rss() / 1048576.0);
    let targets: f64 = env
        .get_json(&format!("{url}/sd/v1"))
        .await?
        .as_array()
        .map_or(0.0, |jobs| {
            jobs.iter()
                .filter_map(|j| j["targets"].as_f64())
                .sum::<f64>()
        });
    p.stop().await;
    let bytes = upstream(env, sim, HERALD_UA).await? - bytes0;
    Ok(json!({
        "run": run, "sync_seconds": sync, "rss_mib": rss, "peak_rss_mib": peak, "cpu_seconds": cpu,
        "upstream_bytes": bytes, "targets": targets,
    }))
}

async fn vmagent_once(
    env: &Env,
    plan: &Plan,
    sim: &str,
    want: f64,
    dir: &std::path::Path,
    run: usize,
) -> anyhow::Result<Value> {
    let bytes0 = upstream(env, sim, VMAGENT_UA).await?;
    let t = Instant::now();
    let (p, url) = env
        .start_vmagent(
            &format!("vmagent-{run}"),
            &vmagent_kubernetes_sd(sim),
            &[],
            dir,
        )
        .await?;
    let deadline = t + plan.sync_timeout;
    loop {
        let n = env
            .metric(&url, "vm_promscrape_discovery_kubernetes_objects")
            .await;
        if n >= want {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "vmagent holds {n} of {want} objects after {:?}",
            plan.sync_timeout
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sync = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss, cpu, peak) = (p.rss() / 1048576.0, p.cpu(), p.peak_rss() / 1048576.0);
    p.stop().await;
    let bytes = upstream(env, sim, VMAGENT_UA).await? - bytes0;
    Ok(json!({
        "run": run, "sync_seconds": sync, "rss_mib": rss, "peak_rss_mib": peak, "cpu_seconds": cpu,
        "upstream_bytes": bytes, "objects": want,
    }))
}
