//! Fan-out through herald's Kubernetes API: a watcher that never reads is closed as the apiserver
//! closes an unresponsive watcher, without holding back the others; events are encoded once and
//! shared, so many watchers cost one upstream watch.

#[path = "support/kube.rs"]
mod support;

use std::time::Duration;

use futures::StreamExt;
use herald_server::Herald;
use kube_sim::{Sim, SimConfig};
use serde_json::json;
use tokio::io::AsyncWriteExt;

fn metric(herald: &Herald, prefix: &str) -> f64 {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, herald.shared().registry())
        .expect("encode");
    out.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Reads a watch stream and counts the configmap events named `big-*`.
async fn count_big_events(url: String, want: usize) -> usize {
    let r = reqwest::get(&url).await.expect("watch");
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    let mut buf = Vec::new();
    let mut seen = 0;
    while seen < want {
        let Ok(Some(Ok(chunk))) =
            tokio::time::timeout(Duration::from_secs(20), stream.next()).await
        else {
            break;
        };
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let ev: serde_json::Value =
                serde_json::from_slice(&line).expect("one JSON event per line");
            if ev["object"]["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("big-"))
            {
                seen += 1;
            }
        }
    }
    seen
}

/// An empty kube-sim, herald on it serving configmaps with `api`, and the URL of a configmaps watch
/// from herald's current version.
async fn start(api: herald_server::KubeApiOptions) -> (Sim, Herald, String) {
    let sim = Sim::start(SimConfig {
        populate: false,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    let herald = support::start_herald(&sim.url(), "jobs: []\n", api, "herald/test").await;
    let base = herald.kube_url().expect("face on");
    let cache = &herald.shared().cache;
    let r = cache
        .ids()
        .find(|r| cache.get(*r).resource.plural == "configmaps")
        .expect("cm");
    let url = format!(
        "{base}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={}",
        cache.resource_version(r)
    );
    (sim, herald, url)
}

#[tokio::test]
async fn a_watcher_that_never_reads_is_closed_and_the_others_are_not_held_back() {
    let mut api = support::kube_options(&["configmaps"]);
    api.watch.slow_watcher_timeout = Duration::from_secs(8);
    // A watcher counts as unresponsive when its buffer of 64 writes stays full. With the batch window
    // the burst below (400 events in a second or two) is a few dozen writes and never fills it; under
    // sustained churn it fills as before, only with more events per write. One write per event here.
    api.watch.batch_window = Duration::ZERO;
    let (sim, herald, watch_url) = start(api).await;
    let base = herald.kube_url().expect("face on");

    // The stalled client: a tiny receive buffer, a watch request, and never a read.
    let addr: std::net::SocketAddr = base.trim_start_matches("http://").parse().expect("addr");
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut stalled = socket.connect(addr).await.expect("connect");
    let path = watch_url.trim_start_matches(&base);
    stalled
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: stalled\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("request");

    const N: usize = 400;
    let readers: Vec<_> = (0..4)
        .map(|_| tokio::spawn(count_big_events(watch_url.clone(), N)))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let payload = "x".repeat(40_000);
    let http = reqwest::Client::new();
    for i in 0..N {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("big-{i}"), "namespace": "default"}, "data": {"v": payload}});
        let r = http
            .post(format!(
                "{}/api/v1/namespaces/default/configmaps",
                sim.url()
            ))
            .json(&body)
            .send()
            .await
            .expect("post");
        assert!(r.status().is_success());
    }
    for r in readers {
        assert_eq!(
            r.await.expect("reader"),
            N,
            "every reading watcher got every event"
        );
    }
    assert_eq!(
        metric(&herald, "herald_kube_watchers_closed_slow_total"),
        0.0,
        "the readers finished while the stalled watcher was still open: it never held them back"
    );
    let mut closed = false;
    for _ in 0..200 {
        if metric(&herald, "herald_kube_watchers_closed_slow_total") >= 1.0 {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(closed, "the stalled watcher was closed as unresponsive");
    drop(stalled);
}

/// Posts a small ConfigMap named `name` to kube-sim.
async fn post_configmap(http: &reqwest::Client, sim: &str, name: &str) {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"v": "1"}});
    let r = http
        .post(format!("{sim}/api/v1/namespaces/default/configmaps"))
        .json(&body)
        .send()
        .await
        .expect("post");
    assert!(r.status().is_success(), "{}", r.status());
}

#[tokio::test]
async fn events_inside_the_batch_window_share_a_write_and_a_quiet_watch_is_not_held_back() {
    let mut api = support::kube_options(&["configmaps"]);
    let window = Duration::from_millis(1000);
    api.watch.batch_window = window;
    let (sim, herald, url) = start(api).await;

    // The watcher: every event's object name, as it arrives.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let resp = reqwest::get(&url).await.expect("watch");
    assert_eq!(resp.status(), 200);
    tokio::spawn(async move {
        let mut stream = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(Ok(chunk)) = stream.next().await {
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let ev: serde_json::Value = serde_json::from_slice(&line).expect("JSON event");
                let name = ev["object"]["metadata"]["name"].as_str().unwrap_or("");
                if tx.send(name.to_string()).is_err() {
                    return;
                }
            }
        }
    });
    let next = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("an event within 20 s")
            .expect("the watch stays open")
    };
    let http = reqwest::Client::new();

    // A watch that has not written lately writes its next event at once, not a window later.
    let t0 = std::time::Instant::now();
    post_configmap(&http, &sim.url(), "quiet-0").await;
    assert_eq!(next(&mut rx).await, "quiet-0");
    let first = t0.elapsed();
    assert!(
        first < window * 9 / 10,
        "the first event after a quiet spell took {first:?}: held back by the window"
    );

    // Events arriving within the window after that write go out together, in order.
    let writes_before = metric(&herald, "herald_kube_watch_writes_total");
    for i in 1..=10 {
        post_configmap(&http, &sim.url(), &format!("burst-{i}")).await;
    }
    for i in 1..=10 {
        assert_eq!(next(&mut rx).await, format!("burst-{i}"));
    }
    let writes = metric(&herald, "herald_kube_watch_writes_total") - writes_before;
    assert!(
        (1.0..=2.0).contains(&writes),
        "ten events inside the window took {writes} writes"
    );
    assert_eq!(
        metric(&herald, "herald_kube_events_sent_total"),
        11.0,
        "every event sent once"
    );
}
