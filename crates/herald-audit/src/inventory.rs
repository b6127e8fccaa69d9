//! The cluster inventory the rules read: objects of the known kinds, decoded, with their wire sizes;
//! which kinds the input covered; and how many objects of unknown kinds were skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::custom::{Custom, PeerAuthentication, PodMonitor, Prometheus, ServiceMonitor};
use crate::kind::Kind;

/// One object and the size of its JSON encoding, which is what a watch event carrying it costs.
#[derive(Debug, Clone)]
pub struct Item<T> {
    pub obj: T,
    pub wire_bytes: usize,
}

impl<T> Deref for Item<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.obj
    }
}

/// Everything the audit knows about one cluster.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    pub namespaces: Vec<Item<Namespace>>,
    pub nodes: Vec<Item<Node>>,
    pub pods: Vec<Item<Pod>>,
    pub services: Vec<Item<Service>>,
    pub endpoints: Vec<Item<Endpoints>>,
    pub endpoint_slices: Vec<Item<EndpointSlice>>,
    pub config_maps: Vec<Item<ConfigMap>>,
    pub deployments: Vec<Item<Deployment>>,
    pub ingresses: Vec<Item<Ingress>>,
    pub service_monitors: Vec<Item<ServiceMonitor>>,
    pub pod_monitors: Vec<Item<PodMonitor>>,
    pub prometheuses: Vec<Item<Prometheus>>,
    pub prometheus_agents: Vec<Item<Prometheus>>,
    pub peer_authentications: Vec<Item<PeerAuthentication>>,
    checked: BTreeSet<Kind>,
    unknown: BTreeMap<String, usize>,
}

/// Why an object could not be added; the caller adds where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// `Kind namespace/name` when known.
    pub object: Option<String>,
    pub reason: String,
}

impl Cluster {
    /// Adds one object (never a List: the loader flattens those). Objects of unknown kinds are
    /// counted under `apiVersion/kind` and otherwise ignored.
    pub fn add(&mut self, value: Value) -> Result<(), Rejected> {
        let Some(map) = value.as_object() else {
            return Err(Rejected {
                object: None,
                reason: "not a JSON object".into(),
            });
        };
        let field = |name: &str| map.get(name).and_then(Value::as_str);
        let (Some(api_version), Some(kind_name)) = (field("apiVersion"), field("kind")) else {
            return Err(Rejected {
                object: None,
                reason: "apiVersion and kind must be strings".into(),
            });
        };
        let Some(kind) = Kind::identify(api_version, kind_name) else {
            *self
                .unknown
                .entry(format!("{api_version}/{kind_name}"))
                .or_default() += 1;
            return Ok(());
        };
        let meta = map.get("metadata");
        let name = meta
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let namespace = meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str);
        let label = match (name, namespace) {
            (Some(n), Some(ns)) => Some(format!("{kind} {ns}/{n}")),
            (Some(n), None) => Some(format!("{kind} {n}")),
            _ => None,
        };
        let reject = |reason: String| Rejected {
            object: label.clone(),
            reason,
        };
        if name.is_none() {
            return Err(reject("metadata.name is missing".into()));
        }
        if kind.namespaced() && namespace.is_none_or(str::is_empty) {
            return Err(reject("metadata.namespace is missing".into()));
        }
        let wire_bytes = serde_json::to_vec(&value)
            .expect("a serde_json::Value always encodes")
            .len();
        self.checked.insert(kind);
        match kind {
            Kind::Namespace => push(&mut self.namespaces, value, wire_bytes),
            Kind::Node => push(&mut self.nodes, value, wire_bytes),
            Kind::Pod => push(&mut self.pods, value, wire_bytes),
            Kind::Service => push(&mut self.services, value, wire_bytes),
            Kind::Endpoints => push(&mut self.endpoints, value, wire_bytes),
            Kind::EndpointSlice => push(&mut self.endpoint_slices, value, wire_bytes),
            Kind::ConfigMap => push(&mut self.config_maps, value, wire_bytes),
            Kind::Deployment => push(&mut self.deployments, value, wire_bytes),
            Kind::Ingress => push(&mut self.ingresses, value, wire_bytes),
            Kind::ServiceMonitor => push_custom(&mut self.service_monitors, value, wire_bytes),
            Kind::PodMonitor => push_custom(&mut self.pod_monitors, value, wire_bytes),
            Kind::Prometheus => push_custom(&mut self.prometheuses, value, wire_bytes),
            Kind::PrometheusAgent => push_custom(&mut self.prometheus_agents, value, wire_bytes),
            Kind::PeerAuthentication => {
                push_custom(&mut self.peer_authentications, value, wire_bytes)
            }
        }
        .map_err(reject)
    }

    /// Records that the input covered `kind` even if it held no object of it (live mode lists every
    /// kind; an empty list is an answer, unlike a dump that simply lacks the kind).
    pub fn mark_checked(&mut self, kind: Kind) {
        self.checked.insert(kind);
    }

    /// Whether the input covered `kind`. A kind that is not covered is "not checked", never "absent".
    pub fn has(&self, kind: Kind) -> bool {
        self.checked.contains(&kind)
    }

    /// Of `kinds`, those the input did not cover.
    pub fn missing(&self, kinds: &[Kind]) -> Vec<Kind> {
        kinds.iter().copied().filter(|k| !self.has(*k)).collect()
    }

    /// Objects of unknown kinds, by `apiVersion/kind`.
    pub fn unknown_kinds(&self) -> &BTreeMap<String, usize> {
        &self.unknown
    }

    /// Number of objects of each covered kind.
    pub fn counts(&self) -> BTreeMap<Kind, usize> {
        let len = |k: Kind| match k {
            Kind::Namespace => self.namespaces.len(),
            Kind::Node => self.nodes.len(),
            Kind::Pod => self.pods.len(),
            Kind::Service => self.services.len(),
            Kind::Endpoints => self.endpoints.len(),
            Kind::EndpointSlice => self.endpoint_slices.len(),
            Kind::ConfigMap => self.config_maps.len(),
            Kind::Deployment => self.deployments.len(),
            Kind::Ingress => self.ingresses.len(),
            Kind::ServiceMonitor => self.service_monitors.len(),
            Kind::PodMonitor => self.pod_monitors.len(),
            Kind::Prometheus => self.prometheuses.len(),
            Kind::PrometheusAgent => self.prometheus_agents.len(),
            Kind::PeerAuthentication => self.peer_authentications.len(),
        };
        self.checked.iter().map(|k| (*k, len(*k))).collect()
    }

    pub fn config_map(&self, namespace: &str, name: &str) -> Option<&ConfigMap> {
        self.config_maps
            .iter()
            .map(|c| &c.obj)
            .find(|c| ns_name(&c.metadata) == (namespace, name))
    }

    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces
            .iter()
            .map(|n| &n.obj)
            .find(|n| n.metadata.name.as_deref() == Some(name))
    }

    pub fn service(&self, namespace: &str, name: &str) -> Option<&Item<Service>> {
        self.services
            .iter()
            .find(|s| ns_name(&s.metadata) == (namespace, name))
    }

    /// Prometheus and PrometheusAgent objects, with a flag telling which.
    pub fn all_prometheuses(&self) -> impl Iterator<Item = (&Item<Prometheus>, bool)> {
        self.prometheuses
            .iter()
            .map(|p| (p, false))
            .chain(self.prometheus_agents.iter().map(|p| (p, true)))
    }
}

