//! `--fix DIR`: the files are well-formed (header, steps, manifests in action order), and applying
//! them by their actions to the dump makes their findings disappear on the next audit.

#[path = "support/common.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::fixture;
use herald_audit::{AuditArgs, HEADER_PREFIX, OutputFormat, Report};
use serde::Deserialize;
use serde_json::Value;

type Key = (String, String, String);

fn key(v: &Value) -> Key {
    let s = |x: &Value| x.as_str().unwrap_or_default().to_string();
    (
        s(&v["kind"]),
        s(&v["metadata"]["namespace"]),
        s(&v["metadata"]["name"]),
    )
}

fn ref_key(o: &Value) -> Key {
    let s = |x: &Value| x.as_str().unwrap_or_default().to_string();
    (s(&o["kind"]), s(&o["namespace"]), s(&o["name"]))
}

/// Every object of a YAML or JSON dump, Lists flattened.
fn read_objects(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("fixture readable");
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).expect("valid YAML");
        match v["kind"].as_str() {
            Some("List") => out.extend(v["items"].as_array().expect("items").iter().cloned()),
            Some(_) => out.push(v),
            None => {}
        }
    }
    out
}

/// A fix file: its header actions and its manifests.
fn read_fix(path: &Path) -> (Value, Vec<Value>) {
    let text = std::fs::read_to_string(path).expect("fix file readable");
    assert!(text.starts_with("# herald audit fix HA"), "{text}");
    let header = text
        .lines()
        .find_map(|l| l.strip_prefix(HEADER_PREFIX))
        .expect("a machine-readable header line");
    let header: Value = serde_json::from_str(header).expect("the header is JSON");
    let manifests: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect();
    (header, manifests)
}

async fn run_with_fixes(input: &Path, dir: &Path) -> Report {
    let mut args = AuditArgs::from_files(vec![input.to_path_buf()]);
    args.fix = Some(dir.to_path_buf());
    args.output = OutputFormat::Json;
    let mut out = Vec::new();
    herald_audit::run(&args, &mut out)
        .await
        .expect("audit runs");
    let json: Value = serde_json::from_slice(&out).expect("JSON report");
    // Rebuild the report the tests compare through the library, from the same input.
    let cluster = herald_audit::load::load_paths(&[input.to_path_buf()]).expect("loads");
    let mut report = herald_audit::audit(&cluster, &herald_audit::Options::default(), "t".into());
    for (f, j) in report
        .findings
        .iter_mut()
        .zip(json["findings"].as_array().expect("findings"))
    {
        f.fix.file = j["fix"]["file"].as_str().map(str::to_string);
    }
    report
}

/// The fix files in the order the index gives, checked against the report: every finding with
/// manifests names a file of the index, and every file of the index holds such findings.
fn indexed_files(report: &Report, dir: &Path) -> Vec<String> {
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("index.json")).expect("an index.json"),
    )
    .expect("the index is JSON");
    let files: Vec<String> = index["files"]
        .as_array()
        .expect("files")
        .iter()
        .enumerate()
        .map(|(i, e)| {
            assert_eq!(e["order"], i + 1, "{e}");
            e["file"].as_str().expect("file").to_string()
        })
        .collect();
    let named: std::collections::BTreeSet<&str> = report
        .findings
        .iter()
        .filter(|f| !f.fix.manifests.is_empty())
        .map(|f| {
            f.fix
                .file
                .as_deref()
                .expect("a finding with manifests has a file")
        })
        .collect();
    assert_eq!(
        named,
        files.iter().map(String::as_str).collect(),
        "the index lists exactly the files the findings name"
    );
    files
}

/// Applies every fix file of `report` to `objects` by its actions, in the index's order, as
/// kubectl would against a server: create must not find the object, replace and delete must.
fn apply(objects: &mut BTreeMap<Key, Value>, report: &Report, dir: &Path) {
    for file in indexed_files(report, dir) {
        let (header, manifests) = read_fix(&dir.join(&file));
        let codes: Vec<&str> = report
            .findings
            .iter()
            .filter(|f| f.fix.file.as_deref() == Some(file.as_str()))
            .map(|f| f.code)
            .collect();
        assert!(
            codes.iter().all(|c| header["code"] == *c),
            "{file}: {codes:?}"
        );
        let mut next = manifests.into_iter();
        for action in header["actions"].as_array().expect("actions") {
            let k = ref_key(&action["object"]);
            match action["verb"].as_str().expect("verb") {
                "delete" => {
                    assert!(
                        objects.remove(&k).is_some(),
                        "{file}: delete of missing {k:?}"
                    );
                }
                verb => {
                    let m = next
                        .next()
                        .unwrap_or_else(|| panic!("{file}: no manifest for {k:?}"));
                    assert_eq!(key(&m), k, "{file}: manifests follow the actions");
                    let existed = objects.insert(k.clone(), m).is_some();
                    assert_eq!(existed, verb == "replace", "{file}: {verb} of {k:?}");
                }
            }
        }
        assert!(next.next().is_none(), "{file}: a manifest without action");
    }
}

fn reaudit(objects: &BTreeMap<Key, Value>, dir: &Path) -> Report {
    let path = dir.join("after.json");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List",
        "items": objects.values().cloned().collect::<Vec<_>>()});
    std::fs::write(&path, serde_json::to_vec(&list).expect("encodes")).expect("writes");
    let cluster = herald_audit::load::load_paths(&[path]).expect("the fixed dump loads");
    herald_audit::audit(&cluster, &herald_audit::Options::default(), "after".into())
}

