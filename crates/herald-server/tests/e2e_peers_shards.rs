//! Shards judged by a real Prometheus (Debian 2.42): for N = 2 and 3, the targets Prometheus keeps
//! with `hashmod` (modulus N, on `__address__`) + `keep` over herald's full job are exactly the targets
//! herald serves at `?shard=I&shards=N`, for every shard I; the shards together are the whole job,
//! with no target in two shards.
//!
//! NB: Prometheus dials every target it keeps. The hashmod jobs keep their shard's targets (so the
//! API lists them as active, with their discovered labels) but first copy every `__meta_kubernetes_*`
//! label and the address into target labels, then point `__address__` at a closed loopback port
//! (127.0.0.1:9): nothing leaves the machine, and targets stay distinct. The `?shard=` jobs drop
//! everything and are read from the dropped list.

#[path = "peers/harness.rs"]
mod peers;

use std::collections::BTreeMap;
use std::time::Duration;

use kube_sim::peers as installed;
use peers::Labels;
use peers::cluster::{loopback_spec, served, start_herald, start_sim};
use peers::compare::{differences, discovery_only};
use peers::prometheus::Prometheus;

/// How long Prometheus gets to list every job's targets.
// Generous: under a loaded CI machine Prometheus's first http_sd refreshes can be slow.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(90);

const SHARD_COUNTS: [u64; 2] = [2, 3];

/// herald jobs sharded here: pods (several targets per group, bare-IP targets of port-less
/// containers) and endpointslices (one address in several groups).
const JOBS: [(&str, &str); 2] = [("pods", "pod"), ("slices", "endpointslice")];

fn herald_jobs() -> String {
    let mut out = String::from("jobs:\n");
    for (job, role) in JOBS {
        out.push_str(&format!("- name: {job}\n  role: {role}\n"));
    }
    out
}

fn hashmod_job(job: &str, n: u64, i: u64) -> String {
    format!("hashmod-{job}-{n}-{i}")
}

fn herald_shard_job(job: &str, n: u64, i: u64) -> String {
    format!("herald-{job}-{n}-{i}")
}

fn prometheus_config(herald: &str) -> String {
    let mut out = String::from("global:\n  scrape_interval: 1m\nscrape_configs:\n");
    for (job, _) in JOBS {
        for n in SHARD_COUNTS {
            for i in 0..n {
                // The relabelling prometheus-operator injects for `spec.shards`, then the safety net.
                out.push_str(&format!(
                    "- job_name: {name}\n  http_sd_configs:\n  - url: \"{herald}/sd/v1/{job}\"\n    refresh_interval: 1s\n  relabel_configs:\n  \
                     - source_labels: [__address__]\n    modulus: {n}\n    target_label: __tmp_hash\n    action: hashmod\n  \
                     - source_labels: [__tmp_hash]\n    regex: \"{i}\"\n    action: keep\n  \
                     - regex: \"__meta_kubernetes_(.+)\"\n    replacement: \"k8s_$1\"\n    action: labelmap\n  \
                     - source_labels: [__address__]\n    target_label: instance\n  \
                     - target_label: __address__\n    replacement: \"127.0.0.1:9\"\n",
                    name = hashmod_job(job, n, i),
                ));
                out.push_str(&format!(
                    "- job_name: {name}\n  http_sd_configs:\n  - url: \"{herald}/sd/v1/{job}?shard={i}&shards={n}\"\n    refresh_interval: 1s\n  relabel_configs:\n  \
                     - source_labels: [__address__]\n    regex: \".*\"\n    action: drop\n",
                    name = herald_shard_job(job, n, i),
                ));
            }
        }
    }
    out
}

/// Per scrape job: the targets Prometheus keeps (hashmod jobs) or drops (`?shard=` jobs), as
/// discovery labels.
///
/// NB: a kept target's discovered labels are not trustworthy in Prometheus 2.42 once rules changed
/// labels (see `peers/prometheus.rs`), so the hashmod jobs are read from the target labels their
/// rules wrote: `k8s_<x>` holds `__meta_kubernetes_<x>` and `instance` the original `__address__`.
/// The `?shard=` jobs only drop, so their discovered labels are intact.
type Listed = BTreeMap<String, Vec<Labels>>;

