//! herald's own metrics (`/metrics`, Prometheus text format via prometheus-client): upstream watches,
//! relists and events per kind, cache sizes, per-job targets, what the SD face served, and the
//! monitors and PeerAuthentications herald reads.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub kind: String,
    /// `apply`, `delete`, or `relist_object` (an object of a relist).
    pub event: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub job: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    /// The HTTP status code (a number, so counting a request allocates nothing).
    pub code: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EncodingLabels {
    pub encoding: &'static str,
}

/// A Kubernetes API response's content type.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContentLabels {
    pub content_type: String,
}

impl ContentLabels {
    pub fn new(content_type: &str) -> Self {
        ContentLabels {
            content_type: content_type.to_string(),
        }
    }
}

/// Objects the Kubernetes API face encoded in protobuf (`kube_face::proto::encoded_total`: each
/// object version once, shared by every list, get and watch), read at each scrape.
#[derive(Debug)]
struct ProtoEncoded;

impl prometheus_client::collector::Collector for ProtoEncoded {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        let counter = prometheus_client::metrics::counter::ConstCounter::new(
            kube_face::proto::encoded_total(),
        );
        let mut metric = encoder.encode_descriptor(
            "kube_objects_encoded",
            "Objects the Kubernetes API face encoded, by format (JSON objects are sent as received; each object version is encoded in protobuf at most once)",
            None,
            counter.metric_type(),
        )?;
        counter.encode(metric.encode_family(&[("format", "protobuf")])?)
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeRequestLabels {
    pub verb: String,
    pub kind: String,
    pub code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServedLabels {
    /// `false`: not served at all; `true`: served without something it holds.
    pub served: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: String,
}

/// Why the face refused a list or watch with 429.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub verb: String,
    /// `rate`: past the admission rate; `initializing`: before the resource's first sync (herald
    /// starting), as the apiserver refuses while its watch cache initializes.
    pub reason: &'static str,
}

/// `herald_build_info`'s labels: what is running.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
    pub commit: String,
    pub rustc: String,
}

/// Every metric herald exports. Cheap handles: clone freely.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    pub upstream_watches: Family<KindLabels, Counter>,
    pub upstream_lists: Family<KindLabels, Counter>,
    pub upstream_relists: Family<KindLabels, Counter>,
    pub upstream_events: Family<EventLabels, Counter>,
    pub upstream_errors: Family<KindLabels, Counter>,
    pub upstream_bytes: Family<KindLabels, Counter>,
    pub upstream_malformed: Family<KindLabels, Counter>,
    pub upstream_oversized: Family<KindLabels, Counter>,
    pub upstream_stale: Family<KindLabels, Gauge>,
    pub upstream_last_event_age: Family<KindLabels, Gauge<f64, AtomicU64>>,
    pub objects: Family<KindLabels, Gauge>,
    pub job_targets: Family<JobLabels, Gauge>,
    pub sd_requests: Family<CodeLabels, Counter>,
    pub sd_bytes: Family<EncodingLabels, Counter>,
    pub sd_waiting: Gauge,
    pub kube_requests: Family<KubeRequestLabels, Counter>,
    pub kube_watches_open: Family<KindLabels, Gauge>,
    pub kube_events_sent: Family<KindLabels, Counter>,
    pub kube_bytes_sent: Family<KindLabels, Counter>,
    pub kube_watch_writes: Family<KindLabels, Counter>,
    pub kube_content_events: Family<ContentLabels, Counter>,
    pub kube_content_bytes: Family<ContentLabels, Counter>,
    pub kube_watchers_closed_slow: Family<KindLabels, Counter>,
    pub kube_admission_refused: Family<RefusedLabels, Counter>,
    pub kube_auth_refused: Counter,
    pub http_auth_refused: Counter,
    pub monitors_selected: Gauge,
    pub monitor_jobs: Gauge,
    pub monitor_problems: Family<ServedLabels, Gauge>,
    pub istio_policies: Gauge,
    pub istio_policy_problems: Gauge,
    /// The body store's (`body_store::BodyStore`).
    pub bodies: herald_index::body_store::BodyMetrics,
    pub sd_response: SdResponseSeconds,
    /// Set at each scrape from the status (`admin::metrics`), so `/metrics`, `/readyz` and the
    /// status page never disagree.
    pub ready: Gauge,
    pub sd_consumers: Gauge,
    pub direct_watches: Gauge,
    pub watches_saved: Gauge,
    /// 1 for the running build (`set_build_info`).
    pub build_info: Family<BuildLabels, Gauge>,
}

