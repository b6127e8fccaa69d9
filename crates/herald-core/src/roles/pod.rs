//! `role: pod` — one group per pod, one target per container port (or per port-less container), as
//! prometheus/prometheus `discovery/kubernetes/pod.go` `buildPod`.

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};

use crate::labels::{
    ADDRESS, NAMESPACE, add_namespace_labels, add_node_labels, add_object_meta_labels, bool_str,
    controller_of, format_port_unsigned, join_host_port, meta_name, namespace_of,
    namespaced_source, set,
};
use std::sync::Arc;

use crate::target::{
    AttachMetadata, LabelSet, Lookup, OwnerMetadata, SharedGroup, SharedTarget, TargetGroup,
};

pub(crate) const CONTAINER_NAME: &str = "__meta_kubernetes_pod_container_name";
pub(crate) const CONTAINER_ID: &str = "__meta_kubernetes_pod_container_id";
pub(crate) const CONTAINER_IMAGE: &str = "__meta_kubernetes_pod_container_image";
pub(crate) const CONTAINER_PORT_NAME: &str = "__meta_kubernetes_pod_container_port_name";
pub(crate) const CONTAINER_PORT_NUMBER: &str = "__meta_kubernetes_pod_container_port_number";
pub(crate) const CONTAINER_PORT_PROTOCOL: &str = "__meta_kubernetes_pod_container_port_protocol";
pub(crate) const CONTAINER_INIT: &str = "__meta_kubernetes_pod_container_init";

/// The `source` of a pod's group: `pod/<namespace>/<name>`. A deleted pod is announced as an empty group
/// with this source.
pub fn source(namespace: &str, name: &str) -> String {
    format!("pod/{namespace}/{name}")
}

/// The pod's target group, without pod-owner metadata.
pub fn group(pod: &Pod, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    group_with_owners(pod, lookup, attach, OwnerMetadata::default())
}

