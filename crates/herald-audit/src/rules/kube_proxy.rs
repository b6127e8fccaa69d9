//! HA007: kube-proxy in iptables mode, with the rule count the cluster's own Services and endpoints
//! make it program on every node.
//!
//! The model follows kubernetes:pkg/proxy/iptables/proxier.go `syncProxyRules`, per port of every
//! Service that has a cluster IP (headless and ExternalName Services get no rules):
//! - with `e > 0` endpoints: 1 `KUBE-SERVICES` jump to the `KUBE-SVC-*` chain; in that chain 1
//!   masquerade-mark rule for off-cluster sources and `e` `statistic` jumps; per endpoint a
//!   `KUBE-SEP-*` chain with 2 rules (hairpin masquerade mark, DNAT):
//!   `rules = 2 + 3e`, `chains = 1 + e`;
//! - NodePort and LoadBalancer ports add 1 `KUBE-NODEPORTS` rule and a `KUBE-EXT-*` chain with 2
//!   rules (`+3` rules, `+1` chain); a LoadBalancer adds 1 `KUBE-SERVICES` rule per ingress IP;
//! - with no endpoint: 1 REJECT rule (plus 1 on the NodePort path).
//!
//! With 5 endpoints a ClusterIP port costs 17 rules: 1k Services make 17k rules, matching the
//! measurement in FIELD-NOTES (17k rules for 1k Services, 85k for 5k).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use super::{Outcome, Rule, require, thousands};
use crate::facts::{Facts, ServiceClass, is_headless, service_type};
use crate::finding::{Action, Cost, Finding, Fix, ObjectRef, Severity, Verb};
use crate::inventory::{Cluster, ns_name};
use crate::kind::Kind;
use crate::manifest;

pub const IPTABLES: Rule = Rule {
    code: "HA007",
    slug: "kube-proxy-iptables",
    about: "kube-proxy in iptables mode near or past the Service-count cliff",
    check: iptables,
};

/// Service counts of the rules of thumb: up to `FINE` iptables is fine, past `PLAN` plan a
/// migration, past `MIGRATE` migrate.
pub const FINE: usize = 1000;
pub const PLAN: usize = 2000;
pub const MIGRATE: usize = 5000;

/// `(rules, chains)` one Service makes kube-proxy write on every node, given its endpoint count.
pub fn service_rules(svc: &Service, endpoints: usize) -> (u64, u64) {
    let ty = service_type(svc);
    if is_headless(svc) || ty == "ExternalName" {
        return (0, 0);
    }
    let e = endpoints as u64;
    let external = ty == "NodePort" || ty == "LoadBalancer";
    let lb_ips = if ty == "LoadBalancer" {
        svc.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .map_or(0, Vec::len) as u64
    } else {
        0
    };
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map_or(0, Vec::len) as u64;
    let (mut rules, mut chains) = if e == 0 {
        (1 + u64::from(external), 0)
    } else {
        (
            2 + 3 * e + if external { 3 } else { 0 } + lb_ips,
            1 + e + u64::from(external),
        )
    };
    rules *= ports;
    chains *= ports;
    (rules, chains)
}

/// The cluster-wide estimate.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct IptablesEstimate {
    /// Services that get rules (they have a cluster IP).
    pub services: usize,
    pub endpoints: usize,
    pub rules: u64,
    pub chains: u64,
    /// Of `rules`, those written for metrics-only Services (HA004's, which headless would remove).
    pub metrics_only_rules: u64,
    pub metrics_only_services: usize,
}

/// Estimates what kube-proxy in iptables mode writes on each node.
pub(crate) fn estimate_iptables_rules(facts: &Facts<'_>) -> IptablesEstimate {
    let mut est = IptablesEstimate::default();
    for svc in &facts.cluster.services {
        let (ns, name) = ns_name(&svc.metadata);
        let e = facts.backends(ns, name).map_or(0, |(n, _)| n);
        let (rules, chains) = service_rules(svc, e);
        if rules == 0 {
            continue;
        }
        est.services += 1;
        est.endpoints += e;
        est.rules += rules;
        est.chains += chains;
        let metrics_only = facts
            .monitored(ns, name)
            .is_some_and(|m| matches!(m.class, ServiceClass::MetricsOnly { .. }));
        if metrics_only {
            est.metrics_only_rules += rules;
            est.metrics_only_services += 1;
        }
    }
    est
}

