//! The audit over hand-written dumps: each holds planted problems next to clean look-alikes, and
//! the exact set of findings is asserted by code and object.

#[path = "support/common.rs"]
mod common;

use common::{audit_files, found, set};
use herald_audit::{Finding, Kind, Severity};

fn finding<'r>(report: &'r herald_audit::Report, code: &str, object: &str) -> &'r Finding {
    report
        .findings
        .iter()
        .find(|f| f.code == code && f.objects.first().is_some_and(|o| o.to_string() == object))
        .unwrap_or_else(|| panic!("no {code} on {object}"))
}

#[test]
fn truncated_endpoints_are_found_but_999_and_exactly_1000_complete_addresses_are_not() {
    let r = audit_files(&["truncated-endpoints.json"]);
    assert_eq!(
        found(&r),
        set(&[
            ("HA001", "Endpoints shop/web"),
            ("HA002", "Prometheus monitoring/k8s"),
            ("HA002", "PrometheusAgent monitoring/agent"),
            ("HA003", "Endpoints kube-system/kubelet"),
            ("HA005", "Service shop/web"),
        ])
    );
    let web = finding(&r, "HA001", "Endpoints shop/web");
    assert_eq!(web.severity, Severity::Critical);
    assert_eq!(web.cost.figures["missing_addresses"], 234.0);
    let consumers: Vec<_> = web
        .objects
        .iter()
        .skip(1)
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        consumers,
        ["Prometheus monitoring/k8s"],
        "the EndpointSlice Prometheus is no consumer"
    );
}

#[test]
fn a_prometheus_reading_truncated_endpoints_is_critical_and_one_that_does_not_is_a_warning() {
    let r = audit_files(&["truncated-endpoints.json"]);
    assert_eq!(
        finding(&r, "HA002", "Prometheus monitoring/k8s").severity,
        Severity::Critical
    );
    let agent = finding(&r, "HA002", "PrometheusAgent monitoring/agent");
    assert_eq!(agent.severity, Severity::Warning);
    let role = &agent.fix.manifests[0];
    assert_eq!(role["kind"], "ClusterRole");
    assert_eq!(role["rules"][0]["apiGroups"][0], "discovery.k8s.io");
    assert_eq!(role["rules"][0]["resources"][0], "endpointslices");
    assert_eq!(
        role["rules"][0]["verbs"],
        serde_json::json!(["get", "list", "watch"])
    );
    let binding = &agent.fix.manifests[1];
    assert_eq!(
        binding["subjects"][0]["name"], "default",
        "no serviceAccountName: the default one"
    );
    let replaced = &agent.fix.manifests[2];
    assert_eq!(replaced["apiVersion"], "monitoring.coreos.com/v1alpha1");
    assert_eq!(replaced["spec"]["serviceDiscoveryRole"], "EndpointSlice");
}

#[test]
fn kubelet_endpoints_past_1000_nodes_carry_the_migration_steps() {
    let r = audit_files(&["truncated-endpoints.json"]);
    let k = finding(&r, "HA003", "Endpoints kube-system/kubelet");
    assert_eq!(k.severity, Severity::Critical);
    assert_eq!(k.cost.figures["kubelets_missing_from_mirrored_slices"], 1.0);
    let steps = k.fix.steps.join("\n");
    assert!(
        steps.contains("--kubelet-endpoints=true --kubelet-endpointslice=true"),
        "{steps}"
    );
    assert!(steps.contains("--kubelet-endpoints=false"), "{steps}");
}

