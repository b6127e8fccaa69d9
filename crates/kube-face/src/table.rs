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

/// One column of a Table: its name, type, format and priority (1: shown by `kubectl get -o wide`
/// only).
type Column = (&'static str, &'static str, &'static str, u8);

/// The apiserver's columns for a kind (k8s.io/kubernetes pkg/printers/internalversion/printers.go),
/// Name and Age for the rest (the default table convertor's).
fn columns(r: &Resource) -> Vec<Column> {
    let text = |name| (name, "string", "", 0);
    let wide = |name| (name, "string", "", 1);
    let mut cols = vec![("Name", "string", "name", 0)];
    cols.extend(match (r.group.as_str(), r.plural.as_str()) {
        ("", "pods") => vec![
            text("Ready"),
            text("Status"),
            text("Restarts"),
            text("Age"),
            wide("IP"),
            wide("Node"),
            wide("Nominated Node"),
            wide("Readiness Gates"),
        ],
        ("", "services") => vec![
            text("Type"),
            text("Cluster-IP"),
            text("External-IP"),
            text("Port(s)"),
            text("Age"),
            wide("Selector"),
        ],
        ("", "nodes") => vec![
            text("Status"),
            text("Roles"),
            text("Age"),
            text("Version"),
            wide("Internal-IP"),
            wide("External-IP"),
            wide("OS-Image"),
            wide("Kernel-Version"),
            wide("Container-Runtime"),
        ],
        ("", "namespaces") => vec![text("Status"), text("Age")],
        ("", "configmaps") => vec![text("Data"), text("Age")],
        ("", "endpoints") => vec![text("Endpoints"), text("Age")],
        ("discovery.k8s.io", "endpointslices") => vec![
            text("AddressType"),
            text("Ports"),
            text("Endpoints"),
            text("Age"),
        ],
        ("networking.k8s.io", "ingresses") => vec![
            text("Class"),
            text("Hosts"),
            text("Address"),
            text("Ports"),
            text("Age"),
        ],
        _ => vec![text("Age")],
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
            let gates = list(&o["spec"]["readinessGates"]);
            let conditions = list(&o["status"]["conditions"]);
            let gates_ready = gates
                .iter()
                .filter(|g| {
                    conditions
                        .iter()
                        .any(|c| c["type"] == g["conditionType"] && c["status"] == "True")
                })
                .count();
            vec![
                format!("{ready}/{total}"),
                status,
                restarts.to_string(),
                age,
                or_none(s(&o["status"]["podIP"])),
                or_none(s(&o["spec"]["nodeName"])),
                or_none(s(&o["status"]["nominatedNodeName"])),
                if gates.is_empty() {
                    "<none>".into()
                } else {
                    format!("{gates_ready}/{}", gates.len())
                },
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
                or_none(pairs(&o["spec"]["selector"])),
            ]
        }
        ("", "nodes") => {
            let ready = list(&o["status"]["conditions"])
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let mut status = if ready { "Ready" } else { "NotReady" }.to_string();
            if o["spec"]["unschedulable"] == true {
                status.push_str(",SchedulingDisabled");
            }
            let mut roles: Vec<&str> = o["metadata"]["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
                .filter(|r| !r.is_empty())
                .collect();
            roles.sort_unstable();
            let address = |ty: &str| {
                list(&o["status"]["addresses"])
                    .iter()
                    .find(|a| a["type"] == ty)
                    .map_or_else(|| "<none>".to_string(), |a| s(&a["address"]))
            };
            let info = &o["status"]["nodeInfo"];
            let unknown = |v: String| if v.is_empty() { "<unknown>".into() } else { v };
            vec![
                status,
                or_none(roles.join(",")),
                age,
                s(&info["kubeletVersion"]),
                address("InternalIP"),
                address("ExternalIP"),
                unknown(s(&info["osImage"])),
                unknown(s(&info["kernelVersion"])),
                unknown(s(&info["containerRuntimeVersion"])),
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
        ("networking.k8s.io", "ingresses") => {
            let hosts: Vec<String> = list(&o["spec"]["rules"])
                .iter()
                .filter_map(|r| r["host"].as_str().map(str::to_string))
                .collect();
            let hosts = match hosts.len() {
                0 => "*".to_string(),
                1..=3 => hosts.join(","),
                n => format!("{} + {} more...", hosts[..3].join(","), n - 3),
            };
            let address = list(&o["status"]["loadBalancer"]["ingress"])
                .iter()
                .map(|i| {
                    i["ip"]
                        .as_str()
                        .or(i["hostname"].as_str())
                        .unwrap_or("")
                        .to_string()
                })
                .collect::<Vec<_>>()
                .join(",");
            let ports = if list(&o["spec"]["tls"]).is_empty() {
                "80"
            } else {
                "80, 443"
            };
            vec![
                or_none(s(&o["spec"]["ingressClassName"])),
                hosts,
                address,
                ports.into(),
                age,
            ]
        }
        ("", "configmaps") => {
            // An integer cell, as the apiserver's.
            let n = ["data", "binaryData"]
                .iter()
                .map(|k| o[*k].as_object().map_or(0, |m| m.len()))
                .sum::<usize>();
            return [Value::from(name), Value::from(n), Value::from(age)].into();
        }
        _ => vec![age],
    };
    std::iter::once(name).chain(rest).map(Value::from).collect()
}

fn or_none(v: String) -> String {
    if v.is_empty() { "<none>".into() } else { v }
}

/// `k=v,...` of a string map, sorted by key (labels.FormatLabels), or "" when empty.
fn pairs(m: &Value) -> String {
    let mut kv: Vec<String> = m
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    kv.sort_unstable();
    kv.join(",")
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
            .map(|(name, ty, format, priority)| json!({"name": name, "type": ty, "format": format, "description": "", "priority": priority}))
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
        assert_eq!(t["columnDefinitions"].as_array().expect("cols").len(), 9);
        assert_eq!(t["columnDefinitions"][5]["priority"], 1);
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
