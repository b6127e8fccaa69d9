//! The cluster inventory the rules read: objects of the known kinds in their compact form
//! ([`crate::objects`]), with their wire sizes; which kinds the input covered; and how many
//! objects of unknown kinds were skipped. Objects arrive one at a time as compact JSON (the loader
//! and the live lister stream them), so the inventory never holds a document.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::custom::{Custom, PeerAuthentication, PodMonitor, Prometheus, ServiceMonitor};
use crate::kind::Kind;
use crate::objects::{
    ConfigMap, Deployment, EndpointSlice, Endpoints, Identity, Ingress, Meta, Namespace, Node, Pod,
    Service,
};

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

/// The `kind` and `apiVersion` a typed list (`PodList`) lends its items, which carry neither.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListType {
    pub kind: String,
    pub api_version: String,
}

/// What identifies an object, read before the rest of it.
#[derive(Deserialize)]
struct Head {
    #[serde(rename = "apiVersion")]
    api_version: Option<Value>,
    kind: Option<Value>,
    #[serde(default)]
    metadata: HeadMeta,
}

#[derive(Default, Deserialize)]
struct HeadMeta {
    name: Option<Value>,
    namespace: Option<Value>,
}

/// The ConfigMaps whose data a rule reads: kube-proxy's configuration and Istio's mesh config.
fn config_map_read(name: &str) -> bool {
    name == "kube-proxy" || name == "istio"
}

impl Cluster {
    /// Adds one object (never a List: the loader flattens those). Objects of unknown kinds are
    /// counted under `apiVersion/kind` and otherwise ignored.
    pub fn add(&mut self, value: Value) -> Result<(), Rejected> {
        let json = serde_json::to_vec(&value).expect("a serde_json::Value always encodes");
        self.add_json(&json, None)
    }

    /// Adds one object given as compact JSON. `lend` fills in `kind` and `apiVersion` where the
    /// object lacks them (items of typed lists), and its wire size counts them, as an event
    /// carrying the object would.
    pub fn add_json(&mut self, json: &[u8], lend: Option<&ListType>) -> Result<(), Rejected> {
        self.add_or_defer(json, lend, false).map(|_| ())
    }

