//! The same cluster given as one JSON List, as multi-document YAML and as a directory of mixed
//! files (a typed `PodList` whose items carry no kind, YAML, JSON Lists) gives the same report:
//! the same findings with the same figures (wire sizes included), and the same inventory.

#[path = "support/plant.rs"]
mod plant;
#[path = "support/sim.rs"]
mod sim;

use std::path::{Path, PathBuf};

use herald_audit::AuditArgs;
use kube_sim::generate::ClusterSpec;
use serde_json::{Value, json};
use sim::*;

fn items(dump: &Value) -> Vec<Value> {
    dump["items"].as_array().expect("items").clone()
}

fn write_json_list(path: &Path, items: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items});
    // Pretty, as kubectl writes it: wire sizes are the objects' compact sizes all the same.
    std::fs::write(path, serde_json::to_string_pretty(&list).expect("encodes")).expect("write");
}

fn write_yaml(path: &Path, items: &[Value]) {
    let mut text = String::new();
    for item in items {
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(item).expect("YAML"));
    }
    std::fs::write(path, text).expect("write");
}

/// Pods as the API lists them (`PodList`, items without kind and apiVersion), Services as YAML,
/// everything else as a kubectl List.
fn write_directory(dir: &Path, items: &[Value]) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let kind = |v: &Value| v["kind"].as_str().unwrap_or_default().to_string();
    let pods: Vec<Value> = items
        .iter()
        .filter(|v| kind(v) == "Pod")
        .map(|v| {
            let mut v = v.clone();
            let map = v.as_object_mut().expect("an object");
            map.remove("kind");
            map.remove("apiVersion");
            v
        })
        .collect();
    let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": pods});
    std::fs::write(
        dir.join("pods.json"),
        serde_json::to_vec(&list).expect("encodes"),
    )
    .expect("write");
    let services: Vec<Value> = items
        .iter()
        .filter(|v| kind(v) == "Service")
        .cloned()
        .collect();
    write_yaml(&dir.join("services.yml"), &services);
    let rest: Vec<Value> = items
        .iter()
        .filter(|v| kind(v) != "Pod" && kind(v) != "Service")
        .cloned()
        .collect();
    write_json_list(&dir.join("rest.json"), &rest);
    std::fs::write(dir.join("notes.txt"), "not a dump").expect("write");
}

async fn report(paths: Vec<PathBuf>) -> Value {
    let mut r = run_json(AuditArgs::from_files(paths), None).await;
    r["source"] = Value::Null;
    r
}

#[tokio::test]
async fn a_dump_as_json_as_yaml_and_as_a_directory_gives_the_same_report() {
    let s = start(ClusterSpec::small()).await;
    plant::multi_port_pods(&s);
    plant::metrics_only_service(&s, "checkout");
    plant::bulk_services(&s, 1000);
    let all = items(&s.handle().dump());
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("dump.json");
    write_json_list(&json_path, &all);
    let yaml_path = dir.path().join("dump.yaml");
    write_yaml(&yaml_path, &all);
    let split = dir.path().join("split");
    write_directory(&split, &all);

    let from_json = report(vec![json_path]).await;
    let codes: std::collections::BTreeSet<&str> = findings(&from_json)
        .iter()
        .map(|f| f["code"].as_str().expect("code"))
        .collect();
    for code in [
        "HA002", "HA004", "HA005", "HA006", "HA007", "HA008", "HA010",
    ] {
        assert!(codes.contains(code), "{code} missing: {codes:?}");
    }
    // HA010's byte figures are the objects' wire sizes: equal only if every format counts them alike.
    assert_eq!(from_json, report(vec![yaml_path]).await);
    assert_eq!(from_json, report(vec![split]).await);
}
