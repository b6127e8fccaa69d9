//! The cluster as herald last saw it: one store per watched kind (compact JSON, decoded on demand),
//! decoding of upstream objects, and the per-job `Lookup` that role code reads through (filtered and
//! dependency-recording).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use herald_core::{AttachMetadata, LabelSet, Lookup, Role, slim};
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;

use kube_face::Entry;

use crate::segments::Slim;

use crate::filter::JobFilter;

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
    fn from_slim(kind: WatchKind, json: &[u8]) -> Result<Object, serde_json::Error> {
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

/// How discovery keeps an object between uses: its slim projection (`herald_core::slim`, about a
/// quarter of the upstream JSON), decoded on demand while groups are built (`Decoded`), and the cache's entry for
/// its labels and selectable fields (shared with the Kubernetes API face, which alone keeps the
/// upstream JSON). NB: a k8s-openapi `Pod` takes ~13 KiB in memory (`Container` alone is 2 KiB
/// inline, mostly `None`s) against ~2.5 KiB of JSON and ~0.6 KiB of projection, so holding 150,000
/// typed pods would cost ~2 GiB.
#[derive(Debug)]
pub struct Stored {
    entry: Arc<Entry>,
    slim: Projection,
}

/// What discovery keeps of an object beside its cache entry: its slim projection, or, where the entry
/// keeps the object's JSON (the Kubernetes API face serves it), only the projection's digest: the
/// projection is made again from the entry's JSON when discovery decodes the object.
/// NB: the face holds every object's JSON anyway, compressed against a sibling's; a second, slim copy
/// was ~70 MB of live heap at `k8s-limits` (DESIGN-NOTES sections 1 and 11).
#[derive(Debug, Clone)]
pub enum Projection {
    Held(Slim),
    FromEntry {
        /// xxHash64 of the projection: what tells a changed object from a byte-equal one (see
        /// `same`).
        digest: u64,
    },
}

impl Projection {
    /// Only the digest of `projection`: for an object whose cache entry keeps the JSON it was
    /// projected from.
    pub fn from_entry(projection: &[u8]) -> Projection {
        Projection::FromEntry {
            digest: digest(projection),
        }
    }

    fn digest(&self) -> u64 {
        match self {
            Projection::Held(slim) => slim.with_json(digest),
            Projection::FromEntry { digest } => *digest,
        }
    }

    /// Whether two versions project the same. NB: two digests are compared as the projections they
    /// stand for; two different projections with equal 64-bit digests (odds 2^-64 per change) would
    /// be taken for unchanged until the object's next change.
    fn same(&self, other: &Projection) -> bool {
        match (self, other) {
            (Projection::Held(a), Projection::Held(b)) => a == b,
            _ => self.digest() == other.digest(),
        }
    }
}

fn digest(projection: &[u8]) -> u64 {
    twox_hash::XxHash64::oneshot(0, projection)
}

impl Stored {
    /// An object that did not come from upstream (tests, fixtures).
    pub fn new(obj: &Object) -> Stored {
        let bytes = obj.to_json();
        let slim = slim::project(obj.kind().mask(), &bytes)
            .expect("a typed object projects: its fields have their types");
        let head = kube_face::scan::head(&obj.kind().resource(), &bytes);
        let (labels, fields, uid_hash) = match head {
            Ok(h) => (h.labels, h.fields, h.uid_hash),
            Err(_) => (
                kube_face::Labels::from(obj.labels()),
                kube_face::Fields::default(),
                kube_face::shard::fnv1a64(b""),
            ),
        };
        let key = obj.key();
        Stored::from_parts(
            Arc::new(Entry {
                key: (key.namespace.clone(), key.name.clone()),
                rv: 0,
                labels,
                fields,
                uid_hash,
                bytes: bytes.into(),
                proto: Default::default(),
            }),
            Projection::Held(Slim::whole(slim)),
        )
    }

    /// An entry of the cache and what discovery keeps of the object.
    pub fn from_parts(entry: Arc<Entry>, slim: Projection) -> Stored {
        Stored { entry, slim }
    }

    pub fn labels(&self) -> &kube_face::Labels {
        &self.entry.labels
    }

    fn slim(&self) -> &Projection {
        &self.slim
    }

    /// The object as discovery reads it: decoded from its slim projection, made again from the
    /// entry's JSON where only its digest is kept.
    fn decode(&self, kind: WatchKind) -> Result<Object, String> {
        match &self.slim {
            Projection::Held(slim) => slim
                .with_json(|json| Object::from_slim(kind, json))
                .map_err(|e| e.to_string()),
            Projection::FromEntry { .. } => {
                let json = self.entry.bytes.get();
                let projection = slim::project(kind.mask(), &json).map_err(|e| e.to_string())?;
                Object::from_slim(kind, &projection).map_err(|e| e.to_string())
            }
        }
    }

    /// The cache entry behind it.
    pub fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }

    /// As the upstream feed hands it over.
    pub fn ingested(&self) -> crate::cache::Ingested {
        crate::cache::Ingested {
            entry: self.entry.clone(),
            slim: Some(self.slim.clone()),
        }
    }
}

