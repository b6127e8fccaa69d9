//! What discovery keeps of each watched object (`Stored`: the cache's entry and a slim projection or
//! its digest), and the `Cluster`: one store per watched kind, ordered by key.

use std::collections::BTreeMap;
use std::sync::Arc;

use herald_core::slim;
use kube_face::Entry;

use crate::objects::{Object, ObjectKey, WatchKind};
use crate::slim::Slim;

/// An upstream object as herald keeps it: its entry (the upstream JSON only when the Kubernetes API
/// face serves it, see `crate::cache::Cache::keeps_bytes`) and, for kinds discovery reads, its slim projection
/// (`herald_core::slim`).
#[derive(Debug, Clone)]
pub struct Ingested {
    pub entry: Arc<Entry>,
    pub slim: Option<Projection>,
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

    pub(crate) fn digest(&self) -> u64 {
        match self {
            Projection::Held(slim) => slim.with_json(digest),
            Projection::FromEntry { digest } => *digest,
        }
    }

    /// Whether two versions project the same. NB: two digests are compared as the projections they
    /// stand for; two different projections with equal 64-bit digests (odds 2^-64 per change) would
    /// be taken for unchanged until the object's next change.
    pub(crate) fn same(&self, other: &Projection) -> bool {
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

    pub(crate) fn slim(&self) -> &Projection {
        &self.slim
    }

    /// The object as discovery reads it: decoded from its slim projection, made again from the
    /// entry's JSON where only its digest is kept.
    pub(crate) fn decode(&self, kind: WatchKind) -> Result<Object, String> {
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
    pub fn ingested(&self) -> Ingested {
        Ingested {
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
