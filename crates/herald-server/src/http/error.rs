//! The SD face's error: what a request could not be served for, as a status and a small JSON body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::http::query::QueryError;

/// An error answered as a small JSON body `{"error": "..."}` with its status code.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    BadQuery(#[from] QueryError),
    #[error("job {0:?} has not completed its first sync with the apiserver yet")]
    NotSynced(String),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::BadQuery(_) => StatusCode::BAD_REQUEST,
            ApiError::NotSynced(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::json!({ "error": self.to_string() });
        let mut res = (status, axum::Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            res.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        res
    }
}
