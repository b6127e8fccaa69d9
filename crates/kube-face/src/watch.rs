//! Serving a watch: the resourceVersion start modes of the API concepts doc
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-watch>), selector
//! transitions (an object leaving the selection is sent as DELETED), bookmarks, timeouts, and 410 when the
//! client's RV has left the history window.
//!
//! Each watch reads the shared per-resource history by RV cursor and shares its encoded event lines:
//! there is no per-watcher queue of events, only a small buffer of lines between the watch task and
//! the connection. A client that leaves that buffer full for `slow_watcher_timeout` is closed, as the
//! apiserver closes an unresponsive cacheWatcher; it re-watches from its last RV, and past the history
//! window it gets 410 Expired and relists. Either way the others never wait for it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use crate::backend::{Backend, WatchObserver};
use crate::log::{Entry, Event, EventType, ListAt, event_line};
use crate::proto;
use crate::request::{Query, Target, parse_rv, selected};
use crate::resource::ResId;
use crate::serve::{Out, too_large, wait_for_rv};
use crate::status::ApiError;

/// Chunks (one or more event lines) buffered between the watch task and the HTTP body. When full, the
/// task waits up to `slow_watcher_timeout`, then closes the watch.
const BUFFER_CHUNKS: usize = 64;

/// Events one watcher sends per turn. NB: a watcher far behind would otherwise copy its whole backlog
/// in one turn while thousands of others (and the feed that fills the history) wait.
const MAX_TURN: usize = 256;

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Synthetic ADDED events for the current state, then changes (RV unset or "0"; or
    /// sendInitialEvents=true, which also ends the initial events with the `k8s.io/initial-events-end`
    /// bookmark when bookmarks are allowed).
    InitialEvents { end_bookmark: bool },
    /// Changes after this RV only.
    After(u64),
    /// Changes after the newest RV (sendInitialEvents=false without a resourceVersion).
    Now,
}

/// Where a watch starts. Its options are valid ([`crate::request::validate_list_options`]): with
/// sendInitialEvents, resourceVersionMatch is NotOlderThan, else it is unset. NB: the apiserver
/// serves sendInitialEvents without allowWatchBookmarks: the initial events come, but no bookmark
/// tells where they end.
fn start_mode(q: &Query) -> Result<Start, ApiError> {
    let rv = q.resource_version.as_deref();
    match q.send_initial_events {
        Some(send) => match (send, rv) {
            (true, _) => Ok(Start::InitialEvents {
                end_bookmark: q.allow_bookmarks,
            }),
            (false, None | Some("0")) => Ok(Start::Now),
            (false, Some(v)) => Ok(Start::After(parse_rv(v)?)),
        },
        None => match rv {
            None | Some("0") => Ok(Start::InitialEvents {
                end_bookmark: false,
            }),
            Some(v) => Ok(Start::After(parse_rv(v)?)),
        },
    }
}

/// Whether a watch starts with the current state (initial events: a list in all but name), rather
/// than from a resourceVersion or from now.
pub fn reads_state(q: &Query) -> bool {
    matches!(start_mode(q), Ok(Start::InitialEvents { .. }))
}

