//! `explain`: for one object, every job that reads its kind and what it contributes there — the
//! targets with their final labels and shards, or the first reason it contributes none; for one
//! monitor, what it selects, what it nearly selects and what each of its endpoints serves.
//!
//! Nothing here decides a target's fate by itself: the job's filter (`JobFilter::admission`), the
//! index's groups, the relabel engine (`JobRelabel::apply_or_stop`, the loop serving runs), Istio's
//! placement (`IstioJob::targets`, `IstioJob::decision`) and the shard function (`hashmod`) are the
//! serving code's own, asked to say where a target stopped. Computed on request from the index
//! and the views; nothing is kept afterwards.

pub mod client;
mod monitor;
pub mod render;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use herald_core::istio::{IstioJob, Part, Policies};
use herald_core::monitor::{MonitorJob, RuleNote};
use herald_core::{JobRelabel, LabelSet, RelabelStop, Role, hashmod};
use serde::Serialize;

use crate::state::Shared;
use herald_index::compact::Group;
use herald_index::filter::Refusal;
use herald_index::lookup::Decoded;
use herald_index::{Object, ObjectKey, WatchKind};

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

    fn object_name(&self) -> String {
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
    pub monitor: Option<monitor::MonitorAnswer>,
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

/// Answers `q` from what `shared` serves now.
pub fn explain(shared: &Shared, q: &Query) -> Result<Explanation, ExplainError> {
    let mut counts: BTreeSet<u64> = shared
        .consumers
        .recent()
        .into_iter()
        .filter_map(|c| c.shard.map(|s| s.count))
        .collect();
    counts.extend(q.shards.iter().copied());
    let mut answer = Explanation {
        kind: q.kind.clone(),
        namespace: q.namespace.clone(),
        name: q.name.clone(),
        shard_counts: counts.into_iter().collect(),
        notes: vec![],
        jobs: vec![],
        monitor: None,
    };
    match q.subject {
        Subject::Object(kind) => explain_object(shared, q, kind, &mut answer)?,
        Subject::ServiceMonitor | Subject::PodMonitor => {
            monitor::explain_monitor(shared, q, &mut answer)?;
        }
    }
    Ok(answer)
}

/// The object's parts every job's answer reads, decoded once.
struct Subjected {
    kind: WatchKind,
    key: ObjectKey,
    labels: BTreeMap<String, String>,
    /// A pod's controller (owner) name, to find the truncated Endpoints that would list it.
    controller: Option<String>,
    fields: BTreeMap<String, Option<String>>,
}

fn explain_object(
    shared: &Shared,
    q: &Query,
    kind: WatchKind,
    answer: &mut Explanation,
) -> Result<(), ExplainError> {
    if shared.cache.id_of(kind).is_none() {
        return Err(ExplainError::NotFound(format!(
            "herald holds no {}: no job reads them",
            kind.plural()
        )));
    }
    let key = ObjectKey::new(&q.namespace, &q.name);
    // The object, decoded under the lock; the groups each job holds for it, cloned out.
    let subject = shared.read_index(|index| {
        let cluster = index.cluster();
        cluster.get(kind, &key)?;
        let decoded = Decoded::new(cluster);
        let obj = decoded.object(kind, &key)?;
        let mut fields = BTreeMap::new();
        for spec in index.specs() {
            if let Some(sel) = spec.filter.field_selector(kind) {
                for f in sel.fields() {
                    fields.insert(f.to_string(), obj.field(f));
                }
            }
        }
        let controller = match obj {
            Object::Pod(p) => p
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .map(|o| o.name.clone()),
            _ => None,
        };
        if let Object::Endpoints(e) = obj
            && e.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(TRUNCATED_ANNOTATION))
                .is_some_and(|v| v == "truncated")
        {
            answer.notes.push(format!(
                "this Endpoints object is truncated at 1000 addresses ({TRUNCATED_ANNOTATION}: \
                 truncated): the endpoints roles never see the rest; {TRUNCATED_FIX}"
            ));
        }
        Some(Subjected {
            kind,
            labels: obj.labels().clone(),
            key: key.clone(),
            controller,
            fields,
        })
    });
    let subject =
        subject.ok_or_else(|| ExplainError::NotFound(format!("{} not found", q.object_name())))?;
    let views = shared.monitors.views();
    let policies = shared.istio.current();
    let mut by_base: std::collections::HashMap<usize, Found> = Default::default();
    for (j, h) in shared.jobs().iter().enumerate() {
        if h.source != j || !h.kinds.contains(&kind) {
            continue;
        }
        let how = How {
            relabel: h.relabel.as_deref(),
            istio: h.istio.as_ref().map(|(job, _)| (job, &policies.policies)),
            monitor: None,
        };
        let source = if h.name.starts_with(crate::monitors::BASE_PREFIX) {
            "monitor base"
        } else {
            "job"
        };
        let companion = h.companions.first().map(|c| shared.jobs()[*c].name.clone());
        let found = object_targets(shared, j, h.role, &subject);
        by_base.insert(j, found.clone());
        answer.jobs.extend(job_answers(
            &h.name,
            source,
            h.role,
            companion,
            found,
            &how,
            &answer.shard_counts,
        ));
    }
    for (name, view) in &views.by_name {
        let base = &shared.jobs()[view.base];
        if !base.kinds.contains(&kind) {
            continue;
        }
        let how = How {
            relabel: Some(&view.relabel),
            istio: view.istio.as_ref().map(|job| (job, &policies.policies)),
            monitor: Some(&view.job),
        };
        let found = match outside_monitor(&view.job, &subject) {
            Some(reason) => Err(reason),
            None => by_base
                .entry(view.base)
                .or_insert_with(|| object_targets(shared, view.base, base.role, &subject))
                .clone(),
        };
        answer.jobs.extend(job_answers(
            name,
            "monitor",
            view.job.role,
            view.companion(),
            found,
            &how,
            &answer.shard_counts,
        ));
    }
    Ok(())
}

