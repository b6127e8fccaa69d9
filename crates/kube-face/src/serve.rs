//! The HTTP handler of the face: routes a request, validates it, and answers get and list from the
//! backend's stored bytes (never re-encoded), hands watches to `watch`, and writes to the backend
//! (read-only backends answer 405).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::Bytes;
use serde_json::Value;

use crate::backend::{Backend, WriteRequest};
use crate::log::{ListAt, StoreError};
use crate::proto::{self, MsgId};
use crate::request::{
    MAX_BODY_BYTES, Query, Route, Target, continue_shard, decode_continue_at,
    encode_continue_in_shard, encode_continue_latest, list_at, parse_query, route, selected,
    user_agent, validate_list_options,
};
use crate::resource::{ResId, Resource};
use crate::status::ApiError;
use crate::watch;

/// The face's routes: `/version`, `/api…`, `/apis…`, `/openapi…`.
pub fn router<B: Backend>(backend: Arc<B>) -> Router {
    Router::new()
        .route("/version", get(handle::<B>))
        .route("/api", get(handle::<B>))
        .route("/api/{*rest}", any(handle::<B>))
        .route("/apis", get(handle::<B>))
        .route("/openapi/{*rest}", get(handle::<B>))
        .route("/apis/{*rest}", any(handle::<B>))
        .with_state(backend)
}

/// Every `/api` and `/apis` request lands here.
pub async fn handle<B: Backend>(
    State(backend): State<Arc<B>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let ua = user_agent(&headers);
    let target = match route(uri.path(), backend.catalog(), &backend.server_address()) {
        Ok(Route::Discovery(doc)) => return json_response(StatusCode::OK, doc.to_string().into()),
        Ok(Route::Resource(t)) => t,
        Err(e) => {
            backend.request_done(method.as_str(), "", e.code, &ua, 0, "application/json");
            return e.into_response();
        }
    };
    let resource = backend.catalog().get(target.resource);
    let plural = resource.plural.as_str();
    let query = match parse_query(uri.query(), resource) {
        Ok(q) => q,
        Err(e) => {
            let v = verb(&method, &target, false);
            backend.request_done(&v, plural, e.code, &ua, 0, "application/json");
            return e.into_response();
        }
    };
    let is_watch = query.watch || target.watch_path;
    // Lists and watches check their options as the apiserver does (a get has none of them).
    if method == Method::GET
        && (is_watch || target.name.is_none())
        && let Err(e) = validate_list_options(&query, is_watch)
    {
        let v = verb(&method, &target, is_watch);
        backend.request_done(&v, plural, e.code, &ua, 0, "application/json");
        return e.into_response();
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let as_table = crate::table::wanted(accept);
    let verb = verb(&method, &target, is_watch);
    // Tables and custom resources are JSON only, as on the apiserver.
    let msg = if as_table {
        None
    } else {
        proto::schema().kind(&resource.api_version(), &resource.kind)
    };
    let format = match negotiate(accept, msg.is_some()) {
        Ok(f) => f,
        Err(e) => {
            backend.request_done(&verb, plural, e.code, &ua, 0, Format::Json.content_type());
            return e.into_response();
        }
    };
    let out = Out {
        format,
        msg,
        api_version: resource.api_version(),
        kind: resource.kind.clone(),
    };
    // NB: rate limits guard the requests that read the state: lists, and watches that start with it
    // (initial events). A watch from a resourceVersion costs the events after it, or one ERROR event
    // (410 Expired) when the log no longer holds it, as the apiserver's priority and fairness charges
    // a watch for its initialization only. Charging them made a restart's storm wait twice: every
    // informer's relist is followed at once by its watch, so 10,000 informers needed 20,000 tokens,
    // and each first tried a watch from its version from before the restart (410) on top.
    if matches!(verb.as_str(), "LIST" | "WATCH")
        && let Err(e) = backend.admit(
            &verb,
            target.resource,
            verb == "LIST" || watch::reads_state(&query),
        )
    {
        backend.request_done(&verb, plural, e.code, &ua, 0, format.content_type());
        return out.error(e);
    }
    if is_watch {
        if method != Method::GET {
            return out.error(ApiError::method_not_allowed("watch is a GET"));
        }
        let ct = format.watch_content_type();
        return match watch::start(backend.clone(), &target, query, &ua, as_table, out.clone()).await
        {
            Ok(resp) => {
                backend.request_done("WATCH", plural, 200, &ua, 0, ct);
                resp
            }
            Err(e) => {
                backend.request_done("WATCH", plural, e.code, &ua, 0, ct);
                out.error(e)
            }
        };
    }
    let result = match method {
        Method::GET => {
            let read = read(&*backend, &target, &query, &out).await;
            if as_table {
                read.map(|(code, body)| (code, as_table_body(resource, &body)))
            } else {
                read
            }
        }
        Method::POST | Method::PUT | Method::DELETE => {
            match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
                Ok(bytes) => backend
                    .write(
                        target.resource,
                        WriteRequest {
                            method: &method,
                            target: &target,
                            query: &query,
                            body: &bytes,
                        },
                    )
                    .map_err(|e| e.in_group(&resource.group)),
                Err(_) => Err(ApiError::new(
                    413,
                    "RequestEntityTooLarge",
                    format!("Request entity too large: limit is {MAX_BODY_BYTES}"),
                )),
            }
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource: {method}"
        ))),
    };
    // Writes answer JSON whatever was asked (kube-sim takes JSON bodies only).
    let write = !matches!(method, Method::GET);
    let ct = if write {
        Format::Json.content_type()
    } else {
        format.content_type()
    };
    match result {
        Ok((code, body)) => {
            backend.request_done(&verb, plural, code.as_u16(), &ua, body.len() as u64, ct);
            (code, [(header::CONTENT_TYPE, ct)], body).into_response()
        }
        Err(e) => {
            backend.request_done(&verb, plural, e.code, &ua, 0, ct);
            if write {
                e.into_response()
            } else {
                out.error(e)
            }
        }
    }
}