    /// [`Cluster::add_json`], except that with `defer_untyped` an object lacking `kind` or
    /// `apiVersion` is left out and `Ok(false)` returned: the caller has not read the list's own
    /// kind yet.
    pub(crate) fn add_or_defer(
        &mut self,
        json: &[u8],
        lend: Option<&ListType>,
        defer_untyped: bool,
    ) -> Result<bool, Rejected> {
        if json.first() != Some(&b'{') {
            return Err(Rejected {
                object: None,
                reason: "not a JSON object".into(),
            });
        }
        let head: Head = serde_json::from_slice(json).map_err(|e| Rejected {
            object: None,
            reason: decode_reason(json, &e),
        })?;
        if defer_untyped && (head.api_version.is_none() || head.kind.is_none()) {
            return Ok(false);
        }
        let text = |v: &Option<Value>| v.as_ref().and_then(Value::as_str).map(str::to_owned);
        let mut wire_bytes = json.len();
        let mut filled = Vec::new();
        let mut field = |own: Option<String>, key: &str, lent: Option<&str>| match (own, lent) {
            (Some(v), _) => Some(v),
            (None, Some(v)) if head_is_missing(&head, key) => {
                // `,"key":"value"` (no comma in an empty object).
                let comma = usize::from(json.len() > 2 || !filled.is_empty());
                wire_bytes += comma + json_len(key) + 1 + json_len(v);
                filled.push((key.to_string(), v.to_string()));
                Some(v.to_string())
            }
            _ => None,
        };
        let api_version = field(
            text(&head.api_version),
            "apiVersion",
            lend.map(|l| l.api_version.as_str()),
        );
        let kind_name = field(text(&head.kind), "kind", lend.map(|l| l.kind.as_str()));
        let (Some(api_version), Some(kind_name)) = (api_version, kind_name) else {
            return Err(Rejected {
                object: None,
                reason: "apiVersion and kind must be strings".into(),
            });
        };
        let Some(kind) = Kind::identify(&api_version, &kind_name) else {
            *self
                .unknown
                .entry(format!("{api_version}/{kind_name}"))
                .or_default() += 1;
            return Ok(true);
        };
        let name = text(&head.metadata.name).filter(|n| !n.is_empty());
        let namespace = text(&head.metadata.namespace);
        let label = match (&name, &namespace) {
            (Some(n), Some(ns)) => Some(format!("{kind} {ns}/{n}")),
            (Some(n), None) => Some(format!("{kind} {n}")),
            _ => None,
        };
        let reject = |reason: String| Rejected {
            object: label.clone(),
            reason,
        };
        let Some(name) = name else {
            return Err(reject("metadata.name is missing".into()));
        };
        if kind.namespaced() && namespace.as_deref().is_none_or(str::is_empty) {
            return Err(reject("metadata.namespace is missing".into()));
        }
        self.checked.insert(kind);
        let w = wire_bytes;
        match kind {
            Kind::Namespace => self.namespaces.push(decode(json, w).map_err(reject)?),
            Kind::Node => self.nodes.push(decode(json, w).map_err(reject)?),
            Kind::Pod => self.pods.push(decode(json, w).map_err(reject)?),
            Kind::Service => {
                let mut item: Item<Service> = decode(json, w).map_err(reject)?;
                item.obj.raw = utf8(json).into();
                self.services.push(item);
            }
            Kind::Endpoints => self.endpoints.push(decode(json, w).map_err(reject)?),
            Kind::EndpointSlice => self.endpoint_slices.push(decode(json, w).map_err(reject)?),
            Kind::ConfigMap => {
                let item = if config_map_read(&name) {
                    let mut item: Item<ConfigMap> = decode(json, w).map_err(reject)?;
                    item.obj.raw = utf8(json).into();
                    item
                } else {
                    let id: Item<Identity> = decode(json, w).map_err(reject)?;
                    Item {
                        obj: ConfigMap {
                            metadata: id.obj.metadata,
                            ..ConfigMap::default()
                        },
                        wire_bytes: w,
                    }
                };
                self.config_maps.push(item);
            }
            Kind::Deployment => self.deployments.push(decode(json, w).map_err(reject)?),
            Kind::Ingress => self.ingresses.push(decode(json, w).map_err(reject)?),
            Kind::ServiceMonitor => self
                .service_monitors
                .push(custom(json, w, &filled).map_err(reject)?),
            Kind::PodMonitor => self
                .pod_monitors
                .push(custom(json, w, &filled).map_err(reject)?),
            Kind::Prometheus => self
                .prometheuses
                .push(custom(json, w, &filled).map_err(reject)?),
            Kind::PrometheusAgent => self
                .prometheus_agents
                .push(custom(json, w, &filled).map_err(reject)?),
            Kind::PeerAuthentication => self
                .peer_authentications
                .push(custom(json, w, &filled).map_err(reject)?),
        }
        Ok(true)
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

    /// Prometheus and PrometheusAgent objects, with a flag telling which.
    pub fn all_prometheuses(&self) -> impl Iterator<Item = (&Item<Prometheus>, bool)> {
        self.prometheuses
            .iter()
            .map(|p| (p, false))
            .chain(self.prometheus_agents.iter().map(|p| (p, true)))
    }
}

/// `(namespace, name)` of an object, empty strings when unset.
pub fn ns_name(meta: &Meta) -> (&str, &str) {
    (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

fn head_is_missing(head: &Head, key: &str) -> bool {
    match key {
        "apiVersion" => head.api_version.is_none(),
        _ => head.kind.is_none(),
    }
}

/// The length of `s` encoded as a JSON string.
fn json_len(s: &str) -> usize {
    serde_json::to_string(s)
        .expect("a string always encodes")
        .len()
}

fn utf8(json: &[u8]) -> &str {
    // The loader produces the bytes with serde_json's serializer: always UTF-8.
    std::str::from_utf8(json).expect("compact JSON from serde_json is UTF-8")
}

fn decode<T: DeserializeOwned>(json: &[u8], wire_bytes: usize) -> Result<Item<T>, String> {
    match serde_json::from_slice(json) {
        Ok(obj) => Ok(Item { obj, wire_bytes }),
        Err(e) => Err(decode_error::<T>(json, &e)),
    }
}

/// The reason an object did not decode as `T`, naming the field at fault (`spec.ports: invalid
/// type...`). The slow path-tracking decoder runs only once decoding has failed.
fn decode_error<T: DeserializeOwned>(json: &[u8], first: &serde_json::Error) -> String {
    let mut de = serde_json::Deserializer::from_slice(json);
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Err(e) if !e.path().to_string().is_empty() && e.path().to_string() != "." => {
            format!("{}: {}", e.path(), without_position(&e.inner().to_string()))
        }
        _ => decode_reason(json, first),
    }
}

fn decode_reason(_json: &[u8], e: &serde_json::Error) -> String {
    without_position(&e.to_string()).to_string()
}

/// serde_json appends ` at line L column C`; in a one-line compact object that position says
/// nothing a person can use.
pub(crate) fn without_position(msg: &str) -> &str {
    match msg.rsplit_once(" at line ") {
        Some((head, tail))
            if tail
                .split_once(" column ")
                .is_some_and(|(l, c)| l.parse::<u64>().is_ok() && c.parse::<u64>().is_ok()) =>
        {
            head
        }
        _ => msg,
    }
}

#[derive(Deserialize)]
struct CustomBody<S> {
    #[serde(default)]
    metadata: Meta,
    spec: Option<S>,
}

fn custom<S: DeserializeOwned + Default>(
    json: &[u8],
    wire_bytes: usize,
    filled: &[(String, String)],
) -> Result<Item<Custom<S>>, String> {
    let body: CustomBody<S> = match serde_json::from_slice(json) {
        Ok(b) => b,
        Err(e) => return Err(decode_error::<CustomBody<S>>(json, &e)),
    };
    let mut raw: Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    if let Some(map) = raw.as_object_mut() {
        for (k, v) in filled {
            map.insert(k.clone(), Value::from(v.as_str()));
        }
    }
    Ok(Item {
        obj: Custom {
            metadata: body.metadata,
            spec: body.spec.unwrap_or_default(),
            raw,
        },
        wire_bytes,
    })
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
    fn a_service_with_a_malformed_spec_is_rejected_with_its_identity_and_the_field() {
        let mut c = Cluster::default();
        let err = c
            .add(json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "shop"}, "spec": {"ports": "80"}}))
            .expect_err("ports must be a list");
        assert_eq!(err.object.as_deref(), Some("Service shop/web"));
        assert_eq!(
            err.reason,
            "spec.ports: invalid type: string \"80\", expected a sequence"
        );
    }

    #[test]
    fn a_namespaced_object_without_namespace_is_rejected() {
        let mut c = Cluster::default();
        let err = c
            .add(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}))
            .expect_err("pods are namespaced");
        assert_eq!(err.reason, "metadata.namespace is missing");
    }

    #[test]
    fn a_lent_kind_counts_in_the_wire_size_as_if_the_object_carried_it() {
        let with =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}});
        let without = json!({"metadata": {"name": "p", "namespace": "a"}});
        let mut c = Cluster::default();
        c.add(with.clone()).expect("valid");
        let lend = ListType {
            kind: "Pod".into(),
            api_version: "v1".into(),
        };
        c.add_json(&serde_json::to_vec(&without).expect("encodes"), Some(&lend))
            .expect("valid");
        assert_eq!(c.pods.len(), 2);
        assert_eq!(
            c.pods[0].wire_bytes,
            serde_json::to_vec(&with).expect("encodes").len()
        );
        assert_eq!(c.pods[1].wire_bytes, c.pods[0].wire_bytes);
    }

    #[test]
    fn only_kube_proxy_and_istio_config_maps_keep_their_data() {
        let mut c = Cluster::default();
        for name in ["kube-proxy", "dashboards"] {
            c.add(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "kube-system"}, "data": {"k": "v"}}))
                .expect("valid");
        }
        assert!(
            c.config_map("kube-system", "kube-proxy")
                .expect("kept")
                .data
                .is_some()
        );
        let other = c.config_map("kube-system", "dashboards").expect("counted");
        assert!(other.data.is_none() && other.raw.is_empty());
        assert_eq!(c.counts()[&Kind::ConfigMap], 2);
    }

    #[test]
    fn positions_are_dropped_from_messages_but_nothing_else() {
        assert_eq!(
            without_position("bad thing at line 1 column 42"),
            "bad thing"
        );
        assert_eq!(without_position("at line one"), "at line one");
    }
}
