//! Wiring: jobs + an upstream kube config + a listen address → a running herald (upstream watch tasks
//! and the HTTP server), with graceful shutdown. Used by `herald serve`, `herald demo` and the tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::{AuthError, Security, TokenError};
use crate::shared::{KubeApiOptions, Shared};
use crate::upstream::{self, InitialList, UpstreamError};
use herald_index::filter::{FilterError, JobSpec};

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
    /// Whether lists and watches are asked for gzip-compressed.
    pub upstream_compression: upstream::Compression,
    pub user_agent: String,
    /// The Kubernetes API face, when it is on.
    pub kube: Option<KubeServeOptions>,
    /// Tokens, TLS and client certificates for `listen` (service discovery, status, metrics).
    pub security: Security,
    /// Upstream objects larger than this are refused and counted; their last good version stays.
    pub max_object_bytes: usize,
    /// The most the HTTP SD bodies kept between requests may hold (`body_store::BodyStore`).
    pub body_budget_bytes: usize,
    /// The most the hot bodies' expanded blocks may hold (`hot_bodies::HotBodies`); 0 keeps none.
    pub hot_body_bytes: usize,
    /// prometheus-operator monitors served as jobs; the specs must include their base jobs
    /// (`job_specs` adds them).
    pub monitors: Option<herald_core::MonitorsConfig>,
    /// The `istio:` section: read when some job has `istio:` (then PeerAuthentications are watched).
    pub istio: herald_core::IstioConfig,
    /// The `target_allocator:` section: serve the OpenTelemetry target allocator's API. With
    /// `collector_selector`, the specs must include the collectors job (`job_specs` adds it).
    pub target_allocator: Option<herald_core::TargetAllocatorConfig>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            initial_list: InitialList::Auto,
            upstream_compression: upstream::Compression::default(),
            user_agent: USER_AGENT.to_string(),
            kube: None,
            security: Security::default(),
            max_object_bytes: crate::watch_lines::DEFAULT_MAX_OBJECT_BYTES,
            body_budget_bytes: herald_index::body_store::DEFAULT_BUDGET_BYTES,
            hot_body_bytes: herald_index::hot_bodies::DEFAULT_HOT_BYTES,
            monitors: None,
            istio: herald_core::IstioConfig::default(),
            target_allocator: None,
        }
    }
}

pub use crate::kube_api::CustomRef;

/// Where and how to serve the Kubernetes API face.
#[derive(Debug, Clone)]
pub struct KubeServeOptions {
    pub listen: SocketAddr,
    /// Built-in resources to serve are in `api.resources`; custom ones are resolved against the
    /// upstream's discovery at start.
    pub api: KubeApiOptions,
    /// Custom resources by (group, version, resource).
    pub custom: Vec<CustomRef>,
    /// Bearer tokens, one per line; re-read when the file changes.
    pub token_file: Option<std::path::PathBuf>,
    /// Allow a non-loopback address without tokens.
    pub insecure: bool,
    /// Serve over TLS with these files (client-go sends tokens only over TLS).
    pub tls: Option<crate::tls::TlsFiles>,
}

impl KubeServeOptions {
    /// The face on `listen` serving the built-in resources of `api`: no custom resources, tokens or
    /// TLS, so herald serves it only on a loopback address.
    pub fn plain(listen: SocketAddr, api: KubeApiOptions) -> KubeServeOptions {
        KubeServeOptions {
            listen,
            api,
            custom: vec![],
            token_file: None,
            insecure: false,
            tls: None,
        }
    }

