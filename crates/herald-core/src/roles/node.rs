//! `role: node` — one group per Node with a single kubelet target, as prometheus/prometheus
//! `discovery/kubernetes/node.go` `buildNode`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use crate::labels::{
    ADDRESS, add_object_meta_labels, join_host_port, meta_name, name_of, sanitize_label_name, set,
};
use crate::target::{AttachMetadata, LabelSet, Lookup, TargetGroup};

/// The `source` of a Node's group: `node/<name>`.
pub fn source(name: &str) -> String {
    format!("node/{name}")
}

/// Address types in the order Prometheus picks the target address from (`nodeAddress`, derived from
/// k8s.io/kubernetes pkg/util/node).
const ADDRESS_PRIORITY: [&str; 6] = [
    "InternalIP",
    "InternalDNS",
    "ExternalIP",
    "ExternalDNS",
    "LegacyHostIP",
    "Hostname",
];

/// The Node's target group. Node metadata needs no lookups and `attach_metadata` does not apply to this
/// role; both parameters exist so every role has the same shape.
///
/// NB: Prometheus sends no group at all for a node without a usable address (it logs "No node address
/// found" and keeps whatever it had). A `TargetGroup` must be returned here, so such a node yields an
/// empty group (source only); use [`try_group`] to tell the two apart.
pub fn group(node: &Node, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    try_group(node, lookup, attach).unwrap_or_else(|| TargetGroup {
        source: source(name_of(&node.metadata)),
        ..TargetGroup::default()
    })
}

/// The Node's target group, or `None` where Prometheus sends nothing (no address of a known type).
pub fn try_group(
    node: &Node,
    _lookup: &dyn Lookup,
    _attach: AttachMetadata,
) -> Option<TargetGroup> {
    let name = name_of(&node.metadata);
    let status = node.status.as_ref();

    let mut by_type: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for a in status
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default()
    {
        by_type
            .entry(a.type_.as_str())
            .or_default()
            .push(a.address.as_str());
    }
    let address = ADDRESS_PRIORITY
        .iter()
        .find_map(|ty| by_type.get(ty).and_then(|v| v.first()))?;
    let kubelet_port = status
        .and_then(|s| s.daemon_endpoints.as_ref())
        .and_then(|d| d.kubelet_endpoint.as_ref())
        .map_or(0, |k| k.port);

    let mut t = LabelSet::new();
    set(
        &mut t,
        ADDRESS,
        join_host_port(address, &kubelet_port.to_string()),
    );
    set(&mut t, "instance", name);
    for (ty, addrs) in &by_type {
        // Only the first address of each type is exported; the whole name is sanitized, type included.
        let ln = sanitize_label_name(&meta_name(&["node_address_", ty]));
        set(&mut t, ln, addrs[0]);
    }

    Some(TargetGroup {
        source: source(name),
        targets: vec![t],
        labels: node_labels(node),
    })
}

/// `nodeLabels`: provider ID, one `node_condition_<type>` per condition (both lower-cased), name,
/// labels and annotations.
fn node_labels(node: &Node) -> LabelSet {
    let mut ls = LabelSet::new();
    set(
        &mut ls,
        meta_name(&["node_provider_id"]),
        node.spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .unwrap_or(""),
    );
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    for c in conditions {
        let ty = sanitize_label_name(&c.type_.to_lowercase());
        set(
            &mut ls,
            meta_name(&["node_condition_", &*ty]),
            c.status.to_lowercase(),
        );
    }
    add_object_meta_labels(&mut ls, &node.metadata, "node");
    ls
}

#[cfg(test)]
mod tests;
