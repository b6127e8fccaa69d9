//! Command-line arguments (clap) and logging setup.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use herald_server::InitialList;

#[derive(Debug, Parser)]
#[command(
    name = "herald",
    version,
    about = "One Kubernetes discovery, served to every Prometheus"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format (RUST_LOG sets the level; default info).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "HERALD_LOG_FORMAT")]
    pub log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch a cluster once per kind and serve HTTP service discovery for the configured jobs.
    Serve(ServeArgs),
    /// Run herald against an in-process simulated cluster (kube-sim) with loopback addresses.
    Demo(DemoArgs),
    /// Find what makes a cluster's discovery expensive or blind, and write the fixes.
    Audit(herald_audit::AuditArgs),
    /// What the cluster's Services cost every node's kube-proxy (rules, measured sync times) and
    /// its watchers the apiserver, with and without herald.
    Simulate(herald_simulate::SimulateArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// How the first list of each kind is fetched.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum InitialListArg {
    /// Streaming list when the apiserver is 1.32 or newer, list+watch otherwise.
    Auto,
    /// Always a streaming list (sendInitialEvents).
    Streaming,
    /// Always a paged LIST, then WATCH.
    List,
}

impl From<InitialListArg> for InitialList {
    fn from(a: InitialListArg) -> InitialList {
        match a {
            InitialListArg::Auto => InitialList::Auto,
            InitialListArg::Streaming => InitialList::Streaming,
            InitialListArg::List => InitialList::ListWatch,
        }
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The job file: `jobs:` with one Prometheus kubernetes_sd_configs entry per job, plus a name.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The apiserver URL (no credentials). Without this or --kubeconfig, in-cluster config is used.
    #[arg(long, value_name = "URL", conflicts_with = "kubeconfig")]
    pub apiserver: Option<String>,
    /// A kubeconfig file to reach the apiserver with (its current context).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Where to serve HTTP SD, /metrics, /healthz and /readyz.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9095")]
    pub listen: SocketAddr,
    /// herald's own namespace, for jobs with `namespaces.own_namespace: true` (else the
    /// service-account namespace file, as Prometheus reads it).
    #[arg(long, value_name = "NAME", env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    #[arg(long, value_enum, default_value_t = InitialListArg::Auto)]
    pub initial_list: InitialListArg,
    /// Serve a read-only Kubernetes API (list/watch from herald's cache) here; overrides
    /// `kube_api.listen` in the config file.
    #[arg(long, value_name = "ADDR")]
    pub kube_listen: Option<SocketAddr>,
    /// Bearer tokens for the Kubernetes API, one per line, re-read when the file changes; overrides
    /// `kube_api.token_file`.
    #[arg(long, value_name = "PATH")]
    pub kube_token_file: Option<PathBuf>,
    /// Serve the Kubernetes API on a non-loopback address without tokens.
    #[arg(long)]
    pub kube_insecure: bool,
    /// PEM certificate chain for the Kubernetes API (TLS; re-read when it changes); overrides
    /// `kube_api.tls_cert_file`.
    #[arg(long, value_name = "PATH", requires = "kube_tls_key")]
    pub kube_tls_cert: Option<PathBuf>,
    /// PEM private key for `--kube-tls-cert`; overrides `kube_api.tls_key_file`.
    #[arg(long, value_name = "PATH", requires = "kube_tls_cert")]
    pub kube_tls_key: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where herald serves (kube-sim takes a free loopback port of its own).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9095")]
    pub listen: SocketAddr,
    /// Seed of the generated cluster and its churn.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Churn, in events per second.
    #[arg(long, default_value_t = 2.0)]
    pub churn: f64,
    /// Stop after this long (e.g. 30s); run until Ctrl-C without it.
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
    pub run_for: Option<Duration>,
    /// Seconds between summary lines.
    #[arg(long, default_value_t = 2)]
    pub summary_every: u64,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    herald_server::http::parse_duration(s)
}

pub fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