/// The annotation the Endpoints controller sets on an object it truncated.
const TRUNCATED_ANNOTATION: &str = "endpoints.kubernetes.io/over-capacity";
const TRUNCATED_FIX: &str = "use role endpointslice (a ServiceMonitor's serviceDiscoveryRole: \
                             EndpointSlice), whose slices list every endpoint";

/// What a job does with targets: the serving code's pieces for it.
struct How<'a> {
    relabel: Option<&'a JobRelabel>,
    istio: Option<(&'a IstioJob, &'a Policies)>,
    monitor: Option<&'a MonitorJob>,
}

/// The discovered targets the job holds for the object (each target's full discovered labels,
/// `__address__` included, one list per group: equal targets are served once per group), or why
/// it holds none.
type Found = Result<Vec<Vec<LabelSet>>, Reason>;

/// Whether a monitor job's namespaces (its `namespaceSelector`) leave the object out.
fn outside_monitor(m: &MonitorJob, s: &Subjected) -> Option<Reason> {
    (!m.namespaces.is_empty()
        && s.kind.namespaced()
        && !m.namespaces.iter().any(|n| **n == *s.key.namespace))
    .then(|| Reason::OutsideNamespaces {
        namespace: s.key.namespace.to_string(),
        namespaces: m.namespaces.clone(),
        by: "the monitor's namespaceSelector".into(),
    })
}

