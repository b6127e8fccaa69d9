//! The audit's edges: bad dumps name the file and object at fault, unknown kinds are counted,
//! the command line, exit codes, and the two output formats.

#[path = "support/common.rs"]
mod common;

use clap::Parser;
use common::fixture;
use herald_audit::{AuditArgs, AuditError, OutputFormat, Severity, TABLE_WIDTH};
use serde_json::Value;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    audit: AuditArgs,
}

async fn run(args: &AuditArgs) -> (Result<i32, AuditError>, String) {
    let mut out = Vec::new();
    let r = herald_audit::run(args, &mut out).await;
    (r, String::from_utf8(out).expect("utf-8 output"))
}

#[test]
fn a_malformed_object_is_named_with_its_file() {
    let path = fixture("bad/malformed.json");
    let err =
        herald_audit::load::load_paths(std::slice::from_ref(&path)).expect_err("ports is no list");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{}: Service shop/broken: ", path.display())),
        "{msg}"
    );
    assert!(matches!(err, AuditError::Malformed { .. }));
}

#[test]
fn an_object_without_a_name_is_named_by_its_position() {
    let path = fixture("bad/nameless.yaml");
    let err = herald_audit::load::load_paths(std::slice::from_ref(&path)).expect_err("no name");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: document 1 item 0: metadata.name is missing",
            path.display()
        )
    );
}

#[test]
fn a_file_that_is_not_yaml_is_a_parse_error_naming_it() {
    let path = fixture("bad/not-yaml.yaml");
    let err = herald_audit::load::load_paths(std::slice::from_ref(&path))
        .expect_err("unclosed flow mapping");
    assert!(
        matches!(&err, AuditError::Parse { path: p, document: 1, format: "YAML", .. } if *p == path),
        "{err}"
    );
}

#[test]
fn unknown_kinds_are_counted_and_ignored() {
    let cluster =
        herald_audit::load::load_paths(&[fixture("bad/unknown-kinds.yaml")]).expect("loads");
    let unknown: Vec<_> = cluster
        .unknown_kinds()
        .iter()
        .map(|(k, n)| (k.as_str(), *n))
        .collect();
    assert_eq!(unknown, [("batch/v1/Job", 1), ("example.com/v1/Widget", 2)]);
    assert_eq!(
        cluster.counts().into_iter().collect::<Vec<_>>(),
        [(herald_audit::Kind::Namespace, 1)]
    );
}

#[test]
fn a_directory_is_read_file_by_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(fixture("services.yaml"), dir.path().join("a.yaml")).expect("copy");
    std::fs::copy(fixture("istio-pods.yaml"), dir.path().join("b.yml")).expect("copy");
    std::fs::write(dir.path().join("notes.txt"), "not a dump").expect("write");
    let from_dir = herald_audit::load::load_paths(&[dir.path().to_path_buf()]).expect("loads");
    let from_files =
        herald_audit::load::load_paths(&[fixture("services.yaml"), fixture("istio-pods.yaml")])
            .expect("loads");
    assert_eq!(from_dir.counts(), from_files.counts());
}

#[test]
fn the_command_line_takes_files_or_a_kubeconfig_but_not_both_nor_neither() {
    let cli = Cli::try_parse_from([
        "audit",
        "--from",
        "a.json",
        "b.yaml",
        "--output",
        "json",
        "--fail-on",
        "warning",
        "--fix",
        "out",
    ])
    .expect("valid");
    assert_eq!(cli.audit.from.len(), 2);
    assert_eq!(cli.audit.output, OutputFormat::Json);
    assert_eq!(cli.audit.fail_on, Severity::Warning);
    let defaults = Cli::try_parse_from(["audit", "--kubeconfig", "kc"]).expect("valid");
    assert_eq!(defaults.audit.fail_on, Severity::Critical);
    assert_eq!(defaults.audit.output, OutputFormat::Table);
    assert!(Cli::try_parse_from(["audit"]).is_err());
    assert!(Cli::try_parse_from(["audit", "--kubeconfig", "kc", "--from", "a.json"]).is_err());
}

#[tokio::test]
async fn the_exit_code_follows_fail_on() {
    let mut args = AuditArgs::from_files(vec![fixture("services.yaml")]);
    assert_eq!(
        run(&args).await.0.expect("runs"),
        0,
        "warnings only: below critical"
    );
    args.fail_on = Severity::Warning;
    assert_eq!(run(&args).await.0.expect("runs"), 1);
    let args = AuditArgs::from_files(vec![fixture("istio-pods.yaml")]);
    assert_eq!(run(&args).await.0.expect("runs"), 1, "HA009 is critical");
}

#[tokio::test]
async fn errors_are_returned_for_the_binary_to_map_to_exit_code_2() {
    let (r, out) = run(&AuditArgs::from_files(vec![fixture("bad/malformed.json")])).await;
    assert!(matches!(r, Err(AuditError::Malformed { .. })));
    assert!(out.is_empty(), "no partial report");
    let (r, _) = run(&AuditArgs::from_files(vec![fixture("no-such-file.json")])).await;
    assert!(matches!(r, Err(AuditError::Read { .. })));
    let (r, _) = run(&AuditArgs::from_files(Vec::new())).await;
    assert!(matches!(r, Err(AuditError::NoInput)));
    let (r, _) = run(&AuditArgs::from_kubeconfig(fixture("no-such-kubeconfig"))).await;
    assert!(matches!(r, Err(AuditError::Kubeconfig { .. })));
}

