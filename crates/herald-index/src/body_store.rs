//! The response bodies herald keeps between requests, within a byte budget: the latest body of each
//! (job or monitor job, shard), least recently used evicted first (DESIGN-NOTES section 3).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use std::time::Instant;

use bytes::Bytes;

use crate::encoded::{Encoded, Expanded, GzipForm};
use crate::hot_bodies::{DEFAULT_HOT_BYTES, HotBodies, HotMetrics};

/// The default budget: every shard body of both jobs of the steady-state benchmark (k8s-limits, ten
/// shards of `pod` and `endpointslice`: 2.2 GB identity, ~190 MB in blocks) with room for one
/// whole job besides (see DESIGN-NOTES section 3 for the figures).
pub const DEFAULT_BUDGET_BYTES: usize = 384 << 20;

/// At most this many bodies are kept whatever their size: bounds the bookkeeping when clients ask
/// for many different shard counts of small jobs.
const MAX_ENTRIES: usize = 4096;

/// The store's metrics (registered in `Metrics::registry`).
#[derive(Debug, Clone, Default)]
pub struct BodyMetrics {
    /// Bytes the kept bodies hold.
    pub held: Gauge,
    pub budget: Gauge,
    /// Bodies built (a request found none of its version kept).
    pub builds: Counter,
    /// Bodies dropped to stay within the budget (or the entry bound).
    pub evictions: Counter,
    /// Blocks compressed, and blocks taken over from the previous generation unchanged.
    pub blocks_compressed: Counter,
    pub blocks_taken: Counter,
    /// The hot bodies' (`hot_bodies::HotBodies`).
    pub hot: HotMetrics,
}

/// One kept body (or one being built: `cell` empty, nothing held yet).
#[derive(Debug)]
struct Slot<V> {
    version: V,
    cell: Arc<OnceLock<Arc<Encoded>>>,
    /// Bytes counted for it in `Slots::held`.
    held: usize,
    /// `Slots::tick` when last asked for.
    used: u64,
}

#[derive(Debug)]
struct Slots<K, V> {
    map: HashMap<K, Slot<V>>,
    held: usize,
    tick: u64,
}

impl<K, V> Default for Slots<K, V> {
    fn default() -> Self {
        Slots {
            map: HashMap::new(),
            held: 0,
            tick: 0,
        }
    }
}

/// The latest body per key `K` (a job and shard), with the version `V` it was built at.
///
/// NB: what is held is what the store keeps; a body being built, or being sent after it was
/// evicted, lives until its request ends besides (one per request in flight at most).
#[derive(Debug)]
pub struct BodyStore<K, V> {
    budget: AtomicUsize,
    slots: Mutex<Slots<K, V>>,
    /// The kept bodies asked for again and again, held expanded besides (in the room the budget
    /// leaves beside the kept bodies, at most `--hot-body-bytes`).
    hot: HotBodies,
    metrics: BodyMetrics,
}

impl<K: Hash + Eq + Clone, V: Clone + PartialEq> BodyStore<K, V> {
    pub fn new(budget: usize, metrics: BodyMetrics) -> BodyStore<K, V> {
        metrics
            .budget
            .set(i64::try_from(budget).unwrap_or(i64::MAX));
        BodyStore {
            budget: AtomicUsize::new(budget),
            slots: Mutex::default(),
            hot: HotBodies::new(DEFAULT_HOT_BYTES, metrics.hot.clone()),
            metrics,
        }
    }

    pub fn budget(&self) -> usize {
        self.budget.load(Ordering::Relaxed)
    }

    /// The hot bodies: responses of a body form asked for again within seconds share it expanded
    /// (identity) or whole (gzip), within what the budget leaves beside the compressed bodies.
    pub fn hot(&self) -> &HotBodies {
        &self.hot
    }

    /// An identity response of `body` begins: its hot form's shared blocks, if it is hot (or
    /// becomes hot now and fits beside the kept bodies: `HotBodies::identity`).
    pub fn hot_identity(&self, body: &Arc<Encoded>, now: Instant) -> Option<Arc<Expanded>> {
        // NB: the store's lock is held while the hot forms are admitted (lock order: store, then
        // hot), so what both hold never passes the budget.
        let slots = self.lock();
        let room = self.budget().saturating_sub(slots.held);
        self.hot.identity(body, now, room)
    }

