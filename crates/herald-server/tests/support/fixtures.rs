//! Shared fixtures for the `sd_api_*` tests: a `Shared` with jobs and objects, and request helpers
//! that drive `app(..)` with `oneshot` (no socket).

#![allow(dead_code)] // each test binary uses a different subset

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use herald_server::{Object, Shared, WatchKind, app, job_specs};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

/// A `Shared` with the jobs of `yaml`, not yet synced.
pub fn mk_shared(yaml: &str) -> Arc<Shared> {
    let cfg = herald_core::parse_config(yaml).expect("valid job file");
    Shared::new(job_specs(&cfg, Some("monitoring")).expect("valid jobs"))
}

/// Marks every needed kind as having completed its first sync.
pub fn sync_all(shared: &Shared) {
    for kind in shared.needed_kinds().collect::<Vec<_>>() {
        shared.mark_synced(kind);
    }
}

pub fn mk_pod(ns: &str, name: &str, ip: &str, app: &str) -> Object {
    Object::decode(
        WatchKind::Pod,
        json!({
            "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}"),
                         "labels": {"app": app}},
            "spec": {"nodeName": "node-a", "containers": [
                {"name": "main", "image": "x", "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip,
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }),
    )
    .expect("fixture decodes")
}

/// `n` pods `p0..p{n-1}` in namespace `default` with loopback IPs.
pub fn mk_pods(n: usize) -> Vec<Object> {
    (0..n)
        .map(|i| {
            mk_pod(
                "default",
                &format!("p{i}"),
                &format!("127.16.{}.{}", i / 250, 1 + i % 250),
                "web",
            )
        })
        .collect()
}

pub const PODS_JOB: &str = "jobs:\n- name: pods\n  role: pod\n";

/// A synced `pods` job holding `n` pods.
pub fn mk_pod_job(n: usize) -> Arc<Shared> {
    let shared = mk_shared(PODS_JOB);
    shared.reset(WatchKind::Pod, mk_pods(n), vec![]);
    sync_all(&shared);
    shared
}

pub async fn get(shared: &Arc<Shared>, uri: &str, headers: &[(&str, &str)]) -> Response<Body> {
    let mut req = Request::get(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    app(shared.clone())
        .oneshot(req.body(Body::empty()).expect("valid request"))
        .await
        .expect("the router never fails")
}

pub async fn body_bytes(res: Response<Body>) -> Vec<u8> {
    res.into_body()
        .collect()
        .await
        .expect("body collects")
        .to_bytes()
        .to_vec()
}

pub async fn body_json(res: Response<Body>) -> serde_json::Value {
    serde_json::from_slice(&body_bytes(res).await).expect("json body")
}

pub fn header<'a>(res: &'a Response<Body>, name: &str) -> Option<&'a str> {
    res.headers().get(name).and_then(|v| v.to_str().ok())
}

pub fn assert_status(res: &Response<Body>, status: StatusCode) {
    assert_eq!(res.status(), status, "headers: {:?}", res.headers());
}