/// The pod's target group. Empty (source only) while the pod has no IP, and — with
/// `attach_metadata.node` — while its node is unknown, because Prometheus treats a node missing from
/// its node informer as filtered out by node selectors.
pub fn group_with_owners(
    pod: &Pod,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
    owners: OwnerMetadata,
) -> TargetGroup {
    let (shared, pod_labels) = build(pod, lookup, attach, owners);
    let mut labels = shared.labels;
    if let Some(pod_labels) = pod_labels {
        // The pod's labels and the group's others never share a name.
        labels.extend(pod_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    TargetGroup {
        source: shared.source,
        targets: shared.targets.into_iter().map(|t| t.own).collect(),
        labels,
    }
}

/// The pod's target group with the pod's labels (`podLabels`) shared by its targets instead of set
/// on the group: what Prometheus serves is the same (each target carries its group's labels), and
/// the pod's labels are the very ones the endpoints roles give the pod's endpoint targets, so a
/// store can build and intern them once for both ([`Lookup::memo_pod_labels`]).
pub fn shared_group_with_owners(
    pod: &Pod,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
    owners: OwnerMetadata,
) -> SharedGroup {
    build(pod, lookup, attach, owners).0
}

/// The shared group and the pod's labels (which a group without targets still has).
fn build(
    pod: &Pod,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
    owners: OwnerMetadata,
) -> (SharedGroup, Option<Arc<LabelSet>>) {
    let mut tg = SharedGroup {
        source: namespaced_source("pod", &pod.metadata),
        ..SharedGroup::default()
    };
    let pod_ip = pod_ip(pod);
    if pod_ip.is_empty() {
        return (tg, None);
    }
    let node_name = node_name(pod);
    if attach.node && lookup.node(node_name).is_none() {
        return (tg, None);
    }

    let pod_labels = shared_pod_labels(pod, lookup, owners);
    let namespace = namespace_of(&pod.metadata);
    set(&mut tg.labels, NAMESPACE, namespace);
    if attach.node {
        add_node_labels(&mut tg.labels, lookup, node_name);
    }
    if attach.namespace {
        add_namespace_labels(&mut tg.labels, lookup, namespace);
    }
    let target = |own: LabelSet| SharedTarget {
        own,
        pod: Some(pod_labels.clone()),
    };
    let status = pod.status.as_ref();
    for (c, is_init) in containers(pod) {
        let statuses = status.and_then(|s| {
            if is_init {
                s.init_container_statuses.as_deref()
            } else {
                s.container_statuses.as_deref()
            }
        });
        let id = container_id(statuses.unwrap_or_default(), &c.name);
        let ports = c.ports.as_deref().unwrap_or_default();
        if ports.is_empty() {
            // A container without ports still yields one target on the bare pod IP; the user adds a
            // port by relabeling.
            let mut t = LabelSet::new();
            set(&mut t, ADDRESS, pod_ip);
            set(&mut t, CONTAINER_NAME, c.name.as_str());
            set(&mut t, CONTAINER_ID, id);
            set(&mut t, CONTAINER_IMAGE, c.image.as_deref().unwrap_or(""));
            set(&mut t, CONTAINER_INIT, bool_str(is_init));
            tg.targets.push(target(t));
            continue;
        }
        for port in ports {
            let number = format_port_unsigned(port.container_port);
            let mut t = LabelSet::new();
            set(&mut t, ADDRESS, join_host_port(pod_ip, &number));
            set(&mut t, CONTAINER_NAME, c.name.as_str());
            set(&mut t, CONTAINER_ID, id);
            set(&mut t, CONTAINER_IMAGE, c.image.as_deref().unwrap_or(""));
            set(&mut t, CONTAINER_PORT_NUMBER, number);
            set(
                &mut t,
                CONTAINER_PORT_NAME,
                port.name.as_deref().unwrap_or(""),
            );
            set(
                &mut t,
                CONTAINER_PORT_PROTOCOL,
                port.protocol.as_deref().unwrap_or(""),
            );
            set(&mut t, CONTAINER_INIT, bool_str(is_init));
            tg.targets.push(target(t));
        }
    }
    (tg, Some(pod_labels))
}

/// `status.podIP`, empty while unset.
pub(crate) fn pod_ip(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .unwrap_or("")
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Regular containers, then init containers, each with whether it is an init container — the order
/// Prometheus walks them in (`append(pod.Spec.Containers, pod.Spec.InitContainers...)`).
pub(crate) fn containers(pod: &Pod) -> impl Iterator<Item = (&Container, bool)> {
    let spec = pod.spec.as_ref();
    let regular = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    let init = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    regular
        .iter()
        .map(|c| (c, false))
        .chain(init.iter().map(|c| (c, true)))
}

fn container_id<'a>(statuses: &'a [ContainerStatus], name: &str) -> &'a str {
    statuses
        .iter()
        .find(|s| s.name == name)
        .and_then(|s| s.container_id.as_deref())
        .unwrap_or("")
}

/// `podReady`: the lower-cased status of the `Ready` condition, `unknown` without one.
fn pod_ready(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.to_lowercase())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `podLabels`, shared: kept by the lookup (`Lookup::memo_pod_labels`) when they read nothing but the
/// pod, which they do unless pod-owner metadata sends them looking up ReplicaSets and Jobs.
fn shared_pod_labels(pod: &Pod, lookup: &dyn Lookup, owners: OwnerMetadata) -> Arc<LabelSet> {
    if owners == OwnerMetadata::default() {
        lookup.memo_pod_labels(pod, &|| pod_labels(pod, lookup, owners))
    } else {
        Arc::new(pod_labels(pod, lookup, owners))
    }
}

/// `podLabels`: the pod-level labels the pod role puts on the group and the endpoints roles put on
/// each pod-backed target.
pub(crate) fn pod_labels(pod: &Pod, lookup: &dyn Lookup, owners: OwnerMetadata) -> LabelSet {
    let status = pod.status.as_ref();
    let mut ls = LabelSet::new();
    set(&mut ls, meta_name(&["pod_ip"]), pod_ip(pod));
    set(&mut ls, meta_name(&["pod_ready"]), pod_ready(pod));
    set(
        &mut ls,
        meta_name(&["pod_phase"]),
        status.and_then(|s| s.phase.as_deref()).unwrap_or(""),
    );
    set(&mut ls, meta_name(&["pod_node_name"]), node_name(pod));
    set(
        &mut ls,
        meta_name(&["pod_host_ip"]),
        status.and_then(|s| s.host_ip.as_deref()).unwrap_or(""),
    );
    set(
        &mut ls,
        meta_name(&["pod_uid"]),
        pod.metadata.uid.as_deref().unwrap_or(""),
    );
    add_object_meta_labels(&mut ls, &pod.metadata, "pod");

    let Some(owner) = controller_of(&pod.metadata) else {
        return ls;
    };
    if !owner.kind.is_empty() {
        set(
            &mut ls,
            meta_name(&["pod_controller_kind"]),
            owner.kind.as_str(),
        );
    }
    if !owner.name.is_empty() {
        set(
            &mut ls,
            meta_name(&["pod_controller_name"]),
            owner.name.as_str(),
        );
    }
    let namespace = namespace_of(&pod.metadata);
    match owner.kind.as_str() {
        "ReplicaSet" if owners.deployment => {
            let deployment = lookup
                .replica_set(namespace, &owner.name)
                .and_then(|rs| controller_of(&rs.metadata))
                .filter(|o| o.kind == "Deployment");
            if let Some(d) = deployment {
                set(
                    &mut ls,
                    meta_name(&["pod_deployment_name"]),
                    d.name.as_str(),
                );
            }
        }
        "Job" => {
            if owners.job {
                set(&mut ls, meta_name(&["pod_job_name"]), owner.name.as_str());
            }
            if owners.cronjob {
                let cronjob = lookup
                    .job(namespace, &owner.name)
                    .and_then(|j| controller_of(&j.metadata))
                    .filter(|o| o.kind == "CronJob");
                if let Some(cj) = cronjob {
                    set(&mut ls, meta_name(&["pod_cronjob_name"]), cj.name.as_str());
                }
            }
        }
        _ => {}
    }
    ls
}

/// Pods met while walking an Endpoints or EndpointSlice object, in first-seen order, with the ports
/// that already produced a target (the `seenPods` map of endpoints.go / endpointslice.go).
/// NB: Prometheus iterates a Go map here, so its order of the extra targets across several pods is
/// random; first-seen order is one of its possible outputs and is stable.
/// Each pod's labels are built once per group and shared by its targets (`SharedTarget`).
#[derive(Default)]
pub(crate) struct SeenPods<'a> {
    entries: Vec<Seen<'a>>,
}