/// An object in its stored form, with its identity: what a relist buffers (typed objects would make
/// the buffer of a 150,000-pod relist cost 2 GiB).
#[derive(Debug)]
pub struct StoredObject {
    pub kind: WatchKind,
    pub key: ObjectKey,
    pub stored: Stored,
}

impl From<Object> for StoredObject {
    fn from(obj: Object) -> StoredObject {
        StoredObject {
            kind: obj.kind(),
            key: obj.key(),
            stored: Stored::new(&obj),
        }
    }
}

/// Every watched object, by kind then key. Keys are ordered, so a namespace is a contiguous range.
#[derive(Debug, Default)]
pub struct Cluster {
    stores: BTreeMap<WatchKind, BTreeMap<ObjectKey, Stored>>,
}

impl Cluster {
    pub fn get(&self, kind: WatchKind, key: &ObjectKey) -> Option<&Stored> {
        self.stores.get(&kind)?.get(key)
    }

    /// Stores `obj`. Returns whether anything changed (a byte-equal object is not a change).
    pub fn insert(&mut self, obj: StoredObject) -> bool {
        let store = self.stores.entry(obj.kind).or_default();
        if store
            .get(&obj.key)
            .is_some_and(|old| old.slim().same(obj.stored.slim()))
        {
            return false;
        }
        store.insert(obj.key, obj.stored);
        true
    }

    pub fn remove(&mut self, kind: WatchKind, key: &ObjectKey) -> bool {
        self.stores
            .get_mut(&kind)
            .is_some_and(|s| s.remove(key).is_some())
    }

    /// Replaces every object of `kind` with `objects`, except that the stored versions of `keep`
    /// are kept. Returns the keys that changed, appeared or went.
    pub fn replace(
        &mut self,
        kind: WatchKind,
        objects: Vec<StoredObject>,
        keep: &[ObjectKey],
    ) -> Vec<ObjectKey> {
        let mut old = self.stores.remove(&kind).unwrap_or_default();
        let mut fresh: BTreeMap<ObjectKey, Stored> = objects
            .into_iter()
            .filter(|o| o.kind == kind)
            .map(|o| (o.key, o.stored))
            .collect();
        // Kept objects move over unchanged, so they are neither in `old` nor reported below.
        let mut kept = Vec::new();
        for key in keep {
            if !fresh.contains_key(key)
                && let Some(stored) = old.remove(key)
            {
                fresh.insert(key.clone(), stored);
                kept.push(key);
            }
        }
        let mut changed: Vec<ObjectKey> = old
            .iter()
            .filter(|(k, o)| fresh.get(*k).is_none_or(|n| !n.slim().same(o.slim())))
            .map(|(k, _)| k.clone())
            .collect();
        changed.extend(
            fresh
                .keys()
                .filter(|k| !old.contains_key(*k) && !kept.contains(k))
                .cloned(),
        );
        self.stores.insert(kind, fresh);
        changed
    }

    /// The stored copy of `key` (sharing its strings), or `key` itself when nothing is stored under it.
    pub fn key(&self, kind: WatchKind, key: ObjectKey) -> ObjectKey {
        match self.stores.get(&kind).and_then(|s| s.get_key_value(&key)) {
            Some((stored, _)) => stored.clone(),
            None => key,
        }
    }

    pub fn count(&self, kind: WatchKind) -> usize {
        self.stores.get(&kind).map_or(0, BTreeMap::len)
    }

    pub fn keys(&self, kind: WatchKind) -> impl Iterator<Item = &ObjectKey> {
        self.stores.get(&kind).into_iter().flat_map(|s| s.keys())
    }
}

