//! The HTTP server: the kube API face, the admin endpoints (`/sim/stats`, `/sim/dump`, `/sim/faults`,
//! `/metrics`, `/healthz`), fault middleware, and an accept loop that can refuse connections during a
//! simulated restart.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use kube_face::request::user_agent;
use kube_face::{
    ApiError, Backend, Catalog, Entry, Event, Key, ListAt, Page, ResId, StoreError, WatchObserver,
    WriteRequest, json_response,
};

use crate::faults::{Fault, Faults, Verdict};
use crate::kind::Kind;
use crate::meter::Meter;
use crate::store::Store;

/// Server-wide timing settings (kube-face's watch settings).
pub type Settings = kube_face::WatchSettings;

/// What every handler shares.
pub struct Shared {
    pub store: Store,
    pub meter: Arc<Meter>,
    pub faults: Faults,
    pub settings: Settings,
    /// host:port, for discovery's serverAddressByClientCIDRs.
    pub server_address: String,
    /// Every kind, in `Kind::ALL` order (a kind's id is its position).
    pub catalog: Catalog,
}

/// kube-sim's store behind the shared API face. Versions are global, as etcd's are.
impl Backend for Shared {
    fn catalog(&self) -> &Catalog {
        &self.catalog
    }
    fn settings(&self) -> &Settings {
        &self.settings
    }
    fn server_address(&self) -> String {
        self.server_address.clone()
    }
    fn resource_version(&self, _r: ResId) -> u64 {
        self.store.resource_version()
    }
    fn subscribe(&self, _r: ResId) -> tokio::sync::watch::Receiver<u64> {
        self.store.subscribe()
    }
    fn subscribe_indexed(
        &self,
        r: ResId,
        value: &str,
    ) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.store.subscribe_value(Kind::from_id(r), value)
    }
    fn events_of_value_after(
        &self,
        r: ResId,
        value: &str,
        rv: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), StoreError> {
        self.store
            .events_of_value_after(Kind::from_id(r), value, rv, max)
    }
    fn get(&self, r: ResId, namespace: &str, name: &str) -> Option<Arc<Entry>> {
        self.store.get(Kind::from_id(r), namespace, name)
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
        self.store
            .list(Kind::from_id(r), ns, at, after, limit, indexed, filter)
    }
    fn events_after(
        &self,
        r: ResId,
        rv: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), StoreError> {
        self.store.events_after(Kind::from_id(r), rv, max)
    }
    fn write(&self, r: ResId, req: WriteRequest<'_>) -> Result<(StatusCode, Bytes), ApiError> {
        crate::writes::write(&self.store, Kind::from_id(r), req)
    }
    fn request_done(&self, verb: &str, resource: &str, code: u16, ua: &str, bytes: u64, _ct: &str) {
        self.meter.request(verb, resource, code, ua, bytes);
    }
    fn watch_opened(&self, resource: &str, ua: &str, _ct: &str) -> Box<dyn WatchObserver> {
        Box::new(self.meter.watch_opened(resource, ua))
    }
    fn closer(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.faults.closer())
    }
    /// As the apiserver's watch cache: a list at resourceVersion "0" is every object at once.
    fn limit_at_resource_version_zero(&self) -> bool {
        false
    }
    fn watch_delay(&self) -> Duration {
        self.faults.watch_delay()
    }
}

impl Shared {
    /// The `/sim/stats` document.
    pub fn stats(&self) -> Value {
        let (by_resource, by_user_agent) = self.meter.snapshot();
        let objects: serde_json::Map<String, Value> = self
            .store
            .counts()
            .into_iter()
            .map(|(k, n)| (k.plural().to_string(), n.into()))
            .collect();
        json!({
            "resource_version": self.store.resource_version(),
            "objects": objects,
            "by_resource": by_resource,
            "by_user_agent": by_user_agent,
        })
    }

    /// Every object as one v1 List, the shape of `kubectl get ... -A -o json`.
    pub fn dump(&self) -> Bytes {
        let mut out = Vec::new();
        out.extend_from_slice(
            br#"{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":""},"items":["#,
        );
        let mut first = true;
        for kind in Kind::ALL {
            for e in self.store.all(kind).1 {
                if !first {
                    out.push(b',');
                }
                first = false;
                e.bytes.append_to(&mut out);
            }
        }
        out.extend_from_slice(b"]}");
        Bytes::from(out)
    }

