//! Command-line arguments (clap) and logging setup.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use herald_server::{InitialList, UpstreamCompression};

use crate::size::ByteSize;

/// `herald --version`: the crate's version, the commit it was built from (`unknown` outside a git
/// checkout) and the compiler (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HERALD_COMMIT"),
    ", ",
    env!("HERALD_RUSTC"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "herald",
    version = VERSION,
    about = "One Kubernetes discovery, served to every Prometheus"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "HERALD_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// What is logged: error, warn, info, debug or trace [default: info; warn for demo]. RUST_LOG,
    /// when set, wins (it also takes per-module directives: RUST_LOG=herald_server=debug).
    #[arg(long, global = true, value_enum, value_name = "LEVEL")]
    pub log_level: Option<LogLevel>,
    /// Log more: one level up per -v (-vv: two).
    #[arg(short = 'v', long = "verbose", global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Log less: one level down per -q.
    #[arg(short = 'q', long = "quiet", global = true, action = clap::ArgAction::Count)]
    pub quiet: u8,
}

/// A log level, from the least to the most verbose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    const ALL: [LogLevel; 5] = [
        LogLevel::Error,
        LogLevel::Warn,
        LogLevel::Info,
        LogLevel::Debug,
        LogLevel::Trace,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }

    /// This level moved `up` steps towards trace and `down` towards error, within the ends.
    pub fn shifted(self, up: u8, down: u8) -> LogLevel {
        let at = self as i32 + i32::from(up) - i32::from(down);
        LogLevel::ALL[at.clamp(0, 4) as usize]
    }
}

