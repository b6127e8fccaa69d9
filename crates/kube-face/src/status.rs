//! `metav1.Status` error bodies with the apiserver's codes and reasons
//! (k8s.io/apimachinery/pkg/api/errors), which client-go and kubectl decode to decide what to do.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::log::StoreError;

/// An API error, rendered as a Status body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub retry_after: Option<u64>,
    /// The Status's `details` (`name`, `group`, `kind`, `causes`; `retryAfterSeconds` is added
    /// from `retry_after`). NB: boxed, as `metadata`: errors travel in every `Result` of the face.
    pub details: Option<Box<Value>>,
    /// The Status's `metadata` (a ListMeta: an expired continue token's successor), else `{}`.
    pub metadata: Option<Box<Value>>,
    /// Not a Status at all: the plain-text 404 of the apiserver's HTTP mux, for paths no API
    /// group serves (an unknown group, a path outside `/api` and `/apis`).
    pub page_not_found: bool,
}

/// The plain-text body of the apiserver's mux for a path nothing serves (Go's `http.NotFound`).
pub const PAGE_NOT_FOUND: &str = "404 page not found\n";

/// The message of the apiserver's generic 404 (`errors.NewNotFound` of no resource).
pub const NO_RESOURCE: &str = "the server could not find the requested resource";

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            retry_after: None,
            details: None,
            metadata: None,
            page_not_found: false,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, "NotFound", message)
    }
    /// A path of a served API group that names no resource: the apiserver's Status with empty
    /// details.
    pub fn no_resource() -> Self {
        Self::not_found(NO_RESOURCE).with_details(json!({}))
    }
    /// A path no API group serves: a plain-text 404, no Status.
    pub fn page_not_found() -> Self {
        ApiError {
            page_not_found: true,
            ..Self::not_found(PAGE_NOT_FOUND.trim_end())
        }
    }
    /// An object that does not exist, as `errors.NewNotFound(resource, name)`: the message names
    /// `plural[.group]`, the details name the object.
    pub fn object_not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::not_found(format!("{} {name:?} not found", qualified(group, plural)))
            .with_details(object_details(group, plural, name))
    }
    /// The apiserver's 405 (`errors.NewMethodNotSupported`): its message is always this one.
    pub fn method_not_allowed(_why: impl Into<String>) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }
    /// `errors.NewInvalid` of a ListOptions (the apiserver's ValidateListOptions): 422 with one
    /// cause per field error.
    pub fn invalid_list_options(errors: &[FieldError]) -> Self {
        let each: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.detail()))
            .collect();
        let all = match each.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Self::new(
            422,
            "Invalid",
            format!("ListOptions.meta.k8s.io \"\" is invalid: {all}"),
        )
        .with_details(json!({
            "group": "meta.k8s.io",
            "kind": "ListOptions",
            "causes": errors.iter().map(|e| json!({
                "reason": e.reason(),
                "message": e.detail(),
                "field": e.field,
            })).collect::<Vec<_>>(),
        }))
    }
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }
    /// The Status's metadata (a ListMeta).
    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(Box::new(metadata));
        self
    }
    /// An error about an object of a resource in an API group: the group goes into the message
    /// (`endpointslices.discovery.k8s.io "x" not found`) and the details, as the apiserver's.
    pub fn in_group(mut self, group: &str) -> Self {
        if group.is_empty() {
            return self;
        }
        if let Some(d) = self.details.as_deref_mut().and_then(Value::as_object_mut)
            && let Some(plural) = d.get("kind").and_then(Value::as_str).map(str::to_string)
            && !d.contains_key("group")
        {
            d.insert("group".into(), group.into());
            let quoted = format!("{plural} \"");
            if let Some(at) = self.message.find(&quoted) {
                self.message
                    .replace_range(at..at + plural.len(), &qualified(group, &plural));
            }
        }
        self
    }
    /// The Status object as JSON (also used inside watch ERROR events).
    pub fn status_json(&self) -> serde_json::Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": self.metadata.as_deref().cloned().unwrap_or_else(|| json!({})),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            status["details"] = (**d).clone();
        }
        // As apimachinery's NewTooManyRequests: the wait is in the body as well as the header.
        if let Some(s) = self.retry_after {
            status["details"]["retryAfterSeconds"] = json!(s);
        }
        status
    }
}

/// `plural.group`, or `plural` in the core group.
fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// A Status's details for one object.
pub fn object_details(group: &str, plural: &str, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": plural});
    if !group.is_empty() {
        d["group"] = group.into();
    }
    d
}

/// One field error of a validation (k8s.io/apimachinery pkg/util/validation/field).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub field: &'static str,
    pub kind: FieldErrorKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FieldErrorKind {
    /// `field.Forbidden(path, detail)`.
    Forbidden(String),
    /// `field.NotSupported(path, value, supported)`.
    NotSupported {
        value: String,
        supported: &'static [&'static str],
    },
}

impl FieldError {
    pub fn forbidden(field: &'static str, detail: impl Into<String>) -> Self {
        FieldError {
            field,
            kind: FieldErrorKind::Forbidden(detail.into()),
        }
    }
    pub fn not_supported(
        field: &'static str,
        value: &str,
        supported: &'static [&'static str],
    ) -> Self {
        FieldError {
            field,
            kind: FieldErrorKind::NotSupported {
                value: value.to_string(),
                supported,
            },
        }
    }
    fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Forbidden(_) => "FieldValueForbidden",
            FieldErrorKind::NotSupported { .. } => "FieldValueNotSupported",
        }
    }
    /// The error without its field, as a cause's message.
    fn detail(&self) -> String {
        match &self.kind {
            FieldErrorKind::Forbidden(d) => format!("Forbidden: {d}"),
            FieldErrorKind::NotSupported { value, supported } => format!(
                "Unsupported value: {value:?}: supported values: {}",
                supported
                    .iter()
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let msg = e.to_string();
        // The object's name and resource, as the apiserver's errors carry them (the group, which
        // the store does not know, is added by `in_group`).
        let about = |plural: &str, name: &str| object_details("", plural, name);
        match e {
            StoreError::NotFound { plural, name } => {
                ApiError::not_found(msg).with_details(about(&plural, &name))
            }
            StoreError::AlreadyExists { plural, name } => {
                ApiError::new(409, "AlreadyExists", msg).with_details(about(&plural, &name))
            }
            StoreError::Conflict { plural, name } => {
                ApiError::new(409, "Conflict", msg).with_details(about(&plural, &name))
            }
            StoreError::Expired { .. } => ApiError::expired(msg),
            // The apiserver waits a few seconds for a future RV, then gives up with 504 Timeout
            // ("Timeout: Too large resource version"), its cause named (storage.NewTooLargeResourceVersionError).
            StoreError::TooLarge { .. } => ApiError::new(504, "Timeout", format!("Timeout: {msg}"))
                .with_details(json!({"causes": [{
                    "reason": "ResourceVersionTooLarge",
                    "message": "Too large resource version",
                }]})),
            StoreError::Invalid(_) => ApiError::new(422, "Invalid", msg),
            StoreError::BadRequest(_) => ApiError::bad_request(msg),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.page_not_found {
            return page_not_found();
        }
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

/// The apiserver mux's answer to a path nothing serves: Go's `http.NotFound`.
pub fn page_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        PAGE_NOT_FOUND,
    )
        .into_response()
}
