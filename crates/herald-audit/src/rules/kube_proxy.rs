//! HA007: kube-proxy in iptables mode, with the rule count the cluster's own Services and endpoints
//! make it program on every node, and what the kube-proxy version on the nodes does with them.
//!
//! The rule model follows kubernetes:pkg/proxy/iptables/proxier.go `syncProxyRules`, per port of
//! every Service that has a cluster IP (headless and ExternalName Services get no rules):
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
//!
//! What a sync writes depends on the version ([`SyncBehaviour`]):
//! - Before 1.27 every sync is a full restore of every `KUBE-*` chain (`iptables-restore
//!   --noflush`), on every Service or EndpointSlice change, batched at most once per
//!   `iptables.minSyncPeriod` (default 1s since kubernetes#92836); before 1.17 also every
//!   `syncPeriod`, since then at least hourly (kubernetes#81517: the bounded-frequency runner's
//!   `maxInterval` became `time.Hour`).
//! - From 1.27 (KEP-3453 `MinimizeIPTablesRestore`: alpha 1.26, beta and on by default 1.27, GA
//!   1.28) a sync is partial unless `needFullSync`: the top-level chains (`KUBE-SERVICES`,
//!   `KUBE-NODEPORTS`, `KUBE-EXTERNAL-SERVICES`, the filter rules) are written whole, but the
//!   `KUBE-SVC/SVL/EXT/FW/SEP` chains only of Services whose Service or EndpointSlices changed
//!   (`if !doFullSync && !serviceUpdateResult.UpdatedServices.Has(..) &&
//!   !endpointUpdateResult.UpdatedServices.Has(..) { natChains = skippedNatChains }`). A full sync
//!   happens at start, after a failed restore, when the node's labels change (topology), and when
//!   the `KUBE-PROXY-CANARY` chain is found deleted, checked every `syncPeriod` (default 30s) by
//!   `ipt.Monitor(kubeProxyCanaryChain, .., proxier.forceSyncProxyRules, syncPeriod, ..)`
//!   (as in the 1.28 tree, kevinhehc/k8s-1.28@804fd5efd0f7ed15b965a073012dca4c2a2e298f
//!   pkg/proxy/iptables/proxier.go).
//! - From 1.33 (kubernetes#129329) also whenever the last full sync is older than
//!   `proxyutil.FullSyncPeriod`, one hour: `doFullSync := proxier.needFullSync ||
//!   (time.Since(proxier.lastFullSync) > proxyutil.FullSyncPeriod)`, with the runner's
//!   `maxInterval` set to the same period (as in aroradaman/kubernetes@4177b600d4b97a67b765a18ddeeb295ef757b212
//!   pkg/proxy/iptables/proxier.go, a fork tracking master). kubernetes#138571 (1.37, backported
//!   to 1.34–1.36 patch releases in May 2026) skips that periodic full sync in "large cluster
//!   mode", past 1,000 endpoints (`largeClusterEndpointsThreshold`); the patch level that carries
//!   it is not told apart here.
//!
//! How long a restore of the estimated ruleset takes is not measured: that needs `herald
//! simulate`, which does not exist yet.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Outcome, Rule, require, thousands};
use crate::facts::{Facts, ServiceClass, is_headless, service_type};
use crate::finding::{Action, Cost, Finding, Fix, ObjectRef, Severity, Verb};
use crate::inventory::{Cluster, ns_name};
use crate::kind::Kind;
use crate::manifest;
use crate::objects::Service;
use crate::versions::{Minor, VersionSource, go_duration_seconds, kube_proxy_versions};

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

/// kube-proxy's defaults for the KubeProxyConfiguration fields read here
/// (kubernetes:pkg/proxy/apis/config/v1alpha1/defaults.go).
const DEFAULT_SYNC_PERIOD: f64 = 30.0;
const DEFAULT_MIN_SYNC_PERIOD: f64 = 1.0;
/// `largeClusterEndpointsThreshold` in proxier.go.
const LARGE_CLUSTER_ENDPOINTS: usize = 1000;

/// `(rules, chains)` one Service makes kube-proxy write on every node, given its endpoint count.
pub fn service_rules(svc: &Service, endpoints: usize) -> (u64, u64) {
    let split = service_rule_split(svc, endpoints);
    (split.top_level + split.own, split.chains)
}

/// A Service's rules, split as a partial sync writes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleSplit {
    /// Rules in the top-level chains, written on every sync.
    pub top_level: u64,
    /// Rules in the Service's own chains, written when it or its endpoints change.
    pub own: u64,
    pub chains: u64,
}

