//! One resource's objects and its bounded event history: what list, get and watch read. Each object's
//! JSON is held once (`Entry::bytes`), and each change's watch line is encoded once and shared by every
//! watcher (the apiserver's serialize-once cache, KEP-1152).
//!
//! The log does not own a resourceVersion counter: kube-sim stamps one global counter (as etcd does),
//! herald passes its upstream's versions through. Callers pass the current version where it matters.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::packed::{Fields, Json, Labels};
use crate::recent::{DEFAULT_RECENT_BYTES, Encoded, Recent};
use crate::resource::Resource;

/// (namespace, name); namespace is "" for cluster-scoped resources. Ordered as the apiserver lists:
/// by namespace, then name.
pub type Key = (String, String);

/// One stored version of an object.
#[derive(Debug)]
pub struct Entry {
    pub key: Key,
    pub rv: u64,
    pub labels: Labels,
    /// Field-selector values beyond metadata.name/namespace (e.g. spec.nodeName for pods).
    pub fields: Fields,
    /// 64-bit FNV-1a of `metadata.uid`: where a `shardSelector` on the uid places the object
    /// (`shard::fnv1a64`; the uid never changes across an object's versions).
    pub uid_hash: u64,
    /// The object as JSON, resourceVersion included: what list, get and watch send (held
    /// LZ4-compressed by herald's face, see `Json`).
    pub bytes: Json,
    /// The object in protobuf (its message, without the envelope), encoded from `bytes` the first
    /// time a client asks for protobuf and shared by every list, get and watch after that.
    pub proto: OnceLock<Bytes>,
}

impl Entry {
    /// The object's protobuf message (see `proto`), encoded on first use.
    pub fn proto(&self, msg: crate::proto::MsgId) -> &Bytes {
        self.proto.get_or_init(|| {
            crate::proto::count_encoded();
            Bytes::from(crate::proto::schema().encode(msg, &self.bytes.get()))
        })
    }

    pub fn namespace(&self) -> &str {
        &self.key.0
    }
    pub fn name(&self) -> &str {
        &self.key.1
    }

