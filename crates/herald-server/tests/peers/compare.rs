//! Comparing discovered targets: the labels left out everywhere (scrape settings, `__meta_url`), how a
//! target is told apart from its neighbours, and a readable report of what differs.

use std::collections::{BTreeMap, BTreeSet};

use super::Labels;

/// Labels that are not discovery's: the scrape config's (`job`, scheme, path, interval, timeout,
/// added by both peers before relabeling) and http_sd's own `__meta_url`.
pub const NOT_DISCOVERY: &[&str] = &[
    "job",
    "__scheme__",
    "__metrics_path__",
    "__scrape_interval__",
    "__scrape_timeout__",
    "__meta_url",
];

/// `t` without the [`NOT_DISCOVERY`] labels and without empty values. NB: to Prometheus an empty
/// label is an absent one (prometheus/prometheus model/labels/labels.go `Builder.Set` deletes a label
/// set to ""), and vmagent writes some labels empty where Prometheus leaves them out (an unnamed
/// port's `_port_name`).
pub fn discovery_only(t: &Labels) -> Labels {
    t.iter()
        .filter(|(k, v)| !NOT_DISCOVERY.contains(&k.as_str()) && !v.is_empty())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Labels that together name one target of any role: its address and the object, container and port
/// behind it.
const IDENTITY: &[&str] = &[
    "__address__",
    "__meta_kubernetes_namespace",
    "__meta_kubernetes_node_name",
    "__meta_kubernetes_pod_name",
    "__meta_kubernetes_pod_container_name",
    "__meta_kubernetes_pod_container_port_name",
    "__meta_kubernetes_service_name",
    "__meta_kubernetes_service_port_name",
    "__meta_kubernetes_endpoints_name",
    "__meta_kubernetes_endpoint_port_name",
    "__meta_kubernetes_endpointslice_name",
    "__meta_kubernetes_endpointslice_port_name",
    "__meta_kubernetes_ingress_name",
    "__meta_kubernetes_ingress_path",
];

/// The identity of a target, as `name=value` pairs of the [`IDENTITY`] labels it has.
pub fn identity(t: &Labels) -> String {
    IDENTITY
        .iter()
        .filter_map(|k| t.get(*k).map(|v| format!("{}={v}", short(k))))
        .collect::<Vec<_>>()
        .join(",")
}

fn short(k: &str) -> &str {
    k.trim_start_matches("__meta_kubernetes_")
}

/// What differs between two lists of targets, side `a` against side `b`, as readable lines; empty
/// when they hold the same targets with the same labels (as multisets).
pub fn differences(a_name: &str, a: &[Labels], b_name: &str, b: &[Labels]) -> Vec<String> {
    let count = |list: &[Labels]| {
        let mut m: BTreeMap<Labels, usize> = BTreeMap::new();
        for t in list {
            *m.entry(t.clone()).or_default() += 1;
        }
        m
    };
    let (ca, cb) = (count(a), count(b));
    if ca == cb {
        return Vec::new();
    }
    let only = |x: &BTreeMap<Labels, usize>, y: &BTreeMap<Labels, usize>| -> Vec<Labels> {
        x.iter()
            .flat_map(|(t, n)| {
                let extra = n.saturating_sub(*y.get(t).unwrap_or(&0));
                std::iter::repeat_n(t.clone(), extra)
            })
            .collect()
    };
    let (oa, ob) = (only(&ca, &cb), only(&cb, &ca));
    let mut by_id: BTreeMap<String, (Vec<&Labels>, Vec<&Labels>)> = BTreeMap::new();
    for t in &oa {
        by_id.entry(identity(t)).or_default().0.push(t);
    }
    for t in &ob {
        by_id.entry(identity(t)).or_default().1.push(t);
    }
    let mut out = vec![format!(
        "{a_name} lists {} targets, {b_name} {}; {} of {a_name}'s and {} of {b_name}'s have no equal on the other side",
        a.len(),
        b.len(),
        oa.len(),
        ob.len()
    )];
    for (id, (xs, ys)) in by_id {
        match (xs.as_slice(), ys.as_slice()) {
            ([x], [y]) => {
                let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                let d: Vec<String> = keys
                    .into_iter()
                    .filter(|k| x.get(*k) != y.get(*k))
                    .map(|k| {
                        format!(
                            "{}: {a_name}={:?} {b_name}={:?}",
                            short(k),
                            x.get(k),
                            y.get(k)
                        )
                    })
                    .collect();
                let more = d.len().saturating_sub(6);
                let tail = if more > 0 {
                    format!("; and {more} more")
                } else {
                    String::new()
                };
                out.push(format!("  [{id}] {}{tail}", d[..d.len().min(6)].join("; ")));
            }
            _ => out.push(format!(
                "  [{id}] {} on {a_name} only, {} on {b_name} only",
                xs.len(),
                ys.len(),
            )),
        }
    }
    out
}

/// Targets grouped by their `job` label, reduced to discovery's labels and sorted.
pub fn by_job(list: impl IntoIterator<Item = Labels>) -> BTreeMap<String, Vec<Labels>> {
    let mut m: BTreeMap<String, Vec<Labels>> = BTreeMap::new();
    for t in list {
        let j = t.get("job").cloned().unwrap_or_default();
        m.entry(j).or_default().push(discovery_only(&t));
    }
    for v in m.values_mut() {
        v.sort();
    }
    m
}
