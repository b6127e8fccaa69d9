//! `role: endpointslice` — one group per discovery.k8s.io/v1 EndpointSlice, one target per endpoint
//! address and port, plus the uncovered container ports of the pods behind it, as
//! prometheus/prometheus `discovery/kubernetes/endpointslice.go` `buildEndpointSlice`.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};

use crate::labels::{
    ADDRESS, NAMESPACE, add_namespace_labels, add_node_labels, add_object_meta_labels, bool_str,
    format_port_unsigned, join_host_port, meta_name, name_of, namespace_of, sanitize_label_name,
    set,
};
use crate::roles::endpoints::resolve_pod_ref;
use crate::roles::pod::{SeenPods, label_matching_container_port};
use crate::roles::service::service_labels;
use crate::target::{
    AttachMetadata, LabelSet, Lookup, OwnerMetadata, SharedGroup, SharedTarget, TargetGroup,
};

/// The label naming a slice's Service (`discoveryv1.LabelServiceName`).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The `source` of an EndpointSlice's group: `endpointslice/<namespace>/<name>`.
pub fn source(namespace: &str, name: &str) -> String {
    format!("endpointslice/{namespace}/{name}")
}

/// The EndpointSlice's target group, without pod-owner metadata.
pub fn group(es: &EndpointSlice, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    group_with_owners(es, lookup, attach, OwnerMetadata::default())
}

/// The EndpointSlice's target group. The Service named by its `kubernetes.io/service-name` label (when
/// known) contributes its labels; the secondary-family slice of a dual-stack Service keeps its group
/// labels but yields no targets, since they would duplicate the primary slice's.
pub fn group_with_owners(
    es: &EndpointSlice,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
    owners: OwnerMetadata,
) -> TargetGroup {
    shared_group(es, lookup, attach, owners).flatten()
}

/// [`group_with_owners`], each pod's labels built once and shared by its targets.
pub fn shared_group(
    es: &EndpointSlice,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
    owners: OwnerMetadata,
) -> SharedGroup {
    let namespace = namespace_of(&es.metadata);
    let mut labels = LabelSet::new();
    set(&mut labels, NAMESPACE, namespace);
    set(
        &mut labels,
        meta_name(&["endpointslice_address_type"]),
        es.address_type.as_str(),
    );
    add_object_meta_labels(&mut labels, &es.metadata, "endpointslice");
    let svc = es
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .and_then(|svc_name| lookup.service(namespace, svc_name));
    if let Some(svc) = svc {
        labels.extend(service_labels(svc));
    }
    if attach.namespace {
        add_namespace_labels(&mut labels, lookup, namespace);
    }
    let mut tg = SharedGroup {
        source: source(namespace, name_of(&es.metadata)),
        targets: Vec::new(),
        labels,
    };
    if non_primary_ip_family_slice(svc, es) {
        return tg;
    }

    let mut seen = SeenPods::default();
    let ports = es.ports.as_deref().unwrap_or_default();
    // NB: a slice without ports yields no targets at all (the port loop is the middle one).
    for ep in &es.endpoints {
        for port in ports {
            for addr in &ep.addresses {
                let mut t = target(addr, ep, port, lookup, attach);
                let Some(pod) = resolve_pod_ref(lookup, ep.target_ref.as_ref()) else {
                    tg.targets.push(SharedTarget { own: t, pod: None });
                    continue;
                };
                let labels = seen.record(pod, port.port, lookup, owners);
                if let Some(p) = port.port {
                    label_matching_container_port(&mut t, pod, p, None);
                }
                tg.targets.push(SharedTarget {
                    own: t,
                    pod: Some(labels),
                });
            }
        }
    }
    tg.targets.extend(seen.uncovered_targets());
    tg
}

