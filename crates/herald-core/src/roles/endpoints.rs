//! `role: endpoints` — one group per v1 Endpoints object, one target per address and port, plus the
//! uncovered container ports of the pods behind it, as prometheus/prometheus
//! `discovery/kubernetes/endpoints.go` `buildEndpoints`.

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, Endpoints, ObjectReference, Pod};

use crate::labels::{
    ADDRESS, NAMESPACE, add_namespace_labels, add_node_labels, add_object_meta_labels,
    format_port_unsigned, join_host_port, meta_name, name_of, namespace_of, set,
};
use crate::roles::pod::{SeenPods, label_matching_container_port};
use crate::roles::service::service_labels;
use crate::target::{
    AttachMetadata, LabelSet, Lookup, OwnerMetadata, SharedGroup, SharedTarget, TargetGroup,
};

/// The `source` of an Endpoints object's group: `endpoints/<namespace>/<name>`.
pub fn source(namespace: &str, name: &str) -> String {
    format!("endpoints/{namespace}/{name}")
}

/// The Endpoints object's target group, without pod-owner metadata.
pub fn group(ep: &Endpoints, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    group_with_owners(ep, lookup, attach, OwnerMetadata::default())
}

/// The Endpoints object's target group. The Service of the same name (when known) contributes its
/// labels to the group; addresses whose `targetRef` is a known Pod get the pod's labels.
pub fn group_with_owners(
    ep: &Endpoints,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
    owners: OwnerMetadata,
) -> TargetGroup {
    shared_group(ep, lookup, attach, owners).flatten()
}

/// [`group_with_owners`], each pod's labels built once and shared by its targets.
pub fn shared_group(
    ep: &Endpoints,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
    owners: OwnerMetadata,
) -> SharedGroup {
    let namespace = namespace_of(&ep.metadata);
    let name = name_of(&ep.metadata);
    let mut labels = LabelSet::new();
    set(&mut labels, NAMESPACE, namespace);
    if let Some(svc) = lookup.service(namespace, name) {
        labels.extend(service_labels(svc));
    }
    add_object_meta_labels(&mut labels, &ep.metadata, "endpoints");
    if attach.namespace {
        add_namespace_labels(&mut labels, lookup, namespace);
    }
    let mut tg = SharedGroup {
        source: source(namespace, name),
        targets: Vec::new(),
        labels,
    };

    let mut seen = SeenPods::default();
    for subset in ep.subsets.as_deref().unwrap_or_default() {
        for port in subset.ports.as_deref().unwrap_or_default() {
            for addr in subset.addresses.as_deref().unwrap_or_default() {
                add(
                    &mut tg, &mut seen, lookup, attach, owners, addr, port, "true",
                );
            }
            // The same address may be listed again as not ready; its second target carries
            // `ready=false`, exactly as Prometheus emits both.
            for addr in subset.not_ready_addresses.as_deref().unwrap_or_default() {
                add(
                    &mut tg, &mut seen, lookup, attach, owners, addr, port, "false",
                );
            }
        }
    }
    tg.targets.extend(seen.uncovered_targets());
    tg
}

#[allow(clippy::too_many_arguments)] // mirrors the closure in buildEndpoints, which captures these
fn add<'a>(
    tg: &mut SharedGroup,
    seen: &mut SeenPods<'a>,
    lookup: &'a dyn Lookup,
    attach: AttachMetadata,
    owners: OwnerMetadata,
    addr: &EndpointAddress,
    port: &EndpointPort,
    ready: &str,
) {
    let mut t = LabelSet::new();
    set(
        &mut t,
        ADDRESS,
        join_host_port(&addr.ip, &format_port_unsigned(port.port)),
    );
    set(
        &mut t,
        meta_name(&["endpoint_port_name"]),
        port.name.as_deref().unwrap_or(""),
    );
    set(
        &mut t,
        meta_name(&["endpoint_port_protocol"]),
        port.protocol.as_deref().unwrap_or(""),
    );
    set(&mut t, meta_name(&["endpoint_ready"]), ready);
    if let Some(r) = &addr.target_ref {
        set(
            &mut t,
            meta_name(&["endpoint_address_target_kind"]),
            r.kind.as_deref().unwrap_or(""),
        );
        set(
            &mut t,
            meta_name(&["endpoint_address_target_name"]),
            r.name.as_deref().unwrap_or(""),
        );
    }
    if let Some(node) = &addr.node_name {
        set(&mut t, meta_name(&["endpoint_node_name"]), node.as_str());
    }
    if let Some(h) = addr.hostname.as_deref().filter(|h| !h.is_empty()) {
        set(&mut t, meta_name(&["endpoint_hostname"]), h);
    }
    if attach.node {
        if let Some(node) = &addr.node_name {
            add_node_labels(&mut t, lookup, node);
        } else if let Some(r) = addr
            .target_ref
            .as_ref()
            .filter(|r| r.kind.as_deref() == Some("Node"))
        {
            add_node_labels(&mut t, lookup, r.name.as_deref().unwrap_or(""));
        }
    }

    let Some(pod) = resolve_pod_ref(lookup, addr.target_ref.as_ref()) else {
        tg.targets.push(SharedTarget { own: t, pod: None });
        return;
    };
    let labels = seen.record(pod, Some(port.port), lookup, owners);
    label_matching_container_port(
        &mut t,
        pod,
        port.port,
        Some(port.protocol.as_deref().unwrap_or("")),
    );
    tg.targets.push(SharedTarget {
        own: t,
        pod: Some(labels),
    });
}

/// `resolvePodRef`: the Pod a `targetRef` of kind `Pod` names, when known.
pub(crate) fn resolve_pod_ref<'a>(
    lookup: &'a dyn Lookup,
    r: Option<&ObjectReference>,
) -> Option<&'a Pod> {
    let r = r.filter(|r| r.kind.as_deref() == Some("Pod"))?;
    lookup.pod(
        r.namespace.as_deref().unwrap_or(""),
        r.name.as_deref().unwrap_or(""),
    )
}

#[cfg(test)]
mod tests;
