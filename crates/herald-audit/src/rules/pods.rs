//! HA008: pods serving metrics on several ports while their `prometheus.io` annotations can name only
//! one; and the pod annotation helpers HA009 shares.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::scrapes::monitor_scrapes;
use super::{Outcome, Rule, require, thousands};
use crate::facts::Facts;
use crate::finding::{Action, Cost, Finding, Fix, ObjectRef, Severity, Verb};
use crate::inventory::{Cluster, ns_name};
use crate::istio;
use crate::kind::Kind;
use crate::objects::{Labels, Pod};
use crate::{manifest, workload};

pub const MULTI_PORT_ANNOTATIONS: Rule = Rule {
    code: "HA008",
    slug: "annotations-name-one-metrics-port",
    about: "pods with metrics on several ports while prometheus.io annotations can name only one",
    check: multi_port,
};

/// Istio's per-pod switch for metrics merging (istio/istio:pkg/kube/inject/inject.go).
pub(super) const MERGE_ANNOTATION: &str = "prometheus.istio.io/merge-metrics";

pub(super) fn annotation<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Whether Istio rewrote this pod's annotations to the merged endpoint.
pub(super) fn is_merged(pod: &Pod) -> bool {
    istio::sidecar(pod).is_some() && annotation(pod, "prometheus.io/port") == Some("15020")
}

/// The prometheus.io annotations as the application wrote them.
fn app_annotations(pod: &Pod) -> BTreeMap<String, String> {
    if is_merged(pod) {
        istio::original_prometheus_annotations(pod).unwrap_or_default()
    } else {
        pod.metadata
            .annotations
            .as_ref()
            .map(Labels::to_map)
            .unwrap_or_default()
    }
}

fn looks_like_metrics(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("metric") || n.contains("prom") || n == "monitoring" || n == "telemetry"
}

/// A container port: `(container, port name, number)`.
type PortRow = (String, Option<String>, i32);

/// Application ports that serve metrics: named like it, or the annotated one. Istio's own
/// containers are left out (merging covers Envoy).
fn metrics_ports(pod: &Pod, annotated: i32) -> Vec<PortRow> {
    let mut out = Vec::new();
    for c in pod.spec.iter().flat_map(|s| &s.containers) {
        if c.name == "istio-proxy" {
            continue;
        }
        for p in c.ports.iter().flatten() {
            let named = p.name.as_deref().is_some_and(looks_like_metrics);
            if named || p.container_port == annotated {
                out.push((c.name.clone(), p.name.clone(), p.container_port));
            }
        }
    }
    out
}

/// The pod ports something scrapes: the annotated one and those of monitor endpoints.
fn covered(facts: &Facts<'_>, pod: &Pod, annotated: i32) -> BTreeSet<i32> {
    let mut ports: BTreeSet<i32> = monitor_scrapes(facts, pod)
        .into_iter()
        .map(|s| s.port)
        .collect();
    ports.insert(annotated);
    ports
}

fn prometheus_pod_monitor_labels(c: &Cluster) -> BTreeMap<String, String> {
    c.all_prometheuses()
        .find_map(|(p, _)| p.spec.pod_monitor_selector.as_ref()?.match_labels.clone())
        .unwrap_or_default()
}