/// What index job `j` holds for the object (see `Found`). Monitor jobs read their base job's,
/// so it is computed once per base job for all of them.
fn object_targets(shared: &Shared, j: usize, role: Role, s: &Subjected) -> Found {
    let spec_filter = shared.read_index(|index| index.specs()[j].filter.clone());
    let admission = spec_filter.admission(s.kind, &s.key.namespace, &s.labels, |f| {
        s.fields.get(f).cloned().flatten()
    });
    if let Err(refusal) = admission {
        return Err(match refusal {
            Refusal::Namespace(names) => Reason::OutsideNamespaces {
                namespace: s.key.namespace.to_string(),
                namespaces: names.iter().cloned().collect(),
                by: "the job's namespaces".into(),
            },
            Refusal::Label(sel, req) => Reason::FilteredBySelector {
                selector: sel.to_string(),
                failed: kube_selectors::LabelSelector {
                    requirements: vec![req.clone()],
                }
                .to_string(),
            },
            Refusal::Field(f) => Reason::FilteredBySelector {
                selector: format!("field {f:?}"),
                failed: "the field selector".into(),
            },
        });
    }
    let primary = WatchKind::primary(role);
    let groups: Vec<(ObjectKey, Arc<Group>)> = shared.read_index(|index| {
        if primary == s.kind {
            index
                .group(j, &s.key)
                .map(|g| (s.key.clone(), g))
                .into_iter()
                .collect()
        } else {
            index.groups_reading(j, s.kind, &s.key)
        }
    });
    let mut out = Vec::new();
    let mut labels = LabelSet::new();
    for (_, group) in &groups {
        let mut mine = Vec::new();
        for target in group.iter() {
            group.discovered(target, &mut labels);
            // A pod is one of the targets of the Endpoints (EndpointSlice) groups listing it.
            if s.kind == WatchKind::Pod && primary != WatchKind::Pod {
                let pod = labels.get("__meta_kubernetes_pod_name").map(String::as_str);
                let ns = labels
                    .get("__meta_kubernetes_namespace")
                    .map(String::as_str);
                if pod != Some(&*s.key.name) || ns != Some(&*s.key.namespace) {
                    continue;
                }
            }
            mine.push(labels.clone());
        }
        if !mine.is_empty() {
            out.push(mine);
        }
    }
    if !out.is_empty() {
        return Ok(out);
    }
    if primary == s.kind {
        return Err(Reason::NoTargets {
            why: format!(
                "the {} role gives this object no target (no address or port to scrape yet)",
                role.as_str()
            ),
        });
    }
    if s.kind == WatchKind::Pod
        && primary == WatchKind::Endpoints
        && let Some(endpoints) = truncated_endpoints_of(shared, j, s)
    {
        return Err(Reason::EndpointsTruncated {
            endpoints,
            fix: TRUNCATED_FIX.into(),
        });
    }
    Err(Reason::NoTargets {
        why: format!(
            "no {} object of this job lists it",
            match primary {
                WatchKind::Endpoints => "Endpoints",
                WatchKind::EndpointSlice => "EndpointSlice",
                _ => "other",
            }
        ),
    })
}

/// A truncated Endpoints object in the pod's namespace listing pods of the same controller: the
/// one that would list the pod if it were not truncated.
fn truncated_endpoints_of(shared: &Shared, j: usize, s: &Subjected) -> Option<String> {
    let controller = s.controller.as_deref()?;
    shared.read_index(|index| {
        let cluster = index.cluster();
        let decoded = Decoded::new(cluster);
        let keys: Vec<ObjectKey> = cluster
            .keys(WatchKind::Endpoints)
            .filter(|k| k.namespace == s.key.namespace)
            .cloned()
            .collect();
        keys.into_iter().find_map(|k| {
            let Some(Object::Endpoints(e)) = decoded.object(WatchKind::Endpoints, &k) else {
                return None;
            };
            let truncated = e
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(TRUNCATED_ANNOTATION))
                .is_some_and(|v| v == "truncated");
            if !truncated {
                return None;
            }
            let group = index.group(j, &k)?;
            let mut labels = LabelSet::new();
            let same = group.iter().any(|t| {
                group.discovered(t, &mut labels);
                labels
                    .get("__meta_kubernetes_pod_controller_name")
                    .map(String::as_str)
                    == Some(controller)
            });
            same.then(|| format!("{}/{}", k.namespace, k.name))
        })
    })
}

