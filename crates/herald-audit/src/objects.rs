//! The compact form of the built-in objects the audit reads: only the fields some rule uses, in the
//! shape of their Kubernetes API types (so `svc.spec.as_ref()?.ports` reads as in k8s-openapi), and
//! nothing else. A 5,000-node cluster's 150,000 pods decoded into full k8s-openapi types take
//! gigabytes; these take a few hundred bytes each.
//!
//! Field names and types follow kubernetes:staging/src/k8s.io/api/{core,apps,discovery,networking}/v1
//! types.go. Unknown fields are skipped while decoding (serde's default), so a field the audit does
//! not read cannot make an object malformed; a field it does read must have its API type.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// Annotations some rule reads; every other annotation (last-applied configurations, tool
/// bookkeeping: often the largest part of an object) is dropped while decoding.
fn annotation_read(key: &str) -> bool {
    key.starts_with("prometheus.io/")
        || key.starts_with("prometheus.istio.io/")
        || key == "networking.istio.io/exportTo"
        || key == "endpoints.kubernetes.io/over-capacity"
}

/// `metav1.ObjectMeta`, reduced.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub labels: Option<Labels>,
    /// Only the annotations a rule reads (see `annotation_read`).
    #[serde(default, deserialize_with = "read_annotations")]
    pub annotations: Option<Labels>,
    pub owner_references: Option<Vec<OwnerReference>>,
}

/// A string map (labels, annotations) in one allocation, sorted by key: a pod's four labels
/// take a quarter of what a `BTreeMap` node does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    pub fn get(&self, key: &str) -> Option<&String> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| &self.0[i].1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.0.iter().cloned().collect()
    }
}

impl FromIterator<(String, String)> for Labels {
    /// A key given twice keeps its last value, as a JSON object decoded into a map does.
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Labels {
        let mut v: Vec<(String, String)> = pairs.into_iter().collect();
        v.reverse();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|later, kept| later.0 == kept.0);
        v.shrink_to_fit();
        Labels(v)
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
        let map: Vec<(String, String)> = d.deserialize_map(Pairs(|_: &str| true))?;
        Ok(map.into_iter().collect())
    }
}

/// Collects the pairs of a string map whose key passes the filter; the other values are skipped
/// unread.
struct Pairs<F>(F);

impl<'de, F: Fn(&str) -> bool> Visitor<'de> for Pairs<F> {
    type Value = Vec<(String, String)>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of strings")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut kept = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if (self.0)(&key) {
                let value = map.next_value::<String>()?;
                kept.push((key, value));
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(kept)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct OwnerReference {
    pub kind: String,
    pub name: String,
    pub controller: Option<bool>,
}

/// Decodes an annotation map keeping only the keys a rule reads; the values of the others are
/// skipped unread.
fn read_annotations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Labels>, D::Error> {
    struct Filter;
    impl<'de> Visitor<'de> for Filter {
        type Value = Option<Labels>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of string annotations")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            let kept = d.deserialize_map(Pairs(annotation_read))?;
            Ok(Some(kept.into_iter().collect()))
        }
    }
    d.deserialize_option(Filter)
}

/// Decodes a list into the number of its elements, each skipped unread.
fn count<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    struct Count;
    impl<'de> Visitor<'de> for Count {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list")
        }
        fn visit_unit<E>(self) -> Result<usize, E> {
            Ok(0)
        }
        fn visit_none<E>(self) -> Result<usize, E> {
            Ok(0)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
            d.deserialize_seq(Count)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
            let mut n = 0;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
            }
            Ok(n)
        }
    }
    d.deserialize_option(Count)
}

