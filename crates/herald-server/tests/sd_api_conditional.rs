//! The SD face's HTTP semantics: bodies, ETags, 304s, gzip and long-polls, driven with `oneshot`.

#[path = "support/fixtures.rs"]
mod fixtures;

use std::io::Read as _;
use std::time::Duration;

use axum::http::StatusCode;
use fixtures::*;
use herald_server::{ObjectKey, WatchKind};

#[tokio::test]
async fn a_job_is_served_as_http_sd_json_with_an_etag() {
    let shared = mk_pod_job(3);
    let res = get(&shared, "/sd/v1/pods", &[]).await;
    assert_status(&res, StatusCode::OK);
    assert_eq!(header(&res, "content-type"), Some("application/json"));
    let etag = header(&res, "etag").expect("etag").to_string();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    assert_eq!(header(&res, "x-herald-stale"), None);
    let body = body_json(res).await;
    let entries = body.as_array().expect("array");
    assert_eq!(entries.len(), 3);
    assert_eq!(
        entries[0]["targets"],
        serde_json::json!(["127.16.0.1:8080"])
    );
    assert_eq!(entries[0]["labels"]["__meta_kubernetes_pod_name"], "p0");
    assert_eq!(
        entries[0]["labels"]["__meta_kubernetes_namespace"],
        "default"
    );
}

#[tokio::test]
async fn the_same_state_gives_byte_equal_bodies_and_the_same_etag() {
    let shared = mk_pod_job(20);
    let a = get(&shared, "/sd/v1/pods", &[]).await;
    let b = get(&shared, "/sd/v1/pods", &[]).await;
    assert_eq!(header(&a, "etag"), header(&b, "etag"));
    assert_eq!(body_bytes(a).await, body_bytes(b).await);
}

#[tokio::test]
async fn if_none_match_with_the_current_etag_gets_304_and_a_stale_one_gets_200() {
    let shared = mk_pod_job(3);
    let first = get(&shared, "/sd/v1/pods", &[]).await;
    let etag = header(&first, "etag").expect("etag").to_string();

    let res = get(&shared, "/sd/v1/pods", &[("if-none-match", &etag)]).await;
    assert_status(&res, StatusCode::NOT_MODIFIED);
    assert_eq!(header(&res, "etag"), Some(etag.as_str()));
    assert!(body_bytes(res).await.is_empty());

    shared.apply(mk_pod("default", "new", "127.16.9.9", "web"));
    let res = get(&shared, "/sd/v1/pods", &[("if-none-match", &etag)]).await;
    assert_status(&res, StatusCode::OK);
    assert_ne!(header(&res, "etag"), Some(etag.as_str()));
    assert_eq!(body_json(res).await.as_array().expect("array").len(), 4);
}

#[tokio::test]
async fn without_if_none_match_a_wait_never_holds_the_request() {
    // Prometheus's http_sd never sends If-None-Match: it must always get an immediate 200.
    let shared = mk_pod_job(2);
    let res = tokio::time::timeout(
        Duration::from_secs(2),
        get(&shared, "/sd/v1/pods?wait=60s", &[]),
    )
    .await
    .expect("answered at once");
    assert_status(&res, StatusCode::OK);
}

#[tokio::test]
async fn gzip_is_served_when_accepted_and_inflates_to_the_json_body() {
    let shared = mk_pod_job(5);
    let plain = body_bytes(get(&shared, "/sd/v1/pods", &[]).await).await;
    let res = get(&shared, "/sd/v1/pods", &[("accept-encoding", "gzip")]).await;
    assert_status(&res, StatusCode::OK);
    assert_eq!(header(&res, "content-encoding"), Some("gzip"));
    let zipped = body_bytes(res).await;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&zipped[..])
        .read_to_end(&mut out)
        .expect("valid gzip");
    assert_eq!(out, plain);
}

#[tokio::test]
async fn after_a_gzip_client_a_client_without_gzip_gets_the_same_json_uncompressed() {
    // The gzip body is built first here (a vmagent or a tier of herald asking first); a Prometheus,
    // which sends no Accept-Encoding, must still get identity bytes equal to what gzip inflates to.
    let shared = mk_pod_job(7);
    let res = get(&shared, "/sd/v1/pods", &[("accept-encoding", "gzip")]).await;
    assert_eq!(header(&res, "content-encoding"), Some("gzip"));
    let etag_gzip = header(&res, "etag").map(str::to_string);
    let mut inflated = Vec::new();
    flate2::read::GzDecoder::new(&body_bytes(res).await[..])
        .read_to_end(&mut inflated)
        .expect("valid gzip");
    for accept in [None, Some("identity"), Some("gzip;q=0")] {
        let headers: Vec<(&str, &str)> =
            accept.map(|a| ("accept-encoding", a)).into_iter().collect();
        let res = get(&shared, "/sd/v1/pods", &headers).await;
        assert_status(&res, StatusCode::OK);
        assert_eq!(header(&res, "content-encoding"), None, "{accept:?}");
        assert_eq!(
            header(&res, "etag").map(str::to_string),
            etag_gzip,
            "one ETag per body"
        );
        let plain = body_bytes(res).await;
        assert_eq!(plain, inflated, "{accept:?}");
        let parsed: serde_json::Value = serde_json::from_slice(&plain).expect("JSON");
        assert!(
            parsed.as_array().is_some_and(|a| a.len() >= 7),
            "a target per pod at least"
        );
    }
}

