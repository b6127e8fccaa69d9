//! prometheus-operator monitors served as HTTP SD jobs: each endpoint of each selected ServiceMonitor and
//! PodMonitor is a job named as the operator names it (`serviceMonitor/<ns>/<name>/<i>`), whose targets
//! are what the operator's generated scrape config would keep, with its final labels.
//!
//! How: a monitor job is a view over one base job of its role (`monitor-base-endpoints`,
//! `-endpointslice`, `-pod`: every object, all namespaces), restricted to the namespaces the monitor
//! discovers in (one range of the base job's groups each) and relabeled by the rules the operator would
//! generate (herald-core `monitor`). Views hold no targets of their own: a body is encoded on request
//! per (view, shard, base generation) and cached like a job's, copying the bytes of unchanged groups.
//! NB: thousands of monitors therefore cost herald the base jobs plus their encoded bodies, not one
//! index per monitor. Monitors are read from herald's cache (one list+watch per kind, like every other
//! resource) and the views are rebuilt whenever one changes — no restart.
//!
//! A bad monitor never stops the others: one the operator would reject (an invalid regex, a value its
//! CRD refuses, a timeout over its interval) is not served and is listed in `Views::problems`; one
//! with fields the CRD does not have is served without them and listed in `Views::warnings`; a job
//! whose port matches no port of what its monitor selects is served (empty) and says so (`ports`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use herald_core::istio::{IstioJob, IstioMode, Part};
use herald_core::monitor::{self, MonitorContext, MonitorJob, MonitorKind};
use herald_core::{JobRelabel, MonitorsConfig, Role};
use kube_face::ResId;
use tokio_util::sync::CancellationToken;

use crate::serve::CustomRef;
use crate::state::{BodyKey, BodyVersion, Shared};
use herald_index::filter::{FilterError, JobSpec};
use herald_index::snapshot::{Encoded, Shard};

mod ports;

/// Prefix of the base jobs' names; no configured job may start with it.
pub const BASE_PREFIX: &str = "monitor-base-";

/// The name of the base job of `role`.
pub fn base_name(role: Role) -> String {
    format!("{BASE_PREFIX}{}", role.as_str())
}

/// The roles monitors need base jobs for.
pub fn base_roles(cfg: &MonitorsConfig) -> Vec<Role> {
    let mut roles = Vec::new();
    if cfg.service_monitors {
        roles.extend(cfg.service_roles());
    }
    if cfg.pod_monitors {
        roles.push(Role::Pod);
    }
    roles
}

/// The base jobs: every object of each role, in every namespace; node metadata attached with
/// `monitors.attach_node_metadata`, none otherwise.
pub fn base_specs(cfg: &MonitorsConfig) -> Result<Vec<JobSpec>, FilterError> {
    let mut yaml = String::from("jobs:\n");
    let attach = if cfg.attach_node_metadata {
        ", attach_metadata: {node: true}"
    } else {
        ""
    };
    for role in base_roles(cfg) {
        yaml.push_str(&format!(
            "- {{name: {}, role: {}{attach}}}\n",
            base_name(role),
            role.as_str()
        ));
    }
    let config = herald_core::parse_config(&yaml).expect("the base jobs are a valid job file");
    config
        .jobs
        .iter()
        .map(|j| JobSpec::from_job(j, None))
        .collect()
}

/// The custom resources herald must cache for `cfg`.
pub fn resources(cfg: &MonitorsConfig) -> Vec<CustomRef> {
    let crd = |plural: &str| {
        (
            "monitoring.coreos.com".to_string(),
            "v1".to_string(),
            plural.to_string(),
        )
    };
    let mut out = Vec::new();
    if cfg.service_monitors {
        out.push(crd("servicemonitors"));
    }
    if cfg.pod_monitors {
        out.push(crd("podmonitors"));
    }
    if cfg.prometheus.is_some() {
        out.push(crd("prometheuses"));
    }
    out
}

/// One monitor endpoint served as a job.
#[derive(Debug)]
pub struct View {
    pub job: MonitorJob,
    pub relabel: JobRelabel,
    /// Index of the base job it reads.
    pub base: usize,
    /// The rules before the job's port rule (the monitor's selection), keeping `__meta_*` labels:
    /// to tell a port that matches nothing from a monitor that selects nothing (`ports`).
    pub select: Option<JobRelabel>,
    /// With `monitors.istio`: how its targets are placed between the job and its companion
    /// `<job>/istio-mtls` (mode `merged`: targets as relabeled, placed by PeerAuthentication).
    pub istio: Option<IstioJob>,
}

