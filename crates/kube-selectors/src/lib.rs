//! Kubernetes label and field selectors: parsing and matching, with the grammar and semantics of
//! k8s.io/apimachinery `pkg/labels/selector.go` and `pkg/fields/selector.go`. Used by kube-sim to serve
//! `labelSelector`/`fieldSelector`, and by herald to filter one shared upstream watch per job.

mod field;
mod label;

pub use field::{FieldRequirement, FieldSelector};
pub use label::{LabelSelector, LabelSet, Operator, Requirement};

/// A selector that does not parse. Messages name the offending part, as the apiserver's do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("unable to parse requirement: {0}")]
    Requirement(String),
    #[error("invalid label key {key:?}: {why}")]
    InvalidKey { key: String, why: &'static str },
    #[error("invalid label value {value:?} for key {key:?}: {why}")]
    InvalidValue {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("invalid field selector {0:?}: expected field=value, field==value or field!=value")]
    Field(String),
}
