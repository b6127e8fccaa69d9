//! Requests to the Kubernetes API: paths routed to resources (or discovery documents), and the list
//! and watch query parameters validated as the apiserver validates them.

use axum::http::{HeaderMap, header};
use kube_selectors::{FieldSelector, LabelSelector};
use serde_json::Value;

use crate::discovery;
use crate::log::{Entry, Key, ListAt};
use crate::resource::{Catalog, ResId, Resource};
use crate::shard::ShardSelector;
use crate::status::ApiError;

/// The apiserver's request body limit (3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Where a request points.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub resource: ResId,
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

/// Parses `/api/v1/...` and `/apis/{group}/{version}/...` against the served resources.
pub fn route(path: &str, catalog: &Catalog, server_address: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    // A path of a served group that names nothing is the apiserver's Status; a path no group
    // serves never reaches an API handler: its mux answers a plain-text 404.
    let not_found = ApiError::no_resource;
    let no_group = ApiError::page_not_found;
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Ok(Route::Discovery(discovery::version())),
        ["api"] => {
            return Ok(Route::Discovery(discovery::core_versions(
                catalog,
                server_address,
            )));
        }
        ["apis"] => return Ok(Route::Discovery(discovery::group_list(catalog))),
        ["apis", g] => {
            return discovery::group(catalog, g)
                .map(Route::Discovery)
                .ok_or_else(no_group);
        }
        ["openapi", "v3"] => return Ok(Route::Discovery(crate::openapi::root(catalog))),
        ["openapi", "v3", rest @ ..] => {
            return crate::openapi::group_version(catalog, &rest.join("/"))
                .map(Route::Discovery)
                .ok_or_else(not_found);
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, _, ..] if !catalog.groups().contains(g) => return Err(no_group()),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(no_group()),
    };
    if rest.is_empty() {
        return discovery::resources(catalog, group, version)
            .map(Route::Discovery)
            .ok_or_else(not_found);
    }
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    let kind_of = |plural: &str| catalog.find(group, version, plural).ok_or_else(not_found);
    let (resource, namespace, name) = match rest {
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
    if namespace.is_some() && !catalog.get(resource).namespaced {
        return Err(not_found());
    }
    Ok(Route::Resource(Target {
        resource,
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
    /// KEP-5866 `shardSelector`, parsed.
    pub shard: Option<ShardSelector>,
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

pub fn parse_query(raw: Option<&str>, resource: &Resource) -> Result<Query, ApiError> {
    let mut q = Query::default();
    let mut shard_seen = false;
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
                if let Some(bad) = f.fields().find(|f| !resource.supports_field(f)) {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {bad} (for {})",
                        resource.plural
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
            // Like the apiserver's parameter codec, the first value counts and an empty one is no
            // selector (k8s.io/apimachinery pkg/apis/meta/v1 zz_generated.conversion.go; the store
            // parses only a non-empty string: k8s.io/apiserver pkg/registry/generic/registry/store.go).
            // NB: the apiserver answers a malformed selector with a plain error, which its handler
            // renders as 500 with no reason (kubernetes/apiserver@24a394e store.go ListPredicate and
            // Watch, responsewriters ErrorToAPIStatus). A malformed selector is the client's fault and
            // a retry cannot fix it, so this face answers 400 BadRequest with the apiserver's message.
            "shardSelector" if !shard_seen => {
                shard_seen = true;
                if !v.is_empty() {
                    q.shard = Some(ShardSelector::parse(&v).map_err(|e| {
                        ApiError::bad_request(format!("invalid shard selector: {e}"))
                    })?);
                }
            }
            _ => {}
        }
    }
    Ok(q)
}

/// The apiserver's checks of a list's or watch's options (k8s.io/apimachinery pkg/apis/meta/internalversion/validation
/// ValidateListOptions): every error found, as one 422 Invalid of ListOptions. NB: a watch with
/// sendInitialEvents but without allowWatchBookmarks is valid (it gets its initial events and no
/// bookmark), as on kube-apiserver 1.37.
pub fn validate_list_options(q: &Query, watch: bool) -> Result<(), ApiError> {
    use crate::status::FieldError;
    const MATCH: &str = "resourceVersionMatch";
    let mut errs = Vec::new();
    let rv_match = q.resource_version_match.as_deref();
    if watch {
        if q.send_initial_events.is_some() && rv_match != Some("NotOlderThan") {
            errs.push(FieldError::forbidden(
                MATCH,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if let Some(m) = rv_match {
            if q.send_initial_events.is_none() {
                errs.push(FieldError::forbidden(
                    MATCH,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != "NotOlderThan" {
                errs.push(FieldError::not_supported(MATCH, m, &["NotOlderThan"]));
            }
            if q.continue_token.is_some() {
                errs.push(FieldError::forbidden(
                    MATCH,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
    } else {
        if let Some(m) = rv_match {
            if q.resource_version.is_none() {
                errs.push(FieldError::forbidden(
                    MATCH,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if q.continue_token.is_some() {
                errs.push(FieldError::forbidden(
                    MATCH,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != "Exact" && m != "NotOlderThan" {
                errs.push(FieldError::not_supported(
                    MATCH,
                    m,
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if m == "Exact" && q.resource_version.as_deref() == Some("0") {
                errs.push(FieldError::forbidden(
                    MATCH,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if q.send_initial_events.is_some() {
            errs.push(FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_list_options(&errs))
    }
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
    encode_continue_in_shard(rv, key, None)
}

/// A continue token that also carries the list's shard selector: a continued list keeps its shard
/// even when the client leaves `shardSelector` off the next request. A request that names one uses
/// its own, as on the apiserver (whose tokens carry no selector). NB: after a newline, which no
/// namespace or name can hold.
pub fn encode_continue_in_shard(rv: u64, key: &Key, shard: Option<&ShardSelector>) -> String {
    let mut raw = format!("{rv}/{}/{}", key.0, key.1);
    if let Some(s) = shard {
        raw.push('\n');
        raw.push_str(&s.to_string());
    }
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn continue_text(token: &str) -> Result<String, ApiError> {
    let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    if !token.len().is_multiple_of(2) || !token.is_ascii() {
        return Err(bad());
    }
    // NB: ASCII only, so every two-byte slice is on a character boundary.
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16))
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    String::from_utf8(bytes).map_err(|_| bad())
}

/// The shard selector a continue token carries, if any.
pub fn continue_shard(token: &str) -> Result<Option<ShardSelector>, ApiError> {
    let raw = continue_text(token)?;
    match raw.split_once('\n') {
        None => Ok(None),
        Some((_, sel)) => ShardSelector::parse(sel)
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid continue token {token:?}"))),
    }
}

pub fn decode_continue(token: &str) -> Result<(u64, Key), ApiError> {
    let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    let raw = continue_text(token)?;
    let raw = raw.split_once('\n').map_or(raw.as_str(), |(head, _)| head);
    let mut parts = raw.splitn(3, '/');
    let (Some(rv), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    Ok((rv.parse().map_err(|_| bad())?, crate::log::key(ns, name)))
}

/// The resourceVersion of a continue token that continues at the newest state: the token the
/// apiserver hands back with a 410 for an expired one (its `rv` is -1 there too).
const LATEST: &str = "-1";

/// A continue token that resumes after `key` at the newest state rather than at a snapshot: the
/// successor of an expired token, whose list will not be consistent.
pub fn encode_continue_latest(key: &Key, shard: Option<&ShardSelector>) -> String {
    let token = encode_continue_in_shard(0, key, shard);
    // "0/..." hex-encoded starts with "30": the same token with "-1" in its place.
    format!(
        "{}{}",
        LATEST
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        &token[2..]
    )
}

/// Where a continue token resumes: its snapshot (`Exact`), or the newest state for the successor
/// of an expired token; and the last key returned.
pub fn decode_continue_at(token: &str) -> Result<(ListAt, Key), ApiError> {
    let raw = continue_text(token)?;
    match raw.strip_prefix(LATEST).filter(|r| r.starts_with('/')) {
        Some(rest) => {
            let again: String = format!("0{rest}")
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect();
            let (_, key) = decode_continue(&again)?;
            Ok((ListAt::Latest, key))
        }
        None => decode_continue(token).map(|(rv, key)| (ListAt::Exact(rv), key)),
    }
}

/// Whether an entry passes a request's selectors.
pub fn selected(q: &Query, e: &Entry) -> bool {
    q.shard.as_ref().is_none_or(|s| s.matches(e))
        && q.label.matches(&e.labels)
        && q.field.matches(|f| e.field(f))
}

pub fn user_agent(headers: &HeaderMap) -> String {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown")
        .to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mk_catalog() -> Catalog {
        Catalog {
            resources: ["namespaces", "pods", "services", "endpointslices"]
                .into_iter()
                .map(|p| Resource::builtin(p).expect("builtin"))
                .collect(),
            writable: false,
        }
    }
    const NS: ResId = 0;
    const POD: ResId = 1;
    const SLICE: ResId = 3;

    #[test]
    fn paths_route_to_kinds_namespaces_and_names() {
        let cat = mk_catalog();
        let r = |p| match route(p, &cat, "x") {
            Ok(Route::Resource(t)) => t,
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(r("/api/v1/pods").resource, POD);
        let t = r("/api/v1/namespaces/default/pods/web-1");
        assert_eq!(
            (t.namespace.as_deref(), t.name.as_deref()),
            (Some("default"), Some("web-1"))
        );
        let t = r("/api/v1/namespaces/kube-system");
        assert_eq!((t.resource, t.name.as_deref()), (NS, Some("kube-system")));
        let t = r("/apis/discovery.k8s.io/v1/namespaces/a/endpointslices");
        assert_eq!(t.resource, SLICE);
        assert!(r("/api/v1/watch/namespaces/a/pods").watch_path);
        for bad in [
            "/api/v1/widgets",
            "/apis/apps/v1/deployments",
            "/api/v2/pods",
            "/api/v1/namespaces/a/namespaces",
            "/api/v1/nodes",
            "/nope",
        ] {
            assert_eq!(route(bad, &cat, "x").expect_err(bad).code, 404, "{bad}");
        }
    }

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let key = crate::log::key("ns", "a.b");
        assert_eq!(
            decode_continue(&encode_continue(42, &key)).expect("valid"),
            (42, key)
        );
        assert_eq!(decode_continue("zz").expect_err("garbage").code, 400);
    }

    #[test]
    fn the_successor_of_an_expired_token_continues_at_the_newest_state() {
        let key = crate::log::key("ns", "a.b");
        let token = encode_continue_latest(&key, None);
        assert_eq!(
            decode_continue_at(&token).expect("valid"),
            (ListAt::Latest, key.clone())
        );
        assert!(
            decode_continue(&token).is_err(),
            "no snapshot to continue at"
        );
        assert_eq!(
            decode_continue_at(&encode_continue(7, &key)).expect("valid"),
            (ListAt::Exact(7), key)
        );
    }

    #[test]
    fn continue_tokens_keep_the_shard_selector() {
        let key = crate::log::key("ns", "a");
        let sel = ShardSelector::parse(&crate::shard::shard_selector_text(3, 7)).expect("valid");
        let token = encode_continue_in_shard(9, &key, Some(&sel));
        assert_eq!(decode_continue(&token).expect("valid"), (9, key.clone()));
        assert_eq!(continue_shard(&token).expect("valid"), Some(sel));
        assert_eq!(
            continue_shard(&encode_continue(9, &key)).expect("valid"),
            None
        );
        let forged: String = "9/ns/a\nshardRange(x)"
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(continue_shard(&forged).expect_err("forged").code, 400);
    }

    #[test]
    fn query_parameters_are_validated() {
        let pods = Resource::builtin("pods").expect("pods");
        let services = Resource::builtin("services").expect("services");
        let q = parse_query(
            Some("labelSelector=app%3Dweb%2Ctier+in+%28a%29&limit=5&watch=1"),
            &pods,
        )
        .expect("valid");
        assert!(q.watch);
        assert_eq!(q.limit, Some(5));
        assert_eq!(q.label.requirements.len(), 2);
        for bad in [
            "limit=x",
            "labelSelector=a%20b",
            "fieldSelector=spec.foo%3Dx",
            "watch=maybe",
        ] {
            assert_eq!(
                parse_query(Some(bad), &pods).expect_err(bad).code,
                400,
                "{bad}"
            );
        }
        // spec.nodeName is a pod field only
        assert!(parse_query(Some("fieldSelector=spec.nodeName%3Dn"), &services).is_err());
    }

    #[test]
    fn list_options_are_validated_as_the_apiserver_does() {
        let pods = Resource::builtin("pods").expect("pods");
        let check = |raw: &str, watch: bool| {
            validate_list_options(&parse_query(Some(raw), &pods).expect("parses"), watch)
        };
        for ok in [
            "resourceVersion=5&resourceVersionMatch=Exact",
            "resourceVersion=5&resourceVersionMatch=NotOlderThan",
            "resourceVersion=0",
            "limit=5&continue=abc",
        ] {
            assert_eq!(check(ok, false), Ok(()), "{ok}");
        }
        for ok in [
            "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
            // No bookmarks: the initial events come without the bookmark that ends them.
            "sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
            "resourceVersion=5",
        ] {
            assert_eq!(check(ok, true), Ok(()), "{ok}");
        }
        let causes = |raw: &str, watch: bool| {
            let e = check(raw, watch).expect_err(raw);
            assert_eq!((e.code, e.reason), (422, "Invalid"), "{raw}");
            let d = e.details.expect("details");
            assert_eq!(
                (d["group"].as_str(), d["kind"].as_str()),
                (Some("meta.k8s.io"), Some("ListOptions"))
            );
            d["causes"]
                .as_array()
                .expect("causes")
                .iter()
                .map(|c| {
                    format!(
                        "{}:{}",
                        c["reason"].as_str().unwrap_or(""),
                        c["field"].as_str().unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            causes("resourceVersionMatch=Exact", false),
            ["FieldValueForbidden:resourceVersionMatch"]
        );
        assert_eq!(
            causes("resourceVersion=0&resourceVersionMatch=Exact", false),
            ["FieldValueForbidden:resourceVersionMatch"]
        );
        assert_eq!(
            causes("resourceVersion=1&resourceVersionMatch=Newest", false),
            ["FieldValueNotSupported:resourceVersionMatch"]
        );
        assert_eq!(
            causes("continue=x&resourceVersionMatch=NotOlderThan", false),
            [
                "FieldValueForbidden:resourceVersionMatch",
                "FieldValueForbidden:resourceVersionMatch"
            ]
        );
        assert_eq!(
            causes("sendInitialEvents=true", false),
            ["FieldValueForbidden:sendInitialEvents"]
        );
        assert_eq!(
            causes("sendInitialEvents=true&allowWatchBookmarks=true", true),
            ["FieldValueForbidden:resourceVersionMatch"]
        );
        assert_eq!(
            causes("resourceVersion=1&resourceVersionMatch=Exact", true),
            [
                "FieldValueForbidden:resourceVersionMatch",
                "FieldValueNotSupported:resourceVersionMatch"
            ]
        );
        let e = check("resourceVersion=1&resourceVersionMatch=Exact", true).expect_err("invalid");
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided, resourceVersionMatch: Unsupported value: \"Exact\": supported values: \"NotOlderThan\"]"
        );
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