    /// How the face's port is secured.
    pub fn security(&self) -> Security {
        Security {
            token_file: self.token_file.clone(),
            tls: self.tls.clone(),
            insecure: self.insecure,
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
    #[error(transparent)]
    Tokens(#[from] TokenError),
    #[error("starting the upstream runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(
        "kube_api.kinds: {0:?} is not a built-in resource (name custom resources by group, version and resource)"
    )]
    UnknownBuiltin(String),
    #[error("kube_api.kinds: the upstream does not serve {resource} in {group_version}: {why}")]
    UnknownCustom {
        group_version: String,
        resource: String,
        why: String,
    },
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The resources served when `kube_api.kinds` names none: what node-local proxies, ingress
/// controllers and monitoring agents list and watch. kube-proxy ≥ 1.33 watches ServiceCIDRs
/// unconditionally (kubernetes cmd/kube-proxy/app/server.go, v1.37.2); an upstream without them
/// (Kubernetes < 1.33) has them left out at start (`SINCE_1_33`).
pub const DEFAULT_KUBE_KINDS: &[&str] = &[
    "pods",
    "services",
    "endpoints",
    "endpointslices",
    "nodes",
    "namespaces",
    "servicecidrs.networking.k8s.io",
];

/// Built-in resources an older upstream may not serve (`networking.k8s.io/v1` ServiceCIDRs are GA
/// since Kubernetes 1.33). The face serves them only when the upstream's discovery lists them, so a
/// consumer sees the 404 the upstream itself would give, instead of herald waiting forever for a
/// list that cannot succeed.
const SINCE_1_33: &[(&str, &str, &str)] = &[("networking.k8s.io", "v1", "servicecidrs")];

/// Drops the resources of [`SINCE_1_33`] that the upstream's discovery does not list.
async fn drop_unserved(client: &kube::Client, resources: &mut Vec<kube_face::Resource>) {
    for (group, version, plural) in SINCE_1_33 {
        let Some(at) = resources
            .iter()
            .position(|r| r.group == *group && r.version == *version && r.plural == *plural)
        else {
            continue;
        };
        let gv = format!("{group}/{version}");
        match client.list_api_group_resources(&gv).await {
            Ok(list) if list.resources.iter().any(|r| r.name == *plural) => {}
            Ok(_) | Err(kube::Error::Api(_)) => {
                tracing::warn!(
                    resource = %format!("{plural}.{group}"),
                    "the upstream does not serve {gv} {plural} (Kubernetes before 1.33?): not served on the Kubernetes API face"
                );
                resources.remove(at);
            }
            // Upstream unreachable now: keep it; its watch loop retries like every other kind's.
            Err(e) => tracing::warn!(
                resource = %format!("{plural}.{group}"),
                error = %e,
                "could not read the upstream's discovery; serving the resource as configured"
            ),
        }
    }
}

/// Splits `kube_api.kinds` into built-in resources (resolved now) and custom ones (resolved against
/// the upstream at start). No kinds means the defaults.
pub fn kube_kinds(
    refs: &[herald_core::KindRef],
) -> Result<(Vec<kube_face::Resource>, Vec<CustomRef>), ServeError> {
    if refs.is_empty() {
        let builtins = DEFAULT_KUBE_KINDS
            .iter()
            .map(|k| kube_face::Resource::builtin(k).expect("defaults are built-ins"))
            .collect();
        return Ok((builtins, vec![]));
    }
    let mut builtins = Vec::new();
    let mut custom = Vec::new();
    for r in refs {
        match r {
            herald_core::KindRef::Builtin(name) => builtins.push(
                kube_face::Resource::builtin(name)
                    .ok_or_else(|| ServeError::UnknownBuiltin(name.clone()))?,
            ),
            herald_core::KindRef::Custom {
                group,
                version,
                resource,
            } => custom.push((group.clone(), version.clone(), resource.clone())),
        }
    }
    Ok((builtins, custom))
}

/// Reads a custom resource's kind and scope from the upstream's discovery.
async fn resolve_custom(
    client: &kube::Client,
    (group, version, plural): &CustomRef,
) -> Result<kube_face::Resource, ServeError> {
    let gv = format!("{group}/{version}");
    let unknown = |why: String| ServeError::UnknownCustom {
        group_version: gv.clone(),
        resource: plural.clone(),
        why,
    };
    let list = client
        .list_api_group_resources(&gv)
        .await
        .map_err(|e| unknown(e.to_string()))?;
    let found = list
        .resources
        .iter()
        .find(|r| &r.name == plural)
        .ok_or_else(|| unknown("no such resource in its discovery document".into()))?;
    Ok(kube_face::Resource::custom(
        group,
        version,
        plural,
        &found.kind,
        found.namespaced,
    ))
}

/// The PeerAuthentication resource Istio-aware jobs read: `security.istio.io/v1`, else `v1beta1`
/// (Istio before 1.22).
async fn resolve_peer_authentications(
    client: &kube::Client,
) -> Result<kube_face::Resource, ServeError> {
    let mut last = None;
    for version in crate::istio::VERSIONS {
        let r = (
            crate::istio::GROUP.to_string(),
            version.to_string(),
            crate::istio::PLURAL.to_string(),
        );
        match resolve_custom(client, &r).await {
            Ok(found) => return Ok(found),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one version is tried"))
}

/// The job specs of a parsed config. `own_namespace` serves `namespaces.own_namespace`.
pub fn job_specs(
    config: &herald_core::Config,
    own_namespace: Option<&str>,
) -> Result<Vec<JobSpec>, FilterError> {
    let mut specs = config
        .jobs
        .iter()
        .map(|j| {
            if config.monitors.is_some() && j.name.starts_with(crate::monitors::BASE_PREFIX) {
                return Err(FilterError::ReservedName {
                    job: j.name.clone(),
                    prefix: crate::monitors::BASE_PREFIX,
                });
            }
            JobSpec::from_job(j, own_namespace)
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(m) = &config.monitors {
        specs.extend(crate::monitors::base_specs(m)?);
    }
    // The collector pods, found through the pod watch like any pod job's targets.
    if let Some(job) = config
        .target_allocator
        .as_ref()
        .and_then(|t| t.collectors_job())
    {
        specs.push(JobSpec::from_job(&job, own_namespace)?);
    }
    Ok(specs)
}

/// Serves `app` on `listener` until `shutdown`: over TLS when `tls` is given, else plain HTTP with a
/// bounded grace period for requests in flight (a long-poll must not hold the process up).
async fn serve_port(
    listener: TcpListener,
    app: axum::Router,
    tls: Option<Arc<crate::tls::Reloading>>,
    shutdown: CancellationToken,
) {
    if let Some(tls) = tls {
        return crate::tls::serve(listener, tls, app, shutdown).await;
    }
    let serve = axum::serve(
        nodelay(listener),
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    tokio::select! {
        res = serve => if let Err(e) = res {
            tracing::error!(error = %e, "http server failed");
        },
        () = async { shutdown.cancelled().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            tracing::warn!("http shutdown grace period over; dropping open requests");
        }
    }
}

/// `listener`, its connections with TCP_NODELAY, as the TLS path (`tls::serve`) and kube-sim set it.
/// NB: a watch event or a long-poll answer is one small write, which Nagle's algorithm holds until
/// the client acknowledges the previous one.
fn nodelay(listener: TcpListener) -> axum::serve::TapIo<TcpListener, fn(&mut TcpStream)> {
    fn set(tcp: &mut TcpStream) {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
    }
    axum::serve::ListenerExt::tap_io(listener, set as fn(&mut TcpStream))
}

/// The TLS state of a port, loaded now so bad files stop start-up.
fn load_tls(security: &Security) -> Result<Option<Arc<crate::tls::Reloading>>, ServeError> {
    Ok(security
        .tls
        .clone()
        .map(crate::tls::Reloading::new)
        .transpose()?
        .map(Arc::new))
}

/// Connections the kernel queues for each listener before herald accepts them (capped by
/// `net.core.somaxconn`). Tokio's `TcpListener::bind` asks for 128, as Rust's std does; after a
/// restart thousands of informers reconnect at once, overflow 128 (`TcpExtListenOverflows`), and the
/// connections the kernel dropped hang on the client side until its timeout. Go's apiserver listens
/// with `somaxconn`; herald asks for as much.
const LISTEN_BACKLOG: u32 = 4096;

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    let listen = || -> std::io::Result<TcpListener> {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As TcpListener::bind does: rebinding the port at once after a restart.
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    listen().map_err(|source| ServeError::Listen { addr, source })
}

fn local_addr(l: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, ServeError> {
    l.local_addr()
        .map_err(|source| ServeError::Listen { addr, source })
}

/// A running herald. Dropping it without `stop` ends its upstream feeds at once.
#[derive(Debug)]
pub struct Herald {
    shared: Arc<Shared>,
    addr: SocketAddr,
    kube_addr: Option<SocketAddr>,
    kube_tls: bool,
    /// Whether `addr` serves TLS.
    tls: bool,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    /// The upstream feeds' own runtime (see `upstream_runtime`).
    _upstream_rt: UpstreamRuntime,
}

/// A runtime that winds down in the background when dropped. NB: a runtime may not be dropped the
/// ordinary way (it blocks) inside another runtime, which is where herald starts and stops.
#[derive(Debug)]
struct UpstreamRuntime(Option<tokio::runtime::Runtime>);

impl UpstreamRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("present until dropped").handle()
    }
}

impl Drop for UpstreamRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The runtime the upstream client and feeds run on. NB: a runtime of their own, because with
/// thousands of downstream watchers the serving runtime's queue holds thousands of tasks after every
/// event, and a feed queued behind them falls behind its upstream — which then makes every watcher's
/// backlog, and so the queue, grow.
fn upstream_runtime() -> Result<UpstreamRuntime, ServeError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("herald-upstream")
        .enable_all()
        .build()
        .map(|rt| UpstreamRuntime(Some(rt)))
        .map_err(ServeError::Runtime)
}

impl Herald {
    /// Binds the listener, starts one upstream watch per needed kind and serves HTTP.
    pub async fn start(
        specs: Vec<JobSpec>,
        kube_config: kube::Config,
        options: ServeOptions,
    ) -> Result<Herald, ServeError> {
        options
            .security
            .check_exposure("service discovery", options.listen)?;
        let sd_tls = load_tls(&options.security)?;
        // Read now so a missing token file stops start-up before anything is served.
        options.security.tokens()?;
        if let Some(k) = &options.kube {
            k.security().check_exposure("Kubernetes API", k.listen)?;
            k.security().tokens()?;
        }
        let upstream_rt = upstream_runtime()?;
        let ua = options.user_agent.clone();
        // Built on the upstream runtime, so the clients' own tasks run there too. Discovery at
        // start retries refusals inside the client; the feeds handle theirs (`upstream::client`).
        let (client, feed_client) = upstream_rt
            .handle()
            .spawn(async move {
                Ok::<_, UpstreamError>((
                    upstream::discovery_client(kube_config.clone(), &ua)?,
                    upstream::client(kube_config, &ua)?,
                ))
            })
            .await
            .map_err(|e| ServeError::Runtime(std::io::Error::other(e)))??;
        let api = match &options.kube {
            Some(k) => {
                let mut api = k.api.clone();
                drop_unserved(&client, &mut api.resources).await;
                for c in &k.custom {
                    api.resources.push(resolve_custom(&client, c).await?);
                }
                Some(api)
            }
            None => None,
        };
        let mut monitor_resources = Vec::new();
        if let Some(m) = &options.monitors {
            for c in crate::monitors::resources(m) {
                monitor_resources.push(resolve_custom(&client, &c).await?);
            }
            // A Prometheus object's namespace selectors match namespaces by their labels.
            if m.prometheus.is_some() {
                monitor_resources.push(herald_index::WatchKind::Namespace.resource());
            }
        }
        if specs.iter().any(|s| s.istio.is_some())
            || options.monitors.as_ref().is_some_and(|m| m.istio)
        {
            monitor_resources.push(resolve_peer_authentications(&client).await?);
        }
        let shared = Shared::with_monitors(
            specs,
            api,
            monitor_resources,
            options.monitors.clone(),
            options.istio.clone(),
        );
        shared.set_max_object_bytes(options.max_object_bytes);
        shared.set_body_budget(options.body_budget_bytes);
        shared.set_hot_body_budget(options.hot_body_bytes);
        let listener = bind(options.listen).await?;
        let addr = local_addr(&listener, options.listen)?;
        let shutdown = shared.shutdown_token().clone();
        let (feed_shared, feed_stop, mode, compression) = (
            shared.clone(),
            shutdown.clone(),
            options.initial_list,
            options.upstream_compression,
        );
        let (streaming, mut tasks) = upstream_rt
            .handle()
            .spawn(async move {
                let streaming = upstream::use_streaming(&client, mode).await;
                (
                    streaming,
                    upstream::spawn(
                        upstream::Upstream::new(feed_client, compression),
                        feed_shared,
                        streaming,
                        feed_stop,
                    ),
                )
            })
            .await
            .map_err(|e| ServeError::Runtime(std::io::Error::other(e)))?;

        let mut kube_addr = None;
        if let Some(k) = &options.kube {
            let kube_listener = bind(k.listen).await?;
            let at = local_addr(&kube_listener, k.listen)?;
            kube_addr = Some(at);
            let security = k.security();
            let face = shared
                .kube_api
                .clone()
                .expect("the face is built when its options are given");
            let app = crate::auth::guard(
                crate::kube_api::router(face),
                &security,
                shared.metrics.kube_auth_refused.clone(),
                crate::kube_api::refuse,
                &shutdown,
            )?;
            let tls = load_tls(&security)?;
            let stop = shutdown.clone();
            let closing = shared.clone();
            let closer = stop.clone();
            tasks.push(tokio::spawn(async move {
                closer.cancelled().await;
                if let Some(api) = &closing.kube_api {
                    api.shut_down();
                }
            }));
            tasks.push(tokio::spawn(tracing::Instrument::instrument(
                serve_port(kube_listener, app, tls, stop),
                tracing::info_span!("kube-api", addr = %at),
            )));
            tracing::info!(addr = %at, auth = security.authenticates(), tls = k.tls.is_some(), "serving the Kubernetes API");
        }

        let (swept, stop) = (shared.clone(), shutdown.clone());
        tasks.push(tokio::spawn(async move {
            herald_index::hot_bodies::sweep(swept.bodies.hot(), stop).await;
        }));
        if shared.monitors.config.is_some() {
            let (s, stop) = (shared.clone(), shutdown.clone());
            tasks.push(tokio::spawn(async move {
                let base_job = |name: &str| s.job(name);
                crate::monitors::feed::run(&s.monitors, &s.cache, &s.metrics, &base_job, stop)
                    .await;
            }));
        }
        if shared.istio.config.is_some() {
            let (s, stop) = (shared.clone(), shutdown.clone());
            tasks.push(tokio::spawn(async move {
                let changed = || s.touch_istio_jobs();
                crate::istio::run(&s.istio, &s.cache, &s.metrics, &changed, stop).await;
            }));
        }
        let allocator = options
            .target_allocator
            .clone()
            .map(|t| Arc::new(crate::allocator::Allocator::over(t, shared.clone())));
        let served = crate::http::sd::ServedSecurity {
            tls: options.security.tls.is_some(),
            tokens: options.security.token_file.is_some(),
        };
        let app = crate::auth::guard(
            crate::http::app_with(shared.clone(), allocator).layer(axum::Extension(served)),
            &options.security,
            shared.metrics.http_auth_refused.clone(),
            crate::http::refuse,
            &shutdown,
        )?;
        tasks.push(tokio::spawn(tracing::Instrument::instrument(
            serve_port(listener, app, sd_tls, shutdown.clone()),
            tracing::info_span!("http", %addr),
        )));
        tracing::info!(
            %addr,
            jobs = shared.jobs().len(),
            streaming,
            auth = options.security.authenticates(),
            tls = options.security.tls.is_some(),
            "herald serving"
        );
        Ok(Herald {
            shared,
            addr,
            kube_addr,
            kube_tls: options.kube.as_ref().is_some_and(|k| k.tls.is_some()),
            tls: options.security.tls.is_some(),
            shutdown,
            tasks,
            _upstream_rt: upstream_rt,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, or `https://ADDR` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// `http://ADDR` (or `https://` with TLS) of the Kubernetes API face, when it is on.
    pub fn kube_url(&self) -> Option<String> {
        let scheme = if self.kube_tls { "https" } else { "http" };
        self.kube_addr.map(|a| format!("{scheme}://{a}"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn plain_http_connections_are_accepted_with_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut listener = nodelay(listener);
        let client = tokio::spawn(TcpStream::connect(addr));
        let (io, _) = axum::serve::Listener::accept(&mut listener).await;
        assert!(io.nodelay().expect("socket option"), "TCP_NODELAY is set");
        client.await.expect("task").expect("connects");
    }
}
