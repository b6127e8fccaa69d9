//! HA008–HA009: pods whose scrape configuration cannot reach all their metrics — annotations that
//! name one port, and Istio strict mTLS in front of a plaintext scrape.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::{Outcome, Rule, require, thousands};
use crate::custom::{PeerAuthentication, ScrapeEndpoint};
use crate::facts::Facts;
use crate::finding::{Action, Cost, Finding, Fix, ObjectRef, Severity, Verb};
use crate::inventory::{Cluster, Item, ns_name};
use crate::istio::{self, Istio};
use crate::kind::Kind;
use crate::{manifest, selector, workload};

pub const MULTI_PORT_ANNOTATIONS: Rule = Rule {
    code: "HA008",
    slug: "annotations-name-one-metrics-port",
    about: "pods with metrics on several ports while prometheus.io annotations can name only one",
    check: multi_port,
};

pub const STRICT_MTLS_SCRAPE: Rule = Rule {
    code: "HA009",
    slug: "strict-mtls-blocks-scrape",
    about: "Istio strict mTLS on pods scraped in plaintext on an application port without merging",
    check: strict_mtls,
};

/// The pilot-agent port serving merged app + Envoy metrics, and Envoy's own stats port; both stay
/// plaintext under STRICT (istio/istio:pkg/config/constants, StatusPort and EnvoyPrometheusPort).
const MERGED_PORT: i32 = 15020;
const ENVOY_STATS_PORT: i32 = 15090;
const MERGE_ANNOTATION: &str = "prometheus.istio.io/merge-metrics";

fn annotation<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Whether Istio rewrote this pod's annotations to the merged endpoint.
fn is_merged(pod: &Pod) -> bool {
    istio::sidecar(pod).is_some() && annotation(pod, "prometheus.io/port") == Some("15020")
}

