//! `?shard=I&shards=N`: each shard holds exactly the targets Prometheus's `hashmod` + `keep` on
//! `__address__` would keep, and the shards together are the whole job.

#[path = "support/fixtures.rs"]
mod fixtures;

use std::collections::BTreeSet;

use axum::http::StatusCode;
use fixtures::*;
use herald_core::hashmod;
use herald_server::WatchKind;

fn targets(body: &serde_json::Value) -> Vec<String> {
    body.as_array()
        .expect("array")
        .iter()
        .map(|e| e["targets"][0].as_str().expect("target").to_string())
        .collect()
}

#[tokio::test]
async fn shards_partition_the_job_as_prometheus_hashmod_would() {
    let shared = mk_pod_job(300);
    let full = targets(&body_json(get(&shared, "/sd/v1/pods", &[]).await).await);
    assert_eq!(full.len(), 300);
    for count in [1u64, 2, 3, 7] {
        let mut union = BTreeSet::new();
        for index in 0..count {
            let res = get(
                &shared,
                &format!("/sd/v1/pods?shard={index}&shards={count}"),
                &[],
            )
            .await;
            assert_status(&res, StatusCode::OK);
            let shard = targets(&body_json(res).await);
            let expected: Vec<String> = full
                .iter()
                .filter(|t| hashmod(t, count) == index)
                .cloned()
                .collect();
            assert_eq!(
                shard, expected,
                "shard {index} of {count}, in the job's order"
            );
            union.extend(shard);
        }
        assert_eq!(
            union,
            full.iter().cloned().collect(),
            "{count} shards cover the job"
        );
    }
}

#[tokio::test]
async fn each_shard_has_its_own_etag() {
    let shared = mk_pod_job(50);
    let a = get(&shared, "/sd/v1/pods?shard=0&shards=2", &[]).await;
    let b = get(&shared, "/sd/v1/pods?shard=1&shards=2", &[]).await;
    assert_ne!(header(&a, "etag"), header(&b, "etag"));
    let etag = header(&a, "etag").expect("etag").to_string();
    let again = get(
        &shared,
        "/sd/v1/pods?shard=0&shards=2",
        &[("if-none-match", &etag)],
    )
    .await;
    assert_status(&again, StatusCode::NOT_MODIFIED);
}

#[tokio::test]
async fn a_relabeled_job_is_sharded_by_the_final_address_and_its_drops_never_leave_herald() {
    // The address is rewritten to the pod IP on port 9100, and one pod in four is dropped: the shards
    // hold exactly the kept targets, split by hashmod of the rewritten address.
    let shared = mk_shared(
        "jobs:\n- name: pods\n  role: pod\n  relabel_configs:\n  \
         - {source_labels: [__meta_kubernetes_pod_ip], target_label: __address__, replacement: '$1:9100'}\n  \
         - {source_labels: [__meta_kubernetes_pod_name], regex: '.*[05]', action: drop}\n",
    );
    shared.reset(WatchKind::Pod, mk_pods(300), vec![]);
    sync_all(&shared);
    let full = body_json(get(&shared, "/sd/v1/pods", &[]).await).await;
    let addresses = targets(&full);
    assert!(
        addresses.len() < 300 && addresses.len() > 200,
        "{} kept",
        addresses.len()
    );
    assert!(
        addresses.iter().all(|a| a.ends_with(":9100")),
        "{addresses:?}"
    );
    for e in full.as_array().expect("array") {
        let name = e["labels"]
            .as_object()
            .expect("labels")
            .keys()
            .find(|k| k.starts_with("__meta_"));
        assert_eq!(name, None, "meta labels are not served after relabeling");
    }
    let mut union = BTreeSet::new();
    for index in 0..3 {
        let res = get(&shared, &format!("/sd/v1/pods?shard={index}&shards=3"), &[]).await;
        assert_status(&res, StatusCode::OK);
        let shard = targets(&body_json(res).await);
        let expected: Vec<String> = addresses
            .iter()
            .filter(|t| hashmod(t, 3) == index)
            .cloned()
            .collect();
        assert_eq!(shard, expected, "shard {index} of 3");
        union.extend(shard);
    }
    assert_eq!(union.len(), addresses.len());
}
