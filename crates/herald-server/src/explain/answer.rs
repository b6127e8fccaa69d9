//! What `explain` is asked and what it answers: the question (`Query`, `Subject`), the answer
//! (`Explanation`, one `JobAnswer` per job) and why a target is not served (`Reason`).

use std::collections::BTreeMap;

use herald_core::LabelSet;
use serde::Serialize;

use herald_index::WatchKind;

/// Targets and dropped targets listed per job at most (the counts say how many there were).
pub const MAX_LISTED: usize = 100;

/// A request herald cannot answer.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// A query parameter is missing or malformed.
    #[error("{param}: {message}")]
    BadParam {
        param: &'static str,
        message: String,
    },
    /// The object, kind or monitor is not there.
    #[error("{0}")]
    NotFound(String),
}

/// What is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Object(WatchKind),
    ServiceMonitor,
    PodMonitor,
}

/// Kinds `explain` answers for, as the `kind` parameter names them.
pub const KINDS: [&str; 8] = [
    "Pod",
    "Service",
    "Endpoints",
    "EndpointSlice",
    "Node",
    "Ingress",
    "ServiceMonitor",
    "PodMonitor",
];

impl Subject {
    fn parse(kind: &str) -> Option<Subject> {
        Some(match kind {
            "Pod" => Subject::Object(WatchKind::Pod),
            "Service" => Subject::Object(WatchKind::Service),
            "Endpoints" => Subject::Object(WatchKind::Endpoints),
            "EndpointSlice" => Subject::Object(WatchKind::EndpointSlice),
            "Node" => Subject::Object(WatchKind::Node),
            "Ingress" => Subject::Object(WatchKind::Ingress),
            "ServiceMonitor" => Subject::ServiceMonitor,
            "PodMonitor" => Subject::PodMonitor,
            _ => return None,
        })
    }

    fn namespaced(self) -> bool {
        match self {
            Subject::Object(k) => k.namespaced(),
            _ => true,
        }
    }
}

/// A parsed `GET /explain` query.
#[derive(Debug, Clone)]
pub struct Query {
    pub kind: String,
    pub subject: Subject,
    pub namespace: String,
    pub name: String,
    /// Shard counts asked for besides those consumers use.
    pub shards: Vec<u64>,
}

impl Query {
    /// `kind`, `namespace` (not for Node), `name`, and optionally `shards` (comma-separated counts).
    pub fn parse(params: &BTreeMap<String, String>) -> Result<Query, ExplainError> {
        let bad = |param, message: String| ExplainError::BadParam { param, message };
        for key in params.keys() {
            if !matches!(key.as_str(), "kind" | "namespace" | "name" | "shards") {
                return Err(bad(
                    "query",
                    format!("unknown parameter {key:?} (kind, namespace, name, shards)"),
                ));
            }
        }
        let kind = params
            .get("kind")
            .filter(|k| !k.is_empty())
            .ok_or_else(|| bad("kind", format!("missing: one of {}", KINDS.join(", "))))?;
        let subject = Subject::parse(kind).ok_or_else(|| {
            bad(
                "kind",
                format!("{kind:?} is not one of {}", KINDS.join(", ")),
            )
        })?;
        let name = params
            .get("name")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad("name", "missing".into()))?
            .clone();
        let namespace = params.get("namespace").cloned().unwrap_or_default();
        match (subject.namespaced(), namespace.is_empty()) {
            (true, true) => {
                return Err(bad("namespace", format!("missing: a {kind} is namespaced")));
            }
            (false, false) => {
                return Err(bad(
                    "namespace",
                    format!("a {kind} is cluster-scoped: leave namespace out"),
                ));
            }
            _ => {}
        }
        let mut shards = Vec::new();
        if let Some(list) = params.get("shards").filter(|s| !s.is_empty()) {
            for part in list.split(',') {
                match part.trim().parse::<u64>() {
                    Ok(n) if (1..=1024).contains(&n) => shards.push(n),
                    _ => {
                        return Err(bad(
                            "shards",
                            format!("{part:?} is not a shard count from 1 to 1024"),
                        ));
                    }
                }
            }
        }
        Ok(Query {
            kind: kind.clone(),
            subject,
            namespace,
            name,
            shards,
        })
    }

    pub(crate) fn object_name(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// The answer.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    /// Shard counts each target's shard is given for: those consumers asked for recently, and
    /// those the query asked for.
    pub shard_counts: Vec<u64>,
    /// What holds for the object whatever the job (an Endpoints object truncated at 1000).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Every job reading the object's kind (for a monitor: its jobs).
    pub jobs: Vec<JobAnswer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monitor: Option<MonitorAnswer>,
}

/// One job's answer for the object.
#[derive(Debug, Clone, Serialize)]
pub struct JobAnswer {
    pub job: String,
    /// `job`, `monitor`, `istio-mtls companion` or `monitor base`.
    pub source: &'static str,
    pub role: &'static str,
    /// Targets it serves for the object (at most `MAX_LISTED`; `served` counts them all).
    pub targets: Vec<TargetAnswer>,
    pub served: usize,
    /// Why it serves none, when it serves none: the first reason met.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// Targets of the object it does not serve, each with why (at most `MAX_LISTED`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedTarget>,
}

