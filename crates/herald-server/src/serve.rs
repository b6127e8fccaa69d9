//! Wiring: jobs + an upstream kube config + a listen address → a running herald (upstream watch tasks
//! and the HTTP server), with graceful shutdown. Used by `herald serve`, `herald demo` and the tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::filter::{FilterError, JobSpec};
use crate::state::Shared;
use crate::upstream::{self, InitialList, UpstreamError};

/// The User-Agent herald sends upstream (kube-sim's meter and the apiserver's audit log key on it).
pub const USER_AGENT: &str = concat!("herald/", env!("CARGO_PKG_VERSION"));

/// How long shutdown waits for in-flight requests (long-polls included) before dropping them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What `Herald::start` needs besides the jobs and the upstream.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Must be a loopback or otherwise intended address; tests and the demo use `127.0.0.1:0`.
    pub listen: SocketAddr,
    pub initial_list: InitialList,
    pub user_agent: String,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            initial_list: InitialList::Auto,
            user_agent: USER_AGENT.to_string(),
        }
    }
}

/// Why herald could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Job(#[from] FilterError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The job specs of a parsed config. `own_namespace` serves `namespaces.own_namespace`.
pub fn job_specs(
    config: &herald_core::Config,
    own_namespace: Option<&str>,
) -> Result<Vec<JobSpec>, FilterError> {
    config
        .jobs
        .iter()
        .map(|j| JobSpec::from_job(j, own_namespace))
        .collect()
}

/// A running herald.
#[derive(Debug)]
pub struct Herald {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Herald {
    /// Binds the listener, starts one upstream watch per needed kind and serves HTTP.
    pub async fn start(
        specs: Vec<JobSpec>,
        kube_config: kube::Config,
        options: ServeOptions,
    ) -> Result<Herald, ServeError> {
        let shared = Shared::new(specs);
        let client = upstream::client(kube_config, shared.clone(), &options.user_agent)?;
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| ServeError::Listen {
                    addr: options.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Listen {
            addr: options.listen,
            source,
        })?;
        let shutdown = shared.shutdown_token().clone();
        let streaming = upstream::use_streaming(&client, options.initial_list).await;
        let mut tasks = upstream::spawn(client, shared.clone(), streaming, shutdown.clone());

        let app = crate::http::app(shared.clone());
        let stop = shutdown.clone();
        let server = async move {
            let serve =
                axum::serve(listener, app).with_graceful_shutdown(stop.clone().cancelled_owned());
            // Graceful shutdown, bounded: a long-poll must not hold the process up.
            tokio::select! {
                res = serve => if let Err(e) = res {
                    tracing::error!(error = %e, "http server failed");
                },
                () = async { stop.cancelled().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
                    tracing::warn!("http shutdown grace period over; dropping open requests");
                }
            }
        };
        tasks.push(tokio::spawn(tracing::Instrument::instrument(
            server,
            tracing::info_span!("http", %addr),
        )));
        tracing::info!(%addr, jobs = shared.jobs().len(), streaming, "herald serving");
        Ok(Herald {
            shared,
            addr,
            shutdown,
            tasks,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// A token that stops herald when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Waits until every kind some job needs has completed its first sync.
    pub async fn ready(&self) {
        while !self.shared.ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the upstream watches and the HTTP server and waits for them.
    pub async fn stop(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            if let Err(e) = t.await {
                tracing::warn!(error = %e, "a herald task ended abnormally");
            }
        }
    }

    /// Runs until `shutdown` is cancelled by someone else (a signal handler), then stops.
    pub async fn run_until_stopped(self) {
        self.shutdown.cancelled().await;
        self.stop().await;
    }
}