/// Validates the request and starts the watch task; errors before the stream starts are plain Status
/// responses, errors after it are ERROR events.
pub async fn start<B: Backend>(
    backend: Arc<B>,
    target: &Target,
    mut q: Query,
    ua: &str,
    as_table: bool,
    out: Out,
) -> Result<Response, ApiError> {
    let start = start_mode(&q)?;
    let r = target.resource;
    if let Start::After(rv) = start
        && !wait_for_rv(&*backend, r, rv).await
    {
        return Err(too_large(rv, backend.resource_version(r)));
    }
    if let Some(name) = &target.name {
        // A watch on one object (legacy /watch/.../name path) is a watch with a name field selector.
        q.field.requirements.push(kube_selectors::FieldRequirement {
            field: "metadata.name".into(),
            value: name.clone(),
            negated: false,
        });
    }
    let timeout = match q.timeout_seconds {
        Some(s) if s > 0 => Duration::from_secs(s),
        _ => backend.settings().default_timeout,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(BUFFER_CHUNKS);
    let plural = backend.catalog().get(r).plural.clone();
    let content_type = out.format.watch_content_type();
    let observer = backend.watch_opened(&plural, ua, content_type);
    let w = Watch {
        backend,
        r,
        namespace: target.namespace.clone(),
        q,
        tx,
        observer,
        table_columns_sent: as_table.then(|| std::sync::atomic::AtomicBool::new(false)),
        pending: Vec::new(),
        out,
    };
    tokio::spawn(w.run(start, timeout));
    let stream =
        tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>);
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache, private"),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

use tokio_stream::StreamExt as _;

/// Why a watch ended (for logs and tests).
#[derive(Debug, PartialEq, Eq)]
enum End {
    ClientGone,
    /// The client left its buffer full for too long.
    Slow,
    Timeout,
    Closed,
    Expired,
}

struct Watch<B: Backend> {
    backend: Arc<B>,
    r: ResId,
    namespace: Option<String>,
    q: Query,
    tx: mpsc::Sender<Bytes>,
    observer: Box<dyn WatchObserver>,
    /// Set when the client asked for Tables (kubectl get -w): whether the column definitions went out.
    table_columns_sent: Option<std::sync::atomic::AtomicBool>,
    /// Lines of the current batch, sent as one chunk by `flush`.
    pending: Vec<Bytes>,
    /// The stream's format (JSON lines, or protobuf frames).
    out: Out,
}

impl<B: Backend> Watch<B> {
    fn wants(&self, e: &Entry) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| e.namespace() == ns)
            && selected(&self.q, e)
    }

    /// An object's event line (or frame) of type `ty`.
    fn obj_line(&self, ty: &str, e: &Entry) -> Bytes {
        match self.out.proto() {
            Some(msg) => proto::watch_frame(
                ty,
                &proto::envelope(&self.out.api_version, &self.out.kind, &e.proto(msg)),
            ),
            None => event_line(ty, &e.bytes.get()),
        }
    }

    /// A stored event's line (or frame), encoded once and shared by every watcher.
    fn event_line(&self, ev: &Event) -> Bytes {
        match self.out.proto() {
            Some(msg) => ev.frame(msg, &self.out.api_version, &self.out.kind),
            None => ev.line(),
        }
    }

    /// An ERROR event carrying a Status.
    fn error_line(&self, err: &ApiError) -> Bytes {
        let status = err.status_json();
        match self.out.proto() {
            Some(_) => proto::watch_frame("ERROR", &proto::status(&status)),
            None => event_line("ERROR", status.to_string().as_bytes()),
        }
    }

    /// Queues a line for the next `flush`.
    fn push(&mut self, line: Bytes) {
        let line = match &self.table_columns_sent {
            Some(sent) => self.as_table(&line, sent),
            None => line,
        };
        self.pending.push(line);
    }

    /// Sends the queued lines as one chunk: one write to the connection per batch rather than per
    /// event, which is what lets thousands of watchers share a burst of events.
    async fn flush(&mut self) -> Result<(), End> {
        let lines = self.pending.len() as u64;
        let chunk = match self.pending.len() {
            0 => return Ok(()),
            1 => self.pending.pop().expect("one line"),
            _ => {
                let mut buf = Vec::with_capacity(self.pending.iter().map(|l| l.len()).sum());
                for l in self.pending.drain(..) {
                    buf.extend_from_slice(&l);
                }
                Bytes::from(buf)
            }
        };
        let n = chunk.len() as u64;
        let slow = self.backend.settings().slow_watcher_timeout;
        match self.tx.send_timeout(chunk, slow).await {
            Ok(()) => {
                self.observer.sent(lines, n);
                Ok(())
            }
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Err(End::ClientGone),
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
                self.observer.closed_slow();
                Err(End::Slow)
            }
        }
    }

    async fn send(&mut self, line: Bytes) -> Result<(), End> {
        self.push(line);
        self.flush().await
    }

    /// An object event re-encoded with a one-row Table, as the apiserver does for Table watches.
    fn as_table(&self, line: &Bytes, columns_sent: &std::sync::atomic::AtomicBool) -> Bytes {
        let Ok(mut ev) = serde_json::from_slice::<serde_json::Value>(line) else {
            return line.clone();
        };
        if !matches!(ev["type"].as_str(), Some("ADDED" | "MODIFIED" | "DELETED")) {
            return line.clone();
        }
        let first = !columns_sent.swap(true, std::sync::atomic::Ordering::Relaxed);
        let obj = ev["object"].take();
        let meta = serde_json::json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
        ev["object"] = crate::table::table(self.backend.catalog().get(self.r), &[obj], meta, first);
        let mut out = ev.to_string().into_bytes();
        out.push(b'\n');
        Bytes::from(out)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let obj = self
            .backend
            .catalog()
            .get(self.r)
            .bookmark_object(rv, initial_end);
        match self.out.proto() {
            Some(msg) => {
                let raw = proto::schema().encode(msg, obj.as_bytes());
                proto::watch_frame(
                    "BOOKMARK",
                    &proto::envelope(&self.out.api_version, &self.out.kind, &raw),
                )
            }
            None => event_line("BOOKMARK", obj.as_bytes()),
        }
    }

    async fn run(mut self, start: Start, timeout: Duration) {
        let end = match self.stream(start, timeout).await {
            Ok(end) | Err(end) => end,
        };
        tracing::debug!(resource = self.r, ?end, "watch ended");
    }

    async fn stream(&mut self, start: Start, timeout: Duration) -> Result<End, End> {
        let backend = self.backend.clone();
        let r = self.r;
        // A watch that selects one value of the indexed field (a node's pods) wakes on that value's
        // changes only and reads only its events, where the backend dispatches by it.
        let by_value = crate::log::indexed_value(&self.q.field).and_then(|v| {
            backend
                .subscribe_indexed(r, v)
                .map(|rx| (v.to_string(), rx))
        });
        let (by_value, mut rv_rx) = match by_value {
            Some((v, rx)) => (Some(v), rx),
            None => (None, backend.subscribe(r)),
        };
        let mut closer = backend.closer();
        if let Some(c) = closer.as_mut() {
            c.mark_unchanged();
        }
        // After mark_unchanged: a shutdown that set `closing` after this check signals the closer
        // after it too, so this watch sees one or the other.
        if backend.closing() {
            return Ok(End::Closed);
        }
        let began = Instant::now();
        let deadline = began + timeout;
        // "Shortly before the timeout" a bookmark lets the client resume without a relist.
        let final_bookmark_at = deadline - timeout.min(Duration::from_secs(2)) / 2;
        let interval = backend.settings().bookmark_interval;
        let mut next_bookmark = began + interval;
        let mut final_bookmark_sent = false;
        let mut bookmark_due = false;

        // Bookmarks tell a watcher of progress past what the server held when the watch began
        // (the apiserver's cacheWatcher sends none at or below the version its initial events
        // reached): a watch of a quiet resource gets no bookmark, however long it runs.
        let mut held_at_start = backend.resource_version(r);
        let mut cursor = match start {
            Start::After(rv) => {
                held_at_start = held_at_start.max(rv);
                rv
            }
            Start::Now => held_at_start,
            Start::InitialEvents { end_bookmark } => {
                rv_rx.mark_unchanged();
                let page = backend
                    .list(
                        r,
                        self.namespace.as_deref(),
                        ListAt::Latest,
                        None,
                        None,
                        crate::log::indexed_value(&self.q.field),
                        &|e| selected(&self.q, e),
                    )
                    .map_err(|_| End::Closed)?;
                for chunk in page.items.chunks(64) {
                    for e in chunk {
                        self.push(self.obj_line("ADDED", e));
                    }
                    self.flush().await?;
                }
                if end_bookmark {
                    self.send(self.bookmark(page.rv, true)).await?;
                }
                held_at_start = page.rv;
                page.rv
            }
        };
        let batch_window = backend.settings().batch_window;
        // When this watch last wrote events, while the window after it may still be open.
        let mut wrote_at: Option<Instant> = None;
        loop {
            if let Some(at) = wrote_at.take() {
                // Within the window of the last write: what arrives until it closes goes out with
                // this read's events, in one write.
                sleep_until(at + batch_window).await;
            }
            rv_rx.mark_unchanged();
            let read = match &by_value {
                Some(v) => backend.events_of_value_after(r, v, cursor, MAX_TURN),
                None => backend.events_after(r, cursor, MAX_TURN),
            };
            let (events, complete_to) = match read {
                Ok(ev) => ev,
                Err(e) => {
                    let err = ApiError::from(e);
                    self.send(self.error_line(&err)).await?;
                    return Ok(End::Expired);
                }
            };
            let delay = backend.watch_delay();
            if !events.is_empty() && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            for ev in &events {
                let now = self.wants(&ev.obj);
                let was = ev.prev.as_ref().is_some_and(|p| self.wants(p));
                let line = match (ev.ty, was, now) {
                    (EventType::Added, _, true) => Some(self.event_line(ev)),
                    (EventType::Modified, true, true) => Some(self.event_line(ev)),
                    (EventType::Modified, false, true) => Some(self.obj_line("ADDED", &ev.obj)),
                    (EventType::Modified, true, false) => Some(self.obj_line("DELETED", &ev.obj)),
                    (EventType::Deleted, _, true) => Some(self.event_line(ev)),
                    _ => None,
                };
                if let Some(line) = line {
                    self.push(line);
                }
                cursor = ev.rv;
            }
            let wrote = !self.pending.is_empty();
            self.flush().await?;
            if events.len() >= MAX_TURN {
                // More to send: let the other watchers (and the upstream feed) have their turn first.
                tokio::task::yield_now().await;
                continue;
            }
            // A backlog read in full turns above is not held back; a watch that keeps up is.
            if wrote && !batch_window.is_zero() {
                wrote_at = Some(Instant::now());
            }
            // Nothing else of this resource happened up to `complete_to`: resuming from it loses
            // nothing, and it keeps the cursor inside the window while other resources churn.
            cursor = cursor.max(complete_to);
            let now = Instant::now();
            let progressed = cursor > held_at_start;
            if bookmark_due {
                bookmark_due = false;
                // Bookmarks carry the newest RV this watch has seen its resource's history through:
                // sent after the read above, as a watch of one value wakes on its value only.
                if progressed {
                    self.send(self.bookmark(cursor, false)).await?;
                }
            }
            if self.q.allow_bookmarks && !final_bookmark_sent && now >= final_bookmark_at {
                final_bookmark_sent = true;
                if progressed {
                    self.send(self.bookmark(cursor, false)).await?;
                }
            }
            if now >= deadline {
                return Ok(End::Timeout);
            }
            let wake = if self.q.allow_bookmarks {
                let b = if final_bookmark_sent {
                    deadline
                } else {
                    next_bookmark.min(final_bookmark_at)
                };
                b.min(deadline)
            } else {
                deadline
            };
            let closed = async {
                match closer.as_mut() {
                    Some(c) => {
                        let _ = c.changed().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                changed = rv_rx.changed() => {
                    if changed.is_err() {
                        return Ok(End::Closed);
                    }
                }
                _ = closed => return Ok(End::Closed),
                _ = self.tx.closed() => return Ok(End::ClientGone),
                _ = sleep_until(wake) => {
                    if self.q.allow_bookmarks && Instant::now() >= next_bookmark && Instant::now() < final_bookmark_at {
                        next_bookmark = Instant::now() + interval;
                        bookmark_due = true;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(rv: Option<&str>, m: Option<&str>, sie: Option<bool>, bm: bool) -> Query {
        Query {
            resource_version: rv.map(str::to_string),
            resource_version_match: m.map(str::to_string),
            send_initial_events: sie,
            allow_bookmarks: bm,
            ..Default::default()
        }
    }

    #[test]
    fn start_modes_follow_the_api_concepts_table() {
        assert_eq!(
            start_mode(&q(None, None, None, false)),
            Ok(Start::InitialEvents {
                end_bookmark: false
            })
        );
        assert_eq!(
            start_mode(&q(Some("0"), None, None, false)),
            Ok(Start::InitialEvents {
                end_bookmark: false
            })
        );
        assert_eq!(
            start_mode(&q(Some("12"), None, None, false)),
            Ok(Start::After(12))
        );
        assert_eq!(
            start_mode(&q(Some("12"), Some("NotOlderThan"), Some(true), true)),
            Ok(Start::InitialEvents { end_bookmark: true })
        );
        assert_eq!(
            start_mode(&q(None, Some("NotOlderThan"), Some(false), true)),
            Ok(Start::Now)
        );
        assert_eq!(
            start_mode(&q(Some("5"), Some("NotOlderThan"), Some(false), true)),
            Ok(Start::After(5))
        );
        // Without bookmarks, the initial events come without the bookmark that ends them.
        assert_eq!(
            start_mode(&q(None, Some("NotOlderThan"), Some(true), false)),
            Ok(Start::InitialEvents {
                end_bookmark: false
            })
        );
        assert_eq!(
            start_mode(&q(Some("x"), None, None, true))
                .expect_err("x")
                .code,
            400
        );
    }
}
