//! What herald is doing, as one struct: upstream watches per kind (health, last-event age, objects),
//! jobs (targets, links to their JSON), shards in use, consumers served and the apiserver watches
//! they would cost directly, and recent warnings. `/status.json` serialises it and the page at `/`
//! is rendered from it (`http::status`), so the two never disagree.

pub mod consumers;
mod recent;

use std::sync::atomic::Ordering;

use serde::Serialize;

use crate::metrics::Metrics;
use crate::shared::Shared;

pub use consumers::{CONSUMER_WINDOW, Consumers};
pub use recent::{RECENT_CAPACITY, RecentWarning, RecentWarnings, recent_warnings};

/// The whole status.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub version: &'static str,
    /// Every needed kind has completed its first sync.
    pub ready: bool,
    pub upstream: Vec<UpstreamKind>,
    pub jobs: Vec<JobStatus>,
    pub consumers: ConsumerStatus,
    /// prometheus-operator monitors served as jobs; `None` without a `monitors:` section.
    pub monitors: Option<MonitorStatus>,
    /// Recent warnings and errors, newest first.
    pub recent_warnings: Vec<RecentWarning>,
}

/// One upstream list+watch.
#[derive(Debug, Clone, Serialize)]
pub struct UpstreamKind {
    pub kind: String,
    /// `ok`, `stale` (failing; last good state served) or `syncing` (no complete list yet).
    pub health: &'static str,
    pub objects: usize,
    /// Seconds since the last event or resync; `None` before the first.
    pub last_event_age_seconds: Option<f64>,
    pub watches_started: u64,
    pub relists: u64,
    pub errors: u64,
    /// Why the last failed list or watch failed (a 403 names the verb and the resource refused);
    /// `None` before any failure.
    pub last_error: Option<String>,
}

/// One job.
#[derive(Debug, Clone, Serialize)]
pub struct JobStatus {
    pub name: String,
    pub role: &'static str,
    pub targets: usize,
    pub groups: usize,
    pub generation: u64,
    pub synced: bool,
    pub stale: bool,
    /// Where its HTTP SD JSON is.
    pub url: String,
    /// Shards recent consumers asked for, as `index/count`.
    pub shards_in_use: Vec<String>,
}

/// The monitors herald serves.
#[derive(Debug, Clone, Serialize)]
pub struct MonitorStatus {
    /// Where the selection comes from: `monitors: section`, or `Prometheus <ns>/<name>`.
    pub selected_by: String,
    /// Monitors selected.
    pub monitors: usize,
    /// Jobs served for them (one per endpoint).
    pub jobs: usize,
    /// Monitors or endpoints not served, each with why.
    pub problems: Vec<String>,
    /// Monitors served without something they hold (fields the operator's CRD does not have).
    pub warnings: Vec<String>,
    /// Every monitor job has been built from completely listed monitors.
    pub ready: bool,
}

/// Who herald serves, and what that spares the apiserver.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerStatus {
    /// Distinct (client address, job, shard) that fetched service discovery recently.
    pub sd_clients: usize,
    pub window_seconds: u64,
    /// Long-polls waiting for a change now.
    pub sd_waiting: i64,
    /// Kubernetes API watches open downstream now.
    pub kube_watches_open: i64,
    /// Watches herald holds upstream: one per served kind.
    pub upstream_watches: usize,
    /// Watches the same consumers would hold on the apiserver directly: each SD client one per kind
    /// its job reads (as Prometheus's kubernetes_sd does), each downstream watch itself.
    pub direct_watches: u64,
    /// `direct_watches - upstream_watches`, never below zero.
    pub watches_saved: u64,
}

