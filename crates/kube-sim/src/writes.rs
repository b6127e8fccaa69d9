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
            // The all-namespaces path serves list and watch only.
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
            // A collection takes no PUT.
            None => return Err(ApiError::method_not_allowed("PUT on a collection")),
            Some(n) if n == body_name => {}
            Some(n) => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({n})"
                )));
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
        return delete_collection(store, kind, target, q);
    };
    let ns = target.namespace.as_deref().unwrap_or("");
    if q.dry_run {
        let e = store
            .get(kind, ns, name)
            .ok_or_else(|| ApiError::object_not_found(kind.group(), kind.plural(), name))?;
        return Ok((StatusCode::OK, deleted(kind, &e)));
    }
    let old = store.delete(kind, ns, name, None)?;
    Ok((StatusCode::OK, deleted(kind, &old)))
}

/// What a delete answers: the object for the kinds whose registry returns it (pods, Services,
/// namespaces: `ReturnDeletedObject`), else a Status of success naming it, as the apiserver.
fn deleted(kind: Kind, e: &kube_face::Entry) -> Bytes {
    if matches!(kind, Kind::Pod | Kind::Service | Kind::Namespace) {
        return e.bytes.to_bytes();
    }
    let obj: Value = serde_json::from_slice(&e.bytes.get()).unwrap_or_default();
    let mut details = kube_face::status::object_details(kind.group(), kind.plural(), e.name());
    details["uid"] = obj["metadata"]["uid"].clone();
    Bytes::from(
        serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        })
        .to_string(),
    )
}

/// DELETE of a collection (deletecollection): every object the selectors pick, deleted; the answer
/// is the list of them, as the apiserver's. The all-namespaces path of a namespaced kind serves
/// list and watch only.
fn delete_collection(store: &Store, kind: Kind, target: &Target, q: &Query) -> Reply {
    if kind.namespaced() && target.namespace.is_none() {
        return Err(ApiError::method_not_allowed(
            "deletecollection of all namespaces",
        ));
    }
    let page = store.list(
        kind,
        target.namespace.as_deref(),
        kube_face::ListAt::Latest,
        None,
        None,
        None,
        &|e| kube_face::request::selected(q, e),
    )?;
    let mut items = Vec::with_capacity(page.items.len());
    for e in &page.items {
        if !q.dry_run {
            match store.delete(kind, e.namespace(), e.name(), None) {
                Ok(_) => {}
                // Deleted meanwhile: not this request's.
                Err(kube_face::StoreError::NotFound { .. }) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        let mut obj: Value = serde_json::from_slice(&e.bytes.get()).unwrap_or_default();
        if let Some(o) = obj.as_object_mut() {
            o.remove("kind");
            o.remove("apiVersion");
        }
        items.push(obj);
    }
    let list = serde_json::json!({
        "kind": format!("{}List", kind.name()),
        "apiVersion": kind.api_version(),
        "metadata": {"resourceVersion": store.resource_version().to_string()},
        "items": items,
    });
    Ok((StatusCode::OK, Bytes::from(list.to_string())))
}