impl View {
    /// The companion's name, if the view has one.
    pub fn companion(&self) -> Option<String> {
        self.istio
            .as_ref()
            .map(|_| herald_core::istio::mtls_job_name(&self.job.name))
    }
}

/// Every monitor job, and what could not be served.
#[derive(Debug, Default)]
pub struct Views {
    pub by_name: BTreeMap<String, Arc<View>>,
    /// Monitors (or jobs) not served, each named, with why.
    pub problems: Vec<String>,
    /// Monitors served without something they hold (fields the operator's CRD does not have), each
    /// named, with what.
    pub warnings: Vec<String>,
    /// Monitors selected.
    pub monitors: usize,
}

/// Port warnings of views kept at most; past it the map starts over.
const MAX_PORT_WARNINGS: usize = 16_384;

/// The monitors' state on `Shared`.
#[derive(Debug, Default)]
pub struct MonitorState {
    pub config: Option<MonitorsConfig>,
    views: RwLock<Arc<Views>>,
    /// The views were built from completely listed monitors (or no monitors are configured).
    built: AtomicBool,
    /// Job name → (the view, base generation, its port warning): `ports`, computed on request.
    port_warnings: Mutex<HashMap<String, ports::Checked>>,
}

impl MonitorState {
    pub fn new(config: Option<MonitorsConfig>) -> MonitorState {
        MonitorState {
            built: AtomicBool::new(config.is_none()),
            config,
            ..MonitorState::default()
        }
    }

    /// Whether every monitor job is served: the views were built after the monitors were listed.
    pub fn ready(&self) -> bool {
        self.built.load(Ordering::Acquire)
    }

    pub fn views(&self) -> Arc<Views> {
        self.views.read().expect("views lock poisoned").clone()
    }

    pub fn view(&self, name: &str) -> Option<Arc<View>> {
        self.views().by_name.get(name).cloned()
    }

    /// The view serving job `name` and which of its bodies: the job's own, or (`<job>/istio-mtls`)
    /// its Istio companion's.
    pub fn view_part(&self, name: &str) -> Option<(Arc<View>, Part)> {
        let views = self.views();
        if let Some(v) = views.by_name.get(name) {
            return Some((v.clone(), Part::Plain));
        }
        let own = name.strip_suffix(herald_core::istio::MTLS_SUFFIX)?;
        let v = views.by_name.get(own)?;
        v.istio.is_some().then(|| (v.clone(), Part::Mtls))
    }

    fn set(&self, views: Views) {
        *self.views.write().expect("views lock poisoned") = Arc::new(views);
    }
}

impl Shared {
    /// The targets of body `part` of monitor job `view` (whole, not a shard) at its base job's
    /// published generation, once a request has built it; `None` before (never builds).
    pub fn view_served_targets(&self, view: &Arc<View>, part: Part) -> Option<usize> {
        let key = BodyKey::View(view.job.name.clone(), None, part);
        self.bodies
            .built(&key, &self.view_version(view))
            .map(|b| b.targets)
    }

    /// What a body of `view` is built from now: the view, its base job's published generation and,
    /// for a view placing targets by Istio, the policies' generation.
    fn view_version(&self, view: &Arc<View>) -> BodyVersion {
        let salt = view
            .istio
            .as_ref()
            .map_or(0, |_| self.istio.current().generation);
        BodyVersion::View(view.clone(), self.generation(view.base), salt)
    }

