//! What a rule reports: findings with their severity, objects, evidence, cost and fix.
//! These types are the `--output json` schema (see the crate README); renaming a field is a
//! breaking change of `herald.audit/v1`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::kind::Kind;

/// How bad a finding is. Ordered: `Info < Warning < Critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; costs little today.
    Info,
    /// Costs capacity or hides data; plan a change.
    Warning,
    /// Targets are missing or about to be; fix now.
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// An object a finding is about, or one a fix acts on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ObjectRef {
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> ObjectRef {
        ObjectRef {
            kind: kind.name().to_string(),
            namespace: (kind.namespaced() && !namespace.is_empty()).then(|| namespace.to_string()),
            name: name.to_string(),
        }
    }

    /// An object of a kind the audit does not list (RBAC objects it creates, a Deployment owner).
    pub fn other(kind: &str, namespace: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef {
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The estimated cost of leaving a finding alone: a sentence and the figures behind it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cost {
    pub summary: String,
    /// Named figures (`missing_targets`, `iptables_rules`, `event_bytes_per_second`, ...).
    pub figures: BTreeMap<String, f64>,
}

/// What applying a fix does to one object, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// `kubectl create -f` the manifest of this object in the fix file.
    Create,
    /// `kubectl replace -f` the manifest of this object in the fix file.
    Replace,
    /// `kubectl delete` this object (no manifest).
    Delete,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    pub verb: Verb,
    pub object: ObjectRef,
}

/// How to fix a finding.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Fix {
    pub summary: String,
    /// Human steps, in order (also written as comments into the fix file).
    pub steps: Vec<String>,
    /// Machine-readable actions, in the order they must be applied.
    pub actions: Vec<Action>,
    /// The manifests of the created and replaced objects, in action order.
    pub manifests: Vec<Value>,
    /// The file `--fix DIR` wrote, relative to DIR; absent when the fix has no manifest or no
    /// directory was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable code, `HA001`...
    pub code: &'static str,
    /// Stable slug of the rule.
    pub rule: &'static str,
    pub severity: Severity,
    pub title: String,
    /// The objects at fault, the most specific first.
    pub objects: Vec<ObjectRef>,
    pub evidence: Vec<String>,
    pub cost: Cost,
    pub fix: Fix,
}

/// A rule that could not run because the input lacked kinds it needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotChecked {
    pub code: &'static str,
    pub rule: &'static str,
    pub missing_kinds: Vec<Kind>,
}