    /// A gzip response of `body` (its gzip form `gzip`) begins: the whole gzip body in one buffer
    /// if it is hot (or becomes hot now), as `hot_identity`.
    pub fn hot_gzip(&self, body: &Arc<Encoded>, gzip: &GzipForm, now: Instant) -> Option<Bytes> {
        let cell = {
            let slots = self.lock();
            let room = self.budget().saturating_sub(slots.held);
            self.hot.gzip(body, gzip.len(), now, room)?
        };
        // Outside the locks: the first response joins the deflated blocks.
        Some(cell.get_or_init(|| gzip.whole(body.blocks())).clone())
    }

    /// Bytes the kept bodies and the hot forms hold, read together.
    pub fn held_with_hot(&self) -> (usize, usize) {
        let slots = self.lock();
        (slots.held, self.hot.held())
    }

    /// Sets the budget, evicting at once what no longer fits.
    pub fn set_budget(&self, bytes: usize) {
        self.budget.store(bytes, Ordering::Relaxed);
        self.metrics
            .budget
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        let mut slots = self.lock();
        self.evict(&mut slots);
    }

    /// Bytes the kept bodies hold.
    pub fn held(&self) -> usize {
        self.lock().held
    }

    fn lock(&self) -> MutexGuard<'_, Slots<K, V>> {
        self.slots.lock().expect("body store lock poisoned")
    }

    /// The body kept for `key` last, whatever its version, with its version (never waits for one
    /// being built).
    pub fn latest(&self, key: &K) -> Option<(V, Arc<Encoded>)> {
        let slots = self.lock();
        let slot = slots.map.get(key)?;
        slot.cell.get().map(|b| (slot.version.clone(), b.clone()))
    }

    /// The body of `key` at `version` if one is kept (never builds, never waits).
    pub fn built(&self, key: &K, version: &V) -> Option<Arc<Encoded>> {
        match self.lock().map.get(key) {
            Some(s) if s.version == *version => s.cell.get().cloned(),
            _ => None,
        }
    }

    /// Keeps `body` as `key`'s at `version`, built alongside another body, unless a body of that
    /// version is kept or being built.
    pub fn offer(&self, key: K, version: V, body: Arc<Encoded>) {
        let mut slots = self.lock();
        // NB: never `OnceLock::set` a slot of this version: `set` waits for a build under way, and
        // that build (the sibling's request, at once) may be waiting to offer this thread's key its
        // body: a deadlock, with the store lock held. It finishes by itself.
        if slots.map.get(&key).is_some_and(|s| s.version == version) {
            return;
        }
        slots.tick += 1;
        let held = body.held_bytes();
        let slot = Slot {
            version,
            cell: Arc::new(OnceLock::from(body)),
            held,
            used: slots.tick,
        };
        slots.held += held;
        if let Some(old) = slots.map.insert(key, slot) {
            slots.held -= old.held;
        }
        self.evict(&mut slots);
    }

    /// The body of `key` at `version`, built by `build` if none is kept; `build` is handed the body
    /// kept before (with its version), to copy unchanged groups and blocks from. Concurrent requests
    /// for one body wait for one build instead of each encoding (an HA pair costs one encode).
    pub fn get_or_build(
        &self,
        key: &K,
        version: V,
        build: impl FnOnce(Option<(V, Arc<Encoded>)>) -> Encoded,
    ) -> Arc<Encoded> {
        let (cell, prev) = {
            let mut slots = self.lock();
            slots.tick += 1;
            let tick = slots.tick;
            match slots.map.get_mut(key) {
                Some(slot) if slot.version == version => {
                    slot.used = tick;
                    (slot.cell.clone(), None)
                }
                _ => {
                    let prev = slots.map.remove(key).and_then(|old| {
                        slots.held -= old.held;
                        old.cell.get().cloned().map(|b| (old.version, b))
                    });
                    let cell: Arc<OnceLock<Arc<Encoded>>> = Arc::default();
                    let slot = Slot {
                        version,
                        cell: cell.clone(),
                        held: 0,
                        used: tick,
                    };
                    slots.map.insert(key.clone(), slot);
                    (cell, prev)
                }
            }
        };
        // Outside the store lock: other keys stay available while this one encodes.
        let mut built = false;
        let body = cell
            .get_or_init(|| {
                built = true;
                Arc::new(build(prev))
            })
            .clone();
        if built {
            self.metrics.builds.inc();
            self.metrics.blocks_taken.inc_by(body.blocks_taken() as u64);
            self.metrics
                .blocks_compressed
                .inc_by((body.blocks().len() - body.blocks_taken()) as u64);
            self.recount(key, &body);
        }
        body
    }

    /// `body` (kept for `key`) holds more than counted (its gzip form was made): counts it, and
    /// evicts what no longer fits.
    pub fn recount(&self, key: &K, body: &Arc<Encoded>) {
        let mut slots = self.lock();
        let slots = &mut *slots;
        if let Some(slot) = slots.map.get_mut(key)
            && slot.cell.get().is_some_and(|b| Arc::ptr_eq(b, body))
        {
            let held = body.held_bytes();
            slots.held = slots.held - slot.held + held;
            slot.held = held;
        }
        self.evict(slots);
    }

    /// Drops the least recently used kept bodies until the rest fit the budget and the entry bound.
    /// Bodies being built hold nothing yet and stay.
    /// Hot forms go first: expanding a body again is cheap, encoding it is not.
    fn evict(&self, slots: &mut Slots<K, V>) {
        let budget = self.budget();
        self.hot.shrink_to(budget.saturating_sub(slots.held));
        while slots.held > budget || slots.map.len() > MAX_ENTRIES {
            let Some(lru) = slots
                .map
                .iter()
                .filter(|(_, s)| s.cell.get().is_some())
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            let slot = slots.map.remove(&lru).expect("found just now");
            slots.held -= slot.held;
            self.metrics.evictions.inc();
        }
        self.metrics
            .held
            .set(i64::try_from(slots.held).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use herald_core::{LabelSet, TargetGroup};

    use super::*;
    use crate::groups::{Group, Interner};

    /// `n` groups of `targets` targets each, every label distinct (tests of the bodies).
    pub(crate) fn mk_groups(n: usize, targets: usize) -> Vec<Arc<Group>> {
        let interner = Interner::default();
        (0..n)
            .map(|g| {
                Arc::new(Group::of(
                    &TargetGroup {
                        source: format!("g{g}"),
                        targets: (0..targets)
                            .map(|t| {
                                LabelSet::from([(
                                    "__address__".to_string(),
                                    format!("127.0.{g}.{t}:80"),
                                )])
                            })
                            .collect(),
                        labels: LabelSet::from([("k".to_string(), format!("v{g}"))]),
                    },
                    &interner,
                ))
            })
            .collect()
    }

    #[test]
    fn the_store_builds_once_per_version() {
        let store: BodyStore<usize, u64> = BodyStore::new(1 << 30, BodyMetrics::default());
        let groups = mk_groups(3, 2);
        let mut builds = 0;
        for _ in 0..3 {
            store.get_or_build(&0, 1, |_| {
                builds += 1;
                Encoded::build(1, &groups, None)
            });
        }
        assert_eq!(builds, 1);
        store.get_or_build(&0, 2, |prev| {
            builds += 1;
            assert_eq!(
                prev.map(|(v, _)| v),
                Some(1),
                "the previous body is handed over"
            );
            Encoded::build(2, &groups, None)
        });
        assert_eq!(builds, 2);
    }

    #[test]
    fn least_recently_used_bodies_are_evicted_to_stay_within_the_budget() {
        let groups = mk_groups(50, 4);
        let one = Encoded::build(1, &groups, None).held_bytes();
        let metrics = BodyMetrics::default();
        // Room for two bodies, not three.
        let store: BodyStore<usize, u64> = BodyStore::new(one * 2 + one / 2, metrics.clone());
        for key in 0..2 {
            store.get_or_build(&key, 1, |_| Encoded::build(1, &groups, None));
        }
        store.get_or_build(&0, 1, |_| unreachable!("kept"));
        store.get_or_build(&2, 1, |_| Encoded::build(1, &groups, None));
        assert!(store.held() <= store.budget());
        assert_eq!(metrics.evictions.get(), 1);
        assert!(
            store.built(&1, &1).is_none(),
            "key 1 was used least recently"
        );
        assert!(store.built(&0, &1).is_some() && store.built(&2, &1).is_some());
        // A budget smaller than one body keeps nothing, and still answers.
        store.set_budget(one / 2);
        assert_eq!(store.held(), 0);
        let body = store.get_or_build(&3, 1, |_| Encoded::build(1, &groups, None));
        assert_eq!(body.identity(), Encoded::build(1, &groups, None).identity());
        assert_eq!(store.held(), 0);
        assert_eq!(metrics.held.get(), 0);
    }

    #[test]
    fn hot_forms_fit_beside_the_kept_bodies_and_give_way_to_them() {
        let groups = mk_groups(2000, 4);
        let metrics = BodyMetrics::default();
        let one = Encoded::build(1, &groups, None);
        let (kept, len) = (one.held_bytes(), one.len());
        assert!(kept < len, "the body holds {kept} of {len} bytes");
        // Room for two kept bodies and one hot form beside them.
        let budget = 2 * kept + len + kept / 2;
        let store: BodyStore<usize, u64> = BodyStore::new(budget, metrics.clone());
        let build = |_| Encoded::build(1, &groups, None);
        let a = store.get_or_build(&0, 1, build);
        let t = Instant::now();
        assert!(store.hot_identity(&a, t).is_none(), "sent once");
        assert!(store.hot_identity(&a, t).is_some(), "sent again: hot");
        let b = store.get_or_build(&1, 1, build);
        let (held, hot) = store.held_with_hot();
        assert_eq!(held, 2 * kept);
        assert!(
            hot > len && held + hot <= budget,
            "{held} + {hot} > {budget}"
        );
        // A second hot form does not fit beside the first: the least recently used one goes.
        store.hot_identity(&b, t);
        assert!(store.hot_identity(&b, t).is_some());
        assert!(store.held_with_hot().1 < 2 * len);
        // A third kept body needs the room: the hot form gives way, no kept body is evicted.
        store.get_or_build(&2, 1, build);
        assert_eq!(store.held_with_hot(), (3 * kept, 0));
        assert_eq!(metrics.evictions.get(), 0);
        // And no room is left for a hot form beside them.
        assert!(store.hot_identity(&b, t).is_none() && store.hot_identity(&b, t).is_none());
        assert_eq!(metrics.hot.held.get(), 0);
        // A gzip form (a few KiB deflated per block) fits in what is left, and sends its bytes.
        let g = b.gzip().0;
        store.recount(&1, &b);
        assert!(store.hot_gzip(&b, &g, t).is_none());
        let whole = store.hot_gzip(&b, &g, t).expect("hot");
        assert_eq!(whole.len(), g.len());
        let (held, hot) = store.held_with_hot();
        assert!(held + hot <= budget, "{held} + {hot} > {budget}");
    }

    #[test]
    fn a_gzip_form_made_later_is_counted_and_may_evict() {
        let groups = mk_groups(50, 4);
        let store: BodyStore<usize, u64> = BodyStore::new(1 << 30, BodyMetrics::default());
        let body = store.get_or_build(&0, 1, |_| Encoded::build(1, &groups, None));
        let before = store.held();
        let (_, made) = body.gzip();
        assert!(made);
        store.recount(&0, &body);
        assert!(store.held() > before);
        store.set_budget(before);
        assert_eq!(
            store.held(),
            0,
            "the body with its gzip form no longer fits"
        );
    }

    /// As `Shared::encoded` does for an Istio-aware job (0) and its companion (1) asked for at the
    /// same generation at once: each build offers the other its body while the other's is under way.
    #[test]
    fn a_job_and_its_companion_built_at_once_both_answer() {
        use std::sync::Barrier;
        use std::time::Duration;

        let cache = Arc::new(BodyStore::<usize, u64>::new(
            1 << 30,
            BodyMetrics::default(),
        ));
        let barrier = Arc::new(Barrier::new(2));
        let (tx, rx) = std::sync::mpsc::channel();
        for (own, sibling) in [(0usize, 1usize), (1, 0)] {
            let (cache, barrier, tx) = (cache.clone(), barrier.clone(), tx.clone());
            std::thread::spawn(move || {
                let body = cache.get_or_build(&own, 1, |_| {
                    barrier.wait(); // both builds under way
                    cache.offer(sibling, 1, Arc::new(Encoded::build(1, &[], None)));
                    Encoded::build(1, &[], None)
                });
                tx.send(body.generation).expect("the test waits");
            });
        }
        for _ in 0..2 {
            let answered = rx.recv_timeout(Duration::from_secs(10));
            assert_eq!(answered, Ok(1), "both requests are answered (no deadlock)");
        }
        // A later generation offered by a sibling is kept for its first request.
        cache.offer(0, 2, Arc::new(Encoded::build(2, &[], None)));
        assert_eq!(cache.built(&0, &2).map(|b| b.generation), Some(2));
    }
}