/// The formats the face answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    /// Kubernetes' protobuf (`proto`), for the built-in kinds.
    Protobuf,
}

impl Format {
    /// The Content-Type of an object or list.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Protobuf => proto::CONTENT_TYPE,
        }
    }
    /// The Content-Type of a watch stream.
    pub fn watch_content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Protobuf => proto::WATCH_CONTENT_TYPE,
        }
    }
}

/// The format an Accept header prefers (media ranges by q, then by order), for a resource that has
/// a protobuf message (`proto`) or not. No Accept, or only types the face does not write (YAML,
/// CBOR), gets JSON; protobuf alone for a resource without a message gets 406, as from the
/// apiserver (k8s.io/apiserver pkg/endpoints/handlers/negotiation).
pub fn negotiate(accept: Option<&str>, proto: bool) -> Result<Format, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Format::Json);
    };
    let mut ranges: Vec<(f32, usize, &str)> = Vec::new();
    for (i, part) in accept.split(',').enumerate() {
        let mut params = part.split(';');
        let media = params.next().unwrap_or("").trim();
        let mut q = 1.0f32;
        for p in params {
            if let Some((k, v)) = p.split_once('=')
                && k.trim().eq_ignore_ascii_case("q")
            {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        if q > 0.0 {
            ranges.push((q, i, media));
        }
    }
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut asked_protobuf = false;
    for (_, _, media) in &ranges {
        let m = media.to_ascii_lowercase();
        match m.as_str() {
            "application/json" | "application/*" | "*/*" => return Ok(Format::Json),
            "application/vnd.kubernetes.protobuf" if proto => return Ok(Format::Protobuf),
            "application/vnd.kubernetes.protobuf" => asked_protobuf = true,
            _ => {}
        }
    }
    if asked_protobuf {
        return Err(ApiError::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/yaml",
        ));
    }
    Ok(Format::Json)
}

/// How one request is answered: its format and, for protobuf, the resource's message and type.
#[derive(Debug, Clone)]
pub struct Out {
    pub format: Format,
    pub msg: Option<MsgId>,
    pub api_version: String,
    pub kind: String,
}

impl Out {
    /// The protobuf message, when the answer is protobuf.
    pub fn proto(&self) -> Option<MsgId> {
        self.msg.filter(|_| self.format == Format::Protobuf)
    }

    /// An error as a Status in the request's format.
    pub fn error(&self, e: ApiError) -> Response {
        if self.format == Format::Json {
            return e.into_response();
        }
        let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (
            code,
            [(header::CONTENT_TYPE, proto::CONTENT_TYPE)],
            proto::status(&e.status_json()),
        )
            .into_response();
        if let Some(s) = e.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, axum::http::HeaderValue::from(s));
        }
        resp
    }
}

