//! `role: service` — one group per Service, one target per service port addressed by the Service's DNS
//! name, as prometheus/prometheus `discovery/kubernetes/service.go` `buildService`.

use k8s_openapi::api::core::v1::Service;

use crate::labels::{
    ADDRESS, NAMESPACE, add_namespace_labels, add_object_meta_labels, join_host_port, meta_name,
    name_of, namespace_of, set,
};
use crate::target::{AttachMetadata, LabelSet, Lookup, TargetGroup};

/// The `source` of a Service's group: `svc/<namespace>/<name>` (NB: `svc`, not `service`).
pub fn source(namespace: &str, name: &str) -> String {
    format!("svc/{namespace}/{name}")
}

/// `serviceLabels`: namespace, name, labels and annotations. The endpoints roles put these on their
/// groups too.
pub(crate) fn service_labels(svc: &Service) -> LabelSet {
    let mut ls = LabelSet::new();
    set(&mut ls, NAMESPACE, namespace_of(&svc.metadata));
    add_object_meta_labels(&mut ls, &svc.metadata, "service");
    ls
}

/// The Service's target group.
pub fn group(svc: &Service, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    let name = name_of(&svc.metadata);
    let namespace = namespace_of(&svc.metadata);
    let mut tg = TargetGroup {
        source: source(namespace, name),
        labels: service_labels(svc),
        ..TargetGroup::default()
    };
    if attach.namespace {
        add_namespace_labels(&mut tg.labels, lookup, namespace);
    }
    let Some(spec) = svc.spec.as_ref() else {
        return tg;
    };
    let svc_type = spec.type_.as_deref().unwrap_or("");
    for port in spec.ports.as_deref().unwrap_or_default() {
        // Service ports print with FormatInt (signed), unlike the pod role's FormatUint.
        let number = port.port.to_string();
        let mut t = LabelSet::new();
        set(
            &mut t,
            ADDRESS,
            join_host_port(&format!("{name}.{namespace}.svc"), &number),
        );
        set(
            &mut t,
            meta_name(&["service_port_name"]),
            port.name.as_deref().unwrap_or(""),
        );
        set(&mut t, meta_name(&["service_port_number"]), number);
        set(
            &mut t,
            meta_name(&["service_port_protocol"]),
            port.protocol.as_deref().unwrap_or(""),
        );
        set(&mut t, meta_name(&["service_type"]), svc_type);
        if svc_type == "ExternalName" {
            set(
                &mut t,
                meta_name(&["service_external_name"]),
                spec.external_name.as_deref().unwrap_or(""),
            );
        } else {
            set(
                &mut t,
                meta_name(&["service_cluster_ip"]),
                spec.cluster_ip.as_deref().unwrap_or(""),
            );
        }
        if svc_type == "LoadBalancer" {
            set(
                &mut t,
                meta_name(&["service_loadbalancer_ip"]),
                load_balancer_ips(svc),
            );
        }
        tg.targets.push(t);
    }
    tg
}

/// `loadBalancerIPs`: the non-empty `status.loadBalancer.ingress[].ip`s joined by commas, else the
/// deprecated `spec.loadBalancerIP`.
fn load_balancer_ips(svc: &Service) -> String {
    let ips: Vec<&str> = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|i| i.ip.as_deref())
        .filter(|ip| !ip.is_empty())
        .collect();
    if !ips.is_empty() {
        return ips.join(",");
    }
    svc.spec
        .as_ref()
        .and_then(|s| s.load_balancer_ip.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
