//! One resource's objects and its bounded event history: what list, get and watch read. Each object's
//! JSON is held once (`Entry::bytes`), and each change's watch line is encoded once and shared by every
//! watcher (the apiserver's serialize-once cache, KEP-1152).
//!
//! The log does not own a resourceVersion counter: kube-sim stamps one global counter (as etcd does),
//! herald passes its upstream's versions through. Callers pass the current version where it matters.

use std::borrow::{Borrow, Cow};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::sync::watch;

use crate::packed::{Fields, Json, Labels, Proto};
use crate::recent::{DEFAULT_RECENT_BYTES, Encoded, Recent};
use crate::resource::Resource;

/// (namespace, name); namespace is "" for cluster-scoped resources. Ordered as the apiserver lists:
/// by namespace, then name.
/// NB: `ArcStr`s (one word each), so that a consumer keying its own maps by the same object (herald's
/// discovery) shares these strings rather than copying them, and objects of one namespace share
/// its string (`key`); measured in DESIGN-NOTES section 11 ("object keys shared").
pub type Key = (arcstr::ArcStr, arcstr::ArcStr);

/// The key of `name` in `namespace`. The namespace string is the one the calling thread made its
/// previous key with when equal: objects come listed namespace by namespace, so the ~100 namespaces
/// of `k8s-limits` are a handful of copies, not one per object.
pub fn key(namespace: &str, name: &str) -> Key {
    thread_local! {
        static LAST: std::cell::RefCell<arcstr::ArcStr> =
            const { std::cell::RefCell::new(arcstr::ArcStr::new()) };
    }
    let namespace = LAST.with_borrow_mut(|last| {
        if last.as_str() != namespace {
            *last = arcstr::ArcStr::from(namespace);
        }
        last.clone()
    });
    (namespace, arcstr::ArcStr::from(name))
}

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
    /// time a client asks for protobuf and shared by every list, get and watch after that; held in
    /// `bytes`' form (`Json::pack_proto`): a family member's against its family's protobuf
    /// dictionary (its first member's protobuf), an object held against its resource's dictionary
    /// against that one.
    /// NB: held as encoded, the protobuf of `k8s-limits`' objects took herald from 429 to 805 MiB
    /// once a client had listed every kind in protobuf (DESIGN-NOTES section 7).
    pub proto: OnceLock<Proto>,
}

impl Entry {
    /// The object's protobuf message (see `proto`): borrowed when held as encoded, expanded
    /// otherwise; encoded on first use.
    pub fn proto(&self, msg: crate::proto::MsgId) -> Cow<'_, [u8]> {
        self.bytes.proto(self.held_proto(msg))
    }

    /// The length of the object's protobuf message (encoding it on first use).
    pub fn proto_len(&self, msg: crate::proto::MsgId) -> usize {
        self.held_proto(msg).len()
    }

    /// Appends the object's protobuf message to `out` (a list expands each item straight into it).
    pub fn append_proto(&self, msg: crate::proto::MsgId, out: &mut Vec<u8>) {
        self.bytes.append_proto(self.held_proto(msg), out);
    }

    /// `proto`, for a caller that uses it once (a watch event's frame): when this call is the one
    /// that encodes it, the encoding itself rather than an expansion of what it was just packed
    /// into (one decompression less per event, the event's object being a new version).
    pub fn proto_once(&self, msg: crate::proto::MsgId) -> Cow<'_, [u8]> {
        let mut fresh = None;
        let held = self.proto.get_or_init(|| {
            let raw = self.encode_proto(msg);
            let held = self.bytes.pack_proto(raw.clone());
            fresh = Some(raw);
            held
        });
        match fresh {
            Some(raw) => Cow::Owned(raw),
            None => self.bytes.proto(held),
        }
    }

    fn held_proto(&self, msg: crate::proto::MsgId) -> &Proto {
        self.proto
            .get_or_init(|| self.bytes.pack_proto(self.encode_proto(msg)))
    }

    fn encode_proto(&self, msg: crate::proto::MsgId) -> Vec<u8> {
        crate::proto::count_encoded();
        let json = self.bytes.get();
        crate::proto::schema().encode(msg, &json)
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
            "metadata.name" => Some(self.key.1.to_string()),
            "metadata.namespace" => Some(self.key.0.to_string()),
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
    /// `{"type":...,"object":...}\n`, encoded by the first JSON watcher that needs it and shared by
    /// every other while the event is recent (`recent::Recent`).
    pub line: Encoded,
    /// The protobuf watch frame, encoded the first time a protobuf watcher needs it and shared
    /// while the event is recent.
    pub frame: Encoded,
}

