//! Why `herald simulate` could not run.

use std::path::PathBuf;

/// An error of `herald simulate`, naming the object or the tool at fault.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error("cannot read the cluster: {0}")]
    Audit(#[from] herald_audit::AuditError),
    #[error("service {object}: {reason}")]
    Service { object: String, reason: String },
    #[error("bad input: {0}")]
    Input(String),
    #[error("network namespace {name}: {reason}")]
    Netns { name: String, reason: String },
    #[error("{tool} failed on {what}: {reason}")]
    Tool {
        tool: String,
        what: String,
        reason: String,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot draw plot {plot}: {reason}")]
    Plot { plot: String, reason: String },
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
}
