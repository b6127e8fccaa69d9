//! herald's HTTP faces: HTTP service discovery under `/sd/v1`, the admin endpoints (`/healthz`,
//! `/readyz`, `/metrics`), the status page (`/`, `/status.json`) and, when configured, the OpenTelemetry
//! target allocator's API (`crate::allocator::api`). `app` builds the router so tests
//! drive it without a socket.

mod admin;
mod error;
mod explain_page;
mod query;
pub(crate) mod sd;
pub mod status_page;
mod style;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::shared::Shared;

pub use error::ApiError;
pub use query::{QueryError, SdQuery, parse_duration};

/// The whole HTTP surface over `shared`.
pub fn app(shared: Arc<Shared>) -> Router {
    app_with(shared, None)
}

/// The whole HTTP surface over `shared`, and the OpenTelemetry target allocator's API when
/// `allocator` is set (`crate::allocator::api`).
pub fn app_with(
    shared: Arc<Shared>,
    allocator: Option<Arc<crate::allocator::Allocator>>,
) -> Router {
    let router = Router::new()
        // A wildcard: monitor jobs are named `serviceMonitor/<namespace>/<name>/<index>`.
        .route("/sd/v1/{*job}", get(sd::job))
        .route("/scrape-configs", get(sd::scrape_configs))
        .route("/", get(status_page::page))
        .route("/status.json", get(status_page::json))
        .route("/explain", get(explain_page::json))
        .route("/explain.html", get(explain_page::page))
        .route("/sd/v1", get(sd::list_jobs))
        .route("/sd/v1/", get(sd::list_jobs))
        .route("/healthz", get(admin::healthz))
        .route("/readyz", get(admin::readyz))
        .route("/metrics", get(admin::metrics))
        .with_state(shared);
    let router = match allocator {
        Some(a) => router.merge(crate::allocator::api::router(a)),
        None => router,
    };
    router.fallback(|| async { ApiError::NotFound("no such path".into()) })
}

/// A refused request: 401 with a `WWW-Authenticate` challenge when no credential came, 403 when a
/// bearer token came that none of the configured ones matches.
pub fn refuse(why: crate::auth::Refusal) -> Response {
    let (status, message) = match why {
        crate::auth::Refusal::Missing => (
            StatusCode::UNAUTHORIZED,
            "a bearer token or a client certificate is required",
        ),
        crate::auth::Refusal::Wrong => (StatusCode::FORBIDDEN, "the bearer token is not accepted"),
    };
    let mut res = (status, axum::Json(serde_json::json!({ "error": message }))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        res.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer realm=\"herald\""),
        );
    }
    res
}