    /// The value of a field for field selectors; `None` for fields this resource does not index.
    pub fn field(&self, field: &str) -> Option<String> {
        match field {
            "metadata.name" => Some(self.key.1.clone()),
            "metadata.namespace" => Some(self.key.0.clone()),
            f => self.fields.get(f).map(str::to_string),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in a resource's history. `obj` is the new state (for DELETED: the last state, stamped
/// with the deletion's RV, as the apiserver sends it); `prev` the state before, which watches with
/// selectors need to turn an object leaving the selection into DELETED, and which lists at an older
/// RV use to rewind.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub ty: EventType,
    pub obj: Arc<Entry>,
    pub prev: Option<Arc<Entry>>,
    /// `{"type":...,"object":...}\n`, encoded once and shared by every watcher while the event is
    /// recent (`recent::Recent`).
    pub line: Encoded,
    /// The protobuf watch frame, encoded the first time a protobuf watcher needs it and shared
    /// while the event is recent.
    pub frame: Encoded,
}

impl Event {
    /// The event's JSON watch line (see `line`).
    pub fn line(&self) -> Bytes {
        self.line
            .get_or(|| event_line(self.ty.as_str(), &self.obj.bytes.get()))
    }

    /// The event's protobuf watch frame (`proto::watch_frame` of the enveloped object).
    pub fn frame(&self, msg: crate::proto::MsgId, api_version: &str, kind: &str) -> Bytes {
        self.frame.get_or(|| {
            let obj = crate::proto::envelope(api_version, kind, self.obj.proto(msg));
            crate::proto::watch_frame(self.ty.as_str(), &obj)
        })
    }
}

/// A watch event line: `{"type":"<ty>","object":<object>}\n`.
pub fn event_line(ty: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(ty.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{plural} {name:?} not found")]
    NotFound { plural: String, name: String },
    #[error("{plural} {name:?} already exists")]
    AlreadyExists { plural: String, name: String },
    #[error(
        "Operation cannot be fulfilled on {plural} {name:?}: the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict { plural: String, name: String },
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: u64, oldest: u64 },
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLarge { requested: u64, current: u64 },
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    BadRequest(String),
}

/// Which state a list reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListAt {
    /// The newest state (resourceVersion unset or "0").
    Latest,
    /// The newest state, which must be at least this RV (resourceVersionMatch=NotOlderThan).
    NotOlderThan(u64),
    /// Exactly this RV (resourceVersionMatch=Exact, and continue tokens), rewound through history.
    Exact(u64),
}

/// One page of a list.
#[derive(Debug)]
pub struct Page {
    pub rv: u64,
    pub items: Vec<Arc<Entry>>,
    /// The last key returned when more items remain.
    pub next: Option<Key>,
    pub remaining: usize,
}

/// The field the log indexes: kubelets (and every node agent) list and watch their node's pods with
/// `fieldSelector=spec.nodeName=NODE`; without an index each such list reads every pod (30–40 ms at
/// 150,000 pods, and a restart brings one per node at once). The apiserver's watch cache indexes pods
/// by the same field.
pub const INDEXED_FIELD: &str = "spec.nodeName";

/// The value a field selector requires of [`INDEXED_FIELD`] (`spec.nodeName=X`), if it does and the
/// value is not empty (`spec.nodeName=`, the scheduler's unscheduled pods, are not indexed).
pub fn indexed_value(sel: &kube_selectors::FieldSelector) -> Option<&str> {
    sel.requirements
        .iter()
        .find(|r| !r.negated && r.field == INDEXED_FIELD && !r.value.is_empty())
        .map(|r| r.value.as_str())
}

/// An entry ordered and looked up by its key. NB: sets of these stand for maps from the key to the
/// entry without a second copy of the key (48 bytes and two allocations per object).
#[derive(Debug, Clone)]
struct ByKey(Arc<Entry>);

impl Borrow<Key> for ByKey {
    fn borrow(&self) -> &Key {
        &self.0.key
    }
}

impl PartialEq for ByKey {
    fn eq(&self, other: &ByKey) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for ByKey {}

impl PartialOrd for ByKey {
    fn partial_cmp(&self, other: &ByKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByKey {
    fn cmp(&self, other: &ByKey) -> std::cmp::Ordering {
        self.0.key.cmp(&other.0.key)
    }
}

/// A resource's current objects and its recent history.
#[derive(Debug)]
pub struct ResourceLog {
    /// The current objects by key.
    objects: BTreeSet<ByKey>,
    /// The current objects by their [`INDEXED_FIELD`] value (objects without it are absent); `None`
    /// for resources without that field.
    by_indexed: Option<HashMap<Box<str>, BTreeSet<ByKey>>>,
    history: VecDeque<Arc<Event>>,
    /// Every event with rv > horizon is in `history`; a watch or exact list from an RV below it is
    /// expired.
    horizon: u64,
    /// Events kept (the watch cache's capacity). NB: bounded so memory is too; a watcher whose cursor
    /// falls out of it gets 410 Expired and relists, as from the apiserver's watch cache.
    window: usize,
    /// Which events hold their encoded lines.
    recent: Recent,
}

impl ResourceLog {
    /// The log of `resource`'s objects, keeping `window` events; it indexes [`INDEXED_FIELD`] when
    /// the resource has that field.
    pub fn new(resource: &Resource, window: usize) -> ResourceLog {
        ResourceLog {
            objects: BTreeSet::new(),
            by_indexed: resource
                .extra_fields
                .contains(&INDEXED_FIELD)
                .then(HashMap::new),
            history: VecDeque::new(),
            horizon: 0,
            window: window.max(1),
            recent: Recent::new(DEFAULT_RECENT_BYTES),
        }
    }

    /// This log, holding the encoded lines of its newest events up to `bytes` (see `recent`).
    pub fn with_recent_bytes(mut self, bytes: usize) -> ResourceLog {
        self.recent = Recent::new(bytes);
        self
    }

    /// Bytes of encoded watch lines held for the newest events.
    pub fn recent_bytes(&self) -> usize {
        self.recent.held()
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    pub fn get(&self, key: &Key) -> Option<&Arc<Entry>> {
        self.objects.get(key).map(|e| &e.0)
    }

    pub fn get_parts(&self, namespace: &str, name: &str) -> Option<&Arc<Entry>> {
        // NB: BTreeMap<(String, String)> cannot be probed with borrowed parts; objects per namespace
        // are few enough that a range scan would cost more than this allocation.
        self.get(&(namespace.to_string(), name.to_string()))
    }

    /// Current objects in key order.
    pub fn values(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.objects.iter().map(|e| &e.0)
    }

    /// The newest event's RV, or the horizon when the history is empty.
    pub fn last_event_rv(&self) -> u64 {
        self.history.back().map_or(self.horizon, |e| e.rv)
    }

    pub fn horizon(&self) -> u64 {
        self.horizon
    }

    /// Stores `entry` as the object's current state; `record`: add the change to the history (ADDED
    /// or MODIFIED). Returns the previous state.
    pub fn upsert(&mut self, entry: Arc<Entry>, record: bool) -> Option<Arc<Entry>> {
        let prev = self.objects.replace(ByKey(entry.clone())).map(|e| e.0);
        if let Some(index) = &mut self.by_indexed {
            let (was, now) = (prev.as_deref().and_then(indexed), indexed(&entry));
            if let Some(v) = was
                && was != now
            {
                unindex(index, v, &entry.key);
            }
            if let Some(v) = now {
                // NB: also when the value is unchanged: the index holds the current state, and
                // must not keep the previous one alive.
                let state = ByKey(entry.clone());
                match index.get_mut(v) {
                    Some(set) => {
                        set.replace(state);
                    }
                    None => {
                        index.insert(v.into(), BTreeSet::from([state]));
                    }
                }
            }
        }
        if record {
            let ty = if prev.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            };
            self.record(ty, entry, prev.clone());
        }
        prev
    }

    /// Removes the object at `deleted.key`; `deleted` is its last state stamped with the deletion's
    /// RV (what the DELETED event carries). Returns the removed state, or None when it was absent
    /// (nothing is recorded then).
    pub fn remove(&mut self, deleted: Arc<Entry>) -> Option<Arc<Entry>> {
        let prev = self.objects.take(&deleted.key)?.0;
        if let Some(index) = &mut self.by_indexed
            && let Some(v) = indexed(&prev)
        {
            unindex(index, v, &deleted.key);
        }
        self.record(EventType::Deleted, deleted, Some(prev.clone()));
        Some(prev)
    }

    fn record(&mut self, ty: EventType, obj: Arc<Entry>, prev: Option<Arc<Entry>>) {
        // NB: the one decompression of an event's object: every watcher shares the line.
        let line = event_line(ty.as_str(), &obj.bytes.get());
        let line_len = line.len();
        self.history.push_back(Arc::new(Event {
            rv: obj.rv,
            ty,
            obj,
            prev,
            line: Encoded::held(line),
            frame: Encoded::default(),
        }));
        self.recent.pushed(&self.history, line_len);
        while self.history.len() > self.window {
            let dropped = self.history.pop_front().expect("len > window >= 1");
            self.recent.popped_front(&dropped);
            self.horizon = self.horizon.max(dropped.rv);
        }
    }

    /// Forgets the history up to `rv` (an etcd compaction, or a load before anyone watched): watches
    /// and exact lists from older RVs get 410.
    pub fn compact(&mut self, rv: u64) {
        self.history.clear();
        self.recent.cleared();
        self.horizon = self.horizon.max(rv);
    }

    /// Events after `rv`, oldest first; `Expired` when the window no longer reaches back to `rv`.
    pub fn events_after(&self, rv: u64) -> Result<Vec<Arc<Event>>, StoreError> {
        self.events_after_at_most(rv, usize::MAX)
    }

    /// The first `max` events after `rv` (a watcher far behind takes its backlog in bounded steps).
    pub fn events_after_at_most(&self, rv: u64, max: usize) -> Result<Vec<Arc<Event>>, StoreError> {
        if rv < self.horizon {
            return Err(StoreError::Expired {
                requested: rv,
                oldest: self.horizon,
            });
        }
        let start = self.history.partition_point(|e| e.rv <= rv);
        Ok(self.history.range(start..).take(max).cloned().collect())
    }

    /// One page of a list at `at`, where `current` is the newest RV the log is complete to. `ns`: a
    /// namespace, or all. `after`: the last key of the previous page. `indexed`: a value the
    /// selection requires of [`INDEXED_FIELD`] (see [`indexed_value`]), so only the objects indexed
    /// under it are read; `filter` still decides membership. `limit` counts matching items.
    // NB: `ByKey` orders by the entry's key alone, which never changes; the interior mutability
    // clippy sees is the entry's protobuf cache (`OnceLock`), which the order does not read.
    #[allow(clippy::too_many_arguments, clippy::mutable_key_type)]
    pub fn list(
        &self,
        current: u64,
        ns: Option<&str>,
        at: ListAt,
        after: Option<&Key>,
        limit: Option<usize>,
        indexed: Option<&str>,
        filter: &dyn Fn(&Entry) -> bool,
    ) -> Result<Page, StoreError> {
        let (rv, overrides) = match at {
            ListAt::Latest => (current, BTreeMap::new()),
            ListAt::NotOlderThan(n) | ListAt::Exact(n) if n > current => {
                return Err(StoreError::TooLarge {
                    requested: n,
                    current,
                });
            }
            ListAt::NotOlderThan(_) => (current, BTreeMap::new()),
            ListAt::Exact(n) => {
                if n < self.horizon {
                    return Err(StoreError::Expired {
                        requested: n,
                        oldest: self.horizon,
                    });
                }
                // Undo, newest first, every event after n: what remains per key is its state at n.
                let mut overrides: BTreeMap<&Key, Option<&Arc<Entry>>> = BTreeMap::new();
                let start = self.history.partition_point(|e| e.rv <= n);
                for e in self.history.range(start..).rev() {
                    overrides.insert(&e.obj.key, e.prev.as_ref());
                }
                (n, overrides)
            }
        };
        let in_ns = |k: &Key| ns.is_none_or(|ns| k.0 == ns);
        let lower = match after {
            Some(k) => Bound::Excluded(k.clone()),
            None => match ns {
                Some(ns) => Bound::Included((ns.to_string(), String::new())),
                None => Bound::Unbounded,
            },
        };
        // NB: with `indexed`, the current objects are those indexed under the value; an object
        // rewound to an older state is in `overrides` whatever its value now, so the merge below
        // still sees every object that matched at `rv`.
        let none = BTreeSet::new();
        let set = match (indexed, &self.by_indexed) {
            (Some(v), Some(index)) => index.get(v).unwrap_or(&none),
            _ => &self.objects,
        };
        let current = set
            .range::<Key, _>((lower.clone(), Bound::Unbounded))
            .map(|e| (&e.0.key, &e.0))
            .filter(|(k, _)| !overrides.contains_key(*k))
            .map(|(k, e)| (k, Some(e)));
        let rewound = overrides
            .range::<Key, _>((lower, Bound::Unbounded))
            .map(|(k, e)| (*k, *e));
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0;
        for (k, e) in merge_by_key(current, rewound) {
            if !in_ns(k) {
                if ns.is_some_and(|ns| k.0.as_str() > ns) {
                    break;
                }
                continue;
            }
            let Some(e) = e else { continue };
            if !filter(e) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                if next.is_none() {
                    next = items.last().map(|e: &Arc<Entry>| e.key.clone());
                }
                remaining += 1;
                continue;
            }
            items.push(e.clone());
        }
        Ok(Page {
            rv,
            items,
            next,
            remaining,
        })
    }
}

/// An entry's [`INDEXED_FIELD`] value, if it has one.
fn indexed(e: &Entry) -> Option<&str> {
    e.fields.get(INDEXED_FIELD).filter(|v| !v.is_empty())
}

fn unindex(index: &mut HashMap<Box<str>, BTreeSet<ByKey>>, value: &str, key: &Key) {
    if let Some(set) = index.get_mut(value) {
        set.remove(key);
        if set.is_empty() {
            index.remove(value);
        }
    }
}

/// Merges two key-ordered sequences with disjoint keys.
fn merge_by_key<'a, A, B>(a: A, b: B) -> impl Iterator<Item = (&'a Key, Option<&'a Arc<Entry>>)>
where
    A: Iterator<Item = (&'a Key, Option<&'a Arc<Entry>>)>,
    B: Iterator<Item = (&'a Key, Option<&'a Arc<Entry>>)>,
{
    let mut a = a.peekable();
    let mut b = b.peekable();
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) => {
            if x.0 <= y.0 {
                a.next()
            } else {
                b.next()
            }
        }
        (Some(_), None) => a.next(),
        (None, Some(_)) => b.next(),
        (None, None) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> Resource {
        Resource::builtin("configmaps").expect("configmaps")
    }

