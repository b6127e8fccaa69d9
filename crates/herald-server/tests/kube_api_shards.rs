//! KEP-5866 `shardSelector` through herald's Kubernetes API: shards are placed by the uid herald read
//! from its upstream, so herald's shard lists are kube-sim's, whatever the upstream's version; a watch
//! per shard on herald sees exactly its shard's changes.

#[path = "support/kube.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use kube_face::shard::{fnv1a64, shard_range, shard_selector_text};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn list(url: &str) -> Value {
    let r = reqwest::get(url).await.expect("list");
    assert_eq!(r.status(), 200, "{url}");
    r.json().await.expect("json")
}

fn uids(list: &Value) -> BTreeSet<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| o["metadata"]["uid"].as_str().expect("uid").to_string())
        .collect()
}

#[tokio::test]
async fn herald_serves_the_same_shards_as_its_upstream_and_watches_per_shard() {
    let sim = Sim::start(SimConfig {
        spec: support::loopback_cluster(),
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    let api = support::kube_options(&["configmaps"]);
    let herald = support::start_herald(&sim.url(), "jobs: []\n", api, "herald/test").await;
    let face = herald.kube_url().expect("face on");

    const N: u64 = 7;
    for path in ["api/v1/pods", "api/v1/services"] {
        let whole = uids(&list(&format!("{face}/{path}")).await);
        assert!(!whole.is_empty(), "{path}");
        let mut union = BTreeSet::new();
        for i in 0..N {
            let sel = shard_selector_text(i, N);
            let ours = list(&format!("{face}/{path}?shardSelector={}", enc(&sel))).await;
            assert_eq!(ours["metadata"]["shardInfo"]["selector"], sel.as_str());
            let theirs = list(&format!("{}/{path}?shardSelector={}", sim.url(), enc(&sel))).await;
            assert_eq!(uids(&ours), uids(&theirs), "{path} shard {i}");
            for u in uids(&ours) {
                assert!(union.insert(u), "{path}: in two shards");
            }
        }
        assert_eq!(union, whole, "{path}");
    }

    // A watch per shard on herald, then churn upstream: each sees exactly its shard's configmaps.
    let cms = format!("{face}/api/v1/namespaces/default/configmaps");
    let rv = list(&cms).await["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let mut watches = Vec::new();
    for i in 0..N {
        let url = format!(
            "{cms}?watch=true&resourceVersion={rv}&shardSelector={}",
            enc(&shard_selector_text(i, N))
        );
        let r = reqwest::get(&url).await.expect("watch");
        assert_eq!(r.status(), 200);
        watches.push(r.bytes_stream());
    }
    let upstream = format!("{}/api/v1/namespaces/default/configmaps", sim.url());
    let http = reqwest::Client::new();
    let mut created = Vec::new();
    for i in 0..30 {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("s{i}"), "namespace": "default"}, "data": {"v": "0"}});
        let r = http.post(&upstream).json(&body).send().await.expect("post");
        assert!(r.status().is_success());
        let obj: Value = r.json().await.expect("json");
        created.push(obj["metadata"]["uid"].as_str().expect("uid").to_string());
    }
    for (i, w) in watches.iter_mut().enumerate() {
        let (start, end) = shard_range(i as u64, N);
        let want: BTreeSet<String> = created
            .iter()
            .filter(|u| {
                let h = u128::from(fnv1a64(u.as_bytes()));
                start <= h && h < end
            })
            .cloned()
            .collect();
        let mut got = BTreeSet::new();
        let mut buf = Vec::new();
        while got.len() < want.len() {
            let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(20), w.next()).await
            else {
                break;
            };
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let ev: Value = serde_json::from_slice(&line).expect("one event per line");
                if ev["type"] == "ADDED" {
                    let u = ev["object"]["metadata"]["uid"].as_str().expect("uid");
                    assert!(want.contains(u), "shard {i} got {u}, not its own");
                    got.insert(u.to_string());
                }
            }
        }
        assert_eq!(got, want, "shard {i}");
    }
}