/// A served target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetAnswer {
    pub address: String,
    pub labels: LabelSet,
    /// Its shard index for each of `Explanation::shard_counts`, as `{count: index}`.
    pub shards: BTreeMap<u64, u64>,
}

/// A target discovered for the object and not served, and why.
#[derive(Debug, Clone, Serialize)]
pub struct DroppedTarget {
    pub address: String,
    pub reason: Reason,
}

/// Why a job serves nothing for an object (or drops one of its targets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// The object's namespace is not one the job reads (`namespaces:`, or a monitor's
    /// `namespaceSelector`).
    OutsideNamespaces {
        namespace: String,
        namespaces: Vec<String>,
        by: String,
    },
    /// The job's `selectors:` entry for the kind refuses it.
    FilteredBySelector {
        selector: String,
        /// The first requirement it fails.
        failed: String,
    },
    /// A relabel rule dropped the target.
    DroppedByRule {
        rule: usize,
        text: String,
        /// The values of the rule's source labels (and target label) it saw.
        saw: LabelSet,
    },
    /// A monitor's selector requirement does not hold for the object's labels.
    MonitorSelector {
        field: String,
        requirement: String,
        rule: usize,
        /// The labels of the object the requirement reads, as discovery names them.
        labels: LabelSet,
    },
    /// The monitor endpoint's port matches no port of the object.
    PortMatchesNothing {
        field: String,
        port: String,
        rule: usize,
        /// The ports the object has.
        ports: Vec<String>,
    },
    /// The pod is not Running, and the monitor filters on it (`filterRunning`).
    NotRunning { phase: String, rule: usize },
    /// Every target moved to the job's `/istio-mtls` companion under STRICT mTLS.
    MovedToIstioMtls { companion: String, by: String },
    /// Relabeling left the target without an `__address__`.
    NoAddress,
    /// The Endpoints object is truncated at 1000 addresses, so this pod is not listed.
    EndpointsTruncated { endpoints: String, fix: String },
    /// The job reads the object but no group of it holds a target for it.
    NoTargets { why: String },
}

impl Reason {
    /// One line for a table.
    pub fn summary(&self) -> String {
        match self {
            Reason::OutsideNamespaces {
                namespace,
                namespaces,
                by,
            } => format!(
                "namespace {namespace:?} is not among {by} ({})",
                namespaces.join(", ")
            ),
            Reason::FilteredBySelector { selector, failed } => {
                format!("filtered by the job's selector {selector:?}: fails {failed:?}")
            }
            Reason::DroppedByRule { rule, text, saw } => {
                format!("dropped by relabel rule {rule} {text} (saw {})", show(saw))
            }
            Reason::MonitorSelector {
                field,
                requirement,
                labels,
                ..
            } => format!(
                "{field} requirement {requirement:?} does not match the labels {}",
                show(labels)
            ),
            Reason::PortMatchesNothing {
                field, port, ports, ..
            } => format!(
                "{field} {port:?} matches no port (the object has {})",
                if ports.is_empty() {
                    "none".to_string()
                } else {
                    ports.join(", ")
                }
            ),
            Reason::NotRunning { phase, .. } => {
                format!("pod phase {phase:?} is not Running (filterRunning)")
            }
            Reason::MovedToIstioMtls { companion, by } => {
                format!("moved to {companion} by STRICT mTLS of PeerAuthentication {by}")
            }
            Reason::NoAddress => "relabeling left no __address__".to_string(),
            Reason::EndpointsTruncated { endpoints, fix } => {
                format!("Endpoints {endpoints} is truncated at 1000 addresses: {fix}")
            }
            Reason::NoTargets { why } => why.clone(),
        }
    }
}

fn show(labels: &LabelSet) -> String {
    let parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", parts.join(", "))
}

/// A rule as one line of YAML flow (JSON is YAML).
pub fn rule_text(rule: &herald_core::relabel::RelabelConfig) -> String {
    serde_json::to_string(&rule.to_yaml()).unwrap_or_else(|_| format!("{rule:?}"))
}

/// What a monitor gives.
#[derive(Debug, Clone, Serialize)]
pub struct MonitorAnswer {
    /// Objects its selectors pick (`namespace/name`), over all its jobs.
    pub selected: Vec<String>,
    /// Per endpoint (one job each): its port and the targets it serves.
    pub endpoints: Vec<EndpointAnswer>,
    /// Objects that fail exactly one requirement of its selector.
    pub nearly: Vec<NearMiss>,
    /// What herald cannot express of it (`unsupported`), and what it warned about.
    pub unsupported: Vec<String>,
    pub warnings: Vec<String>,
    /// Why it is not served, if it is not.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EndpointAnswer {
    pub job: String,
    /// The endpoint's port (name or number), if it names one.
    pub port: Option<String>,
    pub targets: usize,
    /// Targets in the `/istio-mtls` companion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtls_targets: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NearMiss {
    pub object: String,
    pub requirement: String,
    /// The labels the requirement reads, as discovery names them.
    pub labels: LabelSet,
}
