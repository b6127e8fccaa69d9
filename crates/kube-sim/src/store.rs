//! The object store: one global resourceVersion counter across kinds (as etcd gives), per-kind object maps
//! holding each object's JSON bytes once, and a bounded per-kind event history that watches resume from.
//!
//! Reads take a short read lock and clone `Arc`s; bodies are assembled outside the lock. Writers (API
//! clients, the built-in controllers, churn) serialise on the write lock; every accepted write is fed to
//! the controllers in the same critical section, so the derived EndpointSlices/Endpoints get the next RVs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
pub use kube_face::{Entry, Event, EventType, Key, ListAt, Page, StoreError, event_line};
use kube_face::{Resource, ResourceLog};
use serde_json::Value;
use tokio::sync::watch;

use crate::controllers::EndpointsControllers;
use crate::kind::{Kind, Object, Write};

/// uid and creationTimestamp of a stored version: immutable across versions.
#[derive(serde::Deserialize, Default)]
struct Identity {
    #[serde(default)]
    metadata: IdentityMeta,
}
#[derive(serde::Deserialize, Default)]
struct IdentityMeta {
    #[serde(default)]
    uid: String,
    #[serde(default, rename = "creationTimestamp")]
    created: String,
}

fn identity(e: &Entry) -> IdentityMeta {
    serde_json::from_slice::<Identity>(&e.bytes.get())
        .unwrap_or_default()
        .metadata
}

struct Inner {
    rv: u64,
    kinds: HashMap<Kind, ResourceLog>,
    controllers: EndpointsControllers,
    uid_seq: u64,
}

/// The store. Cheap to share behind an `Arc`.
pub struct Store {
    inner: RwLock<Inner>,
    rv_tx: watch::Sender<u64>,
    /// Each kind's API description, for reading heads (labels, selectable fields) of stored objects.
    resources: HashMap<Kind, Resource>,
}

impl Store {
    /// `window`: events kept per kind for watch resumption (the watch cache's capacity).
    pub fn new(window: usize) -> Self {
        let (rv_tx, _) = watch::channel(0);
        Store {
            inner: RwLock::new(Inner {
                rv: 0,
                kinds: Kind::ALL
                    .iter()
                    .map(|k| (*k, ResourceLog::new(&k.resource(), window)))
                    .collect(),
                controllers: EndpointsControllers::new(),
                uid_seq: 0,
            }),
            rv_tx,
            resources: Kind::ALL.iter().map(|k| (*k, k.resource())).collect(),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .expect("store lock is never poisoned: no code panics while holding it")
    }
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .expect("store lock is never poisoned: no code panics while holding it")
    }

    pub fn resource_version(&self) -> u64 {
        self.read().rv
    }

