//! kube-sim's write path behind the shared face: create (POST), replace (PUT) and delete, with the
//! apiserver's validation and errors. herald serves the same face read-only.

use axum::http::{Method, StatusCode};
use bytes::Bytes;
use kube_face::request::{Query, Target};
use kube_face::{ApiError, WriteRequest};
use serde_json::Value;

use crate::kind::Kind;
use crate::store::Store;

type Reply = Result<(StatusCode, Bytes), ApiError>;

/// Dispatches a write to `store`.
pub fn write(store: &Store, kind: Kind, req: WriteRequest<'_>) -> Reply {
    if *req.method == Method::DELETE {
        return delete(store, kind, req.target, req.query);
    }
    put(store, kind, req.target, req.query, req.method, req.body)
}

fn put(
    store: &Store,
    kind: Kind,
    target: &Target,
    q: &Query,
    method: &Method,
    body: &[u8],
) -> Reply {
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
        (store.create(kind, value)?, StatusCode::CREATED)
    } else {
        (store.update(kind, value)?, StatusCode::OK)
    };
    Ok((code, entry.bytes.to_bytes()))
}

fn delete(store: &Store, kind: Kind, target: &Target, q: &Query) -> Reply {
    let Some(name) = &target.name else {
        return Err(ApiError::method_not_allowed(
            "deletecollection is not supported by kube-sim",
        ));
    };
    let ns = target.namespace.as_deref().unwrap_or("");
    if q.dry_run {
        let e = store
            .get(kind, ns, name)
            .ok_or_else(|| ApiError::not_found(format!("{} {name:?} not found", kind.plural())))?;
        return Ok((StatusCode::OK, e.bytes.to_bytes()));
    }
    let old = store.delete(kind, ns, name, None)?;
    Ok((StatusCode::OK, old.bytes.to_bytes()))
}