impl Cli {
    /// The level asked for: `--log-level`, else `default`, moved by `-v` and `-q`.
    pub fn log_level(&self, default: LogLevel) -> LogLevel {
        self.log_level
            .unwrap_or(default)
            .shifted(self.verbose, self.quiet)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch a cluster once per kind and serve HTTP service discovery for the configured jobs.
    Serve(Box<ServeArgs>),
    /// Run herald against an in-process simulated cluster (kube-sim) with loopback addresses.
    Demo(DemoArgs),
    /// Find what makes a cluster's discovery expensive or blind, and write the fixes.
    Audit(herald_audit::AuditArgs),
    /// What the cluster's Services cost every node's kube-proxy (rules, measured sync times) and
    /// its watchers the apiserver, with and without herald.
    Simulate(herald_simulate::SimulateArgs),
    /// Ask a running herald which jobs and shards serve an object's targets, with which labels,
    /// and which rule, selector or port dropped the rest (`GET /explain`).
    Explain(ExplainArgs),
    /// Print a shell completion script: `herald completion bash > /etc/bash_completion.d/herald`,
    /// `herald completion zsh > "${fpath[1]}/_herald"`, `herald completion fish >
    /// ~/.config/fish/completions/herald.fish`.
    Completion(CompletionArgs),
}

#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Pod, Service, Endpoints, EndpointSlice, Node, Ingress, ServiceMonitor or PodMonitor.
    #[arg(value_name = "KIND")]
    pub kind: String,
    /// NAMESPACE/NAME, or NAME for a Node.
    #[arg(value_name = "[NS/]NAME")]
    pub object: String,
    /// herald's URL (http://HOST:PORT, or https:// with --ca-file).
    #[arg(long, value_name = "URL")]
    pub server: String,
    /// A file whose first non-comment line is a bearer token herald accepts.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The CA that signed herald's certificate (for https).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Shard counts to place each target in, besides those consumers use (e.g. 2,4).
    #[arg(long, value_name = "N,...")]
    pub shards: Option<String>,
    /// `table` (readable) or `json` (herald's answer as it is).
    #[arg(long, value_enum, default_value_t = ExplainOutput::Table)]
    pub output: ExplainOutput,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExplainOutput {
    Table,
    Json,
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

/// Whether herald asks its upstream for compressed responses.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CompressionArg {
    /// `Accept-Encoding: identity`.
    None,
    /// `Accept-Encoding: gzip`; every member of a multi-member body is decoded.
    Gzip,
}

impl From<CompressionArg> for UpstreamCompression {
    fn from(a: CompressionArg) -> UpstreamCompression {
        match a {
            CompressionArg::None => UpstreamCompression::Identity,
            CompressionArg::Gzip => UpstreamCompression::Gzip,
        }
    }
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
    /// The apiserver URL (no credentials). Without this, --kubeconfig or --context, in-cluster
    /// config is used.
    #[arg(long, value_name = "URL", conflicts_with_all = ["kubeconfig", "context"])]
    pub apiserver: Option<String>,
    /// A kubeconfig file to reach the apiserver with (its current context, or --context).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context). Without --kubeconfig, the
    /// kubeconfig KUBECONFIG or ~/.kube/config names.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Where to serve HTTP SD, the status page, /metrics, /healthz and /readyz; overrides
    /// `server.listen` [default: 127.0.0.1:9095].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Bearer tokens for --listen, one per line, re-read when the file changes; overrides
    /// `server.token_file`. Without a token: 401; with a wrong one: 403.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// PEM certificate chain for --listen (TLS; re-read when it changes); overrides
    /// `server.tls_cert_file`.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for `--tls-cert`; overrides `server.tls_key_file`.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA for --listen: a client certificate it signed authenticates (mTLS); overrides
    /// `server.client_ca_file`.
    #[arg(long, value_name = "PATH")]
    pub client_ca: Option<PathBuf>,
    /// Serve --listen on a non-loopback address without authentication.
    #[arg(long)]
    pub insecure: bool,
    /// Upstream objects larger than this are refused (counted in
    /// herald_upstream_oversized_objects_total; the object's last good version is kept). Bytes, or
    /// a size with a unit: 3Mi, 4MB.
    #[arg(long, value_name = "SIZE", default_value_t = ByteSize(herald_server::frames::DEFAULT_MAX_OBJECT_BYTES))]
    pub max_object_bytes: ByteSize,
    /// The most the HTTP SD response bodies kept between requests may hold (zstd blocks and gzip
    /// forms; least recently used evicted first, rebuilt on the next request). Shown as
    /// herald_sd_body_bytes_held; 0 keeps none. Bytes, or a size with a unit: 512Mi, 1Gi, 400MB.
    #[arg(long, value_name = "SIZE", default_value_t = ByteSize(herald_server::bodies::DEFAULT_BUDGET_BYTES))]
    pub body_budget_bytes: ByteSize,
    /// The most the hot HTTP SD bodies may hold: a body sent again within 10 s is kept expanded
    /// (identity) or whole (gzip) while it is asked for, so its responses skip decompressing it.
    /// Within --body-budget-bytes, in the room the kept bodies leave (hot bodies give way first);
    /// herald_sd_hot_body_bytes_held. 0 keeps none. Bytes, or a size with a unit: 128Mi.
    #[arg(long, value_name = "SIZE", default_value_t = ByteSize(herald_server::hot::DEFAULT_HOT_BYTES))]
    pub hot_body_bytes: ByteSize,
    /// herald's own namespace, for jobs with `namespaces.own_namespace: true` (else the
    /// service-account namespace file, as Prometheus reads it).
    #[arg(long, value_name = "NAME", env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// How herald takes each kind's first list from the apiserver: `auto` asks for a streaming list
    /// (a watch with sendInitialEvents, KEP-3157) from apiservers 1.32 and newer and does a paged
    /// LIST then a WATCH on older ones; `streaming` and `list` force one of the two.
    #[arg(long, value_enum, default_value_t = InitialListArg::Auto)]
    pub initial_list: InitialListArg,
    /// Whether herald asks the apiserver for gzip-compressed lists and watches. `none` spends no
    /// apiserver CPU on compressing herald's streams; `gzip` sends fewer bytes, as client-go does.
    #[arg(long, value_enum, default_value_t = CompressionArg::None)]
    pub upstream_compression: CompressionArg,
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
    /// PEM CA for the Kubernetes API: a client certificate it signed authenticates (mTLS);
    /// overrides `kube_api.client_ca_file`.
    #[arg(long, value_name = "PATH")]
    pub kube_client_ca: Option<PathBuf>,
    /// Serve the OpenTelemetry target allocator's API with this strategy (consistent-hashing,
    /// rendezvous-hashing, per-node); overrides `target_allocator.allocation_strategy`.
    #[arg(long, value_name = "NAME")]
    pub ta_strategy: Option<String>,
    /// A collector of the target allocator's API, `NAME` or `NAME@NODE` (per-node needs the node);
    /// repeat for each. Replaces the job file's collectors or collector selector.
    #[arg(long, value_name = "NAME[@NODE]")]
    pub ta_collector: Vec<String>,
    /// The collectors as pods: their namespace (with --ta-collector-selector); overrides
    /// `target_allocator.collector_namespace`.
    #[arg(long, value_name = "NAMESPACE", conflicts_with = "ta_collector")]
    pub ta_collector_namespace: Option<String>,
    /// The collectors as pods: their label selector (with --ta-collector-namespace); overrides
    /// `target_allocator.collector_selector`.
    #[arg(long, value_name = "SELECTOR", conflicts_with = "ta_collector")]
    pub ta_collector_selector: Option<String>,
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
    /// Attach this many simulated Prometheus shards (polling every job's /sd/v1 shard) and as many
    /// informers (list+watch on herald's Kubernetes API), so the live line shows what herald saves
    /// from the start; 0 for none.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub consumers: usize,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    herald_server::http::parse_duration(s)
}

/// Logs to stderr (RUST_LOG when set, else `level`), and keeps recent warnings for the status page.
pub fn init_tracing(format: LogFormat, level: LogLevel) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, fmt};
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level.as_str()));
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(herald_server::status::RecentWarnings);
    match format {
        LogFormat::Text => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn the_log_level_is_the_flag_else_the_default_moved_by_v_and_q() {
        let info = LogLevel::Info;
        assert_eq!(
            cli(&["herald", "demo"]).log_level(LogLevel::Warn),
            LogLevel::Warn
        );
        assert_eq!(
            cli(&["herald", "demo", "-v"]).log_level(LogLevel::Warn),
            info
        );
        assert_eq!(
            cli(&["herald", "--log-level", "debug", "demo"]).log_level(LogLevel::Warn),
            LogLevel::Debug
        );
        assert_eq!(
            cli(&["herald", "demo", "-vvvvvv"]).log_level(info),
            LogLevel::Trace
        );
        assert_eq!(
            cli(&["herald", "-qqq", "demo"]).log_level(info),
            LogLevel::Error
        );
        assert_eq!(
            cli(&["herald", "demo", "--log-level=warn", "-v", "-q"]).log_level(info),
            LogLevel::Warn
        );
        let err =
            Cli::try_parse_from(["herald", "demo", "--log-level", "loud"]).expect_err("refused");
        assert!(err.to_string().contains("loud"), "{err}");
    }

    #[test]
    fn serve_takes_sizes_with_units_and_raw_bytes() {
        let args = |extra: &[&str]| -> ServeArgs {
            let mut v = vec!["herald", "serve", "--config", "jobs.yaml"];
            v.extend_from_slice(extra);
            match cli(&v).command {
                Command::Serve(a) => *a,
                other => panic!("{other:?}"),
            }
        };
        let d = args(&[]);
        assert_eq!(
            d.body_budget_bytes.0,
            herald_server::bodies::DEFAULT_BUDGET_BYTES
        );
        assert_eq!(d.hot_body_bytes.0, herald_server::hot::DEFAULT_HOT_BYTES);
        assert_eq!(
            d.max_object_bytes.0,
            herald_server::frames::DEFAULT_MAX_OBJECT_BYTES
        );
        let a = args(&[
            "--body-budget-bytes",
            "1Gi",
            "--hot-body-bytes=400MB",
            "--max-object-bytes",
            "4194304",
        ]);
        assert_eq!(a.body_budget_bytes.0, 1 << 30);
        assert_eq!(a.hot_body_bytes.0, 400_000_000);
        assert_eq!(a.max_object_bytes.0, 4 << 20);
        let err = Cli::try_parse_from([
            "herald",
            "serve",
            "--config",
            "j",
            "--body-budget-bytes",
            "lots",
        ])
        .expect_err("refused");
        assert!(err.to_string().contains("invalid size \"lots\""), "{err}");
    }

    #[test]
    fn serve_takes_a_context_but_not_with_an_apiserver_url() {
        let parsed = cli(&[
            "herald",
            "serve",
            "--config",
            "j",
            "--kubeconfig",
            "k",
            "--context",
            "prod",
        ]);
        let Command::Serve(a) = parsed.command else {
            panic!("serve")
        };
        assert_eq!(a.context.as_deref(), Some("prod"));
        assert!(
            Cli::try_parse_from([
                "herald",
                "serve",
                "--config",
                "j",
                "--apiserver",
                "http://x",
                "--context",
                "c"
            ])
            .is_err()
        );
    }

    #[test]
    fn the_version_names_the_commit_and_the_compiler() {
        assert!(VERSION.starts_with(env!("CARGO_PKG_VERSION")), "{VERSION}");
        assert!(VERSION.contains("(commit "), "{VERSION}");
        assert!(VERSION.contains("rustc "), "{VERSION}");
    }
}
