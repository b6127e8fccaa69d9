//! A real Prometheus (Debian 2.42) with http_sd pointed at herald really scrapes herald-discovered
//! targets: kube-sim's pods get loopback IPs (127.16.0.0/12), the test serves `/metrics` on a few of
//! their IP:port pairs (every 127.x.y.z is a local address on Linux), and Prometheus's `up` for them
//! is 1, with each sample coming from the listener behind that pod.
//!
//! NB: Prometheus dials every target it keeps. The job keeps exactly the served addresses (a `keep`
//! rule on `__address__`), and the test checks that nothing else is active.

#[path = "peers/harness.rs"]
mod peers;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use kube_sim::Kind;
use kube_sim::generate::ClusterSpec;
use kube_sim::peers as installed;
use peers::cluster::{loopback_spec, s, served, start_herald, start_sim};
use peers::prometheus::Prometheus;
use serde_json::Value;

/// How long Prometheus gets to discover, scrape and report the served targets.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(30);

/// How many pod addresses get a real `/metrics` listener.
const SERVED: usize = 3;

const JOBS: &str = "jobs:\n- name: pods\n  role: pod\n";

/// A `/metrics` listener on one pod's address: answers with `peer_probe <id>` and counts scrapes.
struct Listener {
    addr: SocketAddr,
    pod: String,
    id: usize,
    scrapes: Arc<AtomicUsize>,
}