/// Seconds from an SD request's arrival to its response head, a long-poll's wait left out: what
/// herald adds to a consumer's refresh (the body then streams from kept bytes).
#[derive(Debug, Clone)]
pub struct SdResponseSeconds(pub Histogram);

impl Default for SdResponseSeconds {
    fn default() -> SdResponseSeconds {
        // 0.25 ms .. 4 s: a kept body answers in well under a millisecond, a cold build of a large
        // job in tens of milliseconds.
        SdResponseSeconds(Histogram::new(exponential_buckets(0.00025, 4.0, 8)))
    }
}

impl Metrics {
    /// A registry holding every metric, names prefixed `herald_`.
    pub fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("herald");
        r.register(
            "upstream_watches",
            "Watch requests herald started upstream, per kind",
            self.upstream_watches.clone(),
        );
        r.register(
            "upstream_lists",
            "List requests herald made upstream, per kind",
            self.upstream_lists.clone(),
        );
        r.register(
            "upstream_relists",
            "Full resyncs (initial list or relist after 410) per kind",
            self.upstream_relists.clone(),
        );
        r.register(
            "upstream_events",
            "Objects received from upstream, per kind and event",
            self.upstream_events.clone(),
        );
        r.register(
            "upstream_errors",
            "Upstream list/watch errors per kind",
            self.upstream_errors.clone(),
        );
        r.register(
            "upstream_bytes_received",
            "Bytes of list pages and watch lines received from upstream (as decoded), per kind",
            self.upstream_bytes.clone(),
        );
        r.register(
            "upstream_malformed_objects",
            "Upstream objects skipped because they did not decode, per kind",
            self.upstream_malformed.clone(),
        );
        r.register(
            "upstream_oversized_objects",
            "Upstream objects refused for exceeding the size limit (--max-object-bytes), per kind",
            self.upstream_oversized.clone(),
        );
        r.register(
            "upstream_stale",
            "1 while the kind's upstream watch is failing and its last good state is served",
            self.upstream_stale.clone(),
        );
        r.register(
            "upstream_last_event_age_seconds",
            "Seconds since the last upstream event or resync of the kind",
            self.upstream_last_event_age.clone(),
        );
        r.register(
            "cached_objects",
            "Objects cached per kind",
            self.objects.clone(),
        );
        r.register(
            "job_targets",
            "Targets discovered for each job, before its relabeling (an Istio-aware companion job: its source job's; /sd/v1 lists served_targets)",
            self.job_targets.clone(),
        );
        r.register(
            "sd_requests",
            "HTTP SD requests by status code",
            self.sd_requests.clone(),
        );
        r.register(
            "sd_bytes_served",
            "HTTP SD body bytes sent, by content encoding",
            self.sd_bytes.clone(),
        );
        r.register(
            "sd_body_bytes_held",
            "Bytes the HTTP SD bodies kept between requests hold (zstd blocks, gzip forms, bookkeeping)",
            self.bodies.held.clone(),
        );
        r.register(
            "sd_body_budget_bytes",
            "The most the kept HTTP SD bodies may hold (--body-budget-bytes)",
            self.bodies.budget.clone(),
        );
        r.register(
            "sd_body_builds",
            "HTTP SD bodies built (a request found no body of its job, shard and generation kept)",
            self.bodies.builds.clone(),
        );
        r.register(
            "sd_body_evictions",
            "HTTP SD bodies dropped, least recently used first, to stay within the budget",
            self.bodies.evictions.clone(),
        );
        r.register(
            "sd_body_blocks_compressed",
            "Body blocks encoded or copied and compressed (the others were taken over unchanged)",
            self.bodies.blocks_compressed.clone(),
        );
        r.register(
            "sd_body_blocks_taken",
            "Body blocks taken over unchanged from the previous generation of the same job and shard",
            self.bodies.blocks_taken.clone(),
        );
        r.register(
            "sd_hot_body_bytes_held",
            "Bytes reserved for the expanded blocks of hot HTTP SD bodies (asked for again within seconds)",
            self.bodies.hot.held.clone(),
        );
        r.register(
            "sd_hot_body_budget_bytes",
            "The most the hot HTTP SD bodies' expanded blocks may hold (--hot-body-bytes)",
            self.bodies.hot.budget.clone(),
        );
        r.register(
            "sd_hot_bodies_admitted",
            "HTTP SD body forms (identity, gzip) that became hot: sent again within the window, held expanded or joined while asked for",
            self.bodies.hot.admitted.clone(),
        );
        r.register(
            "sd_hot_body_responses",
            "HTTP SD responses sent from a hot body form: identity from its shared expanded blocks, gzip as one joined frame",
            self.bodies.hot.responses.clone(),
        );
        r.register(
            "sd_response_seconds",
            "Seconds from an HTTP SD request to its response head, a long-poll's wait left out",
            self.sd_response.0.clone(),
        );
        r.register(
            "sd_consumers",
            "Distinct (client address, job, shard) that fetched HTTP SD in the last 5 minutes",
            self.sd_consumers.clone(),
        );
        r.register(
            "apiserver_watches_direct",
            "Watches herald's consumers would hold on the apiserver directly: one per kind for each SD consumer, each downstream watch itself",
            self.direct_watches.clone(),
        );
        r.register(
            "apiserver_watches_saved",
            "apiserver_watches_direct less the watches herald holds upstream (one per kind), never below zero",
            self.watches_saved.clone(),
        );
        r.register(
            "ready",
            "1 once every needed kind has completed its first sync (what /readyz answers), else 0",
            self.ready.clone(),
        );
        r.register(
            "sd_waiting_requests",
            "Long-poll requests currently waiting for a change",
            self.sd_waiting.clone(),
        );
        r.register(
            "kube_requests",
            "Kubernetes API requests served, by verb, kind and status code (watches when started)",
            self.kube_requests.clone(),
        );
        r.register(
            "kube_watches_open",
            "Downstream Kubernetes API watches open, per kind",
            self.kube_watches_open.clone(),
        );
        r.register(
            "kube_events_sent",
            "Watch events, bookmarks and errors sent downstream, per kind",
            self.kube_events_sent.clone(),
        );
        r.register(
            "kube_bytes_sent",
            "Watch bytes sent downstream, per kind",
            self.kube_bytes_sent.clone(),
        );
        r.register(
            "kube_watch_writes",
            "Writes of watch events to watchers' connections, per kind (events sent per write: how much kube_api.watch_batch_ms batches)",
            self.kube_watch_writes.clone(),
        );
        r.register(
            "kube_content_events",
            "Watch events, bookmarks and errors sent downstream, per content type (application/json, application/vnd.kubernetes.protobuf;stream=watch)",
            self.kube_content_events.clone(),
        );
        r.register(
            "kube_content_bytes",
            "Bytes sent downstream in lists, gets and watches, per content type",
            self.kube_content_bytes.clone(),
        );
        r.register_collector(Box::new(ProtoEncoded));
        r.register(
            "kube_watchers_closed_slow",
            "Downstream watches closed because their client stopped reading, per kind",
            self.kube_watchers_closed_slow.clone(),
        );
        r.register(
            "kube_admission_refused",
            "Lists and watches refused with 429: reason=rate by the admission rate limit, reason=initializing before the resource's first sync",
            self.kube_admission_refused.clone(),
        );
        r.register(
            "kube_auth_refused",
            "Kubernetes API requests refused for a missing or wrong bearer token",
            self.kube_auth_refused.clone(),
        );
        r.register(
            "http_auth_refused",
            "Service discovery, status and metrics requests refused for a missing or wrong credential",
            self.http_auth_refused.clone(),
        );
        r.register(
            "monitors_selected",
            "ServiceMonitors and PodMonitors selected (monitors: section)",
            self.monitors_selected.clone(),
        );
        r.register(
            "monitor_jobs",
            "Monitor jobs served (one per monitor endpoint)",
            self.monitor_jobs.clone(),
        );
        r.register(
            "monitor_problems",
            "Monitors reported in /sd/v1: not served (served=false: what the operator would refuse, a \
             missing scrape class or base role) or served without fields they hold (served=true)",
            self.monitor_problems.clone(),
        );
        r.register(
            "istio_policies",
            "PeerAuthentications Istio-aware jobs place targets by",
            self.istio_policies.clone(),
        );
        r.register(
            "istio_policy_problems",
            "PeerAuthentications left out because they could not be read (listed in /sd/v1)",
            self.istio_policy_problems.clone(),
        );
        r.register(
            "build_info",
            "1 for the running herald: its version, the commit it was built from and its compiler",
            self.build_info.clone(),
        );
        r
    }

    /// `herald_build_info{version, commit, rustc} 1`, so a dashboard can tell builds apart.
    pub fn set_build_info(&self, version: &str, commit: &str, rustc: &str) {
        self.build_info
            .get_or_create(&BuildLabels {
                version: version.into(),
                commit: commit.into(),
                rustc: rustc.into(),
            })
            .set(1);
    }

    /// Creates, at 0, the series whose label values are known from the start: the upstream
    /// counters of each of `kinds` and each event, the SD bytes of each encoding, and with the
    /// Kubernetes API face on (`face`) its per-kind counters and its refusals for each verb and
    /// reason. Series keyed by an HTTP status code or a last event's age stay absent until they have
    /// a value. Alerts on `rate()` or `increase()` of a
    /// series then see its first event instead of a series appearing at 1 (Prometheus's
    /// instrumentation practices: "avoid missing metrics").
    pub fn export_known(&self, kinds: &[String], face: bool) {
        for kind in kinds {
            let label = Metrics::kind(kind);
            drop(self.upstream_watches.get_or_create(&label));
            drop(self.upstream_lists.get_or_create(&label));
            drop(self.upstream_relists.get_or_create(&label));
            drop(self.upstream_errors.get_or_create(&label));
            drop(self.upstream_malformed.get_or_create(&label));
            drop(self.upstream_oversized.get_or_create(&label));
            drop(self.upstream_stale.get_or_create(&label));
            drop(self.upstream_bytes.get_or_create(&label));
            // `upstream.rs` counts these three events.
            for event in ["apply", "delete", "relist_object"] {
                drop(self.upstream_events.get_or_create(&EventLabels {
                    kind: kind.clone(),
                    event: event.into(),
                }));
            }
            if face {
                drop(self.kube_watchers_closed_slow.get_or_create(&label));
                drop(self.kube_watches_open.get_or_create(&label));
                drop(self.kube_events_sent.get_or_create(&label));
                drop(self.kube_bytes_sent.get_or_create(&label));
                drop(self.kube_watch_writes.get_or_create(&label));
            }
        }
        // The SD face's two encodings (`http/sd.rs`).
        for encoding in ["identity", "gzip"] {
            drop(self.sd_bytes.get_or_create(&EncodingLabels { encoding }));
        }
        if face {
            // kube-face admits lists and watches only (`serve.rs`); reasons as `RefusedLabels`.
            for verb in ["LIST", "WATCH"] {
                for reason in ["rate", "initializing"] {
                    drop(self.kube_admission_refused.get_or_create(&RefusedLabels {
                        verb: verb.into(),
                        reason,
                    }));
                }
            }
        }
    }

    pub fn kind(kind: &str) -> KindLabels {
        KindLabels {
            kind: kind.to_string(),
        }
    }
}