/// Keeps only `ISTIO_PROMETHEUS_ANNOTATIONS` of a container's environment: the one variable a
/// rule reads (istio/istio:pkg/kube/inject/inject.go applyPrometheusMerge writes it).
fn read_env<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<EnvVar>>, D::Error> {
    let all: Option<Vec<EnvVar>> = Option::deserialize(d)?;
    let mut kept: Vec<EnvVar> = all
        .into_iter()
        .flatten()
        .filter(|v| v.name == "ISTIO_PROMETHEUS_ANNOTATIONS")
        .collect();
    // NB: collecting a filtered vector may reuse the allocation that held every variable.
    kept.shrink_to_fit();
    Ok((!kept.is_empty()).then_some(kept))
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Namespace {
    #[serde(default)]
    pub metadata: Meta,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    #[serde(default)]
    pub metadata: Meta,
    pub status: Option<NodeStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub node_info: Option<NodeSystemInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSystemInfo {
    #[serde(default)]
    pub kubelet_version: String,
    /// Deprecated: kubelets stop reporting it from 1.31 (KEP-4004, `DisableNodeKubeProxyVersion`).
    #[serde(default)]
    pub kube_proxy_version: String,
    #[serde(default)]
    pub kernel_version: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pod {
    #[serde(default)]
    pub metadata: Meta,
    pub spec: Option<PodSpec>,
    pub status: Option<PodStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub containers: Vec<Container>,
    /// Only `istio-proxy`, a native sidecar since Istio 1.19: no rule reads other init containers.
    #[serde(default, deserialize_with = "read_init_containers")]
    pub init_containers: Option<Vec<Container>>,
}

fn read_init_containers<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<Container>>, D::Error> {
    let all: Option<Vec<Container>> = Option::deserialize(d)?;
    let mut kept: Vec<Container> = all
        .into_iter()
        .flatten()
        .filter(|c| c.name == "istio-proxy")
        .collect();
    kept.shrink_to_fit();
    Ok((!kept.is_empty()).then_some(kept))
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default)]
    pub name: String,
    pub image: Option<String>,
    pub ports: Option<Vec<ContainerPort>>,
    #[serde(default, deserialize_with = "read_env")]
    pub env: Option<Vec<EnvVar>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    pub name: Option<String>,
    pub container_port: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
}

/// A Service, reduced, plus its JSON as read: fix manifests are cut from the whole object.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    #[serde(default)]
    pub metadata: Meta,
    pub spec: Option<ServiceSpec>,
    pub status: Option<ServiceStatus>,
    /// The object's compact JSON, set by the inventory (never decoded from a field).
    #[serde(skip)]
    pub raw: Box<str>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    pub selector: Option<BTreeMap<String, String>>,
    pub ports: Option<Vec<ServicePort>>,
    pub publish_not_ready_addresses: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    pub name: Option<String>,
    pub port: i32,
    pub target_port: Option<IntOrString>,
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    pub load_balancer: Option<LoadBalancerStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct LoadBalancerStatus {
    /// The number of ingress points.
    #[serde(default, deserialize_with = "count")]
    pub ingress: usize,
}

/// A v1 Endpoints object: its identity and how many addresses it lists.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    #[serde(default)]
    pub metadata: Meta,
    pub subsets: Option<Vec<EndpointSubset>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSubset {
    #[serde(default, deserialize_with = "count")]
    pub addresses: usize,
    #[serde(default, deserialize_with = "count")]
    pub not_ready_addresses: usize,
}

impl Endpoints {
    /// Ready and not-ready addresses over every subset.
    pub fn address_count(&self) -> usize {
        self.subsets
            .iter()
            .flatten()
            .map(|s| s.addresses + s.not_ready_addresses)
            .sum()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSlice {
    #[serde(default)]
    pub metadata: Meta,
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// Read by `herald simulate` (the ports kube-proxy DNATs to).
    pub ports: Option<Vec<EndpointPort>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Read by `herald simulate`: kube-proxy routes to ready endpoints.
    pub conditions: Option<EndpointConditions>,
    /// Read by `herald simulate`: which endpoints are local to the simulated node.
    pub node_name: Option<String>,
}

/// `discovery/v1.EndpointConditions`; `ready: null` means ready.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EndpointConditions {
    pub ready: Option<bool>,
}

/// `discovery/v1.EndpointPort`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EndpointPort {
    pub name: Option<String>,
    pub port: Option<i32>,
    pub protocol: Option<String>,
}

/// A ConfigMap: its identity, and its data and JSON only where a rule reads them (kube-proxy's and
/// Istio's mesh config: see `Inventory::add`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMap {
    #[serde(default)]
    pub metadata: Meta,
    pub data: Option<BTreeMap<String, String>>,
    #[serde(skip)]
    pub raw: Box<str>,
}

