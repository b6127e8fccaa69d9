//! `GET /sd/v1/{job}`: Prometheus HTTP SD (<https://prometheus.io/docs/prometheus/latest/http_sd/>) with
//! ETags, conditional requests and long-polls; `GET /sd/v1`: the job list.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use crate::http::error::ApiError;
use crate::http::query::SdQuery;
use herald_core::istio::Part;

use crate::catalog::{self, Served};
use crate::metrics::{CodeLabels, EncodingLabels};
use crate::shared::{BodyKey, Shared};
use herald_index::encoded::{Encoded, Shard};
use herald_index::sending::Sending;

/// Prometheus's http_sd sends its refresh interval in this header
/// (prometheus/prometheus: discovery/http/http.go).
const REFRESH_HEADER: &str = "x-prometheus-refresh-interval-seconds";

/// NB: built on a blocking thread: a monitor job's port check (`monitors::ports`) may walk its
/// namespaces' groups once per base job generation.
pub async fn list_jobs(State(shared): State<Arc<Shared>>) -> Json<serde_json::Value> {
    let list = tokio::task::spawn_blocking(move || job_list(&shared))
        .await
        .expect("building the job list does not panic");
    Json(list)
}

fn job_list(shared: &Shared) -> serde_json::Value {
    let mut jobs: Vec<serde_json::Value> = shared
        .jobs()
        .iter()
        .enumerate()
        .map(|(j, h)| {
            let (generation, targets, groups) = shared.job_counts(j);
            let mut entry = serde_json::json!({
                "job": h.name,
                "role": h.role.as_str(),
                "url": format!("/sd/v1/{}", h.name),
                "targets": targets,
                "groups": groups,
                "generation": generation,
                "synced": shared.job_synced(j),
                "stale": shared.job_stale(j),
            });
            if h.relabel.is_some() || h.istio.is_some() {
                // `targets` counts what discovery found; relabeling and Istio placement decide
                // what is served (null until a whole body is built at this generation).
                entry["served_targets"] = catalog::served_targets(shared, &Served::Job(j)).into();
            }
            if let Some((istio, part)) = &h.istio {
                entry["istio"] = serde_json::json!({
                    "mode": format!("{:?}", istio.mode).to_lowercase(),
                    "body": format!("{part:?}").to_lowercase(),
                    "job": istio.job,
                });
            }
            entry
        })
        .collect();
    for problem in &shared.istio.current().problems {
        jobs.push(serde_json::json!({ "istio_error": problem }));
    }
    let views = shared.monitors.views();
    for (name, v) in &views.by_name {
        let mut entry = serde_json::json!({
            "job": name,
            "role": v.job.role.as_str(),
            "url": format!("/sd/v1/{name}"),
            "monitor": true,
            "base_job": shared.jobs()[v.base].name,
            "namespaces": v.job.namespaces,
            "synced": shared.job_synced(v.base),
            "stale": shared.job_stale(v.base),
            "unsupported": v.job.unsupported,
            "warnings": shared.view_warnings(v),
            "served_targets": catalog::served_targets(shared, &Served::View(v.clone(), Part::Plain)),
        });
        let Some(companion) = v.companion() else {
            jobs.push(entry);
            continue;
        };
        entry["istio"] = serde_json::json!({"mode": "merged", "body": "plain", "job": name});
        let mut mtls = entry.clone();
        mtls["job"] = companion.clone().into();
        mtls["url"] = format!("/sd/v1/{companion}").into();
        mtls["istio"]["body"] = "mtls".into();
        mtls["served_targets"] =
            catalog::served_targets(shared, &Served::View(v.clone(), Part::Mtls)).into();
        jobs.push(entry);
        jobs.push(mtls);
    }
    for problem in &views.problems {
        jobs.push(serde_json::json!({ "monitor_error": problem, "served": false }));
    }
    for warning in &views.warnings {
        jobs.push(serde_json::json!({ "monitor_error": warning, "served": true }));
    }
    serde_json::Value::Array(jobs)
}

/// What herald's main port asks of its clients (set by `serve` as a request extension), so the
/// `http_sd_configs` `/scrape-configs` writes read herald as it is served.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServedSecurity {
    pub tls: bool,
    pub tokens: bool,
}

/// Where `/scrape-configs` says the consumer's token and herald's CA are (`?credentials_dir=`): the
/// Secret `herald-consumer` as prometheus-operator mounts a Prometheus object's `spec.secrets`.
pub const DEFAULT_CREDENTIALS_DIR: &str = "/etc/prometheus/secrets/herald-consumer";

