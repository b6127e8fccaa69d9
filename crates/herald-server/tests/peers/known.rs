//! Where vmagent 1.79's kubernetes_sd and current Prometheus's differ, and herald follows Prometheus:
//! each difference with the prometheus/prometheus source that decides it (as of the commit
//! herald-core's `lib.rs` names). The label comparison removes exactly these differences and asserts
//! everything else is equal; a listed difference that no target shows fails the test, so the list
//! cannot rot.

use std::collections::BTreeMap;

use super::Labels;
use super::compare::identity;

const M: &str = "__meta_kubernetes_";

/// Which of a role's targets a difference concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Every,
    /// The extra targets of the endpoints roles: a container port of a pod behind the object that no
    /// endpoint port covers (`seenPods` in endpoints.go / endpointslice.go).
    Uncovered,
}

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Prometheus sets the labels starting with this name; vmagent 1.79 does not.
    PrometheusOnly(&'static str, Scope),
    /// vmagent 1.79 sets the labels starting with this name; Prometheus does not.
    VmagentOnly(&'static str, Scope),
    /// Both set the label, with different values.
    Value(&'static str),
    /// Prometheus lists these targets; vmagent 1.79 does not.
    PrometheusTargets(&'static str, fn(&Labels) -> bool),
}

#[derive(Debug, Clone, Copy)]
pub struct Known {
    pub role: &'static str,
    pub kind: Kind,
    /// The prometheus/prometheus file and function that decide Prometheus's behaviour.
    pub source: &'static str,
    pub why: &'static str,
}

fn has_prefix(t: &Labels, prefix: &str) -> bool {
    t.keys().any(|k| k.starts_with(prefix))
}

/// An endpoints-role target made for a container port no endpoint port covers: it has none of the
/// per-address labels.
pub fn uncovered_endpoints(t: &Labels) -> bool {
    !has_prefix(t, &format!("{M}endpoint_"))
}

/// An endpointslice-role target made for a container port no endpoint port covers.
pub fn uncovered_endpointslice(t: &Labels) -> bool {
    !has_prefix(t, &format!("{M}endpointslice_endpoint_"))
        && !has_prefix(t, &format!("{M}endpointslice_port"))
        && !has_prefix(t, &format!("{M}endpointslice_address_target_"))
}

fn uncovered_init_port(t: &Labels, uncovered: fn(&Labels) -> bool) -> bool {
    uncovered(t) && t.get(&format!("{M}pod_container_init")).map(String::as_str) == Some("true")
}

pub fn in_scope(role: &str, scope: Scope, t: &Labels) -> bool {
    match (scope, role) {
        (Scope::Every, _) => true,
        (Scope::Uncovered, "endpoints") => uncovered_endpoints(t),
        (Scope::Uncovered, "endpointslice") => uncovered_endpointslice(t),
        (Scope::Uncovered, _) => false,
    }
}

/// Every known difference, by role.
pub const KNOWN: &[Known] = &[
    Known {
        role: "node",
        kind: Kind::PrometheusOnly("__meta_kubernetes_node_condition_", Scope::Every),
        source: "discovery/kubernetes/node.go nodeLabels",
        why: "Prometheus exports each node condition as `_node_condition_<type>` (lower-cased status); \
              vmagent 1.79 has no such labels",
    },
    Known {
        role: "pod",
        kind: Kind::PrometheusOnly("__meta_kubernetes_pod_container_image", Scope::Every),
        source: "discovery/kubernetes/pod.go buildPod",
        why: "the container's image; vmagent 1.79 does not set it",
    },
    Known {
        role: "pod",
        kind: Kind::PrometheusOnly("__meta_kubernetes_pod_container_id", Scope::Every),
        source: "discovery/kubernetes/pod.go buildPod (findPodContainerID)",
        why: "the container's ID from status.containerStatuses; vmagent 1.79 does not set it",
    },
    Known {
        role: "service",
        kind: Kind::PrometheusOnly("__meta_kubernetes_service_port_number", Scope::Every),
        source: "discovery/kubernetes/service.go buildService",
        why: "the Service port's number; vmagent 1.79 does not set it",
    },
    Known {
        role: "service",
        kind: Kind::PrometheusOnly("__meta_kubernetes_service_loadbalancer_ip", Scope::Every),
        source: "discovery/kubernetes/service.go buildService (loadBalancerIPs)",
        why: "a LoadBalancer Service's status.loadBalancer.ingress IPs, comma-joined (else the \
              deprecated spec.loadBalancerIP); vmagent 1.79 does not set it",
    },
    // endpoints
    Known {
        role: "endpoints",
        kind: Kind::PrometheusOnly("__meta_kubernetes_pod_container_image", Scope::Every),
        source: "discovery/kubernetes/endpoints.go buildEndpoints",
        why: "the matched (or uncovered) container's image",
    },
    Known {
        role: "endpoints",
        kind: Kind::PrometheusOnly("__meta_kubernetes_pod_container_init", Scope::Every),
        source: "discovery/kubernetes/endpoints.go buildEndpoints",
        why: "whether the matched (or uncovered) container is an init container; vmagent 1.79 sets \
              it only in the pod role",
    },
    Known {
        role: "endpoints",
        kind: Kind::Value("__meta_kubernetes_pod_container_port_protocol"),
        source: "discovery/kubernetes/endpoints.go buildEndpoints",
        why: "on an address whose port matches a container port by number, Prometheus writes the \
              endpoint port's protocol, vmagent the container port's (kube-dns: endpoint port dns-tcp \
              TCP matches the coredns container's first port 53, dns UDP)",
    },
    Known {
        role: "endpoints",
        kind: Kind::VmagentOnly("__meta_kubernetes_service_cluster_ip", Scope::Every),
        source: "discovery/kubernetes/endpoints.go addServiceLabels -> service.go serviceLabels",
        why: "Prometheus copies only the Service's name, labels and annotations into the endpoints \
              roles; vmagent 1.79 also its cluster IP",
    },
    Known {
        role: "endpoints",
        kind: Kind::VmagentOnly("__meta_kubernetes_service_type", Scope::Every),
        source: "discovery/kubernetes/endpoints.go addServiceLabels -> service.go serviceLabels",
        why: "as for the cluster IP: the Service type is a service-role label only in Prometheus",
    },
    Known {
        role: "endpoints",
        kind: Kind::PrometheusOnly("__meta_kubernetes_endpoints_", Scope::Uncovered),
        source: "discovery/kubernetes/endpoints.go buildEndpoints",
        why: "the Endpoints object's name, labels and annotations are group labels in Prometheus, so \
              they reach the uncovered-port targets too; vmagent 1.79 puts them on address targets only",
    },
    Known {
        role: "endpoints",
        kind: Kind::VmagentOnly("__meta_kubernetes_node_", Scope::Uncovered),
        source: "discovery/kubernetes/endpoints.go buildEndpoints",
        why: "with `attach_metadata: {node: true}` Prometheus adds the node's labels to address \
              targets only (`addNodeLabels` in the per-address `add`); vmagent 1.79 also to the \
              uncovered-port targets, from the pod's node",
    },
    Known {
        role: "endpoints",
        kind: Kind::PrometheusTargets("an uncovered port of an init (sidecar) container", |t| {
            uncovered_init_port(t, uncovered_endpoints)
        }),
        source: "discovery/kubernetes/endpoints.go buildEndpoints \
                 (`append(pe.pod.Spec.Containers, pe.pod.Spec.InitContainers...)`)",
        why: "Prometheus walks init containers (native sidecars with ports) for uncovered ports; \
              vmagent 1.79 only spec.containers",
    },
    // endpointslice
    Known {
        role: "endpointslice",
        kind: Kind::PrometheusOnly(
            "__meta_kubernetes_endpointslice_endpoint_conditions_serving",
            Scope::Every,
        ),
        source: "discovery/kubernetes/endpointslice.go buildEndpointSlice",
        why: "the endpoint's serving condition; vmagent 1.79 reads only ready",
    },
    Known {
        role: "endpointslice",
        kind: Kind::PrometheusOnly(
            "__meta_kubernetes_endpointslice_endpoint_conditions_terminating",
            Scope::Every,
        ),
        source: "discovery/kubernetes/endpointslice.go buildEndpointSlice",
        why: "the endpoint's terminating condition; vmagent 1.79 reads only ready",
    },
    Known {
        role: "endpointslice",
        kind: Kind::PrometheusOnly(
            "__meta_kubernetes_endpointslice_endpoint_node_name",
            Scope::Every,
        ),
        source: "discovery/kubernetes/endpointslice.go buildEndpointSlice",
        why: "the endpoint's nodeName; vmagent 1.79 does not read it",
    },
    Known {
        role: "endpointslice",
        kind: Kind::PrometheusOnly(
            "__meta_kubernetes_endpointslice_endpoint_zone",
            Scope::Every,
        ),
        source: "discovery/kubernetes/endpointslice.go buildEndpointSlice",
        why: "the endpoint's zone (discovery/v1); vmagent 1.79 reads only the v1beta1 topology map",
    },
    Known {
        role: "endpointslice",
        kind: Kind::PrometheusOnly("__meta_kubernetes_pod_container_image", Scope::Every),
        source: "discovery/kubernetes/endpointslice.go buildEndpointSlice",
        why: "the matched (or uncovered) container's image",
    },
    Known {
        role: "endpointslice",
        kind: Kind::PrometheusOnly("__meta_kubernetes_pod_container_init", Scope::Every),
        source: "discovery/kubernetes/endpointslice.go buildEndpointSlice",
        why: "whether the matched (or uncovered) container is an init container",
    },
    Known {
        role: "endpointslice",
        kind: Kind::VmagentOnly("__meta_kubernetes_service_cluster_ip", Scope::Every),
        source: "discovery/kubernetes/endpointslice.go addServiceLabels -> service.go serviceLabels",
        why: "Prometheus copies only the Service's name, labels and annotations",
    },
    Known {
        role: "endpointslice",
        kind: Kind::VmagentOnly("__meta_kubernetes_service_type", Scope::Every),
        source: "discovery/kubernetes/endpointslice.go addServiceLabels -> service.go serviceLabels",
        why: "Prometheus copies only the Service's name, labels and annotations",
    },
    Known {
        role: "endpointslice",
        kind: Kind::PrometheusOnly("__meta_kubernetes_endpointslice_", Scope::Uncovered),
        source: "discovery/kubernetes/endpointslice.go buildEndpointSlice",
        why: "the slice's name, address type, labels and annotations are group labels in Prometheus, \
              so they reach the uncovered-port targets too; vmagent 1.79 puts them on endpoint targets \
              only",
    },
    Known {
        role: "endpointslice",
        kind: Kind::VmagentOnly("__meta_kubernetes_node_", Scope::Uncovered),
        source: "discovery/kubernetes/endpointslice.go buildEndpointSlice",
        why: "with `attach_metadata: {node: true}` Prometheus adds the node's labels to address \
              targets only (`addNodeLabels` in the per-address `add`); vmagent 1.79 also to the \
              uncovered-port targets, from the pod's node",
    },
    Known {
        role: "endpointslice",
        kind: Kind::PrometheusTargets("an uncovered port of an init (sidecar) container", |t| {
            uncovered_init_port(t, uncovered_endpointslice)
        }),
        source: "discovery/kubernetes/endpointslice.go buildEndpointSlice \
                 (`append(pe.pod.Spec.Containers, pe.pod.Spec.InitContainers...)`)",
        why: "Prometheus walks init containers (native sidecars with ports) for uncovered ports; \
              vmagent 1.79 only spec.containers",
    },
];

/// `herald` (Prometheus's view of herald's targets) and `vmagent` for one role with the known
/// differences taken out, and how often each known difference was seen (same order as [`KNOWN`],
/// `None` for other roles).
pub fn reconcile(
    role: &str,
    herald: &[Labels],
    vmagent: &[Labels],
) -> (Vec<Labels>, Vec<Labels>, Vec<Option<usize>>) {
    let mut seen: Vec<Option<usize>> = KNOWN
        .iter()
        .map(|k| (k.role == role).then_some(0))
        .collect();
    // Per (identity, label) of a `Value` difference, the values vmagent gives that label.
    let mut vmagent_values: BTreeMap<(String, &str), Vec<String>> = BTreeMap::new();
    for k in KNOWN.iter().filter(|k| k.role == role) {
        if let Kind::Value(label) = k.kind {
            for t in vmagent {
                if let Some(v) = t.get(label) {
                    vmagent_values
                        .entry((identity(t), label))
                        .or_default()
                        .push(v.clone());
                }
            }
        }
    }
    let mut h: Vec<Labels> = Vec::new();
    'target: for orig in herald {
        for (i, k) in KNOWN.iter().enumerate() {
            if let (true, Kind::PrometheusTargets(_, pred)) = (k.role == role, k.kind)
                && pred(orig)
            {
                *seen[i].as_mut().expect("role matches") += 1;
                continue 'target;
            }
        }
        // Scopes and identities are judged on the target as listed, not as stripped so far.
        let id = identity(orig);
        let mut t = orig.clone();
        for (i, k) in KNOWN.iter().enumerate() {
            if k.role != role {
                continue;
            }
            match k.kind {
                Kind::PrometheusOnly(prefix, scope) if in_scope(role, scope, orig) => {
                    let before = t.len();
                    t.retain(|name, _| !name.starts_with(prefix));
                    *seen[i].as_mut().expect("role matches") += before - t.len();
                }
                Kind::Value(label) => {
                    // Seen only where vmagent's target of the same identity has another value.
                    let theirs = vmagent_values.get(&(id.clone(), label));
                    if let (Some(ours), Some(theirs)) = (t.remove(label), theirs)
                        && !theirs.contains(&ours)
                    {
                        *seen[i].as_mut().expect("role matches") += 1;
                    }
                }
                _ => {}
            }
        }
        h.push(t);
    }
    let mut v: Vec<Labels> = Vec::new();
    for orig in vmagent {
        let mut t = orig.clone();
        for (i, k) in KNOWN.iter().enumerate() {
            if k.role != role {
                continue;
            }
            let (prefix, scope) = match k.kind {
                Kind::VmagentOnly(p, s) => (p, s),
                Kind::Value(l) => (l, Scope::Every),
                _ => continue,
            };
            if in_scope(role, scope, orig) {
                let before = t.len();
                t.retain(|name, _| !name.starts_with(prefix));
                if matches!(k.kind, Kind::VmagentOnly(..)) {
                    *seen[i].as_mut().expect("role matches") += before - t.len();
                }
            }
        }
        v.push(t);
    }
    (h, v, seen)
}