async fn serve_metrics(addr: SocketAddr, pod: String, id: usize) -> Listener {
    let scrapes = Arc::new(AtomicUsize::new(0));
    let counter = scrapes.clone();
    let body = format!("# TYPE peer_probe gauge\npeer_probe {id}\n");
    let app = Router::new().route(
        "/metrics",
        get(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            let body = body.clone();
            async move { body }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("bind {addr} (a loopback pod address): {e}"));
    tokio::spawn(async move {
        axum::serve(listener, app)
            .await
            .expect("metrics listener serves")
    });
    Listener {
        addr,
        pod,
        id,
        scrapes,
    }
}

/// Running pods with an IP and a TCP container port, one per namespace/app so the picks differ, as
/// (pod name, IP:port).
fn pick_pod_addresses(pods: &[Value], n: usize) -> Vec<(String, SocketAddr)> {
    let mut out = Vec::new();
    let mut apps = BTreeSet::new();
    for p in pods {
        let ip = s(p, "/status/podIP");
        if ip.is_empty() || s(p, "/status/phase") != "Running" {
            continue;
        }
        let app = format!(
            "{}/{}",
            s(p, "/metadata/namespace"),
            s(p, "/metadata/labels/app")
        );
        let port = p
            .pointer("/spec/containers/0/ports/0/containerPort")
            .and_then(Value::as_u64);
        if let Some(port) = port
            && apps.insert(app)
        {
            let addr: SocketAddr = format!("{ip}:{port}").parse().expect("pod IP:port");
            assert!(addr.ip().is_loopback(), "pod address {addr} is loopback");
            out.push((s(p, "/metadata/name").to_string(), addr));
        }
        if out.len() == n {
            break;
        }
    }
    assert_eq!(out.len(), n, "kube-sim has {n} running pods with ports");
    out
}

fn prometheus_config(herald: &str, keep: &[SocketAddr]) -> String {
    let regex: Vec<String> = keep
        .iter()
        .map(|a| a.to_string().replace('.', "\\\\."))
        .collect();
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n\
         - job_name: pods\n  http_sd_configs:\n  - url: {herald}/sd/v1/pods\n    refresh_interval: 1s\n  \
         relabel_configs:\n  \
         - source_labels: [__address__]\n    regex: \"{}\"\n    action: keep\n  \
         - source_labels: [__meta_kubernetes_pod_name]\n    target_label: pod\n",
        regex.join("|")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_with_http_sd_on_herald_scrapes_the_discovered_pods_and_nothing_else() {
    let Some(prom_bin) = installed::find("prometheus", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let spec = ClusterSpec {
        pending_fraction: 0.0,
        ..loopback_spec()
    };
    let sim = start_sim(spec, 3).await;
    let picks = pick_pod_addresses(&sim.handle().objects_json(Kind::Pod), SERVED);
    let mut listeners = Vec::new();
    for (id, (pod, addr)) in picks.into_iter().enumerate() {
        listeners.push(serve_metrics(addr, pod, id + 1).await);
    }
    let herald = start_herald(&sim, JOBS).await;
    let all = served(&reqwest::Client::new(), &herald, "pods").await;
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.addr).collect();
    for l in &listeners {
        assert!(
            all.iter().any(|t| t["__address__"] == l.addr.to_string()),
            "herald serves a target for {} ({})",
            l.addr,
            l.pod
        );
    }
    assert!(
        all.len() > 10 * SERVED,
        "the job has many targets besides the served ones"
    );

    let mut prom = Prometheus::start(&prom_bin, &prometheus_config(&herald.url(), &addrs)).await;
    let want: BTreeMap<String, (String, String)> = listeners
        .iter()
        .map(|l| (l.addr.to_string(), (l.pod.clone(), l.id.to_string())))
        .collect();
    let deadline = tokio::time::Instant::now() + SCRAPE_TIMEOUT;
    loop {
        let report = match check(&mut prom, &want, all.len()).await {
            Ok(()) => break,
            Err(report) => report,
        };
        if let Err(dead) = prom.check_alive() {
            panic!("{dead}: {report}");
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "Prometheus did not scrape herald's targets within {SCRAPE_TIMEOUT:?}: {report}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for l in &listeners {
        assert!(
            l.scrapes.load(Ordering::Relaxed) > 0,
            "the listener on {} was scraped",
            l.addr
        );
    }
}

/// `Ok` once exactly the served addresses are active, every one `up == 1` with its pod's name, and
/// every `peer_probe` sample carries the value of the listener on that address.
async fn check(
    prom: &mut Prometheus,
    want: &BTreeMap<String, (String, String)>,
    total: usize,
) -> Result<(), String> {
    let targets = prom.targets().await?;
    // NB: read from `instance` (the kept address; no rule rewrites it), not from the discovered
    // labels, which Prometheus 2.42 does not keep intact once a rule adds a label (`pod` here; see
    // peers/prometheus.rs).
    let active: BTreeSet<String> = targets
        .iter()
        .filter(|t| !t.health.is_empty())
        .map(|t| t.labels.get("instance").cloned().unwrap_or_default())
        .collect();
    let expected: BTreeSet<String> = want.keys().cloned().collect();
    if active != expected {
        return Err(format!(
            "active targets {active:?}, want exactly {expected:?}"
        ));
    }
    if targets.len() != total {
        return Err(format!(
            "Prometheus lists {} targets (active and dropped), herald serves {total}",
            targets.len()
        ));
    }
    let up = prom.query("up{job=\"pods\"}").await?;
    let up: BTreeMap<String, (String, String)> = up
        .into_iter()
        .map(|(l, v)| {
            (
                l.get("instance").cloned().unwrap_or_default(),
                (l.get("pod").cloned().unwrap_or_default(), v),
            )
        })
        .collect();
    let want_up: BTreeMap<String, (String, String)> = want
        .iter()
        .map(|(a, (pod, _))| (a.clone(), (pod.clone(), "1".to_string())))
        .collect();
    if up != want_up {
        let errors: Vec<String> = targets
            .iter()
            .filter(|t| !t.last_error.is_empty())
            .map(|t| {
                let instance = t.labels.get("instance").map(String::as_str).unwrap_or("");
                format!("{instance}: {}", t.last_error)
            })
            .collect();
        return Err(format!(
            "up by instance: {up:?}, want {want_up:?}; scrape errors: {errors:?}"
        ));
    }
    let probe: BTreeMap<String, String> = prom
        .query("peer_probe")
        .await?
        .into_iter()
        .map(|(l, v)| (l.get("instance").cloned().unwrap_or_default(), v))
        .collect();
    let want_probe: BTreeMap<String, String> = want
        .iter()
        .map(|(a, (_, id))| (a.clone(), id.clone()))
        .collect();
    if probe != want_probe {
        return Err(format!(
            "peer_probe by instance: {probe:?}, want {want_probe:?}"
        ));
    }
    Ok(())
}
