//! HA009: Istio strict mTLS in front of a plaintext scrape of an application port, and the fix that
//! moves the scrape to the merged endpoint and drops the monitor endpoints that cannot work.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::pods::{MERGE_ANNOTATION, annotation, is_merged};
use super::scrapes::{Via, monitor_scrapes};
use super::{Outcome, Rule, require};
use crate::custom::PeerAuthentication;
use crate::facts::Facts;
use crate::finding::{Action, Cost, Finding, Fix, ObjectRef, Severity, Verb};
use crate::inventory::{Cluster, Item, ns_name};
use crate::istio::{self, Istio};
use crate::kind::Kind;
use crate::objects::Pod;
use crate::{manifest, selector, workload};

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

fn is_istio_port(n: i32) -> bool {
    n == MERGED_PORT || n == ENVOY_STATS_PORT
}

/// A plaintext scrape of an application port: the port, how it is scraped, and the monitor
/// endpoint behind it (none for the annotations).
type AppScrape = (i32, String, Option<Via>);

/// Every plaintext scrape of an application port of `pod` (Istio's own ports excluded: they stay
/// plaintext under STRICT).
fn app_scrapes(facts: &Facts<'_>, pod: &Pod) -> Vec<AppScrape> {
    let mut out = Vec::new();
    if annotation(pod, "prometheus.io/scrape") == Some("true") && !is_merged(pod) {
        match annotation(pod, "prometheus.io/port").and_then(|p| p.parse::<i32>().ok()) {
            Some(n) if !is_istio_port(n) => {
                out.push((n, "prometheus.io annotations".to_string(), None));
            }
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
                            None,
                        ));
                    }
                }
            }
        }
    }
    for s in monitor_scrapes(facts, pod) {
        if s.plain && !is_istio_port(s.port) {
            out.push((s.port, s.how, Some(s.via)));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// What the pod's merging state means for its broken scrapes.
fn merge_state(pod: &Pod, istio: &Istio) -> String {
    if !is_merged(pod) {
        if annotation(pod, MERGE_ANNOTATION) == Some("false") {
            format!("metrics merging is off: annotation {MERGE_ANNOTATION}: \"false\"")
        } else if !istio.merge_enabled {
            "metrics merging is off: meshConfig.enablePrometheusMerge is false".into()
        } else {
            "the pod is not merged (prometheus.io/port is not 15020: annotations added after injection?)"
                .into()
        }
    } else if app_port_known_to_agent(pod) {
        format!(
            "the pod is merged: :{MERGED_PORT}/stats/prometheus serves its application and Envoy metrics in \
             plaintext, but the monitors above scrape the application port directly"
        )
    } else {
        format!(
            "the pod is merged, but the application's metrics port is not in ISTIO_PROMETHEUS_ANNOTATIONS: \
             :{MERGED_PORT} serves Envoy's and the agent's metrics only"
        )
    }
}

/// Whether Istio's agent knows where the application serves metrics (the injector copied a
/// `prometheus.io/port` into `ISTIO_PROMETHEUS_ANNOTATIONS`).
fn app_port_known_to_agent(pod: &Pod) -> bool {
    istio::original_prometheus_annotations(pod)
        .is_some_and(|a| a.get("prometheus.io/port").is_some_and(|p| !p.is_empty()))
}

/// A workload whose plaintext scrapes STRICT refuses.
struct Broken<'c> {
    pods: Vec<&'c Pod>,
    lines: Vec<String>,
    policy: ObjectRef,
    ports: BTreeSet<i32>,
    /// The monitor endpoints doing the refused scrapes.
    vias: BTreeSet<Via>,
}

/// `(pod namespace, pod name, monitor endpoint)` of every scrape STRICT refuses.
type Refused = BTreeSet<(String, String, Via)>;

/// Whether every scrape `monitor` makes through `endpoints`, of any pod, is refused: only then can
/// the fix drop those endpoints without losing targets that work today.
fn only_refused(
    facts: &Facts<'_>,
    monitor: &ObjectRef,
    endpoints: &BTreeSet<usize>,
    refused: &Refused,
) -> bool {
    let c = facts.cluster;
    let own = monitor.namespace.as_deref().unwrap_or_default();
    let scope = match monitor.kind.as_str() {
        "PodMonitor" => c
            .pod_monitors
            .iter()
            .find(|m| (m.namespace(), m.name()) == (own, monitor.name.as_str()))
            .map(|m| &m.spec.namespace_selector),
        _ => c
            .service_monitors
            .iter()
            .find(|m| (m.namespace(), m.name()) == (own, monitor.name.as_str()))
            .map(|m| &m.spec.namespace_selector),
    };
    let Some(scope) = scope else { return false };
    c.pods
        .iter()
        .filter(|p| selector::monitor_namespace_matches(scope, own, ns_name(&p.metadata).0))
        .all(|p| {
            let (ns, name) = ns_name(&p.metadata);
            monitor_scrapes(facts, p)
                .into_iter()
                .filter(|s| s.via.monitor == *monitor && endpoints.contains(&s.via.endpoint))
                .all(|s| refused.contains(&(ns.to_string(), name.to_string(), s.via)))
        })
}

/// The monitor as read, for a fix to edit.
fn monitor_raw<'c>(c: &'c Cluster, monitor: &ObjectRef) -> Option<&'c Value> {
    let own = monitor.namespace.as_deref().unwrap_or_default();
    let key = (own, monitor.name.as_str());
    match monitor.kind.as_str() {
        "PodMonitor" => c
            .pod_monitors
            .iter()
            .find(|m| (m.namespace(), m.name()) == key)
            .map(|m| &m.raw),
        _ => c
            .service_monitors
            .iter()
            .find(|m| (m.namespace(), m.name()) == key)
            .map(|m| &m.raw),
    }
}

