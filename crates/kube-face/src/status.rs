//! `metav1.Status` error bodies with the apiserver's codes and reasons
//! (k8s.io/apimachinery/pkg/api/errors), which client-go and kubectl decode to decide what to do.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::log::StoreError;

/// An API error, rendered as a Status body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, "NotFound", message)
    }
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }
    /// The Status object as JSON (also used inside watch ERROR events).
    pub fn status_json(&self) -> serde_json::Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        // As apimachinery's NewTooManyRequests: the wait is in the body as well as the header.
        if let Some(s) = self.retry_after {
            status["details"] = json!({ "retryAfterSeconds": s });
        }
        status
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let msg = e.to_string();
        match e {
            StoreError::NotFound { .. } => ApiError::not_found(msg),
            StoreError::AlreadyExists { .. } => ApiError::new(409, "AlreadyExists", msg),
            StoreError::Conflict { .. } => ApiError::new(409, "Conflict", msg),
            StoreError::Expired { .. } => ApiError::expired(msg),
            // The apiserver waits a few seconds for a future RV, then gives up with 504 Timeout.
            StoreError::TooLarge { .. } => ApiError::new(504, "Timeout", msg),
            StoreError::Invalid(_) => ApiError::new(422, "Invalid", msg),
            StoreError::BadRequest(_) => ApiError::bad_request(msg),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (
            code,
            [(header::CONTENT_TYPE, "application/json")],
            self.status_json().to_string(),
        )
            .into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}