/// The proxy mode from the kube-proxy ConfigMap's `config.conf` (a KubeProxyConfiguration);
/// empty or unset means iptables on Linux (kubernetes:pkg/proxy/apis/config/types.go ProxyMode).
fn proxy_mode(c: &Cluster) -> Option<(String, serde_yaml::Mapping, String)> {
    let cm = c.config_map("kube-system", "kube-proxy")?;
    let data = cm.data.as_ref()?;
    let (key, text) = data
        .iter()
        .find(|(k, _)| k.as_str() == "config.conf")
        .or_else(|| {
            data.iter()
                .find(|(_, v)| v.contains("KubeProxyConfiguration"))
        })?;
    let conf: serde_yaml::Mapping = serde_yaml::from_str(text).ok()?;
    let mode = conf
        .get("mode")
        .and_then(serde_yaml::Value::as_str)
        .unwrap_or_default()
        .to_string();
    Some((mode, conf, key.clone()))
}

/// Whether every node can run the nftables mode: kube-proxy ≥ 1.31 (beta; GA in 1.33) and a
/// kernel ≥ 5.13 (kubernetes.io/docs/reference/networking/virtual-ips/#proxy-mode-nftables).
fn nftables_ready(c: &Cluster) -> Option<bool> {
    if c.nodes.is_empty() {
        return None;
    }
    let parse = |v: &str| -> Option<(u32, u32)> {
        let mut it = v.trim_start_matches('v').split(['.', '-']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    Some(c.nodes.iter().all(|n| {
        let info = n.status.as_ref().and_then(|s| s.node_info.as_ref());
        let kubelet = info.and_then(|i| parse(&i.kubelet_version));
        let kernel = info.and_then(|i| parse(&i.kernel_version));
        kubelet.is_some_and(|v| v >= (1, 31)) && kernel.is_some_and(|v| v >= (5, 13))
    }))
}

fn iptables(facts: &Facts<'_>, _: &super::Options) -> Outcome {
    let c = facts.cluster;
    if let Err(o) = require(c, &[Kind::ConfigMap, Kind::Service]) {
        return o;
    }
    let Some((mode, mut conf, key)) = proxy_mode(c) else {
        return Outcome::Ran(Vec::new());
    };
    if !(mode.is_empty() || mode == "iptables") {
        return Outcome::Ran(Vec::new());
    }
    let est = estimate_iptables_rules(facts);
    let severity = match est.services {
        n if n <= FINE => return Outcome::Ran(Vec::new()),
        n if n <= PLAN => Severity::Info,
        n if n <= MIGRATE => Severity::Warning,
        _ => Severity::Critical,
    };
    let nodes = c.nodes.len();
    let target = if nftables_ready(c) == Some(true) {
        "nftables"
    } else {
        "ipvs"
    };
    let mut evidence = vec![
        format!(
            "ConfigMap kube-system/kube-proxy {key}: mode is {}",
            if mode.is_empty() {
                "unset (iptables)".to_string()
            } else {
                mode.clone()
            }
        ),
        format!(
            "{} Services with a cluster IP and {} endpoints: about {} rules in {} chains on every node",
            thousands(est.services as u64),
            thousands(est.endpoints as u64),
            thousands(est.rules),
            thousands(est.chains)
        ),
        format!(
            "{} of those rules ({} Services) exist only for metrics and vanish with headless metrics Services",
            thousands(est.metrics_only_rules),
            thousands(est.metrics_only_services as u64)
        ),
        format!(
            "thresholds: up to {FINE} Services fine, over {PLAN} plan a migration, over {MIGRATE} migrate"
        ),
    ];
    match nftables_ready(c) {
        Some(true) => evidence.push(
            "every node runs Kubernetes >= 1.31 on a kernel >= 5.13: nftables mode is available"
                .into(),
        ),
        Some(false) => evidence.push(
            "some node runs Kubernetes < 1.31 or a kernel < 5.13: IPVS rather than nftables".into(),
        ),
        None => evidence.push("no Node in the input: node versions unknown, IPVS advised".into()),
    }
    let mut figures = BTreeMap::new();
    figures.insert("services".into(), est.services as f64);
    figures.insert("iptables_rules_per_node".into(), est.rules as f64);
    figures.insert("iptables_chains_per_node".into(), est.chains as f64);
    figures.insert(
        "metrics_only_rules_per_node".into(),
        est.metrics_only_rules as f64,
    );
    figures.insert("nodes".into(), nodes as f64);

    conf.insert("mode".into(), target.into());
    let text = serde_yaml::to_string(&conf).expect("a YAML mapping always encodes");
    let cm = c
        .config_map("kube-system", "kube-proxy")
        .expect("proxy_mode found it");
    let mut replaced = manifest::from_typed(cm);
    manifest::entry_object(&mut replaced, "data")
        .as_object_mut()
        .expect("entry_object returns an object")
        .insert(key.clone(), json!(text));
    let mut steps = match target {
        "nftables" => vec![
            "check: every node's kernel is >= 5.13 and kube-proxy >= 1.31 (nftables mode is beta in 1.31, GA in 1.33)".to_string(),
            "check: nothing relies on NodePorts answering on 127.0.0.1 (nftables mode does not accept them there)".into(),
        ],
        _ => vec![
            "check: every node loads ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh and nf_conntrack, and has ipset".to_string(),
            "note: IPVS adds every ClusterIP to a kube-ipvs0 dummy interface; ipvs.scheduler defaults to rr".into(),
        ],
    };
    steps.extend([
        format!("kubectl replace -f this file (ConfigMap kube-system/kube-proxy, mode: {target})"),
        "kubectl -n kube-system rollout restart daemonset kube-proxy, a few nodes first".into(),
        "remove the old iptables rules: reboot the nodes or run kube-proxy --cleanup on each"
            .into(),
        "watch kubeproxy_sync_proxy_rules_duration_seconds and Service propagation time".into(),
    ]);
    Outcome::Ran(vec![Finding {
        code: IPTABLES.code,
        rule: IPTABLES.slug,
        severity,
        title: format!(
            "kube-proxy runs in iptables mode with {} Services (~{} rules per node)",
            thousands(est.services as u64),
            thousands(est.rules)
        ),
        objects: vec![ObjectRef::new(Kind::ConfigMap, "kube-system", "kube-proxy")],
        evidence,
        cost: Cost {
            summary: format!(
                "every Service or endpoint change rewrites ~{} rules with iptables-restore on {} nodes",
                thousands(est.rules),
                thousands(nodes as u64)
            ),
            figures,
        },
        fix: Fix {
            summary: format!("switch kube-proxy to {target} mode"),
            steps,
            actions: vec![Action {
                verb: Verb::Replace,
                object: ObjectRef::new(Kind::ConfigMap, "kube-system", "kube-proxy"),
            }],
            manifests: vec![replaced],
            file: None,
        },
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ty: &str, ports: usize, headless: bool) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "s", "namespace": "a"},
            "spec": {"type": ty, "clusterIP": if headless { "None" } else { "10.0.0.1" },
                     "ports": (0..ports).map(|i| json!({"port": 80 + i})).collect::<Vec<_>>()}
        }))
        .expect("a valid Service")
    }

    #[test]
    fn a_clusterip_port_with_five_endpoints_costs_seventeen_rules() {
        assert_eq!(service_rules(&svc("ClusterIP", 1, false), 5), (17, 6));
        assert_eq!(service_rules(&svc("ClusterIP", 2, false), 5), (34, 12));
    }

    #[test]
    fn nodeports_add_the_external_chain_and_headless_services_cost_nothing() {
        assert_eq!(service_rules(&svc("NodePort", 1, false), 1), (8, 3));
        assert_eq!(service_rules(&svc("ClusterIP", 1, false), 0), (1, 0));
        assert_eq!(service_rules(&svc("ClusterIP", 3, true), 50), (0, 0));
    }
}
