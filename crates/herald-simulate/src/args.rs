//! `herald simulate`'s command-line arguments.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// What kube-proxy costs every node for this cluster's Services, and its watchers the apiserver.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// Read a live cluster (read-only) through this kubeconfig.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["from", "services"])]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current one).
    #[arg(long, requires = "kubeconfig")]
    pub context: Option<String>,
    /// Read dumps: `kubectl get -o json` / `-o yaml` files, or directories of them.
    #[arg(long, value_name = "FILE_OR_DIR", num_args = 1.., conflicts_with = "services")]
    pub from: Vec<PathBuf>,
    /// Generate a cluster of this many Services instead.
    #[arg(long, value_name = "N")]
    pub services: Option<usize>,
    /// Endpoints of each generated Service.
    #[arg(long, value_name = "M", default_value_t = 5)]
    pub endpoints_per_service: usize,
    /// Nodes of the generated cluster.
    #[arg(long, default_value_t = 100)]
    pub nodes: usize,
    /// Make every Nth generated Service a NodePort (0: none).
    #[arg(long, default_value_t = 10)]
    pub nodeport_every: usize,
    /// The node whose rules are generated (local endpoints); default: the first node.
    #[arg(long)]
    pub node: Option<String>,
    /// The pod CIDR (kube-proxy's --cluster-cidr, for its local-traffic rules).
    #[arg(long, default_value = crate::synth::POD_CIDR)]
    pub cluster_cidr: String,
    /// The cluster's ServiceCIDRs (kube-apiserver's --service-cluster-ip-range, mirrored in the
    /// default ServiceCIDR object), for kube-proxy's rule dropping traffic to unallocated
    /// cluster IPs; default: none known.
    #[arg(long, value_delimiter = ',')]
    pub service_cidr: Vec<String>,
    /// Time real syncs in a throwaway network namespace (root, Linux); without it, or without
    /// root, times are modelled from recorded measurements.
    #[arg(long)]
    pub measure: bool,
    /// Sizes around the cluster's, as factors of its Service count.
    #[arg(long, value_delimiter = ',', default_values_t = vec![0.25, 0.5, 1.0, 2.0, 4.0])]
    pub factors: Vec<f64>,
    /// Timed runs per figure (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Stop measuring a proxy mode at larger sizes once one full sync took longer than this
    /// (seconds); those sizes are modelled.
    #[arg(long, default_value_t = 20.0)]
    pub slow_after: f64,
    /// Measure only what the model says fits in this many seconds in all; the rest is modelled.
    #[arg(long, default_value_t = 100.0)]
    pub budget: f64,
    /// Pod changes per second for the watch fan-out.
    #[arg(long, default_value_t = herald_audit::rules::DEFAULT_CHURN_PER_SECOND)]
    pub churn_per_second: f64,
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Write a self-contained HTML report with plots here.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Write the generated rulesets at the cluster's size into this directory
    /// (iptables.rules, iptables-partial.rules, nftables.nft, nftables-change.nft).
    #[arg(long, value_name = "DIR")]
    pub write_rules: Option<PathBuf>,
}
