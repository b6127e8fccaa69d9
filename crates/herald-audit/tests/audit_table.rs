//! The table at scale: hundreds of findings of one rule read as one block with the count, the
//! total cost, the top entries and the command that lists the rest; `--rule`, `--namespace` and
//! `--all` print them in full; JSON keeps every finding.

use std::path::{Path, PathBuf};

use herald_audit::{AuditArgs, OutputFormat, TABLE_WIDTH};
use serde_json::Value;

/// 200 metrics-only ClusterIP Services (100 in `alpha`, 100 in `beta`), each selected by its
/// namespace's ServiceMonitor: 200 HA004 findings. `m-000` has 3 endpoints more than the others,
/// so it costs the most kube-proxy rules.
fn mk_dump(dir: &Path) -> PathBuf {
    let mut items = Vec::new();
    for (ns, first) in [("alpha", 0), ("beta", 100)] {
        items.push(serde_json::json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "exporters", "namespace": ns},
            "spec": {"selector": {"matchLabels": {"role": "metrics"}}, "endpoints": [{"port": "metrics"}]}}));
        for i in first..first + 100 {
            let name = format!("m-{i:03}");
            items.push(serde_json::json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": ns, "labels": {"role": "metrics"}},
                "spec": {"type": "ClusterIP", "clusterIP": format!("10.96.{}.{}", i / 250, i % 250 + 1),
                         "selector": {"app": name}, "ports": [{"name": "metrics", "port": 9100}]}}));
            let endpoints = if i == 0 { 5 } else { 2 };
            items.push(
                serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{name}-1"), "namespace": ns,
                             "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "endpoints": (0..endpoints)
                    .map(|e| serde_json::json!({"addresses": [format!("10.1.{i}.{e}")]}))
                    .collect::<Vec<_>>()}),
            );
        }
    }
    let path = dir.join("dump.json");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(&path, serde_json::to_vec(&list).expect("encodes")).expect("write");
    path
}

async fn run(args: &AuditArgs) -> String {
    let mut out = Vec::new();
    herald_audit::run(args, &mut out)
        .await
        .expect("the audit runs");
    String::from_utf8(out).expect("utf-8")
}

fn titles(out: &str) -> usize {
    out.lines()
        .filter(|l| l.starts_with("  HA004 Service ") && l.contains("exists only for metrics"))
        .count()
}

#[tokio::test]
async fn two_hundred_findings_of_one_rule_print_one_grouped_block_and_rule_expands_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = AuditArgs::from_files(vec![mk_dump(dir.path())]);
    let out = run(&args).await;
    assert!(
        out.lines().all(|l| l.chars().count() <= TABLE_WIDTH),
        "{out}"
    );
    assert_eq!(
        out.matches("HA004 metrics-service-with-cluster-ip: 200 findings (200 warning)")
            .count(),
        1,
        "{out}"
    );
    assert!(
        out.contains("  200 warning: HA004 metrics-service-with-cluster-ip ×200"),
        "{out}"
    );
    // The total cost: 199 Services × 1 port × (2 + 3×2) rules + 1 × (2 + 3×5).
    assert!(
        out.contains("cost: ~1,609 kube-proxy rules on every node for 200 metrics-only Services"),
        "{out}"
    );
    // The top entries by cost, the costliest first, then the command listing the rest.
    let entries: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("    - Service "))
        .collect();
    assert_eq!(entries.len(), 5, "{out}");
    assert!(
        entries[0].starts_with("    - Service alpha/m-000 (warning): ~17 kube-proxy rules"),
        "{out}"
    );
    assert!(
        out.contains("the other 195 and every detail: herald audit --from"),
        "{out}"
    );
    assert!(out.contains("--rule HA004"), "{out}");
    assert_eq!(titles(&out), 0, "grouped, not in full");
    assert!(
        out.lines().count() < 40,
        "{} lines:\n{out}",
        out.lines().count()
    );

    let mut expanded = args.clone();
    expanded.rules = vec!["HA004".into()];
    let out = run(&expanded).await;
    assert_eq!(titles(&out), 200, "{out}");

    let mut one_namespace = args.clone();
    one_namespace.namespaces = vec!["beta".into()];
    let out = run(&one_namespace).await;
    assert_eq!(titles(&out), 100, "{out}");
    assert!(out.contains(": 0 critical, 100 warning, 0 info"), "{out}");

    let mut all = args.clone();
    all.all = true;
    assert_eq!(titles(&run(&all).await), 200);
}

#[tokio::test]
async fn json_keeps_every_finding_and_fixes_go_one_file_per_namespace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args = AuditArgs::from_files(vec![mk_dump(dir.path())]);
    args.output = OutputFormat::Json;
    args.fix = Some(dir.path().join("fix"));
    let report: Value = serde_json::from_str(&run(&args).await).expect("JSON");
    let findings = report["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 200);
    assert_eq!(report["summary"]["warning"], 200);
    let mut files: Vec<String> = std::fs::read_dir(dir.path().join("fix"))
        .expect("fix dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "01-ha004-alpha.yaml",
            "02-ha004-beta.yaml",
            "README.md",
            "index.json"
        ]
    );
    assert!(findings.iter().all(|f| {
        f["fix"]["file"].as_str().is_some_and(|file| {
            file.ends_with(&format!(
                "{}.yaml",
                f["objects"][0]["namespace"].as_str().expect("ns")
            ))
        })
    }));
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("fix/index.json")).expect("index"),
    )
    .expect("JSON");
    assert_eq!(index["files"][0]["findings"], 100);
    assert_eq!(
        index["files"][0]["actions"],
        serde_json::json!({"create": 100, "delete": 100})
    );
}