struct Seen<'a> {
    pod: &'a Pod,
    /// Endpoint ports that produced a target for the pod.
    ports: Vec<i32>,
    labels: Arc<LabelSet>,
}

impl<'a> SeenPods<'a> {
    fn entry(&mut self, pod: &'a Pod, lookup: &dyn Lookup, owners: OwnerMetadata) -> &mut Seen<'a> {
        let idx = match self.entries.iter().position(|s| {
            std::ptr::eq(s.pod, pod)
                || (s.pod.metadata.namespace == pod.metadata.namespace
                    && s.pod.metadata.name == pod.metadata.name)
        }) {
            Some(i) => i,
            None => {
                self.entries.push(Seen {
                    pod,
                    ports: Vec::new(),
                    labels: shared_pod_labels(pod, lookup, owners),
                });
                self.entries.len() - 1
            }
        };
        &mut self.entries[idx]
    }

    /// Record that `port` (when it has a number) produced a target for `pod`; returns the pod's
    /// labels.
    pub(crate) fn record(
        &mut self,
        pod: &'a Pod,
        port: Option<i32>,
        lookup: &dyn Lookup,
        owners: OwnerMetadata,
    ) -> Arc<LabelSet> {
        let seen = self.entry(pod, lookup, owners);
        if let Some(port) = port {
            seen.ports.push(port);
        }
        seen.labels.clone()
    }

    /// One target per container port of a seen pod not covered by an endpoint port, with the pod's
    /// labels; pods without an IP are skipped (starting or evicted).
    pub(crate) fn uncovered_targets(&self) -> Vec<SharedTarget> {
        let mut out = Vec::new();
        for Seen {
            pod,
            ports: seen,
            labels,
        } in &self.entries
        {
            let ip = pod_ip(pod);
            if ip.is_empty() {
                continue;
            }
            for (c, is_init) in containers(pod) {
                for cport in c.ports.as_deref().unwrap_or_default() {
                    if seen.contains(&cport.container_port) {
                        continue;
                    }
                    let number = format_port_unsigned(cport.container_port);
                    let mut t = LabelSet::new();
                    set(&mut t, ADDRESS, join_host_port(ip, &number));
                    set(&mut t, CONTAINER_NAME, c.name.as_str());
                    set(&mut t, CONTAINER_IMAGE, c.image.as_deref().unwrap_or(""));
                    set(
                        &mut t,
                        CONTAINER_PORT_NAME,
                        cport.name.as_deref().unwrap_or(""),
                    );
                    set(&mut t, CONTAINER_PORT_NUMBER, number);
                    set(
                        &mut t,
                        CONTAINER_PORT_PROTOCOL,
                        cport.protocol.as_deref().unwrap_or(""),
                    );
                    set(&mut t, CONTAINER_INIT, bool_str(is_init));
                    out.push(SharedTarget {
                        own: t,
                        pod: Some(labels.clone()),
                    });
                }
            }
        }
        out
    }
}

/// Label `target` with the container port of `pod` numbered `port`: walking regular then init
/// containers, each container's first such port, the last matching container winning.
/// `endpoint_protocol` is what lands in `pod_container_port_protocol` when given (the endpoints role
/// passes the endpoint port's protocol); without it (endpointslice role) the container port's is used.
pub(crate) fn label_matching_container_port(
    target: &mut LabelSet,
    pod: &Pod,
    port: i32,
    endpoint_protocol: Option<&str>,
) {
    for (c, is_init) in containers(pod) {
        let Some(cport) = c
            .ports
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|cp| cp.container_port == port)
        else {
            continue;
        };
        let protocol = match endpoint_protocol {
            Some(p) => p,
            None => cport.protocol.as_deref().unwrap_or(""),
        };
        set(target, CONTAINER_NAME, c.name.as_str());
        set(target, CONTAINER_IMAGE, c.image.as_deref().unwrap_or(""));
        set(
            target,
            CONTAINER_PORT_NAME,
            cport.name.as_deref().unwrap_or(""),
        );
        set(target, CONTAINER_PORT_NUMBER, format_port_unsigned(port));
        set(target, CONTAINER_PORT_PROTOCOL, protocol);
        set(target, CONTAINER_INIT, bool_str(is_init));
        // NB: Prometheus's `break` leaves only the inner loop, so a later container with the same
        // port would overwrite these labels; the last match wins, as here by not returning.
    }
}

#[cfg(test)]
mod tests;
