//! Section 3, serving: one ~10,000-target body (a shard of the `pod` job), 1, 64 and 512 concurrent
//! keep-alive clients, identity 200 (no Accept-Encoding, as Prometheus asks), gzip 200 and 304
//! (If-None-Match), against herald and against `herald-bench static-server` (the same bytes from
//! memory with hyper: the machine's limit), interleaved in one run so the ratios compare like with like.

use anyhow::Context as _;
use herald_bench::procs::Proc;
use serde_json::{Value, json};

use crate::cluster::{ClusterSpec, Env, herald_jobs};
use crate::loadgen;

#[derive(Debug, Clone)]
pub struct Plan {
    pub spec: ClusterSpec,
    /// Target count of the served body.
    pub body_targets: u64,
    pub concurrency: Vec<usize>,
    pub seconds: f64,
    pub warmup: f64,
}

const MODES: [&str; 3] = ["identity_200", "gzip_200", "not_modified_304"];

pub async fn run(env: &Env, plan: &Plan) -> anyhow::Result<Value> {
    let dir = env.dir("serving")?;
    eprintln!("[serving] {}", plan.spec.describe());
    let sim = env.start_sim(&plan.spec, &dir).await?;
    let (herald, hurl, _) = env
        .start_herald(&sim.url, &herald_jobs(""), false, &dir)
        .await?;
    env.wait_ok(
        &format!("{hurl}/readyz"),
        std::time::Duration::from_secs(600),
    )
    .await?;
    let jobs = env.get_json(&format!("{hurl}/sd/v1")).await?;
    let pod_targets = jobs
        .as_array()
        .and_then(|js| js.iter().find(|j| j["job"] == "pod"))
        .and_then(|j| j["targets"].as_u64())
        .context("herald's job index has no pod job")?;
    let shards = (pod_targets as f64 / plan.body_targets as f64)
        .round()
        .max(1.0) as u64;
    let path = format!("/sd/v1/pod?shard=0&shards={shards}");
    let url = format!("{hurl}{path}");
    let plain = env.get(&url).await?;
    let etag = plain
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .context("no ETag")?
        .to_string();
    let body = plain.bytes().await?;
    let groups: Vec<Value> = serde_json::from_slice(&body)?;
    let targets: usize = groups
        .iter()
        .map(|g| g["targets"].as_array().map_or(0, Vec::len))
        .sum();
    let (stat, found) = Proc::start(
        "static-server",
        &env.this,
        &["static-server".into(), "--from".into(), url.clone()],
        &dir,
        &env.child_log,
        &["static serving on"],
    )
    .await?;
    let static_url = found[0].clone();
    let gzip_len = env
        .http
        .get(format!("{static_url}{path}"))
        .header("accept-encoding", "gzip")
        .send()
        .await?
        .bytes()
        .await?
        .len();
    eprintln!(
        "  body: {targets} targets (shard 0 of {shards} of {pod_targets}), {} bytes identity, {gzip_len} gzip",
        body.len()
    );
    let servers = [
        ("herald", herald_bench::addr_of(&hurl)?, &herald),
        ("static", herald_bench::addr_of(&static_url)?, &stat),
    ];
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for &c in &plan.concurrency {
        for mode in MODES {
            let (headers, status): (Vec<(&'static str, String)>, u16) = match mode {
                "identity_200" => (vec![], 200),
                "gzip_200" => (vec![("accept-encoding", "gzip".into())], 200),
                _ => (
                    vec![
                        ("accept-encoding", "gzip".into()),
                        ("if-none-match", etag.clone()),
                    ],
                    304,
                ),
            };
            let mut pair = Vec::new();
            for (name, addr, proc) in &servers {
                let cpu0 = proc.cpu();
                let self0 = herald_bench::procfs::cpu_seconds("self").unwrap_or(f64::NAN);
                let l = loadgen::run(*addr, &path, &headers, status, c, plan.warmup, plan.seconds)
                    .await?;
                // CPU over warm-up and window; per request over the requests of both.
                let cpu = proc.cpu() - cpu0;
                let client_cpu =
                    herald_bench::procfs::cpu_seconds("self").unwrap_or(f64::NAN) - self0;
                let rps = l.requests as f64 / l.seconds;
                let total_s = plan.warmup + plan.seconds;
                let row = json!({
                    "server": name, "mode": mode, "concurrency": c,
                    "requests": l.requests, "req_per_s": rps,
                    "bytes_per_s": l.body_bytes as f64 / l.seconds,
                    "p50_ms": l.hist.quantile(0.5).map(|u| u as f64 / 1000.0),
                    "p99_ms": l.hist.quantile(0.99).map(|u| u as f64 / 1000.0),
                    "server_cpu_cores": cpu / total_s,
                    "server_cpu_us_per_request": cpu * 1e6 / (rps * total_s).max(1.0),
                    "client_cpu_cores": client_cpu / total_s,
                    "errors": l.errors, "unexpected_status": l.unexpected_status,
                });
                eprintln!(
                    "  {name:6} {mode:16} c={c:3}: {rps:9.0} req/s, {:7.1} MB/s, p50 {} ms, p99 {} ms, CPU {:.2} cores",
                    l.body_bytes as f64 / l.seconds / 1e6,
                    row["p50_ms"],
                    row["p99_ms"],
                    cpu / total_s
                );
                pair.push(row);
            }
            let r = |k: &str| {
                let h = pair[0][k].as_f64().unwrap_or(f64::NAN);
                let s = pair[1][k].as_f64().unwrap_or(f64::NAN);
                json!(h / s)
            };
            ratios.push(json!({
                "mode": mode, "concurrency": c,
                "req_per_s": r("req_per_s"), "bytes_per_s": r("bytes_per_s"),
            }));
            rows.extend(pair);
        }
    }
    stat.stop().await;
    herald.stop().await;
    sim.proc.stop().await;
    Ok(json!({
        "cluster": plan.spec.describe(),
        "path": path,
        "body": {"targets": targets, "identity_bytes": body.len(), "gzip_bytes": gzip_len, "etag": etag},
        "seconds_per_cell": plan.seconds, "warmup_seconds": plan.warmup,
        "rows": rows,
        "ratios_herald_over_static": ratios,
    }))
}
