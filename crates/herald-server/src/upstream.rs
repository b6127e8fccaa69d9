//! Upstream: one list+watch per served resource against the apiserver (or another herald), keeping
//! each object's JSON as received. A relist is buffered and swapped in whole; a failed watch resumes
//! from the last version seen (a relist only after 410 Gone), so an upstream outage costs neither
//! herald nor its downstream watchers a relist. Failures keep the last good state and mark the
//! resource stale until it recovers.
//!
//! NB: herald speaks list/watch itself over kube-rs's client instead of using kube-runtime's watcher:
//! the watcher decodes every object into a value tree and hides the list's resourceVersion and the
//! bookmarks, while herald must pass upstream objects and versions through unchanged to its own
//! watchers and parse only what it indexes (see `kube_face::scan`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use herald_core::slim;
use kube_face::scan::{Head, ScanError, head_with, strip_managed_fields};
use kube_face::{Entry, Json, Key, ResId, Resource, Siblings};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::metrics::{EventLabels, Metrics};
use crate::shared::Shared;
use herald_index::cache::{Change, Ingested};
use herald_index::{Projection, WatchKind};

pub mod transport;
pub use transport::{Compression, Upstream};

/// How the first list of each resource is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialList {
    /// StreamingList when the apiserver is 1.32 or newer (WatchList beta, on by default), else ListWatch.
    #[default]
    Auto,
    /// A watch with `sendInitialEvents=true` (KEP-3157): no large LIST response held in memory.
    Streaming,
    /// Paged LIST, then WATCH from its resourceVersion.
    ListWatch,
}

/// Why herald could not talk to its upstream.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("building the kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("invalid user agent {0:?}")]
    UserAgent(String),
}

/// Watch events applied in one burst at most (bounds the lock hold and the latency of the first).
const MAX_BURST: usize = 1000;

/// Items per LIST page (client-go's reflector pages by 500 too).
const PAGE_SIZE: usize = 500;

/// The feeds' kube client: sends `user_agent`.
///
/// NB: built with compression off: herald asks for gzip and decodes it itself
/// (`transport`), since kube-rs's decoder reads only the first member of a multi-member gzip body.
///
/// NB: and without kube-rs's retry layer (on by default since kube 5: a 429, 503 or 504 is sent
/// again up to 15 times, after 5 ms doubling up to 1000 s, or after its Retry-After if longer).
/// Retried inside the client, a refused request never came back to its feed: against
/// kube-apiserver's API Priority and Fairness rejecting herald's user, herald neither marked the
/// resource stale, counted nor logged the refusals, and waited out kube's backoff (minutes by the
/// last attempts) instead of its own (at most 30 s) once they stopped. A feed retries by itself
/// (`Backoff`), resuming from where it was.
pub fn client(config: kube::Config, user_agent: &str) -> Result<kube::Client, UpstreamError> {
    build_client(config, user_agent, false)
}

/// A kube client for the one-off discovery requests at start (`/version`, API groups), with
/// kube-rs's retries of 429, 503 and 504 kept: a passing refusal must not decide what is served.
pub fn discovery_client(
    config: kube::Config,
    user_agent: &str,
) -> Result<kube::Client, UpstreamError> {
    build_client(config, user_agent, true)
}

fn build_client(
    mut config: kube::Config,
    user_agent: &str,
    retry: bool,
) -> Result<kube::Client, UpstreamError> {
    let ua = http::HeaderValue::from_str(user_agent)
        .map_err(|_| UpstreamError::UserAgent(user_agent.to_string()))?;
    config.headers.push((http::header::USER_AGENT, ua));
    config.disable_compression = true;
    config.default_retry = retry;
    kube::Client::try_from(config).map_err(UpstreamError::Client)
}

/// Whether to use StreamingList against this apiserver.
pub async fn use_streaming(client: &kube::Client, mode: InitialList) -> bool {
    match mode {
        InitialList::Streaming => true,
        InitialList::ListWatch => false,
        InitialList::Auto => match client.apiserver_version().await {
            Ok(info) => {
                let minor: u32 = info
                    .minor
                    .trim_end_matches(|c: char| !c.is_ascii_digit())
                    .parse()
                    .unwrap_or(0);
                let major: u32 = info.major.parse().unwrap_or(0);
                major > 1 || (major == 1 && minor >= 32)
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading /version failed; using list+watch");
                false
            }
        },
    }
}

/// Spawns one feed per served resource. They run until `shutdown` is cancelled.
pub fn spawn(
    upstream: Upstream,
    shared: Arc<Shared>,
    streaming: bool,
    shutdown: CancellationToken,
) -> Vec<JoinHandle<()>> {
    shared.expect_lists();
    shared
        .cache
        .ids()
        .map(|r| {
            let resource = shared.cache.get(r).resource.clone();
            let span = tracing::info_span!("upstream", kind = resource.plural);
            let feed = Feed {
                r,
                kind: shared.cache.get(r).watch_kind,
                resource,
                upstream: upstream.clone(),
                shared: shared.clone(),
                streaming,
                siblings: Siblings::new(),
                slim_siblings: Siblings::keeping(3, 4),
            };
            tokio::spawn(Arc::new(feed).run(shutdown.clone()).instrument(span))
        })
        .collect()
}

