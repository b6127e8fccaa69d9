//! The watch fan-out model (herald-audit's HA010 model, which `herald simulate` draws) against
//! kube-sim's meter: N consumers watch Pods and EndpointSlices of a churning cluster, first
//! directly, then through herald. The model, given the pod change rate the meter saw, predicts the
//! bytes the apiserver sent on those watches within 10 % in both cases.

#[path = "../../herald-server/tests/support/kube.rs"]
mod herald_support;

use std::time::Duration;

use futures::StreamExt;
use herald_audit::Cluster;
use herald_audit::rules::watch_fanout;
use kube_sim::{Sim, SimConfig};
use serde_json::Value;

const CONSUMERS: usize = 6;
const WINDOW: Duration = Duration::from_secs(25);
const CHURN: f64 = 40.0;
const RESOURCES: [(&str, &str); 2] = [
    ("pods", "/api/v1/pods"),
    ("endpointslices", "/apis/discovery.k8s.io/v1/endpointslices"),
];

/// Opens a watch and reads it until the task is dropped.
fn consume(url: String, ua: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .user_agent(ua)
            .build()
            .expect("client");
        let r = client.get(&url).send().await.expect("watch");
        assert_eq!(r.status(), 200, "{url}");
        let mut s = r.bytes_stream();
        while let Some(Ok(_)) = s.next().await {}
    })
}

/// (watch events, bytes) the meter counted per resource so far.
fn meter(sim: &Sim) -> Vec<(u64, u64)> {
    let stats = sim.handle().stats();
    RESOURCES
        .iter()
        .map(|(r, _)| {
            let c: &Value = &stats["by_resource"][*r];
            (
                c["watch_events"].as_u64().unwrap_or(0),
                c["bytes_sent"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn dump(sim: &Sim) -> Cluster {
    let mut c = Cluster::default();
    for item in sim.handle().dump()["items"].as_array().expect("a List") {
        c.add(item.clone()).expect("valid");
    }
    c
}

/// Runs `watchers` watches of each resource for the window; returns the model's prediction and the
/// meter's bytes on those resources.
async fn window(sim: &Sim, base: &str, watchers: usize, direct: bool) -> (f64, f64) {
    let rv = sim.handle().resource_version();
    let mut tasks = Vec::new();
    for i in 0..CONSUMERS {
        for (_, path) in RESOURCES {
            let url = if direct {
                format!("{base}{path}?watch=true&resourceVersion={rv}")
            } else {
                format!("{base}{path}?watch=true")
            };
            tasks.push(consume(url, format!("consumer-{i}")));
        }
    }
    // Connected and past the initial events.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cluster = dump(sim);
    let before = meter(sim);
    tokio::time::sleep(WINDOW).await;
    let after = meter(sim);
    for t in tasks {
        t.abort();
    }
    let secs = WINDOW.as_secs_f64();
    let pod_events = (after[0].0 - before[0].0) as f64;
    // Pod changes per second, as one watch of pods saw them.
    let churn = pod_events / watchers as f64 / secs;
    let model = watch_fanout(&cluster, churn);
    let per_watch: f64 = model
        .kinds
        .iter()
        .filter(|k| matches!(k.kind.name(), "Pod" | "EndpointSlice"))
        .map(|k| k.bytes_per_watch())
        .sum();
    let predicted = per_watch * watchers as f64 * secs;
    for (i, (r, _)) in RESOURCES.iter().enumerate() {
        let name = if i == 0 { "Pod" } else { "EndpointSlice" };
        let k = model
            .kinds
            .iter()
            .find(|k| k.kind.name() == name)
            .expect("kind");
        eprintln!(
            "{r}: model {:.2} events/s × {:.0} B per watch; meter {:.2} events/s, {:.0} B per event",
            k.events_per_second,
            k.event_bytes,
            (after[i].0 - before[i].0) as f64 / watchers as f64 / secs,
            (after[i].1 - before[i].1) as f64 / (after[i].0 - before[i].0).max(1) as f64
        );
    }
    let measured: f64 = after
        .iter()
        .zip(&before)
        .map(|(a, b)| (a.1 - b.1) as f64)
        .sum();
    eprintln!(
        "{} watchers ({}): churn {churn:.1}/s, predicted {predicted:.0} B, measured {measured:.0} B",
        watchers,
        if direct { "direct" } else { "through herald" }
    );
    (predicted, measured)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fan_out_model_predicts_the_apiservers_watch_bytes_within_ten_percent() {
    let sim = Sim::start(SimConfig {
        spec: herald_support::loopback_cluster(),
        churn_per_sec: CHURN,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    let (predicted, measured) = window(&sim, &sim.url(), CONSUMERS, true).await;
    let off = (predicted / measured - 1.0).abs();
    assert!(
        off < 0.10,
        "direct: predicted {predicted:.0} B, measured {measured:.0} B ({:.1} % off)",
        off * 100.0
    );

    let herald = herald_support::start_herald(
        &sim.url(),
        "jobs: []\n",
        herald_support::kube_options(&[]),
        "herald/calibration",
    )
    .await;
    let face = herald.kube_url().expect("kube face on");
    // Through herald the apiserver serves one watch per resource, whatever the consumers.
    let (predicted, measured) = window(&sim, &face, 1, false).await;
    let off = (predicted / measured - 1.0).abs();
    assert!(
        off < 0.10,
        "through herald: predicted {predicted:.0} B, measured {measured:.0} B ({:.1} % off)",
        off * 100.0
    );
}