impl Status {
    pub fn collect(shared: &Shared) -> Status {
        let ages = shared.last_event_ages();
        let m = &shared.metrics;
        let upstream: Vec<UpstreamKind> = shared
            .cache
            .ids()
            .map(|r| {
                let c = shared.cache.get(r);
                let kind = c.resource.plural.clone();
                let label = Metrics::kind(&kind);
                let health = if !c.status.synced.load(Ordering::Acquire) {
                    "syncing"
                } else if c.status.stale.load(Ordering::Acquire) {
                    "stale"
                } else {
                    "ok"
                };
                UpstreamKind {
                    health,
                    objects: shared.cache.len(r),
                    last_event_age_seconds: ages.get(&kind).copied().flatten(),
                    watches_started: m.upstream_watches.get_or_create(&label).get(),
                    relists: m.upstream_relists.get_or_create(&label).get(),
                    errors: m.upstream_errors.get_or_create(&label).get(),
                    last_error: c
                        .status
                        .last_error
                        .lock()
                        .expect("last error lock is never poisoned")
                        .clone(),
                    kind,
                }
            })
            .collect();
        let recent = shared.consumers.recent();
        let jobs: Vec<JobStatus> = shared
            .jobs()
            .iter()
            .enumerate()
            .map(|(j, h)| {
                let (generation, targets, groups) = shared.job_counts(j);
                let mut shards: Vec<String> = recent
                    .iter()
                    .filter(|c| c.job == j)
                    .filter_map(|c| c.shard.map(|s| format!("{}/{}", s.index, s.count)))
                    .collect();
                shards.sort();
                shards.dedup();
                JobStatus {
                    name: h.name.clone(),
                    role: h.role.as_str(),
                    targets,
                    groups,
                    generation,
                    synced: shared.job_synced(j),
                    stale: shared.job_stale(j),
                    url: format!("/sd/v1/{}", h.name),
                    shards_in_use: shards,
                }
            })
            .collect();
        Status {
            version: env!("CARGO_PKG_VERSION"),
            ready: shared.ready(),
            upstream,
            jobs,
            consumers: ConsumerStatus::collect(shared, &recent),
            monitors: shared.monitors.config.as_ref().map(|cfg| {
                let views = shared.monitors.views();
                MonitorStatus {
                    selected_by: match &cfg.prometheus {
                        Some(p) => format!("Prometheus {p}"),
                        None => "monitors: section".into(),
                    },
                    monitors: views.monitors,
                    jobs: views.by_name.len(),
                    problems: views.problems.clone(),
                    warnings: views.warnings.clone(),
                    ready: shared.monitors.ready(),
                }
            }),
            recent_warnings: recent_warnings(),
        }
    }
}

impl ConsumerStatus {
    /// Who `recent` (the recent SD consumers) and the open downstream watches are, against the
    /// watches herald holds upstream. Also set as gauges at each `/metrics` scrape.
    pub(crate) fn collect(shared: &Shared, recent: &[consumers::Consumer]) -> ConsumerStatus {
        let m = &shared.metrics;
        let kube_watches_open: i64 = shared
            .cache
            .ids()
            .map(|r| {
                m.kube_watches_open
                    .get_or_create(&Metrics::kind(&shared.cache.get(r).resource.plural))
                    .get()
            })
            .sum();
        let per_sd_client: u64 = recent
            .iter()
            .map(|c| shared.jobs().get(c.job).map_or(0, |h| h.kinds.len() as u64))
            .sum();
        let direct_watches = per_sd_client + kube_watches_open.max(0) as u64;
        let upstream_watches = shared.cache.ids().count();
        ConsumerStatus {
            sd_clients: recent.len(),
            window_seconds: CONSUMER_WINDOW.as_secs(),
            sd_waiting: m.sd_waiting.get(),
            kube_watches_open,
            upstream_watches,
            direct_watches,
            watches_saved: direct_watches.saturating_sub(upstream_watches as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_index::filter::JobSpec;

    #[test]
    fn the_status_lists_jobs_kinds_and_counts_consumers_once_per_address_job_and_shard() {
        let cfg = herald_core::parse_config(
            "jobs:\n- {name: pods, role: pod}\n- {name: eps, role: endpointslice}\n",
        )
        .expect("valid");
        let specs: Vec<JobSpec> = cfg
            .jobs
            .iter()
            .map(|j| JobSpec::from_job(j, None).expect("spec"))
            .collect();
        let shared = Shared::new(specs);
        let ip = "127.0.0.9".parse().expect("ip");
        shared.consumers.record(Some(ip), 0, None);
        shared.consumers.record(Some(ip), 0, None);
        shared.consumers.record(
            Some(ip),
            1,
            Some(herald_index::encoded::Shard { index: 1, count: 4 }),
        );
        let s = Status::collect(&shared);
        assert_eq!(
            s.jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(),
            ["pods", "eps"]
        );
        assert_eq!(s.jobs[1].shards_in_use, ["1/4"]);
        assert_eq!(s.consumers.sd_clients, 2);
        assert!(s.upstream.iter().all(|u| u.health == "syncing"));
        let eps_kinds = shared.jobs()[1].kinds.len() as u64;
        assert_eq!(s.consumers.direct_watches, 1 + eps_kinds);
        assert!(!s.ready);
        let json = serde_json::to_value(&s).expect("serialises");
        assert_eq!(json["jobs"][0]["url"], "/sd/v1/pods");
    }
}