    /// The body `part` of monitor job `view` (one shard of it) at its base job's published
    /// generation (and, for a view placing targets by Istio, under the current policies). A body
    /// is built after an earlier one only of the same view: a changed monitor shares nothing.
    pub fn view_encoded(&self, view: &Arc<View>, shard: Option<Shard>, part: Part) -> Arc<Encoded> {
        let policies = view.istio.as_ref().map(|_| self.istio.current());
        let salt = policies.as_ref().map_or(0, |p| p.generation);
        let generation = self.generation(view.base);
        let version = BodyVersion::View(view.clone(), generation, salt);
        let key = BodyKey::View(view.job.name.clone(), shard, part);
        let same_view =
            |v: &BodyVersion| matches!(v, BodyVersion::View(w, _, _) if Arc::ptr_eq(w, view));
        self.bodies.get_or_build(&key, version, |prev| {
            let prev = prev.filter(|(v, _)| same_view(v)).map(|(_, b)| b);
            let cut = self.cut_namespaces(view.base, &view.job.namespaces);
            match (&view.istio, &policies) {
                (Some(job), Some(set)) => {
                    // Both parts in one pass, the other kept for its first request.
                    let how = herald_index::snapshot::IstioEncoding {
                        job,
                        relabel: &view.relabel,
                        policies: &set.policies,
                        part,
                        salt,
                    };
                    let other_key = BodyKey::View(view.job.name.clone(), shard, part.other());
                    let prev_other = self
                        .bodies
                        .latest(&other_key)
                        .filter(|(v, _)| same_view(v))
                        .map(|(_, b)| b);
                    let (own, theirs) = Encoded::build_istio_pair(
                        prev.as_deref(),
                        prev_other.as_deref(),
                        cut.generation,
                        &cut.groups,
                        shard,
                        &how,
                    );
                    let version = BodyVersion::View(view.clone(), cut.generation, salt);
                    self.bodies.offer(other_key, version, Arc::new(theirs));
                    own
                }
                _ => Encoded::build_after(
                    prev.as_deref(),
                    cut.generation,
                    &cut.groups,
                    shard,
                    Some(&view.relabel),
                ),
            }
        })
    }
}

/// The cached resource `plural` of API group `group` ("" for core), if herald caches it.
fn cached(shared: &Shared, group: &str, plural: &str) -> Option<ResId> {
    shared.cache.ids().find(|r| {
        let res = &shared.cache.get(*r).resource;
        res.plural == plural && res.group == group
    })
}

/// The cached prometheus-operator resource `plural`.
pub(crate) fn resource(shared: &Shared, plural: &str) -> Option<ResId> {
    cached(shared, "monitoring.coreos.com", plural)
}

/// Which namespaces' monitors are taken.
#[derive(Debug)]
enum NamespaceSelection {
    All,
    Names(Vec<String>),
    /// Namespaces whose labels match (a Prometheus object's `*NamespaceSelector`).
    Labels(kube_selectors::LabelSelector),
}

/// How monitors of one kind are selected; `None`: none of that kind.
#[derive(Debug)]
struct Selection {
    monitors: kube_selectors::LabelSelector,
    namespaces: NamespaceSelection,
}

/// What `build_views` selects with: from the `monitors:` section, or from a Prometheus object.
struct Selecting {
    service: Option<Selection>,
    pod: Option<Selection>,
    ctx: MonitorContext,
}

/// A Kubernetes `LabelSelector` object as a selector: `null` selects nothing (`None`), `{}`
/// everything, as the operator reads a Prometheus object's monitor selectors.
fn label_selector(
    v: &serde_json::Value,
    field: &str,
) -> Result<Option<kube_selectors::LabelSelector>, String> {
    if v.is_null() {
        return Ok(None);
    }
    let mut parts = Vec::new();
    if let Some(m) = v.get("matchLabels").and_then(|m| m.as_object()) {
        for (k, v) in m {
            let v = v
                .as_str()
                .ok_or_else(|| format!("{field}.matchLabels.{k}: not a string"))?;
            parts.push(format!("{k}={v}"));
        }
    }
    for (i, e) in v
        .get("matchExpressions")
        .and_then(|e| e.as_array())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let key = e["key"]
            .as_str()
            .ok_or_else(|| format!("{field}.matchExpressions[{i}]: no key"))?;
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect();
        parts.push(match e["operator"].as_str() {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("Exists") => key.to_string(),
            Some("DoesNotExist") => format!("!{key}"),
            other => {
                return Err(format!(
                    "{field}.matchExpressions[{i}].operator {other:?}: not In, NotIn, Exists or DoesNotExist"
                ));
            }
        });
    }
    kube_selectors::LabelSelector::parse(&parts.join(","))
        .map(Some)
        .map_err(|e| format!("{field}: {e}"))
}

