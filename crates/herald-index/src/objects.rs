//! The objects herald watches upstream: the kinds (`WatchKind`), their keys, and decoding upstream
//! JSON (or a slim projection of it) into typed objects.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use herald_core::{AttachMetadata, Role, slim};
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;

/// A kind herald watches upstream. Never more than one watch per kind, whatever the jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WatchKind {
    Namespace,
    Node,
    Service,
    Pod,
    Endpoints,
    EndpointSlice,
    Ingress,
}

impl WatchKind {
    pub const ALL: [WatchKind; 7] = [
        WatchKind::Namespace,
        WatchKind::Node,
        WatchKind::Service,
        WatchKind::Pod,
        WatchKind::Endpoints,
        WatchKind::EndpointSlice,
        WatchKind::Ingress,
    ];

    /// The plural resource name, as in API paths and metric labels.
    pub fn plural(self) -> &'static str {
        match self {
            WatchKind::Namespace => "namespaces",
            WatchKind::Node => "nodes",
            WatchKind::Service => "services",
            WatchKind::Pod => "pods",
            WatchKind::Endpoints => "endpoints",
            WatchKind::EndpointSlice => "endpointslices",
            WatchKind::Ingress => "ingresses",
        }
    }

    pub fn from_plural(plural: &str) -> Option<WatchKind> {
        WatchKind::ALL.into_iter().find(|k| k.plural() == plural)
    }

    /// What discovery keeps of this kind's objects (herald-core's projection of the fields the roles
    /// read).
    pub fn mask(self) -> &'static slim::Mask {
        match self {
            WatchKind::Namespace => &slim::NAMESPACE,
            WatchKind::Node => &slim::NODE,
            WatchKind::Service => &slim::SERVICE,
            WatchKind::Pod => &slim::POD,
            WatchKind::Endpoints => &slim::ENDPOINTS,
            WatchKind::EndpointSlice => &slim::ENDPOINT_SLICE,
            WatchKind::Ingress => &slim::INGRESS,
        }
    }

    /// The kind's API description (kube-face's built-in table).
    pub fn resource(self) -> kube_face::Resource {
        let name = match self {
            WatchKind::EndpointSlice => "endpointslices.discovery.k8s.io",
            WatchKind::Ingress => "ingresses.networking.k8s.io",
            k => k.plural(),
        };
        kube_face::Resource::builtin(name).expect("every watched kind is a kube-face built-in")
    }

    /// The watched kind a served resource is, if any.
    pub fn of_resource(r: &kube_face::Resource) -> Option<WatchKind> {
        WatchKind::ALL.into_iter().find(|k| {
            let own = k.resource();
            own.group == r.group && own.plural == r.plural && own.version == r.version
        })
    }

    pub fn namespaced(self) -> bool {
        !matches!(self, WatchKind::Namespace | WatchKind::Node)
    }

    /// The kind whose objects each become one target group of a job with this role.
    pub fn primary(role: Role) -> WatchKind {
        match role {
            Role::Node => WatchKind::Node,
            Role::Service => WatchKind::Service,
            Role::Pod => WatchKind::Pod,
            Role::Endpoints => WatchKind::Endpoints,
            Role::EndpointSlice => WatchKind::EndpointSlice,
            Role::Ingress => WatchKind::Ingress,
        }
    }

    /// Every kind a role reads, as the informers Prometheus starts for it
    /// (prometheus/prometheus: discovery/kubernetes/kubernetes.go, `Discovery.Run`).
    pub fn needed(role: Role, attach: AttachMetadata) -> Vec<WatchKind> {
        let mut kinds = vec![WatchKind::primary(role)];
        if matches!(role, Role::Endpoints | Role::EndpointSlice) {
            kinds.extend([WatchKind::Service, WatchKind::Pod]);
        }
        // NB: attach_metadata.node only applies to the roles that know a node (pod, endpoints,
        // endpointslice); Prometheus ignores it for the others.
        if attach.node && matches!(role, Role::Pod | Role::Endpoints | Role::EndpointSlice) {
            kinds.push(WatchKind::Node);
        }
        if attach.namespace && role != Role::Node {
            kinds.push(WatchKind::Namespace);
        }
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

/// An object's identity within its kind. Cluster-scoped objects have an empty namespace.
/// NB: cheap to clone (shared strings): the index keys groups, dependencies and dependents by it,
/// hundreds of thousands of copies at `k8s-limits`; `Cluster::key` hands out the stored copy. Each
/// string is one word (`ArcStr`; `Arc<str>` is two).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: arcstr::ArcStr,
    pub name: arcstr::ArcStr,
}

