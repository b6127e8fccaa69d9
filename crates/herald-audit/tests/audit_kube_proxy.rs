//! HA007 over clusters built in code (thousands of Services are too many to type): the iptables
//! rule estimate, the thresholds, and clean look-alikes in other modes.

#[path = "support/common.rs"]
mod common;

use common::{found, set};
use herald_audit::{Cluster, Options, Severity};
use serde_json::{Value, json};

fn mk_service(name: &str, headless: bool, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "apps", "labels": labels},
        "spec": {"clusterIP": if headless { "None" } else { "10.96.1.1" },
                 "selector": {"app": name}, "ports": [{"name": "metrics", "port": 9100}]}})
}

fn mk_slice(service: &str, endpoints: usize, first: usize) -> Value {
    let eps: Vec<Value> = (0..endpoints)
        .map(
            |i| json!({"addresses": [format!("10.1.{}.{}", (first + i) / 250, (first + i) % 250)]}),
        )
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-1"), "namespace": "apps",
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4", "endpoints": eps})
}

/// `services` ClusterIP Services with 5 endpoints each, one of them metrics-only, a headless one,
/// and kube-proxy in `mode`.
fn mk_cluster(services: usize, mode: &str) -> Cluster {
    let mut c = Cluster::default();
    let mut add = |v: Value| c.add(v).expect("valid object");
    add(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "data": {"config.conf": format!("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: \"{mode}\"\n")}}));
    for i in 0..2 {
        add(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{i}")},
            "status": {"nodeInfo": {"kubeletVersion": "v1.33.1", "kernelVersion": "6.1.0-18-amd64",
                "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "", "kubeProxyVersion": "",
                "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""}}}),
        );
    }
    for i in 0..services - 1 {
        let name = format!("svc-{i:04}");
        add(mk_service(&name, false, json!({})));
        add(mk_slice(&name, 5, i * 5));
    }
    add(mk_service("exporter", false, json!({"app": "exporter"})));
    add(mk_slice("exporter", 5, 60_000));
    add(mk_service("db", true, json!({})));
    add(mk_slice("db", 5, 61_000));
    add(
        json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "exporter", "namespace": "apps"},
        "spec": {"selector": {"matchLabels": {"app": "exporter"}}, "endpoints": [{"port": "metrics"}]}}),
    );
    c
}

fn audit(c: &Cluster) -> herald_audit::Report {
    herald_audit::audit(c, &Options::default(), "test".into())
}

#[test]
fn iptables_past_2000_services_is_a_warning_with_the_rule_estimate() {
    let r = audit(&mk_cluster(2001, ""));
    assert_eq!(
        found(&r),
        set(&[
            ("HA004", "Service apps/exporter"),
            ("HA007", "ConfigMap kube-system/kube-proxy"),
        ])
    );
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "HA007")
        .expect("HA007");
    assert_eq!(f.severity, Severity::Warning);
    // 2001 ClusterIP ports × (2 + 3×5) rules; the headless Service costs nothing.
    assert_eq!(f.cost.figures["iptables_rules_per_node"], 2001.0 * 17.0);
    assert_eq!(f.cost.figures["iptables_chains_per_node"], 2001.0 * 6.0);
    assert_eq!(f.cost.figures["metrics_only_rules_per_node"], 17.0);
    assert_eq!(f.cost.figures["services"], 2001.0);
    // Every node is on 1.33 with a 6.1 kernel: nftables.
    assert_eq!(
        f.fix.manifests[0]["data"]["config.conf"]
            .as_str()
            .map(|s| s.contains("mode: nftables")),
        Some(true)
    );
}

#[test]
fn iptables_thresholds_follow_the_rules_of_thumb() {
    let sev = |n: usize| {
        audit(&mk_cluster(n, "iptables"))
            .findings
            .iter()
            .find(|f| f.code == "HA007")
            .map(|f| f.severity)
    };
    assert_eq!(sev(1000), None, "up to 1000 Services iptables is fine");
    assert_eq!(sev(1001), Some(Severity::Info));
    assert_eq!(sev(2000), Some(Severity::Info));
    assert_eq!(sev(5001), Some(Severity::Critical));
}

#[test]
fn ipvs_and_nftables_modes_are_clean_look_alikes() {
    for mode in ["ipvs", "nftables"] {
        let r = audit(&mk_cluster(2001, mode));
        assert!(r.findings.iter().all(|f| f.code != "HA007"), "{mode}");
    }
}

#[test]
fn old_nodes_are_advised_ipvs() {
    let mut c = mk_cluster(2001, "");
    for n in &mut c.nodes {
        let info = n
            .obj
            .status
            .as_mut()
            .and_then(|s| s.node_info.as_mut())
            .expect("node info");
        info.kernel_version = "4.19.0".into();
    }
    let r = audit(&c);
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "HA007")
        .expect("HA007");
    assert!(f.fix.summary.contains("ipvs"), "{}", f.fix.summary);
    assert!(f.fix.steps.iter().any(|s| s.contains("ip_vs")));
}