/// The selection of the `monitors:` section.
fn configured(cfg: &MonitorsConfig) -> Selecting {
    let selection = || Selection {
        monitors: cfg.label_selector(),
        namespaces: if cfg.namespaces.is_empty() {
            NamespaceSelection::All
        } else {
            NamespaceSelection::Names(cfg.namespaces.clone())
        },
    };
    Selecting {
        service: cfg.service_monitors.then(selection),
        pod: cfg.pod_monitors.then(selection),
        ctx: MonitorContext {
            ignore_namespace_selectors: cfg.ignore_namespace_selectors,
            service_discovery_role: cfg.service_role(),
            scrape_classes: cfg.scrape_classes(),
            node_metadata_attached: cfg.attach_node_metadata,
            ..MonitorContext::default()
        },
    }
}

/// The selection a Prometheus object makes, as prometheus-operator reads it: a `null` monitor
/// selector selects no monitor of that kind, `{}` every one; a `null` namespace selector means the
/// Prometheus object's own namespace, `{}` every namespace.
/// Why a Prometheus object gives no selection.
enum NoSelection {
    /// It is not there (or not cached): it selects nothing.
    Missing(String),
    /// It is there but the operator would refuse it: the last valid selection stays.
    Invalid(String),
}

fn from_prometheus(
    shared: &Shared,
    cfg: &MonitorsConfig,
    (pns, pname): (&str, &str),
) -> Result<Selecting, NoSelection> {
    let r = resource(shared, "prometheuses")
        .ok_or_else(|| NoSelection::Missing("prometheuses are not cached".into()))?;
    let bytes = {
        let log = shared.cache.read(r);
        log.get_parts(pns, pname)
            .ok_or_else(|| NoSelection::Missing(format!("Prometheus {pns}/{pname} not found")))?
            .bytes
            .to_bytes()
    };
    read_prometheus(cfg, (pns, pname), &bytes).map_err(NoSelection::Invalid)
}

/// The selection of the Prometheus object `bytes` holds.
fn read_prometheus(
    cfg: &MonitorsConfig,
    (pns, pname): (&str, &str),
    bytes: &[u8],
) -> Result<Selecting, String> {
    let obj: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("Prometheus {pns}/{pname}: not JSON: {e}"))?;
    let spec = &obj["spec"];
    let selection = |sel: &str, ns_sel: &str, on: bool| -> Result<Option<Selection>, String> {
        let Some(monitors) = label_selector(&spec[sel], &format!("spec.{sel}"))? else {
            return Ok(None);
        };
        let namespaces = match label_selector(&spec[ns_sel], &format!("spec.{ns_sel}"))? {
            None => NamespaceSelection::Names(vec![pns.to_string()]),
            Some(s) if s.to_string().is_empty() => NamespaceSelection::All,
            Some(s) => NamespaceSelection::Labels(s),
        };
        Ok(on.then_some(Selection {
            monitors,
            namespaces,
        }))
    };
    // The operator refuses to configure a Prometheus with bad scrape classes; herald serves none of
    // its monitors either, and says why.
    let scrape_classes = monitor::scrape_classes(&spec["scrapeClasses"])
        .map_err(|e| format!("Prometheus {pns}/{pname}: spec.scrapeClasses: {e}"))?;
    let role = match spec["serviceDiscoveryRole"].as_str() {
        Some("EndpointSlice") => Role::EndpointSlice,
        _ => Role::Endpoints,
    };
    Ok(Selecting {
        service: selection(
            "serviceMonitorSelector",
            "serviceMonitorNamespaceSelector",
            cfg.service_monitors,
        )?,
        pod: selection(
            "podMonitorSelector",
            "podMonitorNamespaceSelector",
            cfg.pod_monitors,
        )?,
        ctx: MonitorContext {
            ignore_namespace_selectors: spec["ignoreNamespaceSelectors"].as_bool().unwrap_or(false),
            service_discovery_role: role,
            scrape_interval: spec["scrapeInterval"]
                .as_str()
                .filter(|i| !i.is_empty())
                .unwrap_or(monitor::DEFAULT_SCRAPE_INTERVAL)
                .to_string(),
            scrape_classes,
            node_metadata_attached: cfg.attach_node_metadata,
            ..MonitorContext::default()
        },
    })
}

/// Labels of every namespace herald caches (for namespace label selectors).
fn namespace_labels(shared: &Shared) -> BTreeMap<String, kube_face::Labels> {
    let Some(r) = cached(shared, "", "namespaces") else {
        return BTreeMap::new();
    };
    shared
        .cache
        .read(r)
        .values()
        .map(|e| (e.key.1.to_string(), e.labels.clone()))
        .collect()
}

