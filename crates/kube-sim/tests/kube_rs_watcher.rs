//! A real kube-rs watcher + reflector against kube-sim stays in sync through watch closes, compaction
//! (410 → relist), an apiserver restart and 429s.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use kube_sim::{Fault, Kind};
use serde_json::json;

fn client_for(sim: &kube_sim::Sim) -> Client {
    let cfg = kube::Config::new(sim.url().parse().expect("url"));
    Client::try_from(cfg).expect("client")
}

fn sim_state(sim: &kube_sim::Sim) -> BTreeMap<String, String> {
    sim.handle()
        .objects_json(Kind::ConfigMap)
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().expect("name").to_string(),
                o["data"]["v"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn reflected(store: &reflector::Store<ConfigMap>) -> BTreeMap<String, String> {
    store
        .state()
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().expect("name"),
                c.data
                    .as_ref()
                    .and_then(|d| d.get("v").cloned())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

async fn converged(sim: &kube_sim::Sim, store: &reflector::Store<ConfigMap>) -> bool {
    for _ in 0..100 {
        if reflected(store) == sim_state(sim) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

async fn churn(base: &str, round: usize) {
    for i in 0..5 {
        let name = format!("c{i}");
        let body = cm(&name, json!({}), &format!("{round}"));
        let r = client()
            .put(format!("{base}/{name}"))
            .json(&body)
            .send()
            .await
            .expect("put");
        if r.status() == 404 {
            post(base, &body).await;
        }
    }
    let _ = client()
        .delete(format!("{base}/c{}", round % 5))
        .send()
        .await;
}

#[tokio::test]
async fn a_kube_rs_reflector_stays_in_sync_through_every_fault() {
    let sim = start_empty_with(20, kube_sim::Settings::default()).await;
    let base = format!("{}/api/v1/namespaces/default/configmaps", sim.url());
    churn(&base, 0).await;

    let api: Api<ConfigMap> = Api::namespaced(client_for(&sim), "default");
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    reader.wait_until_ready().await.expect("initial sync");
    assert!(converged(&sim, &reader).await, "initial list");

    let lists = |sim: &kube_sim::Sim| {
        sim.stats()["by_resource"]["configmaps"]["lists"]
            .as_u64()
            .unwrap_or(0)
    };
    let mut round = 0;
    let mut step = |sim: &kube_sim::Sim, n: usize| {
        for _ in 0..n {
            round += 1;
            churn_via_handle(sim, round);
        }
    };

    // A dropped watch resumes from its last RV.
    sim.handle().fault(Fault::CloseWatches).expect("fault");
    step(&sim, 1);
    assert!(
        converged(&sim, &reader).await,
        "in sync after close_watches"
    );

    // An apiserver restart (503s) while more changes happen than the history window holds: the resumed
    // watch gets 410 and the watcher relists.
    let before = lists(&sim);
    sim.handle()
        .fault(Fault::Restart {
            duration_ms: 800,
            refuse: false,
        })
        .expect("fault");
    step(&sim, 10);
    assert!(
        converged(&sim, &reader).await,
        "in sync after a restart past the window"
    );
    assert!(lists(&sim) > before, "the watcher relisted after 410");

    // A refusing restart with a compaction in the middle: the resume RV is compacted away.
    let before = lists(&sim);
    sim.handle()
        .fault(Fault::Restart {
            duration_ms: 600,
            refuse: true,
        })
        .expect("fault");
    step(&sim, 1);
    sim.handle().fault(Fault::Compact).expect("fault");
    step(&sim, 1);
    assert!(converged(&sim, &reader).await, "in sync after compaction");
    assert!(
        lists(&sim) > before,
        "the watcher relisted after compaction"
    );

    // Half of all requests answered 429 with Retry-After, while the cluster keeps changing.
    sim.handle()
        .fault(Fault::Errors {
            code: 429,
            fraction: 0.5,
            retry_after_seconds: 1,
        })
        .expect("fault");
    sim.handle().fault(Fault::CloseWatches).expect("fault");
    step(&sim, 3);
    assert!(converged(&sim, &reader).await, "in sync under 429s");
    sim.handle().fault(Fault::Clear).expect("clear");
    step(&sim, 2);
    assert!(
        converged(&sim, &reader).await,
        "in sync after the faults clear"
    );
    task.abort();
}

/// Writes through the library handle (not HTTP), so they happen even while the API is faulted.
fn churn_via_handle(sim: &kube_sim::Sim, round: usize) {
    use k8s_openapi::api::core::v1::ConfigMap as Cm;
    let mut writes = Vec::new();
    for i in 0..5 {
        let mut c = Cm::default();
        c.metadata.name = Some(format!("c{i}"));
        c.metadata.namespace = Some("default".into());
        c.data = Some([("v".to_string(), round.to_string())].into());
        writes.push(kube_sim::Write::Put(kube_sim::Object::ConfigMap(c)));
    }
    writes.push(kube_sim::Write::Delete {
        kind: Kind::ConfigMap,
        namespace: Some("default".into()),
        name: format!("c{}", round % 5),
    });
    sim.handle().apply(writes);
}
