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

/// Sets every node's reported kubelet and kube-proxy versions.
fn with_versions(mut c: Cluster, kubelet: &str, kube_proxy: &str) -> Cluster {
    for n in &mut c.nodes {
        let info = n
            .obj
            .status
            .as_mut()
            .and_then(|s| s.node_info.as_mut())
            .expect("node info");
        info.kubelet_version = kubelet.into();
        info.kube_proxy_version = kube_proxy.into();
    }
    c
}

fn ha007(c: &Cluster) -> herald_audit::Finding {
    audit(c)
        .findings
        .into_iter()
        .find(|f| f.code == "HA007")
        .expect("HA007")
}

#[test]
fn before_1_27_every_change_rewrites_every_rule_and_from_1_27_only_the_changed_chains() {
    let old = ha007(&with_versions(mk_cluster(2001, ""), "v1.26.15", ""));
    let new = ha007(&with_versions(mk_cluster(2001, ""), "v1.31.4", ""));
    let all = 2001.0 * 17.0;
    // 1.26: a full iptables-restore of all ~34k rules per change, batched once per minSyncPeriod
    // (default 1s): at 10 changes/s, 3,600 full restores an hour.
    assert_eq!(old.cost.figures["rules_restored_per_change"], all);
    assert_eq!(old.cost.figures["full_restores_per_hour"], 3600.0);
    assert!(
        old.evidence.iter().any(|e| e.starts_with(
            "2 node(s) run kube-proxy 1.26 (the kubelet's version): every Service or endpoint change \
             rewrites all ~34,017 rules"
        )),
        "{:#?}",
        old.evidence
    );
    assert!(
        old.cost
            .summary
            .contains("~34,017 rules restored per change"),
        "{}",
        old.cost.summary
    );
    // 1.31: the top-level chains (one KUBE-SERVICES jump per port) and the changed Service's own
    // 16 rules; no periodic full restore before 1.33.
    assert_eq!(old.cost.figures["top_level_rules_per_node"], 2001.0);
    assert_eq!(new.cost.figures["rules_restored_per_change"], 2001.0 + 16.0);
    assert_eq!(new.cost.figures["full_restores_per_hour"], 0.0);
    let line = new
        .evidence
        .iter()
        .find(|e| e.starts_with("2 node(s) run kube-proxy 1.31"))
        .expect("the 1.31 nodes' line");
    assert!(
        line.contains("restores the top-level chains (~2,001 rules) and the changed Service's own chains (~16 rules"),
        "{line}"
    );
    assert!(
        line.contains("all ~34,017 rules only at kube-proxy start"),
        "{line}"
    );
    assert!(!line.contains("rewrites all"), "{line}");
    assert!(
        new.cost
            .summary
            .contains("~2,017 rules restored per change, no periodic full restore(s)"),
        "{}",
        new.cost.summary
    );
}

#[test]
fn from_1_33_a_full_restore_runs_hourly_and_the_reported_kube_proxy_version_wins() {
    // The kubelet is 1.33, but the node reports its kube-proxy as 1.26 (the field is deprecated,
    // yet where it is set it is the better source).
    let c = with_versions(mk_cluster(2001, ""), "v1.33.1", "v1.26.3");
    let f = ha007(&c);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.starts_with("2 node(s) run kube-proxy 1.26: every")),
        "{:#?}",
        f.evidence
    );
    let f = ha007(&with_versions(mk_cluster(2001, ""), "v1.33.1", ""));
    assert_eq!(f.cost.figures["full_restores_per_hour"], 1.0);
    let line = f
        .evidence
        .iter()
        .find(|e| e.contains("kube-proxy 1.33"))
        .expect("the 1.33 nodes' line");
    assert!(line.contains("at least once an hour"), "{line}");
    // 10,005 endpoints: past large-cluster mode, which newer patch releases spare the hourly one.
    assert!(line.contains("kubernetes#138571"), "{line}");
}

#[test]
fn min_sync_period_batches_the_full_restores_of_old_versions() {
    let mut c = with_versions(mk_cluster(2001, ""), "v1.25.0", "");
    let cm = c
        .config_maps
        .iter_mut()
        .find(|m| m.metadata.name.as_deref() == Some("kube-proxy"))
        .expect("kube-proxy ConfigMap");
    cm.obj.data.as_mut().expect("data").insert(
        "config.conf".into(),
        "kind: KubeProxyConfiguration\nmode: iptables\niptables:\n  minSyncPeriod: 10s\n  syncPeriod: 1m0s\n"
            .into(),
    );
    let f = ha007(&c);
    // One restore per 10 s, whatever the churn.
    assert_eq!(f.cost.figures["full_restores_per_hour"], 360.0);
    assert!(
        f.evidence
            .contains(&"iptables.syncPeriod 1m0s, iptables.minSyncPeriod 10s".to_string()),
        "{:#?}",
        f.evidence
    );
}

#[test]
fn mixed_versions_are_described_per_version() {
    let mut c = with_versions(mk_cluster(2001, ""), "v1.31.0", "");
    let info = c.nodes[0]
        .obj
        .status
        .as_mut()
        .and_then(|s| s.node_info.as_mut())
        .expect("node info");
    info.kubelet_version = "v1.26.1".into();
    let f = ha007(&c);
    assert!(
        f.cost.summary.contains("1 node(s) on kube-proxy 1.26"),
        "{}",
        f.cost.summary
    );
    assert!(
        f.cost.summary.contains("1 node(s) on kube-proxy 1.31"),
        "{}",
        f.cost.summary
    );
    // The figures describe the costlier version; nftables needs every node on 1.31.
    assert_eq!(f.cost.figures["full_restores_per_hour"], 3600.0);
    assert!(f.fix.summary.contains("ipvs"), "{}", f.fix.summary);
}

#[test]
fn a_metrics_only_service_costs_rewrites_on_every_change_before_1_27_and_on_its_own_after() {
    let ha004 = |kubelet: &str| {
        audit(&with_versions(mk_cluster(10, ""), kubelet, ""))
            .findings
            .into_iter()
            .find(|f| f.code == "HA004")
            .expect("HA004 on the exporter Service")
            .cost
            .summary
    };
    assert_eq!(
        ha004("v1.26.9"),
        "~17 kube-proxy rules on each of 2 nodes, rewritten with every Service or endpoint change in \
         the cluster (kube-proxy < 1.27 restores every rule)"
    );
    assert_eq!(
        ha004("v1.31.0"),
        "~17 kube-proxy rules on each of 2 nodes, rewritten on every change of its endpoints"
    );
}
