//! Live mode against a minimal stateful apiserver on 127.0.0.1 that serves a fixture's objects with
//! limit/continue paging and answers 404 for kinds it lacks: the findings equal those of the dump.

#[path = "support/common.rs"]
mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use common::{fixture, found};
use herald_audit::{AuditArgs, Kind, OutputFormat};
use serde::Deserialize;
use serde_json::{Value, json};

/// Objects by list path (`/api/v1/services`, `/apis/monitoring.coreos.com/v1/servicemonitors`).
type Lists = Arc<BTreeMap<String, Vec<Value>>>;

/// The server's page size, whatever limit the client asks for, so that paging is exercised.
const PAGE: usize = 2;

fn list_path(kind: Kind, version: &str) -> String {
    if kind.group().is_empty() {
        format!("/api/{version}/{}", kind.plural())
    } else {
        format!("/apis/{}/{version}/{}", kind.group(), kind.plural())
    }
}

fn mk_lists(path: &std::path::Path) -> Lists {
    let text = std::fs::read_to_string(path).expect("fixture");
    let mut lists: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    // Core kinds always exist on an apiserver; custom ones only when their CRD is installed.
    for kind in Kind::ALL {
        if kind.group().is_empty()
            || matches!(kind, Kind::EndpointSlice | Kind::Deployment | Kind::Ingress)
        {
            lists.insert(list_path(kind, "v1"), Vec::new());
        }
    }
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut v = Value::deserialize(doc).expect("YAML");
        let Some(kind) = Kind::identify(
            v["apiVersion"].as_str().unwrap_or_default(),
            v["kind"].as_str().unwrap_or_default(),
        ) else {
            continue;
        };
        let version = v["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        // The apiserver leaves kind and apiVersion out of list items of built-in kinds.
        if kind.group().is_empty() {
            let map = v.as_object_mut().expect("an object");
            map.remove("kind");
            map.remove("apiVersion");
        }
        lists.entry(list_path(kind, &version)).or_default().push(v);
    }
    Arc::new(lists)
}

async fn serve_list(
    State(lists): State<Lists>,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(items) = lists.get(uri.path()) else {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
            "code": 404, "message": "the server could not find the requested resource"});
        return (StatusCode::NOT_FOUND, Json(status)).into_response();
    };
    assert!(q.contains_key("limit"), "the audit pages its lists: {uri}");
    let start: usize = q
        .get("continue")
        .map_or(0, |c| c.parse().expect("our own token"));
    let end = (start + PAGE).min(items.len());
    let next = if end < items.len() {
        end.to_string()
    } else {
        String::new()
    };
    let body = json!({"apiVersion": "v1", "kind": "List",
        "metadata": {"resourceVersion": "7", "continue": next}, "items": items[start..end]});
    Json(body).into_response()
}

async fn start(lists: Lists) -> (String, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new().fallback(serve_list).with_state(lists);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serves");
    });
    (format!("http://{addr}"), task)
}

fn mk_kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let kc = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster: {{server: \"{server}\"}}\n\
         users:\n- name: audit\n  user: {{token: t}}\ncontexts:\n- name: sim\n  context: {{cluster: sim, user: audit}}\n\
         current-context: sim\n"
    );
    std::fs::write(&path, kc).expect("write kubeconfig");
    path
}

#[tokio::test]
async fn a_live_audit_finds_what_the_dump_audit_finds() {
    let input = fixture("services.yaml");
    let (server, task) = start(mk_lists(&input)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args = AuditArgs::from_kubeconfig(mk_kubeconfig(dir.path(), &server));
    args.output = OutputFormat::Json;
    let mut out = Vec::new();
    let code = herald_audit::run(&args, &mut out)
        .await
        .expect("live audit runs");
    task.abort();
    assert_eq!(code, 0);
    let live: Value = serde_json::from_slice(&out).expect("JSON");
    let live_found: std::collections::BTreeSet<(String, String)> = live["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            let obj = match f["objects"].get(0) {
                Some(o) => format!(
                    "{} {}/{}",
                    o["kind"].as_str().expect("kind"),
                    o["namespace"].as_str().expect("ns"),
                    o["name"].as_str().expect("name")
                ),
                None => "cluster".to_string(),
            };
            (f["code"].as_str().expect("code").to_string(), obj)
        })
        .collect();
    // The same findings, plus the watch fan-out: live, an empty Node list is an answer (no node),
    // where the dump simply lacked Nodes and HA010 was not checked.
    let mut expected = found(&common::audit_files(&["services.yaml"]));
    expected.insert(("HA010".into(), "cluster".into()));
    assert_eq!(live_found, expected);
    // Paged: the 9 Services, served 2 per page, all arrived.
    assert_eq!(live["inventory"]["objects"]["Service"], 9);
    // Served but empty is checked; not served (no CRD) is not.
    assert_eq!(live["inventory"]["objects"]["Endpoints"], 0);
    let missing = live["inventory"]["missingKinds"].as_array().expect("list");
    for k in [
        "Prometheus",
        "PrometheusAgent",
        "PodMonitor",
        "PeerAuthentication",
    ] {
        assert!(
            missing.contains(&Value::from(k)),
            "{k} not served: not checked"
        );
    }
    assert!(!missing.contains(&Value::from("Endpoints")));
}

#[tokio::test]
async fn an_unreachable_cluster_is_an_error_naming_the_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Port 1 on loopback: nothing listens there.
    let args = AuditArgs::from_kubeconfig(mk_kubeconfig(dir.path(), "http://127.0.0.1:1"));
    let err = herald_audit::run(&args, &mut Vec::new())
        .await
        .expect_err("connection refused");
    assert!(
        err.to_string()
            .starts_with("cannot list Namespace from the cluster"),
        "{err}"
    );
}