async fn listed(prom: &mut Prometheus) -> Result<Listed, String> {
    let mut out: Listed = BTreeMap::new();
    for t in prom.targets().await? {
        let active = !t.health.is_empty();
        let hashmod = t.job.starts_with("hashmod-");
        let labels = match (hashmod, active) {
            (true, true) => from_target_labels(&t.labels),
            (false, false) => discovery_only(&t.discovered),
            _ => continue,
        };
        out.entry(t.job.clone()).or_default().push(labels);
    }
    for list in out.values_mut() {
        list.sort();
    }
    Ok(out)
}

/// The discovery labels a hashmod job's rules copied into target labels.
fn from_target_labels(labels: &Labels) -> Labels {
    let mut out = Labels::new();
    for (k, v) in labels {
        if let Some(rest) = k.strip_prefix("k8s_") {
            out.insert(format!("__meta_kubernetes_{rest}"), v.clone());
        } else if k == "instance" {
            out.insert("__address__".into(), v.clone());
        }
    }
    discovery_only(&out)
}

/// Everything wrong with what Prometheus lists, against herald's full jobs; empty when the shards
/// agree.
fn problems(listed: &Listed, full: &BTreeMap<&str, Vec<Labels>>) -> Vec<String> {
    let empty = Vec::new();
    let mut out = Vec::new();
    for (job, whole) in full {
        for n in SHARD_COUNTS {
            let mut union: Vec<Labels> = Vec::new();
            let mut kept_union: Vec<Labels> = Vec::new();
            for i in 0..n {
                let kept = listed.get(&hashmod_job(job, n, i)).unwrap_or(&empty);
                let shard = listed.get(&herald_shard_job(job, n, i)).unwrap_or(&empty);
                if kept.is_empty() || shard.is_empty() {
                    out.push(format!("{job} shard {i}/{n} is empty"));
                }
                let d = differences("hashmod+keep", kept, "?shard=", shard);
                if !d.is_empty() {
                    out.push(format!(
                        "{job} shard {i}/{n}:\n{}",
                        d.into_iter().take(10).collect::<Vec<_>>().join("\n")
                    ));
                }
                union.extend(shard.iter().cloned());
                kept_union.extend(kept.iter().cloned());
            }
            kept_union.sort();
            if &kept_union != whole {
                out.push(format!(
                    "{job}: Prometheus keeps {} targets over its {n} hashmod jobs, herald serves {}",
                    kept_union.len(),
                    whole.len()
                ));
            }
            union.sort();
            if &union != whole {
                out.push(format!(
                    "{job}: the {n} shards hold {} targets together, the job {}; as a union:\n{}",
                    union.len(),
                    whole.len(),
                    differences("shards", &union, "job", whole)
                        .into_iter()
                        .take(10)
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_hashmod_and_keep_over_the_full_job_keeps_exactly_herald_s_shard() {
    let Some(prom_bin) = installed::find("prometheus", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let sim = start_sim(loopback_spec(), 5).await;
    let herald = start_herald(&sim, &herald_jobs()).await;
    let http = reqwest::Client::new();
    let mut full = BTreeMap::new();
    for (job, _) in JOBS {
        let targets = served(&http, &herald, job).await;
        assert!(targets.len() > 100, "job {job} has many targets");
        full.insert(job, targets);
    }

    let mut prom = Prometheus::start(&prom_bin, &prometheus_config(&herald.url())).await;
    let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
    loop {
        let report = match listed(&mut prom).await {
            Ok(l) => problems(&l, &full),
            Err(e) => vec![e],
        };
        if report.is_empty() {
            break;
        }
        if let Err(dead) = prom.check_alive() {
            panic!("{dead}: {}", report.join("\n"));
        }
        if tokio::time::Instant::now() >= deadline {
            let logged = prom.problems();
            panic!(
                "Prometheus's hashmod shards and herald's ?shard= disagree after {SETTLE_TIMEOUT:?}:\n{}\nPrometheus's warnings and errors (first 10):\n{}",
                report.join("\n"),
                logged[..logged.len().min(10)].join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let logged = prom.problems();
    let unexpected: Vec<&String> = logged
        .iter()
        .filter(|l| !l.contains("127.0.0.1:9"))
        .collect();
    assert!(
        unexpected.is_empty(),
        "Prometheus logged warnings or errors reading herald:\n{unexpected:#?}"
    );
}
