//! API discovery documents (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}[/{version}]`): what
//! kubectl and client-go read to map kinds to resources. Aggregated discovery (apidiscovery.k8s.io/v2) is
//! not offered: clients that ask for it accept this legacy form, as with any pre-1.26 apiserver.

use serde_json::{Value, json};

use crate::kind::Kind;

/// The version kube-sim claims: 1.21+ so clients pick discovery.k8s.io/v1 EndpointSlices.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-kube-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn groups() -> Vec<&'static str> {
    let mut g: Vec<&str> = Kind::ALL
        .iter()
        .map(|k| k.group())
        .filter(|g| !g.is_empty())
        .collect();
    g.dedup();
    g
}

fn group_doc(group: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/v1"), "version": "v1"});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

pub fn group_list() -> Value {
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups().into_iter().map(group_doc).collect::<Vec<_>>()
    })
}

pub fn group(group: &str) -> Option<Value> {
    groups().contains(&group).then(|| {
        let mut doc = group_doc(group);
        doc["kind"] = "APIGroup".into();
        doc["apiVersion"] = "v1".into();
        doc
    })
}

/// The APIResourceList of a group version ("" for core), or None when kube-sim serves no such group.
pub fn resources(group: &str, version: &str) -> Option<Value> {
    if version != "v1" {
        return None;
    }
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| k.group() == group)
        .collect();
    if kinds.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        "v1".to_string()
    } else {
        format!("{group}/v1")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": kinds.iter().map(|k| json!({
            "name": k.plural(),
            "singularName": k.singular(),
            "namespaced": k.namespaced(),
            "kind": k.name(),
            "verbs": ["create", "delete", "get", "list", "update", "watch"],
            "shortNames": k.short_names(),
        })).collect::<Vec<_>>()
    }))
}