/// Only the identity of a ConfigMap no rule reads the data of.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Identity {
    #[serde(default)]
    pub metadata: Meta,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deployment {
    #[serde(default)]
    pub metadata: Meta,
    pub spec: Option<DeploymentSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentSpec {
    pub replicas: Option<i32>,
    #[serde(default)]
    pub template: PodTemplateSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PodTemplateSpec {
    pub spec: Option<PodSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ingress {
    #[serde(default)]
    pub metadata: Meta,
    pub spec: Option<IngressSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressSpec {
    pub default_backend: Option<IngressBackend>,
    pub rules: Option<Vec<IngressRule>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct IngressRule {
    pub http: Option<HttpIngressRuleValue>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct HttpIngressRuleValue {
    #[serde(default)]
    pub paths: Vec<HttpIngressPath>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct HttpIngressPath {
    #[serde(default)]
    pub backend: IngressBackend,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct IngressBackend {
    pub service: Option<IngressServiceBackend>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct IngressServiceBackend {
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_annotations_a_rule_reads_are_kept() {
        let m: Meta = serde_json::from_value(json!({"name": "p", "annotations": {
            "prometheus.io/port": "9090",
            "kubectl.kubernetes.io/last-applied-configuration": "{\"huge\": true}",
            "networking.istio.io/exportTo": "~"}}))
        .expect("valid metadata");
        let annotations = m.annotations.expect("kept");
        let keys: Vec<_> = annotations.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["networking.istio.io/exportTo", "prometheus.io/port"]);
        assert_eq!(
            annotations.get("prometheus.io/port").map(String::as_str),
            Some("9090")
        );
        assert_eq!(annotations.get("prometheus.io/path"), None);
    }

    #[test]
    fn a_label_given_twice_keeps_its_last_value_as_a_map_would() {
        let labels: Labels =
            serde_json::from_str(r#"{"b": "1", "a": "2", "b": "3"}"#).expect("a map");
        assert_eq!(
            labels.to_map(),
            BTreeMap::from([("a".into(), "2".into()), ("b".into(), "3".into())])
        );
        assert_eq!(labels.get("b").map(String::as_str), Some("3"));
    }

    #[test]
    fn endpoints_keep_their_address_count_and_slices_their_addresses() {
        let e: Endpoints = serde_json::from_value(json!({"subsets": [
            {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "notReadyAddresses": [{"ip": "10.0.0.3"}]},
            {"addresses": null}]}))
        .expect("valid Endpoints");
        assert_eq!(e.address_count(), 3);
        let p: Pod = serde_json::from_value(json!({"spec": {"containers": [{"name": "istio-proxy",
            "env": [{"name": "POD_NAME", "value": "x"},
                    {"name": "ISTIO_PROMETHEUS_ANNOTATIONS", "value": "{}"}]}]}}))
        .expect("valid Pod");
        let env = p.spec.expect("spec").containers[0]
            .env
            .clone()
            .expect("env");
        assert_eq!(env.len(), 1);
        assert_eq!(env[0].name, "ISTIO_PROMETHEUS_ANNOTATIONS");
    }

    #[test]
    fn a_field_a_rule_reads_must_have_its_api_type() {
        let err = serde_json::from_value::<Service>(json!({"spec": {"ports": "80"}}))
            .expect_err("ports is a list");
        assert!(err.to_string().contains("invalid type"), "{err}");
        // A field no rule reads may be anything.
        serde_json::from_value::<Service>(json!({"spec": {"sessionAffinity": 7}}))
            .expect("unread fields are skipped");
    }
}
