//! The state every face shares: the object cache (upstream objects and feed status per resource), the
//! discovery index behind one lock, per-job change notification, the encoded-body cache and the
//! metrics.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use herald_core::Role;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use kube_face::scan::Wanted;
use kube_face::{Entry, ResId};

use crate::kube_api::KubeFace;
pub use crate::kube_api::{DEFAULT_WATCH_BATCH, KubeApiOptions};
use crate::metrics::{JobLabels, Metrics};
use herald_index::body_store::BodyStore;
use herald_index::cache::{Cache, Change, Ingested, SwapStats};
use herald_index::encoded::Shard;
use herald_index::filter::JobSpec;
use herald_index::index::{Changed, Index};
use herald_index::{ObjectKey, Stored, StoredObject, WatchKind};

/// Which body the store keeps: a configured job's or a monitor job's (its name, and which of its
/// Istio parts), whole or one shard.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BodyKey {
    Job(usize, Option<Shard>),
    View(String, Option<Shard>, herald_core::istio::Part),
}

/// What a kept body was built from: a job's generation; a monitor job's view (the same `Arc`: a
/// changed monitor is a new view with other rules), its base job's generation and the Istio
/// policies' generation (0 without Istio).
#[derive(Debug, Clone)]
pub enum BodyVersion {
    Job(u64),
    View(Arc<crate::monitors::View>, u64, u64),
}

impl PartialEq for BodyVersion {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (BodyVersion::Job(a), BodyVersion::Job(b)) => a == b,
            (BodyVersion::View(v, g, s), BodyVersion::View(w, h, t)) => {
                Arc::ptr_eq(v, w) && g == h && s == t
            }
            _ => false,
        }
    }
}

/// A job's public identity and its change signal.
#[derive(Debug)]
pub struct JobHandle {
    pub name: String,
    pub role: Role,
    pub kinds: Vec<WatchKind>,
    /// The job's relabeling, applied when its bodies are encoded.
    pub relabel: Option<Arc<herald_core::JobRelabel>>,
    /// The index job whose groups it serves: itself, except for an Istio-aware job's companion.
    pub source: usize,
    /// For an Istio-aware job and its companion: how targets are placed, and which body this is.
    pub istio: Option<(herald_core::istio::IstioJob, herald_core::istio::Part)>,
    /// Handles serving the same index job besides this one (an Istio-aware job's companion).
    pub companions: Vec<usize>,
    /// Latest-value fan-out of the job's generation: long-polls wait on it, slow ones skip to the newest.
    /// It is also how readers learn the generation without the index lock.
    generation_tx: watch::Sender<u64>,
    /// Targets and groups at the published generation.
    targets: AtomicUsize,
    groups: AtomicUsize,
}

/// Everything shared between the upstream tasks and the HTTP faces.
#[derive(Debug)]
pub struct Shared {
    /// Every upstream object herald holds, per served resource.
    pub cache: Arc<Cache>,
    /// Set when the Kubernetes API face is on.
    pub kube_api: Option<Arc<KubeFace>>,
    index: Mutex<Index>,
    /// What an upstream object's head keeps, per served resource.
    heads: Vec<Wanted>,
    /// The values many objects' slim projections repeat, held once.
    pub segments: herald_index::slim::Segments,
    jobs: Vec<JobHandle>,
    by_name: HashMap<String, usize>,
    /// The kinds some job needs.
    kinds: Vec<WatchKind>,
    /// The bodies kept between requests, within the body budget.
    pub bodies: BodyStore<BodyKey, BodyVersion>,
    pub metrics: Metrics,
    registry: Registry,
    /// SD responses sent (200 and 304), for the demo's summary line.
    pub served: AtomicU64,
    /// Recent service discovery consumers, for the status page.
    pub consumers: crate::status::consumers::Consumers,
    /// Largest upstream object accepted, in bytes (`watch_lines::DEFAULT_MAX_OBJECT_BYTES` unless set).
    max_object_bytes: AtomicUsize,
    /// Cancelled when herald shuts down: waiting long-polls answer at once instead of holding it up.
    shutdown: CancellationToken,
    /// prometheus-operator monitors served as jobs (`monitors:` in the job file).
    pub monitors: crate::monitors::MonitorState,
    /// The PeerAuthentications Istio-aware jobs read.
    pub istio: crate::istio::IstioState,
}

