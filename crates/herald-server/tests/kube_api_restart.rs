//! A herald restarted on the same address does not hold the history its clients resume from: a
//! watch from a version it never recorded must get 410 Expired (client-go then relists), never a
//! stream that silently skips what changed while herald was down.

#[path = "support/kube.rs"]
mod support;

use std::time::Duration;

use futures::StreamExt;
use kube_sim::{Kind, Object, Sim, SimConfig, Write};

fn relabel_first_pod(sim: &Sim, value: &str) {
    let pod = sim.handle().objects_json(Kind::Pod)[0].clone();
    let mut pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod).expect("pod");
    pod.metadata
        .labels
        .get_or_insert_default()
        .insert("restart-test".into(), value.into());
    sim.handle().apply(vec![Write::Put(Object::Pod(pod))]);
}

/// The first line of a watch from `rv` at `url`, or the status of a refused request.
async fn first_watch_line(url: &str, rv: &str) -> String {
    let http = reqwest::Client::new();
    let resp = http
        .get(format!(
            "{url}/api/v1/pods?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=5"
        ))
        .send()
        .await
        .expect("watch request");
    if !resp.status().is_success() {
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body = resp.text().await.unwrap_or_default();
        return format!("status {status} retry-after {retry_after} {body}");
    }
    let mut body = resp.bytes_stream();
    let mut buf = Vec::new();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(10), body.next()).await
    {
        buf.extend_from_slice(&chunk);
        if buf.contains(&b'\n') {
            break;
        }
    }
    String::from_utf8_lossy(&buf)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

