//! The catalog: what a job name serves, and its bodies. A name is a configured job (or an
//! Istio-aware job's companion), or a monitor job (a view over a base job: one of its two bodies
//! with Istio). The faces that serve by name (HTTP SD, the target allocator's `Source`, explain)
//! resolve names here, and every body is built here, by one recipe.

use std::sync::Arc;

use herald_core::JobRelabel;
use herald_core::config::target_allocator::TargetAllocatorConfig;
use herald_core::istio::{IstioJob, Part};
use herald_index::encoded::{Encoded, IstioEncoding, Shard};
use herald_index::index::JobCut;

use crate::allocator::{Allocator, SourceError, TargetSource};
use crate::istio::PolicySet;
use crate::monitors::{BASE_PREFIX, View};
use crate::shared::{BodyKey, BodyVersion, Shared};

/// What a job name serves.
#[derive(Debug, Clone)]
pub enum Served {
    /// Configured job (or Istio companion) `j`.
    Job(usize),
    /// Body `part` of monitor job `view`.
    View(Arc<View>, Part),
}

impl Served {
    /// The job whose sync, generation and changes its bodies follow: itself, or a view's base job.
    pub fn job(&self) -> usize {
        match self {
            Served::Job(j) => *j,
            Served::View(v, _) => v.base,
        }
    }

    /// The key of its body (whole, or one shard) in the body store.
    pub fn body_key(&self, shard: Option<Shard>) -> BodyKey {
        match self {
            Served::Job(j) => BodyKey::Job(*j, shard),
            Served::View(v, part) => BodyKey::View(v.job.name.clone(), shard, *part),
        }
    }
}

/// What `name` serves: a configured job or companion first, else a monitor job.
pub fn resolve(shared: &Shared, name: &str) -> Option<Served> {
    match shared.job(name) {
        Some(j) => Some(Served::Job(j)),
        None => {
            let (view, part) = shared.monitors.view_part(name)?;
            Some(Served::View(view, part))
        }
    }
}

/// Every job name served, in a stable order: the configured jobs and companions (without the
/// monitors' base jobs, which are herald's plumbing), then the monitor jobs and their companions.
pub fn job_names(shared: &Shared) -> Vec<String> {
    let monitors = shared.monitors.config.is_some();
    let mut names: Vec<String> = shared
        .jobs()
        .iter()
        .filter(|h| !(monitors && h.name.starts_with(BASE_PREFIX)))
        .map(|h| h.name.clone())
        .collect();
    for (name, v) in &shared.monitors.views().by_name {
        names.push(name.clone());
        names.extend(v.companion());
    }
    names
}

/// The body `served` serves (or one shard of it) now: built on the first request after a change,
/// kept in the body store until the next. Cached bodies are served without the index lock, so a
/// long relist being applied never delays a response.
pub fn body(shared: &Shared, served: &Served, shard: Option<Shard>) -> Arc<Encoded> {
    match served {
        Served::Job(j) => job_body(shared, *j, shard),
        Served::View(view, part) => view_body(shared, view, shard, *part),
    }
}

/// The targets `served` serves at its published generation, where they are not its discovered
/// targets (relabelling, Istio placement, a monitor's rules): those of its whole body, once a
/// request has built it at this generation (bodies are built on request); `None` before.
pub fn served_targets(shared: &Shared, served: &Served) -> Option<usize> {
    let version = match served {
        Served::Job(j) => BodyVersion::Job(shared.generation(*j)),
        Served::View(view, _) => view_version(shared, view),
    };
    shared
        .bodies
        .built(&served.body_key(None), &version)
        .map(|b| b.targets)
}

