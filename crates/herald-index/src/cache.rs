//! herald's copy of its upstream: one log per served resource holding each object's upstream JSON once
//! (managedFields cut) with the upstream's resourceVersions, and a bounded event history for downstream
//! watch resumption. The Kubernetes API face reads it directly; the discovery index shares its entries.
//!
//! Versions are per resource: herald knows the upstream's global counter only through the lists,
//! events and bookmarks of each resource it watches. A client that lists and watches one resource (every
//! informer) sees consistent versions; a version taken from another resource may be one this resource
//! has not reached, which waits for it and then gets 504, as from an apiserver's lagging watch cache.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kube_face::{Catalog, Entry, Key, ResId, Resource, ResourceLog};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::objects::WatchKind;
pub use crate::stored::Ingested;

/// How one resource's upstream feed is doing.
#[derive(Debug, Default)]
pub struct FeedStatus {
    /// A first complete list has been applied.
    pub synced: AtomicBool,
    /// The feed is failing; the last good state is being served.
    pub stale: AtomicBool,
    /// Milliseconds after the cache started of the last upstream event; 0 before any.
    pub last_event_ms: AtomicU64,
    /// Why the last failed list or watch failed (the status page shows it by the kind).
    pub last_error: std::sync::Mutex<Option<String>>,
}

/// One served resource.
#[derive(Debug)]
pub struct ResourceCache {
    pub resource: Resource,
    /// Set when discovery also reads this resource.
    pub watch_kind: Option<WatchKind>,
    log: RwLock<ResourceLog>,
    /// The newest version the state is complete to; every change is signalled on it.
    rv_tx: watch::Sender<u64>,
    pub status: FeedStatus,
}

/// One upstream change.
#[derive(Debug, Clone)]
pub enum Change {
    Upsert(Ingested),
    /// The object's last state, stamped with the deletion's version.
    Remove(Arc<Entry>),
}

/// What a relist changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SwapStats {
    pub added: usize,
    pub modified: usize,
    pub deleted: usize,
}

/// Every served resource.
#[derive(Debug)]
pub struct Cache {
    pub catalog: Catalog,
    resources: Vec<ResourceCache>,
    /// Whether changes are recorded for downstream watches (only when the Kubernetes API is served).
    recording: bool,
    started: Instant,
}

impl Cache {
    /// `window`: events kept per resource; `recording`: whether anyone can watch them.
    pub fn new(resources: Vec<Resource>, window: usize, recording: bool) -> Cache {
        let caches = resources
            .iter()
            .map(|r| ResourceCache {
                resource: r.clone(),
                watch_kind: WatchKind::of_resource(r),
                // Without watchers, one event is kept (removals always record theirs).
                log: RwLock::new(ResourceLog::new(r, if recording { window } else { 1 })),
                rv_tx: watch::Sender::new(0),
                status: FeedStatus::default(),
            })
            .collect();
        Cache {
            catalog: Catalog {
                resources,
                writable: false,
            },
            resources: caches,
            recording,
            started: Instant::now(),
        }
    }

    /// Whether entries keep their upstream JSON: only the Kubernetes API face sends it. Without it,
    /// discovery reads the slim projections and an entry keeps only its identity, version, labels
    /// and fields.
    pub fn keeps_bytes(&self) -> bool {
        self.recording
    }

    pub fn ids(&self) -> impl Iterator<Item = ResId> {
        0..self.resources.len()
    }

    pub fn get(&self, r: ResId) -> &ResourceCache {
        &self.resources[r]
    }

    pub fn id_of(&self, kind: WatchKind) -> Option<ResId> {
        self.resources
            .iter()
            .position(|c| c.watch_kind == Some(kind))
    }