/// Where a resource's feed stands between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No usable version: a (re)list comes next.
    List,
    /// Watching from this version.
    Watch(u64),
}

/// How a request ended.
#[derive(Debug)]
enum Outcome {
    /// Carry on in this phase.
    Next(Phase),
    /// A failure: back off, then carry on in this phase.
    Failed(Phase, String),
    /// The apiserver refused `sendInitialEvents`: fall back to list+watch.
    NoStreaming,
}

/// One watch-stream line, borrowed from the buffer it was read into.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    ty: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize, Default)]
struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

#[derive(Deserialize)]
struct ListPage<'a> {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

/// A bookmark's or Status's fields.
#[derive(Deserialize, Default)]
struct Marker {
    #[serde(default)]
    metadata: MarkerMeta,
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize, Default)]
struct MarkerMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// Backoff between failed attempts as client-go's reflector does: 800 ms doubling to 30 s, with
/// jitter, reset by a success.
struct Backoff {
    next: Duration,
}

impl Backoff {
    const START: Duration = Duration::from_millis(800);
    const MAX: Duration = Duration::from_secs(30);

    fn delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        // ±25 % jitter, from the clock: no shared RNG needed.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|t| t.subsec_nanos())
            .unwrap_or(0);
        d.mul_f64(0.75 + f64::from(nanos % 1000) / 2000.0)
    }

    fn reset(&mut self) {
        self.next = Self::START;
    }
}

struct Feed {
    r: ResId,
    kind: Option<WatchKind>,
    resource: Resource,
    upstream: Upstream,
    shared: Arc<Shared>,
    streaming: bool,
    /// The bases the face's JSON of this resource is compressed against (`kube_face::siblings`).
    siblings: Siblings,
    /// The bases the own bytes of this resource's slim projections are compressed against
    /// (`slim::Slim`). NB: a member starts a new base only past 3/4 of its size: most of a
    /// projection is its own names, uids and addresses, so members keep ~0.45 of it, not the face's
    /// quarter.
    slim_siblings: Siblings,
}

