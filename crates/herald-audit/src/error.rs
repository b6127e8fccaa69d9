//! The audit's error type: every variant names the file, object or field at fault.

use std::path::PathBuf;

/// Everything that stops an audit (the binary maps it to exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("no input: pass --kubeconfig PATH or --from FILE")]
    NoInput,
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: document {document} is not valid {format}: {message}")]
    Parse {
        path: PathBuf,
        document: usize,
        format: &'static str,
        message: String,
    },
    #[error("{path}: {object}: {reason}")]
    Malformed {
        path: PathBuf,
        /// `Kind namespace/name`, or `item N` when the object has no usable identity.
        object: String,
        reason: String,
    },
    #[error("cannot load kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("cannot list {kind} from the cluster: {message}")]
    List { kind: &'static str, message: String },
    #[error("live object {object} cannot be decoded: {reason}")]
    LiveObject { object: String, reason: String },
    #[error("cannot write fix {path}: {source}")]
    WriteFix {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode fix manifest {object}: {message}")]
    EncodeFix { object: String, message: String },
    #[error("--rule {given}: no such rule; the rules are {known}")]
    UnknownRule { given: String, known: String },
    #[error("cannot write the fix index {path}: {message}")]
    WriteIndex { path: PathBuf, message: String },
    #[error("cannot write the report: {0}")]
    Output(#[source] std::io::Error),
}