#[tokio::test]
async fn a_watch_from_before_a_restart_gets_410_from_the_restarted_herald() {
    let sim = Sim::start(SimConfig {
        spec: support::loopback_cluster(),
        seed: 3,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim");
    let port = kube_sim::peers::free_loopback_port();
    let start = |sim_url: String| async move {
        let mut api = support::kube_options(&[]);
        api.history_window = 1000;
        let listen = format!("127.0.0.1:{port}").parse().expect("addr");
        let herald =
            support::start_herald_unsynced(&sim_url, "jobs: []\n", api, "herald/test", listen)
                .await;
        tokio::time::timeout(Duration::from_secs(30), herald.ready())
            .await
            .expect("herald syncs");
        herald
    };
    let herald = start(sim.url()).await;
    let url = herald.kube_url().expect("face on");
    relabel_first_pod(&sim, "before");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = sim.handle().resource_version().to_string();
    // A client that saw `seen` resumes from it on the same herald: the history holds it.
    let line = first_watch_line(&url, &seen).await;
    assert!(
        !line.contains("\"code\":410"),
        "a watch from a recorded version expired: {line}"
    );

    herald.stop().await;
    relabel_first_pod(&sim, "while-down");
    // The client retries as soon as the port answers, before the new herald has synced.
    let early = {
        let (url, seen) = (url.clone(), seen.clone());
        tokio::spawn(async move {
            loop {
                let http = reqwest::Client::new();
                if http.get(format!("{url}/version")).send().await.is_ok() {
                    return first_watch_line(&url, &seen).await;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let herald = start(sim.url()).await;
    let line = early.await.expect("the early watch");
    // Before its first sync herald refuses as the apiserver does while its watch cache initializes;
    // once synced, the version is older than anything it holds: 410.
    let initializing =
        line.starts_with("status 429") && line.contains("storage is (re)initializing");
    assert!(
        initializing || (line.contains("\"type\":\"ERROR\"") && line.contains("\"code\":410")),
        "a watch from {seen} sent while the restarted herald synced was neither refused as \
         initializing nor told 410 Expired: {line:?}"
    );
    let line = first_watch_line(&url, &seen).await;
    assert!(
        line.contains("\"type\":\"ERROR\"") && line.contains("\"code\":410"),
        "a watch from {seen}, before the restarted herald's first list, was not told 410 Expired \
         (it would miss the change made while herald was down): {line:?}"
    );
    herald.stop().await;
}

#[tokio::test]
async fn stopping_herald_ends_its_open_watches() {
    let sim = Sim::start(SimConfig {
        spec: support::loopback_cluster(),
        seed: 4,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim");
    let herald =
        support::start_herald(&sim.url(), "jobs: []\n", support::kube_options(&[]), "t").await;
    let url = herald.kube_url().expect("face on");
    let resp = reqwest::Client::new()
        .get(format!(
            "{url}/api/v1/pods?watch=true&resourceVersion={}&allowWatchBookmarks=true",
            sim.handle().resource_version()
        ))
        .send()
        .await
        .expect("watch");
    assert!(resp.status().is_success(), "watch: {}", resp.status());
    let mut body = resp.bytes_stream();
    herald.stop().await;
    // A watch left open on a stopped herald would never see another event: its client must be told
    // (the stream ends) so that it reconnects to whatever serves the address next.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(_)) = body.next().await {}
    })
    .await;
    assert!(
        ended.is_ok(),
        "a watch stayed open 10 s after herald stopped"
    );
}

/// The label `restart-test` of kube-sim's first pod as the face at `url` serves it.
async fn served_label(url: &str, sim: &Sim) -> String {
    let pod = sim.handle().objects_json(Kind::Pod)[0].clone();
    let (ns, name) = (
        pod["metadata"]["namespace"]
            .as_str()
            .expect("ns")
            .to_string(),
        pod["metadata"]["name"].as_str().expect("name").to_string(),
    );
    let got: serde_json::Value = reqwest::Client::new()
        .get(format!("{url}/api/v1/namespaces/{ns}/pods/{name}"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    got["metadata"]["labels"]["restart-test"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test]
async fn a_downstream_herald_catches_up_after_its_upstream_herald_restarts() {
    let sim = Sim::start(SimConfig {
        spec: support::loopback_cluster(),
        seed: 5,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim");
    let port = kube_sim::peers::free_loopback_port();
    let start_root = |sim_url: String| async move {
        let opts = herald_server::ServeOptions {
            kube: Some(herald_server::KubeServeOptions {
                listen: format!("127.0.0.1:{port}").parse().expect("addr"),
                api: support::kube_options(&[]),
                custom: vec![],
                token_file: None,
                insecure: false,
                tls: None,
            }),
            ..herald_server::ServeOptions::default()
        };
        let herald = herald_server::Herald::start(
            vec![],
            kube::Config::new(sim_url.parse().expect("url")),
            opts,
        )
        .await
        .expect("herald starts");
        tokio::time::timeout(Duration::from_secs(30), herald.ready())
            .await
            .expect("herald syncs");
        herald
    };
    let root = start_root(sim.url()).await;
    let root_url = root.kube_url().expect("face on");
    let leaf =
        support::start_herald(&root_url, "jobs: []\n", support::kube_options(&[]), "leaf").await;
    let leaf_url = leaf.kube_url().expect("face on");
    relabel_first_pod(&sim, "before");
    wait_label(&leaf_url, &sim, "before").await;

    sim.handle().set_churn(40.0);
    root.stop().await;
    relabel_first_pod(&sim, "while-down");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let root = start_root(sim.url()).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    sim.handle().set_churn(0.0);
    relabel_first_pod(&sim, "after");
    wait_label(&leaf_url, &sim, "after").await;
    // Not only the last change: everything that changed while the root was down or syncing.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (leaf_pods, sim_pods) = (pod_versions(&leaf_url).await, sim_pod_versions(&sim));
        if leaf_pods == sim_pods {
            break;
        }
        let differ = sim_pods
            .iter()
            .filter(|(k, v)| leaf_pods.get(*k) != Some(*v))
            .count()
            + leaf_pods
                .keys()
                .filter(|k| !sim_pods.contains_key(*k))
                .count();
        assert!(
            tokio::time::Instant::now() < deadline,
            "the downstream herald still serves {differ} pods otherwise than kube-sim 30 s on"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    leaf.stop().await;
    root.stop().await;
}

async fn wait_label(url: &str, sim: &Sim, want: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = served_label(url, sim).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the downstream herald serves restart-test={got:?}, not {want:?}, 30 s on"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn pod_versions(url: &str) -> std::collections::BTreeMap<String, String> {
    let list: serde_json::Value = reqwest::Client::new()
        .get(format!("{url}/api/v1/pods"))
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(versioned)
        .collect()
}

fn sim_pod_versions(sim: &Sim) -> std::collections::BTreeMap<String, String> {
    sim.handle()
        .objects_json(Kind::Pod)
        .iter()
        .map(versioned)
        .collect()
}

fn versioned(p: &serde_json::Value) -> (String, String) {
    let m = &p["metadata"];
    (
        format!(
            "{}/{}",
            m["namespace"].as_str().unwrap_or(""),
            m["name"].as_str().unwrap_or("")
        ),
        m["resourceVersion"].as_str().unwrap_or("").to_string(),
    )
}

/// Until a resource's first sync, lists and watches of it get what the apiserver answers while its
/// watch cache initializes: 429 `storage is (re)initializing` with a Retry-After on the admission
/// schedule — never an empty list, never a watch waiting for versions herald does not have — and
/// they spend no admission.
#[tokio::test]
async fn before_its_first_sync_herald_refuses_as_an_initializing_apiserver() {
    let sim = Sim::start(SimConfig {
        spec: support::loopback_cluster(),
        seed: 5,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim");
    sim.handle()
        .fault(kube_sim::Fault::Errors {
            code: 500,
            fraction: 1.0,
            retry_after_seconds: 1,
        })
        .expect("fault");
    let mut api = support::kube_options(&[]);
    // One admission in all: were the refusals before the sync to spend any, the list after it
    // would be refused too.
    api.admission_burst = 1;
    api.admission_rate = 0.001;
    let listen = "127.0.0.1:0".parse().expect("addr");
    let herald =
        support::start_herald_unsynced(&sim.url(), "jobs: []\n", api, "herald/test", listen).await;
    let url = herald.kube_url().expect("face on");
    let http = reqwest::Client::new();
    // The refused are paced back at the admission rate (one per 1,000 s here, so the second is told
    // the longest wait herald gives).
    let longest = herald_server::admission::MAX_RETRY_AFTER;
    for (path, told) in [
        ("/api/v1/pods", 1),
        ("/api/v1/namespaces/default/pods?limit=5", longest),
    ] {
        let resp = http.get(format!("{url}{path}")).send().await.expect("list");
        assert_eq!(resp.status(), 429, "{path}");
        assert_eq!(resp.headers()["retry-after"], told.to_string(), "{path}");
        let status: serde_json::Value = resp.json().await.expect("a Status");
        assert_eq!(status["reason"], "TooManyRequests", "{path}");
        assert_eq!(status["message"], "storage is (re)initializing", "{path}");
        assert_eq!(status["details"]["retryAfterSeconds"], told, "{path}");
    }
    let line = first_watch_line(&url, "0").await;
    assert!(
        line.starts_with("status 429") && line.contains("storage is (re)initializing"),
        "{line}"
    );
    sim.handle().fault(kube_sim::Fault::Clear).expect("clear");
    tokio::time::timeout(Duration::from_secs(30), herald.ready())
        .await
        .expect("herald syncs once the upstream answers");
    // A watch from a version from before herald's start (an informer's first request after a
    // restart) ends with 410 Expired at once, and spends no admission either.
    let line = first_watch_line(&url, "1").await;
    assert!(
        line.contains("\"type\":\"ERROR\"") && line.contains("\"code\":410"),
        "{line}"
    );
    let resp = http
        .get(format!("{url}/api/v1/pods"))
        .send()
        .await
        .expect("list");
    assert_eq!(
        resp.status(),
        200,
        "the one admission was spent before the sync or on the expired watch"
    );
    let list: serde_json::Value = resp.json().await.expect("a list");
    assert_eq!(
        list["items"].as_array().map(Vec::len),
        Some(sim.handle().objects_json(Kind::Pod).len())
    );
    // The token is spent; a watch from the list's version reads no state and is not charged.
    let rv = list["metadata"]["resourceVersion"].as_str().expect("rv");
    let line = first_watch_line(&url, rv).await;
    assert!(!line.starts_with("status"), "{line}");
    let again = http
        .get(format!("{url}/api/v1/pods"))
        .send()
        .await
        .expect("list");
    assert_eq!(again.status(), 429, "a second list is charged and refused");
    herald.stop().await;
}
