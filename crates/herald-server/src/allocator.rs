//! The OpenTelemetry target allocator's API served from herald's own snapshots: which collector
//! scrapes which target, per job, cut from the same HTTP SD body `/sd/v1/{job}` serves and cached
//! until that body's ETag or the collectors change. `api` holds the routes.
//!
//! The contract is open-telemetry/opentelemetry-operator `cmd/otel-allocator` at commit
//! be8944414a876f17fcdeb5a59b86b8866fb5c88e (`internal/server/server.go`: routes and JSON shapes;
//! `internal/allocation/`: strategies; `internal/collector/collector.go`: membership from pods), as
//! the collector's client reads it (open-telemetry/opentelemetry-collector-contrib
//! `receiver/prometheusreceiver/internal/targetallocator/manager.go`, v0.165.1). Where herald differs
//! it says so with `NB:`.
//!
//! The state is its own type, reading herald through a narrow handle (`TargetSource`): the job names
//! and each job's current encoded body (herald's is `catalog::Source`, which also gives
//! `Allocator::over`). Nothing here is a field of `Shared`.

pub mod api;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use herald_core::allocation::{Collector, Placement, node_of};
use herald_core::config::target_allocator::{COLLECTORS_JOB, Collectors, TargetAllocatorConfig};
use serde_json::value::RawValue;

use herald_index::encoded::Encoded;

/// What the allocator reads from herald.
pub trait TargetSource: Send + Sync + 'static {
    /// The jobs offered to collectors, in a stable order.
    fn job_names(&self) -> Vec<String>;
    /// The job's whole current HTTP SD body (`/sd/v1/{job}` without a shard).
    fn body(&self, job: &str) -> Result<Arc<Encoded>, SourceError>;
    /// The job's entry in `/scrape_configs`: a Prometheus scrape config as JSON.
    fn scrape_config(&self, job: &str) -> Option<serde_json::Value>;
}

/// Why a job's body is not available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("unknown job {0:?} (the jobs are listed at /jobs)")]
    UnknownJob(String),
    #[error("job {0:?} has not completed its first sync with the apiserver yet")]
    NotSynced(String),
}

/// Why targets cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum AllocatorError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("the job in the path is not query-escaped: {0}")]
    BadJobName(String),
    #[error("collector_id {0:?} is not a collector id: {1}")]
    BadCollectorId(String, String),
    #[error("the body of job {job:?} is not HTTP SD JSON: {error}")]
    Body { job: String, error: String },
}

/// One job's targets cut per collector, for one body (by ETag) and one membership.
#[derive(Debug)]
pub struct Assignment {
    etag: String,
    membership: u64,
    /// Per collector (the placement's order): the JSON array `?collector_id=` answers.
    pub bodies: Vec<Bytes>,
    /// Per collector: how many targets it holds.
    pub counts: Vec<usize>,
    /// Targets no collector may take (per-node without a collector on their node, or no
    /// collectors at all).
    pub unassigned: usize,
    /// The collectors the bodies are for.
    pub placement: Arc<Placement>,
}

impl Assignment {
    /// The body for collector `name`, or `None` when it is not a member.
    pub fn body_for(&self, name: &str) -> Option<&Bytes> {
        self.placement.index_of(name).map(|i| &self.bodies[i])
    }
}

/// The membership at some version: the version changes whenever the collectors do.
#[derive(Debug, Clone)]
struct Membership {
    version: u64,
    placement: Arc<Placement>,
    /// For pods: the ETag of the collectors job's body it was read from.
    etag: Option<String>,
}

/// The target allocator's state.
pub struct Allocator {
    config: TargetAllocatorConfig,
    source: Arc<dyn TargetSource>,
    membership: Mutex<Membership>,
    assignments: Mutex<HashMap<String, Arc<Assignment>>>,
}

