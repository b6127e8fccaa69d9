//! The SD and admin faces on bad or early requests: 404, 400 naming the parameter, 503 before the
//! first sync; and the job list, readiness and metrics.

#[path = "support/fixtures.rs"]
mod fixtures;

use axum::http::StatusCode;
use fixtures::*;
use herald_server::WatchKind;

#[tokio::test]
async fn an_unknown_job_is_a_404_with_a_json_error() {
    let shared = mk_pod_job(1);
    let res = get(&shared, "/sd/v1/nope", &[]).await;
    assert_status(&res, StatusCode::NOT_FOUND);
    assert_eq!(header(&res, "content-type"), Some("application/json"));
    let body = body_json(res).await;
    assert!(
        body["error"]
            .as_str()
            .expect("message")
            .contains("\"nope\""),
        "{body}"
    );
}

#[tokio::test]
async fn bad_query_parameters_are_a_400_naming_the_parameter() {
    let shared = mk_pod_job(1);
    for (query, named) in [
        ("shard=1", "shards"),
        ("shard=2&shards=2", "shard"),
        ("shard=0&shards=zero", "shards"),
        ("wait=forever", "wait"),
        ("foo=1", "foo"),
    ] {
        let res = get(&shared, &format!("/sd/v1/pods?{query}"), &[]).await;
        assert_status(&res, StatusCode::BAD_REQUEST);
        let body = body_json(res).await;
        let msg = body["error"].as_str().expect("message");
        assert!(msg.contains(&format!("\"{named}\"")), "{query}: {msg}");
    }
}

#[tokio::test]
async fn before_the_first_sync_a_job_is_503_never_an_empty_list() {
    let shared = mk_shared("jobs:\n- name: eps\n  role: endpoints\n");
    // Endpoints synced, but the Pods and Services it reads are not: a body now would be partial.
    shared.reset(
        WatchKind::Endpoints,
        Vec::<herald_server::Object>::new(),
        vec![],
    );
    shared.mark_synced(WatchKind::Endpoints);
    let res = get(&shared, "/sd/v1/eps", &[]).await;
    assert_status(&res, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&res, "retry-after"), Some("1"));
    assert_status(
        &get(&shared, "/readyz", &[]).await,
        StatusCode::SERVICE_UNAVAILABLE,
    );

    sync_all(&shared);
    assert_status(&get(&shared, "/sd/v1/eps", &[]).await, StatusCode::OK);
    assert_status(&get(&shared, "/readyz", &[]).await, StatusCode::OK);
    assert_status(&get(&shared, "/healthz", &[]).await, StatusCode::OK);
}

#[tokio::test]
async fn the_job_list_shows_targets_generation_and_staleness() {
    let shared = mk_shared("jobs:\n- name: pods\n  role: pod\n- name: nodes\n  role: node\n");
    shared.reset(WatchKind::Pod, mk_pods(4), vec![]);
    sync_all(&shared);
    shared.set_stale(WatchKind::Node, true);
    let res = get(&shared, "/sd/v1", &[]).await;
    assert_status(&res, StatusCode::OK);
    let body = body_json(res).await;
    let jobs = body.as_array().expect("array");
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0]["job"], "pods");
    assert_eq!(jobs[0]["role"], "pod");
    assert_eq!(jobs[0]["targets"], 4);
    assert_eq!(jobs[0]["generation"], 1);
    assert_eq!(jobs[0]["stale"], false);
    assert_eq!(jobs[1]["job"], "nodes");
    assert_eq!(jobs[1]["stale"], true);
}

#[tokio::test]
async fn the_job_list_shows_what_a_relabeled_job_serves_once_its_body_is_built() {
    let shared = mk_shared(
        "jobs:\n- name: pods\n  role: pod\n- name: kept\n  role: pod\n  relabel_configs:\n  \
         - {source_labels: [__meta_kubernetes_pod_name], regex: 'p0|p1', action: keep}\n",
    );
    shared.reset(WatchKind::Pod, mk_pods(4), vec![]);
    sync_all(&shared);
    let list = |shared| async move { body_json(get(shared, "/sd/v1", &[]).await).await };
    let jobs = list(&shared).await;
    assert_eq!(jobs[0]["job"], "pods");
    assert!(jobs[0].get("served_targets").is_none(), "{}", jobs[0]);
    assert_eq!(jobs[1]["job"], "kept");
    assert_eq!(jobs[1]["targets"], 4, "discovered");
    assert!(jobs[1]["served_targets"].is_null(), "no body built yet");

    assert_status(&get(&shared, "/sd/v1/kept", &[]).await, StatusCode::OK);
    assert_eq!(list(&shared).await[1]["served_targets"], 2);

    // A new generation: its body is not built yet, so the old count is not shown as current.
    shared.reset(WatchKind::Pod, mk_pods(3), vec![]);
    assert!(list(&shared).await[1]["served_targets"].is_null());
    assert_status(&get(&shared, "/sd/v1/kept", &[]).await, StatusCode::OK);
    assert_eq!(list(&shared).await[1]["served_targets"], 2);
}

#[tokio::test]
async fn metrics_report_targets_objects_and_requests_by_code() {
    let shared = mk_pod_job(3);
    get(&shared, "/sd/v1/pods", &[]).await;
    get(&shared, "/sd/v1/nope", &[]).await;
    let res = get(&shared, "/metrics", &[]).await;
    assert_status(&res, StatusCode::OK);
    let text = String::from_utf8(body_bytes(res).await).expect("utf-8");
    for line in [
        "herald_job_targets{job=\"pods\"} 3",
        "herald_cached_objects{kind=\"pods\"} 3",
        "herald_sd_requests_total{code=\"200\"} 1",
        "herald_sd_requests_total{code=\"404\"} 1",
        "herald_upstream_stale{kind=\"pods\"} 0",
        "herald_sd_waiting_requests 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[tokio::test]
async fn an_unknown_path_is_a_404_with_a_json_error() {
    let shared = mk_pod_job(1);
    let res = get(&shared, "/nothing/here", &[]).await;
    assert_status(&res, StatusCode::NOT_FOUND);
    assert!(body_json(res).await["error"].is_string());
}

#[tokio::test]
async fn scrape_configs_without_monitors_is_an_empty_list_and_bad_parameters_are_named() {
    let shared = mk_pod_job(3);
    let res = get(&shared, "/scrape-configs", &[]).await;
    assert_status(&res, StatusCode::OK);
    let yaml = String::from_utf8(body_bytes(res).await).expect("utf-8");
    let parsed: serde_yaml::Value = serde_yaml::from_str(&yaml).expect("YAML");
    assert_eq!(
        parsed["scrape_configs"].as_sequence().map(Vec::len),
        Some(0),
        "{yaml}"
    );
    for (uri, needle) in [
        ("/scrape-configs?shards=2", "shard"),
        ("/scrape-configs?shard=3&shards=2", "shard"),
        ("/scrape-configs?bas=x", "\"bas\""),
    ] {
        let res = get(&shared, uri, &[]).await;
        assert_status(&res, StatusCode::BAD_REQUEST);
        let body = body_json(res).await;
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains(needle)),
            "{uri}: {body}"
        );
    }
}