/// The endpoint-and-port labels of one address (the first half of `add` in buildEndpointSlice).
fn target(
    addr: &str,
    ep: &Endpoint,
    port: &EndpointPort,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
) -> LabelSet {
    let mut t = LabelSet::new();
    match port.port {
        Some(p) => set(
            &mut t,
            ADDRESS,
            join_host_port(addr, &format_port_unsigned(p)),
        ),
        None => set(&mut t, ADDRESS, addr),
    }
    if let Some(name) = &port.name {
        set(
            &mut t,
            meta_name(&["endpointslice_port_name"]),
            name.as_str(),
        );
    }
    if let Some(protocol) = &port.protocol {
        set(
            &mut t,
            meta_name(&["endpointslice_port_protocol"]),
            protocol.as_str(),
        );
    }
    if let Some(p) = port.port {
        set(
            &mut t,
            meta_name(&["endpointslice_port"]),
            format_port_unsigned(p),
        );
    }
    if let Some(app) = &port.app_protocol {
        set(
            &mut t,
            meta_name(&["endpointslice_port_app_protocol"]),
            app.as_str(),
        );
    }
    let conditions = ep.conditions.as_ref();
    let conds = [
        ("ready", conditions.and_then(|c| c.ready)),
        ("serving", conditions.and_then(|c| c.serving)),
        ("terminating", conditions.and_then(|c| c.terminating)),
    ];
    for (name, value) in conds {
        if let Some(v) = value {
            set(
                &mut t,
                meta_name(&["endpointslice_endpoint_conditions_", name]),
                bool_str(v),
            );
        }
    }
    if let Some(h) = &ep.hostname {
        set(
            &mut t,
            meta_name(&["endpointslice_endpoint_hostname"]),
            h.as_str(),
        );
    }
    if let Some(r) = &ep.target_ref {
        set(
            &mut t,
            meta_name(&["endpointslice_address_target_kind"]),
            r.kind.as_deref().unwrap_or(""),
        );
        set(
            &mut t,
            meta_name(&["endpointslice_address_target_name"]),
            r.name.as_deref().unwrap_or(""),
        );
    }
    if let Some(node) = &ep.node_name {
        set(
            &mut t,
            meta_name(&["endpointslice_endpoint_node_name"]),
            node.as_str(),
        );
    }
    if let Some(zone) = &ep.zone {
        set(
            &mut t,
            meta_name(&["endpointslice_endpoint_zone"]),
            zone.as_str(),
        );
    }
    for (k, v) in ep.deprecated_topology.iter().flatten() {
        let ln = sanitize_label_name(k);
        set(
            &mut t,
            meta_name(&["endpointslice_endpoint_topology_", &*ln]),
            v.as_str(),
        );
        set(
            &mut t,
            meta_name(&["endpointslice_endpoint_topology_present_", &*ln]),
            "true",
        );
    }
    if attach.node {
        // A Node targetRef names the node; otherwise the endpoint's nodeName does.
        let node_ref = ep
            .target_ref
            .as_ref()
            .filter(|r| r.kind.as_deref() == Some("Node"));
        match node_ref {
            Some(r) => add_node_labels(&mut t, lookup, r.name.as_deref().unwrap_or("")),
            None => {
                if let Some(node) = &ep.node_name {
                    add_node_labels(&mut t, lookup, node);
                }
            }
        }
    }
    t
}

/// `nonPrimaryIPFamilySlice`: the slice's address type differs from the first IP family of a
/// `PreferDualStack`/`RequireDualStack` Service.
fn non_primary_ip_family_slice(svc: Option<&Service>, es: &EndpointSlice) -> bool {
    let Some(spec) = svc.and_then(|s| s.spec.as_ref()) else {
        return false;
    };
    match spec.ip_family_policy.as_deref() {
        Some("PreferDualStack" | "RequireDualStack") => {}
        _ => return false,
    }
    match spec.ip_families.as_deref().and_then(|f| f.first()) {
        Some(primary) => es.address_type != *primary,
        None => false,
    }
}

#[cfg(test)]
mod tests;