/// Objects decoded for one stretch of group builds (an index worker's chunk of work): each object is
/// decoded from its slim projection at most once while this lives, and freed with it. Role code
/// borrows the decoded objects while it looks more up, hence an append-only map.
/// NB: one per worker rather than a cache inside `Cluster`, so the cluster stays immutable while
/// several threads build groups from it.
pub struct Decoded<'c> {
    cluster: &'c Cluster,
    objects: elsa::FrozenMap<(WatchKind, ObjectKey), Box<Option<Object>>>,
    /// Each decoded pod's `podLabels`, by the pod's address (stable and unique while this lives:
    /// every pod role code sees comes out of `objects`), shared by the groups built from the pod.
    pod_labels: RefCell<HashMap<usize, Arc<LabelSet>>>,
}

impl<'c> Decoded<'c> {
    pub fn new(cluster: &'c Cluster) -> Decoded<'c> {
        Decoded {
            cluster,
            objects: elsa::FrozenMap::new(),
            pod_labels: RefCell::new(HashMap::new()),
        }
    }

    pub fn cluster(&self) -> &'c Cluster {
        self.cluster
    }

    /// Objects decoded so far.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The stored object, decoded (once while this lives). A projection that does not decode is
    /// logged and treated as absent.
    pub fn object(&self, kind: WatchKind, key: &ObjectKey) -> Option<&Object> {
        let id = (kind, key.clone());
        if let Some(found) = self.objects.get(&id) {
            return found.as_ref();
        }
        let stored = self.cluster.get(kind, key)?;
        let decoded = stored
            .decode(kind)
            .map_err(|e| {
                tracing::error!(kind = kind.plural(), object = %key, error = %e,
                    "a slim projection does not decode; the object is left out of discovery");
            })
            .ok();
        self.objects.insert(id, Box::new(decoded)).as_ref()
    }

    /// Whether `filter` admits the stored object. Field selectors read the fields the cache indexed
    /// when the object arrived; only a field it does not index costs a decode.
    pub fn admits(&self, filter: &JobFilter, kind: WatchKind, key: &ObjectKey) -> bool {
        let Some(stored) = self.cluster.get(kind, key) else {
            return false;
        };
        filter.admits_parts(kind, &key.namespace, stored.labels(), |field| {
            stored
                .entry
                .field(field)
                .or_else(|| self.object(kind, key).and_then(|o| o.field(field)))
        })
    }
}

/// Something a group was built from besides its own object: a later change to it must rebuild the group.
pub type Dependency = (WatchKind, ObjectKey);

/// The `Lookup` one job's role code reads: only objects the job's namespaces and selectors admit
/// (Prometheus's informers for a job only ever hold those), recording every lookup — found or not —
/// so the index knows which groups to rebuild when a looked-up object appears, changes or goes.
pub struct JobLookup<'a> {
    decoded: &'a Decoded<'a>,
    filter: &'a JobFilter,
    seen: RefCell<Vec<Dependency>>,
}

impl<'a> JobLookup<'a> {
    pub fn new(decoded: &'a Decoded<'a>, filter: &'a JobFilter) -> JobLookup<'a> {
        JobLookup {
            decoded,
            filter,
            seen: RefCell::new(Vec::new()),
        }
    }

    pub fn into_dependencies(self) -> Vec<Dependency> {
        let mut deps = self.seen.into_inner();
        deps.sort();
        deps.dedup();
        deps
    }

    fn find(&self, kind: WatchKind, namespace: &str, name: &str) -> Option<&'a Object> {
        let key = self
            .decoded
            .cluster()
            .key(kind, ObjectKey::new(namespace, name));
        let found = if self.decoded.admits(self.filter, kind, &key) {
            self.decoded.object(kind, &key)
        } else {
            None
        };
        self.seen.borrow_mut().push((kind, key));
        found
    }
}

