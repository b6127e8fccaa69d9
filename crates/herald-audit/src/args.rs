//! The `herald audit` command line.

use std::path::PathBuf;

use crate::finding::Severity;
use crate::rules::DEFAULT_CHURN_PER_SECOND;

/// `herald audit (--kubeconfig PATH | --from FILE...) [--output table|json] [--fix DIR]
/// [--rule CODE]... [--namespace NAME]... [--all] [--fail-on info|warning|critical]`.
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
    /// Write the fixes into this directory: one YAML file per rule and namespace, and an index
    /// (README.md, index.json) saying what each file does and in which order to apply them.
    #[arg(long, value_name = "DIR")]
    pub fix: Option<PathBuf>,
    /// Only the findings of this rule (code such as HA004, or slug), printed in full. Repeatable.
    #[arg(long = "rule", value_name = "CODE")]
    pub rules: Vec<String>,
    /// Only the findings about objects in this namespace, printed in full. Repeatable.
    #[arg(long = "namespace", value_name = "NAME")]
    pub namespaces: Vec<String>,
    /// Print every finding in full rather than one block per rule.
    #[arg(long)]
    pub all: bool,
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
            rules: Vec::new(),
            namespaces: Vec::new(),
            all: false,
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

impl AuditArgs {
    /// The command line that reads the same input, for the table's "see the rest" hints.
    pub fn input_command(&self) -> String {
        let quote = |p: &std::path::Path| {
            let s = p.display().to_string();
            if s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
            {
                s
            } else {
                format!("'{}'", s.replace('\'', "'\\''"))
            }
        };
        let mut cmd = String::from("herald audit");
        if let Some(kc) = &self.kubeconfig {
            cmd.push_str(&format!(" --kubeconfig {}", quote(kc)));
            if let Some(ctx) = &self.context {
                cmd.push_str(&format!(" --context {ctx}"));
            }
        } else {
            cmd.push_str(" --from");
            for p in &self.from {
                cmd.push(' ');
                cmd.push_str(&quote(p));
            }
        }
        cmd
    }
}