#[test]
fn metrics_services_are_told_apart_from_traffic_services_and_headless_ones() {
    let r = audit_files(&["services.yaml"]);
    assert_eq!(
        found(&r),
        set(&[
            ("HA004", "Service apps/api-metrics"),
            ("HA005", "Service apps/api"),
            ("HA005", "Service apps/lb"),
            ("HA005", "Service apps/web-metrics"),
            ("HA006", "Service apps/api-metrics"),
            ("HA006", "Service apps/batch-metrics"),
            ("HA006", "Service apps/cron-metrics"),
        ])
    );
    let api = finding(&r, "HA005", "Service apps/api");
    assert!(
        api.evidence
            .iter()
            .any(|e| e.contains("apps/api-metrics already selects the same pods")),
        "{:?}",
        api.evidence
    );
    let web = finding(&r, "HA005", "Service apps/web-metrics");
    assert!(
        web.evidence
            .iter()
            .any(|e| e.contains("Ingress web routes to it")),
        "{:?}",
        web.evidence
    );
}

#[test]
fn istio_before_1_20_is_advised_a_namespace_that_does_not_exist_instead_of_tilde() {
    let r = audit_files(&["services.yaml"]);
    let batch = finding(&r, "HA006", "Service apps/batch-metrics");
    let annotations = &batch.fix.manifests[0]["metadata"]["annotations"];
    assert_eq!(
        annotations["networking.istio.io/exportTo"],
        "herald-no-namespace"
    );
    // The HA004 re-creation carries the annotation too, so HA006 has nothing of its own to apply.
    let api = finding(&r, "HA006", "Service apps/api-metrics");
    assert!(api.fix.manifests.is_empty());
    let recreated = &finding(&r, "HA004", "Service apps/api-metrics")
        .fix
        .manifests[0];
    assert_eq!(
        recreated["metadata"]["annotations"]["networking.istio.io/exportTo"],
        "herald-no-namespace"
    );
    assert_eq!(recreated["spec"]["clusterIP"], "None");
    assert!(recreated["spec"].get("clusterIPs").is_none());
    // The finding also points at what replaces the Service: a PodMonitor, served by herald as a job.
    let steps = &finding(&r, "HA004", "Service apps/api-metrics").fix.steps;
    assert!(
        steps
            .iter()
            .any(|s| s.contains("PodMonitor apps/api-metrics")
                && s.contains("podMonitor/apps/api-metrics/0")),
        "{steps:?}"
    );
    assert!(recreated["metadata"].get("resourceVersion").is_none());
    assert!(recreated["metadata"].get("uid").is_none());
}

#[test]
fn istio_from_1_20_is_advised_tilde() {
    let mut cluster =
        herald_audit::load::load_paths(&[common::fixture("services.yaml")]).expect("loads");
    for d in &mut cluster.deployments {
        let spec = d.obj.spec.as_mut().expect("istiod has a spec");
        let pod = spec.template.spec.as_mut().expect("and a pod spec");
        pod.containers[0].image = Some("docker.io/istio/pilot:1.20.0".into());
    }
    let r = herald_audit::audit(&cluster, &herald_audit::Options::default(), "t".into());
    let batch = finding(&r, "HA006", "Service apps/batch-metrics");
    assert_eq!(
        batch.fix.manifests[0]["metadata"]["annotations"]["networking.istio.io/exportTo"],
        "~"
    );
    // `~` is right from 1.20 on: cron-metrics is no longer a finding.
    assert!(!found(&r).contains(&("HA006".into(), "Service apps/cron-metrics".into())));
}

#[test]
fn pods_under_strict_mtls_and_multi_port_pods_are_found_but_merged_permissive_and_single_port_ones_are_not()
 {
    let r = audit_files(&["istio-pods.yaml"]);
    assert_eq!(
        found(&r),
        set(&[
            ("HA008", "Deployment shop/payments"),
            ("HA008", "StatefulSet shop/multi"),
            ("HA009", "Deployment shop/cart"),
            ("HA009", "Deployment shop/search"),
            ("HA010", "cluster"),
        ])
    );
    let cart = finding(&r, "HA009", "Deployment shop/cart");
    assert_eq!(
        cart.objects[1].to_string(),
        "PeerAuthentication istio-system/default"
    );
    assert_eq!(cart.cost.figures["pods"], 2.0);
    assert!(
        cart.fix.manifests.is_empty(),
        "annotations follow merging once it is on"
    );
    let search = finding(&r, "HA009", "Deployment shop/search");
    assert_eq!(search.fix.manifests[0]["kind"], "PodMonitor");
    let multi = finding(&r, "HA008", "StatefulSet shop/multi");
    let pm = &multi.fix.manifests[0];
    let ports: Vec<_> = pm["spec"]["podMetricsEndpoints"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|e| e["port"].as_str().expect("named ports").to_string())
        .collect();
    assert_eq!(ports, ["http-metrics", "metrics"]);
    assert_eq!(
        pm["spec"]["selector"]["matchLabels"],
        serde_json::json!({"app": "multi"})
    );
}

