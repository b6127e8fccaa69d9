//! The load the steady-state and restart sections put on herald, and how they watch it: marker pods
//! carrying their send time, Prometheus-like shard consumers of both jobs, a sampler of a process's
//! RSS and CPU, and herald's body metrics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herald_bench::hist::Hist;
use herald_bench::procs::Proc;
use herald_bench::watchers::now_ns;
use serde_json::{Value, json};

use crate::cluster::Env;

/// The pod label the markers carry their send time in, as herald writes it in a body.
const MARKER_LABEL: &[u8] = b"\"__meta_kubernetes_pod_label_t\":\"";

/// A marker pod `default/name` on `node` with address `ip`, labelled `app=app` and `t` = its send
/// time (ns since the epoch).
pub fn marker_pod(name: &str, app: &str, node: &str, ip: &str, t: u64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": name,
                     "labels": {"app": app, "t": t.to_string()}},
        "spec": {"nodeName": node, "containers": [
            {"name": "main", "image": "x", "ports": [{"name": "metrics", "containerPort": 9100}]}]},
        "status": {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// Marker `i`'s loopback address in `127.net.0.0/16`.
pub fn marker_ip(net: u8, i: usize) -> String {
    format!("127.{net}.{}.{}", i / 250, 1 + i % 250)
}

/// Every marker send time in `body` (values of `MARKER_LABEL`), found without parsing the body.
pub fn marker_times(body: &[u8]) -> Vec<u64> {
    memchr::memmem::find_iter(body, MARKER_LABEL)
        .filter_map(|at| {
            let rest = &body[at + MARKER_LABEL.len()..];
            let end = rest.iter().position(|b| *b == b'"')?;
            std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
        })
        .collect()
}

/// RSS and CPU of a process, sampled by the caller.
#[derive(Debug, Default)]
pub struct Samples {
    pub rss: Vec<f64>,
    first_cpu: Option<(Instant, f64)>,
    last_cpu: Option<(Instant, f64)>,
}

impl Samples {
    pub fn take(&mut self, p: &Proc) {
        let (rss, cpu, now) = (p.rss(), p.cpu(), Instant::now());
        if rss.is_finite() {
            self.rss.push(rss / 1048576.0);
        }
        if cpu.is_finite() {
            self.first_cpu.get_or_insert((now, cpu));
            self.last_cpu = Some((now, cpu));
        }
    }

    /// CPU seconds between the first and the last sample.
    pub fn cpu_seconds(&self) -> Option<f64> {
        Some(self.last_cpu?.1 - self.first_cpu?.1)
    }

    pub fn json(&self) -> Value {
        let peak = self.rss.iter().copied().fold(f64::NAN, f64::max);
        let mean = self.rss.iter().sum::<f64>() / self.rss.len().max(1) as f64;
        let cores = match (self.first_cpu, self.last_cpu) {
            (Some((t0, c0)), Some((t1, c1))) if t1 > t0 => {
                Some((c1 - c0) / (t1 - t0).as_secs_f64())
            }
            _ => None,
        };
        json!({"peak_rss_mib": peak, "mean_rss_mib": mean, "mean_cores": cores,
               "cpu_seconds": self.cpu_seconds(), "samples": self.rss.len()})
    }
}

/// What the consumers saw.
#[derive(Default)]
pub struct Seen {
    pub requests: AtomicU64,
    pub failed: AtomicU64,
    pub identity_bytes: AtomicU64,
    pub gzip_bytes: AtomicU64,
    pub latency: Mutex<Hist>,
    /// Marker send time → when a body first held it (ns since the epoch).
    pub first_seen: Mutex<HashMap<u64, u64>>,
}

/// One Prometheus-like consumer: shard `shard` of `shards`, both jobs, every `interval` after
/// `offset`.
struct Consumer {
    url: String,
    shard: u64,
    shards: u64,
    gzip: bool,
    interval: Duration,
    offset: Duration,
}

/// The consumers of a run: `shards` identity ones (one per shard, as Prometheus's http_sd asks, no
/// Accept-Encoding) and `gzip` more with gzip (shards 0, 1, …), each polling both jobs of herald at
/// `url` every `interval`, spread over the interval as independent Prometheus servers would be.
pub fn spawn_consumers(
    env: &Env,
    url: &str,
    shards: u64,
    gzip: u64,
    interval: Duration,
    seen: &Arc<Seen>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let total = shards + gzip;
    (0..total)
        .map(|c| {
            let gzip = c >= shards;
            let shard = if gzip { c - shards } else { c } % shards;
            let c = Consumer {
                url: url.to_string(),
                shard,
                shards,
                gzip,
                interval,
                offset: interval.mul_f64(c as f64 / total as f64),
            };
            tokio::spawn(consumer(env.clone(), c, seen.clone()))
        })
        .collect()
}

async fn consumer(env: Env, c: Consumer, seen: Arc<Seen>) {
    let Consumer {
        url,
        shard,
        shards,
        gzip,
        interval,
        offset,
    } = c;
    tokio::time::sleep(offset).await;
    let mut tick = tokio::time::interval(interval);
    loop {
        tick.tick().await;
        for job in ["pod", "endpointslice"] {
            let t = Instant::now();
            let mut req = env
                .http
                .get(format!("{url}/sd/v1/{job}?shard={shard}&shards={shards}"))
                .header("user-agent", "Prometheus/steady-bench");
            if gzip {
                req = req.header("accept-encoding", "gzip");
            }
            let body = match req.send().await.and_then(|r| r.error_for_status()) {
                Ok(r) => r.bytes().await,
                Err(e) => Err(e),
            };
            seen.requests.fetch_add(1, Relaxed);
            let Ok(body) = body else {
                seen.failed.fetch_add(1, Relaxed);
                continue;
            };
            seen.latency
                .lock()
                .expect("no panics under lock")
                .record(t.elapsed().as_micros() as u64);
            if gzip {
                seen.gzip_bytes.fetch_add(body.len() as u64, Relaxed);
                continue;
            }
            seen.identity_bytes.fetch_add(body.len() as u64, Relaxed);
            if job == "pod" {
                let now = now_ns();
                let mut first = seen.first_seen.lock().expect("no panics under lock");
                for m in marker_times(&body) {
                    first.entry(m).or_insert(now);
                }
            }
        }
    }
}

/// herald's body store and face admission figures from its `/metrics` (nulls when unreadable).
pub async fn herald_metrics(env: &Env, url: &str) -> anyhow::Result<Value> {
    let text = env.get_text(&format!("{url}/metrics")).await?;
    let m = |name: &str| herald_bench::metric_sum(&text, name);
    Ok(json!({
        "body_bytes_held": m("herald_sd_body_bytes_held"),
        "body_budget_bytes": m("herald_sd_body_budget_bytes"),
        "body_builds": m("herald_sd_body_builds_total"),
        "body_evictions": m("herald_sd_body_evictions_total"),
        "blocks_compressed": m("herald_sd_body_blocks_compressed_total"),
        "blocks_taken": m("herald_sd_body_blocks_taken_total"),
        "hot_bytes_held": m("herald_sd_hot_body_bytes_held"),
        "hot_admitted": m("herald_sd_hot_bodies_admitted_total").unwrap_or(0.0),
        "hot_responses": m("herald_sd_hot_body_responses_total").unwrap_or(0.0),
        // A counter with no series yet has refused nothing.
        "kube_admission_refused": m("herald_kube_admission_refused_total").unwrap_or(0.0),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_times_are_read_from_a_body_without_parsing_it() {
        let body = br#"[{"labels":{"__meta_kubernetes_pod_label_t":"123","x":"y"},"targets":["a"]},{"labels":{"__meta_kubernetes_pod_label_t":"45"},"targets":["b"]},{"labels":{"__meta_kubernetes_pod_label_tt":"9"},"targets":["c"]}]"#;
        assert_eq!(marker_times(body), [123, 45]);
        assert!(marker_times(b"[]").is_empty());
    }

    #[test]
    fn marker_addresses_are_loopback_and_distinct() {
        assert_eq!(marker_ip(31, 0), "127.31.0.1");
        assert_eq!(marker_ip(32, 4999), "127.32.19.250");
        assert_ne!(marker_ip(32, 249), marker_ip(32, 250));
    }
}