fn strict_mtls(facts: &Facts<'_>, _: &super::Options) -> Outcome {
    let c = facts.cluster;
    if let Err(o) = require(c, &[Kind::Pod, Kind::PeerAuthentication]) {
        return o;
    }
    let Some(istio) = &facts.istio else {
        return Outcome::Ran(Vec::new());
    };
    let mut broken: BTreeMap<ObjectRef, Broken<'_>> = BTreeMap::new();
    let mut refused = Refused::new();
    for pod in c.pods.iter().map(|p| &p.obj) {
        if istio::sidecar(pod).is_none() {
            continue;
        }
        let (pod_ns, pod_name) = ns_name(&pod.metadata);
        for (port, how, via) in app_scrapes(facts, pod) {
            let (mode, policy) = effective_mode(&c.peer_authentications, istio, pod, port);
            let Some((pa, scope)) = policy.filter(|_| mode == "STRICT") else {
                continue;
            };
            let pa_ref = ObjectRef::new(Kind::PeerAuthentication, pa.namespace(), pa.name());
            let entry = broken
                .entry(workload::owner(pod))
                .or_insert_with(|| Broken {
                    pods: Vec::new(),
                    lines: Vec::new(),
                    policy: pa_ref.clone(),
                    ports: BTreeSet::new(),
                    vias: BTreeSet::new(),
                });
            if !entry.pods.iter().any(|p| std::ptr::eq(*p, pod)) {
                entry.pods.push(pod);
            }
            let line = format!(
                "port {port} is scraped in plaintext by {how}, under {scope} STRICT {pa_ref}"
            );
            if !entry.lines.contains(&line) {
                entry.lines.push(line);
            }
            entry.ports.insert(port);
            if let Some(via) = via {
                entry.vias.insert(via.clone());
                refused.insert((pod_ns.to_string(), pod_name.to_string(), via));
            }
        }
    }
    let mut findings = Vec::new();
    for (owner, b) in broken {
        let pod = b.pods[0];
        let (ns, _) = ns_name(&pod.metadata);
        let mut evidence = b.lines;
        evidence.push(merge_state(pod, istio));
        evidence.push(format!("{} pod(s) of {owner} in the input", b.pods.len()));
        let mut steps = Vec::new();
        let app_port = b.ports.iter().next().copied().unwrap_or_default();
        if !is_merged(pod) {
            steps.push(format!(
                "enable metrics merging: drop {MERGE_ANNOTATION}: \"false\" from {owner}'s pod template (and keep \
                 meshConfig.enablePrometheusMerge on), keep its prometheus.io annotations, and restart it: the \
                 injector points them at :{MERGED_PORT}, where app and Envoy metrics are served merged in plaintext"
            ));
        } else if !app_port_known_to_agent(pod) {
            steps.push(format!(
                "annotate {owner}'s pod template prometheus.io/scrape: \"true\", prometheus.io/port: \"{app_port}\" \
                 (and prometheus.io/path) and restart it: the injector hands them to Istio's agent, which then \
                 merges the application's metrics into :{MERGED_PORT}"
            ));
        }
        let mut actions = Vec::new();
        let mut manifests = Vec::new();
        if !b.vias.is_empty() {
            let name = manifest::dns_label(&format!("{}-istio-merged", owner.name));
            let pm_ref = ObjectRef::new(Kind::PodMonitor, ns, &name);
            let pm = json!({
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PodMonitor",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "selector": {"matchLabels": workload::common_labels(&b.pods)},
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
            actions.push(Action {
                verb: Verb::Create,
                object: pm_ref,
            });
            manifests.push(pm);
            let mut by_monitor: BTreeMap<ObjectRef, BTreeSet<usize>> = BTreeMap::new();
            for v in &b.vias {
                by_monitor
                    .entry(v.monitor.clone())
                    .or_default()
                    .insert(v.endpoint);
            }
            for (monitor, endpoints) in by_monitor {
                let raw = monitor_raw(c, &monitor);
                let Some(raw) = raw.filter(|_| only_refused(facts, &monitor, &endpoints, &refused))
                else {
                    steps.push(format!(
                        "remove the plaintext application-port endpoints from {monitor} by hand, or scope it away \
                         from {owner}: it also scrapes pods that strict mTLS does not refuse"
                    ));
                    continue;
                };
                let field = if monitor.kind == "PodMonitor" {
                    "podMetricsEndpoints"
                } else {
                    "endpoints"
                };
                let kept: Vec<Value> = raw["spec"][field]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .filter(|(i, _)| !endpoints.contains(i))
                    .map(|(_, e)| e.clone())
                    .collect();
                if kept.is_empty() {
                    steps.push(format!(
                        "kubectl delete {monitor}: every endpoint it has scrapes {owner} in plaintext, which strict \
                         mTLS refuses"
                    ));
                    actions.push(Action {
                        verb: Verb::Delete,
                        object: monitor,
                    });
                } else {
                    let mut v = raw.clone();
                    manifest::clean(&mut v);
                    manifest::entry_object(&mut v, "spec")[field] = json!(kept);
                    steps.push(format!(
                        "kubectl replace {monitor}: the endpoints scraping {owner} in plaintext are removed"
                    ));
                    actions.push(Action {
                        verb: Verb::Replace,
                        object: monitor,
                    });
                    manifests.push(v);
                }
            }
        }
        let mut figures = BTreeMap::new();
        figures.insert("pods".into(), b.pods.len() as f64);
        findings.push(Finding {
            code: STRICT_MTLS_SCRAPE.code,
            rule: STRICT_MTLS_SCRAPE.slug,
            severity: Severity::Critical,
            title: format!("strict mTLS refuses the plaintext scrapes of {owner}"),
            objects: vec![owner.clone(), b.policy],
            evidence,
            cost: Cost {
                summary: format!(
                    "{} pod(s) whose application metrics fail to scrape (target down)",
                    b.pods.len()
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

    fn mk_scraped_cluster(sm_namespaces: Value) -> Cluster {
        let mut c = Cluster::default();
        let pod = |ns: &str, sidecar: bool| {
            let mut containers = vec![json!({"name": "app",
                "ports": [{"name": "metrics", "containerPort": 9090}]})];
            if sidecar {
                containers.push(
                    json!({"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.22.0"}),
                );
            }
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web-1", "namespace": ns, "labels": {"app": "web"}},
                "spec": {"containers": containers}, "status": {"podIP": "10.0.0.1"}})
        };
        let svc = |ns: &str| {
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
                "spec": {"clusterIP": "None", "selector": {"app": "web"},
                         "ports": [{"name": "metrics", "port": 9090, "targetPort": 9090}]}})
        };
        for o in [
            pod("shop", true),
            pod("plain", false),
            svc("shop"),
            svc("plain"),
            json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"namespaceSelector": sm_namespaces, "selector": {"matchLabels": {"app": "web"}},
                         "endpoints": [{"port": "metrics"}]}}),
        ] {
            c.add(o).expect("valid object");
        }
        mk_pa(
            &mut c,
            "shop",
            "default",
            json!({"mtls": {"mode": "STRICT"}}),
        );
        c
    }

    fn ha009_actions(c: &Cluster) -> Vec<String> {
        let r = crate::rules::evaluate(c, &crate::rules::Options::default());
        let f = r
            .findings
            .iter()
            .find(|f| f.code == "HA009")
            .expect("an HA009 finding");
        assert_eq!(f.objects[0].to_string(), "Pod shop/web-1");
        f.fix
            .actions
            .iter()
            .map(|a| format!("{:?} {}", a.verb, a.object))
            .collect()
    }

    #[test]
    fn the_strict_mtls_fix_deletes_a_monitor_whose_every_scrape_is_refused() {
        let c = mk_scraped_cluster(json!({}));
        assert_eq!(
            ha009_actions(&c),
            [
                "Create PodMonitor shop/web-1-istio-merged",
                "Delete ServiceMonitor shop/web"
            ]
        );
    }

    #[test]
    fn the_strict_mtls_fix_keeps_a_monitor_that_also_scrapes_pods_outside_the_mesh() {
        let c = mk_scraped_cluster(json!({"matchNames": ["shop", "plain"]}));
        assert_eq!(
            ha009_actions(&c),
            ["Create PodMonitor shop/web-1-istio-merged"]
        );
    }
}