/// What one job (and its Istio companion) serves of `found`, through the serving code.
fn job_answers(
    job: &str,
    source: &'static str,
    role: Role,
    companion: Option<String>,
    found: Found,
    how: &How<'_>,
    counts: &[u64],
) -> Vec<JobAnswer> {
    let mut own = JobAnswer {
        job: job.to_string(),
        source,
        role: role.as_str(),
        targets: vec![],
        served: 0,
        reason: None,
        dropped: vec![],
    };
    let mut mtls = companion.clone().map(|name| JobAnswer {
        job: name,
        source: "istio-mtls companion",
        role: role.as_str(),
        targets: vec![],
        served: 0,
        reason: None,
        dropped: vec![],
    });
    let groups = match found {
        Ok(groups) => groups,
        Err(reason) => {
            own.reason = Some(reason.clone());
            if let Some(m) = &mut mtls {
                m.reason = Some(reason);
            }
            return std::iter::once(own).chain(mtls).collect();
        }
    };
    let mut moved_by: Option<String> = None;
    let mut first_drop: Option<Reason> = None;
    let mut port_stops: Vec<String> = Vec::new();
    for group in groups {
        let mut served: Vec<(Part, String, LabelSet)> = Vec::new();
        for discovered in group {
            let mut placed = Vec::new();
            let stop = place(discovered.clone(), how, &mut placed);
            for (part, address, labels) in placed {
                if part == Part::Mtls
                    && moved_by.is_none()
                    && let Some(d) = IstioJob::decision(
                        &address,
                        &discovered,
                        how.istio.map_or(&EMPTY, |(_, p)| p),
                    )
                {
                    moved_by = d.by.or(Some("(default)".into()));
                }
                served.push((part, address, labels));
            }
            if let Some((stop, seen)) = stop {
                let address = discovered
                    .get(herald_core::labels::ADDRESS)
                    .cloned()
                    .unwrap_or_default();
                let reason = classify(stop, &seen, how);
                if let Reason::PortMatchesNothing { .. } = reason
                    && let Some(port) = how
                        .monitor
                        .and_then(|m| m.port_rule.as_ref())
                        .and_then(|p| how.relabel?.rules().get(p.rule))
                        .and_then(|r| r.source_labels().first())
                        .and_then(|l| seen.get(l))
                {
                    port_stops.push(port.clone());
                }
                if first_drop.is_none() {
                    first_drop = Some(reason.clone());
                }
                if own.dropped.len() < MAX_LISTED {
                    own.dropped.push(DroppedTarget { address, reason });
                }
            }
        }
        // Equal targets of one group are served once, in a stable order (`snapshot::place_group`).
        // Without relabeling, the body writes every discovered target as it is.
        if how.relabel.is_some() {
            served.sort_unstable();
            served.dedup();
        }
        for (part, address, labels) in served {
            let shards = counts.iter().map(|n| (*n, hashmod(&address, *n))).collect();
            let t = TargetAnswer {
                address,
                labels,
                shards,
            };
            let into = match (part, &mut mtls) {
                (Part::Mtls, Some(m)) => m,
                _ => &mut own,
            };
            into.served += 1;
            if into.targets.len() < MAX_LISTED {
                into.targets.push(t);
            }
        }
    }
    port_stops.sort();
    port_stops.dedup();
    if let Some(Reason::PortMatchesNothing { ports, .. }) = &mut first_drop {
        *ports = port_stops;
    }
    if own.served == 0 {
        own.reason = match (&moved_by, &mtls) {
            (Some(by), Some(m)) if m.served > 0 => Some(Reason::MovedToIstioMtls {
                companion: m.job.clone(),
                by: by.clone(),
            }),
            _ => first_drop.clone(),
        };
    }
    if let Some(m) = &mut mtls
        && m.served == 0
    {
        m.reason = first_drop.or(Some(Reason::NoTargets {
            why: "no target of it is under STRICT mTLS".into(),
        }));
    }
    std::iter::once(own).chain(mtls).collect()
}

static EMPTY: std::sync::LazyLock<Policies> = std::sync::LazyLock::new(Policies::default);

/// One discovered target through the job's relabeling and placement, as serving builds bodies
/// (`snapshot.rs`): what it serves pushed to `out`; where it stopped and what the stopping rule
/// saw when it serves nothing.
fn place(
    mut labels: LabelSet,
    how: &How<'_>,
    out: &mut Vec<(Part, String, LabelSet)>,
) -> Option<(RelabelStop, LabelSet)> {
    match (how.relabel, how.istio) {
        (Some(relabel), Some((job, policies))) => {
            job.targets(labels.clone(), relabel, policies, out);
            if !out.is_empty() {
                return None;
            }
            labels.remove(herald_core::istio::APP_ANNOTATIONS_LABEL);
            match relabel.apply_or_stop(&mut labels) {
                Ok(_) => None,
                Err(stop) => Some((stop, labels)),
            }
        }
        (Some(relabel), None) => match relabel.apply_or_stop(&mut labels) {
            Ok(address) => {
                out.push((Part::Plain, address, labels));
                None
            }
            Err(stop) => Some((stop, labels)),
        },
        (None, _) => {
            let address = labels
                .remove(herald_core::labels::ADDRESS)
                .unwrap_or_default();
            out.push((Part::Plain, address, labels));
            None
        }
    }
}