/// The prometheus.io annotations as the application wrote them.
fn app_annotations(pod: &Pod) -> BTreeMap<String, String> {
    if is_merged(pod) {
        istio::original_prometheus_annotations(pod).unwrap_or_default()
    } else {
        pod.metadata.annotations.clone().unwrap_or_default()
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
    let candidates = c.pods.iter().map(|p| &p.obj).filter(|p| {
        let a = app_annotations(p);
        let port = a
            .get("prometheus.io/port")
            .and_then(|p| p.parse::<i32>().ok());
        a.get("prometheus.io/scrape").map(String::as_str) == Some("true")
            && port.is_some_and(|port| {
                let numbers: BTreeSet<i32> = metrics_ports(p, port).iter().map(|r| r.2).collect();
                numbers.len() > 1
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
        let missed = ports.len() - 1;
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
                    " (scraped)"
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

/// The mTLS mode in force for `port` of `pod`, and the PeerAuthentication that sets it: workload
/// policies beat namespace ones, which beat the mesh-wide one in the root namespace; `UNSET`
/// inherits; the default is PERMISSIVE (istio/istio:pilot/pkg/security/authn/policy_applier.go).
fn effective_mode<'c>(
    pas: &'c [Item<PeerAuthentication>],
    istio: &Istio,
    pod: &Pod,
    port: i32,
) -> (String, Option<(&'c PeerAuthentication, &'static str)>) {
    let (ns, _) = ns_name(&pod.metadata);
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let selectorless = |p: &PeerAuthentication| {
        p.spec
            .selector
            .as_ref()
            .is_none_or(|s| s.match_labels.is_empty())
    };
    let workload = pas.iter().filter(|p| {
        p.namespace() == ns
            && p.spec.selector.as_ref().is_some_and(|s| {
                !s.match_labels.is_empty()
                    && s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
    });
    let namespace = pas
        .iter()
        .filter(|p| p.namespace() == ns && selectorless(p));
    let mesh = pas
        .iter()
        .filter(|p| p.namespace() == istio.root_namespace && selectorless(p));
    let levels: [(Vec<&Item<PeerAuthentication>>, &'static str); 3] = [
        (workload.collect(), "workload"),
        (namespace.collect(), "namespace-wide"),
        (mesh.collect(), "mesh-wide"),
    ];
    for (list, scope) in levels {
        for p in list {
            let port_mode = p
                .spec
                .port_level_mtls
                .get(&port.to_string())
                .and_then(|m| m.mode.clone());
            let mode = port_mode
                .filter(|m| m != "UNSET")
                .or_else(|| p.spec.mtls.as_ref().and_then(|m| m.mode.clone()))
                .filter(|m| m != "UNSET");
            if let Some(m) = mode {
                return (m, Some((&p.obj, scope)));
            }
        }
    }
    ("PERMISSIVE".into(), None)
}

fn container_port_named(pod: &Pod, name: &str) -> Option<i32> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(name))
        .map(|p| p.container_port)
}

fn plain(ep: &ScrapeEndpoint) -> bool {
    ep.scheme
        .as_deref()
        .is_none_or(|s| !s.eq_ignore_ascii_case("https"))
}

/// `(port, how it is scraped)` for every plaintext scrape of an application port of `pod`.
fn app_scrapes(facts: &Facts<'_>, pod: &Pod) -> Vec<(i32, String)> {
    let c = facts.cluster;
    let (ns, _) = ns_name(&pod.metadata);
    let mut out = Vec::new();
    let istio_port = |n: i32| n == MERGED_PORT || n == ENVOY_STATS_PORT;
    if annotation(pod, "prometheus.io/scrape") == Some("true") && !is_merged(pod) {
        match annotation(pod, "prometheus.io/port").and_then(|p| p.parse::<i32>().ok()) {
            Some(n) if !istio_port(n) => out.push((n, "prometheus.io annotations".to_string())),
            Some(_) => {}
            None => {
                for c in pod
                    .spec
                    .iter()
                    .flat_map(|s| &s.containers)
                    .filter(|c| c.name != "istio-proxy")
                {
                    for p in c.ports.iter().flatten() {
                        out.push((
                            p.container_port,
                            "prometheus.io annotations (every declared port)".into(),
                        ));
                    }
                }
            }
        }
    }
    for pm in &c.pod_monitors {
        if !selector::monitor_namespace_matches(&pm.spec.namespace_selector, pm.namespace(), ns)
            || !selector::matches(&pm.spec.selector, pod.metadata.labels.as_ref())
        {
            continue;
        }
        for ep in pm.spec.pod_metrics_endpoints.iter().filter(|e| plain(e)) {
            let n = match (&ep.port, ep.port_number, &ep.target_port) {
                (Some(name), _, _) => container_port_named(pod, name),
                (None, Some(n), _) => Some(n),
                (None, None, Some(IntOrString::Int(n))) => Some(*n),
                (None, None, Some(IntOrString::String(s))) => container_port_named(pod, s),
                _ => None,
            };
            if let Some(n) = n.filter(|n| !istio_port(*n)) {
                out.push((n, format!("PodMonitor {}/{}", pm.namespace(), pm.name())));
            }
        }
    }
    for m in &facts.monitored {
        let svc = &m.service.obj;
        if ns_name(&svc.metadata).0 != ns
            || !selector::service_selects(
                svc.spec.as_ref().and_then(|s| s.selector.as_ref()),
                pod.metadata.labels.as_ref(),
            )
        {
            continue;
        }
        for port in svc.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
            let scraped = m.monitors.iter().find(|sm| {
                sm.spec.endpoints.iter().any(|ep| {
                    plain(ep) && ep.port.is_some() && ep.port.as_deref() == port.name.as_deref()
                })
            });
            let Some(sm) = scraped else { continue };
            let n = match &port.target_port {
                Some(IntOrString::Int(n)) => Some(*n),
                Some(IntOrString::String(s)) => container_port_named(pod, s),
                None => Some(port.port),
            };
            if let Some(n) = n.filter(|n| !istio_port(*n)) {
                out.push((
                    n,
                    format!(
                        "ServiceMonitor {}/{} via Service {}",
                        sm.namespace(),
                        sm.name(),
                        ns_name(&svc.metadata).1
                    ),
                ));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Why this pod is not merged.
fn merge_off_reason(pod: &Pod, istio: &Istio) -> String {
    if annotation(pod, MERGE_ANNOTATION) == Some("false") {
        format!("metrics merging is off: annotation {MERGE_ANNOTATION}: \"false\"")
    } else if !istio.merge_enabled {
        "metrics merging is off: meshConfig.enablePrometheusMerge is false".into()
    } else {
        "the pod is not merged (prometheus.io/port is not 15020: annotations added after injection?)".into()
    }
}

/// A workload's broken scrapes: its pods, the evidence lines, the policy, and whether a monitor
/// (rather than annotations) scrapes it.
type Broken<'c> = (Vec<&'c Pod>, Vec<String>, ObjectRef, bool);

fn strict_mtls(facts: &Facts<'_>, _: &super::Options) -> Outcome {
    let c = facts.cluster;
    if let Err(o) = require(c, &[Kind::Pod, Kind::PeerAuthentication]) {
        return o;
    }
    let Some(istio) = &facts.istio else {
        return Outcome::Ran(Vec::new());
    };
    // Per pod: the scrapes STRICT breaks, and the policy.
    let mut broken: BTreeMap<ObjectRef, Broken<'_>> = BTreeMap::new();
    for pod in c.pods.iter().map(|p| &p.obj) {
        if istio::sidecar(pod).is_none() {
            continue;
        }
        for (port, how) in app_scrapes(facts, pod) {
            let (mode, policy) = effective_mode(&c.peer_authentications, istio, pod, port);
            let Some((pa, scope)) = policy.filter(|_| mode == "STRICT") else {
                continue;
            };
            let pa_ref = ObjectRef::new(Kind::PeerAuthentication, pa.namespace(), pa.name());
            let entry = broken
                .entry(workload::owner(pod))
                .or_insert_with(|| (Vec::new(), Vec::new(), pa_ref.clone(), false));
            if !entry.0.iter().any(|p| std::ptr::eq(*p, pod)) {
                entry.0.push(pod);
            }
            let line = format!(
                "port {port} is scraped in plaintext by {how}, under {scope} STRICT {pa_ref}"
            );
            if !entry.1.contains(&line) {
                entry.1.push(line);
            }
            entry.3 |= !how.starts_with("prometheus.io");
        }
    }
    let mut findings = Vec::new();
    for (owner, (pods, lines, pa_ref, by_monitor)) in broken {
        let pod = pods[0];
        let (ns, _) = ns_name(&pod.metadata);
        let mut evidence = lines;
        evidence.push(merge_off_reason(pod, istio));
        evidence.push(format!("{} pod(s) of {owner} in the input", pods.len()));
        let mut steps = vec![format!(
            "enable metrics merging: drop {MERGE_ANNOTATION}: \"false\" from {owner}'s pod template (and keep \
                 meshConfig.enablePrometheusMerge on), keep its prometheus.io annotations, and restart it: the \
                 injector points them at :{MERGED_PORT}, where app and Envoy metrics are served merged in plaintext"
        )];
        let mut actions = Vec::new();
        let mut manifests = Vec::new();
        if by_monitor {
            let name = manifest::dns_label(&format!("{}-istio-merged", owner.name));
            let pm_ref = ObjectRef::new(Kind::PodMonitor, ns, &name);
            let pm = json!({
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PodMonitor",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "selector": {"matchLabels": workload::common_labels(&pods)},
                    "podMetricsEndpoints": [{
                        // Istio declares only Envoy's port on the sidecar; the relabeling moves the
                        // target to the agent's merged endpoint on the same pod IP.
                        "port": "http-envoy-prom",
                        "path": "/stats/prometheus",
                        "relabelings": [{
                            "sourceLabels": ["__meta_kubernetes_pod_ip"],
                            "regex": "(.+)",
                            "targetLabel": "__address__",
                            "replacement": format!("${{1}}:{MERGED_PORT}"),
                            "action": "replace",
                        }],
                    }],
                },
            });
            steps.push(format!(
                "kubectl create -f this file: PodMonitor {ns}/{name} scrapes :{MERGED_PORT}/stats/prometheus \
                 (Envoy alone is on :{ENVOY_STATS_PORT}/stats/prometheus)"
            ));
            steps.push(
                "remove the plaintext application-port endpoints from the monitors listed above"
                    .into(),
            );
            actions.push(Action {
                verb: Verb::Create,
                object: pm_ref,
            });
            manifests.push(pm);
        }
        let mut figures = BTreeMap::new();
        figures.insert("pods".into(), pods.len() as f64);
        findings.push(Finding {
            code: STRICT_MTLS_SCRAPE.code,
            rule: STRICT_MTLS_SCRAPE.slug,
            severity: Severity::Critical,
            title: format!("strict mTLS refuses the plaintext scrapes of {owner}"),
            objects: vec![owner.clone(), pa_ref],
            evidence,
            cost: Cost {
                summary: format!(
                    "{} pod(s) whose application metrics fail to scrape (target down)",
                    pods.len()
                ),
                figures,
            },
            fix: Fix {
                summary: format!("scrape through Istio's merged endpoint :{MERGED_PORT}"),
                steps,
                actions,
                manifests,
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

    fn mk_istio() -> Istio {
        Istio {
            version: Some((1, 22, 0)),
            evidence: String::new(),
            root_namespace: "istio-system".into(),
            merge_enabled: true,
            default_export_to: vec!["*".into()],
            istiod: None,
        }
    }

    fn mk_pa(c: &mut Cluster, ns: &str, name: &str, spec: Value) {
        c.add(
            json!({"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}),
        )
        .expect("valid PeerAuthentication");
    }

    fn mk_pod(ns: &str) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": ns, "labels": {"app": "a"}}}),
        )
        .expect("valid pod")
    }

    fn mode(c: &Cluster, pod: &Pod, port: i32) -> (String, Option<String>) {
        let (m, p) = effective_mode(&c.peer_authentications, &mk_istio(), pod, port);
        (
            m,
            p.map(|(pa, scope)| format!("{}/{} {scope}", pa.namespace(), pa.name())),
        )
    }

    #[test]
    fn without_any_policy_the_mode_is_permissive() {
        let c = Cluster::default();
        assert_eq!(mode(&c, &mk_pod("shop"), 8080), ("PERMISSIVE".into(), None));
    }

    #[test]
    fn workload_beats_namespace_beats_mesh_and_unset_inherits() {
        let mut c = Cluster::default();
        mk_pa(
            &mut c,
            "istio-system",
            "mesh",
            json!({"mtls": {"mode": "STRICT"}}),
        );
        mk_pa(&mut c, "shop", "ns", json!({"mtls": {"mode": "UNSET"}}));
        let pod = mk_pod("shop");
        assert_eq!(
            mode(&c, &pod, 8080),
            ("STRICT".into(), Some("istio-system/mesh mesh-wide".into()))
        );
        mk_pa(
            &mut c,
            "shop",
            "app",
            json!({"selector": {"matchLabels": {"app": "a"}},
            "mtls": {"mode": "PERMISSIVE"}, "portLevelMtls": {"9090": {"mode": "STRICT"}}}),
        );
        assert_eq!(
            mode(&c, &pod, 8080),
            ("PERMISSIVE".into(), Some("shop/app workload".into()))
        );
        assert_eq!(
            mode(&c, &pod, 9090),
            ("STRICT".into(), Some("shop/app workload".into()))
        );
        // A workload policy of another app does not apply.
        assert_eq!(
            mode(&c, &mk_pod("other"), 8080).1.as_deref(),
            Some("istio-system/mesh mesh-wide")
        );
    }

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
}