impl Shared {
    /// Discovery only: the cache holds what the jobs need and records no watch history.
    pub fn new(specs: Vec<JobSpec>) -> Arc<Shared> {
        Shared::build(specs, None, vec![], None, Default::default())
    }

    /// Discovery and the Kubernetes API face: the cache also holds `kube.resources`.
    pub fn with_kube_api(specs: Vec<JobSpec>, kube: KubeApiOptions) -> Arc<Shared> {
        Shared::build(specs, Some(kube), vec![], None, Default::default())
    }

    /// Discovery, the Kubernetes API face when `kube` is set, and prometheus-operator monitors when
    /// `monitors` is set (`extra`: the monitor resources, cached with their JSON).
    pub fn with_monitors(
        specs: Vec<JobSpec>,
        kube: Option<KubeApiOptions>,
        extra: Vec<kube_face::Resource>,
        monitors: Option<herald_core::MonitorsConfig>,
        istio: herald_core::IstioConfig,
    ) -> Arc<Shared> {
        Shared::build(specs, kube, extra, monitors, istio)
    }

    fn build(
        specs: Vec<JobSpec>,
        kube: Option<KubeApiOptions>,
        extra: Vec<kube_face::Resource>,
        monitors: Option<herald_core::MonitorsConfig>,
        istio: herald_core::IstioConfig,
    ) -> Arc<Shared> {
        let metrics = Metrics::default();
        let mut kinds = Vec::new();
        let mut jobs = Vec::new();
        let mut by_name = HashMap::new();
        for (j, spec) in specs.iter().enumerate() {
            kinds.extend(spec.kinds());
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
                relabel: spec.relabel.clone(),
                source: j,
                istio: spec.istio.map(|mode| {
                    let job = herald_core::istio::IstioJob {
                        mode,
                        job: spec.name.clone(),
                    };
                    (job, herald_core::istio::Part::Plain)
                }),
                companions: vec![],
                generation_tx: watch::Sender::new(0),
                targets: AtomicUsize::new(0),
                groups: AtomicUsize::new(0),
            });
        }
        // An Istio-aware job's companion: the same groups, its targets under STRICT mTLS.
        for j in 0..specs.len() {
            let Some((job, _)) = jobs[j].istio.clone() else {
                continue;
            };
            let name = herald_core::istio::mtls_job_name(&jobs[j].name);
            let c = jobs.len();
            by_name.insert(name.clone(), c);
            metrics
                .job_targets
                .get_or_create(&JobLabels { job: name.clone() })
                .set(0);
            jobs[j].companions.push(c);
            jobs.push(JobHandle {
                name,
                role: jobs[j].role,
                kinds: jobs[j].kinds.clone(),
                relabel: jobs[j].relabel.clone(),
                source: j,
                istio: Some((job, herald_core::istio::Part::Mtls)),
                companions: vec![],
                generation_tx: watch::Sender::new(0),
                targets: AtomicUsize::new(0),
                groups: AtomicUsize::new(0),
            });
        }
        let istio = (jobs.iter().any(|h| h.istio.is_some())
            || monitors.as_ref().is_some_and(|m| m.istio))
        .then_some(istio);
        kinds.sort();
        kinds.dedup();
        // One store for both faces: a resource the jobs and the API both need is held once.
        let mut resources: Vec<kube_face::Resource> = kinds.iter().map(|k| k.resource()).collect();
        if let Some(k) = &kube {
            for r in &k.resources {
                if !resources
                    .iter()
                    .any(|o| o.group == r.group && o.plural == r.plural)
                {
                    resources.push(r.clone());
                }
            }
        }
        for r in extra {
            if !resources
                .iter()
                .any(|have| have.plural == r.plural && have.group == r.group)
            {
                resources.push(r);
            }
        }
        let window = kube.as_ref().map_or(1, |k| k.history_window);
        let cache = Arc::new(Cache::new(resources, window, kube.is_some()));
        for r in cache.ids() {
            let label = Metrics::kind(&cache.get(r).resource.plural);
            metrics.upstream_stale.get_or_create(&label).set(0);
            metrics.objects.get_or_create(&label).set(0);
            // Counters of what may go wrong start at 0 per kind, so `rate()` and `increase()` see
            // the first error (a series born at its first increment hides it).
            for c in [
                &metrics.upstream_errors,
                &metrics.upstream_malformed,
                &metrics.upstream_oversized,
                &metrics.upstream_lists,
            ] {
                let _created = c.get_or_create(&label);
            }
        }
        // Labels and selectable fields are kept only where something selects by them: the Kubernetes
        // API face (its clients' selectors) or a job's selectors on that kind.
        let heads = cache
            .ids()
            .map(|r| {
                let kind = cache.get(r).watch_kind;
                let keep = cache.keeps_bytes()
                    || kind.is_none_or(|k| specs.iter().any(|s| s.filter.selects(k)))
                    // A Prometheus object's namespace selectors read namespaces' labels.
                    || (kind == Some(WatchKind::Namespace)
                        && monitors.as_ref().is_some_and(|m| m.prometheus.is_some()));
                if keep {
                    Wanted::ALL
                } else {
                    Wanted {
                        labels: false,
                        fields: false,
                    }
                }
            })
            .collect();
        let kube_api = kube.map(|k| Arc::new(KubeFace::new(cache.clone(), k, &metrics)));
        let registry = metrics.registry();
        Arc::new(Shared {
            cache,
            kube_api,
            index: Mutex::new(Index::new(specs)),
            heads,
            segments: Default::default(),
            jobs,
            by_name,
            kinds,
            bodies: BodyStore::new(
                herald_index::body_store::DEFAULT_BUDGET_BYTES,
                metrics.bodies.clone(),
            ),
            metrics,
            registry,
            served: AtomicU64::new(0),
            consumers: crate::status::consumers::Consumers::default(),
            max_object_bytes: AtomicUsize::new(crate::watch_lines::DEFAULT_MAX_OBJECT_BYTES),
            shutdown: CancellationToken::new(),
            monitors: crate::monitors::MonitorState::new(monitors),
            istio: crate::istio::IstioState::new(istio),
        })
    }

    /// What the head of an object of resource `r` keeps besides its key and version.
    pub fn head_wanted(&self, r: ResId) -> Wanted {
        self.heads[r]
    }

    /// Largest upstream object accepted, in bytes.
    pub fn max_object_bytes(&self) -> usize {
        self.max_object_bytes.load(Ordering::Relaxed)
    }

    /// Sets the largest upstream object accepted (before the feeds start).
    pub fn set_max_object_bytes(&self, bytes: usize) {
        self.max_object_bytes.store(bytes.max(1), Ordering::Relaxed);
    }

    /// The most the kept SD bodies may hold (`body_store::BodyStore`); what no longer fits is evicted.
    pub fn set_body_budget(&self, bytes: usize) {
        self.bodies.set_budget(bytes);
    }

    /// The most the hot bodies' expanded blocks may hold (`hot_bodies::HotBodies`); 0 keeps none.
    pub fn set_hot_body_budget(&self, bytes: usize) {
        self.bodies.hot().set_budget(bytes);
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

    /// The kinds some job needs (herald watches these and whatever the Kubernetes API serves).
    pub fn needed_kinds(&self) -> impl Iterator<Item = WatchKind> + '_ {
        self.kinds.iter().copied()
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().expect("index lock poisoned")
    }

    /// Job `j`'s published generation.
    pub fn generation(&self, j: usize) -> u64 {
        *self.jobs[j].generation_tx.borrow()
    }

    /// Runs `f` on the index under its lock (`explain`: one object's groups, read on demand).
    pub fn read_index<R>(&self, f: impl FnOnce(&Index) -> R) -> R {
        f(&self.index())
    }

    /// Job `j`'s groups at its current generation.
    pub fn cut(&self, j: usize) -> herald_index::index::JobCut {
        self.index().cut(j)
    }

    /// Job `j`'s groups of objects in `namespaces` (all when empty), at its current generation.
    pub fn cut_namespaces(&self, j: usize, namespaces: &[String]) -> herald_index::index::JobCut {
        self.index().cut_namespaces(j, namespaces)
    }

    /// Holds every job back until each kind it reads has been listed in full (see
    /// `Index::expect_lists`). The upstream feeds call it before they start.
    pub fn expect_lists(&self) {
        let kinds: Vec<WatchKind> = self
            .cache
            .ids()
            .filter_map(|r| self.cache.get(r).watch_kind)
            .collect();
        self.index().expect_lists(kinds);
    }

    /// Runs `f` on the index, then publishes what it changed. The lock is held only for `f`;
    /// readers of published state (generations, counts, cached bodies) never take it.
    pub fn update(&self, kind: WatchKind, f: impl FnOnce(&mut Index) -> Changed) {
        let _ = kind;
        let published: Vec<(usize, u64, usize, usize)> = {
            let mut index = self.index();
            let changed = f(&mut index);
            changed
                .into_iter()
                .map(|j| (j, index.generation(j), index.targets(j), index.groups(j)))
                .collect()
        };
        let published = published
            .into_iter()
            .flat_map(|(j, generation, targets, groups)| {
                let companions = self.jobs[j].companions.iter();
                std::iter::once(j)
                    .chain(companions.copied())
                    .map(move |h| (h, generation, targets, groups))
            });
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

    /// An object of a watched kind was added or modified (fixtures; the upstream feeds `upsert`).
    pub fn apply(&self, obj: impl Into<StoredObject>) {
        let obj = obj.into();
        match self.cache.id_of(obj.kind) {
            Some(r) => self.apply_changes(r, vec![Change::Upsert(obj.stored.ingested())]),
            None => self.update(obj.kind, |index| index.apply(obj)),
        }
    }

    /// An object of a watched kind was deleted (fixtures; the upstream feeds `remove`).
    pub fn delete(&self, kind: WatchKind, key: &ObjectKey) {
        let entry = self.cache.id_of(kind).and_then(|r| {
            let e = self
                .cache
                .read(r)
                .get_parts(&key.namespace, &key.name)
                .cloned()?;
            Some((r, e))
        });
        match entry {
            Some((r, e)) => self.remove(r, e),
            None => self.update(kind, |index| index.delete(kind, key)),
        }
    }

    /// An upstream object was deleted; `deleted` carries the deletion's version.
    pub fn remove(&self, r: ResId, deleted: Arc<Entry>) {
        self.apply_changes(r, vec![Change::Remove(deleted)]);
    }

    /// A burst of upstream changes, in order: the cache takes them under one lock and wakes its
    /// watchers once; discovery applies them one by one.
    pub fn apply_changes(&self, r: ResId, changes: Vec<Change>) {
        if let Some(kind) = self.cache.get(r).watch_kind {
            for change in &changes {
                match change {
                    Change::Upsert(Ingested { entry, slim }) => {
                        let Some(slim) = slim else {
                            tracing::error!(
                                kind = kind.plural(),
                                "an object reached discovery without its projection; skipped"
                            );
                            continue;
                        };
                        let obj = StoredObject {
                            kind,
                            key: ObjectKey::of_entry(&entry.key),
                            stored: Stored::from_parts(entry.clone(), slim.clone()),
                        };
                        self.update(kind, |index| index.apply(obj));
                    }
                    Change::Remove(deleted) => {
                        let key = ObjectKey::of_entry(&deleted.key);
                        self.update(kind, |index| index.delete(kind, &key));
                    }
                }
            }
        }
        self.cache.apply(r, changes);
        self.count_objects(r);
    }

    /// A complete list at `rv` replaces resource `r`; objects under `keep` (listed but malformed)
    /// keep their last good version. Discovery and the cache each swap in one step.
    pub fn swap(
        &self,
        r: ResId,
        rv: u64,
        entries: Vec<Ingested>,
        keep: Vec<kube_face::Key>,
    ) -> SwapStats {
        if let Some(kind) = self.cache.get(r).watch_kind {
            let objects: Vec<StoredObject> = entries
                .iter()
                .filter_map(|i| {
                    Some(StoredObject {
                        kind,
                        key: ObjectKey::of_entry(&i.entry.key),
                        stored: Stored::from_parts(i.entry.clone(), i.slim.clone()?),
                    })
                })
                .collect();
            let keep_keys: Vec<ObjectKey> = keep.iter().map(ObjectKey::of_entry).collect();
            self.update(kind, |index| index.reset(kind, objects, &keep_keys));
        }
        let stats = self
            .cache
            .swap(r, rv, entries.into_iter().map(|i| i.entry), &keep);
        self.count_objects(r);
        stats
    }

    /// Swaps in a complete list of a watched kind (fixtures; the upstream feeds `swap`). Objects
    /// under `keep` keep their last good version.
    pub fn reset(
        &self,
        kind: WatchKind,
        objects: Vec<impl Into<StoredObject>>,
        keep: Vec<ObjectKey>,
    ) {
        let objects: Vec<StoredObject> = objects.into_iter().map(Into::into).collect();
        match self.cache.id_of(kind) {
            Some(r) => {
                let entries = objects.iter().map(|o| o.stored.ingested()).collect();
                let keep = keep
                    .into_iter()
                    .map(|k| (k.namespace.clone(), k.name.clone()))
                    .collect();
                let rv = self.cache.resource_version(r) + 1;
                self.swap(r, rv, entries, keep);
            }
            None => self.update(kind, |index| index.reset(kind, objects, &keep)),
        }
    }

    fn count_objects(&self, r: ResId) {
        self.metrics
            .objects
            .get_or_create(&Metrics::kind(&self.cache.get(r).resource.plural))
            .set(self.cache.len(r) as i64);
    }

    /// A receiver that wakes when job `j` changes.
    pub fn subscribe(&self, j: usize) -> watch::Receiver<u64> {
        self.jobs[j].generation_tx.subscribe()
    }

    /// The PeerAuthentications changed: every Istio-aware job gets a new generation.
    pub fn touch_istio_jobs(&self) {
        // With `monitors.istio`, the base jobs too: a monitor job's body is keyed on its base job's
        // generation, and its long-polls wait on it.
        let monitors = self.monitors.config.as_ref().is_some_and(|m| m.istio);
        let jobs: Vec<usize> = self
            .jobs
            .iter()
            .enumerate()
            .filter(|(j, h)| {
                (h.istio.is_some()
                    || (monitors && h.name.starts_with(crate::monitors::BASE_PREFIX)))
                    && h.source == *j
            })
            .map(|(j, _)| j)
            .collect();
        if !jobs.is_empty() {
            self.update(WatchKind::Pod, |index| index.touch(&jobs));
        }
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

    /// Objects cached per served resource (by plural name).
    pub fn object_counts(&self) -> BTreeMap<String, usize> {
        self.cache
            .ids()
            .map(|r| (self.cache.get(r).resource.plural.clone(), self.cache.len(r)))
            .collect()
    }

    fn kind_synced(&self, kind: WatchKind) -> bool {
        self.cache
            .id_of(kind)
            .is_some_and(|r| self.cache.get(r).status.synced.load(Ordering::Acquire))
    }

    fn kind_stale(&self, kind: WatchKind) -> bool {
        self.cache
            .id_of(kind)
            .is_some_and(|r| self.cache.get(r).status.stale.load(Ordering::Acquire))
    }

    /// Every kind job `j` reads has completed a first sync.
    pub fn job_synced(&self, j: usize) -> bool {
        self.jobs[j].kinds.iter().all(|k| self.kind_synced(*k))
    }

    /// Some kind job `j` reads is failing upstream.
    pub fn job_stale(&self, j: usize) -> bool {
        self.jobs[j].kinds.iter().any(|k| self.kind_stale(*k))
    }

    /// Served resources that have not completed a first sync yet.
    pub fn unsynced_kinds(&self) -> Vec<String> {
        self.cache
            .ids()
            .filter(|r| !self.cache.get(*r).status.synced.load(Ordering::Acquire))
            .map(|r| self.cache.get(r).resource.plural.clone())
            .collect()
    }

    pub fn ready(&self) -> bool {
        self.unsynced_kinds().is_empty() && self.monitors.ready() && self.istio.ready()
    }

    /// Marks a watched kind failing (`stale = true`) or healthy again.
    pub fn set_stale(&self, kind: WatchKind, stale: bool) {
        if let Some(r) = self.cache.id_of(kind) {
            self.set_resource_stale(r, stale);
        }
    }

    /// Marks a served resource failing (`stale = true`) or healthy again.
    pub fn set_resource_stale(&self, r: kube_face::ResId, stale: bool) {
        let c = self.cache.get(r);
        let was = c.status.stale.swap(stale, Ordering::AcqRel);
        if was != stale {
            tracing::info!(
                resource = c.resource.plural,
                stale,
                "upstream staleness changed"
            );
        }
        self.metrics
            .upstream_stale
            .get_or_create(&Metrics::kind(&c.resource.plural))
            .set(i64::from(stale));
    }

    /// A first or renewed complete list of a watched kind was applied (tests and fixtures; the
    /// upstream marks resources through the cache's swap).
    pub fn mark_synced(&self, kind: WatchKind) {
        if let Some(r) = self.cache.id_of(kind) {
            self.cache
                .get(r)
                .status
                .synced
                .store(true, Ordering::Release);
        }
    }

    /// Seconds since the last upstream event of each served resource (`None` before the first).
    pub fn last_event_ages(&self) -> BTreeMap<String, Option<f64>> {
        self.cache
            .ids()
            .map(|r| {
                (
                    self.cache.get(r).resource.plural.clone(),
                    self.cache.last_event_age(r),
                )
            })
            .collect()
    }
}