/// [`service_rules`], split into top-level rules and the Service's own chains.
pub fn service_rule_split(svc: &Service, endpoints: usize) -> RuleSplit {
    let ty = service_type(svc);
    if is_headless(svc) || ty == "ExternalName" {
        return RuleSplit::default();
    }
    let e = endpoints as u64;
    let external = u64::from(ty == "NodePort" || ty == "LoadBalancer");
    let lb_ips = if ty == "LoadBalancer" {
        svc.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .map_or(0, |l| l.ingress) as u64
    } else {
        0
    };
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map_or(0, Vec::len) as u64;
    let per_port = if e == 0 {
        RuleSplit {
            top_level: 1 + external,
            own: 0,
            chains: 0,
        }
    } else {
        RuleSplit {
            // The KUBE-SERVICES jump, the KUBE-NODEPORTS jump, one per load-balancer IP.
            top_level: 1 + external + lb_ips,
            // KUBE-SVC: masquerade mark + e jumps; KUBE-SEP: 2 each; KUBE-EXT: 2.
            own: 1 + 3 * e + 2 * external,
            chains: 1 + e + external,
        }
    };
    RuleSplit {
        top_level: per_port.top_level * ports,
        own: per_port.own * ports,
        chains: per_port.chains * ports,
    }
}

/// The cluster-wide estimate.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct IptablesEstimate {
    /// Services that get rules (they have a cluster IP).
    pub services: usize,
    pub endpoints: usize,
    pub rules: u64,
    pub chains: u64,
    /// Of `rules`, those in the top-level chains (written on every sync from 1.27 on).
    pub top_level_rules: u64,
    /// The largest Service's own chains, in rules.
    pub largest_service_rules: u64,
    /// Of `rules`, those written for metrics-only Services (HA004's, which headless would remove).
    pub metrics_only_rules: u64,
    pub metrics_only_services: usize,
}

impl IptablesEstimate {
    /// The rules of one Service's own chains, on average over the Services that have rules.
    pub fn average_service_rules(&self) -> f64 {
        if self.services == 0 {
            0.0
        } else {
            (self.rules - self.top_level_rules) as f64 / self.services as f64
        }
    }
}

