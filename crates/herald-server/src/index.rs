//! The discovery index: every job's target groups, maintained incrementally from per-kind
//! `apply` / `delete` / `reset` calls. Synchronous and single-writer: the upstream tasks feed it under
//! one lock, and the HTTP face takes that lock only to cut a new generation's groups.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use herald_core::{Role, TargetGroup};

use crate::cluster::{
    Cluster, DECODED_BUDGET, Dependency, JobLookup, Object, ObjectKey, StoredObject, WatchKind,
};
use crate::compact::{Group, Interner};
use crate::filter::JobSpec;

/// Which jobs an index operation changed (by position in the job list).
pub type Changed = BTreeSet<usize>;

/// One job's current output.
#[derive(Debug, Default)]
struct JobState {
    /// Groups keyed by their object's key: ordered, so responses list groups in a stable order.
    /// Kept compact (`compact.rs`): label maps cost several times their JSON, and JSON per target
    /// repeats every pod's labels.
    groups: BTreeMap<ObjectKey, Arc<Group>>,
    /// What each group was built from besides its own object.
    deps: HashMap<ObjectKey, Vec<Dependency>>,
    /// Bumped once per index operation that changed this job's groups.
    generation: u64,
    targets: usize,
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
    pub groups: Vec<Arc<Group>>,
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
        let objects = objects.into_iter().map(Into::into).collect();
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
        JobCut {
            generation: state.generation,
            groups: state.groups.values().cloned().collect(),
        }
    }

    pub fn generation(&self, job: usize) -> u64 {
        self.jobs[job].generation
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
    fn rebuild(&mut self, work: BTreeSet<(usize, ObjectKey)>) -> Changed {
        let ready: Vec<bool> = (0..self.specs.len()).map(|j| self.listed(j)).collect();
        // Key-major order: a pod job's group for `ns/web-abc-1` and the slice `ns/web-xyz` that lists
        // that pod come close together, so the pod is decoded once for both while it is still in
        // the decoded set (a Deployment's pods and its Service's slices share a name prefix).
        let mut work: Vec<(ObjectKey, usize)> = work
            .into_iter()
            .filter(|(j, _)| ready[*j])
            .map(|(j, key)| (key, j))
            .collect();
        work.sort_unstable();
        let mut changed = Changed::new();
        for (key, j) in work {
            if self.recompute(j, &key) {
                changed.insert(j);
            }
            if self.cluster.decoded_count() > DECODED_BUDGET {
                self.cluster.release_decoded();
            }
        }
        self.cluster.release_decoded();
        self.interner.maybe_sweep();
        for &j in &changed {
            self.jobs[j].generation += 1;
        }
        changed
    }

    /// Rebuilds job `j`'s group for object `key` of its primary kind. Returns whether it changed.
    fn recompute(&mut self, j: usize, key: &ObjectKey) -> bool {
        let spec = &self.specs[j];
        let kind = WatchKind::primary(spec.role);
        let built = self
            .cluster
            .admits(&spec.filter, kind, key)
            .then(|| self.cluster.object(kind, key))
            .flatten()
            .map(|obj| {
                let lookup = JobLookup::new(&self.cluster, &spec.filter);
                let group = build_group(spec, obj, &lookup, &mut self.interner);
                (group, lookup.into_dependencies())
            });

        let state = &mut self.jobs[j];
        if let Some(old) = state.deps.remove(key) {
            for dep in old {
                if let Some(set) = self.dependents.get_mut(&dep)
                    && set.remove(j, key)
                {
                    self.dependents.remove(&dep);
                }
            }
        }
        match built {
            None => match state.groups.remove(key) {
                Some(old) => {
                    state.targets -= old.targets();
                    true
                }
                None => false,
            },
            Some((group, deps)) => {
                for dep in &deps {
                    self.dependents
                        .entry(dep.clone())
                        .or_default()
                        .insert(j, key);
                }
                state.deps.insert(key.clone(), deps);
                if state.groups.get(key).is_some_and(|old| **old == group) {
                    return false;
                }
                state.targets += group.targets();
                if let Some(old) = state.groups.insert(key.clone(), Arc::new(group)) {
                    state.targets -= old.targets();
                }
                true
            }
        }
    }
}

/// The role's group for `obj`, from herald-core (the single implementation of Prometheus's labels),
/// in compact form. The endpoints roles share each pod's labels between its targets.
fn build_group(
    spec: &JobSpec,
    obj: &Object,
    lookup: &JobLookup<'_>,
    interner: &mut Interner,
) -> Group {
    let attach = spec.attach;
    let plain = |g: TargetGroup, interner: &mut Interner| Group::of(&g, interner);
    match (spec.role, obj) {
        (Role::Pod, Object::Pod(o)) => plain(herald_core::pod_group(o, lookup, attach), interner),
        (Role::Service, Object::Service(o)) => {
            plain(herald_core::service_group(o, lookup, attach), interner)
        }
        (Role::Endpoints, Object::Endpoints(o)) => Group::of_shared(
            &herald_core::endpoints_shared_group(o, lookup, attach),
            interner,
        ),
        (Role::EndpointSlice, Object::EndpointSlice(o)) => Group::of_shared(
            &herald_core::endpointslice_shared_group(o, lookup, attach),
            interner,
        ),
        (Role::Node, Object::Node(o)) => {
            plain(herald_core::node_group(o, lookup, attach), interner)
        }
        (Role::Ingress, Object::Ingress(o)) => {
            plain(herald_core::ingress_group(o, lookup, attach), interner)
        }
        (role, obj) => unreachable!(
            "the index only builds a {role:?} job's groups from its primary kind, not {:?}",
            obj.kind()
        ),
    }
}

#[cfg(test)]
mod tests;
