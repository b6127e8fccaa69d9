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

use crate::admission::Admission;
use crate::metrics::{ContentLabels, KubeRequestLabels, Metrics, RefusedLabels};
use crate::state::{KubeApiOptions, Shared};

/// The face's own state inside `Shared`.
#[derive(Debug)]
pub struct KubeApi {
    pub options: KubeApiOptions,
    admission: Admission,
    metrics: Metrics,
    /// Flipped at shutdown: open watches end at once instead of holding the process up.
    close_tx: watch::Sender<u64>,
    /// Set at shutdown, before `close_tx` is flipped: watches starting afterwards end at once.
    shutting_down: std::sync::atomic::AtomicBool,
}

impl KubeApi {
    pub fn new(options: KubeApiOptions, metrics: &Metrics) -> KubeApi {
        KubeApi {
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

fn face(shared: &Shared) -> &KubeApi {
    shared
        .kube_api
        .as_ref()
        .expect("the kube API router is only built when the face is on")
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

impl Backend for Shared {
    fn catalog(&self) -> &Catalog {
        &self.cache.catalog
    }
    fn settings(&self) -> &WatchSettings {
        &face(self).options.watch
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
        let api = face(self);
        // NB: before the resource's first sync (herald just started, or restarted under thousands
        // of informers) a list would be empty and a watch would wait for versions herald does not
        // have yet: refuse at once, as the apiserver does while its watch cache initializes, and
        // without spending an admission token, so the storm that follows the sync is not refused
        // for the retries made before it.
        if !self.cache.get(r).status.synced.load(Ordering::Acquire) {
            api.metrics
                .kube_admission_refused
                .get_or_create(&RefusedLabels {
                    verb: verb.into(),
                    reason: "initializing",
                })
                .inc();
            let mut e = ApiError::new(429, "TooManyRequests", "storage is (re)initializing");
            e.retry_after = Some(api.admission.defer(Instant::now()));
            return Err(e);
        }
        if !reads_state {
            return Ok(());
        }
        api.admission.take(Instant::now()).map_err(|retry_after| {
            api.metrics
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
        Some(face(self).close_tx.subscribe())
    }
    fn closing(&self) -> bool {
        face(self)
            .shutting_down
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The Kubernetes API router over `shared` (authentication is put in front by `auth::guard`).
pub fn router(shared: Arc<Shared>) -> Router {
    kube_face::router(shared).fallback(|| async {
        ApiError::not_found("the server could not find the requested resource")
    })
}

/// A refused request, as the apiserver answers one: 401 whether the token is missing or wrong.
pub fn refuse(_: crate::auth::Refusal) -> Response {
    ApiError::new(401, "Unauthorized", "Unauthorized").into_response()
}

/// Whether the face is usable yet: every served resource has synced once.
pub fn synced(shared: &Shared) -> bool {
    shared
        .cache
        .ids()
        .all(|r| shared.cache.get(r).status.synced.load(Ordering::Acquire))
}