impl Feed {
    async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut phase = Phase::List;
        let mut backoff = Backoff {
            next: Backoff::START,
        };
        let mut streaming = self.streaming;
        tracing::info!(streaming, "starting upstream feed");
        loop {
            let step = async {
                match phase {
                    Phase::List if streaming => self.watch(None).await,
                    Phase::List => self.list().await,
                    Phase::Watch(rv) => self.watch(Some(rv)).await,
                }
            };
            let outcome = tokio::select! {
                o = step => o,
                () = shutdown.cancelled() => break,
            };
            phase = match outcome {
                Outcome::Next(p) => {
                    backoff.reset();
                    p
                }
                Outcome::NoStreaming => {
                    tracing::warn!(
                        "the upstream refused a streaming list; falling back to list+watch"
                    );
                    streaming = false;
                    Phase::List
                }
                Outcome::Failed(p, why) => {
                    self.error(&why);
                    let delay = backoff.delay();
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {},
                        () = shutdown.cancelled() => break,
                    }
                    p
                }
            };
        }
        tracing::info!("upstream feed stopped");
    }

    fn labels(&self) -> crate::metrics::KindLabels {
        Metrics::kind(&self.resource.plural)
    }

    fn count(&self, event: &str) {
        self.shared
            .metrics
            .upstream_events
            .get_or_create(&EventLabels {
                kind: self.resource.plural.clone(),
                event: event.to_string(),
            })
            .inc();
    }

    fn error(&self, why: &str) {
        self.shared
            .metrics
            .upstream_errors
            .get_or_create(&self.labels())
            .inc();
        self.shared.set_resource_stale(self.r, true);
        *self
            .shared
            .cache
            .get(self.r)
            .status
            .last_error
            .lock()
            .expect("last error lock is never poisoned") = Some(why.to_string());
        tracing::warn!(
            error = why,
            "upstream request failed; serving the last good state"
        );
    }

    /// Why a list or watch of this resource failed (see `transport::failure`).
    fn failure(&self, verb: &str, url: &str, e: &kube::Error) -> String {
        transport::failure(verb, &self.resource.qualified_name(), url, e)
    }

    fn path(&self) -> String {
        format!("/{}/{}", self.resource.gv_path(), self.resource.plural)
    }

    /// Reads one object as received: its head (identity, version, labels, selectable fields); for
    /// kinds discovery reads, its slim projection (which checks the types of every field discovery
    /// reads); and, when the Kubernetes API face serves it, its JSON with managedFields cut.
    fn ingest(&self, raw: &[u8]) -> Result<Ingested, String> {
        let h = self.head(raw).map_err(|e: ScanError| e.to_string())?;
        let slim = match self.kind {
            Some(kind) => {
                let (bytes, shared) = slim::project_marked(kind.mask(), raw).map_err(|e| {
                    format!("{} {}/{}: {e}", self.resource.plural, h.key.0, h.key.1)
                })?;
                Some(if self.shared.cache.keeps_bytes() {
                    Projection::from_entry(&bytes)
                } else {
                    Projection::Held(self.shared.segments.slim(
                        bytes,
                        &shared,
                        &self.slim_siblings,
                        &h.key,
                    ))
                })
            }
            None => None,
        };
        let bytes = self.kept_bytes(&h.key, raw);
        Ok(Ingested {
            entry: Arc::new(Entry {
                key: h.key,
                rv: h.rv,
                labels: h.labels,
                fields: h.fields,
                uid_hash: h.uid_hash,
                bytes,
                proto: Default::default(),
            }),
            slim,
        })
    }

    /// The object's key and version, and its labels and fields where something selects by them.
    fn head(&self, raw: &[u8]) -> Result<Head, ScanError> {
        head_with(&self.resource, raw, self.shared.head_wanted(self.r))
    }

    /// An object larger than the limit was refused: counted, and its last good version kept.
    /// Counts `bytes` of a list page or a watch line (`herald_upstream_bytes_received`).
    fn received(&self, bytes: usize) {
        self.shared
            .metrics
            .upstream_bytes
            .get_or_create(&self.labels())
            .inc_by(bytes as u64);
    }

    fn oversized(&self, bytes: usize) {
        self.shared
            .metrics
            .upstream_oversized
            .get_or_create(&self.labels())
            .inc();
        tracing::warn!(
            bytes,
            limit = self.shared.max_object_bytes(),
            "upstream object over the size limit refused; its last good version is kept"
        );
    }

    /// What an entry keeps of the upstream JSON: all of it but managedFields when the Kubernetes API
    /// face serves it (compressed against a sibling's: see `kube_face::siblings` and DESIGN-NOTES
    /// "Face memory per object"), nothing otherwise (discovery reads the projection) unless discovery has no
    /// projection of the kind (then as received: monitors read it).
    fn kept_bytes(&self, key: &Key, raw: &[u8]) -> Json {
        if self.shared.cache.keeps_bytes() {
            self.siblings.compress(key, &strip_managed_fields(raw))
        } else if self.kind.is_none() {
            Json::plain(Bytes::from(strip_managed_fields(raw).into_owned()))
        } else {
            Json::plain(Bytes::new())
        }
    }

    fn malformed(&self, why: &str) {
        self.shared
            .metrics
            .upstream_malformed
            .get_or_create(&self.labels())
            .inc();
        tracing::warn!(error = why, "malformed upstream object skipped");
    }

    /// The key of an object whose head could not be fully read, to keep its last good version.
    fn key_of(&self, raw: &[u8]) -> Option<Key> {
        #[derive(Deserialize)]
        struct Meta {
            #[serde(default)]
            metadata: KeyMeta,
        }
        #[derive(Deserialize, Default)]
        struct KeyMeta {
            #[serde(default)]
            name: String,
            #[serde(default)]
            namespace: String,
        }
        let m: Meta = serde_json::from_slice(raw).ok()?;
        let ns = if self.resource.namespaced {
            m.metadata.namespace.as_str()
        } else {
            ""
        };
        (!m.metadata.name.is_empty()).then(|| kube_face::log::key(ns, &m.metadata.name))
    }

    /// Applies a burst of watch events (see `Cache::apply`).
    fn flush(&self, pending: &mut Vec<Change>) {
        if pending.is_empty() {
            return;
        }
        self.shared.cache.touch(self.r);
        self.shared.apply_changes(self.r, std::mem::take(pending));
    }

    /// A complete list at `rv` replaces the resource's state in the cache and in discovery.
    fn swap(&self, rv: u64, entries: Vec<Ingested>, keep: Vec<Key>) {
        let started = std::time::Instant::now();
        let n = entries.len();
        let stats = self.shared.swap(self.r, rv, entries, keep);
        self.shared.cache.touch(self.r);
        self.shared.set_resource_stale(self.r, false);
        tracing::info!(
            objects = n,
            rv,
            added = stats.added,
            modified = stats.modified,
            deleted = stats.deleted,
            ms = started.elapsed().as_millis() as u64,
            "relist applied"
        );
    }

    /// A paged LIST; on success the state is swapped in and a watch from its version comes next.
    /// Each page's objects are ingested as a streaming list's are (`Listing`): on every core, while
    /// the next page is fetched.
    async fn list(self: &Arc<Self>) -> Outcome {
        self.shared
            .metrics
            .upstream_relists
            .get_or_create(&self.labels())
            .inc();
        let mut listing = Listing::default();
        let mut token: Option<String> = None;
        let rv = loop {
            let mut url = format!("{}?limit={PAGE_SIZE}", self.path());
            if let Some(t) = &token {
                url.push_str("&continue=");
                url.push_str(&crate::escape::query(t));
            }
            self.shared
                .metrics
                .upstream_lists
                .get_or_create(&self.labels())
                .inc();
            let body = match self.upstream.get_bytes(&url).await {
                Ok(b) => b,
                Err(e) => return Outcome::Failed(Phase::List, self.failure("list", &url, &e)),
            };
            self.received(body.len());
            let page: ListPage = match serde_json::from_slice(&body) {
                Ok(p) => p,
                Err(e) => return Outcome::Failed(Phase::List, format!("list {url}: {e}")),
            };
            for item in page.items {
                let raw = item.get().as_bytes();
                if raw.len() > self.shared.max_object_bytes() {
                    self.count("relist_object");
                    self.oversized(raw.len());
                    listing.keep.extend(self.key_of(raw));
                    continue;
                }
                if let Err(why) = listing.add(self, raw).await {
                    return Outcome::Failed(Phase::List, why);
                }
            }
            match page.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t),
                None => break page.metadata.resource_version,
            }
        };
        let Ok(rv) = rv.parse::<u64>() else {
            return Outcome::Failed(
                Phase::List,
                format!("list resourceVersion {rv:?} is not an unsigned integer"),
            );
        };
        match listing.finish(self).await {
            Ok((entries, keep)) => {
                self.swap(rv, entries, keep);
                Outcome::Next(Phase::Watch(rv))
            }
            Err(why) => Outcome::Failed(Phase::List, why),
        }
    }

    /// A watch from `from`, or (None) a streaming list: a watch with `sendInitialEvents=true` whose
    /// initial events are buffered until the `k8s.io/initial-events-end` bookmark and swapped in.
    async fn watch(self: &Arc<Self>, from: Option<u64>) -> Outcome {
        // client-go's reflector picks a timeout between 5 and 10 minutes so watches do not all end
        // together; the apiserver ends the watch then, and herald resumes from where it was.
        let timeout = 300 + u64::from(std::process::id() as u16 % 300);
        let mut url = format!(
            "{}?watch=true&allowWatchBookmarks=true&timeoutSeconds={timeout}",
            self.path()
        );
        match from {
            Some(rv) => url.push_str(&format!("&resourceVersion={rv}")),
            None => {
                url.push_str("&sendInitialEvents=true&resourceVersionMatch=NotOlderThan");
                self.shared
                    .metrics
                    .upstream_relists
                    .get_or_create(&self.labels())
                    .inc();
            }
        }
        let resume = |rv: Option<u64>| rv.map_or(Phase::List, Phase::Watch);
        let mut stream = match self.upstream.get(&url).await {
            Ok(s) => s,
            Err(kube::Error::Api(s)) if s.code == 410 => {
                tracing::info!("watch version expired upstream (410); relisting");
                return Outcome::Next(Phase::List);
            }
            Err(kube::Error::Api(s)) if from.is_none() && (s.code == 400 || s.code == 422) => {
                return Outcome::NoStreaming;
            }
            Err(e) => return Outcome::Failed(resume(from), self.failure("watch", &url, &e)),
        };
        self.shared
            .metrics
            .upstream_watches
            .get_or_create(&self.labels())
            .inc();
        if from.is_some() {
            // A resumed watch serves the state herald already holds: it is current again.
            self.shared.set_resource_stale(self.r, false);
        }
        // NB: `rv` moves only once the initial events are in: a stream that breaks before their end
        // must list again, not watch from the middle of a list it never applied.
        let mut rv = from;
        let mut initial: Option<Listing> = from.is_none().then(Listing::default);
        let mut line = Vec::new();
        let mut reader = crate::watch_lines::LineReader::new(self.shared.max_object_bytes());
        let idle = Duration::from_secs(timeout + 60);
        // Events already received are applied together when the stream has nothing more ready.
        let mut pending: Vec<Change> = Vec::new();
        loop {
            line.clear();
            // NB: the reader keeps what it read in `line` (or its skip state) when it is not ready,
            // so polling it once and then awaiting it reads the line whole either way.
            let ready = futures::FutureExt::now_or_never(reader.read(&mut stream, &mut line));
            let read = match ready {
                Some(r) if pending.len() < MAX_BURST => Ok(r),
                ready => {
                    self.flush(&mut pending);
                    match ready {
                        Some(r) => Ok(r),
                        None => {
                            tokio::time::timeout(idle, reader.read(&mut stream, &mut line)).await
                        }
                    }
                }
            };
            let n = match read {
                Ok(Ok(crate::watch_lines::Frame::Line(n))) => {
                    self.received(n);
                    n
                }
                Ok(Ok(crate::watch_lines::Frame::End)) => 0,
                Ok(Ok(crate::watch_lines::Frame::Oversized(bytes))) => {
                    self.received(bytes);
                    self.oversized(bytes);
                    continue;
                }
                Ok(Err(e)) => {
                    self.flush(&mut pending);
                    return Outcome::Failed(resume(rv), format!("watch stream: {e}"));
                }
                Err(_) => return Outcome::Failed(resume(rv), "watch stream went silent".into()),
            };
            if n == 0 {
                // The server ended the watch (its timeout): resume where we are.
                self.flush(&mut pending);
                return Outcome::Next(resume(rv));
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let ev: Line = match serde_json::from_slice(&line) {
                Ok(ev) => ev,
                Err(e) => {
                    self.flush(&mut pending);
                    return Outcome::Failed(resume(rv), format!("undecodable watch line: {e}"));
                }
            };
            let raw = ev.object.get().as_bytes();
            match ev.ty.as_ref() {
                "ADDED" | "MODIFIED" => match &mut initial {
                    Some(init) => {
                        if let Err(why) = init.add(self, raw).await {
                            return Outcome::Failed(Phase::List, why);
                        }
                    }
                    None => match self.ingest(raw) {
                        Ok(entry) => {
                            rv = Some(entry.entry.rv.max(rv.unwrap_or(0)));
                            self.count("apply");
                            pending.push(Change::Upsert(entry));
                        }
                        Err(why) => self.malformed(&why),
                    },
                },
                "DELETED" => match self.head(raw) {
                    Ok(h) if initial.is_some() => {
                        if let Some(init) = &mut initial
                            && let Err(why) = init.remove(self, &h.key).await
                        {
                            return Outcome::Failed(Phase::List, why);
                        }
                    }
                    Ok(h) => {
                        rv = Some(h.rv.max(rv.unwrap_or(0)));
                        let bytes = self.kept_bytes(&h.key, raw);
                        let entry = Arc::new(Entry {
                            key: h.key,
                            rv: h.rv,
                            labels: h.labels,
                            fields: h.fields,
                            uid_hash: h.uid_hash,
                            bytes,
                            proto: Default::default(),
                        });
                        self.count("delete");
                        pending.push(Change::Remove(entry));
                    }
                    Err(e) => self.malformed(&e.to_string()),
                },
                "BOOKMARK" => {
                    let m: Marker = serde_json::from_slice(raw).unwrap_or_default();
                    let Ok(b) = m.metadata.resource_version.parse::<u64>() else {
                        continue;
                    };
                    let end = m
                        .metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .is_some_and(|v| v == "true");
                    self.flush(&mut pending);
                    match initial.take() {
                        Some(init) if end => match init.finish(self).await {
                            Ok((buf, keep)) => {
                                rv = Some(b);
                                self.swap(b, buf, keep);
                            }
                            Err(why) => return Outcome::Failed(Phase::List, why),
                        },
                        Some(buffered) => initial = Some(buffered),
                        None => {
                            rv = Some(b.max(rv.unwrap_or(0)));
                            self.shared.cache.bookmark(self.r, b);
                        }
                    }
                }
                "ERROR" => {
                    self.flush(&mut pending);
                    let m: Marker = serde_json::from_slice(raw).unwrap_or_default();
                    if m.code == 410 {
                        tracing::info!(
                            message = m.message,
                            "watch expired upstream (410); relisting"
                        );
                        return Outcome::Next(Phase::List);
                    }
                    return Outcome::Failed(
                        if initial.is_some() {
                            Phase::List
                        } else {
                            resume(rv)
                        },
                        format!("watch error {}: {}", m.code, m.message),
                    );
                }
                other => tracing::debug!(event = other, "unknown watch event type ignored"),
            }
        }
    }
}