    pub fn inject(&self, fault: &Fault) -> Result<(), ApiError> {
        self.faults
            .inject(fault)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        if *fault == Fault::Compact {
            self.store.compact();
        }
        tracing::info!(?fault, "fault injected");
        Ok(())
    }
}

pub fn app(shared: Arc<Shared>) -> Router {
    let kube = kube_face::router(shared.clone())
        .layer(middleware::from_fn_with_state(shared.clone(), fault_layer))
        .layer(middleware::from_fn(compression_layer));
    Router::new()
        .route("/sim/stats", get(stats))
        .route("/sim/dump", get(dump))
        .route("/sim/faults", post(faults))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(shared)
        .merge(kube)
        // A path no API group serves: the apiserver mux's plain-text 404.
        .fallback(|| async { kube_face::status::page_not_found() })
}

/// Responses of this size or more are compressed when the client accepts gzip (the apiserver's
/// `defaultGzipThresholdBytes`).
const GZIP_THRESHOLD: usize = 128 * 1024;

/// The apiserver's response compression, for clients that send `Accept-Encoding: gzip`: a
/// response of [`GZIP_THRESHOLD`] or more is one gzip member; a streaming list (a watch with
/// sendInitialEvents=true) is compressed whatever its size, one gzip member per write, as
/// kube-apiserver 1.37 sends it (a client must decode every member: herald's transport does);
/// other watches and small responses are sent as they are.
async fn compression_layer(req: Request, next: Next) -> Response {
    let gzip = req
        .headers()
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(accepts_gzip));
    if !gzip {
        return next.run(req).await;
    }
    let query = kube_face::request::form_pairs(req.uri().query().unwrap_or(""));
    let flag = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .is_some_and(|(_, v)| matches!(v.as_str(), "true" | "1" | "True"))
    };
    // The legacy `/api/v1/watch/...` and `/apis/GROUP/VERSION/watch/...` paths.
    let segs: Vec<&str> = req
        .uri()
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let watch_path = matches!(
        segs.as_slice(),
        ["api", _, "watch", ..] | ["apis", _, _, "watch", ..]
    );
    let watch = flag("watch") || watch_path;
    let streaming_list = watch && flag("sendInitialEvents");
    let resp = next.run(req).await;
    if resp.headers().contains_key(header::CONTENT_ENCODING) || (watch && !streaming_list) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let gzipped = |parts: &mut axum::http::response::Parts| {
        parts.headers.remove(header::CONTENT_LENGTH);
        parts
            .headers
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    };
    if streaming_list {
        if parts.status != StatusCode::OK {
            return Response::from_parts(parts, body);
        }
        gzipped(&mut parts);
        let members = body
            .into_data_stream()
            .map(|chunk| chunk.map(|c| Bytes::from(gzip_member(&c, true))));
        return Response::from_parts(parts, Body::from_stream(members));
    }
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return ApiError::new(500, "InternalError", "reading the response").into_response();
    };
    if bytes.len() < GZIP_THRESHOLD {
        return Response::from_parts(parts, Body::from(bytes));
    }
    gzipped(&mut parts);
    Response::from_parts(parts, Body::from(gzip_member(&bytes, false)))
}

/// One `Accept-Encoding` element: gzip, not refused with `q=0`.
fn accepts_gzip(element: &str) -> bool {
    let mut it = element.split(';');
    let coding = it.next().unwrap_or("").trim();
    let refused = it.any(|p| {
        p.split_once('=').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("q") && v.trim().parse::<f32>().is_ok_and(|q| q == 0.0)
        })
    });
    coding.eq_ignore_ascii_case("gzip") && !refused
}

/// `data` as one complete gzip member, at the apiserver's level (1, best speed).
/// `data` as one gzip member. With `sync_flush`, as kube-apiserver's `perFlushGzipWriter` ends a
/// write of a streaming list: a sync flush, then the member's end. NB: the flush is what lets a
/// client see the write at once: Go's `gzip.Reader` (client-go's, through net/http) returns the
/// last bytes of a member only once it has read the next member's header, which on a quiet watch
/// comes with the next event; the data before a sync flush it returns as it arrives. Without it
/// kube-proxy never saw the `initial-events-end` bookmark of a quiet resource.
fn gzip_member(data: &[u8], sync_flush: bool) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(
        Vec::with_capacity(data.len() / 4 + 64),
        flate2::Compression::fast(),
    );
    e.write_all(data).expect("writing to a Vec");
    if sync_flush {
        e.flush().expect("writing to a Vec");
    }
    e.finish().expect("writing to a Vec")
}

