//! The audit rules: a table of stable codes, each a pure function from the inventory's facts to
//! findings, or to "not checked" when the input lacks a kind the rule needs.

mod endpoints;
mod fanout;
mod kube_proxy;
mod mtls;
mod pods;
mod scrapes;
mod services;

use crate::custom::{Prometheus, ServiceMonitor};
use crate::facts::Facts;
use crate::finding::{Finding, NotChecked};
use crate::inventory::{Cluster, Item};
use crate::kind::Kind;
use crate::selector;

pub use fanout::{DEFAULT_CHURN_PER_SECOND, KindFanout, WatchFanout, watch_fanout};

/// `(namespace, name)` of the Services HA004 finds metrics-only and not yet headless: the ones its
/// fix makes headless (`clusterIP: None`), which removes them from kube-proxy's rules.
pub fn metrics_only_cluster_ips(cluster: &Cluster) -> std::collections::BTreeSet<(String, String)> {
    Facts::new(cluster)
        .monitored
        .iter()
        .filter(|m| {
            matches!(
                m.class,
                crate::facts::ServiceClass::MetricsOnly { headless: false }
            )
        })
        .map(|m| {
            let (ns, name) = crate::inventory::ns_name(&m.service.metadata);
            (ns.to_string(), name.to_string())
        })
        .collect()
}

/// Knobs of the estimates.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Pod changes per second assumed for the watch fan-out estimate (HA010).
    pub churn_per_second: f64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            churn_per_second: DEFAULT_CHURN_PER_SECOND,
        }
    }
}

/// What one rule concluded.
pub enum Outcome {
    Ran(Vec<Finding>),
    NotChecked(Vec<Kind>),
}

/// A rule: its stable code and slug, and its check.
pub struct Rule {
    pub code: &'static str,
    pub slug: &'static str,
    /// One line saying what the rule looks for.
    pub about: &'static str,
    check: fn(&Facts<'_>, &Options) -> Outcome,
}

/// Every rule, in code order. Codes are stable: a retired rule's code is never reused.
pub const RULES: &[Rule] = &[
    endpoints::TRUNCATED,
    endpoints::PROMETHEUS_ROLE,
    endpoints::KUBELET_ENDPOINTS,
    services::METRICS_ONLY_CLUSTER_IP,
    services::SHARED_SERVICE,
    services::ISTIO_EXPORT,
    kube_proxy::IPTABLES,
    pods::MULTI_PORT_ANNOTATIONS,
    mtls::STRICT_MTLS_SCRAPE,
    fanout::WATCH_FANOUT,
];

/// The result of running every rule.
pub struct Evaluation {
    pub findings: Vec<Finding>,
    pub not_checked: Vec<NotChecked>,
}

/// Runs every rule over `cluster`. Findings come out sorted: severity (worst first), code, objects.
pub fn evaluate(cluster: &Cluster, options: &Options) -> Evaluation {
    let facts = Facts::new(cluster);
    let mut findings = Vec::new();
    let mut not_checked = Vec::new();
    for rule in RULES {
        match (rule.check)(&facts, options) {
            Outcome::Ran(f) => findings.extend(f),
            Outcome::NotChecked(missing_kinds) => not_checked.push(NotChecked {
                code: rule.code,
                rule: rule.slug,
                missing_kinds,
            }),
        }
    }
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(a.code.cmp(b.code))
            .then_with(|| a.objects.cmp(&b.objects))
    });
    Evaluation {
        findings,
        not_checked,
    }
}

/// `Outcome::NotChecked` when any of `kinds` is missing from the input.
fn require(c: &Cluster, kinds: &[Kind]) -> Result<(), Outcome> {
    let missing = c.missing(kinds);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Outcome::NotChecked(missing))
    }
}

/// The service discovery role a Prometheus/PrometheusAgent uses: `Endpoints` when unset, the
/// operator's default (prometheus-operator:pkg/apis/monitoring/v1/prometheus_types.go).
fn discovery_role(p: &Prometheus) -> &str {
    p.spec
        .service_discovery_role
        .as_deref()
        .filter(|r| !r.is_empty())
        .unwrap_or("Endpoints")
}

/// Whether a Prometheus object picks up a ServiceMonitor: its `serviceMonitorSelector` must be set
/// (unset selects none) and match, and the monitor's namespace must match
/// `serviceMonitorNamespaceSelector` (unset: the Prometheus's own namespace only). When the input
/// has no Namespaces, a non-empty namespace selector is assumed to match.
fn prometheus_selects(c: &Cluster, p: &Prometheus, sm: &Item<ServiceMonitor>) -> bool {
    let Some(sel) = &p.spec.service_monitor_selector else {
        return false;
    };
    if !selector::matches(sel, sm.metadata.labels.as_ref()) {
        return false;
    }
    match &p.spec.service_monitor_namespace_selector {
        None => p.namespace() == sm.namespace(),
        Some(ns_sel) => match c.namespace(sm.namespace()) {
            Some(ns) => selector::matches(ns_sel, ns.metadata.labels.as_ref()),
            None => !c.has(Kind::Namespace),
        },
    }
}

/// Formats a count with thousands separators, for evidence lines.
pub(crate) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Bytes as `12.3 KiB`, `4.5 MiB`.
fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_codes_are_unique_and_in_order() {
        let codes: Vec<_> = RULES.iter().map(|r| r.code).collect();
        let mut sorted = codes.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(codes, sorted);
    }

    #[test]
    fn numbers_are_formatted_for_people() {
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
        assert_eq!(human_bytes(12.0), "12 B");
    }
}