/// The objects of a list — a streaming list's initial events, or a paged LIST's items — ingested
/// off the feed's thread. Reading the stream and splitting it into objects is a fraction of what
/// ingesting an object costs (its head, its slim projection, its compression against its siblings):
/// ingested in line on the one upstream thread, the 150,000 pods of `k8s-limits` kept one core busy
/// for ~5 s while the other waited for the list to end to build groups. So objects are gathered into
/// batches, each batch is ingested on the blocking pool while the stream (or the next page) is read,
/// and results are taken back in the order they came.
#[derive(Default)]
struct Listing {
    entries: Vec<Ingested>,
    /// Listed objects that could not be ingested: their stored version is kept.
    keep: Vec<Key>,
    batch: Batch,
    running: std::collections::VecDeque<JoinHandle<Vec<Result<Ingested, Refused>>>>,
}

/// Objects' JSON, one after the other.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    items: Vec<std::ops::Range<usize>>,
}

/// An object the feed could not ingest: why, and its key when it has one.
struct Refused(String, Option<Key>);

impl Listing {
    /// A batch is handed to the blocking pool at this many objects or bytes, whichever comes first.
    const BATCH_ITEMS: usize = 256;
    const BATCH_BYTES: usize = 1 << 20;

    /// Batches being ingested at once at most: enough to keep every core busy while the stream is
    /// read, few enough to bound the objects held twice (as received and as ingested).
    fn running_max() -> usize {
        2 * std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    async fn add(&mut self, feed: &Arc<Feed>, raw: &[u8]) -> Result<(), String> {
        feed.count("relist_object");
        let at = self.batch.bytes.len();
        self.batch.bytes.extend_from_slice(raw);
        self.batch.items.push(at..at + raw.len());
        if self.batch.items.len() >= Self::BATCH_ITEMS
            || self.batch.bytes.len() >= Self::BATCH_BYTES
        {
            self.dispatch(feed);
            while self.running.len() > Self::running_max() {
                self.take_oldest(feed).await?;
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, feed: &Arc<Feed>) {
        if self.batch.items.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let feed = feed.clone();
        self.running.push_back(tokio::task::spawn_blocking(move || {
            batch
                .items
                .iter()
                .map(|r| {
                    let raw = &batch.bytes[r.clone()];
                    feed.ingest(raw)
                        .map_err(|why| Refused(why, feed.key_of(raw)))
                })
                .collect()
        }));
    }

    async fn take_oldest(&mut self, feed: &Feed) -> Result<(), String> {
        let Some(running) = self.running.pop_front() else {
            return Ok(());
        };
        let done = running
            .await
            .map_err(|e| format!("ingesting a list's objects: {e}"))?;
        for item in done {
            match item {
                Ok(entry) => self.entries.push(entry),
                Err(Refused(why, key)) => {
                    feed.malformed(&why);
                    self.keep.extend(key);
                }
            }
        }
        Ok(())
    }

    /// Every object so far, ingested and in order.
    async fn settle(&mut self, feed: &Arc<Feed>) -> Result<(), String> {
        self.dispatch(feed);
        while !self.running.is_empty() {
            self.take_oldest(feed).await?;
        }
        Ok(())
    }

    /// A deletion among the initial events: the object is not part of the list.
    async fn remove(&mut self, feed: &Arc<Feed>, key: &Key) -> Result<(), String> {
        self.settle(feed).await?;
        self.entries.retain(|e| e.entry.key != *key);
        Ok(())
    }

    /// The list: its objects, and the keys of those that could not be ingested.
    async fn finish(mut self, feed: &Arc<Feed>) -> Result<(Vec<Ingested>, Vec<Key>), String> {
        self.settle(feed).await?;
        Ok((self.entries, self.keep))
    }
}

#[cfg(test)]
mod tests {
    use axum::extract::RawQuery;
    use axum::routing::get;
    use serde_json::json;

    use super::*;

    fn mk_pod(name: &str, rv: u64, ip: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": "default", "name": name, "resourceVersion": rv.to_string(),
                            "managedFields": [{"manager": "kubelet"}]},
               "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]},
               "status": {"podIP": ip}})
    }