/// Job `j`'s body at its published generation.
fn job_body(shared: &Shared, j: usize, shard: Option<Shard>) -> Arc<Encoded> {
    let generation = shared.generation(j);
    let version = BodyVersion::Job(generation);
    shared
        .bodies
        .get_or_build(&BodyKey::Job(j, shard), version, |prev| {
            let prev = prev.map(|(_, body)| body);
            let job = &shared.jobs()[j];
            // Only a new (job, shard, generation) takes the lock, to cut; encoding runs outside it.
            let cut = shared.cut(job.source);
            let policies = job.istio.as_ref().map(|_| shared.istio.current());
            let istio = job
                .istio
                .as_ref()
                .zip(policies.as_deref())
                .map(|((istio, part), set)| (istio, *part, set));
            // An Istio-aware job and its companion place the same targets: the other one's body is
            // kept for its first request.
            let sibling = job.istio.as_ref().and_then(|(_, part)| match part {
                Part::Plain => job.companions.first().copied(),
                Part::Mtls => Some(job.source),
            });
            let recipe = Recipe {
                relabel: job.relabel.as_deref(),
                istio,
                sibling: sibling.map(|s| (BodyKey::Job(s, shard), BodyVersion::Job(generation))),
            };
            build(shared, prev.as_deref(), &cut, shard, recipe, &|_| true)
        })
}

/// What a body of `view` is built from now: the view, its base job's published generation and,
/// for a view placing targets by Istio, the policies' generation.
fn view_version(shared: &Shared, view: &Arc<View>) -> BodyVersion {
    let salt = view
        .istio
        .as_ref()
        .map_or(0, |_| shared.istio.current().generation);
    BodyVersion::View(view.clone(), shared.generation(view.base), salt)
}

/// The body `part` of monitor job `view` (one shard of it) at its base job's published
/// generation (and, for a view placing targets by Istio, under the current policies). A body is
/// built after an earlier one only of the same view: a changed monitor shares nothing.
fn view_body(shared: &Shared, view: &Arc<View>, shard: Option<Shard>, part: Part) -> Arc<Encoded> {
    let policies = view.istio.as_ref().map(|_| shared.istio.current());
    let salt = policies.as_ref().map_or(0, |p| p.generation);
    let generation = shared.generation(view.base);
    let version = BodyVersion::View(view.clone(), generation, salt);
    let key = BodyKey::View(view.job.name.clone(), shard, part);
    let same_view =
        |v: &BodyVersion| matches!(v, BodyVersion::View(w, _, _) if Arc::ptr_eq(w, view));
    shared.bodies.get_or_build(&key, version, |prev| {
        let prev = prev.filter(|(v, _)| same_view(v)).map(|(_, b)| b);
        let cut = shared.cut_namespaces(view.base, &view.job.namespaces);
        let istio = view
            .istio
            .as_ref()
            .zip(policies.as_deref())
            .map(|(istio, set)| (istio, part, set));
        let sibling = istio.map(|_| {
            let other = BodyKey::View(view.job.name.clone(), shard, part.other());
            (other, BodyVersion::View(view.clone(), cut.generation, salt))
        });
        let recipe = Recipe {
            relabel: Some(&view.relabel),
            istio,
            sibling,
        };
        build(shared, prev.as_deref(), &cut, shard, recipe, &same_view)
    })
}

/// How a body is encoded besides its groups.
struct Recipe<'a> {
    relabel: Option<&'a JobRelabel>,
    /// Targets placed by Istio's policies: the job, which part this body is, the policies.
    istio: Option<(&'a IstioJob, Part, &'a PolicySet)>,
    /// Where the body of the other part is kept, and as what version.
    sibling: Option<(BodyKey, BodyVersion)>,
}

