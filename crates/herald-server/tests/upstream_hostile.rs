//! A misbehaving apiserver: a watch line of garbage, a frame cut off mid-object by the end of the
//! stream, a 410, a list that is not JSON and a list that never ends. herald neither panics nor loses its last good state: the
//! job keeps serving every target it had, the kind is marked stale, each failure is counted, and the
//! feed keeps retrying. Objects above the size limit are refused, counted, and their last good
//! version kept.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::RawQuery;
use axum::routing::get;
use herald_server::metrics::Metrics;
use herald_server::{Shared, WatchKind, job_specs, upstream};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Serves `app` as the upstream on a loopback port and starts herald's pod feed against it (a pod job),
/// with `limit` as the largest object accepted when given.
async fn feed(
    app: axum::Router,
    limit: Option<usize>,
) -> (
    Arc<Shared>,
    CancellationToken,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    let cfg = herald_core::parse_config("jobs:\n- name: pods\n  role: pod\n").expect("valid");
    let shared = Shared::new(job_specs(&cfg, None).expect("specs"));
    if let Some(l) = limit {
        shared.set_max_object_bytes(l);
    }
    let client =
        upstream::client(kube::Config::new(url.parse().expect("url")), "test").expect("client");
    let stop = CancellationToken::new();
    let tasks = upstream::spawn(
        upstream::Upstream::new(client, upstream::Compression::default()),
        shared.clone(),
        false,
        stop.clone(),
    );
    (shared, stop, tasks)
}

fn pod(name: &str, rv: u64, ip: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"namespace": "default", "name": name, "resourceVersion": rv.to_string()},
           "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]},
           "status": {"podIP": ip, "phase": "Running"}})
}

/// What the scripted apiserver answers, request by request (lists and watches counted together).
fn script(step: usize, watch: bool) -> axum::body::Body {
    use axum::body::Body;
    let stream_then_hold = |text: String, hold: bool| {
        let first = futures::stream::once(async move { Ok::<_, std::io::Error>(text) });
        if hold {
            Body::from_stream(futures::StreamExt::chain(first, futures::stream::pending()))
        } else {
            Body::from_stream(first)
        }
    };
    match (step, watch) {
        // 0: a good list.
        (0, false) => Body::from(
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
                   "items": [pod("a", 5, "127.16.0.1"), pod("b", 6, "127.16.0.2")]})
            .to_string(),
        ),
        // 1: an event, then a line of garbage.
        (1, true) => stream_then_hold(
            format!(
                "{}\n\u{1}garbage{{{{\n",
                json!({"type": "ADDED", "object": pod("c", 11, "127.16.0.3")})
            ),
            true,
        ),
        // 2: a frame cut off mid-object, then the stream ends.
        (2, true) => stream_then_hold(
            "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\""
                .to_string(),
            false,
        ),
        // 3: the version expired: relist.
        (3, true) => stream_then_hold(
            format!(
                "{}\n",
                json!({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})
            ),
            true,
        ),
        // 4: a list that is not JSON.
        (4, false) => Body::from("<html>bad gateway</html>"),
        // 5 and on: a list that never ends.
        _ => stream_then_hold(
            "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"30\"},\"items\":[".to_string(),
            true,
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_apiserver_neither_crashes_herald_nor_loses_its_last_good_state() {
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let app = axum::Router::new().route(
        "/api/v1/pods",
        get(move |RawQuery(q): RawQuery| {
            let step = counter.fetch_add(1, Ordering::SeqCst);
            let watch = q.as_deref().unwrap_or("").contains("watch=true");
            async move { script(step, watch) }
        }),
    );
    let (shared, stop, tasks) = feed(app, None).await;

    // Until the never-ending list has started (backoff between failures: ~0.8 s + 1.6 s + 0.8 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while requests.load(Ordering::SeqCst) < 6 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the feed stopped retrying after {} requests",
            requests.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = shared.cache.id_of(WatchKind::Pod).expect("pods cached");
    let (_, targets, _) = shared.job_counts(0);
    assert_eq!(targets, 3, "a, b and c are still served");
    for name in ["a", "b", "c"] {
        assert!(
            shared.cache.read(r).get_parts("default", name).is_some(),
            "{name} is kept"
        );
    }
    assert!(shared.job_stale(0), "the job is marked stale");
    let errors = shared
        .metrics
        .upstream_errors
        .get_or_create(&Metrics::kind("pods"))
        .get();
    // NB: a frame cut off by the end of the stream never reaches the decoder: the watch ended, and
    // herald resumes from the last version it applied, as after the apiserver's own timeout.
    assert!(
        errors >= 2,
        "the garbage line and the bad list are counted: {errors}"
    );
    let relists = shared
        .metrics
        .upstream_relists
        .get_or_create(&Metrics::kind("pods"))
        .get();
    assert!(relists >= 2, "the 410 led to a relist: {relists}");
    stop.cancel();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("the feed stops even inside a never-ending list")
            .expect("feed task");
    }
}

fn huge_pod(name: &str, rv: u64, bytes: usize) -> serde_json::Value {
    let mut p = pod(name, rv, "127.16.0.9");
    p["metadata"]["annotations"] = json!({"blob": "x".repeat(bytes)});
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_above_the_size_limit_are_refused_counted_and_their_last_good_version_kept() {
    const LIMIT: usize = 64 * 1024;
    let app = axum::Router::new().route(
        "/api/v1/pods",
        get(move |RawQuery(q): RawQuery| async move {
            if q.as_deref().unwrap_or("").contains("watch=true") {
                let events = [
                    json!({"type": "MODIFIED", "object": huge_pod("a", 11, 4 * LIMIT)}),
                    json!({"type": "ADDED", "object": pod("c", 12, "127.16.0.3")}),
                    json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                                           "metadata": {"resourceVersion": "20"}}}),
                ];
                let body: String = events.iter().map(|e| format!("{e}\n")).collect();
                let first = futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
                axum::body::Body::from_stream(futures::StreamExt::chain(
                    first,
                    futures::stream::pending(),
                ))
            } else {
                axum::body::Body::from(
                    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
                           "items": [pod("a", 5, "127.16.0.1"), huge_pod("huge", 6, 2 * LIMIT)]})
                    .to_string(),
                )
            }
        }),
    );
    let (shared, stop, tasks) = feed(app, Some(LIMIT)).await;
    let r = shared.cache.id_of(WatchKind::Pod).expect("pods cached");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while shared.cache.resource_version(r) < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bookmark arrives"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let oversized = shared
        .metrics
        .upstream_oversized
        .get_or_create(&Metrics::kind("pods"))
        .get();
    assert_eq!(
        oversized, 2,
        "the huge list item and the huge event are counted"
    );
    let a = shared
        .cache
        .read(r)
        .get_parts("default", "a")
        .cloned()
        .expect("a kept");
    assert_eq!(a.rv, 5, "a keeps its last good version");
    assert!(shared.cache.read(r).get_parts("default", "huge").is_none());
    assert!(
        shared.cache.read(r).get_parts("default", "c").is_some(),
        "the feed goes on"
    );
    assert_eq!(shared.job_counts(0).1, 2);
    stop.cancel();
    for t in tasks {
        t.await.expect("feed task");
    }
}
