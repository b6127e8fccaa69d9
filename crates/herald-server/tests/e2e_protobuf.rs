//! Kubernetes protobuf on the face, judged by apimachinery's own serializer (`protojudge`,
//! peers/cmd/protojudge, k8s.io/apimachinery v0.37.2): for every built-in kind kube-sim serves, the
//! protobuf list, get and watch of kube-sim, of herald and of a second herald tier behind it decode
//! in Go to the objects the JSON answers decode to, and their bytes equal Go's protobuf encoding of
//! those objects. The cluster holds kube-sim's generated objects and, written through kube-sim's
//! API, objects that exercise every field type (tests/fixtures/protobuf-objects.json: pointers and
//! non-pointers at zero, negative integers, maps, byte maps, times with offsets, quantities in
//! non-canonical forms, IntOrString both ways, inline structs, FieldsV1). Watches are judged while
//! kube-sim churns. herald's metrics show the protobuf it sent.
//!
//! NB: everything listens and dials on 127.0.0.1.

#[path = "peers/harness.rs"]
mod peers;
#[path = "support/kube.rs"]
mod support;

use std::path::Path;
use std::process::Command;

use herald_server::{Herald, KubeApiOptions};
use peers::cluster::{loopback_spec, start_sim};
use serde_json::Value;

/// The built-in kinds kube-sim serves: (plural for protojudge, herald's kind name).
const KINDS: &[(&str, &str)] = &[
    ("pods", "pods"),
    ("services", "services"),
    ("endpoints", "endpoints"),
    ("endpointslices", "endpointslices"),
    ("nodes", "nodes"),
    ("namespaces", "namespaces"),
    ("servicecidrs", "servicecidrs.networking.k8s.io"),
    ("configmaps", "configmaps"),
    ("ingresses", "ingresses.networking.k8s.io"),
    ("clusterroles", "clusterroles.rbac.authorization.k8s.io"),
    (
        "clusterrolebindings",
        "clusterrolebindings.rbac.authorization.k8s.io",
    ),
    ("roles", "roles.rbac.authorization.k8s.io"),
    ("rolebindings", "rolebindings.rbac.authorization.k8s.io"),
];

fn collection(o: &Value) -> String {
    let av = o["apiVersion"].as_str().expect("apiVersion");
    let kind = o["kind"].as_str().expect("kind");
    let plural = match kind {
        "Endpoints" => "endpoints".to_string(),
        "Ingress" => "ingresses".to_string(),
        k => format!("{}s", k.to_lowercase()),
    };
    let prefix = if av == "v1" {
        "/api/v1".to_string()
    } else {
        format!("/apis/{av}")
    };
    match o["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{plural}"),
        None => format!("{prefix}/{plural}"),
    }
}

/// Writes every fixture object through kube-sim's API.
async fn write_fixtures(url: &str) -> usize {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/protobuf-objects.json"),
    )
    .expect("fixtures");
    let objects: Vec<Value> = serde_json::from_str(&text).expect("fixtures are JSON");
    let http = reqwest::Client::new();
    for o in &objects {
        let resp = http
            .post(format!("{url}{}", collection(o)))
            .json(o)
            .send()
            .await
            .expect("kube-sim answers");
        let code = resp.status();
        let body = resp.text().await.unwrap_or_default();
        assert!(
            code.is_success(),
            "kube-sim refused {} {}: {code} {body}",
            o["kind"],
            o["metadata"]["name"]
        );
    }
    objects.len()
}

/// herald over `upstream` serving every kind of `KINDS` on its face.
async fn start_herald(upstream: &str) -> Herald {
    let refs: Vec<herald_core::KindRef> = KINDS
        .iter()
        .map(|(_, k)| herald_core::KindRef::Builtin(k.to_string()))
        .collect();
    let (resources, _) = herald_server::kube_kinds(&refs).expect("built-in kinds");
    let api = KubeApiOptions {
        resources,
        ..KubeApiOptions::default()
    };
    support::start_herald(upstream, "jobs: []", api, "herald-e2e-protobuf").await
}