    pub fn read(&self, r: ResId) -> RwLockReadGuard<'_, ResourceLog> {
        self.resources[r]
            .log
            .read()
            .expect("cache lock is never poisoned: no code panics while holding it")
    }

    fn write(&self, r: ResId) -> RwLockWriteGuard<'_, ResourceLog> {
        self.resources[r]
            .log
            .write()
            .expect("cache lock is never poisoned: no code panics while holding it")
    }

    pub fn resource_version(&self, r: ResId) -> u64 {
        *self.resources[r].rv_tx.borrow()
    }

    pub fn subscribe(&self, r: ResId) -> watch::Receiver<u64> {
        self.resources[r].rv_tx.subscribe()
    }

    /// Wakes on the changes of one value of the resource's indexed field only (a node's pods);
    /// `None` for resources without the field (`ResourceLog::subscribe_value`).
    pub fn subscribe_value(&self, r: ResId, value: &str) -> Option<watch::Receiver<u64>> {
        self.write(r).subscribe_value(value)
    }

    pub fn len(&self, r: ResId) -> usize {
        self.read(r).len()
    }

    /// Records that an upstream event arrived now.
    pub fn touch(&self, r: ResId) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.resources[r]
            .status
            .last_event_ms
            .store(ms.max(1), Ordering::Release);
    }

    /// Seconds since the last upstream event (`None` before the first).
    pub fn last_event_age(&self, r: ResId) -> Option<f64> {
        let now = self.started.elapsed().as_millis() as u64;
        let at = self.resources[r]
            .status
            .last_event_ms
            .load(Ordering::Acquire);
        (at > 0).then(|| now.saturating_sub(at) as f64 / 1000.0)
    }

    fn advance(&self, r: ResId, rv: u64) {
        self.resources[r]
            .rv_tx
            .send_modify(|cur| *cur = (*cur).max(rv));
    }

    /// An object was added or modified upstream.
    pub fn upsert(&self, r: ResId, entry: Arc<Entry>) {
        self.apply(r, vec![Change::Upsert(Ingested { entry, slim: None })]);
    }

    /// An object was deleted upstream; `deleted` carries the deletion's version.
    pub fn remove(&self, r: ResId, deleted: Arc<Entry>) {
        self.apply(r, vec![Change::Remove(deleted)]);
    }

    /// Applies upstream changes in order under one lock, then wakes watchers once. NB: batching is
    /// what keeps herald up with its upstream under a large fan-out: every wake-up costs each of
    /// thousands of downstream watchers a turn, so a burst of events must cost one wake-up, not one
    /// per event.
    pub fn apply(&self, r: ResId, changes: Vec<Change>) {
        let mut newest = 0;
        let wakes = {
            let mut log = self.write(r);
            for change in changes {
                match change {
                    Change::Upsert(Ingested { entry, .. }) => {
                        let rv = entry.rv;
                        newest = newest.max(rv);
                        let in_order = rv > log.last_event_rv();
                        log.upsert(entry, self.recording && in_order);
                        if !in_order && self.recording {
                            // NB: an event older than one already recorded (an upstream that went back
                            // in time, e.g. restored from a backup) cannot be placed in the history:
                            // forget the history so watchers behind it relist.
                            log.compact(rv.max(self.resource_version(r)));
                        }
                    }
                    Change::Remove(deleted) => {
                        newest = newest.max(deleted.rv);
                        log.remove(deleted);
                    }
                }
            }
            log.take_wakes()
        };
        self.advance(r, newest);
        wakes.send(newest);
    }

    /// Forgets every resource's history up to its current version (an operator's or a test's
    /// compaction): downstream watches from older versions get 410 and relist.
    pub fn compact_all(&self) {
        for r in self.ids() {
            let rv = self.resource_version(r);
            let wakes = {
                let mut log = self.write(r);
                log.compact(rv);
                log.take_wakes()
            };
            wakes.send(rv);
        }
    }

    /// The upstream is complete to `rv` (a bookmark).
    pub fn bookmark(&self, r: ResId, rv: u64) {
        self.advance(r, rv);
    }

    /// A complete list at `list_rv` replaces the resource's state. Downstream watchers see the
    /// difference as ordinary events (so a relist upstream never forces a relist downstream); objects
    /// under `keep` (listed but malformed) keep their stored version.
    pub fn swap(
        &self,
        r: ResId,
        list_rv: u64,
        entries: impl IntoIterator<Item = Arc<Entry>>,
        keep: &[Key],
    ) -> SwapStats {
        let mut stats = SwapStats::default();
        let wakes = {
            let mut log = self.write(r);
            let first = log.is_empty() && !self.resources[r].status.synced.load(Ordering::Acquire);
            let mut fresh: BTreeMap<Key, Arc<Entry>> =
                entries.into_iter().map(|e| (e.key.clone(), e)).collect();
            for k in keep {
                if !fresh.contains_key(k)
                    && let Some(old) = log.get(k)
                {
                    fresh.insert(k.clone(), old.clone());
                }
            }
            let gone: Vec<Arc<Entry>> = log
                .values()
                .filter(|e| !fresh.contains_key(&e.key))
                .cloned()
                .collect();
            let mut changed: Vec<Arc<Entry>> = fresh
                .into_values()
                .filter(|e| match log.get(&e.key) {
                    None => {
                        stats.added += 1;
                        true
                    }
                    // NB: without the Kubernetes API face entries hold no bytes; the version tells.
                    Some(old) if old.rv != e.rv || old.bytes != e.bytes => {
                        stats.modified += 1;
                        true
                    }
                    Some(_) => false,
                })
                .collect();
            changed.sort_by_key(|e| e.rv);
            stats.deleted = gone.len();
            let record = self.recording
                && !first
                && changed.first().is_none_or(|e| e.rv > log.last_event_rv());
            for e in changed {
                log.upsert(e, record);
            }
            for old in gone {
                let bytes = kube_face::scan::with_resource_version(&old.bytes.get(), list_rv)
                    .map(|b| old.bytes.like(b))
                    .unwrap_or_else(|| old.bytes.clone());
                log.remove(Arc::new(Entry {
                    key: old.key.clone(),
                    rv: list_rv,
                    labels: old.labels.clone(),
                    fields: old.fields.clone(),
                    uid_hash: old.uid_hash,
                    bytes,
                    proto: Default::default(),
                }));
            }
            if !record {
                // The first list is the state before anyone watched; a list whose changes cannot be
                // ordered after the history ends it (watchers behind it relist).
                log.compact(list_rv);
            }
            log.take_wakes()
        };
        self.advance(r, list_rv);
        wakes.send(list_rv);
        self.resources[r]
            .status
            .synced
            .store(true, Ordering::Release);
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_face::EventType;

    fn mk_entry(name: &str, rv: u64, v: &str) -> Arc<Entry> {
        Arc::new(Entry {
            key: ("default".into(), name.into()),
            rv,
            labels: Default::default(),
            fields: Default::default(),
            uid_hash: 0,
            bytes: kube_face::Json::compress(format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{rv}"}},"data":{{"v":"{v}"}}}}"#
            ).as_bytes()),
            proto: Default::default(),
        })
    }

    fn mk_cache() -> Cache {
        Cache::new(
            vec![Resource::builtin("configmaps").expect("cm")],
            100,
            true,
        )
    }

    #[test]
    fn a_relist_reaches_downstream_watchers_as_the_difference_never_as_a_reset() {
        let cache = mk_cache();
        cache.swap(
            0,
            10,
            vec![
                mk_entry("a", 5, "1"),
                mk_entry("b", 6, "1"),
                mk_entry("c", 7, "1"),
            ],
            &[],
        );
        assert_eq!(cache.resource_version(0), 10);
        assert!(
            cache
                .read(0)
                .events_after(10)
                .expect("in window")
                .is_empty()
        );
        // Upstream lost: a changed at 12, b deleted at 13, d added at 14; herald relists at 20.
        let stats = cache.swap(
            0,
            20,
            vec![
                mk_entry("a", 12, "2"),
                mk_entry("c", 7, "1"),
                mk_entry("d", 14, "1"),
            ],
            &[],
        );
        assert_eq!(
            stats,
            SwapStats {
                added: 1,
                modified: 1,
                deleted: 1
            }
        );
        let events = cache
            .read(0)
            .events_after(10)
            .expect("a watcher at 10 can resume");
        let seen: Vec<(EventType, &str, u64)> =
            events.iter().map(|e| (e.ty, e.obj.name(), e.rv)).collect();
        assert_eq!(
            seen,
            vec![
                (EventType::Modified, "a", 12),
                (EventType::Added, "d", 14),
                (EventType::Deleted, "b", 20),
            ]
        );
        let deleted = String::from_utf8(events[2].obj.bytes.get().into_owned()).expect("utf8");
        assert!(deleted.contains(r#""resourceVersion":"20""#), "{deleted}");
        assert_eq!(cache.resource_version(0), 20);
    }

    #[test]
    fn malformed_objects_of_a_relist_keep_their_last_good_version() {
        let cache = mk_cache();
        cache.swap(0, 10, vec![mk_entry("a", 5, "1")], &[]);
        cache.swap(0, 20, vec![], &[("default".into(), "a".into())]);
        assert_eq!(cache.len(0), 1);
    }

    #[test]
    fn bookmarks_and_events_advance_the_version_and_history_stays_ordered() {
        let cache = mk_cache();
        cache.swap(0, 10, vec![], &[]);
        cache.upsert(0, mk_entry("a", 11, "1"));
        cache.bookmark(0, 30);
        assert_eq!(cache.resource_version(0), 30);
        cache.remove(0, mk_entry("a", 31, "1"));
        let events = cache.read(0).events_after(10).expect("window");
        assert_eq!(events.len(), 2);
        // An event from the past compacts the history instead of disordering it.
        cache.upsert(0, mk_entry("z", 3, "1"));
        assert!(cache.read(0).events_after(10).is_err());
    }
}
