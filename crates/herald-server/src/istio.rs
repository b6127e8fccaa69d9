//! The PeerAuthentications Istio-aware jobs read (`istio:` on a job, see `herald_core::istio`):
//! listed and watched like every other resource (one watch, in herald's cache), decoded into
//! `Policies` whenever one changes, and the Istio-aware jobs' generation bumped so their bodies —
//! which copy nothing from bodies built under other policies — are rebuilt and long-polls wake.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use herald_core::IstioConfig;
use herald_core::istio::{PeerAuthentication, Policies};
use kube_face::ResId;
use tokio_util::sync::CancellationToken;

use crate::state::Shared;

/// The API group of PeerAuthentication.
pub const GROUP: &str = "security.istio.io";
/// Its resource.
pub const PLURAL: &str = "peerauthentications";
/// The versions tried, newest first: `v1` since Istio 1.22, `v1beta1` before.
pub const VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// The PeerAuthentications as last read.
#[derive(Debug, Default)]
pub struct PolicySet {
    /// Bumped on every change; an Istio-aware body is built under one generation.
    pub generation: u64,
    pub policies: Policies,
    /// Policies that could not be read, each with why (they are left out, as Istio's validation
    /// would have refused them).
    pub problems: Vec<String>,
}

/// The Istio state on `Shared`.
#[derive(Debug, Default)]
pub struct IstioState {
    /// Set when some job has `istio:`.
    pub config: Option<IstioConfig>,
    current: RwLock<Arc<PolicySet>>,
    /// The policies were read from a complete list (or no job needs them).
    built: AtomicBool,
}

impl IstioState {
    pub fn new(config: Option<IstioConfig>) -> IstioState {
        IstioState {
            built: AtomicBool::new(config.is_none()),
            config,
            ..IstioState::default()
        }
    }

    pub fn current(&self) -> Arc<PolicySet> {
        self.current.read().expect("policies lock poisoned").clone()
    }

    /// Whether Istio-aware jobs are served under a complete list of policies.
    pub fn ready(&self) -> bool {
        self.built.load(Ordering::Acquire)
    }
}

/// The cached PeerAuthentication resource, if herald caches it.
pub fn resource(shared: &Shared) -> Option<ResId> {
    shared.cache.ids().find(|r| {
        let res = &shared.cache.get(*r).resource;
        res.plural == PLURAL && res.group == GROUP
    })
}

/// Every cached PeerAuthentication, decoded; the ones that cannot be are reported.
fn read(shared: &Shared, r: ResId, root_namespace: &str) -> (Policies, Vec<String>) {
    let log = shared.cache.read(r);
    let mut all = Vec::new();
    let mut problems = Vec::new();
    for entry in log.values() {
        let decoded = serde_json::from_slice::<serde_json::Value>(&entry.bytes.get())
            .map_err(|e| {
                format!(
                    "PeerAuthentication {}/{}: not JSON: {e}",
                    entry.key.0, entry.key.1
                )
            })
            .and_then(|v| PeerAuthentication::from_value(&v));
        match decoded {
            Ok(p) => all.push(p),
            Err(e) => problems.push(e),
        }
    }
    problems.sort();
    (Policies::new(root_namespace, all), problems)
}

/// Keeps the policies current: read at start and after every change (changes within 100 ms are
/// taken together); each change bumps the Istio-aware jobs.
pub async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let Some(cfg) = shared.istio.config.clone() else {
        return;
    };
    let Some(r) = resource(&shared) else {
        return;
    };
    let mut changes = shared.cache.subscribe(r);
    loop {
        let listed = shared.cache.get(r).status.synced.load(Ordering::Acquire);
        let (policies, problems) = read(&shared, r, &cfg.root_namespace);
        let old = shared.istio.current();
        if old.policies != policies || old.problems != problems {
            if !problems.is_empty() {
                tracing::warn!(?problems, "some PeerAuthentications are not read");
            }
            tracing::info!(
                peer_authentications = policies.len(),
                "Istio policies updated"
            );
            shared.metrics.istio_policies.set(policies.len() as i64);
            shared
                .metrics
                .istio_policy_problems
                .set(problems.len() as i64);
            *shared
                .istio
                .current
                .write()
                .expect("policies lock poisoned") = Arc::new(PolicySet {
                generation: old.generation + 1,
                policies,
                problems,
            });
            shared.touch_istio_jobs();
        }
        if listed {
            shared.istio.built.store(true, Ordering::Release);
        }
        let quiet = Duration::from_millis(100);
        if !crate::monitors::next_change(&stop, std::slice::from_mut(&mut changes), listed, quiet)
            .await
        {
            return;
        }
    }
}