    fn mk_malformed_pod(name: &str, rv: u64) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": "default", "name": name, "resourceVersion": rv.to_string()},
               "spec": {"containers": "not a list"}})
    }

    /// Serves `app` on a free loopback port; its URL.
    async fn serve_app(app: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
        format!("http://{addr}")
    }

    /// A refusal comes back to the feed at once, to be counted, logged and backed off by the feed's
    /// own rule: the feeds' client does not send a 429 or a 503 again inside itself (kube-rs's
    /// default retry layer did, 15 times, hiding kube-apiserver's API Priority and Fairness
    /// rejections from herald for minutes).
    #[tokio::test]
    async fn a_refusal_comes_back_to_the_feed_not_retried_inside_the_client() {
        for code in [
            http::StatusCode::TOO_MANY_REQUESTS,
            http::StatusCode::SERVICE_UNAVAILABLE,
        ] {
            let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let seen = hits.clone();
            let app = axum::Router::new().route(
                "/api/v1/pods",
                get(move || {
                    let seen = seen.clone();
                    async move {
                        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                            "message": "too many requests, please try again later.",
                                            "reason": "TooManyRequests", "code": code.as_u16()});
                        (
                            code,
                            [("retry-after", "1"), ("content-type", "application/json")],
                            status.to_string(),
                        )
                    }
                }),
            );
            let url = serve_app(app).await;
            let upstream = Upstream::new(
                client(kube::Config::new(url.parse().expect("url")), "test").expect("client"),
                Compression::default(),
            );
            match upstream.get("/api/v1/pods?watch=true").await {
                Err(kube::Error::Api(s)) => assert_eq!(s.code, code.as_u16()),
                Err(e) => panic!("{code}: {e}"),
                Ok(_) => panic!("{code}: a refusal read as a success"),
            }
            assert_eq!(
                hits.load(std::sync::atomic::Ordering::SeqCst),
                1,
                "{code} was sent once"
            );
            // And a feed counts it at once (kube's retries took 15 Retry-After seconds at least).
            let (shared, stop, tasks) = pod_feed(&url, true).await;
            let errors = || {
                shared
                    .metrics
                    .upstream_errors
                    .get_or_create(&Metrics::kind("pods"))
                    .get()
            };
            for _ in 0..150 {
                if errors() > 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(
                errors() > 0,
                "{code}: the feed counted no failure within 3 s"
            );
            stop.cancel();
            for t in tasks {
                t.await.expect("feed stops");
            }
        }
    }

    /// A scripted upstream: one LIST page, then a watch stream of `events` that stays open.
    async fn fake_upstream(list: Vec<serde_json::Value>, events: Vec<serde_json::Value>) -> String {
        let app = axum::Router::new().route(
            "/api/v1/pods",
            get(move |RawQuery(q): RawQuery| {
                let (list, events) = (list.clone(), events.clone());
                async move {
                    if q.as_deref().unwrap_or("").contains("watch=true") {
                        let mut body = String::new();
                        for e in events {
                            body.push_str(&e.to_string());
                            body.push('\n');
                        }
                        let first =
                            futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
                        let hold = futures::stream::pending();
                        axum::body::Body::from_stream(futures::StreamExt::chain(first, hold))
                    } else {
                        axum::body::Body::from(
                            json!({"kind": "PodList", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": "10"}, "items": list})
                            .to_string(),
                        )
                    }
                }
            }),
        );
        serve_app(app).await
    }

    #[tokio::test]
    async fn malformed_objects_are_skipped_and_counted_keeping_the_last_good_version() {
        let url = fake_upstream(
            vec![mk_pod("a", 5, "127.16.0.1"), mk_malformed_pod("bad", 6)],
            vec![
                json!({"type": "MODIFIED", "object": mk_malformed_pod("a", 11)}),
                json!({"type": "ADDED", "object": mk_pod("c", 12, "127.16.0.3")}),
                json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                                       "metadata": {"resourceVersion": "20"}}}),
            ],
        )
        .await;
        let (shared, stop, tasks) = pod_feed(&url, false).await;
        let r = shared.cache.id_of(WatchKind::Pod).expect("pods cached");
        for _ in 0..100 {
            if shared.cache.resource_version(r) >= 20 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            shared.cache.resource_version(r),
            20,
            "the bookmark advanced the version"
        );
        assert_eq!(
            shared.job_counts(0).1,
            2,
            "a (last good version) and c are targets"
        );
        let a = shared
            .cache
            .read(r)
            .get_parts("default", "a")
            .cloned()
            .expect("a kept");
        assert_eq!(a.rv, 5, "a keeps its last good version");
        assert!(
            !String::from_utf8_lossy(&a.bytes.get()).contains("managedFields"),
            "managedFields are dropped"
        );
        assert!(shared.cache.read(r).get_parts("default", "bad").is_none());
        let malformed = shared
            .metrics
            .upstream_malformed
            .get_or_create(&Metrics::kind("pods"))
            .get();
        assert_eq!(malformed, 2);
        assert!(shared.ready());
        stop.cancel();
        for t in tasks {
            t.await.expect("feed stops");
        }
    }

    /// A scripted upstream for streaming lists: each watch request takes the next script's lines and
    /// then ends the stream (`false`) or holds it open (`true`); the queries are recorded.
    async fn fake_streaming(
        scripts: Vec<(Vec<serde_json::Value>, bool)>,
    ) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        let scripts = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::from(
            scripts,
        )));
        let queries = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = queries.clone();
        let app = axum::Router::new().route(
            "/api/v1/pods",
            get(move |RawQuery(q): RawQuery| {
                let (scripts, seen) = (scripts.clone(), seen.clone());
                async move {
                    seen.lock().expect("lock").push(q.unwrap_or_default());
                    let (lines, hold) = scripts
                        .lock()
                        .expect("lock")
                        .pop_front()
                        .unwrap_or((Vec::new(), true));
                    let mut body = String::new();
                    for e in lines {
                        body.push_str(&e.to_string());
                        body.push('\n');
                    }
                    let first = futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
                    if hold {
                        axum::body::Body::from_stream(futures::StreamExt::chain(
                            first,
                            futures::stream::pending(),
                        ))
                    } else {
                        axum::body::Body::from_stream(first)
                    }
                }
            }),
        );
        (serve_app(app).await, queries)
    }

    fn bookmark(rv: u64, end: bool) -> serde_json::Value {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": meta}})
    }

    /// A herald with a pod job fed from `url`, by streaming lists or by list+watch.
    async fn pod_feed(
        url: &str,
        streaming: bool,
    ) -> (Arc<Shared>, CancellationToken, Vec<JoinHandle<()>>) {
        let cfg = herald_core::parse_config("jobs:\n- name: pods\n  role: pod\n").expect("valid");
        let shared = Shared::with_kube_api(
            crate::serve::job_specs(&cfg, None).expect("valid"),
            crate::shared::KubeApiOptions::default(),
        );
        let client = client(kube::Config::new(url.parse().expect("url")), "test").expect("client");
        let stop = CancellationToken::new();
        let tasks = spawn(
            Upstream::new(client, Compression::default()),
            shared.clone(),
            streaming,
            stop.clone(),
        );
        (shared, stop, tasks)
    }

    async fn wait_ready(shared: &Shared) {
        for _ in 0..250 {
            if shared.ready() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("not ready");
    }

    /// The initial events are ingested in batches off the feed's thread: the list applied is every
    /// object in the order given, less those deleted among the initial events and those that could
    /// not be ingested, across many batches.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streaming_list_ingested_in_batches_is_the_list_given() {
        let n = 3 * Listing::BATCH_ITEMS + 17;
        let mut lines: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                let ip = format!("127.16.{}.{}", i / 250, i % 250 + 1);
                json!({"type": "ADDED", "object": mk_pod(&format!("p{i:04}"), 100 + i as u64, &ip)})
            })
            .collect();
        lines.insert(
            300,
            json!({"type": "ADDED", "object": mk_malformed_pod("bad", 99)}),
        );
        // A deletion among the initial events, of an object in an earlier batch.
        lines.insert(
            600,
            json!({"type": "DELETED", "object": mk_pod("p0010", 150, "127.16.0.11")}),
        );
        lines.push(bookmark(5000, true));
        let (url, _) = fake_streaming(vec![(lines, true)]).await;
        let (shared, stop, tasks) = pod_feed(&url, true).await;
        wait_ready(&shared).await;
        let r = shared.cache.id_of(WatchKind::Pod).expect("pods cached");
        assert_eq!(shared.cache.resource_version(r), 5000);
        assert_eq!(shared.cache.len(r), n - 1, "every pod but the deleted one");
        {
            let read = shared.cache.read(r);
            assert!(read.get_parts("default", "p0010").is_none(), "deleted");
            assert!(read.get_parts("default", "bad").is_none(), "malformed");
            for i in [0, 11, 255, 256, 511, n - 1] {
                let e = read
                    .get_parts("default", &format!("p{i:04}"))
                    .unwrap_or_else(|| panic!("p{i:04} listed"));
                assert_eq!(e.rv, 100 + i as u64);
            }
        }
        assert_eq!(shared.job_counts(0).1, n - 1, "one target per pod");
        let malformed = shared
            .metrics
            .upstream_malformed
            .get_or_create(&Metrics::kind("pods"))
            .get();
        assert_eq!(malformed, 1);
        stop.cancel();
        for t in tasks {
            t.await.expect("feed stops");
        }
    }

    /// A scripted paged upstream: LIST answers `page` items at a time from `items` with continue
    /// tokens (the offset of the next page), as the apiserver pages with `limit`; a watch holds open.
    async fn fake_paged(
        items: Vec<serde_json::Value>,
        page: usize,
    ) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        let queries = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = queries.clone();
        let app = axum::Router::new().route(
            "/api/v1/pods",
            get(move |RawQuery(q): RawQuery| {
                let (items, seen) = (items.clone(), seen.clone());
                async move {
                    let q = q.unwrap_or_default();
                    seen.lock().expect("lock").push(q.clone());
                    if q.contains("watch=true") {
                        return axum::body::Body::from_stream(futures::stream::pending::<
                            Result<String, std::io::Error>,
                        >());
                    }
                    let from: usize = q
                        .split('&')
                        .find_map(|kv| kv.strip_prefix("continue="))
                        .map_or(0, |t| t.parse().expect("a token this upstream gave"));
                    let to = (from + page).min(items.len());
                    let token = if to < items.len() {
                        to.to_string()
                    } else {
                        String::new()
                    };
                    axum::body::Body::from(
                        json!({"kind": "PodList", "apiVersion": "v1",
                               "metadata": {"resourceVersion": "7000", "continue": token},
                               "items": items[from..to]})
                        .to_string(),
                    )
                }
            }),
        );
        (serve_app(app).await, queries)
    }

    /// A paged LIST's items are ingested in batches across pages, as a streaming list's are: the
    /// list applied is every object in order, less those that could not be ingested, whose count
    /// and whose place in the received-objects metric are those of a streaming list.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn paged_list_ingested_in_batches_is_the_list_given() {
        let n = 3 * Listing::BATCH_ITEMS + 17;
        let mut items: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                let ip = format!("127.16.{}.{}", i / 250, i % 250 + 1);
                mk_pod(&format!("p{i:04}"), 100 + i as u64, &ip)
            })
            .collect();
        items.insert(300, mk_malformed_pod("bad", 99));
        let (url, queries) = fake_paged(items, 200).await;
        let (shared, stop, tasks) = pod_feed(&url, false).await;
        wait_ready(&shared).await;
        let r = shared.cache.id_of(WatchKind::Pod).expect("pods cached");
        assert_eq!(shared.cache.resource_version(r), 7000);
        assert_eq!(shared.cache.len(r), n, "every pod");
        {
            let read = shared.cache.read(r);
            assert!(read.get_parts("default", "bad").is_none(), "malformed");
            for i in [0, 199, 200, 255, 256, 511, n - 1] {
                let e = read
                    .get_parts("default", &format!("p{i:04}"))
                    .unwrap_or_else(|| panic!("p{i:04} listed"));
                assert_eq!(e.rv, 100 + i as u64);
            }
        }
        assert_eq!(shared.job_counts(0).1, n, "one target per pod");
        let metrics = &shared.metrics;
        assert_eq!(
            metrics
                .upstream_malformed
                .get_or_create(&Metrics::kind("pods"))
                .get(),
            1
        );
        let received = metrics
            .upstream_events
            .get_or_create(&EventLabels {
                kind: "pods".into(),
                event: "relist_object".into(),
            })
            .get();
        assert_eq!(received, n as u64 + 1, "every object received is counted");
        let lists: Vec<String> = queries
            .lock()
            .expect("lock")
            .iter()
            .filter(|q| !q.contains("watch=true"))
            .cloned()
            .collect();
        assert_eq!(lists.len(), (n + 1).div_ceil(200), "one request per page");
        assert!(lists[1].contains("continue=200"), "{lists:?}");
        stop.cancel();
        for t in tasks {
            t.await.expect("feed stops");
        }
    }

    /// A streaming list whose stream ends before its initial events do is listed again from the
    /// start: a watch from the versions of the events it did get would never bring the rest.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streaming_list_cut_short_is_listed_again() {
        let added = |i: u64| json!({"type": "ADDED", "object": mk_pod(&format!("p{i}"), 10 + i, &format!("127.16.0.{}", i + 1))});
        let cut: Vec<_> = (0..5).map(added).collect();
        let mut whole: Vec<_> = (0..8).map(added).collect();
        whole.push(bookmark(40, true));
        let (url, queries) = fake_streaming(vec![(cut, false), (whole, true)]).await;
        let (shared, stop, tasks) = pod_feed(&url, true).await;
        wait_ready(&shared).await;
        let r = shared.cache.id_of(WatchKind::Pod).expect("pods cached");
        assert_eq!(shared.cache.len(r), 8);
        let queries = queries.lock().expect("lock").clone();
        assert_eq!(queries.len(), 2, "{queries:?}");
        assert!(
            queries[1].contains("sendInitialEvents=true")
                && !queries[1].contains("resourceVersion="),
            "the second request lists again: {}",
            queries[1]
        );
        stop.cancel();
        for t in tasks {
            t.await.expect("feed stops");
        }
    }
}
