//! herald's read-only Kubernetes API: kube-face over the cache, with admission control (a token bucket
//! for new lists and watches, so a reconnect storm of thousands of clients gets 429 instead of
//! flattening herald, with a Retry-After that paces them back: [`crate::admission`]), bearer-token
//! authentication, and metrics per downstream watch.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::response::{IntoResponse, Response};
use kube_face::{
    ApiError, Backend, Catalog, Entry, Event, Key, ListAt, Page, ResId, StoreError, WatchObserver,
    WatchSettings,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio::time::Instant;

use herald_index::cache::Cache;

use crate::admission::Admission;
use crate::metrics::{ContentLabels, KubeRequestLabels, Metrics, RefusedLabels};

/// What the Kubernetes API face caches and how (see `herald_core::KubeApiConfig`).
#[derive(Debug, Clone)]
pub struct KubeApiOptions {
    /// Resources served beyond what the jobs need.
    pub resources: Vec<kube_face::Resource>,
    /// Events kept per resource for downstream watch resumption.
    pub history_window: usize,
    pub watch: kube_face::WatchSettings,
    /// New lists (and watches with initial events) admitted per second, and the burst (token
    /// bucket); a watch from a resourceVersion is not charged (`crate::admission`). The defaults
    /// (1,000/s, burst 2,000) let 10,000 informers relist after a restart in about 8 s; a node's pod
    /// list is read from the `spec.nodeName` index, so admission bounds work, not time.
    pub admission_rate: f64,
    pub admission_burst: u32,
}

/// How long a watcher that has just written waits before its next write (`kube_api.watch_batch_ms`),
/// so that the events arriving meanwhile share one write. Each write to a watcher's connection costs
/// herald ~15 µs however small (the loopback's whole TCP path on the sender's CPU, measured with
/// `perf stat` of 1,000 EndpointSlice watchers at 100 events/s), and that was most of herald's CPU
/// per delivered event: at 50 ms it fell from 1.08 to 0.45 cores for JSON and from 1.15 to 0.43 for
/// protobuf, p99 delivery 27 → 53 ms (bench/RESULTS.md, "Watch writes batched"; DESIGN-NOTES §13).
/// A watch that has not written within the window writes its next event at once.
pub const DEFAULT_WATCH_BATCH: std::time::Duration = std::time::Duration::from_millis(50);

impl Default for KubeApiOptions {
    fn default() -> Self {
        KubeApiOptions {
            resources: vec![],
            history_window: 10_000,
            watch: kube_face::WatchSettings {
                batch_window: DEFAULT_WATCH_BATCH,
                ..kube_face::WatchSettings::default()
            },
            admission_rate: 1000.0,
            admission_burst: 2000,
        }
    }
}

/// A custom resource by (group, version, resource).
pub type CustomRef = (String, String, String);

/// The face: kube-face's `Backend` over the cache, with its own admission, metrics and shutdown.
#[derive(Debug)]
pub struct KubeFace {
    /// The objects it serves: herald's cache, shared with discovery.
    cache: Arc<Cache>,
    pub options: KubeApiOptions,
    admission: Admission,
    metrics: Metrics,
    /// Flipped at shutdown: open watches end at once instead of holding the process up.
    close_tx: watch::Sender<u64>,
    /// Set at shutdown, before `close_tx` is flipped: watches starting afterwards end at once.
    shutting_down: std::sync::atomic::AtomicBool,
}

impl KubeFace {
    pub fn new(cache: Arc<Cache>, options: KubeApiOptions, metrics: &Metrics) -> KubeFace {
        KubeFace {
            cache,
            admission: Admission::new(options.admission_rate, options.admission_burst),
            options,
            metrics: metrics.clone(),
            close_tx: watch::Sender::new(0),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Ends every open downstream watch for good: a watch a client opens afterwards (re-watching at
    /// once on a keep-alive connection during the shutdown grace period) ends at once too, so no
    /// client is left on a stopped herald's frozen state. NB: axum keeps serving a connection's
    /// requests until the connection closes, and drops only the accept loop after the grace
    /// period; a watch started then lived on, silent, until its timeout (found by client-go
    /// informers behind a tier of heralds whose upstream herald restarted).
    pub fn shut_down(&self) {
        self.shutting_down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.close_watches();
    }

    /// Ends every open downstream watch.
    pub fn close_watches(&self) {
        self.close_tx.send_modify(|n| *n += 1);
    }
}

struct Observer {
    open: Gauge,
    events: Counter,
    bytes: Counter,
    writes: Counter,
    content_events: Counter,
    content_bytes: Counter,
    slow: Counter,
}

impl WatchObserver for Observer {
    fn sent(&self, lines: u64, bytes: u64) {
        self.events.inc_by(lines);
        self.bytes.inc_by(bytes);
        self.writes.inc();
        self.content_events.inc_by(lines);
        self.content_bytes.inc_by(bytes);
    }
    fn closed_slow(&self) {
        self.slow.inc();
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl Backend for KubeFace {
    fn catalog(&self) -> &Catalog {
        &self.cache.catalog
    }
    fn settings(&self) -> &WatchSettings {
        &self.options.watch
    }
    fn server_address(&self) -> String {
        String::new()
    }
    fn resource_version(&self, r: ResId) -> u64 {
        self.cache.resource_version(r)
    }
    fn subscribe(&self, r: ResId) -> watch::Receiver<u64> {
        self.cache.subscribe(r)
    }
    fn subscribe_indexed(&self, r: ResId, value: &str) -> Option<watch::Receiver<u64>> {
        self.cache.subscribe_value(r, value)
    }
    fn events_of_value_after(
        &self,
        r: ResId,
        value: &str,
        rv: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), StoreError> {
        let current = self.cache.resource_version(r);
        Ok((
            self.cache.read(r).events_of_value_after(value, rv, max)?,
            current,
        ))
    }
    fn get(&self, r: ResId, namespace: &str, name: &str) -> Option<Arc<Entry>> {
        self.cache.read(r).get_parts(namespace, name).cloned()
    }
    fn list(
        &self,
        r: ResId,
        ns: Option<&str>,
        at: ListAt,
        after: Option<&Key>,
        limit: Option<usize>,
        indexed: Option<&str>,
        filter: &dyn Fn(&Entry) -> bool,
    ) -> Result<Page, StoreError> {
        // NB: the version is read before the lock: a change landing in between is in the page and
        // in the watch that follows, which informers tolerate; the reverse would lose it.
        let current = self.cache.resource_version(r);
        self.cache
            .read(r)
            .list(current, ns, at, after, limit, indexed, filter)
    }
    fn events_after(
        &self,
        r: ResId,
        rv: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), StoreError> {
        let current = self.cache.resource_version(r);
        Ok((self.cache.read(r).events_after_at_most(rv, max)?, current))
    }
    fn admit(&self, verb: &str, r: ResId, reads_state: bool) -> Result<(), ApiError> {
        // NB: before the resource's first sync (herald just started, or restarted under thousands
        // of informers) a list would be empty and a watch would wait for versions herald does not
        // have yet: refuse at once, as the apiserver does while its watch cache initializes, and
        // without spending an admission token, so the storm that follows the sync is not refused
        // for the retries made before it.
        if !self.cache.get(r).status.synced.load(Ordering::Acquire) {
            self.metrics
                .kube_admission_refused
                .get_or_create(&RefusedLabels {
                    verb: verb.into(),
                    reason: "initializing",
                })
                .inc();
            let mut e = ApiError::new(429, "TooManyRequests", "storage is (re)initializing");
            e.retry_after = Some(self.admission.defer(Instant::now()));
            return Err(e);
        }
        if !reads_state {
            return Ok(());
        }
        self.admission.take(Instant::now()).map_err(|retry_after| {
            self.metrics
                .kube_admission_refused
                .get_or_create(&RefusedLabels {
                    verb: verb.into(),
                    reason: "rate",
                })
                .inc();
            let mut e = ApiError::new(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
            );
            e.retry_after = Some(retry_after);
            e
        })
    }
    fn request_done(
        &self,
        verb: &str,
        resource: &str,
        code: u16,
        _ua: &str,
        bytes: u64,
        content_type: &str,
    ) {
        if bytes > 0 {
            self.metrics
                .kube_content_bytes
                .get_or_create(&ContentLabels::new(content_type))
                .inc_by(bytes);
        }
        self.metrics
            .kube_requests
            .get_or_create(&KubeRequestLabels {
                verb: verb.into(),
                kind: resource.into(),
                code: code.to_string(),
            })
            .inc();
    }
    fn watch_opened(
        &self,
        resource: &str,
        _ua: &str,
        content_type: &str,
    ) -> Box<dyn WatchObserver> {
        let label = Metrics::kind(resource);
        let m = &self.metrics;
        let open = m.kube_watches_open.get_or_create(&label).clone();
        open.inc();
        let ct = ContentLabels::new(content_type);
        Box::new(Observer {
            open,
            content_events: m.kube_content_events.get_or_create(&ct).clone(),
            content_bytes: m.kube_content_bytes.get_or_create(&ct).clone(),
            events: m.kube_events_sent.get_or_create(&label).clone(),
            bytes: m.kube_bytes_sent.get_or_create(&label).clone(),
            writes: m.kube_watch_writes.get_or_create(&label).clone(),
            slow: m.kube_watchers_closed_slow.get_or_create(&label).clone(),
        })
    }
    fn closer(&self) -> Option<watch::Receiver<u64>> {
        Some(self.close_tx.subscribe())
    }
    fn closing(&self) -> bool {
        self.shutting_down.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The Kubernetes API router over `face` (authentication is put in front by `auth::guard`).
pub fn router(face: Arc<KubeFace>) -> Router {
    kube_face::router(face).fallback(|| async {
        ApiError::not_found("the server could not find the requested resource")
    })
}

/// A refused request, as the apiserver answers one: 401 whether the token is missing or wrong.
pub fn refuse(_: crate::auth::Refusal) -> Response {
    ApiError::new(401, "Unauthorized", "Unauthorized").into_response()
}

impl KubeFace {
    /// Whether the face is usable yet: every served resource has synced once.
    pub fn synced(&self) -> bool {
        self.cache
            .ids()
            .all(|r| self.cache.get(r).status.synced.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use kube_face::Resource;

    use super::*;

    fn mk_entry(name: &str, rv: u64) -> Arc<Entry> {
        let json = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "default", "name": name, "resourceVersion": rv.to_string()}});
        crate::fixtures::mk_entry("default", name, rv, &json)
    }

    fn mk_face(options: KubeApiOptions) -> KubeFace {
        let configmaps = Resource::builtin("configmaps").expect("a built-in resource");
        let cache = Arc::new(Cache::new(vec![configmaps], 100, true));
        KubeFace::new(cache, options, &Metrics::default())
    }

    #[test]
    fn a_resource_is_refused_until_its_first_list_then_served_from_the_cache() {
        let face = mk_face(KubeApiOptions::default());
        let refused = face.admit("list", 0, true).expect_err("not synced yet");
        assert_eq!((refused.code, refused.reason), (429, "TooManyRequests"));
        assert!(!face.synced());
        face.cache.swap(0, 7, vec![mk_entry("a", 5)], &[]);
        assert!(face.synced());
        face.admit("list", 0, true).expect("synced: admitted");
        assert_eq!(face.resource_version(0), 7);
        let got = face.get(0, "default", "a").expect("cached");
        assert_eq!(got.rv, 5);
        assert!(face.get(0, "default", "b").is_none());
    }

    #[test]
    fn new_lists_past_the_burst_are_refused_and_watches_from_a_version_are_not_charged() {
        let face = mk_face(KubeApiOptions {
            admission_rate: 0.001,
            admission_burst: 1,
            ..KubeApiOptions::default()
        });
        face.cache.swap(0, 7, vec![mk_entry("a", 5)], &[]);
        face.admit("list", 0, true).expect("within the burst");
        let refused = face.admit("list", 0, true).expect_err("past the burst");
        assert!(refused.retry_after.is_some_and(|s| s > 0), "{refused:?}");
        face.admit("watch", 0, false)
            .expect("a resumed watch costs nothing");
    }

    #[test]
    fn shutting_down_ends_open_watches_and_every_later_one() {
        let face = mk_face(KubeApiOptions::default());
        let closer = face.closer().expect("the face closes its watches");
        assert!(!face.closing());
        face.shut_down();
        assert!(closer.has_changed().expect("the face is alive"));
        assert!(face.closing(), "a watch opened afterwards ends at once");
    }
}
