//! kube-sim as a library: start a simulated apiserver in-process (port 0 is fine), get its URL and a
//! kubeconfig, mutate objects, inject faults and read the meter. herald's tests and `herald demo` embed it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::churn::Churn;
use crate::faults::{Fault, Faults};
use crate::generate::{ClusterSpec, generate};
use crate::kind::{Kind, Object, Write};
use crate::meter::Meter;
use crate::server::{Settings, Shared, serve};
use crate::store::Store;
use kube_face::ApiError;

/// How to start a simulation.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Where to listen; loopback only. Port 0 picks a free port.
    pub listen: SocketAddr,
    pub spec: ClusterSpec,
    /// Generate `spec`'s cluster. When false the cluster holds only the `default`, `kube-system` and
    /// `kube-public` namespaces, for tests that create every object themselves.
    pub populate: bool,
    pub seed: u64,
    /// Churn events per second (0: a quiet cluster).
    pub churn_per_sec: f64,
    /// Events kept per kind for watch resumption: the watch cache's capacity.
    pub history_window: usize,
    pub settings: Settings,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            spec: ClusterSpec::small(),
            populate: true,
            seed: 1,
            churn_per_sec: 0.0,
            history_window: 20_000,
            settings: Settings::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("kube-sim only listens on loopback addresses, not {0}")]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot generate the cluster: {0}")]
    Generate(String),
}

/// A running simulation. Dropping it stops the server.
pub struct Sim {
    handle: SimHandle,
    addr: SocketAddr,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// A cheap, cloneable handle to mutate and inspect a running simulation.
#[derive(Clone)]
pub struct SimHandle {
    shared: Arc<Shared>,
    churn_tx: Arc<watch::Sender<f64>>,
}

impl Sim {
    pub async fn start(cfg: SimConfig) -> Result<Sim, SimError> {
        if !cfg.listen.ip().is_loopback() {
            return Err(SimError::NotLoopback(cfg.listen));
        }
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| SimError::Bind {
                addr: cfg.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: cfg.listen,
            source,
        })?;
        cfg.spec
            .validate()
            .map_err(|e| SimError::Generate(e.to_string()))?;
        let spec = cfg.spec.clone();
        let seed = cfg.seed;
        let store = Store::new(cfg.history_window);
        let churn = if cfg.populate {
            // Generating k8s-limits takes seconds of CPU: keep it off the async workers.
            let cluster = tokio::task::spawn_blocking(move || generate(&spec, seed))
                .await
                .map_err(|e| SimError::Generate(e.to_string()))?;
            let churn = Churn::new(cfg.seed, &cluster);
            store.load(cluster.objects);
            Some(churn)
        } else {
            store.load(
                ["default", "kube-system", "kube-public"]
                    .into_iter()
                    .map(|n| {
                        let mut ns = k8s_openapi::api::core::v1::Namespace::default();
                        ns.metadata.name = Some(n.to_string());
                        Object::Namespace(ns)
                    })
                    .collect(),
            );
            None
        };
        let shared = Arc::new(Shared {
            store,
            meter: Arc::new(Meter::new()),
            faults: Faults::new(),
            settings: cfg.settings,
            server_address: addr.to_string(),
            catalog: kube_face::Catalog {
                resources: Kind::ALL.iter().map(|k| k.resource()).collect(),
                writable: true,
            },
        });
        let shutdown = CancellationToken::new();
        let (churn_tx, churn_rx) = watch::channel(cfg.churn_per_sec);
        let tasks = vec![
            tokio::spawn(serve(listener, shared.clone(), shutdown.clone())),
            tokio::spawn(run_churn(shared.clone(), churn, churn_rx, shutdown.clone())),
        ];
        tracing::info!(url = %format!("http://{addr}"), "kube-sim serving");
        Ok(Sim {
            handle: SimHandle {
                shared,
                churn_tx: Arc::new(churn_tx),
            },
            addr,
            shutdown,
            tasks,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for kubectl and client-go: plain HTTP on loopback, no credentials.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-sim\n  cluster:\n    server: {}\ncontexts:\n- name: kube-sim\n  context:\n    cluster: kube-sim\n    user: kube-sim\n    namespace: default\ncurrent-context: kube-sim\nusers:\n- name: kube-sim\n  user: {{}}\n",
            self.url()
        )
    }

    pub fn handle(&self) -> SimHandle {
        self.handle.clone()
    }

    pub fn stats(&self) -> Value {
        self.handle.stats()
    }

    /// Stops serving and waits for the server tasks to end.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl SimHandle {
    /// Writes as the cluster's own machinery would; the controllers react as usual.
    pub fn apply(&self, writes: Vec<Write>) {
        self.shared.store.apply(writes);
    }

    pub fn fault(&self, fault: Fault) -> Result<(), ApiError> {
        self.shared.inject(&fault)
    }

    /// Changes the churn rate (events per second; 0 stops churn).
    pub fn set_churn(&self, per_sec: f64) {
        self.churn_tx.send_replace(per_sec.max(0.0));
    }

    /// Every current object of a kind, as JSON.
    pub fn objects_json(&self, kind: Kind) -> Vec<Value> {
        self.shared
            .store
            .all(kind)
            .1
            .iter()
            .map(|e| {
                serde_json::from_slice(&e.bytes.get()).expect("stored bytes are JSON we encoded")
            })
            .collect()
    }

    pub fn resource_version(&self) -> u64 {
        self.shared.store.resource_version()
    }

    /// The `/sim/stats` document.
    pub fn stats(&self) -> Value {
        self.shared.stats()
    }

    /// The `/sim/dump` document.
    pub fn dump(&self) -> Value {
        serde_json::from_slice(&self.shared.dump()).expect("the dump is JSON we encoded")
    }
}

/// Applies churn at the configured rate, in 100 ms ticks, carrying fractions over so low rates work.
async fn run_churn(
    shared: Arc<Shared>,
    mut churn: Option<Churn>,
    mut rate_rx: watch::Receiver<f64>,
    shutdown: CancellationToken,
) {
    let tick = Duration::from_millis(100);
    let mut owed = 0.0f64;
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let rate = *rate_rx.borrow_and_update();
        let Some(churn) = churn.as_mut() else {
            // An unpopulated cluster has no workloads to churn.
            return;
        };
        if rate <= 0.0 {
            owed = 0.0;
            continue;
        }
        owed += rate * tick.as_secs_f64();
        let n = owed.floor() as usize;
        if n == 0 {
            continue;
        }
        owed -= n as f64;
        let writes = churn.next_events(n);
        shared.store.apply(writes);
    }
}