    /// Wakes on every committed write (the value is the newest RV).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    pub fn counts(&self) -> BTreeMap<Kind, usize> {
        let inner = self.read();
        inner.kinds.iter().map(|(k, s)| (*k, s.len())).collect()
    }

    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<Entry>> {
        let inner = self.read();
        inner.kinds[&kind].get_parts(namespace, name).cloned()
    }

    /// Every current object of a kind, in key order.
    pub fn all(&self, kind: Kind) -> (u64, Vec<Arc<Entry>>) {
        let inner = self.read();
        (inner.rv, inner.kinds[&kind].values().cloned().collect())
    }

    /// Loads objects as the cluster's state before anyone watched: they get RVs but no history, so the
    /// history window starts empty (a generated k8s-limits cluster would otherwise fill it at once).
    ///
    /// The controllers see the whole batch at once: fed one pod at a time they would rebuild a
    /// 1000-address Endpoints object per pod, quadratic in the size of a DaemonSet.
    pub fn load(&self, objects: Vec<Object>) {
        let mut inner = self.write();
        for obj in &objects {
            self.store_version(&mut inner, obj.kind(), obj.to_json(), false);
        }
        let writes = inner
            .controllers
            .on_puts(objects.iter().filter(|o| reacts(o.kind())));
        drop(objects);
        self.apply_locked(&mut inner, writes);
        let rv = inner.rv;
        for log in inner.kinds.values_mut() {
            log.compact(rv);
        }
        self.commit(inner);
    }

    /// Applies writes from the cluster's own machinery (generator, churn, tests) and whatever the
    /// controllers derive from them.
    pub fn apply(&self, writes: Vec<Write>) {
        if writes.is_empty() {
            return;
        }
        let mut inner = self.write();
        self.apply_locked(&mut inner, writes);
        self.commit(inner);
    }

    fn apply_locked(&self, inner: &mut Inner, mut queue: Vec<Write>) {
        // Controllers react to what they are fed, including their own outputs (ignored by kind), so drain
        // iteratively rather than recursively.
        queue.reverse();
        while let Some(w) = queue.pop() {
            let more = match w {
                Write::Put(obj) => self.put(inner, obj.kind(), obj.to_json(), Some(&obj)),
                Write::Delete {
                    kind,
                    namespace,
                    name,
                } => self.remove(inner, kind, namespace.unwrap_or_default(), name),
            };
            queue.extend(more.into_iter().rev());
        }
    }

    /// Creates or replaces an object from an API client. Validation of the body happens here so that
    /// every writer gets the same checks.
    pub fn create(&self, kind: Kind, value: Value) -> Result<Arc<Entry>, StoreError> {
        self.client_write(kind, value, true)
    }

    /// Replaces an existing object (PUT). A non-empty metadata.resourceVersion must match the stored one.
    pub fn update(&self, kind: Kind, value: Value) -> Result<Arc<Entry>, StoreError> {
        self.client_write(kind, value, false)
    }

    fn client_write(
        &self,
        kind: Kind,
        value: Value,
        create: bool,
    ) -> Result<Arc<Entry>, StoreError> {
        let obj = typed(kind, &value)?;
        let key = key_of(kind, &value)?;
        let mut inner = self.write();
        let existing = inner.kinds[&kind].get(&key).cloned();
        match (&existing, create) {
            (Some(_), true) => {
                return Err(StoreError::AlreadyExists {
                    plural: kind.plural().into(),
                    name: key.1.to_string(),
                });
            }
            (None, false) => {
                return Err(StoreError::NotFound {
                    plural: kind.plural().into(),
                    name: key.1.to_string(),
                });
            }
            (Some(old), false) => {
                let sent = value
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !sent.is_empty() && sent != old.rv.to_string() {
                    return Err(StoreError::Conflict {
                        plural: kind.plural().into(),
                        name: key.1.to_string(),
                    });
                }
            }
            (None, true) => {}
        }
        if kind.namespaced()
            && inner.kinds[&Kind::Namespace]
                .get_parts("", &key.0)
                .is_none()
        {
            return Err(StoreError::NotFound {
                plural: "namespaces".into(),
                name: key.0.to_string(),
            });
        }
        let writes = self.put(&mut inner, kind, value, obj.as_ref());
        let entry = inner.kinds[&kind].get(&key).cloned().expect("just written");
        self.apply_locked(&mut inner, writes);
        self.commit(inner);
        Ok(entry)
    }

    /// Deletes an object for an API client; returns its last state. `rv`: a precondition.
    pub fn delete(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        rv: Option<u64>,
    ) -> Result<Arc<Entry>, StoreError> {
        let key = kube_face::log::key(namespace, name);
        let mut inner = self.write();
        let Some(old) = inner.kinds[&kind].get(&key).cloned() else {
            return Err(StoreError::NotFound {
                plural: kind.plural().into(),
                name: name.into(),
            });
        };
        if rv.is_some_and(|rv| rv != old.rv) {
            return Err(StoreError::Conflict {
                plural: kind.plural().into(),
                name: name.into(),
            });
        }
        let writes = self.remove(&mut inner, kind, key.0.to_string(), key.1.to_string());
        self.apply_locked(&mut inner, writes);
        self.commit(inner);
        Ok(old)
    }

    /// Stores one object version and returns what the controllers derive from it.
    fn put(&self, inner: &mut Inner, kind: Kind, value: Value, obj: Option<&Object>) -> Vec<Write> {
        if !reacts(kind) {
            self.store_version(inner, kind, value, true);
            return vec![];
        }
        // The controllers see typed objects; API writes were decoded by `typed` already.
        let decoded = match obj {
            Some(_) => None,
            None => typed(kind, &value).ok().flatten(),
        };
        if !self.store_version(inner, kind, value, true) {
            return vec![];
        }
        match obj.or(decoded.as_ref()) {
            Some(o) => inner.controllers.on_put(o),
            None => vec![],
        }
    }

    /// Stamps and stores one object version; `history`: record it for watches. False when the write
    /// was dropped for having no name.
    fn store_version(
        &self,
        inner: &mut Inner,
        kind: Kind,
        mut value: Value,
        history: bool,
    ) -> bool {
        let Ok(key) = key_of(kind, &value) else {
            tracing::warn!(
                kind = kind.name(),
                "internal write without a name was dropped"
            );
            return false;
        };
        let prev = inner.kinds[&kind].get(&key).cloned();
        inner.rv += 1;
        let rv = inner.rv;
        let (uid, created) = match &prev {
            // uid and creationTimestamp are immutable: carried over from the stored version.
            Some(p) => {
                let id = identity(p);
                (id.uid, id.created)
            }
            None => {
                inner.uid_seq += 1;
                let uid = value
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| mk_uid(inner.uid_seq));
                let created = value
                    .pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(now_rfc3339);
                (uid, created)
            }
        };
        let uid_hash = kube_face::shard::fnv1a64(uid.as_bytes());
        let meta = value
            .as_object_mut()
            .expect("key_of checked this is an object")
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(m) = meta.as_object_mut() {
            m.insert("resourceVersion".into(), rv.to_string().into());
            m.insert("uid".into(), uid.into());
            m.remove("managedFields");
            if kind.namespaced() {
                m.insert("namespace".into(), key.0.to_string().into());
            } else {
                m.remove("namespace");
            }
            m.insert("creationTimestamp".into(), created.into());
        }
        if let Some(o) = value.as_object_mut() {
            o.remove("apiVersion");
            o.remove("kind");
        }
        let bytes = Bytes::from(with_type_meta(kind, &value));
        let (labels, fields) = match kube_face::scan::head(&self.resources[&kind], &bytes) {
            Ok(h) => (h.labels, h.fields),
            Err(_) => Default::default(),
        };
        let entry = Arc::new(Entry {
            key,
            rv,
            labels,
            fields,
            uid_hash,
            bytes: bytes.into(),
            proto: Default::default(),
        });
        inner
            .kinds
            .get_mut(&kind)
            .expect("all kinds present")
            .upsert(entry, history);
        true
    }

    fn remove(&self, inner: &mut Inner, kind: Kind, namespace: String, name: String) -> Vec<Write> {
        let key = kube_face::log::key(&namespace, &name);
        let Some(prev) = inner.kinds[&kind].get(&key).cloned() else {
            return vec![];
        };
        inner.rv += 1;
        let rv = inner.rv;
        // The DELETED event carries the object's last state at the deletion's RV.
        let bytes = kube_face::scan::with_resource_version(&prev.bytes.get(), rv)
            .map(|b| prev.bytes.like(b))
            .unwrap_or_else(|| prev.bytes.clone());
        let deleted = Arc::new(Entry {
            key: key.clone(),
            rv,
            labels: prev.labels.clone(),
            fields: prev.fields.clone(),
            uid_hash: prev.uid_hash,
            bytes,
            proto: Default::default(),
        });
        inner
            .kinds
            .get_mut(&kind)
            .expect("all kinds present")
            .remove(deleted);
        if reacts(kind) {
            let ns = (!key.0.is_empty()).then_some(key.0.as_str());
            inner.controllers.on_delete(kind, ns, &key.1)
        } else {
            vec![]
        }
    }

    /// Events of a kind after `rv`, oldest first, and the global RV they are complete up to;
    /// `Expired` when the window no longer reaches back to `rv`.
    pub fn events_after(
        &self,
        kind: Kind,
        rv: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), StoreError> {
        let inner = self.read();
        Ok((inner.kinds[&kind].events_after_at_most(rv, max)?, inner.rv))
    }

    /// The oldest RV a watch of this kind can still start from.
    pub fn horizon(&self, kind: Kind) -> u64 {
        self.read().kinds[&kind].horizon()
    }

    /// Drops every kind's history, as an etcd compaction followed by a watch-cache reset: older RVs get 410.
    pub fn compact(&self) {
        let mut inner = self.write();
        let rv = inner.rv;
        for log in inner.kinds.values_mut() {
            log.compact(rv);
        }
        self.commit(inner);
    }

    /// Releases the store after a write and wakes the watches: every watch of the store, and each
    /// watch of one node's pods whose node was written to (`ResourceLog::take_wakes`).
    fn commit(&self, mut inner: std::sync::RwLockWriteGuard<'_, Inner>) {
        let rv = inner.rv;
        let wakes: Vec<_> = inner
            .kinds
            .values_mut()
            .map(ResourceLog::take_wakes)
            .filter(|w| !w.is_empty())
            .collect();
        drop(inner);
        self.rv_tx.send_replace(rv);
        for w in wakes {
            w.send(rv);
        }
    }

    /// Wakes on the changes of the objects of `kind` whose `spec.nodeName` is `value` only.
    pub fn subscribe_value(&self, kind: Kind, value: &str) -> Option<watch::Receiver<u64>> {
        self.write()
            .kinds
            .get_mut(&kind)
            .expect("all kinds present")
            .subscribe_value(value)
    }

    /// The events of `kind` after `rv` whose object or previous state is on `value` (see
    /// `ResourceLog::events_of_value_after`), and the global RV they are complete up to.
    pub fn events_of_value_after(
        &self,
        kind: Kind,
        value: &str,
        rv: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), StoreError> {
        let inner = self.read();
        Ok((
            inner.kinds[&kind].events_of_value_after(value, rv, max)?,
            inner.rv,
        ))
    }

    /// One page of a list. `ns`: a namespace, or all. `after`: the last key of the previous page.
    /// `indexed`: a required `spec.nodeName` (kube_face::log::indexed_value). `filter` decides
    /// membership; `limit` counts matching items.
    #[allow(clippy::too_many_arguments)]
    pub fn list(
        &self,
        kind: Kind,
        ns: Option<&str>,
        at: ListAt,
        after: Option<&Key>,
        limit: Option<usize>,
        indexed: Option<&str>,
        filter: &dyn Fn(&Entry) -> bool,
    ) -> Result<Page, StoreError> {
        let inner = self.read();
        inner.kinds[&kind].list(inner.rv, ns, at, after, limit, indexed, filter)
    }
}

