//! The target allocator's routes, as `cmd/otel-allocator/internal/server/server.go` serves them
//! (open-telemetry/opentelemetry-operator be8944414a876f17fcdeb5a59b86b8866fb5c88e):
//! - `GET /scrape_configs`: `{job: scrape config}`; the collector's client
//!   (prometheusreceiver `internal/targetallocator/manager.go`, v0.165.1) reads it as YAML into
//!   Prometheus `ScrapeConfig`s and points each job's http_sd at the next route;
//! - `GET /jobs/{job}/targets?collector_id=ID`: `[{"targets": [...], "labels": {...}}]`, the
//!   collector's share; `{job}` is query-escaped (`url.QueryEscape`, so `/` is `%2F`);
//! - `GET /jobs/{job}/targets`: `{collector: {"_link": ..., "targets": [...]}}` for every collector;
//! - `GET /jobs`: `{job: {"_link": "/jobs/{job}/targets"}}`.
//!
//! Served on herald's main port, behind the same authentication as `/sd/v1`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{RawPathParams, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{Allocator, AllocatorError, SourceError};
use herald_core::config::target_allocator::check_collector_id;

/// The allocator's routes over `allocator`.
pub fn router(allocator: Arc<Allocator>) -> Router {
    Router::new()
        .route("/scrape_configs", get(scrape_configs))
        .route("/jobs", get(jobs))
        .route("/jobs/{job}/targets", get(targets))
        .with_state(allocator)
}

impl IntoResponse for AllocatorError {
    fn into_response(self) -> Response {
        let status = match &self {
            AllocatorError::Source(SourceError::UnknownJob(_)) => StatusCode::NOT_FOUND,
            // As /sd/v1: a failed refresh keeps the collector's previous targets.
            AllocatorError::Source(SourceError::NotSynced(_)) => StatusCode::SERVICE_UNAVAILABLE,
            AllocatorError::BadCollectorId(..) | AllocatorError::BadJobName(_) => {
                StatusCode::BAD_REQUEST
            }
            AllocatorError::Body { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut res = (
            status,
            axum::Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        res
    }
}

fn json_bytes(body: impl Into<Body>) -> Response {
    let mut res = Response::new(body.into());
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

async fn scrape_configs(State(a): State<Arc<Allocator>>) -> Response {
    let configs: BTreeMap<String, serde_json::Value> = a
        .job_names()
        .into_iter()
        .filter_map(|j| a.source().scrape_config(&j).map(|c| (j, c)))
        .collect();
    json_bytes(serde_json::to_vec(&configs).expect("JSON values serialize"))
}

/// NB: the allocator lists the jobs that have targets now; herald lists every job it offers.
async fn jobs(State(a): State<Arc<Allocator>>) -> Response {
    let links: BTreeMap<String, serde_json::Value> = a
        .job_names()
        .into_iter()
        .map(|j| {
            let link = format!("/jobs/{}/targets", query_escape(&j));
            (j, serde_json::json!({ "_link": link }))
        })
        .collect();
    json_bytes(serde_json::to_vec(&links).expect("JSON values serialize"))
}

async fn targets(
    State(a): State<Arc<Allocator>>,
    params: RawPathParams,
    RawQuery(raw): RawQuery,
) -> Response {
    match answer_targets(&a, &params, raw.as_deref()).await {
        Ok(res) => res,
        Err(e) => e.into_response(),
    }
}

async fn answer_targets(
    a: &Arc<Allocator>,
    params: &RawPathParams,
    raw: Option<&str>,
) -> Result<Response, AllocatorError> {
    let raw_job = params
        .iter()
        .find(|(k, _)| *k == "job")
        .map(|(_, v)| v)
        .unwrap_or_default();
    // The allocator unescapes the path segment as a query value (`url.QueryUnescape`).
    let job = query_unescape(raw_job).map_err(AllocatorError::BadJobName)?;
    // `URL.Query()["collector_id"][0]`: the first one counts.
    let collector = match raw {
        Some(q) => first_param(q, "collector_id")
            .map_err(|e| AllocatorError::BadCollectorId(q.to_string(), e))?,
        None => None,
    };
    if let Some(id) = &collector {
        check_collector_id(id).map_err(|e| AllocatorError::BadCollectorId(id.clone(), e))?;
    }
    // NB: the cut may parse a whole job body: on a blocking thread.
    let alloc = a.clone();
    let job_name = job.clone();
    let assignment = tokio::task::spawn_blocking(move || alloc.assignment(&job_name))
        .await
        .expect("cutting a job does not panic")?;
    let Some(id) = collector else {
        // Every collector's share, keyed by collector.
        let mut out = Vec::from(&b"{"[..]);
        for (i, c) in assignment.placement.collectors().iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let link = format!(
                "/jobs/{}/targets?collector_id={}",
                query_escape(&job),
                query_escape(&c.name)
            );
            serde_json::to_writer(&mut out, &c.name).expect("strings serialize");
            out.extend_from_slice(b":{\"_link\":");
            serde_json::to_writer(&mut out, &link).expect("strings serialize");
            out.extend_from_slice(b",\"targets\":");
            out.extend_from_slice(&assignment.bodies[i]);
            out.push(b'}');
        }
        out.push(b'}');
        return Ok(json_bytes(out));
    };
    Ok(match assignment.body_for(&id) {
        Some(body) => {
            let mut res = json_bytes(body.clone());
            res.headers_mut().insert(
                "x-herald-targets",
                HeaderValue::from(
                    assignment.counts[assignment
                        .placement
                        .index_of(&id)
                        .expect("body_for found it")] as u64,
                ),
            );
            res
        }
        None => {
            // As the allocator: a collector it does not know (not yet seen, or gone) gets an empty
            // list, so a departing collector stops scraping instead of keeping its last targets.
            let mut res = json_bytes(&b"[]"[..]);
            res.headers_mut().insert(
                "x-herald-unknown-collector",
                HeaderValue::from_static("true"),
            );
            res
        }
    })
}

/// The first value of `name` in a query string, decoded as Go's `url.ParseQuery` does.
fn first_param(query: &str, name: &str) -> Result<Option<String>, String> {
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if query_unescape(k)? == name {
            return query_unescape(v).map(Some);
        }
    }
    Ok(None)
}

/// Go's `url.QueryEscape`: everything but `A-Z a-z 0-9 - _ . ~` percent-encoded, space as `+`.
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Go's `url.QueryUnescape`: `+` is a space, `%XX` a byte; a bad escape or bytes that are not UTF-8
/// are errors.
pub fn query_unescape(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("invalid escape at byte {i} of {s:?}"))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} does not decode to UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_round_trips_as_go_does() {
        let name = "serviceMonitor/ns/web app/0";
        assert_eq!(query_escape(name), "serviceMonitor%2Fns%2Fweb+app%2F0");
        assert_eq!(
            query_unescape(&query_escape(name)).expect("valid"),
            name.to_string()
        );
        assert!(query_unescape("a%2").is_err());
        assert!(query_unescape("a%zz").is_err());
        assert!(query_unescape("%ff").is_err());
    }

    #[test]
    fn the_first_collector_id_counts() {
        assert_eq!(
            first_param("x=1&collector_id=a%2Db&collector_id=c", "collector_id"),
            Ok(Some("a-b".into()))
        );
        assert_eq!(first_param("x=1", "collector_id"), Ok(None));
        assert_eq!(
            first_param("collector_id=", "collector_id"),
            Ok(Some(String::new()))
        );
    }
}