/// `GET /scrape-configs[?shard=I&shards=N][&base=URL][&credentials_dir=DIR]`: Prometheus
/// `scrape_configs` with one job per monitor endpoint, each reading its targets from herald
/// (`http_sd_configs`) with the endpoint's scrape settings; herald has already applied the
/// relabeling. `base` is herald's URL as Prometheus reaches it (default `http://`, or `https://`
/// when herald serves TLS, + the request's Host). When herald wants a token and serves TLS, each
/// `http_sd_configs` entry carries `authorization` (`credentials_file: DIR/token`) and `tls_config`
/// (`ca_file: DIR/ca.crt`): paths only, never a token. What herald cannot express (secret and
/// ConfigMap references) and what it ignored (fields the operator's CRD does not have) is written as
/// a comment in the job it belongs to; monitors not served, and those ignored fields again, are
/// comments at the top.
pub async fn scrape_configs(
    State(shared): State<Arc<Shared>>,
    Query(params): Query<std::collections::BTreeMap<String, String>>,
    headers: HeaderMap,
    served: Option<Extension<ServedSecurity>>,
) -> Response {
    let served = served.map(|Extension(s)| s).unwrap_or_default();
    // `shard` and `shards` as for /sd/v1 (same checks, same messages); `base` besides.
    let mut sharding = Vec::new();
    let mut base = None;
    let mut dir = DEFAULT_CREDENTIALS_DIR.to_string();
    for (k, v) in &params {
        match k.as_str() {
            "base" => base = Some(v.clone()),
            "credentials_dir" => dir = v.trim_end_matches('/').to_string(),
            "shard" | "shards" => sharding.push(format!("{k}={v}")),
            other => {
                let error = format!(
                    "unknown query parameter {other:?} (supported: shard, shards, base, credentials_dir)"
                );
                return (
                    StatusCode::BAD_REQUEST,
                    Json(serde_json::json!({ "error": error })),
                )
                    .into_response();
            }
        }
    }
    let query = match SdQuery::parse(Some(&sharding.join("&"))) {
        Ok(q) => q,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let base = match base {
        Some(b) => b.trim_end_matches('/').to_string(),
        None => {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("herald:9095");
            let scheme = if served.tls { "https" } else { "http" };
            format!("{scheme}://{host}")
        }
    };
    let client = herald_core::monitor::SdClient {
        credentials_file: served.tokens.then(|| format!("{dir}/token")),
        ca_file: served.tls.then(|| format!("{dir}/ca.crt")),
    };
    let shard = query
        .shard
        .map(|s| format!("?shard={}&shards={}", s.index, s.count))
        .unwrap_or_default();
    let views = shared.monitors.views();
    let mut out =
        String::from("# Generated by herald from the prometheus-operator monitors it serves.\n");
    for problem in &views.problems {
        out.push_str(&format!(
            "# not served: {}\n",
            problem.replace(['\n', '\r'], " ")
        ));
    }
    for warning in &views.warnings {
        out.push_str(&format!(
            "# warning: {}\n",
            warning.replace(['\n', '\r'], " ")
        ));
    }
    if served.tokens || served.tls {
        out.push_str(&format!(
            "# http_sd_configs read herald with {} (?credentials_dir= moves them).\n",
            match (served.tokens, served.tls) {
                (true, true) =>
                    format!("the consumer's token in {dir}/token and herald's CA in {dir}/ca.crt"),
                (true, false) => format!("the consumer's token in {dir}/token"),
                _ => format!("herald's CA in {dir}/ca.crt"),
            }
        ));
    }
    out.push_str("scrape_configs:");
    if views.by_name.is_empty() && shared.istio.config.is_none() {
        out.push_str(" []");
    }
    out.push('\n');
    for (name, v) in &views.by_name {
        let url = format!("{base}/sd/v1/{name}{shard}");
        out.push_str(&herald_core::monitor::scrape_config_yaml_with(
            &v.job, &url, &client,
        ));
        if let (Some(companion), Some(cfg)) = (v.companion(), &shared.istio.config) {
            // The endpoint's settings, over https with Istio's certificates instead of its own TLS.
            let mut job = v.job.clone();
            job.name = companion;
            job.scrape.scheme = Some("https".into());
            job.scrape.tls_config = Some(crate::istio::tls_files(cfg));
            let url = format!("{base}/sd/v1/{}{shard}", job.name);
            out.push_str(&herald_core::monitor::scrape_config_yaml_with(
                &job, &url, &client,
            ));
        }
    }
    out.push_str(&istio_scrape_configs(&shared, &base, &shard, &client));
    let mut res = out.into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/yaml"),
    );
    res
}

