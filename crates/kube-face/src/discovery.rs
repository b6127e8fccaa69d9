//! API discovery documents (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}[/{version}]`) for
//! the served resources only: what kubectl and client-go read to map kinds to resources. Aggregated
//! discovery (apidiscovery.k8s.io/v2) is not offered: clients that ask for it accept this legacy form,
//! as with any pre-1.26 apiserver.

use serde_json::{Value, json};

use crate::resource::Catalog;

/// The version claimed: 1.33, so clients pick discovery.k8s.io/v1 EndpointSlices and may use
/// streaming lists (WatchList, beta since 1.32).
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-kube-face",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

pub fn core_versions(catalog: &Catalog, server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": catalog.versions(""),
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_doc(catalog: &Catalog, group: &str) -> Value {
    let versions: Vec<Value> = catalog
        .versions(group)
        .into_iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

pub fn group_list(catalog: &Catalog) -> Value {
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": catalog.groups().into_iter().map(|g| group_doc(catalog, g)).collect::<Vec<_>>()
    })
}

pub fn group(catalog: &Catalog, group: &str) -> Option<Value> {
    catalog.groups().contains(&group).then(|| {
        let mut doc = group_doc(catalog, group);
        doc["kind"] = "APIGroup".into();
        doc["apiVersion"] = "v1".into();
        doc
    })
}

/// The APIResourceList of a group version ("" for core), or None when nothing of it is served.
pub fn resources(catalog: &Catalog, group: &str, version: &str) -> Option<Value> {
    let served: Vec<_> = catalog
        .resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let verbs: &[&str] = if catalog.writable {
        &["create", "delete", "get", "list", "update", "watch"]
    } else {
        &["get", "list", "watch"]
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": served.iter().map(|r| json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs,
            "shortNames": r.short_names,
        })).collect::<Vec<_>>()
    }))
}
