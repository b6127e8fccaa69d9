//! Helpers of the kube-sim-backed audit tests: a quiet simulation on port 0, its kubeconfig on disk,
//! the audit run through `herald_audit::run` (dump or live, JSON output), and real kubectl.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use herald_audit::{AuditArgs, HEADER_PREFIX, OutputFormat};
use kube_sim::generate::ClusterSpec;
use kube_sim::{Sim, SimConfig};
use serde::Deserialize;
use serde_json::Value;

pub const SEED: u64 = 7;

/// A generated cluster, without churn (the dump and the live lists must see the same objects).
pub async fn start(spec: ClusterSpec) -> Sim {
    Sim::start(SimConfig {
        spec,
        seed: SEED,
        churn_per_sec: 0.0,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts on loopback")
}

/// Writes the simulation's kubeconfig into `dir`.
pub fn kubeconfig(sim: &Sim, dir: &Path) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(&path, sim.kubeconfig_yaml()).expect("write kubeconfig");
    path
}

/// Runs the audit as `herald audit ... --output json [--fix DIR]` and returns the JSON report.
pub async fn run_json(mut args: AuditArgs, fix: Option<&Path>) -> Value {
    args.output = OutputFormat::Json;
    args.fix = fix.map(Path::to_path_buf);
    let mut out = Vec::new();
    herald_audit::run(&args, &mut out)
        .await
        .expect("the audit runs");
    serde_json::from_slice(&out).expect("a JSON report")
}

/// Audits the `/sim/dump` document, written to `dir/dump.json`, with `--from`.
pub async fn audit_dump(sim: &Sim, dir: &Path, fix: Option<&Path>) -> Value {
    let path = dir.join("dump.json");
    let dump = serde_json::to_vec(&sim.handle().dump()).expect("the dump encodes");
    std::fs::write(&path, dump).expect("write dump");
    run_json(AuditArgs::from_files(vec![path]), fix).await
}

/// Audits the simulation live, through its kubeconfig.
pub async fn audit_live(kubeconfig: &Path, fix: Option<&Path>) -> Value {
    run_json(AuditArgs::from_kubeconfig(kubeconfig.to_path_buf()), fix).await
}

/// `Kind ns/name` of an object reference in a report.
pub fn obj(o: &Value) -> String {
    let s = |k: &str| o[k].as_str().unwrap_or_default().to_string();
    match o["namespace"].as_str() {
        Some(ns) => format!("{} {ns}/{}", s("kind"), s("name")),
        None => format!("{} {}", s("kind"), s("name")),
    }
}

pub fn findings(report: &Value) -> &Vec<Value> {
    report["findings"].as_array().expect("findings")
}

/// `code severity: objects...` per finding: what a dump audit and a live audit must agree on.
pub fn summary(report: &Value) -> BTreeSet<String> {
    findings(report)
        .iter()
        .map(|f| {
            let objects: Vec<String> = f["objects"]
                .as_array()
                .expect("objects")
                .iter()
                .map(obj)
                .collect();
            format!(
                "{} {}: {}",
                f["code"].as_str().expect("code"),
                f["severity"].as_str().expect("severity"),
                objects.join(", ")
            )
        })
        .collect()
}

/// The findings with `code`, keyed by their first object.
pub fn with_code<'r>(report: &'r Value, code: &str) -> Vec<(String, &'r Value)> {
    findings(report)
        .iter()
        .filter(|f| f["code"] == code)
        .map(|f| {
            let first = f["objects"].get(0).map_or_else(|| "cluster".into(), obj);
            (first, f)
        })
        .collect()
}

/// A fix file: its header (`code`, `actions`) and its manifests in order.
pub fn read_fix(path: &Path) -> (Value, Vec<Value>) {
    let text = std::fs::read_to_string(path).expect("fix file readable");
    let header = text
        .lines()
        .find_map(|l| l.strip_prefix(HEADER_PREFIX))
        .unwrap_or_else(|| panic!("{}: no {HEADER_PREFIX:?} line", path.display()));
    let header: Value = serde_json::from_str(header).expect("the header is JSON");
    let manifests = serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect();
    (header, manifests)
}

/// Real kubectl against one simulation: the runner kube-sim's own tests use.
#[allow(unused_imports)] // each test binary uses a different subset
pub use kube_sim::peers::Kubectl;

/// The fully qualified resource kubectl takes for a kind a fix acts on.
pub fn resource(kind: &str) -> &'static str {
    match kind {
        "Service" => "services",
        "ConfigMap" => "configmaps",
        "Endpoints" => "endpoints",
        "Pod" => "pods",
        "ClusterRole" => "clusterroles.rbac.authorization.k8s.io",
        "ClusterRoleBinding" => "clusterrolebindings.rbac.authorization.k8s.io",
        "ServiceMonitor" => "servicemonitors.monitoring.coreos.com",
        "PodMonitor" => "podmonitors.monitoring.coreos.com",
        "Prometheus" => "prometheuses.monitoring.coreos.com",
        "PeerAuthentication" => "peerauthentications.security.istio.io",
        other => panic!("no fix acts on a {other}"),
    }
}