/// The reason a relabeling stop stands for: a monitor's selector requirement, port or running
/// filter where the rule is one of those, else the rule itself.
fn classify(stop: RelabelStop, seen: &LabelSet, how: &How<'_>) -> Reason {
    let RelabelStop::Rule(i) = stop else {
        return Reason::NoAddress;
    };
    let Some(relabel) = how.relabel else {
        return Reason::NoAddress;
    };
    if let Some(m) = how.monitor {
        if let Some(p) = m.port_rule.as_ref().filter(|p| p.rule == i) {
            return Reason::PortMatchesNothing {
                field: p.field.clone(),
                port: p.port.clone(),
                rule: i,
                ports: vec![],
            };
        }
        if let Some((_, note)) = m.rule_notes.iter().find(|(r, _)| *r == i) {
            return match note {
                RuleNote::RunningFilter => Reason::NotRunning {
                    phase: seen
                        .get("__meta_kubernetes_pod_phase")
                        .cloned()
                        .unwrap_or_default(),
                    rule: i,
                },
                RuleNote::Selector {
                    field,
                    object,
                    requirement,
                } => {
                    let prefix = format!("__meta_kubernetes_{object}_label_");
                    Reason::MonitorSelector {
                        field: field.clone(),
                        requirement: requirement.clone(),
                        rule: i,
                        labels: seen
                            .iter()
                            .filter(|(k, _)| k.starts_with(&prefix))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                    }
                }
            };
        }
    }
    let rule = &relabel.rules()[i];
    let mut saw = LabelSet::new();
    for l in rule.source_labels() {
        saw.insert(l.clone(), seen.get(l).cloned().unwrap_or_default());
    }
    if !rule.target_label.is_empty() {
        let t = &rule.target_label;
        saw.insert(t.clone(), seen.get(t).cloned().unwrap_or_default());
    }
    Reason::DroppedByRule {
        rule: i,
        text: rule_text(rule),
        saw,
    }
}

/// A rule as one line of YAML flow (JSON is YAML).
pub fn rule_text(rule: &herald_core::relabel::RelabelConfig) -> String {
    serde_json::to_string(&rule.to_yaml()).unwrap_or_else(|_| format!("{rule:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Result<Query, ExplainError> {
        Query::parse(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn param(r: Result<Query, ExplainError>) -> &'static str {
        match r {
            Err(ExplainError::BadParam { param, .. }) => param,
            other => panic!("a bad parameter, not {other:?}"),
        }
    }

    #[test]
    fn a_query_names_the_parameter_it_cannot_take() {
        assert_eq!(param(q(&[("namespace", "a"), ("name", "b")])), "kind");
        assert_eq!(
            param(q(&[
                ("kind", "Deployment"),
                ("namespace", "a"),
                ("name", "b")
            ])),
            "kind"
        );
        assert_eq!(param(q(&[("kind", "Pod"), ("name", "b")])), "namespace");
        assert_eq!(
            param(q(&[("kind", "Node"), ("namespace", "a"), ("name", "b")])),
            "namespace"
        );
        assert_eq!(param(q(&[("kind", "Pod"), ("namespace", "a")])), "name");
        for bad in ["0", "x", "2,", "1025"] {
            let r = q(&[
                ("kind", "Pod"),
                ("namespace", "a"),
                ("name", "b"),
                ("shards", bad),
            ]);
            assert_eq!(param(r), "shards", "{bad}");
        }
        assert_eq!(
            param(q(&[("kind", "Pod"), ("name", "b"), ("x", "1")])),
            "query"
        );
        let ok = q(&[("kind", "Node"), ("name", "n1"), ("shards", "2,4")]).expect("valid");
        assert_eq!(
            (ok.subject, ok.shards),
            (Subject::Object(WatchKind::Node), vec![2, 4])
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]
        /// Any query parses or is refused naming a parameter; never a panic.
        #[test]
        fn any_query_parses_or_names_a_parameter(
            params in proptest::collection::btree_map(
                "(kind|namespace|name|shards|[a-z]{0,3})",
                "(Pod|Node|ServiceMonitor|[ -~]{0,12}|[0-9,]{0,8})",
                0..5,
            )
        ) {
            match Query::parse(&params) {
                Ok(q) => proptest::prop_assert!(!q.name.is_empty()),
                Err(ExplainError::BadParam { param, message }) => {
                    proptest::prop_assert!(!message.is_empty(), "{param}");
                }
                Err(other) => proptest::prop_assert!(false, "{other}"),
            }
        }
    }

    #[test]
    fn a_reason_reads_back_from_its_json_as_the_table_shows_it() {
        let r = Reason::DroppedByRule {
            rule: 2,
            text: "{\"action\":\"drop\"}".into(),
            saw: [("a".to_string(), "1".to_string())].into(),
        };
        let v = serde_json::to_value(&r).expect("json");
        assert_eq!(v["reason"], "dropped_by_rule");
        assert_eq!(render::reason_line(&v), r.summary());
        assert!(r.summary().contains("rule 2"), "{}", r.summary());
    }
}