    fn mk_entry(ns: &str, name: &str, rv: u64) -> Arc<Entry> {
        Arc::new(Entry {
            key: (ns.into(), name.into()),
            rv,
            labels: Labels::new(),
            fields: Fields::default(),
            uid_hash: crate::shard::fnv1a64(name.as_bytes()),
            bytes: Json::compress(
                format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}"#)
                    .as_bytes(),
            ),
            proto: Default::default(),
        })
    }

    #[test]
    fn exact_lists_rewind_through_the_history_and_expire_past_the_window() {
        let mut log = ResourceLog::new(&cm(), 3);
        log.upsert(mk_entry("a", "x", 1), true);
        log.upsert(mk_entry("a", "y", 2), true);
        log.upsert(mk_entry("a", "x", 3), true);
        log.remove(mk_entry("a", "y", 4));
        let all = |_: &Entry| true;
        let at = |rv| log.list(4, None, ListAt::Exact(rv), None, None, None, &all);
        let names = |p: Page| -> Vec<(String, u64)> {
            p.items.iter().map(|e| (e.key.1.clone(), e.rv)).collect()
        };
        assert_eq!(names(at(4).expect("now")), vec![("x".into(), 3)]);
        assert_eq!(
            names(at(2).expect("rewound")),
            vec![("x".into(), 1), ("y".into(), 2)]
        );
        // window 3 dropped the first event: rv 0 is gone
        assert!(matches!(at(0), Err(StoreError::Expired { .. })));
        assert!(matches!(at(9), Err(StoreError::TooLarge { .. })));
        assert_eq!(log.events_after(2).expect("in window").len(), 2);
        assert!(log.events_after(0).is_err());
    }