impl ObjectKey {
    pub fn new(namespace: &str, name: &str) -> ObjectKey {
        // The last namespace this thread made a key in, shared by the next key in the same one:
        // objects come listed and indexed namespace by namespace, so ~100 namespaces at
        // `k8s-limits` are a handful of copies, not one per object (150,000 pods).
        thread_local! {
            static LAST: std::cell::RefCell<arcstr::ArcStr> =
                const { std::cell::RefCell::new(arcstr::ArcStr::new()) };
        }
        let namespace = LAST.with_borrow_mut(|last| {
            if **last != *namespace {
                *last = namespace.into();
            }
            last.clone()
        });
        ObjectKey {
            namespace,
            name: name.into(),
        }
    }

    /// The key of a face entry, sharing its strings.
    pub fn of_entry(key: &kube_face::Key) -> ObjectKey {
        ObjectKey {
            namespace: key.0.clone(),
            name: key.1.clone(),
        }
    }

    fn of(meta: &ObjectMeta) -> ObjectKey {
        ObjectKey::new(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// Why an upstream object could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{kind} {key}: {source}")]
    Invalid {
        kind: &'static str,
        key: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{kind} object without metadata.name")]
    MissingName { kind: &'static str },
}

/// One decoded object of a watched kind. Cheap to clone.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Namespace(Arc<Namespace>),
    Node(Arc<Node>),
    Service(Arc<Service>),
    Pod(Arc<Pod>),
    Endpoints(Arc<Endpoints>),
    EndpointSlice(Arc<EndpointSlice>),
    Ingress(Arc<Ingress>),
}

impl Object {
    /// Decodes a raw upstream object of `kind`. `managedFields` are dropped: discovery never reads
    /// them and they are often the largest part of an object.
    pub fn decode(kind: WatchKind, value: serde_json::Value) -> Result<Object, DecodeError> {
        fn typed<T: DeserializeOwned>(
            kind: WatchKind,
            value: serde_json::Value,
        ) -> Result<T, DecodeError> {
            let key = value
                .get("metadata")
                .map(|m| {
                    let ns = m.get("namespace").and_then(|v| v.as_str()).unwrap_or("");
                    let name = m.get("name").and_then(|v| v.as_str()).unwrap_or("");
                    ObjectKey::new(ns, name).to_string()
                })
                .unwrap_or_default();
            serde_json::from_value(value).map_err(|source| DecodeError::Invalid {
                kind: kind.plural(),
                key,
                source,
            })
        }
        let obj = match kind {
            WatchKind::Namespace => Object::Namespace(Arc::new(typed(kind, value)?)),
            WatchKind::Node => Object::Node(Arc::new(typed(kind, value)?)),
            WatchKind::Service => Object::Service(Arc::new(typed(kind, value)?)),
            WatchKind::Pod => Object::Pod(Arc::new(typed(kind, value)?)),
            WatchKind::Endpoints => Object::Endpoints(Arc::new(typed(kind, value)?)),
            WatchKind::EndpointSlice => Object::EndpointSlice(Arc::new(typed(kind, value)?)),
            WatchKind::Ingress => Object::Ingress(Arc::new(typed(kind, value)?)),
        };
        if obj.meta().name.as_deref().unwrap_or("").is_empty() {
            return Err(DecodeError::MissingName {
                kind: kind.plural(),
            });
        }
        Ok(obj.without_managed_fields())
    }

    /// The object's JSON, as stored.
    pub fn to_json(&self) -> Bytes {
        fn enc<T: serde::Serialize>(o: &T) -> Bytes {
            Bytes::from(serde_json::to_vec(o).expect("k8s-openapi types always serialize"))
        }
        match self {
            Object::Namespace(o) => enc(&**o),
            Object::Node(o) => enc(&**o),
            Object::Service(o) => enc(&**o),
            Object::Pod(o) => enc(&**o),
            Object::Endpoints(o) => enc(&**o),
            Object::EndpointSlice(o) => enc(&**o),
            Object::Ingress(o) => enc(&**o),
        }
    }

    /// Decodes a slim projection. Projections are type-checked when made, so this fails only if a
    /// mask and k8s-openapi disagree; the caller then treats the object as absent.
    pub(crate) fn from_slim(kind: WatchKind, json: &[u8]) -> Result<Object, serde_json::Error> {
        fn dec<T: DeserializeOwned>(json: &[u8]) -> Result<Arc<T>, serde_json::Error> {
            serde_json::from_slice(json).map(Arc::new)
        }
        Ok(match kind {
            WatchKind::Namespace => Object::Namespace(dec(json)?),
            WatchKind::Node => Object::Node(dec(json)?),
            WatchKind::Service => Object::Service(dec(json)?),
            WatchKind::Pod => Object::Pod(dec(json)?),
            WatchKind::Endpoints => Object::Endpoints(dec(json)?),
            WatchKind::EndpointSlice => Object::EndpointSlice(dec(json)?),
            WatchKind::Ingress => Object::Ingress(dec(json)?),
        })
    }

    fn without_managed_fields(mut self) -> Object {
        fn strip<T: Clone>(o: &mut Arc<T>, meta: impl Fn(&mut T) -> &mut ObjectMeta) {
            // Freshly decoded, so the Arc is unique and make_mut does not copy.
            meta(Arc::make_mut(o)).managed_fields = None;
        }
        match &mut self {
            Object::Namespace(o) => strip(o, |o| &mut o.metadata),
            Object::Node(o) => strip(o, |o| &mut o.metadata),
            Object::Service(o) => strip(o, |o| &mut o.metadata),
            Object::Pod(o) => strip(o, |o| &mut o.metadata),
            Object::Endpoints(o) => strip(o, |o| &mut o.metadata),
            Object::EndpointSlice(o) => strip(o, |o| &mut o.metadata),
            Object::Ingress(o) => strip(o, |o| &mut o.metadata),
        }
        self
    }

    pub fn kind(&self) -> WatchKind {
        match self {
            Object::Namespace(_) => WatchKind::Namespace,
            Object::Node(_) => WatchKind::Node,
            Object::Service(_) => WatchKind::Service,
            Object::Pod(_) => WatchKind::Pod,
            Object::Endpoints(_) => WatchKind::Endpoints,
            Object::EndpointSlice(_) => WatchKind::EndpointSlice,
            Object::Ingress(_) => WatchKind::Ingress,
        }
    }

    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Object::Namespace(o) => &o.metadata,
            Object::Node(o) => &o.metadata,
            Object::Service(o) => &o.metadata,
            Object::Pod(o) => &o.metadata,
            Object::Endpoints(o) => &o.metadata,
            Object::EndpointSlice(o) => &o.metadata,
            Object::Ingress(o) => &o.metadata,
        }
    }

    pub fn key(&self) -> ObjectKey {
        ObjectKey::of(self.meta())
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.meta().labels.as_ref().unwrap_or(&EMPTY)
    }

    /// The value of a field-selector field, for the fields the apiserver supports on this kind
    /// (kubernetes: pkg/registry/core/pod/strategy.go `PodToSelectableFields`, and the generic
    /// `metadata.name` / `metadata.namespace` for every kind).
    pub fn field(&self, field: &str) -> Option<String> {
        let meta = self.meta();
        match field {
            "metadata.name" => return Some(meta.name.clone().unwrap_or_default()),
            "metadata.namespace" => return Some(meta.namespace.clone().unwrap_or_default()),
            _ => {}
        }
        match self {
            Object::Pod(p) => {
                let spec = p.spec.as_ref();
                let status = p.status.as_ref();
                match field {
                    "spec.nodeName" => {
                        Some(spec.and_then(|s| s.node_name.clone()).unwrap_or_default())
                    }
                    "spec.restartPolicy" => Some(
                        spec.and_then(|s| s.restart_policy.clone())
                            .unwrap_or_default(),
                    ),
                    "spec.schedulerName" => Some(
                        spec.and_then(|s| s.scheduler_name.clone())
                            .unwrap_or_default(),
                    ),
                    "spec.serviceAccountName" => Some(
                        spec.and_then(|s| s.service_account_name.clone())
                            .unwrap_or_default(),
                    ),
                    "spec.hostNetwork" => Some(
                        spec.and_then(|s| s.host_network)
                            .unwrap_or(false)
                            .to_string(),
                    ),
                    "status.phase" => {
                        Some(status.and_then(|s| s.phase.clone()).unwrap_or_default())
                    }
                    "status.podIP" => {
                        Some(status.and_then(|s| s.pod_ip.clone()).unwrap_or_default())
                    }
                    "status.nominatedNodeName" => Some(
                        status
                            .and_then(|s| s.nominated_node_name.clone())
                            .unwrap_or_default(),
                    ),
                    _ => None,
                }
            }
            Object::Node(n) if field == "spec.unschedulable" => Some(
                n.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
                    .to_string(),
            ),
            Object::EndpointSlice(s) if field == "addressType" => Some(s.address_type.clone()),
            Object::Namespace(n) if field == "status.phase" => Some(
                n.status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default(),
            ),
            _ => None,
        }
    }
}
