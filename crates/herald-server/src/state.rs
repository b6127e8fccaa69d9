//! The state every face shares: the index behind one lock, per-job change notification, per-kind
//! upstream status, the encoded-body cache and the metrics.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use herald_core::Role;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::{Object, ObjectKey, StoredObject, WatchKind};
use crate::filter::JobSpec;
use crate::index::{Changed, Index};
use crate::metrics::{JobLabels, Metrics};
use crate::snapshot::{Encoded, EncodedCache, Shard};

/// A job's public identity and its change signal.
#[derive(Debug)]
pub struct JobHandle {
    pub name: String,
    pub role: Role,
    pub kinds: Vec<WatchKind>,
    /// Latest-value fan-out of the job's generation: long-polls wait on it, slow ones skip to the newest.
    /// It is also how readers learn the generation without the index lock.
    generation_tx: watch::Sender<u64>,
    /// Targets and groups at the published generation.
    targets: AtomicUsize,
    groups: AtomicUsize,
}

/// How one kind's upstream feed is doing.
#[derive(Debug, Default)]
pub struct KindStatus {
    /// A first complete list has been applied.
    pub synced: AtomicBool,
    /// The feed is failing; the last good state is being served.
    pub stale: AtomicBool,
    /// A (re)list is being buffered.
    pub in_init: AtomicBool,
    /// Milliseconds after `Shared::started` of the last upstream event; 0 before any.
    last_event_ms: AtomicU64,
    /// Objects cached.
    objects: AtomicUsize,
}

/// Everything shared between the upstream tasks and the HTTP faces.
#[derive(Debug)]
pub struct Shared {
    index: Mutex<Index>,
    jobs: Vec<JobHandle>,
    by_name: HashMap<String, usize>,
    kinds: BTreeMap<WatchKind, KindStatus>,
    cache: EncodedCache,
    pub metrics: Metrics,
    registry: Registry,
    started: Instant,
    /// SD responses sent (200 and 304), for the demo's summary line.
    pub served: AtomicU64,
    /// Cancelled when herald shuts down: waiting long-polls answer at once instead of holding it up.
    shutdown: CancellationToken,
}

impl Shared {
    pub fn new(specs: Vec<JobSpec>) -> Arc<Shared> {
        let metrics = Metrics::default();
        let mut kinds = BTreeMap::new();
        let mut jobs = Vec::new();
        let mut by_name = HashMap::new();
        for (j, spec) in specs.iter().enumerate() {
            for kind in spec.kinds() {
                kinds.entry(kind).or_insert_with(KindStatus::default);
            }
            by_name.insert(spec.name.clone(), j);
            metrics
                .job_targets
                .get_or_create(&JobLabels {
                    job: spec.name.clone(),
                })
                .set(0);
            jobs.push(JobHandle {
                name: spec.name.clone(),
                role: spec.role,
                kinds: spec.kinds(),
                generation_tx: watch::Sender::new(0),
                targets: AtomicUsize::new(0),
                groups: AtomicUsize::new(0),
            });
        }
        for kind in kinds.keys() {
            metrics
                .upstream_stale
                .get_or_create(&Metrics::kind(kind.plural()))
                .set(0);
            metrics
                .objects
                .get_or_create(&Metrics::kind(kind.plural()))
                .set(0);
        }
        let registry = metrics.registry();
        Arc::new(Shared {
            index: Mutex::new(Index::new(specs)),
            jobs,
            by_name,
            kinds,
            cache: EncodedCache::default(),
            metrics,
            registry,
            started: Instant::now(),
            served: AtomicU64::new(0),
            shutdown: CancellationToken::new(),
        })
    }