fn verb(method: &Method, target: &Target, watch: bool) -> String {
    match (method, watch, &target.name) {
        (_, true, _) => "WATCH",
        (&Method::GET, _, None) => "LIST",
        (&Method::GET, _, Some(_)) => "GET",
        (m, _, _) => m.as_str(),
    }
    .to_string()
}

/// Re-encodes a list or object body as a Table (only for clients that asked for one: kubectl).
fn as_table_body(resource: &Resource, body: &[u8]) -> Bytes {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Bytes::copy_from_slice(body);
    };
    let t = match v.get("items").and_then(Value::as_array) {
        Some(items) => crate::table::table(resource, items, v["metadata"].clone(), true),
        None => crate::table::table(
            resource,
            std::slice::from_ref(&v),
            serde_json::json!({"resourceVersion": v["metadata"]["resourceVersion"]}),
            true,
        ),
    };
    Bytes::from(t.to_string())
}

/// The kind and apiVersion an object's JSON begins with, in either order (kube-sim's encoder
/// writes apiVersion first, the apiserver kind first): the items of a typed kind's list carry
/// neither, as the apiserver's do not (the list's own kind says what they are; a custom
/// resource's list is unstructured and its items keep both).
struct TypeMeta {
    kind_first: Vec<u8>,
    version_first: Vec<u8>,
}