async fn fault_layer(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    match shared.faults.verdict() {
        Verdict::Serve => next.run(req).await,
        Verdict::Refuse => {
            let mut r = ApiError::new(503, "ServiceUnavailable", "the server is restarting")
                .into_response();
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            r
        }
        Verdict::Fail { code, retry_after } => {
            let ua = user_agent(req.headers());
            shared
                .meter
                .request(req.method().as_str(), "", code, &ua, 0);
            if code == 429 {
                // As the apiserver's priority and fairness (and max-in-flight) filters reject: a
                // plain-text body, no Status, the wait in Retry-After.
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [
                        (
                            header::CONTENT_TYPE,
                            "text/plain; charset=utf-8".to_string(),
                        ),
                        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
                        (header::RETRY_AFTER, retry_after.to_string()),
                    ],
                    "Too many requests, please try again later.\n",
                )
                    .into_response();
            }
            let mut e = match code {
                503 => ApiError::new(503, "ServiceUnavailable", "the server is restarting"),
                _ => ApiError::new(
                    500,
                    "InternalError",
                    "Internal error occurred: injected fault",
                ),
            };
            if code == 503 {
                e.retry_after = Some(retry_after);
            }
            e.into_response()
        }
    }
}

async fn stats(State(shared): State<Arc<Shared>>) -> Response {
    json_response(StatusCode::OK, Bytes::from(shared.stats().to_string()))
}

async fn dump(State(shared): State<Arc<Shared>>) -> Response {
    json_response(StatusCode::OK, shared.dump())
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        shared.meter.encode(),
    )
        .into_response()
}

async fn faults(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let fault: Fault = match serde_json::from_slice(&body) {
        Ok(f) => f,
        Err(e) => return ApiError::bad_request(format!("invalid fault: {e}")).into_response(),
    };
    match shared.inject(&fault) {
        Ok(()) => json_response(
            StatusCode::OK,
            Bytes::from(json!({"applied": fault}).to_string()),
        ),
        Err(e) => e.into_response(),
    }
}

/// Serves until `shutdown` is cancelled. During a `refuse` restart, new connections are dropped unanswered.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    let router = app(shared.clone());
    loop {
        let (stream, _peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if shared.faults.refusing() {
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let svc = hyper_util::service::TowerToHyperService::new(
            router
                .clone()
                .map_request(|r: Request<hyper::body::Incoming>| r.map(Body::new)),
        );
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(io, svc);
            tokio::select! {
                _ = conn => {}
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::gzip_member;

    /// What a streaming reader holds of a member before its end arrives: the bytes up to the last
    /// sync-flush marker (`00 00 ff ff`), inflated alone. A member of a streaming list must give
    /// all of its write there (Go's `gzip.Reader` returns the rest only with the next member).
    fn before_the_end(member: &[u8]) -> Option<Vec<u8>> {
        let body = &member[10..]; // the gzip header: no name, no extra fields
        let at = body.windows(4).rposition(|w| w == [0, 0, 0xff, 0xff])?;
        let mut d = flate2::Decompress::new(false);
        let mut out = Vec::with_capacity(1 << 16);
        d.decompress_vec(&body[..at + 4], &mut out, flate2::FlushDecompress::Sync)
            .ok()?;
        Some(out)
    }

    #[test]
    fn a_streaming_list_write_is_readable_before_its_member_ends() {
        let write = br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}
"#;
        let streaming = gzip_member(write, true);
        assert_eq!(before_the_end(&streaming).as_deref(), Some(&write[..]));
        // A whole response is one plain member, and still a valid gzip stream.
        let whole = gzip_member(write, false);
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&whole[..]), &mut text)
            .expect("gzip");
        assert_eq!(text, write);
        assert_ne!(
            before_the_end(&whole).as_deref(),
            Some(&write[..]),
            "without the flush the write ends with the member"
        );
    }
}