/// The scrape configs of Istio-aware jobs: each job as it is (its targets carry their scheme and
/// path), and its companion over https with the workload certificates where Istio's documented
/// Prometheus setup mounts them (`istio.certs_dir`), not verifying the server name (the workload
/// certificate names a SPIFFE identity, not the pod's address).
fn istio_scrape_configs(
    shared: &Shared,
    base: &str,
    shard: &str,
    client: &herald_core::monitor::SdClient,
) -> String {
    let Some(cfg) = &shared.istio.config else {
        return String::new();
    };
    let tls = crate::istio::tls_files(cfg);
    let mut out = String::new();
    for h in shared.jobs().iter().filter(|h| h.istio.is_some()) {
        let name = serde_json::to_string(&h.name).expect("a string serializes");
        let url = format!("{base}/sd/v1/{}{shard}", h.name);
        out.push_str(&format!("- job_name: {name}\n"));
        if let Some((_, herald_core::istio::Part::Mtls)) = &h.istio {
            let file = |f: &Option<String>| {
                serde_json::to_string(f.as_deref().unwrap_or_default())
                    .expect("a string serializes")
            };
            out.push_str(&format!(
                "  scheme: https\n  tls_config:\n    ca_file: {}\n    cert_file: {}\n    \
                 key_file: {}\n    insecure_skip_verify: true\n",
                file(&tls.ca_file),
                file(&tls.cert_file),
                file(&tls.key_file),
            ));
        }
        out.push_str(&herald_core::monitor::http_sd_configs_yaml(
            &url, client, "  ",
        ));
    }
    out
}

pub async fn job(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
) -> Response {
    let res = match serve_job(&shared, &name, raw.as_deref(), &headers).await {
        Ok((res, j, shard)) => {
            // Recorded here rather than in a middleware: this path serves every 304, and a layer
            // would parse the query a second time and box the handler's future.
            shared
                .consumers
                .record(peer.map(|Extension(ConnectInfo(a))| a.ip()), j, shard);
            res
        }
        Err(e) => e.into_response(),
    };
    shared
        .metrics
        .sd_requests
        .get_or_create(&CodeLabels {
            code: res.status().as_u16(),
        })
        .inc();
    res
}

async fn serve_job(
    shared: &Shared,
    name: &str,
    raw: Option<&str>,
    headers: &HeaderMap,
) -> Result<(Response, usize, Option<Shard>), ApiError> {
    let mut started = Instant::now();
    // A configured job, or a monitor job: a view over the base job `j`.
    let served = catalog::resolve(shared, name)
        .ok_or_else(|| ApiError::NotFound(format!("unknown job {name:?}")))?;
    let j = served.job();
    let key = |shard| served.body_key(shard);
    let encode = |shard| catalog::body(shared, &served, shard);
    let query = SdQuery::parse(raw)?;
    // Until every kind the job reads has synced, any body would be partial: refuse, and Prometheus
    // keeps its previous targets (a failed refresh is not an empty one).
    if !shared.job_synced(j) {
        return Err(ApiError::NotSynced(name.to_string()));
    }
    let if_none_match = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());

    // A long-poll subscribes before reading, so a change between the read and the wait is not missed.
    let mut changes = query.wait.map(|_| {
        let mut rx = shared.subscribe(j);
        rx.borrow_and_update();
        rx
    });
    let mut encoded = encode(query.shard);

    if let (Some(wait), Some(inm), Some(changes)) = (query.wait, if_none_match, changes.as_mut())
        && etag_matches(inm, &encoded.etag)
    {
        let deadline = Instant::now() + cap_wait(wait, headers);
        shared.metrics.sd_waiting.inc();
        let _waiting = WaitingGuard(shared);
        while etag_matches(inm, &encoded.etag) {
            let changed = tokio::select! {
                changed = tokio::time::timeout_at(deadline, changes.changed()) => changed,
                () = shared.shutdown_token().cancelled() => break,
            };
            match changed {
                Ok(Ok(())) => {
                    changes.borrow_and_update();
                    encoded = encode(query.shard);
                }
                // Timed out, or the job's sender is gone: answer with what we have.
                Ok(Err(_)) | Err(_) => break,
            }
        }
        // The wait is the client's choice: herald's own time counts from the wake-up.
        started = Instant::now();
    }

    shared.served.fetch_add(1, Ordering::Relaxed);
    let stale = shared.job_stale(j);
    let res = respond(
        shared,
        &key(query.shard),
        &encoded,
        if_none_match,
        headers,
        stale,
    );
    shared
        .metrics
        .sd_response
        .0
        .observe(started.elapsed().as_secs_f64());
    Ok((res, j, query.shard))
}