impl Event {
    /// The length of the event's JSON watch line, built or not.
    pub fn line_len(&self) -> usize {
        event_line_len(self.ty.as_str(), self.obj.bytes.len())
    }

    /// The event's JSON watch line (see `line`).
    pub fn line(&self) -> Bytes {
        self.line
            .get_or(|| event_line(self.ty.as_str(), &self.obj.bytes.get()))
    }

    /// The event's protobuf watch frame (`proto::watch_frame` of the enveloped object).
    pub fn frame(&self, msg: crate::proto::MsgId, api_version: &str, kind: &str) -> Bytes {
        self.frame.get_or(|| {
            let obj = crate::proto::envelope(api_version, kind, &self.obj.proto_once(msg));
            crate::proto::watch_frame(self.ty.as_str(), &obj)
        })
    }
}

/// The length of `event_line(ty, object)` for an object of `object_len` bytes.
fn event_line_len(ty: &str, object_len: usize) -> usize {
    br#"{"type":""#.len() + ty.len() + br#"","object":"#.len() + object_len + b"}\n".len()
}

/// A watch event line: `{"type":"<ty>","object":<object>}\n`.
pub fn event_line(ty: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(event_line_len(ty, object.len()));
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

/// What the log keeps for one [`INDEXED_FIELD`] value (one node's pods): its current objects, its
/// recent events, and the wake-up of the watches that select it. NB: this is the apiserver's watch
/// cache "trigger" for pods: a pod event wakes the watches of its node only. Without it, each of a
/// cluster's kubelet-shaped watches (one per node) woke on every pod event of the cluster and read
/// the whole history to find none of its own: after a restart under 10,000 such watches that took
/// most of herald's CPU (issue 22's restart benchmark).
#[derive(Debug)]
struct ValueIndex {
    objects: BTreeSet<ByKey>,
    /// The events whose object or previous state has this value, oldest first: a subsequence of
    /// the history.
    events: VecDeque<Arc<Event>>,
    /// Every event of this value with rv > horizon is in `events` (an entry created later starts at
    /// the log's horizon: no event of its value was in the history then).
    horizon: u64,
    /// Wakes the watches of this value; created by the first `subscribe_value`.
    notify: Option<Arc<watch::Sender<u64>>>,
}

impl ValueIndex {
    fn new(horizon: u64) -> ValueIndex {
        ValueIndex {
            objects: BTreeSet::new(),
            events: VecDeque::new(),
            horizon,
            notify: None,
        }
    }

    /// Holds nothing and nobody waits on it: the log can forget it.
    fn is_idle(&self) -> bool {
        self.objects.is_empty()
            && self.events.is_empty()
            && self.notify.as_ref().is_none_or(|n| n.receiver_count() == 0)
    }
}

/// Wake-ups owed to the watches of indexed values after a write: sent by the writer once it has
/// released the log's lock (a watch woken earlier would only wait for that lock).
#[derive(Debug, Default)]
#[must_use = "the watches of the values written to wake only when `send` is called"]
pub struct Wakes(Vec<Arc<watch::Sender<u64>>>);

impl Wakes {
    /// Wakes each watch owed a wake-up once; `rv`: the newest version written.
    pub fn send(mut self, rv: u64) {
        self.0.sort_unstable_by_key(Arc::as_ptr);
        self.0.dedup_by(|a, b| Arc::ptr_eq(a, b));
        for s in self.0 {
            s.send_modify(|cur| *cur = (*cur).max(rv));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A resource's current objects and its recent history.
#[derive(Debug)]
pub struct ResourceLog {
    /// The current objects by key.
    objects: BTreeSet<ByKey>,
    /// The current objects and recent events by their [`INDEXED_FIELD`] value (objects without it
    /// are absent); `None` for resources without that field.
    by_indexed: Option<HashMap<Box<str>, ValueIndex>>,
    /// The index's size after its last sweep for idle values (see `subscribe_value`).
    swept_len: usize,
    /// Wake-ups owed since the last `take_wakes`.
    wakes: Wakes,
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
            swept_len: 0,
            wakes: Wakes::default(),
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
        // NB: a set ordered by (ArcStr, ArcStr) cannot be probed with borrowed parts; objects per
        // namespace are few enough that a range scan would cost more than this allocation.
        self.get(&key(namespace, name))
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
                value_index(index, v, self.horizon)
                    .objects
                    .replace(ByKey(entry.clone()));
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
        // NB: the line is built by the first JSON watcher that sends the event, and shared by the
        // others while the event is recent: built here, it cost a decompression and a copy of every
        // event's object where nobody watches in JSON (protobuf watchers, or none at all).
        let event = Arc::new(Event {
            rv: obj.rv,
            ty,
            obj,
            prev,
            line: Encoded::default(),
            frame: Encoded::default(),
        });
        let line_len = event.line_len();
        if let Some(index) = &mut self.by_indexed {
            for v in event_values(&event) {
                let at = value_index(index, v, self.horizon);
                at.events.push_back(event.clone());
                if let Some(n) = &at.notify {
                    self.wakes.0.push(n.clone());
                }
            }
        }
        self.history.push_back(event);
        self.recent.pushed(&self.history, line_len);
        while self.history.len() > self.window {
            let dropped = self.history.pop_front().expect("len > window >= 1");
            self.recent.popped_front(&dropped);
            self.horizon = self.horizon.max(dropped.rv);
            if let Some(index) = &mut self.by_indexed {
                for v in event_values(&dropped) {
                    let Some(at) = index.get_mut(v) else { continue };
                    // The value's events are a subsequence of the history: the oldest history
                    // event of this value is its oldest.
                    if at.events.front().is_some_and(|e| Arc::ptr_eq(e, &dropped)) {
                        at.events.pop_front();
                    }
                    at.horizon = at.horizon.max(dropped.rv);
                    if at.is_idle() {
                        index.remove(v);
                    }
                }
            }
        }
    }

    /// Forgets the history up to `rv` (an etcd compaction, or a load before anyone watched): watches
    /// and exact lists from older RVs get 410.
    pub fn compact(&mut self, rv: u64) {
        self.history.clear();
        self.recent.cleared();
        self.horizon = self.horizon.max(rv);
        if let Some(index) = &mut self.by_indexed {
            for at in index.values_mut() {
                at.events.clear();
                at.horizon = at.horizon.max(rv);
                // Every watch of a value wakes to find its version expired, as every watch of the
                // resource does.
                if let Some(n) = &at.notify {
                    self.wakes.0.push(n.clone());
                }
            }
            index.retain(|_, at| !at.is_idle());
        }
    }

    /// Subscribes to the changes of the objects whose [`INDEXED_FIELD`] is `value` (an event whose
    /// object or previous state has it); `None` for resources without the field. The writer sends
    /// the wake-ups it took with [`ResourceLog::take_wakes`].
    pub fn subscribe_value(&mut self, value: &str) -> Option<watch::Receiver<u64>> {
        let index = self.by_indexed.as_mut()?;
        if index.len() > 2 * self.swept_len + 64 {
            // NB: a value nobody writes to keeps its entry after its last watch leaves; sweeping
            // whenever the index doubles bounds those at the values in use, at O(1) per subscribe.
            index.retain(|_, at| !at.is_idle());
            self.swept_len = index.len();
        }
        let at = value_index(index, value, self.horizon);
        let notify = at
            .notify
            .get_or_insert_with(|| Arc::new(watch::Sender::new(0)));
        Some(notify.subscribe())
    }

    /// The wake-ups owed to the watches of the values written since the last call; the writer
    /// sends them after releasing the log.
    pub fn take_wakes(&mut self) -> Wakes {
        std::mem::take(&mut self.wakes)
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
        Ok(first_after(&self.history, rv, max))
    }

    /// The first `max` events after `rv` whose object or previous state has `value` as its
    /// [`INDEXED_FIELD`] (every other event of the resource is one a watch selecting the value
    /// skips); `Expired` when an event of the value after `rv` has left the window. Resources
    /// without the field: as [`ResourceLog::events_after_at_most`].
    pub fn events_of_value_after(
        &self,
        value: &str,
        rv: u64,
        max: usize,
    ) -> Result<Vec<Arc<Event>>, StoreError> {
        let Some(index) = &self.by_indexed else {
            return self.events_after_at_most(rv, max);
        };
        let (events, horizon) = match index.get(value) {
            Some(at) => (Some(&at.events), at.horizon),
            // No event of the value is in the history.
            None => (None, self.horizon),
        };
        if rv < horizon {
            return Err(StoreError::Expired {
                requested: rv,
                oldest: horizon,
            });
        }
        Ok(events.map_or_else(Vec::new, |events| first_after(events, rv, max)))
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
                Some(ns) => Bound::Included((ns.into(), arcstr::ArcStr::new())),
                None => Bound::Unbounded,
            },
        };
        // NB: with `indexed`, the current objects are those indexed under the value; an object
        // rewound to an older state is in `overrides` whatever its value now, so the merge below
        // still sees every object that matched at `rv`.
        let none = BTreeSet::new();
        let set = match (indexed, &self.by_indexed) {
            (Some(v), Some(index)) => index.get(v).map_or(&none, |at| &at.objects),
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

/// The first `max` of `events` (in RV order) after `rv`.
fn first_after(events: &VecDeque<Arc<Event>>, rv: u64, max: usize) -> Vec<Arc<Event>> {
    let start = events.partition_point(|e| e.rv <= rv);
    events.range(start..).take(max).cloned().collect()
}

/// The distinct [`INDEXED_FIELD`] values of an event's object and previous state.
fn event_values(e: &Event) -> impl Iterator<Item = &str> {
    let now = indexed(&e.obj);
    let was = e
        .prev
        .as_deref()
        .and_then(indexed)
        .filter(|v| Some(*v) != now);
    now.into_iter().chain(was)
}

/// The index of `value`, created (starting at `horizon`) when absent.
fn value_index<'a>(
    index: &'a mut HashMap<Box<str>, ValueIndex>,
    value: &str,
    horizon: u64,
) -> &'a mut ValueIndex {
    // NB: get_mut first: the entry API would allocate the key for every lookup.
    if !index.contains_key(value) {
        index.insert(value.into(), ValueIndex::new(horizon));
    }
    index.get_mut(value).expect("inserted above")
}

fn unindex(index: &mut HashMap<Box<str>, ValueIndex>, value: &str, key: &Key) {
    if let Some(at) = index.get_mut(value) {
        at.objects.remove(key);
        if at.is_idle() {
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
            p.items
                .iter()
                .map(|e| (e.key.1.to_string(), e.rv))
                .collect()
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
        assert_eq!(
            (names(page), remaining),
            (vec![arcstr::ArcStr::from("b")], 1)
        );
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

    fn pods() -> Resource {
        Resource::builtin("pods").expect("pods")
    }

    fn names_of(events: &[Arc<Event>]) -> Vec<(&str, u64)> {
        events.iter().map(|e| (e.obj.name(), e.rv)).collect()
    }

    #[test]
    fn a_values_events_are_the_history_events_on_it_before_or_after() {
        let mut log = ResourceLog::new(&pods(), 100);
        log.upsert(on_node("a", "n1", 1), true);
        log.upsert(on_node("b", "n2", 2), true);
        log.upsert(on_node("c", "", 3), true);
        log.upsert(on_node("c", "n1", 4), true); // scheduled onto n1
        log.upsert(on_node("b", "n1", 5), true); // moved from n2 to n1
        log.remove(on_node("a", "n1", 6));
        let n1 = log.events_of_value_after("n1", 0, usize::MAX).unwrap();
        assert_eq!(names_of(&n1), [("a", 1), ("c", 4), ("b", 5), ("a", 6)]);
        let n2 = log.events_of_value_after("n2", 0, usize::MAX).unwrap();
        assert_eq!(names_of(&n2), [("b", 2), ("b", 5)]);
        assert!(log.events_of_value_after("n9", 0, 10).unwrap().is_empty());
        // After a version, and at most `max`.
        let n1 = log.events_of_value_after("n1", 4, 1).unwrap();
        assert_eq!(names_of(&n1), [("b", 5)]);
        // Each equals the whole history filtered by the value, as a watch would filter it.
        for v in ["n1", "n2", "n3"] {
            for after in 0..=6 {
                let on = |e: &Entry| indexed(e) == Some(v);
                let want: Vec<_> = log
                    .events_after(after)
                    .unwrap()
                    .into_iter()
                    .filter(|e| on(&e.obj) || e.prev.as_deref().is_some_and(on))
                    .collect();
                let got = log.events_of_value_after(v, after, usize::MAX).unwrap();
                assert_eq!(names_of(&got), names_of(&want), "{v} after {after}");
            }
        }
        // Resources without the field read the whole history.
        let mut cms = ResourceLog::new(&cm(), 10);
        cms.upsert(on_node("a", "n1", 1), true);
        cms.upsert(on_node("b", "n2", 2), true);
        assert_eq!(cms.events_of_value_after("n1", 0, 10).unwrap().len(), 2);
        assert!(cms.subscribe_value("n1").is_none());
    }

    #[test]
    fn a_value_expires_only_when_its_own_events_left_the_window() {
        let mut log = ResourceLog::new(&pods(), 3);
        log.upsert(on_node("a", "n1", 1), true);
        log.upsert(on_node("x", "n2", 2), true);
        log.upsert(on_node("y", "n2", 3), true);
        log.upsert(on_node("z", "n2", 4), true);
        log.upsert(on_node("w", "n3", 5), true);
        // The window (3 events) holds rv 3..=5: a whole-resource watch from 1 is expired.
        assert!(matches!(
            log.events_after(1),
            Err(StoreError::Expired { .. })
        ));
        // n1's one event (rv 1) left: from 0 it is expired, from 1 on nothing of n1 was lost.
        assert!(matches!(
            log.events_of_value_after("n1", 0, 10),
            Err(StoreError::Expired {
                requested: 0,
                oldest: 1
            })
        ));
        assert!(log.events_of_value_after("n1", 1, 10).unwrap().is_empty());
        // n2 lost rv 2 only.
        assert!(log.events_of_value_after("n2", 1, 10).is_err());
        let n2 = log.events_of_value_after("n2", 2, 10).unwrap();
        assert_eq!(names_of(&n2), [("y", 3), ("z", 4)]);
        // A value the log holds nothing of answers as the whole resource does.
        assert!(log.events_of_value_after("n9", 1, 10).is_err());
        assert!(log.events_of_value_after("n9", 2, 10).unwrap().is_empty());
        // A compaction expires every value up to its version.
        log.compact(5);
        for v in ["n1", "n2", "n3", "n9"] {
            assert!(log.events_of_value_after(v, 4, 10).is_err(), "{v}");
            assert!(
                log.events_of_value_after(v, 5, 10).unwrap().is_empty(),
                "{v}"
            );
        }
    }

    #[test]
    fn writes_wake_the_watches_of_their_values_only() {
        let mut log = ResourceLog::new(&pods(), 100);
        let mut n1 = log.subscribe_value("n1").expect("pods index nodeName");
        let mut n2 = log.subscribe_value("n2").expect("pods index nodeName");
        n1.mark_unchanged();
        n2.mark_unchanged();
        log.upsert(on_node("a", "n1", 1), true);
        log.upsert(on_node("b", "n1", 2), true);
        log.upsert(on_node("c", "", 3), true);
        let wakes = log.take_wakes();
        assert!(
            !n1.has_changed().unwrap(),
            "nothing wakes before the writer sends"
        );
        wakes.send(3);
        assert!(n1.has_changed().unwrap());
        assert!(!n2.has_changed().unwrap(), "n2 was not written to");
        assert_eq!(*n1.borrow_and_update(), 3);
        assert!(log.take_wakes().is_empty(), "taken once");
        // A pod moving from n1 to n2 wakes both; a write without history wakes none.
        log.upsert(on_node("a", "n2", 4), true);
        log.upsert(on_node("d", "n1", 5), false);
        log.take_wakes().send(5);
        assert!(n1.has_changed().unwrap() && n2.has_changed().unwrap());
        n1.mark_unchanged();
        n2.mark_unchanged();
        // A compaction wakes every value's watches, to find their versions expired.
        log.compact(5);
        log.take_wakes().send(5);
        assert!(n1.has_changed().unwrap() && n2.has_changed().unwrap());
    }

    #[test]
    fn values_nothing_holds_are_forgotten() {
        let mut log = ResourceLog::new(&pods(), 2);
        let len = |log: &ResourceLog| log.by_indexed.as_ref().map_or(0, HashMap::len);
        log.upsert(on_node("a", "n1", 1), true);
        log.remove(on_node("a", "n1", 2));
        assert_eq!(len(&log), 1, "n1's events are still in the window");
        log.upsert(on_node("b", "n2", 3), true);
        log.upsert(on_node("c", "n2", 4), true);
        assert_eq!(len(&log), 1, "n1's events left the window: only n2 remains");
        // Watches of values no object has: kept while watched, swept once the index doubled.
        let watches: Vec<_> = (0..100)
            .map(|i| log.subscribe_value(&format!("gone-{i}")).unwrap())
            .collect();
        assert_eq!(len(&log), 101);
        drop(watches);
        for i in 0..200 {
            drop(log.subscribe_value(&format!("other-{i}")));
        }
        assert!(len(&log) < 200, "idle values were swept: {}", len(&log));
        assert!(log.events_of_value_after("n2", 2, 10).unwrap().len() == 2);
    }
}
