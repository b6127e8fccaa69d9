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
use crate::request::{
    MAX_BODY_BYTES, Query, Route, Target, continue_shard, decode_continue,
    encode_continue_in_shard, list_at, parse_query, route, selected, user_agent,
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
            backend.request_done(method.as_str(), "", e.code, &ua, 0);
            return e.into_response();
        }
    };
    let resource = backend.catalog().get(target.resource);
    let plural = resource.plural.as_str();
    let query = match parse_query(uri.query(), resource) {
        Ok(q) => q,
        Err(e) => {
            backend.request_done(&verb(&method, &target, false), plural, e.code, &ua, 0);
            return e.into_response();
        }
    };
    let is_watch = query.watch || target.watch_path;
    let as_table = crate::table::wanted(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let verb = verb(&method, &target, is_watch);
    if matches!(verb.as_str(), "LIST" | "WATCH")
        && let Err(e) = backend.admit(&verb, plural)
    {
        backend.request_done(&verb, plural, e.code, &ua, 0);
        return e.into_response();
    }
    if is_watch {
        if method != Method::GET {
            return ApiError::method_not_allowed("watch is a GET").into_response();
        }
        return match watch::start(backend.clone(), &target, query, &ua, as_table).await {
            Ok(resp) => {
                backend.request_done("WATCH", plural, 200, &ua, 0);
                resp
            }
            Err(e) => {
                backend.request_done("WATCH", plural, e.code, &ua, 0);
                e.into_response()
            }
        };
    }
    let result = match method {
        Method::GET => {
            let read = read(&*backend, &target, &query).await;
            if as_table {
                read.map(|(code, body)| (code, as_table_body(resource, &body)))
            } else {
                read
            }
        }
        Method::POST | Method::PUT | Method::DELETE => {
            match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
                Ok(bytes) => backend.write(
                    target.resource,
                    WriteRequest {
                        method: &method,
                        target: &target,
                        query: &query,
                        body: &bytes,
                    },
                ),
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
    match result {
        Ok((code, body)) => {
            backend.request_done(&verb, plural, code.as_u16(), &ua, body.len() as u64);
            json_response(code, body)
        }
        Err(e) => {
            backend.request_done(&verb, plural, e.code, &ua, 0);
            e.into_response()
        }
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

pub fn json_response(code: StatusCode, body: Bytes) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

type Reply = Result<(StatusCode, Bytes), ApiError>;

async fn read<B: Backend>(backend: &B, target: &Target, q: &Query) -> Reply {
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
            return list(backend, target, &q).await;
        }
        return list(backend, target, q).await;
    };
    let ns = target.namespace.as_deref().unwrap_or("");
    backend
        .get(target.resource, ns, name)
        .map(|e| (StatusCode::OK, e.bytes.clone()))
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "{} {name:?} not found",
                backend.catalog().get(target.resource).plural
            ))
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

async fn list<B: Backend>(backend: &B, target: &Target, q: &Query) -> Reply {
    let r = target.resource;
    let resource = backend.catalog().get(r);
    let (at, after) = match (&q.continue_token, &q.resource_version) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        (Some(tok), None) => {
            let (rv, key) = decode_continue(tok)?;
            (ListAt::Exact(rv), Some(key))
        }
        (None, rv) => (
            list_at(rv.as_deref(), q.resource_version_match.as_deref())?,
            None,
        ),
    };
    if let ListAt::NotOlderThan(n) | ListAt::Exact(n) = at
        && !wait_for_rv(backend, r, n).await
    {
        return Err(too_large(n, backend.resource_version(r)));
    }
    let page = backend
        .list(r, target.namespace.as_deref(), at, after.as_ref(), q.limit, &|e| selected(q, e))
        .map_err(|e| match (e, &q.continue_token) {
            (StoreError::Expired { .. }, Some(_)) => ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
            ),
            (StoreError::TooLarge { requested, current }, _) => too_large(requested, current),
            (e, _) => e.into(),
        })?;
    // NB: assembled by hand from the stored bytes of each object: re-encoding 150,000 pods per list
    // would cost seconds of CPU and a value tree of gigabytes.
    let mut out =
        Vec::with_capacity(page.items.iter().map(|e| e.bytes.len() + 1).sum::<usize>() + 256);
    out.extend_from_slice(b"{\"kind\":\"");
    out.extend_from_slice(resource.kind.as_bytes());
    out.extend_from_slice(b"List\",\"apiVersion\":\"");
    out.extend_from_slice(resource.api_version().as_bytes());
    out.extend_from_slice(b"\",\"metadata\":{\"resourceVersion\":\"");
    out.extend_from_slice(page.rv.to_string().as_bytes());
    out.push(b'"');
    if let Some(next) = &page.next {
        out.extend_from_slice(b",\"continue\":\"");
        out.extend_from_slice(encode_continue_in_shard(page.rv, next, q.shard.as_ref()).as_bytes());
        out.push(b'"');
        // Like the apiserver, only an unfiltered list knows how many items remain.
        if q.label.is_empty() && q.field.is_empty() && q.shard.is_none() {
            out.extend_from_slice(format!(",\"remainingItemCount\":{}", page.remaining).as_bytes());
        }
    }
    // The applied selector, canonical, so a client can tell a sharded answer from a server that
    // ignored the parameter (k8s.io/apiserver pkg/storage selection_predicate.go SetShardInfoOnList).
    if let Some(shard) = &q.shard {
        out.extend_from_slice(b",\"shardInfo\":{\"selector\":");
        out.extend_from_slice(
            serde_json::to_string(&shard.to_string())
                .expect("a string always serializes")
                .as_bytes(),
        );
        out.push(b'}');
    }
    out.extend_from_slice(b"},\"items\":[");
    for (i, e) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&e.bytes);
    }
    out.extend_from_slice(b"]}");
    Ok((StatusCode::OK, Bytes::from(out)))
}