/// The kinds the endpoint controllers watch.
fn reacts(kind: Kind) -> bool {
    matches!(kind, Kind::Pod | Kind::Service | Kind::Node)
}

/// Decodes the typed kinds, so that a malformed body is rejected before it is stored and the controllers
/// get a typed object. Custom resources are checked only for an object with metadata.
/// An object's JSON with its apiVersion and kind first, then its other members (`value` holds
/// neither), as an encoder of the typed object writes them: a list's items are the stored bytes
/// with this head cut off (kube-face serve), however the object was written.
fn with_type_meta(kind: Kind, value: &Value) -> Vec<u8> {
    let rest = serde_json::to_vec(value).expect("a Value always serializes");
    let mut out = Vec::with_capacity(rest.len() + 64);
    out.extend_from_slice(b"{\"apiVersion\":");
    out.extend_from_slice(&serde_json::to_vec(kind.api_version()).expect("a str serializes"));
    out.extend_from_slice(b",\"kind\":");
    out.extend_from_slice(&serde_json::to_vec(kind.name()).expect("a str serializes"));
    if rest.len() > 2 {
        out.push(b',');
        out.extend_from_slice(&rest[1..]);
    } else {
        out.push(b'}');
    }
    out
}

pub fn typed(kind: Kind, value: &Value) -> Result<Option<Object>, StoreError> {
    fn de<T: serde::de::DeserializeOwned>(kind: Kind, v: &Value) -> Result<T, StoreError> {
        T::deserialize(v).map_err(|e| {
            StoreError::BadRequest(format!("unable to decode {} object: {e}", kind.name()))
        })
    }
    if !value.is_object() {
        return Err(StoreError::BadRequest(format!(
            "the body of a {} must be a JSON object",
            kind.name()
        )));
    }
    if let Some(k) = value.get("kind").and_then(Value::as_str)
        && k != kind.name()
    {
        return Err(StoreError::BadRequest(format!(
            "the kind of the body ({k}) does not match the resource ({})",
            kind.plural()
        )));
    }
    if let Some(av) = value.get("apiVersion").and_then(Value::as_str)
        && av != kind.api_version()
    {
        return Err(StoreError::BadRequest(format!(
            "the apiVersion of the body ({av}) does not match the resource ({})",
            kind.api_version()
        )));
    }
    Ok(Some(match kind {
        Kind::Namespace => Object::Namespace(de(kind, value)?),
        Kind::Node => Object::Node(de(kind, value)?),
        Kind::ConfigMap => Object::ConfigMap(de(kind, value)?),
        Kind::Service => Object::Service(de(kind, value)?),
        Kind::Pod => Object::Pod(de(kind, value)?),
        Kind::Endpoints => Object::Endpoints(de(kind, value)?),
        Kind::EndpointSlice => Object::EndpointSlice(de(kind, value)?),
        Kind::Ingress => Object::Ingress(de(kind, value)?),
        Kind::ServiceCidr => Object::ServiceCidr(de(kind, value)?),
        Kind::ClusterRole => {
            de::<k8s_openapi::api::rbac::v1::ClusterRole>(kind, value)?;
            return Ok(None);
        }
        Kind::ClusterRoleBinding => {
            de::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(kind, value)?;
            return Ok(None);
        }
        Kind::Role => {
            de::<k8s_openapi::api::rbac::v1::Role>(kind, value)?;
            return Ok(None);
        }
        Kind::RoleBinding => {
            de::<k8s_openapi::api::rbac::v1::RoleBinding>(kind, value)?;
            return Ok(None);
        }
        Kind::ServiceMonitor | Kind::PodMonitor | Kind::Prometheus | Kind::PeerAuthentication => {
            if !value.get("metadata").is_some_and(Value::is_object) {
                return Err(StoreError::Invalid(format!(
                    "{}.metadata: Required value",
                    kind.name()
                )));
            }
            return Ok(None);
        }
    }))
}

/// The object's key, validating the name as the apiserver does (422 Invalid).
pub fn key_of(kind: Kind, value: &Value) -> Result<Key, StoreError> {
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name.is_empty() {
        return Err(StoreError::Invalid(format!(
            "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
            kind.name()
        )));
    }
    if name.len() > 253
        || !name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
        || !name.as_bytes()[0].is_ascii_alphanumeric()
        || !name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
    {
        return Err(StoreError::Invalid(format!(
            "{} {name:?} is invalid: metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            kind.name()
        )));
    }
    let ns = if kind.namespaced() {
        value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("default")
            .to_string()
    } else {
        String::new()
    };
    Ok(kube_face::log::key(&ns, name))
}

fn mk_uid(seq: u64) -> String {
    // A UUID-shaped, deterministic id: clients only compare uids for equality.
    let h = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (h >> 32) as u32,
        (h >> 16) as u16,
        (h & 0xfff) as u16,
        (seq >> 48) as u16 & 0xfff,
        seq & 0xffff_ffff_ffff
    )
}

pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .expect("the system clock is within jiff's range")
        .to_string()
}

#[cfg(test)]
mod tests;