/// A body cut at `cut`, after `prev` (whose unchanged blocks it takes over). With Istio placement
/// both parts are built in one pass (they place the same targets), and the other part is offered
/// to the body store for its first request; its earlier body is built after only where
/// `reuses` says its version may be.
fn build(
    shared: &Shared,
    prev: Option<&Encoded>,
    cut: &JobCut,
    shard: Option<Shard>,
    recipe: Recipe<'_>,
    reuses: &dyn Fn(&BodyVersion) -> bool,
) -> Encoded {
    match (recipe.istio, recipe.relabel) {
        (Some((job, part, set)), Some(relabel)) => {
            let how = IstioEncoding {
                job,
                relabel,
                policies: &set.policies,
                part,
                salt: set.generation,
            };
            let prev_other = recipe
                .sibling
                .as_ref()
                .and_then(|(key, _)| shared.bodies.latest(key))
                .filter(|(v, _)| reuses(v))
                .map(|(_, b)| b);
            let (own, other) = Encoded::build_istio_pair(
                prev,
                prev_other.as_deref(),
                cut.generation,
                &cut.groups,
                shard,
                &how,
            );
            if let Some((key, version)) = recipe.sibling {
                shared.bodies.offer(key, version, Arc::new(other));
            }
            own
        }
        _ => Encoded::build_after(prev, cut.generation, &cut.groups, shard, recipe.relabel),
    }
}

impl Allocator {
    /// Over herald's own state.
    pub fn over(config: TargetAllocatorConfig, shared: Arc<Shared>) -> Allocator {
        Allocator::new(config, Arc::new(Source(shared)))
    }
}

/// herald's state as the allocator reads it.
pub struct Source(pub Arc<Shared>);

impl TargetSource for Source {
    fn job_names(&self) -> Vec<String> {
        let shared = &self.0;
        job_names(shared)
    }

    fn body(&self, job: &str) -> Result<Arc<Encoded>, SourceError> {
        let shared = &self.0;
        let served = resolve(shared, job).ok_or_else(|| SourceError::UnknownJob(job.into()))?;
        if !shared.job_synced(served.job()) {
            return Err(SourceError::NotSynced(job.into()));
        }
        Ok(body(shared, &served, None))
    }

    fn scrape_config(&self, job: &str) -> Option<serde_json::Value> {
        let shared = &self.0;
        let (view, part) = match resolve(shared, job)? {
            // A configured job: herald serves its targets already relabeled, so the collector
            // needs the name alone and scrapes with its own defaults.
            Served::Job(_) => return Some(serde_json::json!({ "job_name": job })),
            Served::View(view, part) => (view, part),
        };
        let mut monitor = view.job.clone();
        if part == herald_core::istio::Part::Mtls {
            // The companion: over https with Istio's certificates, as /scrape-configs writes it.
            monitor.name = job.to_string();
            monitor.scrape.scheme = Some("https".into());
            if let Some(cfg) = &shared.istio.config {
                monitor.scrape.tls_config = Some(crate::istio::tls_files(cfg));
            }
        }
        // The endpoint's scrape settings, as herald's /scrape-configs writes them for Prometheus;
        // the collector replaces the service discovery with its own http_sd on this API.
        let yaml = herald_core::monitor::scrape_config_yaml(&monitor, "http://unused");
        let mut list: Vec<serde_json::Value> = serde_yaml::from_str(&yaml).ok()?;
        let mut cfg = list.pop()?;
        if let Some(m) = cfg.as_object_mut() {
            m.remove("http_sd_configs");
        }
        Some(cfg)
    }
}

#[cfg(test)]
mod tests {
    use herald_core::monitor::{self, MonitorContext};
    use herald_index::{Object, WatchKind};

    use super::*;
    use crate::monitors::Views;

    fn mk_shared(yaml: &str) -> Arc<Shared> {
        let cfg = herald_core::parse_config(yaml).expect("a valid job file");
        let specs = crate::serve::job_specs(&cfg, None).expect("valid jobs");
        let shared = Shared::with_monitors(specs, None, vec![], None, Default::default());
        for kind in shared.needed_kinds().collect::<Vec<_>>() {
            shared.mark_synced(kind);
        }
        shared
    }

