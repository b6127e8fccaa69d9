//! Building fix manifests from objects as read: stripping what the server owns, so that the result
//! is accepted by `kubectl create` / `kubectl replace`.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// Server-populated metadata fields that a create must not carry and a replace need not
/// (an unconditional replace has no resourceVersion precondition).
const SERVER_METADATA: [&str; 8] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Encodes a typed object and strips it (see [`clean`]).
pub fn from_typed<T: Serialize>(obj: &T) -> Value {
    let mut v = serde_json::to_value(obj).expect("k8s-openapi objects always encode to JSON");
    clean(&mut v);
    v
}

/// A Service as read, through its k8s-openapi type (fields it does not know dropped, as
/// `kubectl replace` would have the server do), stripped.
pub fn service(svc: &crate::objects::Service) -> Value {
    typed::<k8s_openapi::api::core::v1::Service>(&svc.raw)
}

/// A ConfigMap the inventory kept whole (kube-proxy's), through its k8s-openapi type, stripped.
pub fn config_map(cm: &crate::objects::ConfigMap) -> Value {
    typed::<k8s_openapi::api::core::v1::ConfigMap>(&cm.raw)
}

fn typed<T: Serialize + serde::de::DeserializeOwned>(raw: &str) -> Value {
    // NB: the inventory decoded every field a rule reads from these bytes already; the remaining
    // fields may still not fit the API type. Then the object is kept as read.
    match serde_json::from_str::<T>(raw) {
        Ok(obj) => from_typed(&obj),
        Err(_) => {
            let mut v: Value = serde_json::from_str(raw).expect("the inventory keeps valid JSON");
            clean(&mut v);
            v
        }
    }
}

/// Removes `status` and the server-owned metadata, and the last-applied annotation (it would
/// describe the object before the fix).
pub fn clean(v: &mut Value) {
    let Some(map) = v.as_object_mut() else { return };
    map.remove("status");
    if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in SERVER_METADATA {
            meta.remove(f);
        }
        if let Some(ann) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            ann.remove("kubectl.kubernetes.io/last-applied-configuration");
            if ann.is_empty() {
                meta.remove("annotations");
            }
        }
    }
}

/// Sets `metadata.annotations[key] = value`.
pub fn annotate(v: &mut Value, key: &str, value: &str) {
    let meta = entry_object(v, "metadata");
    let ann = entry_object(meta, "annotations");
    ann.as_object_mut()
        .expect("entry_object returns an object")
        .insert(key.into(), value.into());
}

/// Sets `metadata.labels[key] = value`.
pub fn label(v: &mut Value, key: &str, value: &str) {
    let meta = entry_object(v, "metadata");
    let labels = entry_object(meta, "labels");
    labels
        .as_object_mut()
        .expect("entry_object returns an object")
        .insert(key.into(), value.into());
}

/// `v[key]`, made an object if absent or not one.
pub fn entry_object<'v>(v: &'v mut Value, key: &str) -> &'v mut Value {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let map = v.as_object_mut().expect("made an object above");
    let slot = map.entry(key).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot
}

/// A DNS-1035 label (Service names): at most 63 characters, no trailing dash.
pub fn dns_label(name: &str) -> String {
    let mut s: String = name.chars().take(63).collect();
    while s.ends_with('-') {
        s.pop();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_strips_status_and_server_metadata_but_keeps_user_annotations() {
        let mut v = json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "7",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "x": "y"}},
            "status": {}});
        clean(&mut v);
        assert_eq!(
            v,
            json!({"metadata": {"name": "a", "annotations": {"x": "y"}}})
        );
    }
}
