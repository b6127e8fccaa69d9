//! What a server plugs into the face: its catalog, its stores, and hooks for accounting, admission
//! and fault injection.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use bytes::Bytes;
use tokio::sync::watch;

use crate::log::{Entry, Event, Key, ListAt, Page, StoreError};
use crate::request::{Query, Target};
use crate::resource::{Catalog, ResId};
use crate::status::ApiError;

/// Watch timing.
#[derive(Debug, Clone, Copy)]
pub struct WatchSettings {
    /// How often a watch with allowWatchBookmarks gets a bookmark (the apiserver: about a minute).
    pub bookmark_interval: Duration,
    /// A watch's length when the client sets no timeoutSeconds (the apiserver: 30–60 minutes).
    pub default_timeout: Duration,
    /// How long a request for a resourceVersion the server has not reached yet waits for it before
    /// 504 "Too large resource version" (the apiserver's watch cache: 3 s).
    pub wait_for_rv: Duration,
    /// How long a watcher may leave its buffer full before it is closed as unresponsive (the
    /// apiserver closes a cacheWatcher whose channel stays full; the client then re-watches).
    pub slow_watcher_timeout: Duration,
    /// After a write, how long a watcher waits before its next one, so that the events arriving
    /// meanwhile go out in one write instead of one write each (zero: every read is written at once).
    /// The first event after a quiet spell is written at once; only a watcher that wrote within the
    /// window waits, at most this long. herald's face sets it (`kube_api.watch_batch_ms`); the
    /// apiserver writes each event as it dispatches it.
    pub batch_window: Duration,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            bookmark_interval: Duration::from_secs(60),
            default_timeout: Duration::from_secs(1800),
            wait_for_rv: Duration::from_secs(3),
            slow_watcher_timeout: Duration::from_secs(10),
            batch_window: Duration::ZERO,
        }
    }
}

/// A write request, for servers that take writes (kube-sim).
#[derive(Debug)]
pub struct WriteRequest<'a> {
    pub method: &'a Method,
    pub target: &'a Target,
    pub query: &'a Query,
    pub body: &'a [u8],
}

/// Per-watch accounting.
pub trait WatchObserver: Send + Sync {
    /// `lines` lines (events, bookmarks or errors) of `bytes` in all went to the client in one write.
    fn sent(&self, _lines: u64, _bytes: u64) {}
    /// The watch was closed because its client stopped reading.
    fn closed_slow(&self) {}
}

/// An observer that counts nothing.
pub struct NoopObserver;
impl WatchObserver for NoopObserver {}

/// A store and its hooks. `rv` arguments and results are the store's resourceVersions.
pub trait Backend: Send + Sync + 'static {
    fn catalog(&self) -> &Catalog;
    fn settings(&self) -> &WatchSettings;
    /// host:port, for discovery's serverAddressByClientCIDRs.
    fn server_address(&self) -> String;

    /// The newest RV the resource's state is complete to.
    fn resource_version(&self, r: ResId) -> u64;
    /// Wakes on every change of the resource (the value is its newest RV).
    fn subscribe(&self, r: ResId) -> watch::Receiver<u64>;
    fn get(&self, r: ResId, namespace: &str, name: &str) -> Option<Arc<Entry>>;
    #[allow(clippy::too_many_arguments)]
    fn list(
        &self,
        r: ResId,
        ns: Option<&str>,
        at: ListAt,
        after: Option<&Key>,
        limit: Option<usize>,
        indexed: Option<&str>,
        filter: &dyn Fn(&Entry) -> bool,
    ) -> Result<Page, StoreError>;
    /// At most `max` events after `rv`, and the RV they are complete up to (when fewer than `max`
    /// came back; otherwise the caller continues from the last event's RV).
    fn events_after(
        &self,
        r: ResId,
        rv: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), StoreError>;

    /// Wakes on the changes of the resource's objects whose [`crate::log::INDEXED_FIELD`] is
    /// `value` only (a kubelet's watch of its node's pods); `None` when the backend does not
    /// dispatch by it, and the watch wakes on every change of the resource (`subscribe`).
    fn subscribe_indexed(&self, _r: ResId, _value: &str) -> Option<watch::Receiver<u64>> {
        None
    }
    /// For a watch subscribed with `subscribe_indexed`: as `events_after`, but only the events whose
    /// object or previous state has `value` (`ResourceLog::events_of_value_after`).
    fn events_of_value_after(
        &self,
        r: ResId,
        _value: &str,
        rv: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), StoreError> {
        self.events_after(r, rv, max)
    }

    /// Create, update or delete. Read-only servers keep the default: 405 with a Status.
    fn write(&self, r: ResId, req: WriteRequest<'_>) -> Result<(StatusCode, Bytes), ApiError> {
        let _ = r;
        Err(ApiError::method_not_allowed(format!(
            "this server is a read-only cache: {} is not allowed",
            req.method
        )))
    }

    /// Whether a list at resourceVersion "0" honours `limit` (pages with continue tokens). The
    /// apiserver's watch cache does not: it answers every object in one response (client-go's
    /// reflector relies on it, listing at "0" with a limit it knows is ignored). kube-sim answers
    /// as the watch cache; herald's face pages.
    fn limit_at_resource_version_zero(&self) -> bool {
        true
    }

    /// Admission of a new list or watch of resource `r`; an error (429 with Retry-After) refuses it.
    /// `reads_state`: the request reads the current state (a list, or a watch with initial events),
    /// where a watch from a resourceVersion does not; rate limits need only charge the former.
    fn admit(&self, _verb: &str, _r: ResId, _reads_state: bool) -> Result<(), ApiError> {
        Ok(())
    }
    /// A request finished (watches: when started), answered in `content_type`.
    fn request_done(
        &self,
        _verb: &str,
        _resource: &str,
        _code: u16,
        _ua: &str,
        _bytes: u64,
        _content_type: &str,
    ) {
    }
    /// A watch started streaming in `content_type`; the observer is dropped when it ends.
    fn watch_opened(
        &self,
        _resource: &str,
        _ua: &str,
        _content_type: &str,
    ) -> Box<dyn WatchObserver> {
        Box::new(NoopObserver)
    }
    /// A signal that closes every open watch when it changes (fault injection, shutdown).
    fn closer(&self) -> Option<watch::Receiver<u64>> {
        None
    }
    /// True once the server is shutting down for good: a watch starting now ends at once. NB: the
    /// closer only reaches watches already subscribed to it, and a client whose watch was just
    /// closed re-watches at once, on a keep-alive connection the server has not closed yet.
    fn closing(&self) -> bool {
        false
    }
    /// A delay before each batch of events (fault injection).
    fn watch_delay(&self) -> Duration {
        Duration::ZERO
    }
}
