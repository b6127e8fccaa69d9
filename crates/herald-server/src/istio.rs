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

use herald_index::cache::Cache;

use crate::metrics::Metrics;

/// The API group of PeerAuthentication.
pub const GROUP: &str = "security.istio.io";
/// Its resource.
pub const PLURAL: &str = "peerauthentications";
/// The versions tried, newest first: `v1` since Istio 1.22, `v1beta1` before.
pub const VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// Istio's workload certificates where its documented Prometheus setup mounts them
/// (`istio.certs_dir`), the server name not verified (the certificate names a SPIFFE identity).
pub fn tls_files(cfg: &herald_core::IstioConfig) -> herald_core::monitor::TlsFiles {
    let certs = cfg.certs_dir.trim_end_matches('/');
    let file = |f: &str| Some(format!("{certs}/{f}"));
    herald_core::monitor::TlsFiles {
        insecure_skip_verify: Some(true),
        ca_file: file("root-cert.pem"),
        cert_file: file("cert-chain.pem"),
        key_file: file("key.pem"),
        ..Default::default()
    }
}

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

/// The Istio state: the policies as last read, and whether they are complete.
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
pub fn resource(cache: &Cache) -> Option<ResId> {
    cache.ids().find(|r| {
        let res = &cache.get(*r).resource;
        res.plural == PLURAL && res.group == GROUP
    })
}

/// Every cached PeerAuthentication, decoded; the ones that cannot be are reported.
fn read(cache: &Cache, r: ResId, root_namespace: &str) -> (Policies, Vec<String>) {
    let log = cache.read(r);
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

impl IstioState {
    /// Reads the policies from resource `r` of `cache` again; a new `PolicySet` (the next
    /// generation) when they changed. Returns whether they did.
    pub fn refresh(&self, cache: &Cache, r: ResId, metrics: &Metrics) -> bool {
        let Some(cfg) = &self.config else {
            return false;
        };
        let (policies, problems) = read(cache, r, &cfg.root_namespace);
        let old = self.current();
        if old.policies == policies && old.problems == problems {
            return false;
        }
        if !problems.is_empty() {
            tracing::warn!(?problems, "some PeerAuthentications are not read");
        }
        tracing::info!(
            peer_authentications = policies.len(),
            "Istio policies updated"
        );
        metrics.istio_policies.set(policies.len() as i64);
        metrics.istio_policy_problems.set(problems.len() as i64);
        *self.current.write().expect("policies lock poisoned") = Arc::new(PolicySet {
            generation: old.generation + 1,
            policies,
            problems,
        });
        true
    }
}

/// Keeps `istio`'s policies current: read from `cache` at start and after every change (changes
/// within 100 ms are taken together); each change calls `changed` (which bumps the Istio-aware
/// jobs).
pub async fn run(
    istio: &IstioState,
    cache: &Cache,
    metrics: &Metrics,
    changed: &(dyn Fn() + Sync),
    stop: CancellationToken,
) {
    if istio.config.is_none() {
        return;
    }
    let Some(r) = resource(cache) else {
        return;
    };
    let mut changes = cache.subscribe(r);
    loop {
        let listed = cache.get(r).status.synced.load(Ordering::Acquire);
        if istio.refresh(cache, r, metrics) {
            changed();
        }
        if listed {
            istio.built.store(true, Ordering::Release);
        }
        let quiet = Duration::from_millis(100);
        if !crate::changes::next_change(&stop, std::slice::from_mut(&mut changes), listed, quiet)
            .await
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use herald_index::cache::{Change, Ingested};
    use kube_face::{Entry, Resource};

    use super::*;

    fn mk_cache() -> Cache {
        let pa = Resource::custom(GROUP, "v1", PLURAL, "PeerAuthentication", true);
        Cache::new(vec![pa], 10, true)
    }

    fn mk_policy(namespace: &str, name: &str, mode: &str, rv: u64) -> Arc<Entry> {
        let json = serde_json::json!({
            "apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
            "metadata": {"namespace": namespace, "name": name, "resourceVersion": rv.to_string()},
            "spec": {"mtls": {"mode": mode}},
        });
        crate::fixtures::mk_entry(namespace, name, rv, &json)
    }

    #[test]
    fn policies_are_read_from_the_cache_and_each_change_is_the_next_generation() {
        let cache = mk_cache();
        let istio = IstioState::new(Some(IstioConfig::default()));
        let metrics = Metrics::default();
        assert!(!istio.ready(), "not ready before a complete list");
        cache.swap(0, 5, vec![mk_policy("prod", "strict", "STRICT", 5)], &[]);
        assert!(istio.refresh(&cache, 0, &metrics));
        let set = istio.current();
        assert_eq!((set.generation, set.policies.len()), (1, 1));
        assert!(set.problems.is_empty(), "{:?}", set.problems);
        assert!(
            !istio.refresh(&cache, 0, &metrics),
            "nothing changed: no new generation"
        );
        assert_eq!(istio.current().generation, 1);

        // A policy Istio would refuse is left out and named.
        let bad = mk_policy("prod", "bad", "SOMETIMES", 6);
        let change = Change::Upsert(Ingested {
            entry: bad,
            slim: None,
        });
        cache.apply(0, vec![change]);
        assert!(istio.refresh(&cache, 0, &metrics));
        let set = istio.current();
        assert_eq!((set.generation, set.policies.len()), (2, 1));
        assert!(
            set.problems.len() == 1 && set.problems[0].contains("prod/bad"),
            "{:?}",
            set.problems
        );
    }

    #[test]
    fn without_istio_nothing_is_read_and_it_is_ready() {
        let cache = mk_cache();
        let istio = IstioState::new(None);
        cache.swap(0, 5, vec![mk_policy("prod", "strict", "STRICT", 5)], &[]);
        assert!(istio.ready());
        assert!(!istio.refresh(&cache, 0, &Metrics::default()));
        assert_eq!(istio.current().generation, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_is_ready_once_listed_and_calls_back_once_per_change() {
        let cache = mk_cache();
        let istio = IstioState::new(Some(IstioConfig::default()));
        let metrics = Metrics::default();
        let calls = AtomicUsize::new(0);
        let changed = || {
            calls.fetch_add(1, Ordering::SeqCst);
        };
        let stop = CancellationToken::new();
        let drive = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(!istio.ready(), "not listed yet");
            assert_eq!(
                calls.load(Ordering::SeqCst),
                1,
                "the first read is a change"
            );
            cache.swap(0, 5, vec![mk_policy("prod", "strict", "STRICT", 5)], &[]);
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(istio.ready());
            assert_eq!(calls.load(Ordering::SeqCst), 2);
            cache.swap(0, 6, vec![mk_policy("prod", "strict", "STRICT", 5)], &[]);
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(
                calls.load(Ordering::SeqCst),
                2,
                "the same policies: no call"
            );
            stop.cancel();
        };
        tokio::join!(run(&istio, &cache, &metrics, &changed, stop.clone()), drive);
    }
}
