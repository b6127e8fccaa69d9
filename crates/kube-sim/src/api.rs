//! The Kubernetes API face: path and query parsing, get/list/create/update/delete, and the hand-off to
//! watch. Responses are assembled from each object's stored JSON bytes, never re-encoded.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use kube_selectors::{FieldSelector, LabelSelector};
use serde_json::Value;

use crate::discovery;
use crate::kind::Kind;
use crate::server::Shared;
use crate::status::ApiError;
use crate::store::{Entry, Key, ListAt, supported_fields};
use crate::watch;

/// The apiserver's request body limit (3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Where a request points.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub kind: Kind,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The legacy `/watch/` path prefix was used.
    pub watch_path: bool,
}

/// What a non-resource path asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    Resource(Target),
    Discovery(Value),
}

/// Parses `/api/v1/...` and `/apis/{group}/{version}/...`.
pub fn route(path: &str, server_address: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let not_found = || ApiError::not_found("the server could not find the requested resource");
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Ok(Route::Discovery(discovery::version())),
        ["api"] => return Ok(Route::Discovery(discovery::core_versions(server_address))),
        ["apis"] => return Ok(Route::Discovery(discovery::group_list())),
        ["apis", g] => {
            return discovery::group(g)
                .map(Route::Discovery)
                .ok_or_else(not_found);
        }
        ["openapi", "v3"] => return Ok(Route::Discovery(crate::openapi::root())),
        ["openapi", "v3", rest @ ..] => {
            return crate::openapi::group_version(&rest.join("/"))
                .map(Route::Discovery)
                .ok_or_else(not_found);
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(not_found()),
    };
    if rest.is_empty() {
        return discovery::resources(group, version)
            .map(Route::Discovery)
            .ok_or_else(not_found);
    }
    if version != "v1" {
        return Err(not_found());
    }
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    let kind_of = |plural: &str| Kind::from_group_plural(group, plural).ok_or_else(not_found);
    let (kind, namespace, name) = match rest {
        ["namespaces", ns, plural] => (kind_of(plural)?, Some(ns.to_string()), None),
        ["namespaces", ns, plural, name] => (
            kind_of(plural)?,
            Some(ns.to_string()),
            Some(name.to_string()),
        ),
        [plural] => (kind_of(plural)?, None, None),
        [plural, name] => (kind_of(plural)?, None, Some(name.to_string())),
        _ => return Err(not_found()),
    };
    if namespace.is_some() && !kind.namespaced() {
        return Err(not_found());
    }
    Ok(Route::Resource(Target {
        kind,
        namespace,
        name,
        watch_path,
    }))
}

/// The list and watch query parameters, validated.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub watch: bool,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub label: LabelSelector,
    pub field: FieldSelector,
    pub timeout_seconds: Option<u64>,
    pub allow_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub dry_run: bool,
}

fn parse_bool(name: &str, v: &str) -> Result<bool, ApiError> {
    match v {
        "true" | "1" | "True" => Ok(true),
        "false" | "0" | "False" | "" => Ok(false),
        _ => Err(ApiError::bad_request(format!(
            "invalid value {v:?} for query parameter {name}: expected true or false"
        ))),
    }
}

pub fn parse_query(raw: Option<&str>, kind: Kind) -> Result<Query, ApiError> {
    let mut q = Query::default();
    for (k, v) in form_pairs(raw.unwrap_or("")) {
        match k.as_str() {
            "watch" => q.watch = parse_bool("watch", &v)?,
            "resourceVersion" => q.resource_version = Some(v).filter(|s| !s.is_empty()),
            "resourceVersionMatch" => q.resource_version_match = Some(v).filter(|s| !s.is_empty()),
            "limit" => {
                let n: i64 = v.parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "invalid value {v:?} for query parameter limit: expected an integer"
                    ))
                })?;
                q.limit = (n > 0).then_some(n as usize);
            }
            "continue" => q.continue_token = Some(v).filter(|s| !s.is_empty()),
            "labelSelector" => {
                q.label = LabelSelector::parse(&v).map_err(|e| {
                    ApiError::bad_request(format!("unable to parse labelSelector {v:?}: {e}"))
                })?
            }
            "fieldSelector" => {
                let f = FieldSelector::parse(&v).map_err(|e| {
                    ApiError::bad_request(format!("unable to parse fieldSelector: {e}"))
                })?;
                if let Some(bad) = f.fields().find(|f| !supported_fields(kind).contains(f)) {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {bad} (for {})",
                        kind.plural()
                    )));
                }
                q.field = f;
            }
            "timeoutSeconds" => {
                q.timeout_seconds = Some(v.parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "invalid value {v:?} for query parameter timeoutSeconds"
                    ))
                })?)
            }
            "allowWatchBookmarks" => q.allow_bookmarks = parse_bool("allowWatchBookmarks", &v)?,
            "sendInitialEvents" => {
                q.send_initial_events = Some(parse_bool("sendInitialEvents", &v)?)
            }
            "dryRun" => q.dry_run = v == "All",
            _ => {}
        }
    }
    if let Some(m) = &q.resource_version_match
        && !matches!(m.as_str(), "NotOlderThan" | "Exact")
    {
        return Err(ApiError::bad_request(format!(
            "resourceVersionMatch: Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\""
        )));
    }
    Ok(q)
}

