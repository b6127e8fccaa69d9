//! The deploy trees' shared checks: rendering a kustomize overlay with real kubectl, splitting YAML
//! streams, validating with `kubernetes-validate --strict`, and the production rules every rendered
//! configuration must meet (deploy_manifests.rs for kustomize, deploy_helm.rs for the Helm chart).

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize as _;
use serde_json::Value;

pub const VALIDATE_INSTALL: &str = "pip install kubernetes-validate";

/// Kinds with no schema in kubernetes-validate (prometheus-operator's CRDs).
pub const NO_SCHEMA: &[&str] = &["ServiceMonitor", "PrometheusRule"];

/// Runs `kubernetes-validate --strict` on `yaml` (written to `dir/name`) and asserts that every
/// object of `docs` but those of `NO_SCHEMA` passes the schemas.
pub fn validate(validate: &Path, dir: &Path, name: &str, yaml: &str, docs: &[Value]) {
    let file = dir.join(name);
    std::fs::write(&file, yaml).expect("write");
    let out = Command::new(validate)
        .arg("--strict")
        .arg(&file)
        .output()
        .expect("kubernetes-validate runs");
    let report =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name}: kubernetes-validate --strict failed:\n{report}"
    );
    let passed = report
        .lines()
        .filter(|l| l.contains(" passed for resource "))
        .count();
    let schemaless = docs
        .iter()
        .filter(|d| NO_SCHEMA.contains(&d["kind"].as_str().unwrap_or("")))
        .count();
    assert_eq!(
        passed,
        docs.len() - schemaless,
        "{name}: every object but the prometheus-operator ones passes the schemas:\n{report}"
    );
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `kubectl kustomize <overlay>` (relative to the workspace root).
pub fn render(kubectl: &Path, overlay: &str) -> String {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(root().join(overlay))
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize {overlay} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 YAML")
}

/// The objects of a multi-document YAML stream.
pub fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("rendered YAML decodes"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The first object of `kind`.
pub fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("a {kind} is rendered"))
}

/// The (API group, resource) pairs herald lists and watches for `cfg`, as `serve` resolves them: the
/// jobs' kinds (monitor base jobs included), the monitors and the Prometheus object (and namespaces
/// for its namespace selectors), PeerAuthentications for Istio-aware jobs, the kube-API face's kinds.
fn reads(cfg: &herald_core::Config) -> std::collections::BTreeSet<(String, String)> {
    let mut out = std::collections::BTreeSet::new();
    let specs = herald_server::job_specs(cfg, Some("herald")).expect("job specs");
    for kind in specs.iter().flat_map(|s| s.kinds()) {
        let r = kind.resource();
        out.insert((r.group, r.plural));
    }
    if let Some(m) = &cfg.monitors {
        for (group, _, plural) in herald_server::monitors::resources(m) {
            out.insert((group, plural));
        }
        if m.prometheus.is_some() {
            out.insert((String::new(), "namespaces".into()));
        }
    }
    if cfg.jobs.iter().any(|j| j.istio.is_some()) || cfg.monitors.as_ref().is_some_and(|m| m.istio)
    {
        out.insert(("security.istio.io".into(), "peerauthentications".into()));
    }
    if cfg.kube_api.listen.is_some() {
        let (builtin, custom) =
            herald_server::kube_kinds(&cfg.kube_api.kinds).expect("kube_api.kinds resolve");
        for r in builtin {
            out.insert((r.group, r.plural));
        }
        for (group, _, plural) in custom {
            out.insert((group, plural));
        }
    }
    out
}

/// The kinds that need prometheus-operator's CRDs: rendered only where the cluster has them (the
/// chart's `.Capabilities`, kustomize's `components/monitoring`).
pub const MONITORING: &[&str] = &["ServiceMonitor", "PrometheusRule"];

/// The production rules, on the objects one tree renders for one configuration (`what` names it):
/// every kind present (the monitoring ones aside, see [`MONITORING`]), 2 replicas with anti-affinity, probes, non-root, read-only root, no privilege
/// escalation, seccomp RuntimeDefault, RBAC of list and watch only covering what the job file makes
/// herald read (exactly that when `exact`), and the kube-API face on both ports when `kube_api`.
pub fn check_rules(what: &str, docs: &[Value], kube_api: bool, exact: bool) {
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for k in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ] {
        assert!(kinds.contains(&k), "{what}: renders a {k}");
    }
    let d = one(docs, "Deployment");
    assert_eq!(d["spec"]["replicas"], 2, "{what}");
    let pod = &d["spec"]["template"]["spec"];
    assert!(
        pod["affinity"]["podAntiAffinity"].is_object(),
        "{what}: anti-affinity"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &pod["containers"][0];
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert!(c["resources"]["requests"]["memory"].is_string());
    let role = one(docs, "ClusterRole");
    let rules = role["rules"].as_array().expect("rules");
    for r in rules {
        assert_eq!(
            r["verbs"],
            serde_json::json!(["list", "watch"]),
            "{what}: {r}"
        );
    }
    // The job file herald will read.
    let jobs = docs
        .iter()
        .filter(|d| d["kind"] == "ConfigMap")
        .find_map(|d| d["data"]["jobs.yaml"].as_str())
        .expect("a ConfigMap holds jobs.yaml");
    let cfg = herald_core::parse_config(jobs)
        .unwrap_or_else(|e| panic!("{what}: herald refuses its job file: {e}"));
    // What the ClusterRole grants covers what herald reads, exactly where the overlay says so; the
    // monitors only where the configuration reads them.
    let mut granted = std::collections::BTreeSet::new();
    for r in rules {
        for group in r["apiGroups"].as_array().expect("apiGroups") {
            for res in r["resources"].as_array().expect("resources") {
                granted.insert((
                    group.as_str().expect("a group").to_string(),
                    res.as_str().expect("a resource").to_string(),
                ));
            }
        }
    }
    let needed = reads(&cfg);
    let missing: Vec<_> = needed.difference(&granted).collect();
    assert!(missing.is_empty(), "{what}: not granted: {missing:?}");
    if exact {
        let extra: Vec<_> = granted.difference(&needed).collect();
        assert!(
            extra.is_empty(),
            "{what}: granted beyond what herald reads: {extra:?}"
        );
    }
    let monitors = granted.iter().any(|(g, _)| g == "monitoring.coreos.com");
    assert_eq!(
        monitors,
        needed.iter().any(|(g, _)| g == "monitoring.coreos.com"),
        "{what}: monitors only where herald reads them"
    );
    assert!(cfg.server.token_file.is_some() && cfg.server.tls_cert_file.is_some());
    assert_eq!(cfg.kube_api.listen.is_some(), kube_api, "{what}");
    if kube_api {
        herald_server::kube_kinds(&cfg.kube_api.kinds).expect("kube_api.kinds resolve");
        let ports = one(docs, "Service")["spec"]["ports"]
            .as_array()
            .expect("ports")
            .len();
        assert_eq!(ports, 2, "{what}: the Service exposes both faces");
    }
}
