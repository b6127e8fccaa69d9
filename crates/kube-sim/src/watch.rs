//! Serving a watch: the resourceVersion start modes of the API concepts doc
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-watch>), selector
//! transitions (an object leaving the selection is sent as DELETED), bookmarks, timeouts, and 410 when the
//! client's RV has left the history window.
//!
//! Each watch reads the shared per-kind history by RV cursor: there is no per-watcher queue that a slow
//! client could grow. A client too slow to keep up falls out of the window and gets 410 Expired, as the
//! apiserver's watch cache would terminate it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use crate::api::{Query, Target, parse_rv, selected};
use crate::kind::Kind;
use crate::meter::WatchGuard;
use crate::server::Shared;
use crate::status::ApiError;
use crate::store::{Entry, EventType, StoreError, event_line};

/// Lines buffered between the watch task and the HTTP body. When full, the task waits (back-pressure);
/// meanwhile its cursor ages and, past the history window, the watch ends with 410.
const BUFFER_LINES: usize = 256;

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Synthetic ADDED events for the current state, then changes (RV unset or "0"; or
    /// sendInitialEvents=true, which also ends the initial events with the `k8s.io/initial-events-end`
    /// bookmark).
    InitialEvents { end_bookmark: bool },
    /// Changes after this RV only.
    After(u64),
    /// Changes after the newest RV (sendInitialEvents=false without a resourceVersion).
    Now,
}

fn start_mode(q: &Query) -> Result<Start, ApiError> {
    let rv = q.resource_version.as_deref();
    match q.send_initial_events {
        Some(send) => {
            if !q.allow_bookmarks {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "sendInitialEvents: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
                ));
            }
            if q.resource_version_match.as_deref() != Some("NotOlderThan") {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            match (send, rv) {
                (true, _) => Ok(Start::InitialEvents { end_bookmark: true }),
                (false, None | Some("0")) => Ok(Start::Now),
                (false, Some(v)) => Ok(Start::After(parse_rv(v)?)),
            }
        }
        None => {
            if q.resource_version_match.is_some() {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            match rv {
                None | Some("0") => Ok(Start::InitialEvents {
                    end_bookmark: false,
                }),
                Some(v) => Ok(Start::After(parse_rv(v)?)),
            }
        }
    }
}

/// Validates the request and starts the watch task; errors before the stream starts are plain Status
/// responses, errors after it are ERROR events.
pub fn start(
    shared: Arc<Shared>,
    target: &Target,
    mut q: Query,
    ua: &str,
    as_table: bool,
) -> Result<Response, ApiError> {
    let start = start_mode(&q)?;
    if let Start::After(rv) = start {
        let current = shared.store.resource_version();
        if rv > current {
            return Err(StoreError::TooLarge {
                requested: rv,
                current,
            }
            .into());
        }
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
        _ => shared.settings.default_watch_timeout,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(BUFFER_LINES);
    let guard = shared.meter.watch_opened(target.kind.plural(), ua);
    let w = Watch {
        shared,
        kind: target.kind,
        namespace: target.namespace.clone(),
        q,
        tx,
        guard,
        table_columns_sent: as_table.then(|| std::sync::atomic::AtomicBool::new(false)),
    };
    tokio::spawn(w.run(start, timeout));
    let stream =
        tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>);
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
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
    Timeout,
    Closed,
    Expired,
}

struct Watch {
    shared: Arc<Shared>,
    kind: Kind,
    namespace: Option<String>,
    q: Query,
    tx: mpsc::Sender<Bytes>,
    guard: WatchGuard,
    /// Set when the client asked for Tables (kubectl get -w): whether the column definitions went out.
    table_columns_sent: Option<std::sync::atomic::AtomicBool>,
}