impl std::fmt::Debug for Allocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Allocator {
    pub fn new(config: TargetAllocatorConfig, source: Arc<dyn TargetSource>) -> Allocator {
        let initial = match &config.collectors {
            Collectors::Static(list) => list.clone(),
            Collectors::Pods { .. } => vec![],
        };
        let placement = Arc::new(Placement::new(initial, config.strategy, config.fallback));
        Allocator {
            config,
            source,
            membership: Mutex::new(Membership {
                version: 0,
                placement,
                etag: None,
            }),
            assignments: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &TargetAllocatorConfig {
        &self.config
    }

    pub fn source(&self) -> &Arc<dyn TargetSource> {
        &self.source
    }

    /// The jobs offered to collectors (never the collectors job itself).
    pub fn job_names(&self) -> Vec<String> {
        self.source
            .job_names()
            .into_iter()
            .filter(|j| !self.is_collectors_job(j))
            .collect()
    }

    fn is_collectors_job(&self, job: &str) -> bool {
        matches!(self.config.collectors, Collectors::Pods { .. }) && job == COLLECTORS_JOB
    }

    /// The current collectors: the configured list, or the selected pods as the collectors job
    /// shows them now (re-read only when its body's ETag moved).
    pub fn membership(&self) -> Result<(u64, Arc<Placement>), AllocatorError> {
        if let Collectors::Static(_) = self.config.collectors {
            let m = self.membership.lock().expect("membership lock");
            return Ok((m.version, m.placement.clone()));
        }
        let body = self.source.body(COLLECTORS_JOB)?;
        {
            let m = self.membership.lock().expect("membership lock");
            if m.etag.as_deref() == Some(body.etag.as_str()) {
                return Ok((m.version, m.placement.clone()));
            }
        }
        let collectors =
            collectors_from_pods(&body.identity()).map_err(|error| AllocatorError::Body {
                job: COLLECTORS_JOB.into(),
                error,
            })?;
        let mut m = self.membership.lock().expect("membership lock");
        if m.etag.as_deref() != Some(body.etag.as_str()) {
            if m.placement.collectors() != collectors.as_slice() {
                m.version += 1;
                m.placement = Arc::new(Placement::new(
                    collectors,
                    self.config.strategy,
                    self.config.fallback,
                ));
            }
            m.etag = Some(body.etag.clone());
        }
        Ok((m.version, m.placement.clone()))
    }

    /// `job`'s targets cut per collector, from its current body and the current collectors: cached
    /// until either changes, so a request costs a lookup and the cut is made once per generation.
    pub fn assignment(&self, job: &str) -> Result<Arc<Assignment>, AllocatorError> {
        if self.is_collectors_job(job) {
            return Err(SourceError::UnknownJob(job.into()).into());
        }
        let (membership, placement) = self.membership()?;
        let body = self.source.body(job)?;
        if let Some(a) = self.assignments.lock().expect("assignments lock").get(job)
            && a.etag == body.etag
            && a.membership == membership
        {
            return Ok(a.clone());
        }
        // NB: built outside the lock; two requests racing on a new generation both build it, and
        // the later insert wins with the same content.
        let assignment = Arc::new(
            assign(&body.identity(), &placement, body.etag.clone(), membership).map_err(
                |error| AllocatorError::Body {
                    job: job.into(),
                    error,
                },
            )?,
        );
        let mut cache = self.assignments.lock().expect("assignments lock");
        // Jobs that went away (monitors deleted) leave with the next cut.
        let live: Vec<String> = self.source.job_names();
        cache.retain(|k, _| live.contains(k));
        cache.insert(job.to_string(), assignment.clone());
        Ok(assignment)
    }
}

/// One entry of an HTTP SD body, its labels kept as they were encoded.
#[derive(serde::Deserialize)]
struct Entry<'a> {
    targets: Vec<String>,
    #[serde(borrow)]
    labels: &'a RawValue,
}

/// Cuts an HTTP SD body per collector. Each entry's targets are split by collector; a collector's
/// share of an entry keeps the entry's labels byte for byte.
///
/// NB: the allocator answers one `{"targets": [address], "labels": ...}` per target; herald keeps
/// the targets of one entry (same labels) together, which Prometheus's http_sd reads the same way.
fn assign(
    body: &[u8],
    placement: &Arc<Placement>,
    etag: String,
    membership: u64,
) -> Result<Assignment, String> {
    let entries: Vec<Entry<'_>> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let n = placement.collectors().len();
    let mut out: Vec<Vec<u8>> = vec![b"[".to_vec(); n];
    let mut counts = vec![0usize; n];
    let mut unassigned = 0;
    // Per entry: which targets each collector takes (reused buffers).
    let mut picked: Vec<Vec<&str>> = vec![Vec::new(); n];
    let reads_nodes = placement.strategy() == herald_core::allocation::Strategy::PerNode;
    for entry in &entries {
        let labels: Option<HashMap<&str, &str>> = if reads_nodes {
            Some(serde_json::from_str(entry.labels.get()).map_err(|e| e.to_string())?)
        } else {
            None
        };
        let node = labels.as_ref().and_then(|l| node_of(|k| l.get(k).copied()));
        for p in picked.iter_mut() {
            p.clear();
        }
        for t in &entry.targets {
            match placement.place(t, node) {
                Some(i) => picked[i].push(t),
                None => unassigned += 1,
            }
        }
        for (i, targets) in picked.iter().enumerate() {
            if targets.is_empty() {
                continue;
            }
            let buf = &mut out[i];
            if buf.len() > 1 {
                buf.push(b',');
            }
            buf.extend_from_slice(b"{\"targets\":");
            serde_json::to_writer(&mut *buf, targets).expect("strings serialize");
            buf.extend_from_slice(b",\"labels\":");
            buf.extend_from_slice(entry.labels.get().as_bytes());
            buf.push(b'}');
            counts[i] += targets.len();
        }
    }
    let bodies = out
        .into_iter()
        .map(|mut b| {
            b.push(b']');
            Bytes::from(b)
        })
        .collect();
    Ok(Assignment {
        etag,
        membership,
        bodies,
        counts,
        unassigned,
        placement: placement.clone(),
    })
}

/// The collectors among the pods of the collectors job's body: one per pod name, on its node; a
/// pod counts once scheduled (a node name) and until it has finished (phase Succeeded or Failed).
///
/// NB: the allocator (`collector.go`) also drops a pod that stayed not Running or not Ready past a
/// grace period (30 s by default) using the condition's transition time, which the pod role's labels
/// do not carry; herald keeps such a pod until it finishes or is deleted. A pod without an IP has no
/// target in the pod role, so it joins once it has one.
fn collectors_from_pods(body: &[u8]) -> Result<Vec<Collector>, String> {
    #[derive(serde::Deserialize)]
    struct PodEntry {
        labels: HashMap<String, String>,
    }
    let entries: Vec<PodEntry> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut out: Vec<Collector> = Vec::new();
    for e in entries {
        let get = |k: &str| e.labels.get(k).filter(|v| !v.is_empty());
        let (Some(name), Some(node)) = (
            get("__meta_kubernetes_pod_name"),
            get("__meta_kubernetes_pod_node_name"),
        ) else {
            continue;
        };
        if matches!(
            get("__meta_kubernetes_pod_phase").map(String::as_str),
            Some("Succeeded" | "Failed")
        ) {
            continue;
        }
        if !out.iter().any(|c| &c.name == name) {
            out.push(Collector {
                name: name.clone(),
                node: Some(node.clone()),
            });
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_core::allocation::Strategy;

    fn mk_body(n: usize, per_entry: usize) -> Vec<u8> {
        let entries: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                let targets: Vec<String> = (0..per_entry)
                    .map(|p| format!("10.0.{}.{}:{}", i / 256, i % 256, 8000 + p))
                    .collect();
                serde_json::json!({
                    "targets": targets,
                    "labels": {"__meta_kubernetes_pod_node_name": format!("node-{}", i % 3),
                               "__meta_kubernetes_pod_name": format!("p{i}")},
                })
            })
            .collect();
        serde_json::to_vec(&entries).expect("json")
    }

    fn mk_placement(strategy: Strategy, n: usize) -> Arc<Placement> {
        let collectors = (0..n)
            .map(|i| Collector {
                name: format!("c{i}"),
                node: Some(format!("node-{i}")),
            })
            .collect();
        Arc::new(Placement::new(collectors, strategy, None))
    }

    fn targets_of(body: &[u8]) -> Vec<String> {
        let v: Vec<serde_json::Value> = serde_json::from_slice(body).expect("json");
        v.iter()
            .flat_map(|e| e["targets"].as_array().expect("targets").clone())
            .map(|t| t.as_str().expect("string").to_string())
            .collect()
    }

    #[test]
    fn a_cut_splits_entries_and_keeps_their_labels_byte_for_byte() {
        let body = mk_body(200, 2);
        let p = mk_placement(Strategy::ConsistentHashing, 3);
        let a = assign(&body, &p, "\"e\"".into(), 0).expect("cut");
        let mut all: Vec<String> = a.bodies.iter().flat_map(|b| targets_of(b)).collect();
        assert_eq!(all.len(), 400);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 400, "no target twice");
        assert_eq!(a.counts.iter().sum::<usize>(), 400);
        assert_eq!(a.unassigned, 0);
        for (i, b) in a.bodies.iter().enumerate() {
            for t in targets_of(b) {
                assert_eq!(p.place(&t, None), Some(i));
            }
        }
    }