/// Runs protojudge against `server` on a blocking thread, reading `gets` objects of each kind one by
/// one; returns its report.
async fn judge(bin: &Path, server: &str, kinds: &[&str], watch_seconds: u32, gets: u32) -> Value {
    let mut cmd = Command::new(bin);
    cmd.arg("--server")
        .arg(server)
        .arg("--gets")
        .arg(gets.to_string())
        .arg("--watch-seconds")
        .arg(watch_seconds.to_string());
    cmd.args(kinds);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("judge thread")
        .expect("protojudge runs");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "protojudge printed no report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success(),
        "protojudge against {server} failed:\n{}",
        serde_json::to_string_pretty(&report["failures"]).expect("JSON")
    );
    report
}

fn assert_covered(who: &str, report: &Value) {
    for (plural, _) in KINDS {
        let k = &report["kinds"][plural];
        assert!(
            k["list_items"].as_u64().unwrap_or(0) > 0,
            "{who}: no {plural} judged: {k}"
        );
        assert_eq!(k["list_bytes_equal"], true, "{who} {plural}: {k}");
        assert_eq!(k["list_decode_equal"], true, "{who} {plural}: {k}");
        assert_eq!(k["initial_events_end"], true, "{who} {plural}: {k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn protobuf_equals_apimachinery_through_two_tiers() {
    let Some(bin) = kube_sim::peers::find("protojudge", kube_sim::peers::GO_PEERS_INSTALL) else {
        return;
    };
    let sim = start_sim(loopback_spec(), 21).await;
    sim.handle().set_churn(0.0);
    let written = write_fixtures(&sim.url()).await;
    assert!(written >= 14);

    let tier1 = start_herald(&sim.url()).await;
    let face1 = tier1.kube_url().expect("face on");
    let tier2 = start_herald(&face1).await;
    let face2 = tier2.kube_url().expect("face on");

    // Quiet: lists of kube-sim and of both tiers, objects by GET, and watches from the start.
    let all: Vec<&str> = KINDS.iter().map(|(p, _)| *p).collect();
    let direct = judge(&bin, &sim.url(), &all, 1, 40).await;
    assert_covered("kube-sim", &direct);
    let tier = judge(&bin, &face1, &all, 1, 40).await;
    assert_covered("herald", &tier);
    let tier = judge(&bin, &face2, &all, 1, 40).await;
    assert_covered("herald tier 2", &tier);

    // Under churn: every frame of herald's watches (ADDED, MODIFIED, DELETED, bookmarks) is still
    // Go's encoding of what it carries. No GETs here: an object listed a moment before may be
    // deleted by the churn, and a 404 for it would be right (the quiet runs above judge the GETs).
    sim.handle().set_churn(40.0);
    let churning = ["pods", "endpointslices", "endpoints", "services"];
    let churned = judge(&bin, &face2, &churning, 4, 0).await;
    sim.handle().set_churn(0.0);
    let events: u64 = churning
        .iter()
        .map(|p| churned["kinds"][p]["watch_events"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        events > 0,
        "the churned watches carried no events: {churned}"
    );

    let metrics = support::metrics_text(&tier1);
    let series = |name: &str| peers::cluster::series_value(&metrics, name);
    assert!(
        series(
            "herald_kube_content_events_total{content_type=\"application/vnd.kubernetes.protobuf;stream=watch\"}"
        ) > 0.0,
        "herald counted no protobuf watch events:\n{metrics}"
    );
    assert!(
        series(
            "herald_kube_content_bytes_total{content_type=\"application/vnd.kubernetes.protobuf\"}"
        ) > 0.0
    );
    assert!(series("herald_kube_objects_encoded_total{format=\"protobuf\"}") > 0.0);
    drop(tier2);
    drop(tier1);
}