    /// Cancelled when herald stops.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.shutdown
    }

    pub fn jobs(&self) -> &[JobHandle] {
        &self.jobs
    }

    pub fn job(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The kinds some job needs: exactly the upstream watches herald runs.
    pub fn needed_kinds(&self) -> impl Iterator<Item = WatchKind> + '_ {
        self.kinds.keys().copied()
    }

    pub fn kind_status(&self, kind: WatchKind) -> Option<&KindStatus> {
        self.kinds.get(&kind)
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().expect("index lock poisoned")
    }

    /// Runs `f` on the index, then publishes what it changed. The lock is held only for `f`;
    /// readers of published state (generations, counts, cached bodies) never take it.
    pub fn update(&self, kind: WatchKind, f: impl FnOnce(&mut Index) -> Changed) {
        let (published, objects) = {
            let mut index = self.index();
            let changed = f(&mut index);
            let published: Vec<(usize, u64, usize, usize)> = changed
                .into_iter()
                .map(|j| (j, index.generation(j), index.targets(j), index.groups(j)))
                .collect();
            (published, index.cluster().count(kind))
        };
        if let Some(status) = self.kinds.get(&kind) {
            status.objects.store(objects, Ordering::Release);
        }
        self.metrics
            .objects
            .get_or_create(&Metrics::kind(kind.plural()))
            .set(objects as i64);
        for (j, generation, targets, groups) in published {
            let job = &self.jobs[j];
            job.targets.store(targets, Ordering::Release);
            job.groups.store(groups, Ordering::Release);
            // Two kinds' tasks can publish out of order; a generation never goes backwards.
            job.generation_tx.send_if_modified(|g| {
                let newer = generation > *g;
                if newer {
                    *g = generation;
                }
                newer
            });
            self.metrics
                .job_targets
                .get_or_create(&JobLabels {
                    job: job.name.clone(),
                })
                .set(targets as i64);
        }
    }

    pub fn apply(&self, obj: Object) {
        let kind = obj.kind();
        self.update(kind, |index| index.apply(obj));
    }

    pub fn delete(&self, kind: WatchKind, key: &ObjectKey) {
        self.update(kind, |index| index.delete(kind, key));
    }

    /// Swaps in a complete list of `kind`; objects under `keep` (listed but undecodable) keep their
    /// last good version.
    pub fn reset(
        &self,
        kind: WatchKind,
        objects: Vec<impl Into<StoredObject>>,
        keep: Vec<ObjectKey>,
    ) {
        self.update(kind, |index| index.reset(kind, objects, &keep));
    }

    /// A receiver that wakes when job `j` changes.
    pub fn subscribe(&self, j: usize) -> watch::Receiver<u64> {
        self.jobs[j].generation_tx.subscribe()
    }

    /// The encoded body of job `j` (or one shard of it) at its published generation. Cached bodies
    /// are served without the index lock, so a long relist being applied never delays a response.
    pub fn encoded(&self, j: usize, shard: Option<Shard>) -> Arc<Encoded> {
        let generation = *self.jobs[j].generation_tx.borrow();
        self.cache.get_or_build(j, shard, generation, || {
            // Only a new (job, shard, generation) takes the lock, to cut; encoding runs outside it.
            let cut = self.index().cut(j);
            Encoded::build(cut.generation, &cut.groups, shard)
        })
    }

    /// `(generation, targets, groups)` of job `j`, as published.
    pub fn job_counts(&self, j: usize) -> (u64, usize, usize) {
        let job = &self.jobs[j];
        (
            *job.generation_tx.borrow(),
            job.targets.load(Ordering::Acquire),
            job.groups.load(Ordering::Acquire),
        )
    }

    /// Objects cached per kind.
    pub fn object_counts(&self) -> BTreeMap<WatchKind, usize> {
        self.kinds
            .iter()
            .map(|(k, s)| (*k, s.objects.load(Ordering::Acquire)))
            .collect()
    }

    /// Every kind job `j` reads has completed a first sync.
    pub fn job_synced(&self, j: usize) -> bool {
        self.jobs[j]
            .kinds
            .iter()
            .all(|k| self.kinds[k].synced.load(Ordering::Acquire))
    }

    /// Some kind job `j` reads is failing upstream.
    pub fn job_stale(&self, j: usize) -> bool {
        self.jobs[j]
            .kinds
            .iter()
            .any(|k| self.kinds[k].stale.load(Ordering::Acquire))
    }

    /// Kinds that have not completed a first sync yet.
    pub fn unsynced_kinds(&self) -> Vec<WatchKind> {
        self.kinds
            .iter()
            .filter(|(_, s)| !s.synced.load(Ordering::Acquire))
            .map(|(k, _)| *k)
            .collect()
    }

    pub fn ready(&self) -> bool {
        self.unsynced_kinds().is_empty()
    }

    /// Records that an upstream event for `kind` arrived now.
    pub fn touch(&self, kind: WatchKind) {
        if let Some(s) = self.kinds.get(&kind) {
            let ms = self.started.elapsed().as_millis() as u64;
            s.last_event_ms.store(ms.max(1), Ordering::Release);
        }
    }

    /// Marks `kind` failing (`stale = true`) or healthy again.
    pub fn set_stale(&self, kind: WatchKind, stale: bool) {
        if let Some(s) = self.kinds.get(&kind) {
            let was = s.stale.swap(stale, Ordering::AcqRel);
            if was != stale {
                tracing::info!(kind = kind.plural(), stale, "upstream staleness changed");
            }
            self.metrics
                .upstream_stale
                .get_or_create(&Metrics::kind(kind.plural()))
                .set(i64::from(stale));
        }
    }

    /// A first or renewed complete list of `kind` was applied.
    pub fn mark_synced(&self, kind: WatchKind) {
        if let Some(s) = self.kinds.get(&kind) {
            s.synced.store(true, Ordering::Release);
        }
    }

    /// Seconds since the last upstream event of each kind (`None` before the first).
    pub fn last_event_ages(&self) -> BTreeMap<WatchKind, Option<f64>> {
        let now = self.started.elapsed().as_millis() as u64;
        self.kinds
            .iter()
            .map(|(k, s)| {
                let at = s.last_event_ms.load(Ordering::Acquire);
                (*k, (at > 0).then(|| now.saturating_sub(at) as f64 / 1000.0))
            })
            .collect()
    }
}