    #[test]
    fn per_node_leaves_targets_on_nodes_without_a_collector_unassigned() {
        let body = mk_body(30, 1);
        // Collectors on node-0 and node-1 only: node-2's ten targets have nowhere to go.
        let p = mk_placement(Strategy::PerNode, 2);
        let a = assign(&body, &p, "\"e\"".into(), 0).expect("cut");
        assert_eq!(a.counts, vec![10, 10]);
        assert_eq!(a.unassigned, 10);
    }

    #[test]
    fn no_collectors_assign_nothing() {
        let p = Arc::new(Placement::new(vec![], Strategy::ConsistentHashing, None));
        let a = assign(&mk_body(5, 1), &p, "\"e\"".into(), 0).expect("cut");
        assert!(a.bodies.is_empty());
        assert_eq!(a.unassigned, 5);
    }

    #[test]
    fn collector_pods_are_read_from_the_pod_roles_labels() {
        let body = serde_json::json!([
            {"targets": ["10.0.0.1:4317"], "labels": {"__meta_kubernetes_pod_name": "col-b",
                "__meta_kubernetes_pod_node_name": "n2", "__meta_kubernetes_pod_phase": "Running"}},
            {"targets": ["10.0.0.1:8888"], "labels": {"__meta_kubernetes_pod_name": "col-b",
                "__meta_kubernetes_pod_node_name": "n2", "__meta_kubernetes_pod_phase": "Running"}},
            {"targets": ["10.0.0.2:4317"], "labels": {"__meta_kubernetes_pod_name": "col-a",
                "__meta_kubernetes_pod_node_name": "n1", "__meta_kubernetes_pod_phase": "Pending"}},
            {"targets": ["10.0.0.3:4317"], "labels": {"__meta_kubernetes_pod_name": "col-done",
                "__meta_kubernetes_pod_node_name": "n1", "__meta_kubernetes_pod_phase": "Succeeded"}},
            {"targets": ["10.0.0.4:4317"], "labels": {"__meta_kubernetes_pod_name": "col-unscheduled"}}
        ]);
        let got = collectors_from_pods(&serde_json::to_vec(&body).expect("json")).expect("read");
        let names: Vec<&str> = got.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["col-a", "col-b"]);
        assert_eq!(got[1].node.as_deref(), Some("n2"));
    }

    #[test]
    fn a_body_that_is_not_http_sd_is_an_error_not_a_panic() {
        let p = mk_placement(Strategy::ConsistentHashing, 2);
        assert!(assign(b"{\"x\":1}", &p, String::new(), 0).is_err());
        assert!(collectors_from_pods(b"[1]").is_err());
    }
}