    #[test]
    fn pages_follow_key_order_and_count_the_remainder() {
        let mut log = ResourceLog::new(&cm(), 10);
        for (i, n) in ["a", "b", "c", "d"].iter().enumerate() {
            log.upsert(mk_entry("ns", n, i as u64 + 1), false);
        }
        let p = log
            .list(4, Some("ns"), ListAt::Latest, None, Some(3), None, &|_| {
                true
            })
            .expect("page");
        assert_eq!(p.items.len(), 3);
        assert_eq!(p.next, Some(("ns".into(), "c".into())));
        assert_eq!(p.remaining, 1);
        let rest = log
            .list(
                4,
                Some("ns"),
                ListAt::Exact(4),
                p.next.as_ref(),
                Some(3),
                None,
                &|_| true,
            )
            .expect("page 2");
        assert_eq!(rest.items.len(), 1);
        assert!(rest.next.is_none());
    }

    fn on_node(name: &str, node: &str, rv: u64) -> Arc<Entry> {
        let mut e = Arc::into_inner(mk_entry("ns", name, rv)).expect("fresh");
        e.fields = Fields::new(&[INDEXED_FIELD], [node]);
        Arc::new(e)
    }

    #[test]
    fn resources_without_the_field_keep_no_index_and_list_alike() {
        let mut log = ResourceLog::new(&cm(), 10);
        assert!(log.by_indexed.is_none());
        log.upsert(on_node("a", "n1", 1), true);
        log.upsert(on_node("b", "n2", 2), true);
        let f = |e: &Entry| e.field(INDEXED_FIELD).as_deref() == Some("n1");
        let page = log
            .list(2, None, ListAt::Latest, None, None, Some("n1"), &f)
            .unwrap();
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].name(), "a");
    }

    #[test]
    fn a_list_by_node_name_reads_the_index_and_rewinds_through_moves() {
        let mut log = ResourceLog::new(&Resource::builtin("pods").expect("pods"), 100);
        log.upsert(on_node("a", "n1", 1), true);
        log.upsert(on_node("b", "n2", 2), true);
        log.upsert(on_node("c", "", 3), true);
        log.upsert(on_node("d", "n1", 4), true);
        // "b" moves to n1, "a" is deleted.
        log.upsert(on_node("b", "n1", 5), true);
        log.remove(on_node("a", "n1", 6));
        let names = |page: Page| {
            page.items
                .iter()
                .map(|e| e.key.1.clone())
                .collect::<Vec<_>>()
        };
        let on =
            |node: &'static str| move |e: &Entry| e.field(INDEXED_FIELD).as_deref() == Some(node);
        let n1 = on("n1");
        let latest = log
            .list(6, None, ListAt::Latest, None, None, Some("n1"), &n1)
            .unwrap();
        assert_eq!(names(latest), ["b", "d"]);
        // At RV 4 "a" was on n1 and "b" on n2: the index holds neither that way now.
        let then = log
            .list(6, None, ListAt::Exact(4), None, None, Some("n1"), &n1)
            .unwrap();
        assert_eq!(names(then), ["a", "d"]);
        let n2 = on("n2");
        let then = log
            .list(6, None, ListAt::Exact(4), None, None, Some("n2"), &n2)
            .unwrap();
        assert_eq!(names(then), ["b"]);
        let page = log
            .list(6, None, ListAt::Latest, None, Some(1), Some("n1"), &n1)
            .unwrap();
        let remaining = page.remaining;
        assert_eq!((names(page), remaining), (vec!["b".to_string()], 1));
        // Every answer equals the unindexed scan's.
        for (node, at) in [
            ("n1", ListAt::Latest),
            ("n2", ListAt::Exact(3)),
            ("n3", ListAt::Latest),
        ] {
            let f = on(node);
            let a = log.list(6, None, at, None, None, Some(node), &f).unwrap();
            let b = log.list(6, None, at, None, None, None, &f).unwrap();
            assert_eq!(names(a), names(b), "{node}");
        }
        // The index holds the current states only: replaced ones are not kept alive by it.
        let d = log.get(&("ns".into(), "d".into())).unwrap().clone();
        let d_weak = Arc::downgrade(&d);
        drop(d);
        log.upsert(on_node("d", "n1", 7), true);
        log.compact(7);
        assert_eq!(d_weak.strong_count(), 0, "the index dropped d's old state");
        let sel = kube_selectors::FieldSelector::parse("spec.nodeName=n1,status.phase!=x").unwrap();
        assert_eq!(indexed_value(&sel), Some("n1"));
        for unindexed in ["spec.nodeName=", "spec.nodeName!=n1", "metadata.name=a"] {
            let sel = kube_selectors::FieldSelector::parse(unindexed).unwrap();
            assert_eq!(indexed_value(&sel), None, "{unindexed}");
        }
    }
}