#[test]
fn the_watch_fanout_counts_node_agents_and_compares_with_herald() {
    let r = audit_files(&["istio-pods.yaml"]);
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "HA010")
        .expect("HA010 runs");
    let fig = &f.cost.figures;
    // kubelet ×3 + kube-proxy ×3 + CoreDNS ×2 + istiod ×1 on Services.
    assert_eq!(fig["service_watches"], 9.0);
    // kube-proxy ×3 + CoreDNS ×2 + istiod ×1 on EndpointSlices.
    assert_eq!(fig["endpointslice_watches"], 6.0);
    assert_eq!(fig["pod_watches"], 1.0);
    assert_eq!(fig["watches_with_herald"], 4.0);
    assert!(fig["bytes_per_second"] > fig["bytes_per_second_with_herald"]);
    assert_eq!(fig["churn_per_second"], 10.0);
}

#[test]
fn rules_whose_kinds_are_missing_say_not_checked() {
    let r = audit_files(&["services.yaml"]);
    let nc: Vec<_> = r
        .not_checked
        .iter()
        .map(|n| (n.code, n.missing_kinds.clone()))
        .collect();
    assert_eq!(
        nc,
        [
            ("HA001", vec![Kind::Endpoints]),
            ("HA002", vec![Kind::Prometheus, Kind::PrometheusAgent]),
            ("HA003", vec![Kind::Endpoints, Kind::Node]),
            ("HA007", vec![Kind::ConfigMap]),
            ("HA009", vec![Kind::PeerAuthentication]),
            ("HA010", vec![Kind::Node]),
        ]
    );
    assert!(r.inventory.missing_kinds.contains(&Kind::EndpointSlice));
}

#[test]
fn several_files_make_one_inventory() {
    let r = audit_files(&["services.yaml", "istio-pods.yaml"]);
    let codes: std::collections::BTreeSet<_> = r.findings.iter().map(|f| f.code).collect();
    for code in ["HA004", "HA005", "HA006", "HA008", "HA009", "HA010"] {
        assert!(codes.contains(code), "{code} missing from {codes:?}");
    }
    assert!(r.not_checked.iter().all(|n| n.code != "HA009"));
}

#[test]
fn the_pushed_bytes_scale_with_the_assumed_churn() {
    let cluster =
        herald_audit::load::load_paths(&[common::fixture("istio-pods.yaml")]).expect("loads");
    let bytes = |churn: f64| {
        let options = herald_audit::Options {
            churn_per_second: churn,
        };
        let r = herald_audit::audit(&cluster, &options, "t".into());
        let f = r
            .findings
            .iter()
            .find(|f| f.code == "HA010")
            .expect("HA010");
        (
            f.cost.figures["pod_bytes_per_second"],
            f.cost.figures["endpointslice_bytes_per_second"],
        )
    };
    let (pods1, slices1) = bytes(1.0);
    let (pods4, slices4) = bytes(4.0);
    assert!(pods1 > 0.0 && slices1 > 0.0);
    assert!((pods4 - 4.0 * pods1).abs() < 1e-6);
    assert!((slices4 - 4.0 * slices1).abs() < 1e-6);
}