impl Watch {
    fn wants(&self, e: &Entry) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| e.namespace() == ns)
            && selected(&self.q, e)
    }

    async fn send(&self, line: Bytes) -> Result<(), End> {
        let line = match &self.table_columns_sent {
            Some(sent) => self.as_table(&line, sent),
            None => line,
        };
        let n = line.len() as u64;
        self.tx.send(line).await.map_err(|_| End::ClientGone)?;
        self.guard.sent(n);
        Ok(())
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
        ev["object"] = crate::table::table(self.kind, &[obj], meta, first);
        let mut out = ev.to_string().into_bytes();
        out.push(b'\n');
        Bytes::from(out)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let annotations = if initial_end {
            r#","annotations":{"k8s.io/initial-events-end":"true"}"#
        } else {
            ""
        };
        let obj = format!(
            r#"{{"kind":"{}","apiVersion":"{}","metadata":{{"resourceVersion":"{rv}"{annotations}}}}}"#,
            self.kind.name(),
            self.kind.api_version()
        );
        event_line("BOOKMARK", obj.as_bytes())
    }

    async fn run(self, start: Start, timeout: Duration) {
        let end = self.serve(start, timeout).await;
        tracing::debug!(kind = self.kind.plural(), ?end, "watch ended");
    }

    async fn serve(&self, start: Start, timeout: Duration) -> End {
        match self.stream(start, timeout).await {
            Ok(end) | Err(end) => end,
        }
    }

    async fn stream(&self, start: Start, timeout: Duration) -> Result<End, End> {
        let store = &self.shared.store;
        let mut rv_rx = store.subscribe();
        let mut closer = self.shared.faults.closer();
        closer.mark_unchanged();
        let began = Instant::now();
        let deadline = began + timeout;
        // "Shortly before the timeout" a bookmark lets the client resume without a relist.
        let final_bookmark_at = deadline - timeout.min(Duration::from_secs(2)) / 2;
        let interval = self.shared.settings.bookmark_interval;
        let mut next_bookmark = began + interval;
        let mut final_bookmark_sent = false;

        let mut cursor = match start {
            Start::After(rv) => rv,
            Start::Now => store.resource_version(),
            Start::InitialEvents { end_bookmark } => {
                rv_rx.mark_unchanged();
                let (rv, entries) = store.all(self.kind);
                for e in entries.iter().filter(|e| self.wants(e)) {
                    self.send(event_line("ADDED", &e.bytes)).await?;
                }
                if end_bookmark {
                    self.send(self.bookmark(rv, true)).await?;
                }
                rv
            }
        };
        loop {
            rv_rx.mark_unchanged();
            let (events, complete_to) = match store.events_after(self.kind, cursor) {
                Ok(ev) => ev,
                Err(e) => {
                    let err = ApiError::from(e);
                    self.send(event_line(
                        "ERROR",
                        err.status_json().to_string().as_bytes(),
                    ))
                    .await?;
                    return Ok(End::Expired);
                }
            };
            let delay = self.shared.faults.watch_delay();
            if !events.is_empty() && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            for ev in &events {
                let now = self.wants(&ev.obj);
                let was = ev.prev.as_ref().is_some_and(|p| self.wants(p));
                let line = match (ev.ty, was, now) {
                    (EventType::Added, _, true) => Some(ev.line.clone()),
                    (EventType::Modified, true, true) => Some(ev.line.clone()),
                    (EventType::Modified, false, true) => Some(event_line("ADDED", &ev.obj.bytes)),
                    (EventType::Modified, true, false) => {
                        Some(event_line("DELETED", &ev.obj.bytes))
                    }
                    (EventType::Deleted, _, true) => Some(ev.line.clone()),
                    _ => None,
                };
                if let Some(line) = line {
                    self.send(line).await?;
                }
                cursor = ev.rv;
            }
            // Nothing else of this kind happened up to `complete_to`: resuming from it loses nothing, and
            // it keeps the cursor inside the window while other kinds churn.
            cursor = cursor.max(complete_to);
            let now = Instant::now();
            if self.q.allow_bookmarks && !final_bookmark_sent && now >= final_bookmark_at {
                final_bookmark_sent = true;
                self.send(self.bookmark(cursor, false)).await?;
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
            tokio::select! {
                changed = rv_rx.changed() => {
                    if changed.is_err() {
                        return Ok(End::Closed);
                    }
                }
                _ = closer.changed() => return Ok(End::Closed),
                _ = self.tx.closed() => return Ok(End::ClientGone),
                _ = sleep_until(wake) => {
                    if self.q.allow_bookmarks && Instant::now() >= next_bookmark && Instant::now() < final_bookmark_at {
                        next_bookmark = Instant::now() + interval;
                        // Bookmarks carry the newest RV this watch has seen its kind's history through.
                        self.send(self.bookmark(cursor, false)).await?;
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
        // sendInitialEvents needs bookmarks and NotOlderThan; resourceVersionMatch needs sendInitialEvents
        assert_eq!(
            start_mode(&q(None, Some("NotOlderThan"), Some(true), false))
                .expect_err("x")
                .code,
            422
        );
        assert_eq!(
            start_mode(&q(None, None, Some(true), true))
                .expect_err("x")
                .code,
            422
        );
        assert_eq!(
            start_mode(&q(Some("5"), Some("Exact"), None, true))
                .expect_err("x")
                .code,
            422
        );
        assert_eq!(
            start_mode(&q(Some("x"), None, None, true))
                .expect_err("x")
                .code,
            400
        );
    }
}