/// `application/x-www-form-urlencoded` pairs, percent-decoded.
pub fn form_pairs(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (_, Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b'+', None) => {
                out.push(b' ');
                i += 1;
            }
            (c, None) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn parse_rv(v: &str) -> Result<u64, ApiError> {
    v.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resource version {v:?}: expected an unsigned integer"
        ))
    })
}

/// The continue token: opaque to clients; here the snapshot RV and the last key returned, hex-encoded.
pub fn encode_continue(rv: u64, key: &Key) -> String {
    let raw = format!("{rv}/{}/{}", key.0, key.1);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

pub fn decode_continue(token: &str) -> Result<(u64, Key), ApiError> {
    let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    if !token.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16))
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    let raw = String::from_utf8(bytes).map_err(|_| bad())?;
    let mut parts = raw.splitn(3, '/');
    let (Some(rv), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    Ok((
        rv.parse().map_err(|_| bad())?,
        (ns.to_string(), name.to_string()),
    ))
}

pub fn user_agent(headers: &HeaderMap) -> String {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown")
        .to_string()
}

/// The kube-API handler: every `/api` and `/apis` request lands here.
pub async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let ua = user_agent(&headers);
    let target = match route(uri.path(), &shared.server_address) {
        Ok(Route::Discovery(doc)) => return json_response(StatusCode::OK, doc.to_string().into()),
        Ok(Route::Resource(t)) => t,
        Err(e) => {
            shared.meter.request(method.as_str(), "", e.code, &ua, 0);
            return e.into_response();
        }
    };
    let resource = target.kind.plural();
    let query = match parse_query(uri.query(), target.kind) {
        Ok(q) => q,
        Err(e) => {
            shared
                .meter
                .request(&verb(&method, &target, false), resource, e.code, &ua, 0);
            return e.into_response();
        }
    };
    let is_watch = query.watch || target.watch_path;
    let as_table = crate::table::wanted(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let verb = verb(&method, &target, is_watch);
    if is_watch {
        if method != Method::GET {
            return ApiError::method_not_allowed("watch is a GET").into_response();
        }
        return match watch::start(shared.clone(), &target, query, &ua, as_table) {
            Ok(resp) => {
                shared.meter.request("WATCH", resource, 200, &ua, 0);
                resp
            }
            Err(e) => {
                shared.meter.request("WATCH", resource, e.code, &ua, 0);
                e.into_response()
            }
        };
    }
    let result = match method {
        Method::GET if as_table => read(&shared, &target, &query)
            .map(|(code, body)| (code, as_table_body(target.kind, &body))),
        Method::GET => read(&shared, &target, &query),
        Method::POST | Method::PUT => match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
            Ok(bytes) => write(&shared, &target, &query, &method, &bytes),
            Err(_) => Err(ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("Request entity too large: limit is {MAX_BODY_BYTES}"),
            )),
        },
        Method::DELETE => delete(&shared, &target, &query),
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource: {method}"
        ))),
    };
    match result {
        Ok((code, body)) => {
            shared
                .meter
                .request(&verb, resource, code.as_u16(), &ua, body.len() as u64);
            json_response(code, body)
        }
        Err(e) => {
            shared.meter.request(&verb, resource, e.code, &ua, 0);
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
fn as_table_body(kind: Kind, body: &[u8]) -> Bytes {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Bytes::copy_from_slice(body);
    };
    let t = match v.get("items").and_then(Value::as_array) {
        Some(items) => crate::table::table(kind, items, v["metadata"].clone(), true),
        None => crate::table::table(
            kind,
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

fn read(shared: &Shared, target: &Target, q: &Query) -> Reply {
    let kind = target.kind;
    let Some(name) = &target.name else {
        return list(shared, target, q);
    };
    let ns = target.namespace.as_deref().unwrap_or("");
    shared
        .store
        .get(kind, ns, name)
        .map(|e| (StatusCode::OK, e.bytes.clone()))
        .ok_or_else(|| ApiError::not_found(format!("{} {name:?} not found", kind.plural())))
}

/// Whether an entry passes a request's selectors.
pub fn selected(q: &Query, e: &Entry) -> bool {
    q.label.matches(&e.labels) && q.field.matches(|f| e.field(f))
}

fn list(shared: &Shared, target: &Target, q: &Query) -> Reply {
    let kind = target.kind;
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
    let page = shared
        .store
        .list(kind, target.namespace.as_deref(), at, after.as_ref(), q.limit, &|e| selected(q, e))
        .map_err(|e| match (e, &q.continue_token) {
            (crate::store::StoreError::Expired { .. }, Some(_)) => ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
            ),
            (e, _) => e.into(),
        })?;
    let mut out =
        Vec::with_capacity(page.items.iter().map(|e| e.bytes.len() + 1).sum::<usize>() + 256);
    out.extend_from_slice(b"{\"kind\":\"");
    out.extend_from_slice(kind.name().as_bytes());
    out.extend_from_slice(b"List\",\"apiVersion\":\"");
    out.extend_from_slice(kind.api_version().as_bytes());
    out.extend_from_slice(b"\",\"metadata\":{\"resourceVersion\":\"");
    out.extend_from_slice(page.rv.to_string().as_bytes());
    out.push(b'"');
    if let Some(next) = &page.next {
        out.extend_from_slice(b",\"continue\":\"");
        out.extend_from_slice(encode_continue(page.rv, next).as_bytes());
        out.push(b'"');
        // Like the apiserver, only an unfiltered list knows how many items remain.
        if q.label.is_empty() && q.field.is_empty() {
            out.extend_from_slice(format!(",\"remainingItemCount\":{}", page.remaining).as_bytes());
        }
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

/// resourceVersion + resourceVersionMatch of a list, per the API concepts doc.
pub fn list_at(rv: Option<&str>, rv_match: Option<&str>) -> Result<ListAt, ApiError> {
    match (rv, rv_match) {
        (None, None) => Ok(ListAt::Latest),
        (None, Some(m)) => Err(ApiError::bad_request(format!(
            "resourceVersionMatch {m:?} is forbidden unless resourceVersion is provided"
        ))),
        (Some("0"), Some("Exact")) => Err(ApiError::bad_request(
            "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
        )),
        (Some("0"), _) => Ok(ListAt::Latest),
        (Some(v), Some("Exact")) => Ok(ListAt::Exact(parse_rv(v)?)),
        (Some(v), _) => Ok(ListAt::NotOlderThan(parse_rv(v)?)),
    }
}

fn write(shared: &Shared, target: &Target, q: &Query, method: &Method, body: &[u8]) -> Reply {
    let kind = target.kind;
    let mut value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request was in an unknown format: {e}"
        ))
    })?;
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    // The namespace in the path wins; a different one in the body is an error, as in the apiserver.
    if kind.namespaced() {
        let Some(path_ns) = &target.namespace else {
            return Err(ApiError::method_not_allowed(format!(
                "{} must be created in a namespace",
                kind.plural()
            )));
        };
        let body_ns = value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !body_ns.is_empty() && body_ns != path_ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if let Some(m) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("namespace".into(), path_ns.clone().into());
        }
    }
    if *method == Method::PUT {
        let body_name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        match &target.name {
            Some(n) if n == body_name => {}
            _ => {
                return Err(ApiError::bad_request(
                    "the name of the object does not match the name on the URL",
                ));
            }
        }
    } else if target.name.is_some() {
        return Err(ApiError::method_not_allowed(
            "POST is not allowed on a named object",
        ));
    }
    if q.dry_run {
        // Validate like a real write, store nothing.
        crate::store::typed(kind, &value)?;
        crate::store::key_of(kind, &value)?;
        return Ok((StatusCode::CREATED, Bytes::from(value.to_string())));
    }
    let (entry, code) = if *method == Method::POST {
        (shared.store.create(kind, value)?, StatusCode::CREATED)
    } else {
        (shared.store.update(kind, value)?, StatusCode::OK)
    };
    Ok((code, entry.bytes.clone()))
}

