//! The discovery index: every job's target groups, maintained incrementally from per-kind
//! `apply` / `delete` / `reset` calls. Synchronous and single-writer: the upstream tasks feed it under
//! one lock, and the HTTP face takes that lock only to cut a new generation's groups.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use herald_core::{Role, SharedGroup, TargetGroup};

use crate::encoded::Groups;
use crate::filter::JobSpec;
use crate::groups::{Group, Interner, PodBlocks, Recent};
use crate::lookup::{Decoded, Dependency, JobLookup};
use crate::objects::{Object, ObjectKey, WatchKind};
use crate::stored::{Cluster, StoredObject};

/// Which jobs an index operation changed (by position in the job list).
pub type Changed = BTreeSet<usize>;

/// One job's current output.
#[derive(Debug, Default)]
struct JobState {
    /// Groups keyed by their object's key: ordered, so responses list groups in a stable order.
    /// Kept compact (`groups.rs`): label maps cost several times their JSON, and JSON per target
    /// repeats every pod's labels.
    groups: BTreeMap<ObjectKey, Arc<Group>>,
    /// What each group was built from besides its own object.
    deps: HashMap<ObjectKey, Vec<Dependency>>,
    /// Bumped once per index operation that changed this job's groups.
    generation: u64,
    targets: usize,
    /// The groups in order at a generation, as `cut` last made them: every shard's body of one
    /// generation shares the one vector (`encoded::Groups`).
    cut: std::sync::Mutex<Option<(u64, Groups)>>,
}

/// The groups built from one looked-up object. NB: most objects feed one group (a pod, the slice
/// that lists it), so a few are kept in a vector — a `BTreeSet` node costs ~600 bytes even for one
/// entry, ~90 MB at `k8s-limits` — and a set takes over where many do (a Namespace under
/// attach_metadata feeds every pod in it, and removals must stay cheap).
#[derive(Debug)]
enum Dependents {
    Few(Vec<(usize, ObjectKey)>),
    Many(BTreeSet<(usize, ObjectKey)>),
}

impl Default for Dependents {
    fn default() -> Dependents {
        Dependents::Few(Vec::new())
    }
}

impl Dependents {
    const FEW: usize = 8;

    fn insert(&mut self, j: usize, key: &ObjectKey) {
        match self {
            Dependents::Few(v) => {
                if v.iter().any(|(dj, dk)| *dj == j && dk == key) {
                    return;
                }
                if v.len() < Self::FEW {
                    // Most objects feed one or two groups: grow one at a time, not to 4 (a Vec's
                    // first step), which cost ~18 MB at `k8s-limits`.
                    v.reserve_exact(1);
                    v.push((j, key.clone()));
                } else {
                    let mut set: BTreeSet<_> = v.drain(..).collect();
                    set.insert((j, key.clone()));
                    *self = Dependents::Many(set);
                }
            }
            Dependents::Many(set) => {
                set.insert((j, key.clone()));
            }
        }
    }

    /// Removes `(j, key)`; returns whether none are left.
    fn remove(&mut self, j: usize, key: &ObjectKey) -> bool {
        match self {
            Dependents::Few(v) => {
                v.retain(|(dj, dk)| !(*dj == j && dk == key));
                v.is_empty()
            }
            Dependents::Many(set) => {
                set.remove(&(j, key.clone()));
                set.is_empty()
            }
        }
    }

    fn each(&self, mut f: impl FnMut(&(usize, ObjectKey))) {
        match self {
            Dependents::Few(v) => v.iter().for_each(&mut f),
            Dependents::Many(set) => set.iter().for_each(f),
        }
    }
}

/// A consistent cut of one job: its groups at one generation.
#[derive(Debug, Clone)]
pub struct JobCut {
    pub generation: u64,
    pub groups: Groups,
}

