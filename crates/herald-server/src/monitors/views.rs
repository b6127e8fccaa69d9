//! Monitor jobs as served (`View`: a monitor endpoint over a base job, with its rules) and the state
//! that holds them (`MonitorState`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use herald_core::istio::{IstioJob, Part};
use herald_core::monitor::{self, MonitorJob};
use herald_core::{JobRelabel, MonitorsConfig};

/// A port warning (or none) computed for a view at a base job generation.
pub type Checked = (Arc<View>, u64, Option<String>);

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
pub(crate) const MAX_PORT_WARNINGS: usize = 16_384;

/// The monitors' state: the views served, whether they are complete, and the port warnings
/// computed so far.
#[derive(Debug, Default)]
pub struct MonitorState {
    pub config: Option<MonitorsConfig>,
    views: RwLock<Arc<Views>>,
    /// The views were built from completely listed monitors (or no monitors are configured).
    pub(crate) built: AtomicBool,
    /// Job name → (the view, base generation, its port warning): `ports`, computed on request.
    pub(crate) port_warnings: Mutex<HashMap<String, Checked>>,
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

    pub(crate) fn set(&self, views: Views) {
        *self.views.write().expect("views lock poisoned") = Arc::new(views);
    }
}

/// The rules of `job` before its port rule, keeping `__meta_*` labels; `None` without a port rule.
pub fn selection(job: &MonitorJob) -> Option<JobRelabel> {
    let rule = job.port_rule.as_ref()?;
    let rules = job.relabel_configs.get(..rule.rule)?.to_vec();
    let select = JobRelabel::new(rules, true).expect("a prefix of the job's validated rules");
    Some(select.with_defaults(monitor::scrape_defaults(job)))
}
