//! The `herald audit` command line.

use std::path::PathBuf;

use crate::finding::Severity;
use crate::rules::DEFAULT_CHURN_PER_SECOND;

/// `herald audit (--kubeconfig PATH | --from FILE...) [--output table|json] [--fix DIR]
/// [--fail-on info|warning|critical]`.
#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// Audit a live cluster, read-only, through this kubeconfig.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with = "from",
        required_unless_present = "from"
    )]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME", requires = "kubeconfig")]
    pub context: Option<String>,
    /// Audit dumps: JSON or YAML files (a v1 List as `kubectl get <kinds> -A -o json` writes it,
    /// single objects, multi-document YAML) or directories of them.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub from: Vec<PathBuf>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Write one YAML file per fix into this directory.
    #[arg(long, value_name = "DIR")]
    pub fix: Option<PathBuf>,
    /// Exit 1 when a finding is at least this severe. Default critical: warnings and infos are
    /// advice, a critical finding means targets are missing now.
    #[arg(long, value_enum, default_value_t = Severity::Critical)]
    pub fail_on: Severity,
    /// Pod changes per second assumed by the watch fan-out estimate (HA010).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CHURN_PER_SECOND)]
    pub churn_per_second: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

impl AuditArgs {
    /// Arguments for auditing dumps, with every other option at its default.
    pub fn from_files(paths: Vec<PathBuf>) -> AuditArgs {
        AuditArgs {
            kubeconfig: None,
            context: None,
            from: paths,
            output: OutputFormat::Table,
            fix: None,
            fail_on: Severity::Critical,
            churn_per_second: DEFAULT_CHURN_PER_SECOND,
        }
    }

    /// Arguments for auditing a live cluster, with every other option at its default.
    pub fn from_kubeconfig(path: PathBuf) -> AuditArgs {
        AuditArgs {
            kubeconfig: Some(path),
            from: Vec::new(),
            ..AuditArgs::from_files(Vec::new())
        }
    }
}