/// Every job's target groups over one `Cluster`.
#[derive(Debug)]
pub struct Index {
    cluster: Cluster,
    specs: Vec<JobSpec>,
    jobs: Vec<JobState>,
    /// Reverse dependencies: a looked-up object → the (job, group key) pairs built from it.
    dependents: HashMap<Dependency, Dependents>,
    /// The strings and label blocks of every group.
    interner: Interner,
    /// Kinds whose first complete list has not arrived yet (`expect_lists`). A job that reads one of
    /// them builds no group until it has: Prometheus too waits for every informer of a role to sync
    /// before it builds targets (discovery/kubernetes/endpointslice.go `Run`, `WaitForCacheSync`).
    /// NB: without this, the EndpointSlices (fewer, smaller) list first, every slice group is built
    /// with its pods missing, and the pods' list then rebuilds all of them: twice the work and
    /// garbage on every start.
    pending: BTreeSet<WatchKind>,
}

impl Index {
    pub fn new(specs: Vec<JobSpec>) -> Index {
        let jobs = specs.iter().map(|_| JobState::default()).collect();
        Index {
            cluster: Cluster::default(),
            specs,
            jobs,
            dependents: HashMap::new(),
            interner: Interner::default(),
            pending: BTreeSet::new(),
        }
    }

    /// Holds back every job reading one of `kinds` until a complete list of each (a `reset`) has
    /// arrived. The upstream feeds call it before they start; fixtures that feed objects one by
    /// one do not.
    pub fn expect_lists(&mut self, kinds: impl IntoIterator<Item = WatchKind>) {
        self.pending.extend(kinds);
    }

    /// Whether every kind job `j` reads has been listed in full.
    fn listed(&self, j: usize) -> bool {
        self.specs[j]
            .kinds()
            .iter()
            .all(|k| !self.pending.contains(k))
    }

