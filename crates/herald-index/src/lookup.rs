//! The objects one stretch of group builds reads (`Decoded`: each decoded at most once), and the
//! per-job `Lookup` role code reads through: filtered by the job's namespaces and selectors, and
//! recording what it looked up.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use herald_core::{LabelSet, Lookup};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};

use crate::filter::JobFilter;
use crate::objects::{Object, ObjectKey, WatchKind};
use crate::stored::Cluster;

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
                .entry()
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
    use crate::stored::{Projection, Stored, StoredObject};

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
