//! `role: ingress` — one group per Ingress, one target per rule path, as prometheus/prometheus
//! `discovery/kubernetes/ingress.go` `buildIngress`.

use k8s_openapi::api::networking::v1::{Ingress, IngressRule};

use crate::labels::{
    ADDRESS, NAMESPACE, add_namespace_labels, add_object_meta_labels, meta_name, namespace_of,
    namespaced_source, set,
};
use crate::target::{AttachMetadata, LabelSet, Lookup, TargetGroup};

/// The `source` of an Ingress's group: `ingress/<namespace>/<name>`.
pub fn source(namespace: &str, name: &str) -> String {
    format!("ingress/{namespace}/{name}")
}

/// The Ingress's target group.
pub fn group(ing: &Ingress, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    let namespace = namespace_of(&ing.metadata);
    let spec = ing.spec.as_ref();
    let mut labels = LabelSet::new();
    set(&mut labels, NAMESPACE, namespace);
    if let Some(class) = spec.and_then(|s| s.ingress_class_name.as_deref()) {
        set(&mut labels, meta_name(&["ingress_class_name"]), class);
    }
    add_object_meta_labels(&mut labels, &ing.metadata, "ingress");
    if attach.namespace {
        add_namespace_labels(&mut labels, lookup, namespace);
    }
    let mut tg = TargetGroup {
        source: namespaced_source("ingress", &ing.metadata),
        targets: Vec::new(),
        labels,
    };

    let tls_hosts: Vec<&str> = spec
        .and_then(|s| s.tls.as_deref())
        .unwrap_or_default()
        .iter()
        .flat_map(|t| t.hosts.as_deref().unwrap_or_default())
        .map(String::as_str)
        .collect();
    for rule in spec.and_then(|s| s.rules.as_deref()).unwrap_or_default() {
        let host = rule.host.as_deref().unwrap_or("");
        let scheme = if tls_hosts.iter().any(|p| matches_hostname_pattern(p, host)) {
            "https"
        } else {
            "http"
        };
        for path in rule_paths(rule) {
            let mut t = LabelSet::new();
            set(&mut t, ADDRESS, host);
            set(&mut t, meta_name(&["ingress_scheme"]), scheme);
            set(&mut t, meta_name(&["ingress_host"]), host);
            set(&mut t, meta_name(&["ingress_path"]), path);
            tg.targets.push(t);
        }
    }
    tg
}

/// `pathsFromIngressPaths(rulePaths(rule))`: a rule without `http` counts as the single path `/`; a rule
/// with `http` but no paths yields no target; an empty path reads as `/`.
fn rule_paths(rule: &IngressRule) -> Vec<&str> {
    match &rule.http {
        None => vec!["/"],
        Some(http) => http
            .paths
            .iter()
            .map(|p| match p.path.as_deref() {
                None | Some("") => "/",
                Some(path) => path,
            })
            .collect(),
    }
}

/// `matchesHostnamePattern`: equal, or a `*.`-wildcard pattern with as many labels as the host whose
/// labels after the first all match.
fn matches_hostname_pattern(pattern: &str, host: &str) -> bool {
    if pattern == host {
        return true;
    }
    let pattern_parts: Vec<&str> = pattern.split('.').collect();
    let host_parts: Vec<&str> = host.split('.').collect();
    if pattern_parts[0] != "*" || pattern_parts.len() != host_parts.len() {
        return false;
    }
    pattern_parts[1..] == host_parts[1..]
}

#[cfg(test)]
mod tests;
