//! Server-side printing: `meta.k8s.io/v1 Table` responses for clients that ask for them
//! (`Accept: application/json;as=Table;...`, which `kubectl get` sends), with the apiserver's columns
//! for the kinds kubectl users look at most (k8s.io/kubernetes pkg/printers/internalversion/printers.go)
//! and Name/Age for the rest.

use serde_json::{Value, json};

use crate::resource::Resource;

/// Whether an Accept header asks for a Table.
pub fn wanted(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("as=Table"))
}

fn columns(r: &Resource) -> Vec<(&'static str, &'static str)> {
    let mut cols = vec![("Name", "name")];
    cols.extend(match (r.group.as_str(), r.plural.as_str()) {
        ("", "pods") => vec![("Ready", ""), ("Status", ""), ("Restarts", ""), ("Age", "")],
        ("", "services") => vec![
            ("Type", ""),
            ("Cluster-IP", ""),
            ("External-IP", ""),
            ("Port(s)", ""),
            ("Age", ""),
        ],
        ("", "nodes") => vec![("Status", ""), ("Roles", ""), ("Age", ""), ("Version", "")],
        ("", "namespaces") => vec![("Status", ""), ("Age", "")],
        ("", "endpoints") => vec![("Endpoints", ""), ("Age", "")],
        ("discovery.k8s.io", "endpointslices") => vec![
            ("AddressType", ""),
            ("Ports", ""),
            ("Endpoints", ""),
            ("Age", ""),
        ],
        _ => vec![("Age", "")],
    });
    cols
}

/// kubectl's short human duration (k8s.io/apimachinery/pkg/util/duration.HumanDuration).
fn human_age(created: &str) -> String {
    let Ok(ts) = created.parse::<k8s_openapi::jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let s = (now - ts.as_second()).max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    match () {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => format!("{m}m{}s", s % 60),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if h < 192 => format!("{d}d{}h", h % 24),
        _ => format!("{d}d"),
    }
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or("").to_string()
}

fn cells(r: &Resource, o: &Value) -> Vec<Value> {
    let age = human_age(o["metadata"]["creationTimestamp"].as_str().unwrap_or(""));
    let name = s(&o["metadata"]["name"]);
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let rest: Vec<String> = match (r.group.as_str(), r.plural.as_str()) {
        ("", "pods") => {
            let statuses = list(&o["status"]["containerStatuses"]);
            let total = list(&o["spec"]["containers"]).len();
            let ready = statuses.iter().filter(|c| c["ready"] == true).count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|c| c["restartCount"].as_i64())
                .sum();
            let status = if !o["metadata"]["deletionTimestamp"].is_null() {
                "Terminating".to_string()
            } else {
                o["status"]["reason"]
                    .as_str()
                    .map_or_else(|| s(&o["status"]["phase"]), str::to_string)
            };
            vec![
                format!("{ready}/{total}"),
                status,
                restarts.to_string(),
                age,
            ]
        }
        ("", "services") => {
            let ports: Vec<String> = list(&o["spec"]["ports"])
                .iter()
                .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                .collect();
            let ext = list(&o["status"]["loadBalancer"]["ingress"])
                .iter()
                .map(|i| s(&i["ip"]))
                .collect::<Vec<_>>()
                .join(",");
            vec![
                s(&o["spec"]["type"]),
                s(&o["spec"]["clusterIP"]),
                if ext.is_empty() { "<none>".into() } else { ext },
                if ports.is_empty() {
                    "<none>".into()
                } else {
                    ports.join(",")
                },
                age,
            ]
        }
        ("", "nodes") => {
            let ready = list(&o["status"]["conditions"])
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            vec![
                if ready { "Ready" } else { "NotReady" }.into(),
                "<none>".into(),
                age,
                s(&o["status"]["nodeInfo"]["kubeletVersion"]),
            ]
        }
        ("", "namespaces") => vec![
            o["status"]["phase"].as_str().unwrap_or("Active").into(),
            age,
        ],
        ("", "endpoints") => {
            let mut eps = Vec::new();
            for sub in list(&o["subsets"]) {
                for a in list(&sub["addresses"]) {
                    for p in list(&sub["ports"]) {
                        eps.push(format!("{}:{}", s(&a["ip"]), p["port"]));
                    }
                }
            }
            let shown = if eps.len() > 3 {
                format!("{} + {} more...", eps[..3].join(","), eps.len() - 3)
            } else if eps.is_empty() {
                "<none>".into()
            } else {
                eps.join(",")
            };
            vec![shown, age]
        }
        ("discovery.k8s.io", "endpointslices") => {
            let ports: Vec<String> = list(&o["ports"])
                .iter()
                .map(|p| p["port"].to_string())
                .collect();
            let n = list(&o["endpoints"]).len();
            vec![s(&o["addressType"]), ports.join(","), n.to_string(), age]
        }
        _ => vec![age],
    };
    std::iter::once(name).chain(rest).map(Value::from).collect()
}

fn row(r: &Resource, o: &Value) -> Value {
    json!({
        "cells": cells(r, o),
        "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}
    })
}

/// A Table of `objects`; `list_meta` is the list's metadata (resourceVersion, continue).
pub fn table(r: &Resource, objects: &[Value], list_meta: Value, with_columns: bool) -> Value {
    let defs: Vec<Value> = if with_columns {
        columns(r)
            .into_iter()
            .map(|(name, format)| json!({"name": name, "type": "string", "format": format, "description": "", "priority": 0}))
            .collect()
    } else {
        vec![]
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": defs,
        "rows": objects.iter().map(|o| row(r, o)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_print_ready_status_and_restarts_like_the_apiserver() {
        let pod = json!({"metadata": {"name": "web-1", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1}]}});
        let pods = Resource::builtin("pods").expect("pods");
        let t = table(&pods, &[pod], json!({"resourceVersion": "5"}), true);
        assert_eq!(t["columnDefinitions"].as_array().expect("cols").len(), 5);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "web-1");
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "Running");
        assert_eq!(cells[3], "3");
        assert!(cells[4].as_str().expect("age").ends_with('d'));
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "web-1");
    }

    #[test]
    fn only_table_accept_headers_get_tables() {
        assert!(wanted(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        )));
        assert!(!wanted(Some("application/json")));
        assert!(!wanted(None));
    }
}