    fn mk_pod(name: &str, ip: &str) -> Object {
        Object::decode(
            WatchKind::Pod,
            serde_json::json!({
                "metadata": {"namespace": "prod", "name": name, "uid": name, "labels": {"app": "web"}},
                "spec": {"nodeName": "n", "containers": [
                    {"name": "c", "image": "i", "ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"phase": "Running", "podIP": ip,
                           "conditions": [{"type": "Ready", "status": "True"}]}
            }),
        )
        .expect("a valid pod")
    }

    fn mk_view(base: usize) -> Arc<View> {
        let obj = serde_json::json!({
            "kind": "ServiceMonitor",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "endpoints": [{"port": "http"}]},
        });
        let mut jobs = monitor::service_monitor_jobs(&obj, &MonitorContext::default())
            .expect("a valid monitor");
        let job = jobs.remove(0);
        Arc::new(View {
            relabel: JobRelabel::new(job.relabel_configs.clone(), false).expect("valid rules"),
            select: None,
            job,
            base,
            istio: None,
        })
    }

    const ISTIO_JOB: &str =
        "jobs:\n- name: pods\n  role: pod\n  istio: merged\n  annotations: prometheus.io\n";

    #[test]
    fn a_name_is_a_job_its_istio_companion_or_a_monitor_job_and_nothing_else() {
        let shared = mk_shared(ISTIO_JOB);
        let view = mk_view(0);
        let mut views = Views::default();
        views.by_name.insert(view.job.name.clone(), view.clone());
        shared.monitors.set(views);
        assert!(matches!(resolve(&shared, "pods"), Some(Served::Job(0))));
        let companion = herald_core::istio::mtls_job_name("pods");
        assert!(matches!(resolve(&shared, &companion), Some(Served::Job(1))));
        match resolve(&shared, &view.job.name) {
            Some(Served::View(v, Part::Plain)) => assert!(Arc::ptr_eq(&v, &view)),
            other => panic!("{other:?}"),
        }
        assert!(resolve(&shared, "nope").is_none());
        assert_eq!(
            job_names(&shared),
            vec!["pods".to_string(), companion, view.job.name.clone()]
        );
    }

    #[test]
    fn a_body_is_built_once_per_generation_and_its_served_targets_known_after() {
        let shared = mk_shared("jobs:\n- name: pods\n  role: pod\n");
        shared.apply(mk_pod("a", "10.0.0.1"));
        let served = resolve(&shared, "pods").expect("a job");
        assert_eq!(served_targets(&shared, &served), None, "not built yet");
        let body = body(&shared, &served, None);
        assert_eq!(body.targets, 1);
        assert_eq!(served_targets(&shared, &served), Some(1));
        assert!(Arc::ptr_eq(&body, &super::body(&shared, &served, None)));
        shared.apply(mk_pod("b", "10.0.0.2"));
        let next = super::body(&shared, &served, None);
        assert_eq!(next.targets, 2, "a new generation: a new body");
    }

    #[test]
    fn an_istio_aware_job_s_companion_body_is_built_in_the_same_pass() {
        let shared = mk_shared(ISTIO_JOB);
        shared.apply(mk_pod("a", "10.0.0.1"));
        let companion =
            resolve(&shared, &herald_core::istio::mtls_job_name("pods")).expect("the companion");
        assert_eq!(served_targets(&shared, &companion), None);
        let _ = body(&shared, &Served::Job(0), None);
        assert!(
            served_targets(&shared, &companion).is_some(),
            "kept for the companion's first request"
        );
    }

    #[test]
    fn a_monitor_job_s_body_is_cut_from_its_base_job() {
        let shared = mk_shared("jobs:\n- name: pods\n  role: pod\n");
        shared.apply(mk_pod("a", "10.0.0.1"));
        let view = mk_view(0);
        let served = Served::View(view, Part::Plain);
        assert_eq!(served.job(), 0);
        let body = body(&shared, &served, None);
        assert_eq!(served_targets(&shared, &served), Some(body.targets));
    }
}