/// Decrements the waiting-long-polls gauge however the wait ends (including a dropped connection).
struct WaitingGuard<'a>(&'a Shared);

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.metrics.sd_waiting.dec();
    }
}

/// The wait, kept below the client's refresh interval when it tells us one, so a long-poll never
/// makes a Prometheus refresh time out.
fn cap_wait(wait: Duration, headers: &HeaderMap) -> Duration {
    let refresh = headers
        .get(REFRESH_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64);
    match refresh {
        Some(r) => wait.min(r.mul_f64(0.9)),
        None => wait,
    }
}

/// RFC 9110 `If-None-Match`: `*`, or a list of entity tags compared weakly.
fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    fn strip(t: &str) -> &str {
        t.trim().trim_start_matches("W/")
    }
    let ours = strip(etag);
    if_none_match
        .split(',')
        .any(|t| t.trim() == "*" || strip(t) == ours)
}

/// Whether the client accepts gzip (`Accept-Encoding: gzip` without `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or("").trim();
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f64>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !q_zero
        })
}

/// The response: 304, or the body sent block by block (`Sending`), gzip when the client takes it.
fn respond(
    shared: &Shared,
    key: &BodyKey,
    encoded: &Arc<Encoded>,
    if_none_match: Option<&str>,
    headers: &HeaderMap,
    stale: bool,
) -> Response {
    let mut res = if if_none_match.is_some_and(|inm| etag_matches(inm, &encoded.etag)) {
        StatusCode::NOT_MODIFIED.into_response()
    } else if accepts_gzip(headers) {
        let (gzip, made) = encoded.gzip();
        if made {
            // Its deflated blocks are held now: counted against the budget.
            shared.bodies.recount(key, encoded);
        }
        count_bytes(shared, "gzip", gzip.len());
        let now = std::time::Instant::now();
        let sending = match shared.bodies.hot_gzip(encoded, &gzip, now) {
            Some(whole) => Sending::gzip_whole(encoded.clone(), whole),
            None => Sending::gzip(encoded.clone(), gzip),
        };
        let mut res = Body::new(sending).into_response();
        res.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        res
    } else {
        count_bytes(shared, "identity", encoded.len());
        let hot = shared
            .bodies
            .hot_identity(encoded, std::time::Instant::now());
        Body::new(Sending::identity(encoded.clone(), hot)).into_response()
    };
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&encoded.etag) {
        h.insert(header::ETAG, v);
    }
    h.insert("x-herald-generation", HeaderValue::from(encoded.generation));
    h.insert(
        "x-herald-targets",
        HeaderValue::from(encoded.targets as u64),
    );
    if stale {
        h.insert("x-herald-stale", HeaderValue::from_static("true"));
    }
    res
}

fn count_bytes(shared: &Shared, encoding: &'static str, n: usize) {
    shared
        .metrics
        .sd_bytes
        .get_or_create(&EncodingLabels { encoding })
        .inc_by(n as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_compares_lists_weakly_and_accepts_star() {
        assert!(etag_matches("\"a\"", "\"a\""));
        assert!(etag_matches("\"x\", W/\"a\"", "\"a\""));
        assert!(etag_matches("*", "\"a\""));
        assert!(!etag_matches("\"b\"", "\"a\""));
    }

    #[test]
    fn gzip_is_chosen_unless_refused_with_q_zero() {
        let mk = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_str(v).expect("ascii"),
            );
            h
        };
        assert!(accepts_gzip(&mk("gzip, deflate")));
        assert!(accepts_gzip(&mk("br;q=1.0, gzip;q=0.5")));
        assert!(!accepts_gzip(&mk("gzip;q=0")));
        assert!(!accepts_gzip(&mk("identity")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn waits_stay_below_the_prometheus_refresh_interval() {
        let mut h = HeaderMap::new();
        assert_eq!(
            cap_wait(Duration::from_secs(30), &h),
            Duration::from_secs(30)
        );
        h.insert(REFRESH_HEADER, HeaderValue::from_static("10"));
        assert_eq!(
            cap_wait(Duration::from_secs(30), &h),
            Duration::from_secs(9)
        );
        assert_eq!(cap_wait(Duration::from_secs(2), &h), Duration::from_secs(2));
    }
}