fn delete(shared: &Shared, target: &Target, q: &Query) -> Reply {
    let Some(name) = &target.name else {
        return Err(ApiError::method_not_allowed(
            "deletecollection is not supported by kube-sim",
        ));
    };
    let ns = target.namespace.as_deref().unwrap_or("");
    if q.dry_run {
        let e = shared.store.get(target.kind, ns, name).ok_or_else(|| {
            ApiError::not_found(format!("{} {name:?} not found", target.kind.plural()))
        })?;
        return Ok((StatusCode::OK, e.bytes.clone()));
    }
    let old = shared.store.delete(target.kind, ns, name, None)?;
    Ok((StatusCode::OK, old.bytes.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_to_kinds_namespaces_and_names() {
        let r = |p| match route(p, "x") {
            Ok(Route::Resource(t)) => t,
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(r("/api/v1/pods").kind, Kind::Pod);
        let t = r("/api/v1/namespaces/default/pods/web-1");
        assert_eq!(
            (t.namespace.as_deref(), t.name.as_deref()),
            (Some("default"), Some("web-1"))
        );
        let t = r("/api/v1/namespaces/kube-system");
        assert_eq!(
            (t.kind, t.name.as_deref()),
            (Kind::Namespace, Some("kube-system"))
        );
        let t = r("/apis/discovery.k8s.io/v1/namespaces/a/endpointslices");
        assert_eq!(t.kind, Kind::EndpointSlice);
        assert!(r("/api/v1/watch/namespaces/a/pods").watch_path);
        for bad in [
            "/api/v1/widgets",
            "/apis/apps/v1/deployments",
            "/api/v2/pods",
            "/api/v1/namespaces/a/nodes",
            "/nope",
        ] {
            assert_eq!(route(bad, "x").expect_err(bad).code, 404, "{bad}");
        }
    }

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let key = ("ns".to_string(), "a.b".to_string());
        assert_eq!(
            decode_continue(&encode_continue(42, &key)).expect("valid"),
            (42, key)
        );
        assert_eq!(decode_continue("zz").expect_err("garbage").code, 400);
    }

    #[test]
    fn query_parameters_are_validated() {
        let q = parse_query(
            Some("labelSelector=app%3Dweb%2Ctier+in+%28a%29&limit=5&watch=1"),
            Kind::Pod,
        )
        .expect("valid");
        assert!(q.watch);
        assert_eq!(q.limit, Some(5));
        assert_eq!(q.label.requirements.len(), 2);
        for bad in [
            "limit=x",
            "labelSelector=a%20b",
            "fieldSelector=spec.foo%3Dx",
            "resourceVersionMatch=Newest",
            "watch=maybe",
        ] {
            assert_eq!(
                parse_query(Some(bad), Kind::Pod).expect_err(bad).code,
                400,
                "{bad}"
            );
        }
        // spec.nodeName is a pod field only
        assert!(parse_query(Some("fieldSelector=spec.nodeName%3Dn"), Kind::Service).is_err());
    }

    #[test]
    fn list_resource_versions_follow_the_api_concepts_table() {
        assert_eq!(list_at(None, None).expect("ok"), ListAt::Latest);
        assert_eq!(list_at(Some("0"), None).expect("ok"), ListAt::Latest);
        assert_eq!(
            list_at(Some("7"), None).expect("ok"),
            ListAt::NotOlderThan(7)
        );
        assert_eq!(
            list_at(Some("7"), Some("Exact")).expect("ok"),
            ListAt::Exact(7)
        );
        assert_eq!(list_at(Some("abc"), None).expect_err("bad").code, 400);
        assert_eq!(list_at(None, Some("Exact")).expect_err("bad").code, 400);
        assert_eq!(
            list_at(Some("0"), Some("Exact")).expect_err("bad").code,
            400
        );
    }
}
