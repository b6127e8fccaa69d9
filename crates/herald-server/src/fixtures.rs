//! Fixtures the unit tests share: cache entries made from JSON, as an upstream feed would hand
//! them over (no labels or fields indexed).

use std::sync::Arc;

use kube_face::Entry;

/// Object `namespace/name` at version `rv`, holding `json`.
pub fn mk_entry(namespace: &str, name: &str, rv: u64, json: &serde_json::Value) -> Arc<Entry> {
    Arc::new(Entry {
        key: (namespace.into(), name.into()),
        rv,
        labels: Default::default(),
        fields: Default::default(),
        uid_hash: 0,
        bytes: kube_face::Json::compress(json.to_string().as_bytes()),
        proto: Default::default(),
    })
}