/// Builds the views from the monitors in herald's cache. A job whose translation did not change keeps
/// its `View` (and so its cached bodies): one monitor changing does not re-encode every other job.
pub fn build_views(shared: &Shared, cfg: &MonitorsConfig) -> Views {
    let previous = shared.monitors.views();
    let mut views = Views::default();
    let selecting = match cfg.prometheus_object() {
        None => configured(cfg),
        Some(p) => match from_prometheus(shared, cfg, p) {
            Ok(s) => s,
            Err(NoSelection::Missing(e)) => {
                views.problems.push(format!("monitors.prometheus: {e}"));
                return views;
            }
            // As the operator, which keeps the config it last generated: the jobs stay as they
            // were, and the problem is listed first.
            Err(NoSelection::Invalid(e)) => {
                views.problems.push(format!(
                    "monitors.prometheus: {e} (serving the monitor jobs of its last valid state)"
                ));
                views.problems.extend(
                    previous
                        .problems
                        .iter()
                        .filter(|p| !p.starts_with("monitors.prometheus:"))
                        .cloned(),
                );
                views.by_name = previous.by_name.clone();
                views.warnings = previous.warnings.clone();
                views.monitors = previous.monitors;
                return views;
            }
        },
    };
    let ns_labels = match (&selecting.service, &selecting.pod) {
        (
            Some(Selection {
                namespaces: NamespaceSelection::Labels(_),
                ..
            }),
            _,
        )
        | (
            _,
            Some(Selection {
                namespaces: NamespaceSelection::Labels(_),
                ..
            }),
        ) => namespace_labels(shared),
        _ => BTreeMap::new(),
    };
    let no_labels = kube_face::Labels::new();
    let kinds: [(&str, MonitorKind, &Option<Selection>, MonitorFn); 2] = [
        (
            "servicemonitors",
            MonitorKind::ServiceMonitor,
            &selecting.service,
            monitor::service_monitor_jobs,
        ),
        (
            "podmonitors",
            MonitorKind::PodMonitor,
            &selecting.pod,
            monitor::pod_monitor_jobs,
        ),
    ];
    for (plural, kind, selection, translate) in kinds {
        let (Some(selection), Some(r)) = (selection, resource(shared, plural)) else {
            continue;
        };
        let log = shared.cache.read(r);
        for entry in log.values() {
            let (ns, name) = (&entry.key.0, &entry.key.1);
            let in_namespace = match &selection.namespaces {
                NamespaceSelection::All => true,
                NamespaceSelection::Names(names) => names.iter().any(|n| n == ns.as_str()),
                NamespaceSelection::Labels(s) => {
                    s.matches(ns_labels.get(ns.as_str()).unwrap_or(&no_labels))
                }
            };
            if !in_namespace || !selection.monitors.matches(&entry.labels) {
                continue;
            }
            views.monitors += 1;
            let obj: serde_json::Value = match serde_json::from_slice(&entry.bytes.get()) {
                Ok(v) => v,
                Err(e) => {
                    views
                        .problems
                        .push(format!("{kind} {ns}/{name}: not JSON: {e}"));
                    continue;
                }
            };
            let jobs = match translate(&obj, &selecting.ctx) {
                Ok(jobs) => jobs,
                // A field error names the monitor already.
                Err(e @ monitor::MonitorError::Field { .. }) => {
                    views.problems.push(format!("{e}"));
                    continue;
                }
                Err(e) => {
                    views.problems.push(format!("{kind} {ns}/{name}: {e}"));
                    continue;
                }
            };
            for w in monitor::unknown_fields(&obj, kind) {
                views.warnings.push(format!("{kind} {ns}/{name}: {w}"));
            }
            for mut job in jobs {
                if job.attach_metadata.is_some_and(|a| a.node) && !cfg.attach_node_metadata {
                    let w = "attachMetadata.node: true (the monitor's or its scrape class's): \
                             served without node labels; set monitors.attach_node_metadata: true";
                    job.warnings.push(w.to_owned());
                    views.warnings.push(format!("{}: {w}", job.name));
                }
                if let Some(old) = previous.by_name.get(&job.name)
                    && old.job == job
                {
                    views.by_name.insert(job.name.clone(), old.clone());
                    continue;
                }
                let Some(base) = shared.job(&base_name(job.role)) else {
                    views.problems.push(format!(
                        "{}: discovers with role {} that herald keeps no base job for \
                         (add {} to monitors.service_discovery_roles)",
                        job.name,
                        job.role.as_str(),
                        if job.role == Role::EndpointSlice {
                            "EndpointSlice"
                        } else {
                            "Endpoints"
                        },
                    ));
                    continue;
                };
                let relabel = match JobRelabel::new(job.relabel_configs.clone(), false) {
                    Ok(r) => r.with_defaults(monitor::scrape_defaults(&job)),
                    Err(e) => {
                        views.problems.push(format!("{}: {e}", job.name));
                        continue;
                    }
                };
                let select = ports::selection(&job);
                views.by_name.insert(
                    job.name.clone(),
                    Arc::new(View {
                        istio: cfg.istio.then(|| IstioJob {
                            mode: IstioMode::Merged,
                            job: job.name.clone(),
                        }),
                        job,
                        relabel,
                        base,
                        select,
                    }),
                );
            }
        }
    }
    views
}