#[tokio::test]
async fn a_long_poll_returns_as_soon_as_the_job_changes() {
    let shared = mk_pod_job(3);
    let etag = header(&get(&shared, "/sd/v1/pods", &[]).await, "etag")
        .expect("etag")
        .to_string();
    let poll = {
        let shared = shared.clone();
        let etag = etag.clone();
        tokio::spawn(async move {
            get(&shared, "/sd/v1/pods?wait=30s", &[("if-none-match", &etag)]).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!poll.is_finished(), "the poll waits while nothing changes");
    shared.delete(WatchKind::Pod, &ObjectKey::new("default", "p1"));
    let res = tokio::time::timeout(Duration::from_secs(2), poll)
        .await
        .expect("woken by the change")
        .expect("task ran");
    assert_status(&res, StatusCode::OK);
    assert_ne!(header(&res, "etag"), Some(etag.as_str()));
    assert_eq!(body_json(res).await.as_array().expect("array").len(), 2);
}

#[tokio::test]
async fn a_change_that_leaves_the_body_equal_does_not_end_a_long_poll() {
    let shared = mk_shared("jobs:\n- name: team-a\n  role: pod\n  namespaces:\n    names: [a]\n");
    shared.reset(
        WatchKind::Pod,
        vec![mk_pod("a", "p", "127.16.0.1", "web")],
        vec![],
    );
    sync_all(&shared);
    let etag = header(&get(&shared, "/sd/v1/team-a", &[]).await, "etag")
        .expect("etag")
        .to_string();
    let poll = {
        let shared = shared.clone();
        let etag = etag.clone();
        tokio::spawn(async move {
            get(
                &shared,
                "/sd/v1/team-a?wait=400ms",
                &[("if-none-match", &etag)],
            )
            .await
        })
    };
    // Another namespace's pod: the job's output does not move.
    shared.apply(mk_pod("b", "q", "127.16.0.2", "web"));
    let res = poll.await.expect("task ran");
    assert_status(&res, StatusCode::NOT_MODIFIED);
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_ends_with_304_when_the_wait_runs_out() {
    let shared = mk_pod_job(1);
    let etag = header(&get(&shared, "/sd/v1/pods", &[]).await, "etag")
        .expect("etag")
        .to_string();
    let started = tokio::time::Instant::now();
    let res = get(&shared, "/sd/v1/pods?wait=30s", &[("if-none-match", &etag)]).await;
    assert_status(&res, StatusCode::NOT_MODIFIED);
    assert_eq!(started.elapsed(), Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn a_long_polls_wait_is_left_out_of_the_sd_response_time() {
    let shared = mk_pod_job(1);
    let etag = header(&get(&shared, "/sd/v1/pods", &[]).await, "etag")
        .expect("etag")
        .to_string();
    let res = get(&shared, "/sd/v1/pods?wait=30s", &[("if-none-match", &etag)]).await;
    assert_status(&res, StatusCode::NOT_MODIFIED);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, shared.registry()).expect("encode");
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{series} in:\n{text}"))
    };
    // Time is paused: herald's own work takes none of it, the 30 s wait all of it.
    assert_eq!(value("herald_sd_response_seconds_count"), 2.0);
    assert!(value("herald_sd_response_seconds_sum") < 1.0, "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_is_capped_below_the_prometheus_refresh_interval() {
    let shared = mk_pod_job(1);
    let etag = header(&get(&shared, "/sd/v1/pods", &[]).await, "etag")
        .expect("etag")
        .to_string();
    let started = tokio::time::Instant::now();
    let res = get(
        &shared,
        "/sd/v1/pods?wait=60s",
        &[
            ("if-none-match", &etag),
            ("x-prometheus-refresh-interval-seconds", "10"),
        ],
    )
    .await;
    assert_status(&res, StatusCode::NOT_MODIFIED);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert!(waited >= Duration::from_secs(5), "{waited:?}");
}

#[tokio::test]
async fn a_stale_upstream_is_flagged_on_every_response() {
    let shared = mk_pod_job(1);
    shared.set_stale(WatchKind::Pod, true);
    let res = get(&shared, "/sd/v1/pods", &[]).await;
    assert_status(&res, StatusCode::OK);
    assert_eq!(header(&res, "x-herald-stale"), Some("true"));
    assert_eq!(body_json(res).await.as_array().expect("array").len(), 1);
    shared.set_stale(WatchKind::Pod, false);
    let res = get(&shared, "/sd/v1/pods", &[]).await;
    assert_eq!(header(&res, "x-herald-stale"), None);
}

#[tokio::test]
async fn shutting_down_ends_waiting_long_polls_at_once() {
    let shared = mk_pod_job(1);
    let etag = header(&get(&shared, "/sd/v1/pods", &[]).await, "etag")
        .expect("etag")
        .to_string();
    let poll = {
        let shared = shared.clone();
        tokio::spawn(async move {
            get(&shared, "/sd/v1/pods?wait=60s", &[("if-none-match", &etag)]).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    shared.shutdown_token().cancel();
    let res = tokio::time::timeout(Duration::from_secs(2), poll)
        .await
        .expect("answered at shutdown")
        .expect("task ran");
    assert_status(&res, StatusCode::NOT_MODIFIED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_state_is_served_while_a_long_relist_holds_the_index() {
    let shared = mk_pod_job(3);
    assert_status(&get(&shared, "/sd/v1/pods", &[]).await, StatusCode::OK);
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let busy = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            shared.update(WatchKind::Pod, |_| {
                held_tx.send(()).expect("test waits");
                release_rx.recv().expect("test releases");
                herald_server::index::Changed::new()
            })
        })
    };
    held_rx.recv().expect("the index lock is held");
    for uri in ["/sd/v1/pods", "/sd/v1"] {
        let res = tokio::time::timeout(Duration::from_secs(2), get(&shared, uri, &[]))
            .await
            .expect("answered without waiting for the index");
        assert_status(&res, StatusCode::OK);
    }
    release_tx.send(()).expect("updater waits");
    busy.join().expect("updater finished");
}