/// Estimates what kube-proxy in iptables mode writes on each node.
pub(crate) fn estimate_iptables_rules(facts: &Facts<'_>) -> IptablesEstimate {
    let mut est = IptablesEstimate::default();
    for svc in &facts.cluster.services {
        let (ns, name) = ns_name(&svc.metadata);
        let e = facts.backends(ns, name).map_or(0, |(n, _)| n);
        let split = service_rule_split(svc, e);
        let rules = split.top_level + split.own;
        if rules == 0 {
            continue;
        }
        est.services += 1;
        est.endpoints += e;
        est.rules += rules;
        est.chains += split.chains;
        est.top_level_rules += split.top_level;
        est.largest_service_rules = est.largest_service_rules.max(split.own);
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

/// kube-proxy's configuration as its ConfigMap's `config.conf` (a KubeProxyConfiguration) says.
struct ProxyConfig {
    /// `mode`; empty or unset means iptables on Linux
    /// (kubernetes:pkg/proxy/apis/config/types.go ProxyMode).
    mode: String,
    /// `iptables.syncPeriod` and `iptables.minSyncPeriod`, in seconds, and whether they were set.
    sync_period: (f64, Option<String>),
    min_sync_period: (f64, Option<String>),
    /// The whole configuration, and the ConfigMap key holding it, for the fix.
    conf: serde_yaml::Mapping,
    key: String,
}

fn proxy_config(c: &Cluster) -> Option<ProxyConfig> {
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
    let iptables = conf.get("iptables");
    let period = |field: &str, default: f64| {
        let set = iptables
            .and_then(|i| i.get(field))
            .and_then(serde_yaml::Value::as_str)
            .map(str::to_string);
        let secs = set
            .as_deref()
            .and_then(go_duration_seconds)
            .unwrap_or(default);
        (secs, set)
    };
    Some(ProxyConfig {
        mode,
        sync_period: period("syncPeriod", DEFAULT_SYNC_PERIOD),
        min_sync_period: period("minSyncPeriod", DEFAULT_MIN_SYNC_PERIOD),
        conf,
        key: key.clone(),
    })
}

/// What a kube-proxy version does with the rules on a change, and how often it rewrites them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SyncBehaviour {
    /// Before 1.17: every sync is full, on every change and every `syncPeriod`.
    FullEverySyncPeriod,
    /// 1.17–1.26: every sync is full, on every change and at least hourly.
    FullOnEveryChange,
    /// 1.27–1.32: partial syncs; full ones at start, after errors, on a flushed canary.
    Partial,
    /// From 1.33: partial syncs, and a full one at least hourly.
    PartialHourlyFull,
}

impl SyncBehaviour {
    pub fn of(version: Minor) -> SyncBehaviour {
        match version {
            v if v < (1, 17) => SyncBehaviour::FullEverySyncPeriod,
            v if v < (1, 27) => SyncBehaviour::FullOnEveryChange,
            v if v < (1, 33) => SyncBehaviour::Partial,
            _ => SyncBehaviour::PartialHourlyFull,
        }
    }
}

/// The sync behaviour of the oldest kube-proxy on the nodes; `None` when no node tells.
pub fn oldest_sync_behaviour(c: &Cluster) -> Option<SyncBehaviour> {
    let versions = kube_proxy_versions(c);
    if versions.is_empty() || versions.contains_key(&None) {
        return None;
    }
    versions
        .keys()
        .flatten()
        .map(|(v, _)| SyncBehaviour::of(*v))
        .min()
}

/// The cost one version pays, for the evidence, the summary and the figures.
struct VersionCost {
    line: String,
    rules_per_change: f64,
    full_restores_per_hour: f64,
    rules_per_second: f64,
}

fn version_cost(
    behaviour: Option<SyncBehaviour>,
    est: &IptablesEstimate,
    conf: &ProxyConfig,
    churn: f64,
) -> VersionCost {
    let (sync_period, min_sync) = (conf.sync_period.0, conf.min_sync_period.0);
    // Syncs per second under `churn` changes/s: minSyncPeriod batches changes into one sync.
    let syncs = if min_sync > 0.0 {
        churn.min(1.0 / min_sync)
    } else {
        churn
    };
    let average = est.average_service_rules();
    let all = thousands(est.rules);
    let batching = format!(
        "batched at most once per minSyncPeriod {}",
        seconds(min_sync)
    );
    let full = |per_hour: f64, line: String| VersionCost {
        line,
        rules_per_change: est.rules as f64,
        full_restores_per_hour: per_hour,
        rules_per_second: syncs * est.rules as f64,
    };
    let partial = |per_hour: f64, line: String| VersionCost {
        line,
        rules_per_change: est.top_level_rules as f64 + average,
        full_restores_per_hour: per_hour,
        rules_per_second: syncs * est.top_level_rules as f64 + churn * average,
    };
    let partial_line = format!(
        "each Service or endpoint change restores the top-level chains (~{} rules) and the changed Service's \
         own chains (~{:.0} rules on average, {} for the largest), {batching}",
        thousands(est.top_level_rules),
        average,
        thousands(est.largest_service_rules)
    );
    let occasional = format!(
        "all ~{all} rules only at kube-proxy start, after a failed restore, when the node's labels change, \
         or when iptables is found flushed (checked every syncPeriod {})",
        seconds(sync_period)
    );
    match behaviour {
        Some(SyncBehaviour::FullEverySyncPeriod) => full(
            syncs * 3600.0 + 3600.0 / sync_period.max(1.0),
            format!(
                "every Service or endpoint change rewrites all ~{all} rules with iptables-restore, {batching}, \
                 and every syncPeriod {} too",
                seconds(sync_period)
            ),
        ),
        Some(SyncBehaviour::FullOnEveryChange) => full(
            syncs * 3600.0,
            format!(
                "every Service or endpoint change rewrites all ~{all} rules with iptables-restore, {batching} \
                 (MinimizeIPTablesRestore arrives in 1.27)"
            ),
        ),
        Some(SyncBehaviour::Partial) => partial(0.0, format!("{partial_line}; {occasional}")),
        Some(SyncBehaviour::PartialHourlyFull) => {
            let large = est.endpoints > LARGE_CLUSTER_ENDPOINTS;
            partial(
                1.0,
                format!(
                    "{partial_line}; all ~{all} rules at least once an hour (FullSyncPeriod){}, and at \
                     kube-proxy start, after a failed restore, when the node's labels change, or when iptables \
                     is found flushed (checked every syncPeriod {})",
                    if large {
                        format!(
                            " — patch releases carrying kubernetes#138571 skip that hourly one past {} endpoints, \
                             and this cluster has {}",
                            thousands(LARGE_CLUSTER_ENDPOINTS as u64),
                            thousands(est.endpoints as u64)
                        )
                    } else {
                        String::new()
                    },
                    seconds(sync_period)
                ),
            )
        }
        None => VersionCost {
            line: format!(
                "version unknown: before 1.27 every change rewrites all ~{all} rules; from 1.27 a change \
                 restores ~{} rules (top-level chains and the changed Service's own)",
                thousands((est.top_level_rules as f64 + average) as u64)
            ),
            rules_per_change: est.rules as f64,
            full_restores_per_hour: syncs * 3600.0,
            rules_per_second: syncs * est.rules as f64,
        },
    }
}

/// `30s`, `1.5s`, `2m`.
fn seconds(s: f64) -> String {
    if s >= 60.0 && (s % 60.0).abs() < f64::EPSILON {
        format!("{}m", s / 60.0)
    } else {
        format!("{s}s")
    }
}

/// Whether every node can run the nftables mode: kube-proxy ≥ 1.31 (beta; GA in 1.33) and a
/// kernel ≥ 5.13 (kubernetes.io/docs/reference/networking/virtual-ips/#proxy-mode-nftables).
fn nftables_ready(c: &Cluster) -> Option<bool> {
    if c.nodes.is_empty() {
        return None;
    }
    let kernel_ok = c.nodes.iter().all(|n| {
        let info = n.status.as_ref().and_then(|s| s.node_info.as_ref());
        info.and_then(|i| crate::versions::kube_minor(&i.kernel_version))
            .is_some_and(|v| v >= (5, 13))
    });
    let proxy_ok = kube_proxy_versions(c)
        .keys()
        .all(|v| v.is_some_and(|(v, _)| v >= (1, 31)));
    Some(kernel_ok && proxy_ok)
}

fn iptables(facts: &Facts<'_>, options: &super::Options) -> Outcome {
    let c = facts.cluster;
    if let Err(o) = require(c, &[Kind::ConfigMap, Kind::Service]) {
        return o;
    }
    let Some(conf) = proxy_config(c) else {
        return Outcome::Ran(Vec::new());
    };
    if !(conf.mode.is_empty() || conf.mode == "iptables") {
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
    let ready = nftables_ready(c);
    let target = if ready == Some(true) {
        "nftables"
    } else {
        "ipvs"
    };
    let mut evidence = vec![
        format!(
            "ConfigMap kube-system/kube-proxy {}: mode is {}",
            conf.key,
            if conf.mode.is_empty() {
                "unset (iptables)".to_string()
            } else {
                conf.mode.clone()
            }
        ),
        format!(
            "iptables.syncPeriod {}, iptables.minSyncPeriod {}",
            conf.sync_period
                .1
                .clone()
                .unwrap_or_else(|| format!("unset ({})", seconds(DEFAULT_SYNC_PERIOD))),
            conf.min_sync_period
                .1
                .clone()
                .unwrap_or_else(|| format!("unset ({})", seconds(DEFAULT_MIN_SYNC_PERIOD))),
        ),
        format!(
            "{} Services with a cluster IP and {} endpoints: about {} rules in {} chains on every node",
            thousands(est.services as u64),
            thousands(est.endpoints as u64),
            thousands(est.rules),
            thousands(est.chains)
        ),
    ];
    // Per kube-proxy version on the nodes, oldest first: what it does with those rules.
    let versions = kube_proxy_versions(c);
    let mut groups: Vec<(Option<Minor>, usize, Option<VersionSource>)> = Vec::new();
    for (v, n) in &versions {
        let minor = v.map(|(m, _)| m);
        match groups.iter_mut().find(|g| g.0 == minor) {
            Some(g) => g.1 += n,
            None => groups.push((minor, *n, v.map(|(_, s)| s))),
        }
    }
    if groups.is_empty() {
        groups.push((None, nodes, None));
    }
    let churn = options.churn_per_second;
    let mut summaries = Vec::new();
    let mut worst: Option<VersionCost> = None;
    for (minor, n, source) in &groups {
        let cost = version_cost(minor.map(SyncBehaviour::of), &est, &conf, churn);
        let who = match (minor, source) {
            (Some((a, b)), Some(VersionSource::KubeProxy)) => format!("kube-proxy {a}.{b}"),
            (Some((a, b)), _) => format!("kube-proxy {a}.{b} (the kubelet's version)"),
            (None, _) => "an unknown kube-proxy version".to_string(),
        };
        let on = if c.has(Kind::Node) {
            format!("{} node(s) run {who}", thousands(*n as u64))
        } else {
            "no Node in the input: the kube-proxy version is unknown".to_string()
        };
        evidence.push(format!("{on}: {}", cost.line));
        summaries.push(format!(
            "{}: ~{} rules restored per change, {} full restore(s) of ~{} rules per hour",
            if c.has(Kind::Node) {
                format!("{} node(s) on {who}", thousands(*n as u64))
            } else {
                who.clone()
            },
            thousands(cost.rules_per_change as u64),
            full_per_hour(cost.full_restores_per_hour),
            thousands(est.rules)
        ));
        if worst
            .as_ref()
            .is_none_or(|w| cost.rules_per_second > w.rules_per_second)
        {
            worst = Some(cost);
        }
    }
    let worst = worst.expect("at least one version group");
    evidence.push(format!(
        "{} of those rules ({} Services) exist only for metrics and vanish with headless metrics Services",
        thousands(est.metrics_only_rules),
        thousands(est.metrics_only_services as u64)
    ));
    evidence.push(format!(
        "thresholds: up to {FINE} Services fine, over {PLAN} plan a migration, over {MIGRATE} migrate; \
         lookups walk the chains linearly in every version"
    ));
    match ready {
        Some(true) => evidence.push(
            "every node runs kube-proxy >= 1.31 on a kernel >= 5.13: nftables mode is available"
                .into(),
        ),
        Some(false) => evidence.push(
            "some node runs kube-proxy < 1.31 or a kernel < 5.13: IPVS rather than nftables".into(),
        ),
        None => evidence.push("no Node in the input: node versions unknown, IPVS advised".into()),
    }
    let mut figures = BTreeMap::new();
    figures.insert("services".into(), est.services as f64);
    figures.insert("iptables_rules_per_node".into(), est.rules as f64);
    figures.insert("iptables_chains_per_node".into(), est.chains as f64);
    figures.insert(
        "top_level_rules_per_node".into(),
        est.top_level_rules as f64,
    );
    figures.insert(
        "metrics_only_rules_per_node".into(),
        est.metrics_only_rules as f64,
    );
    figures.insert("nodes".into(), nodes as f64);
    figures.insert("rules_restored_per_change".into(), worst.rules_per_change);
    figures.insert(
        "full_restores_per_hour".into(),
        worst.full_restores_per_hour,
    );
    figures.insert("rules_restored_per_second".into(), worst.rules_per_second);
    figures.insert("churn_per_second".into(), churn);

    let mut conf_out = conf.conf.clone();
    conf_out.insert("mode".into(), target.into());
    let text = serde_yaml::to_string(&conf_out).expect("a YAML mapping always encodes");
    let cm = c
        .config_map("kube-system", "kube-proxy")
        .expect("proxy_config found it");
    let mut replaced = manifest::config_map(cm);
    manifest::entry_object(&mut replaced, "data")
        .as_object_mut()
        .expect("entry_object returns an object")
        .insert(conf.key.clone(), json!(text));
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
                "{}; at {churn} changes/s, ~{} rules restored per second on each of {} nodes",
                summaries.join("; "),
                thousands(worst.rules_per_second as u64),
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

fn full_per_hour(n: f64) -> String {
    if n >= 10.0 {
        thousands(n as u64)
    } else if n == 0.0 {
        "no periodic".into()
    } else {
        format!("{n:.0}")
    }
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

    #[test]
    fn a_partial_sync_rewrites_one_top_level_rule_per_port_and_the_rest_only_on_change() {
        let split = service_rule_split(&svc("NodePort", 2, false), 5);
        assert_eq!(
            split.top_level,
            2 * 2,
            "KUBE-SERVICES and KUBE-NODEPORTS jumps"
        );
        assert_eq!(split.own, 2 * (1 + 15 + 2));
    }

    #[test]
    fn versions_map_to_the_sync_behaviour_of_their_release() {
        assert_eq!(
            SyncBehaviour::of((1, 16)),
            SyncBehaviour::FullEverySyncPeriod
        );
        assert_eq!(SyncBehaviour::of((1, 26)), SyncBehaviour::FullOnEveryChange);
        assert_eq!(SyncBehaviour::of((1, 27)), SyncBehaviour::Partial);
        assert_eq!(SyncBehaviour::of((1, 32)), SyncBehaviour::Partial);
        assert_eq!(SyncBehaviour::of((1, 33)), SyncBehaviour::PartialHourlyFull);
    }
}