fn multi_port(facts: &Facts<'_>, _: &super::Options) -> Outcome {
    let c = facts.cluster;
    if let Err(o) = require(c, &[Kind::Pod]) {
        return o;
    }
    // A metrics port is covered when the annotations name it or a monitor scrapes it: a PodMonitor
    // (such as this rule's fix) or a ServiceMonitor through a Service.
    let candidates = c.pods.iter().map(|p| &p.obj).filter(|p| {
        let a = app_annotations(p);
        let port = a
            .get("prometheus.io/port")
            .and_then(|p| p.parse::<i32>().ok());
        a.get("prometheus.io/scrape").map(String::as_str) == Some("true")
            && port.is_some_and(|port| {
                let numbers: BTreeSet<i32> = metrics_ports(p, port).iter().map(|r| r.2).collect();
                numbers.len() > 1 && !covered(facts, p, port).is_superset(&numbers)
            })
    });
    let mut findings = Vec::new();
    for (owner, pods) in workload::group(candidates) {
        let pod = pods[0];
        let a = app_annotations(pod);
        let annotated: i32 = a
            .get("prometheus.io/port")
            .and_then(|p| p.parse().ok())
            .expect("candidates have a numeric port annotation");
        let path = a
            .get("prometheus.io/path")
            .cloned()
            .unwrap_or_else(|| "/metrics".into());
        let ports = metrics_ports(pod, annotated);
        let mut seen = BTreeSet::new();
        let ports: Vec<_> = ports.into_iter().filter(|r| seen.insert(r.2)).collect();
        let covered = covered(facts, pod, annotated);
        let missed = ports.iter().filter(|r| !covered.contains(&r.2)).count();
        let (ns, _) = ns_name(&pod.metadata);
        let mut evidence = vec![format!(
            "prometheus.io/port names {annotated} only{}",
            if is_merged(pod) {
                " (the application's annotation, kept by Istio's merging)"
            } else {
                ""
            }
        )];
        for (cname, pname, n) in &ports {
            evidence.push(format!(
                "container {cname} exposes {}{n}{}",
                pname
                    .as_deref()
                    .map(|p| format!("{p} "))
                    .unwrap_or_default(),
                if *n == annotated {
                    " (scraped by the annotations)"
                } else if covered.contains(n) {
                    " (scraped by a monitor)"
                } else {
                    " (not scraped)"
                }
            ));
        }
        evidence.push(format!("{} pod(s) of {owner} in the input", pods.len()));
        let endpoints: Vec<Value> = ports
            .iter()
            .map(|(_, pname, n)| {
                let mut ep = match pname {
                    Some(name) => json!({"port": name}),
                    None => json!({"targetPort": n}),
                };
                ep["path"] = json!(if *n == annotated {
                    path.clone()
                } else {
                    "/metrics".into()
                });
                if *n == annotated
                    && let Some(s) = a.get("prometheus.io/scheme")
                {
                    ep["scheme"] = json!(s);
                }
                ep
            })
            .collect();
        let pm_name = manifest::dns_label(&format!("{}-metrics", owner.name));
        let pm_ref = ObjectRef::new(Kind::PodMonitor, ns, &pm_name);
        let mut pm = json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": {"name": pm_name, "namespace": ns},
            "spec": {
                "selector": {"matchLabels": workload::common_labels(&pods)},
                "podMetricsEndpoints": endpoints,
            },
        });
        let labels = prometheus_pod_monitor_labels(c);
        if !labels.is_empty() {
            pm["metadata"]["labels"] = json!(labels);
        }
        let mut steps = vec![
            format!("kubectl create -f this file (PodMonitor {ns}/{pm_name}, one endpoint per port)"),
            "check that a Prometheus selects it (podMonitorSelector) and that every port's target is up".into(),
            format!(
                "then set prometheus.io/scrape: \"false\" on {owner}'s pod template so port {annotated} \
                 is not scraped twice"
            ),
        ];
        if istio::sidecar(pod).is_some() {
            steps.insert(
                1,
                "the pods have an Istio sidecar: under STRICT mTLS a plaintext scrape of these ports fails \
                 (HA009); scrape them from a Prometheus holding mesh certificates (scheme: https, tlsConfig)"
                    .into(),
            );
        }
        let mut figures = BTreeMap::new();
        figures.insert("unscraped_ports_per_pod".into(), missed as f64);
        figures.insert("unscraped_endpoints".into(), (missed * pods.len()) as f64);
        findings.push(Finding {
            code: MULTI_PORT_ANNOTATIONS.code,
            rule: MULTI_PORT_ANNOTATIONS.slug,
            severity: Severity::Warning,
            title: format!(
                "{owner} serves metrics on {} ports; its annotations scrape one",
                ports.len()
            ),
            objects: vec![owner.clone()],
            evidence,
            cost: Cost {
                summary: format!(
                    "{} metrics endpoints never scraped",
                    thousands((missed * pods.len()) as u64)
                ),
                figures,
            },
            fix: Fix {
                summary: format!("scrape every port with PodMonitor {ns}/{pm_name}"),
                steps,
                actions: vec![Action {
                    verb: Verb::Create,
                    object: pm_ref,
                }],
                manifests: vec![pm],
                file: None,
            },
        });
    }
    Outcome::Ran(findings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metrics_ports_are_named_like_it_or_annotated_and_exclude_the_sidecar() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "a"},
            "spec": {"containers": [
                {"name": "app", "ports": [{"name": "http", "containerPort": 80}, {"containerPort": 8080}]},
                {"name": "exporter", "ports": [{"name": "prom", "containerPort": 9100}]},
                {"name": "istio-proxy", "ports": [{"name": "http-envoy-prom", "containerPort": 15090}]}
            ]}
        }))
        .expect("valid pod");
        let numbers: Vec<i32> = metrics_ports(&pod, 8080).iter().map(|r| r.2).collect();
        assert_eq!(numbers, [8080, 9100]);
    }

    #[test]
    fn a_pod_monitor_scraping_every_metrics_port_settles_the_annotations_finding() {
        let mut c = Cluster::default();
        c.add(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "a", "labels": {"app": "x"},
                "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}},
            "spec": {"containers": [
                {"name": "app", "ports": [{"name": "metrics", "containerPort": 9090}]},
                {"name": "exporter", "ports": [{"name": "prom", "containerPort": 9100}]}]}}))
            .expect("valid pod");
        let ha008 = |c: &Cluster| {
            crate::rules::evaluate(c, &crate::rules::Options::default())
                .findings
                .iter()
                .filter(|f| f.code == "HA008")
                .count()
        };
        assert_eq!(ha008(&c), 1);
        c.add(
            json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": {"name": "x", "namespace": "a"},
            "spec": {"selector": {"matchLabels": {"app": "x"}},
                     "podMetricsEndpoints": [{"port": "prom"}]}}),
        )
        .expect("valid PodMonitor");
        assert_eq!(ha008(&c), 0);
    }
}