    pub fn specs(&self) -> &[JobSpec] {
        &self.specs
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// An object was added or modified.
    pub fn apply(&mut self, obj: impl Into<StoredObject>) -> Changed {
        let obj = obj.into();
        let kind = obj.kind;
        let key = obj.key.clone();
        self.interner.adopt(&key.name);
        if !self.cluster.insert(obj) {
            return Changed::new();
        }
        self.settle([(kind, key)])
    }

    /// An object was deleted.
    pub fn delete(&mut self, kind: WatchKind, key: &ObjectKey) -> Changed {
        if !self.cluster.remove(kind, key) {
            return Changed::new();
        }
        self.settle([(kind, key.clone())])
    }

    /// A relist finished: `objects` is now the whole of `kind`, except that objects under `keep`
    /// (listed, but not decodable) keep their stored version. Only objects that differ from what was
    /// stored are recomputed, and all of it happens in this one call, so no reader ever sees a mix of
    /// the old and the new list.
    pub fn reset(
        &mut self,
        kind: WatchKind,
        objects: Vec<impl Into<StoredObject>>,
        keep: &[ObjectKey],
    ) -> Changed {
        let objects: Vec<StoredObject> = objects.into_iter().map(Into::into).collect();
        for o in &objects {
            self.interner.adopt(&o.key.name);
        }
        let changed = self.cluster.replace(kind, objects, keep);
        let waiting: Vec<usize> = (0..self.specs.len()).filter(|&j| !self.listed(j)).collect();
        let mut work = self.affected(changed.into_iter().map(|key| (kind, key)));
        if self.pending.remove(&kind) {
            // The last list a job waited for: build all its groups now, once.
            for j in waiting.into_iter().filter(|&j| self.listed(j)) {
                let primary = WatchKind::primary(self.specs[j].role);
                work.extend(self.cluster.keys(primary).map(|key| (j, key.clone())));
            }
        }
        self.rebuild(work)
    }

    /// The generation and groups of job `job`.
    pub fn cut(&self, job: usize) -> JobCut {
        let state = &self.jobs[job];
        // A panic while the cache was held left it consistent (it is set in one assignment).
        let mut cached = state
            .cut
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let groups = match &*cached {
            Some((generation, groups)) if *generation == state.generation => groups.clone(),
            _ => {
                let groups: Groups = state.groups.values().cloned().collect();
                *cached = Some((state.generation, groups.clone()));
                groups
            }
        };
        JobCut {
            generation: state.generation,
            groups,
        }
    }

    /// As `cut`, only the groups of objects in `namespaces` (every group when empty). Groups are kept
    /// in (namespace, name) order, so each namespace is one range of the map.
    pub fn cut_namespaces(&self, job: usize, namespaces: &[String]) -> JobCut {
        if namespaces.is_empty() {
            return self.cut(job);
        }
        let state = &self.jobs[job];
        let mut sorted: Vec<&str> = namespaces.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let mut groups = Vec::new();
        for ns in sorted {
            groups.extend(
                state
                    .groups
                    .range(ObjectKey::new(ns, "")..)
                    .take_while(|(k, _)| &*k.namespace == ns)
                    .map(|(_, g)| g.clone()),
            );
        }
        JobCut {
            generation: state.generation,
            groups: groups.into(),
        }
    }

    pub fn generation(&self, job: usize) -> u64 {
        self.jobs[job].generation
    }

    /// Job `job`'s group of object `key` (of its role's primary kind), if it has one.
    pub fn group(&self, job: usize, key: &ObjectKey) -> Option<Arc<Group>> {
        self.jobs[job].groups.get(key).cloned()
    }

    /// Job `job`'s groups that were built reading object `key` of `kind` besides their own object
    /// (a pod listed by an Endpoints object, a Service, a Node under attach_metadata).
    pub fn groups_reading(
        &self,
        job: usize,
        kind: WatchKind,
        key: &ObjectKey,
    ) -> Vec<(ObjectKey, Arc<Group>)> {
        let mut out = Vec::new();
        if let Some(deps) = self.dependents.get(&(kind, key.clone())) {
            deps.each(|(j, k)| {
                if *j == job
                    && let Some(g) = self.jobs[job].groups.get(k)
                {
                    out.push((k.clone(), g.clone()));
                }
            });
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Bumps the generation of `jobs` whose output changed for a reason outside the index (the
    /// PeerAuthentications an Istio-aware job reads).
    pub fn touch(&mut self, jobs: &[usize]) -> Changed {
        for &j in jobs {
            self.jobs[j].generation += 1;
        }
        jobs.iter().copied().collect()
    }

    pub fn targets(&self, job: usize) -> usize {
        self.jobs[job].targets
    }

    pub fn groups(&self, job: usize) -> usize {
        self.jobs[job].groups.len()
    }

    /// Recomputes every group that `touched` objects feed, and bumps the generation of each job whose
    /// output changed.
    fn settle(&mut self, touched: impl IntoIterator<Item = Dependency>) -> Changed {
        let work = self.affected(touched);
        self.rebuild(work)
    }

    /// The (job, group key) pairs that `touched` objects feed.
    fn affected(
        &self,
        touched: impl IntoIterator<Item = Dependency>,
    ) -> BTreeSet<(usize, ObjectKey)> {
        let mut work: BTreeSet<(usize, ObjectKey)> = BTreeSet::new();
        for (kind, key) in touched {
            for (j, spec) in self.specs.iter().enumerate() {
                if WatchKind::primary(spec.role) == kind {
                    work.insert((j, key.clone()));
                }
            }
            if let Some(deps) = self.dependents.get(&(kind, key.clone())) {
                deps.each(|d| {
                    work.insert(d.clone());
                });
            }
            // NB: a Namespace change also reaches groups that never looked the Namespace up because it
            // did not exist yet; those lookups were recorded too, so the dependents map covers them.
        }
        work
    }

    /// Recomputes the given groups of jobs whose lists are all in, and bumps the generation of each
    /// job whose output changed.
    ///
    /// Building a group (decode the projection, run herald-core's role code, intern its labels)
    /// needs only the cluster and the interner (`&self`, locked per shard); storing it needs the
    /// index. So a large batch — a relist, a start — is built by worker threads over chunks of the
    /// work while this thread stores what they send: on `k8s-limits` the 150,000-pod list costs ~10 s of building on
    /// one thread, and herald's first sync is mostly that.
    fn rebuild(&mut self, work: BTreeSet<(usize, ObjectKey)>) -> Changed {
        let ready: Vec<bool> = (0..self.specs.len()).map(|j| self.listed(j)).collect();
        // Key-major order: a pod job's group for `ns/web-abc-1` and the slice `ns/web-xyz` that lists
        // that pod come close together, so the pod is decoded once for both while it is in the
        // chunk's decode cache (a Deployment's pods and its Service's slices share a name prefix).
        let mut work: Vec<(ObjectKey, usize)> = work
            .into_iter()
            .filter(|(j, _)| ready[*j])
            .map(|(j, key)| (key, j))
            .collect();
        work.sort_unstable();
        let Index {
            cluster,
            specs,
            jobs,
            dependents,
            interner,
            ..
        } = self;
        let (cluster, specs, shared) = (&*cluster, &specs[..], &*interner);
        let mut changed = Changed::new();
        let mut store = |b: Built| {
            if store_group(&mut jobs[b.job], dependents, b.job, b.key, b.group) {
                changed.insert(b.job);
            }
        };
        let chunks: Vec<&[(ObjectKey, usize)]> = work.chunks(BUILD_CHUNK).collect();
        let workers = build_workers(work.len());
        if workers == 0 {
            let mut recent = Recent::for_groups(work.len());
            for chunk in chunks {
                build_chunk(cluster, specs, shared, chunk, &mut recent)
                    .into_iter()
                    .for_each(&mut store);
            }
        } else {
            let next = AtomicUsize::new(0);
            std::thread::scope(|scope| {
                let (tx, rx) = mpsc::sync_channel::<Vec<Built>>(workers * 2);
                for _ in 0..workers {
                    let (tx, next, chunks) = (tx.clone(), &next, &chunks);
                    let worker = move || {
                        let mut recent = Recent::default();
                        while let Some(chunk) = chunks.get(next.fetch_add(1, Ordering::Relaxed)) {
                            let built = build_chunk(cluster, specs, shared, chunk, &mut recent);
                            if tx.send(built).is_err() {
                                break;
                            }
                        }
                    };
                    if let Err(e) = std::thread::Builder::new()
                        .name("herald-build".into())
                        .spawn_scoped(scope, worker)
                    {
                        tracing::warn!(error = %e, "could not start a group-building thread");
                    }
                }
                drop(tx);
                rx.into_iter().flatten().for_each(&mut store);
            });
            // A worker that could not start left its chunks to the others; if none started, build here.
            let mut recent = Recent::default();
            for chunk in chunks.get(next.into_inner()..).unwrap_or_default() {
                build_chunk(cluster, specs, shared, chunk, &mut recent)
                    .into_iter()
                    .for_each(&mut store);
            }
        }
        self.interner.maybe_sweep();
        for &j in &changed {
            self.jobs[j].generation += 1;
        }
        changed
    }
}

/// Work items one worker builds with one decode cache: enough to share decodes between neighbouring
/// groups (slices of one Service read the same pods), few enough to bound the memory the decoded
/// objects take (a typed pod is ~13 KiB) and the groups waiting to be stored.
const BUILD_CHUNK: usize = 256;

/// Worker threads for a batch of `items` groups: none (build on the calling thread) for the small
/// batches watch events bring, else one per core — the calling thread stores what they build.
fn build_workers(items: usize) -> usize {
    if items < 4 * BUILD_CHUNK {
        return 0;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// A group built by a worker, to be stored by the index: `None` when the object is gone or the job's
/// filter does not admit it.
struct Built {
    job: usize,
    key: ObjectKey,
    group: Option<(Group, Vec<Dependency>)>,
}

/// herald-core's form of a group, before interning.
enum CoreGroup {
    Plain(TargetGroup),
    /// The endpoints roles, whose targets share each pod's labels.
    Shared(SharedGroup),
}

fn build_chunk(
    cluster: &Cluster,
    specs: &[JobSpec],
    interner: &Interner,
    chunk: &[(ObjectKey, usize)],
    recent: &mut Recent,
) -> Vec<Built> {
    let decoded = Decoded::new(cluster);
    let mut pods = PodBlocks::default();
    chunk
        .iter()
        .map(|(key, j)| {
            let spec = &specs[*j];
            let kind = WatchKind::primary(spec.role);
            let group = decoded
                .admits(&spec.filter, kind, key)
                .then(|| decoded.object(kind, key))
                .flatten()
                .map(|obj| {
                    let lookup = JobLookup::new(&decoded, &spec.filter);
                    let group = match core_group(spec, obj, &lookup) {
                        CoreGroup::Plain(g) => Group::of_with(&g, interner, recent),
                        CoreGroup::Shared(g) => {
                            Group::of_shared_with(&g, interner, &mut pods, recent)
                        }
                    };
                    (group, lookup.into_dependencies())
                });
            Built {
                job: *j,
                key: key.clone(),
                group,
            }
        })
        .collect()
}

/// Stores job `j`'s freshly built group for object `key` (`None`: it has none). Returns whether
/// the job's output changed.
fn store_group(
    state: &mut JobState,
    dependents: &mut HashMap<Dependency, Dependents>,
    j: usize,
    key: ObjectKey,
    built: Option<(Group, Vec<Dependency>)>,
) -> bool {
    if let Some(old) = state.deps.remove(&key) {
        for dep in old {
            if let Some(set) = dependents.get_mut(&dep)
                && set.remove(j, &key)
            {
                dependents.remove(&dep);
            }
        }
    }
    match built {
        None => match state.groups.remove(&key) {
            Some(old) => {
                state.targets -= old.targets();
                true
            }
            None => false,
        },
        Some((group, deps)) => {
            for dep in &deps {
                dependents.entry(dep.clone()).or_default().insert(j, &key);
            }
            if !deps.is_empty() {
                state.deps.insert(key.clone(), deps);
            }
            if state.groups.get(&key).is_some_and(|old| **old == group) {
                return false;
            }
            state.targets += group.targets();
            if let Some(old) = state.groups.insert(key, Arc::new(group)) {
                state.targets -= old.targets();
            }
            true
        }
    }
}

/// The role's group for `obj`, from herald-core (the single implementation of Prometheus's labels).
/// The endpoints roles share each pod's labels between its targets.
fn core_group(spec: &JobSpec, obj: &Object, lookup: &JobLookup<'_>) -> CoreGroup {
    let attach = spec.attach;
    match (spec.role, obj) {
        (Role::Pod, Object::Pod(o)) => {
            let mut group = herald_core::pod_shared_group(o, lookup, attach);
            // An Istio-aware job reads the application's own annotations, which metrics merging
            // moved into istio-proxy's environment; internal, never served.
            if spec.istio.is_some()
                && !group.targets.is_empty()
                && let Some(saved) = herald_core::istio::pod_app_annotations(o)
            {
                group.labels.insert(
                    herald_core::istio::APP_ANNOTATIONS_LABEL.to_string(),
                    saved.to_string(),
                );
            }
            CoreGroup::Shared(group)
        }
        (Role::Service, Object::Service(o)) => {
            CoreGroup::Plain(herald_core::service_group(o, lookup, attach))
        }
        (Role::Endpoints, Object::Endpoints(o)) => {
            CoreGroup::Shared(herald_core::endpoints_shared_group(o, lookup, attach))
        }
        (Role::EndpointSlice, Object::EndpointSlice(o)) => {
            CoreGroup::Shared(herald_core::endpointslice_shared_group(o, lookup, attach))
        }
        (Role::Node, Object::Node(o)) => {
            CoreGroup::Plain(herald_core::node_group(o, lookup, attach))
        }
        (Role::Ingress, Object::Ingress(o)) => {
            CoreGroup::Plain(herald_core::ingress_group(o, lookup, attach))
        }
        (role, obj) => unreachable!(
            "the index only builds a {role:?} job's groups from its primary kind, not {:?}",
            obj.kind()
        ),
    }
}

#[cfg(test)]
mod tests;