impl Lookup for JobLookup<'_> {
    fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        match self.find(WatchKind::Pod, namespace, name)? {
            Object::Pod(p) => Some(p),
            _ => None,
        }
    }

    fn memo_pod_labels(&self, pod: &Pod, build: &dyn Fn() -> LabelSet) -> Arc<LabelSet> {
        let at = std::ptr::from_ref(pod) as usize;
        if let Some(labels) = self.decoded.pod_labels.borrow().get(&at) {
            return labels.clone();
        }
        let labels = Arc::new(build());
        self.decoded
            .pod_labels
            .borrow_mut()
            .insert(at, labels.clone());
        labels
    }

    fn service(&self, namespace: &str, name: &str) -> Option<&Service> {
        match self.find(WatchKind::Service, namespace, name)? {
            Object::Service(s) => Some(s),
            _ => None,
        }
    }

    fn node(&self, name: &str) -> Option<&Node> {
        match self.find(WatchKind::Node, "", name)? {
            Object::Node(n) => Some(n),
            _ => None,
        }
    }

    fn namespace(&self, name: &str) -> Option<&Namespace> {
        match self.find(WatchKind::Namespace, "", name)? {
            Object::Namespace(n) => Some(n),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn mk_pod(name: &str, ip: &str) -> Object {
        Object::decode(
            WatchKind::Pod,
            json!({"metadata": {"namespace": "default", "name": name, "labels": {"app": "web"},
                                "managedFields": [{"manager": "kubectl"}]},
                   "status": {"podIP": ip}}),
        )
        .expect("valid pod")
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("default", name)
    }

    /// `obj` as the upstream feed stores it when the face keeps its JSON: the entry, and only the
    /// projection's digest.
    fn from_entry(obj: &Object) -> StoredObject {
        let held = Stored::new(obj);
        let digest = held.slim().digest();
        StoredObject {
            kind: obj.kind(),
            key: obj.key(),
            stored: Stored::from_parts(held.entry().clone(), Projection::FromEntry { digest }),
        }
    }

    #[test]
    fn a_projection_made_again_from_the_entry_decodes_and_compares_as_a_held_one() {
        let a = mk_pod("a", "127.16.0.1");
        let (held, made_again) = (Stored::new(&a), from_entry(&a).stored);
        assert_eq!(
            made_again.decode(WatchKind::Pod).expect("decodes"),
            held.decode(WatchKind::Pod).expect("decodes")
        );
        assert!(made_again.slim().same(held.slim()));
        let mut cluster = Cluster::default();
        assert!(cluster.insert(from_entry(&a)));
        assert!(!cluster.insert(from_entry(&a)), "byte-equal is no change");
        assert!(
            !cluster.insert(a.clone().into()),
            "a held projection of the same object is no change either"
        );
        assert!(cluster.insert(from_entry(&mk_pod("a", "127.16.0.2"))));
        let decoded = Decoded::new(&cluster);
        let Some(Object::Pod(p)) = decoded.object(WatchKind::Pod, &key("a")) else {
            panic!("pod a decodes from its entry");
        };
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.as_deref());
        assert_eq!(ip, Some("127.16.0.2"));
    }

    #[test]
    fn objects_are_kept_as_json_and_decoded_once_per_decode_cache() {
        let mut cluster = Cluster::default();
        assert!(cluster.insert(mk_pod("a", "127.16.0.1").into()));
        assert!(
            !cluster.insert(mk_pod("a", "127.16.0.1").into()),
            "byte-equal is no change"
        );
        let decoded = Decoded::new(&cluster);
        assert!(decoded.is_empty());
        let Some(Object::Pod(p)) = decoded.object(WatchKind::Pod, &key("a")) else {
            panic!("pod a decodes");
        };
        assert_eq!(p.metadata.managed_fields, None, "managedFields are dropped");
        assert_eq!(decoded.len(), 1);
        let again = decoded.object(WatchKind::Pod, &key("a")).expect("pod a");
        assert!(
            std::ptr::eq(
                again,
                decoded.object(WatchKind::Pod, &key("a")).expect("pod a")
            ),
            "decoded once while the cache lives"
        );
        assert_eq!(decoded.len(), 1);
        assert!(decoded.object(WatchKind::Pod, &key("zz")).is_none());
        assert_eq!(decoded.len(), 1, "absent objects are not decoded");
        drop(decoded);
        assert_eq!(
            cluster
                .get(WatchKind::Pod, &key("a"))
                .and_then(|s| s.labels().get("app")),
            Some("web")
        );
    }

    #[test]
    fn replace_reports_changed_added_and_removed_keys_and_keeps_what_it_is_told() {
        let mut cluster = Cluster::default();
        for (n, ip) in [
            ("a", "127.16.0.1"),
            ("b", "127.16.0.2"),
            ("c", "127.16.0.3"),
        ] {
            cluster.insert(mk_pod(n, ip).into());
        }
        let fresh = vec![
            mk_pod("a", "127.16.0.1").into(),
            mk_pod("b", "127.16.0.9").into(),
            mk_pod("d", "127.16.0.4").into(),
        ];
        let mut changed = cluster.replace(WatchKind::Pod, fresh, &[key("c")]);
        changed.sort();
        assert_eq!(
            changed,
            vec![key("b"), key("d")],
            "c is kept, a is unchanged"
        );
        assert_eq!(cluster.count(WatchKind::Pod), 4);
    }
}