#[tokio::test]
async fn the_json_report_follows_the_documented_schema() {
    let mut args = AuditArgs::from_files(vec![fixture("truncated-endpoints.json")]);
    args.output = OutputFormat::Json;
    let (r, out) = run(&args).await;
    assert_eq!(r.expect("runs"), 1);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["schema"], "herald.audit/v1");
    assert_eq!(
        v["summary"],
        serde_json::json!({"critical": 3, "warning": 1, "info": 1})
    );
    assert_eq!(v["inventory"]["objects"]["Node"], 1001);
    assert!(
        v["inventory"]["missingKinds"]
            .as_array()
            .expect("list")
            .contains(&"Pod".into())
    );
    assert_eq!(v["notChecked"][0]["code"], "HA006");
    assert_eq!(
        v["notChecked"][0]["missingKinds"],
        serde_json::json!(["Pod", "Deployment"])
    );
    let f = &v["findings"][0];
    for field in [
        "code", "rule", "severity", "title", "objects", "evidence", "cost", "fix",
    ] {
        assert!(f.get(field).is_some(), "findings[0].{field}");
    }
    assert_eq!(f["code"], "HA001");
    assert_eq!(f["severity"], "critical");
    assert_eq!(
        f["objects"][0],
        serde_json::json!({"kind": "Endpoints", "namespace": "shop", "name": "web"})
    );
    assert_eq!(f["cost"]["figures"]["missing_addresses"], 234.0);
    let prom = v["findings"]
        .as_array()
        .expect("list")
        .iter()
        .find(|f| f["code"] == "HA002")
        .expect("HA002");
    assert_eq!(prom["fix"]["actions"][0]["verb"], "create");
    assert_eq!(
        prom["fix"]["actions"][2],
        serde_json::json!({"verb": "replace",
        "object": {"kind": "Prometheus", "namespace": "monitoring", "name": "k8s"}})
    );
}

#[tokio::test]
async fn the_table_gives_the_severity_summary_first_then_one_block_per_rule_and_fits_the_terminal()
{
    let args = AuditArgs::from_files(vec![fixture("services.yaml"), fixture("istio-pods.yaml")]);
    let (r, out) = run(&args).await;
    r.expect("runs");
    for line in out.lines() {
        assert!(
            line.chars().count() <= TABLE_WIDTH,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    let pos = |s: &str| out.find(s).unwrap_or_else(|| panic!("no {s} in\n{out}"));
    // The api pod of services.yaml has a sidecar: with istio-pods.yaml's mesh-wide STRICT policy,
    // its ServiceMonitor scrape is a third HA009.
    assert!(pos("  3 critical: HA009 strict-mtls-blocks-scrape ×3") < pos("  6 warning: HA004"));
    assert!(pos("  6 warning: HA004") < pos("  4 info: HA005"));
    // Blocks: critical rules first, then by code.
    assert!(pos("  4 info: HA005") < pos("\nHA009 strict-mtls-blocks-scrape: 3 findings"));
    assert!(pos("\nHA009 strict") < pos("\nHA004 metrics-service-with-cluster-ip: 1 finding"));
    assert!(pos("\nHA004 metrics") < pos("\nHA006 istio-exports-metrics-service: 3 findings"));
    assert!(
        pos("\nHA006 istio") < pos("\nHA005 service-shared-by-traffic-and-metrics: 3 findings")
    );
    assert!(pos("\nHA005 service") < pos("\nNOT CHECKED"));
    // A rule's only finding is shown in full; a rule with several is one grouped block.
    assert!(out.contains("  HA004 Service apps/api-metrics exists only for metrics"));
    assert!(out.contains("--rule HA009"));
    assert!(
        !out.contains("  HA009 strict mTLS refuses"),
        "grouped, not in full:\n{out}"
    );
}

#[tokio::test]
async fn an_unknown_rule_is_an_error_naming_the_rules() {
    let mut args = AuditArgs::from_files(vec![fixture("services.yaml")]);
    args.rules = vec!["HA099".into()];
    let (r, out) = run(&args).await;
    let err = r.expect_err("no such rule");
    assert!(out.is_empty());
    let msg = err.to_string();
    assert!(
        msg.starts_with("--rule HA099: no such rule; the rules are HA001 endpoints-truncated, "),
        "{msg}"
    );
    // Codes are case-insensitive and slugs work too.
    args.rules = vec!["ha004".into(), "istio-exports-metrics-service".into()];
    let (r, out) = run(&args).await;
    r.expect("known rules");
    assert!(
        out.contains("HA004 metrics-service-with-cluster-ip: 1 finding"),
        "{out}"
    );
    assert!(!out.contains("HA005"), "{out}");
}