#[tokio::test]
async fn fix_files_are_one_per_rule_and_namespace_in_the_order_of_the_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = run_with_fixes(&fixture("services.yaml"), dir.path()).await;
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .expect("fix dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    files.sort();
    // Warnings before infos, then by code; HA004's and HA006's apps Services in one file each,
    // HA005's three Services in one.
    assert_eq!(
        files,
        [
            "01-ha004-apps.yaml",
            "02-ha006-apps.yaml",
            "03-ha005-apps.yaml",
            "README.md",
            "index.json",
        ]
    );
    assert_eq!(indexed_files(&report, dir.path()), files[..3]);
    for f in &files[..3] {
        let (header, manifests) = read_fix(&dir.path().join(f));
        let with_manifest = header["actions"]
            .as_array()
            .expect("actions")
            .iter()
            .filter(|a| a["verb"] != "delete")
            .count();
        assert_eq!(with_manifest, manifests.len(), "{f}");
        assert_eq!(header["namespace"], "apps", "{f}");
        for m in &manifests {
            assert!(
                m["apiVersion"].is_string() && m["kind"].is_string(),
                "{f}: {m}"
            );
            assert!(m["metadata"]["name"].is_string(), "{f}: {m}");
            assert!(m.get("status").is_none(), "{f}");
            for server_field in [
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "managedFields",
            ] {
                assert!(
                    m["metadata"].get(server_field).is_none(),
                    "{f}: {server_field}"
                );
            }
        }
    }
    let ha005 = std::fs::read_to_string(dir.path().join("03-ha005-apps.yaml")).expect("file");
    assert!(
        ha005.starts_with("# herald audit fix HA005 (service-shared-by-traffic-and-metrics), namespace apps: 3 finding(s)"),
        "{ha005}"
    );
    let ha004 = std::fs::read_to_string(dir.path().join("01-ha004-apps.yaml")).expect("file");
    assert!(
        ha004.contains("#    1. kubectl delete service -n apps api-metrics"),
        "{ha004}"
    );
    let readme = std::fs::read_to_string(dir.path().join("README.md")).expect("README.md");
    for f in &files[..3] {
        assert!(readme.contains(&format!("[{f}]({f})")), "{readme}");
    }
}

#[tokio::test]
async fn an_action_two_findings_of_one_file_share_is_written_once() {
    // Two traffic Services selected by one ServiceMonitor: both HA005 fixes replace it with the
    // same content; the file replaces it once.
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("shared.yaml");
    std::fs::write(
        &input,
        "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: x, labels: {scrape: \"yes\"}}\n\
         spec: {clusterIP: 10.0.0.1, selector: {app: a}, ports: [{name: http-metrics, port: 80}, {name: web, port: 8080}]}\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {name: b, namespace: x, labels: {scrape: \"yes\"}}\n\
         spec: {clusterIP: 10.0.0.2, selector: {app: b}, ports: [{name: http-metrics, port: 80}, {name: web, port: 8080}]}\n\
         ---\napiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: m, namespace: x}\n\
         spec: {selector: {matchLabels: {scrape: \"yes\"}}, endpoints: [{port: http-metrics}]}\n",
    )
    .expect("write");
    let fixes = dir.path().join("fix");
    let report = run_with_fixes(&input, &fixes).await;
    let files = indexed_files(&report, &fixes);
    assert_eq!(files, ["01-ha005-x.yaml"]);
    let (header, manifests) = read_fix(&fixes.join(&files[0]));
    let replaced_monitor = header["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .filter(|a| a["object"]["kind"] == "ServiceMonitor")
        .count();
    assert_eq!(replaced_monitor, 1, "{header}");
    // Two twins created, two Services labelled, one ServiceMonitor replaced.
    assert_eq!(manifests.len(), 5);
}

#[tokio::test]
async fn applying_the_service_fixes_clears_their_findings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = fixture("services.yaml");
    let report = run_with_fixes(&input, dir.path()).await;
    let mut objects: BTreeMap<Key, Value> = read_objects(&input)
        .into_iter()
        .map(|v| (key(&v), v))
        .collect();
    apply(&mut objects, &report, dir.path());
    let after = reaudit(&objects, dir.path());
    let left: Vec<_> = after
        .findings
        .iter()
        .map(|f| (f.code, f.objects[0].to_string()))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn applying_the_prometheus_fixes_leaves_no_endpoints_consumer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = fixture("truncated-endpoints.json");
    let report = run_with_fixes(&input, dir.path()).await;
    let mut objects: BTreeMap<Key, Value> = read_objects(&input)
        .into_iter()
        .map(|v| (key(&v), v))
        .collect();
    apply(&mut objects, &report, dir.path());
    let after = reaudit(&objects, dir.path());
    let codes: Vec<_> = after.findings.iter().map(|f| f.code).collect();
    // The Endpoints stay truncated and the kubelet migration is operator flags, not manifests.
    assert_eq!(codes, ["HA001", "HA003"]);
    assert_eq!(
        after.findings[0].objects.len(),
        1,
        "no Prometheus reads Endpoints any more"
    );
    // The RBAC objects the fix created are kinds the audit does not read: counted, not lost.
    assert_eq!(
        after
            .inventory
            .unknown_kinds
            .get("rbac.authorization.k8s.io/v1/ClusterRole"),
        Some(&2)
    );
}