impl TypeMeta {
    fn new(kind: &str, api_version: &str) -> Self {
        TypeMeta {
            kind_first: format!(r#"{{"kind":"{kind}","apiVersion":"{api_version}","#).into_bytes(),
            version_first: format!(r#"{{"apiVersion":"{api_version}","kind":"{kind}","#)
                .into_bytes(),
        }
    }

    /// Removes the leading kind and apiVersion of the object that starts at `out[at]`.
    fn strip(&self, out: &mut Vec<u8>, at: usize) {
        let obj = &out[at..];
        let n = if obj.starts_with(&self.kind_first) {
            self.kind_first.len()
        } else if obj.starts_with(&self.version_first) {
            self.version_first.len()
        } else {
            return;
        };
        // Keep the opening brace, drop the two members and their comma.
        out.drain(at + 1..at + n);
    }
}

pub fn json_response(code: StatusCode, body: Bytes) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

type Reply = Result<(StatusCode, Bytes), ApiError>;

async fn read<B: Backend>(backend: &B, target: &Target, q: &Query, out: &Out) -> Reply {
    let Some(name) = &target.name else {
        if q.shard.is_none()
            && let Some(tok) = &q.continue_token
            && let Some(shard) = continue_shard(tok)?
        {
            // The next page of a sharded list stays in its shard.
            let q = Query {
                shard: Some(shard),
                ..q.clone()
            };
            return list(backend, target, &q, out).await;
        }
        return list(backend, target, q, out).await;
    };
    let ns = target.namespace.as_deref().unwrap_or("");
    backend
        .get(target.resource, ns, name)
        .map(|e| match out.proto() {
            Some(msg) => (
                StatusCode::OK,
                Bytes::from(proto::envelope(&out.api_version, &out.kind, &e.proto(msg))),
            ),
            None => (StatusCode::OK, e.bytes.to_bytes()),
        })
        .ok_or_else(|| {
            let r = backend.catalog().get(target.resource);
            ApiError::object_not_found(&r.group, &r.plural, name)
        })
}

/// Waits until the backend has reached `rv` for resource `r`, at most `wait_for_rv`, as the
/// apiserver's watch cache waits for a fresh enough state; false when it did not get there.
pub async fn wait_for_rv<B: Backend>(backend: &B, r: ResId, rv: u64) -> bool {
    if backend.resource_version(r) >= rv {
        return true;
    }
    let mut rx = backend.subscribe(r);
    let deadline = tokio::time::Instant::now() + backend.settings().wait_for_rv;
    loop {
        if backend.resource_version(r) >= rv {
            return true;
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return false },
            _ = tokio::time::sleep_until(deadline) => return backend.resource_version(r) >= rv,
        }
    }
}

/// A "Too large resource version" error with the apiserver's Retry-After.
pub fn too_large(requested: u64, current: u64) -> ApiError {
    let mut e = ApiError::from(StoreError::TooLarge { requested, current });
    e.retry_after = Some(1);
    e
}

async fn list<B: Backend>(backend: &B, target: &Target, q: &Query, fmt: &Out) -> Reply {
    let r = target.resource;
    let resource = backend.catalog().get(r);
    let (at, after) = match (&q.continue_token, &q.resource_version) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        (Some(tok), None) => {
            let (at, key) = decode_continue_at(tok)?;
            (at, Some(key))
        }
        (None, rv) => (
            list_at(rv.as_deref(), q.resource_version_match.as_deref())?,
            None,
        ),
    };
    // At resourceVersion "0" the apiserver's watch cache answers every object, whatever the
    // limit (where the backend does the same).
    let limit = if q.resource_version.as_deref() == Some("0")
        && q.continue_token.is_none()
        && !backend.limit_at_resource_version_zero()
    {
        None
    } else {
        q.limit
    };
    if let ListAt::NotOlderThan(n) | ListAt::Exact(n) = at
        && !wait_for_rv(backend, r, n).await
    {
        return Err(too_large(n, backend.resource_version(r)));
    }
    let page = backend
        .list(
            r,
            target.namespace.as_deref(),
            at,
            after.as_ref(),
            limit,
            crate::log::indexed_value(&q.field),
            &|e| selected(q, e),
        )
        .map_err(|e| match (e, &after) {
            // As the apiserver's: the Status carries a token that continues after the same key
            // at the newest state.
            (StoreError::Expired { .. }, Some(key)) => {
                ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                )
                .with_metadata(serde_json::json!({
                    "continue": encode_continue_latest(key, q.shard.as_ref()),
                }))
            }
            (StoreError::TooLarge { requested, current }, _) => too_large(requested, current),
            (e, _) => e.into(),
        })?;
    // The list's metadata, as JSON (protobuf lists transcode it).
    let mut meta = Vec::with_capacity(128);
    meta.extend_from_slice(b"{\"resourceVersion\":\"");
    meta.extend_from_slice(page.rv.to_string().as_bytes());
    meta.push(b'"');
    if let Some(next) = &page.next {
        meta.extend_from_slice(b",\"continue\":\"");
        meta.extend_from_slice(
            encode_continue_in_shard(page.rv, next, q.shard.as_ref()).as_bytes(),
        );
        meta.push(b'"');
        // Like the apiserver, only an unfiltered list knows how many items remain.
        if q.label.is_empty() && q.field.is_empty() && q.shard.is_none() {
            meta.extend_from_slice(
                format!(",\"remainingItemCount\":{}", page.remaining).as_bytes(),
            );
        }
    }
    // The applied selector, canonical, so a client can tell a sharded answer from a server that
    // ignored the parameter (k8s.io/apiserver pkg/storage selection_predicate.go SetShardInfoOnList).
    if let Some(shard) = &q.shard {
        meta.extend_from_slice(b",\"shardInfo\":{\"selector\":");
        meta.extend_from_slice(
            serde_json::to_string(&shard.to_string())
                .expect("a string always serializes")
                .as_bytes(),
        );
        meta.push(b'}');
    }
    meta.push(b'}');
    if let Some(msg) = fmt.proto() {
        let s = proto::schema();
        let list_meta = s.encode(
            s.message("meta/v1.ListMeta")
                .expect("ListMeta is in the schema"),
            &meta,
        );
        let lens: Vec<usize> = page.items.iter().map(|e| e.proto_len(msg)).collect();
        let body = proto::list_with(
            &fmt.api_version,
            &format!("{}List", fmt.kind),
            &list_meta,
            &lens,
            |i, out| page.items[i].append_proto(msg, out),
        );
        return Ok((StatusCode::OK, Bytes::from(body)));
    }
    // NB: assembled by hand from the stored bytes of each object: re-encoding 150,000 pods per list
    // would cost seconds of CPU and a value tree of gigabytes.
    let mut out = Vec::with_capacity(
        page.items.iter().map(|e| e.bytes.len() + 1).sum::<usize>() + meta.len() + 128,
    );
    out.extend_from_slice(b"{\"kind\":\"");
    out.extend_from_slice(resource.kind.as_bytes());
    out.extend_from_slice(b"List\",\"apiVersion\":\"");
    out.extend_from_slice(resource.api_version().as_bytes());
    out.extend_from_slice(b"\",\"metadata\":");
    out.extend_from_slice(&meta);
    out.extend_from_slice(b",\"items\":[");
    let type_meta = resource
        .is_typed()
        .then(|| TypeMeta::new(&resource.kind, &resource.api_version()));
    for (i, e) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let at = out.len();
        e.bytes.append_to(&mut out);
        if let Some(t) = &type_meta {
            t.strip(&mut out, at);
        }
    }
    out.extend_from_slice(b"]}");
    Ok((StatusCode::OK, Bytes::from(out)))
}