type MonitorFn = fn(
    &serde_json::Value,
    &MonitorContext,
) -> Result<Vec<MonitorJob>, herald_core::monitor::MonitorError>;

/// Keeps the views current: rebuilt at start and after every change to a monitor (changes within
/// 200 ms are taken together).
pub async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let Some(cfg) = shared.monitors.config.clone() else {
        return;
    };
    let mut ids: Vec<ResId> = ["servicemonitors", "podmonitors", "prometheuses"]
        .into_iter()
        .filter_map(|p| resource(&shared, p))
        .collect();
    if cfg.prometheus.is_some() {
        ids.extend(cached(&shared, "", "namespaces"));
    }
    let mut changes: Vec<_> = ids.iter().map(|r| shared.cache.subscribe(*r)).collect();
    loop {
        let listed = ids
            .iter()
            .all(|r| shared.cache.get(*r).status.synced.load(Ordering::Acquire));
        let views = build_views(&shared, &cfg);
        if !views.problems.is_empty() {
            tracing::warn!(problems = ?views.problems, "some monitors are not served");
        }
        if !views.warnings.is_empty() {
            tracing::warn!(warnings = ?views.warnings, "some monitors are served without fields they hold");
        }
        tracing::info!(
            monitors = views.monitors,
            jobs = views.by_name.len(),
            "monitor jobs updated"
        );
        let m = &shared.metrics;
        m.monitors_selected.set(views.monitors as i64);
        m.monitor_jobs.set(views.by_name.len() as i64);
        for (served, n) in [
            ("false", views.problems.len()),
            ("true", views.warnings.len()),
        ] {
            m.monitor_problems
                .get_or_create(&crate::metrics::ServedLabels { served })
                .set(n as i64);
        }
        shared.monitors.set(views);
        if listed {
            shared.monitors.built.store(true, Ordering::Release);
        }
        if !next_change(&stop, &mut changes, listed, Duration::from_millis(200)).await {
            return;
        }
    }
}

/// Waits for the next change of any of `changes` — until everything is listed, 100 ms at most, so
/// a list completing is seen too — then lets the changes that follow within `quiet` join it, and
/// marks them all seen. `false` once `stop` is cancelled or the cache is gone.
pub async fn next_change(
    stop: &CancellationToken,
    changes: &mut [tokio::sync::watch::Receiver<u64>],
    listed: bool,
    quiet: Duration,
) -> bool {
    let settle = if listed {
        Duration::MAX
    } else {
        Duration::from_millis(100)
    };
    let any = async {
        if changes.is_empty() {
            return std::future::pending().await;
        }
        let waits = changes.iter_mut().map(|rx| Box::pin(rx.changed()));
        futures::future::select_all(waits).await.0.is_ok()
    };
    tokio::select! {
        () = stop.cancelled() => return false,
        // A sender gone: the cache is being dropped.
        ok = any => if !ok { return false },
        () = tokio::time::sleep(settle) => {}
    }
    tokio::time::sleep(quiet).await;
    for rx in changes.iter_mut() {
        rx.borrow_and_update();
    }
    !stop.is_cancelled()
}
