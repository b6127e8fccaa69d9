//! Admin endpoints: liveness, readiness (first complete sync of every needed kind), and `/metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::metrics::Metrics;
use crate::shared::Shared;

pub async fn healthz() -> &'static str {
    "ok\n"
}

pub async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let unsynced = shared.unsynced_kinds();
    if unsynced.is_empty() {
        return (StatusCode::OK, "ok\n").into_response();
    }
    let names: Vec<&str> = unsynced.iter().map(String::as_str).collect();
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("waiting for the first sync of: {}\n", names.join(", ")),
    )
        .into_response()
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    // Ages are computed at scrape time rather than kept ticking in the background.
    for (kind, age) in shared.last_event_ages() {
        if let Some(age) = age {
            shared
                .metrics
                .upstream_last_event_age
                .get_or_create(&Metrics::kind(&kind))
                .set(age);
        }
    }
    let m = &shared.metrics;
    m.ready.set(i64::from(shared.ready()));
    let consumers = crate::status::ConsumerStatus::collect(&shared, &shared.consumers.recent());
    m.sd_consumers.set(gauge(consumers.sd_clients as u64));
    m.direct_watches.set(gauge(consumers.direct_watches));
    m.watches_saved.set(gauge(consumers.watches_saved));
    let mut body = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, shared.registry()) {
        tracing::error!(error = %e, "encoding metrics failed");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    let mut res = body.into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    res
}