/// `(namespace, name)` of an object, empty strings when unset.
pub fn ns_name(meta: &ObjectMeta) -> (&str, &str) {
    (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

fn push<T: DeserializeOwned>(
    into: &mut Vec<Item<T>>,
    value: Value,
    wire_bytes: usize,
) -> Result<(), String> {
    let obj = serde_json::from_value(value).map_err(|e| e.to_string())?;
    into.push(Item { obj, wire_bytes });
    Ok(())
}

fn push_custom<S: DeserializeOwned + Default>(
    into: &mut Vec<Item<Custom<S>>>,
    value: Value,
    wire_bytes: usize,
) -> Result<(), String> {
    let metadata: ObjectMeta =
        serde_json::from_value(value["metadata"].clone()).map_err(|e| format!("metadata: {e}"))?;
    let spec = match value.get("spec") {
        None | Some(Value::Null) => S::default(),
        Some(spec) => serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?,
    };
    into.push(Item {
        obj: Custom {
            metadata,
            spec,
            raw: value,
        },
        wire_bytes,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_kinds_are_counted_and_do_not_mark_anything_checked() {
        let mut c = Cluster::default();
        c.add(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}))
            .expect("unknown kinds are not errors");
        assert_eq!(c.unknown_kinds().get("example.com/v1/Widget"), Some(&1));
        assert!(c.counts().is_empty());
    }

    #[test]
    fn a_service_with_a_malformed_spec_is_rejected_with_its_identity() {
        let mut c = Cluster::default();
        let err = c
            .add(json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "shop"}, "spec": {"ports": "80"}}))
            .expect_err("ports must be a list");
        assert_eq!(err.object.as_deref(), Some("Service shop/web"));
        assert!(err.reason.contains("invalid type"), "{}", err.reason);
    }

    #[test]
    fn a_namespaced_object_without_namespace_is_rejected() {
        let mut c = Cluster::default();
        let err = c
            .add(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}))
            .expect_err("pods are namespaced");
        assert_eq!(err.reason, "metadata.namespace is missing");
    }
}
