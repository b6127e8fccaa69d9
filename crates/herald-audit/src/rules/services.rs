//! HA004–HA006: Services that exist for discovery but pay for traffic — a cluster IP every
//! kube-proxy programs, and an Istio export every sidecar receives.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Outcome, Rule, require, thousands};
use crate::facts::{Facts, Monitored, ServiceClass, is_headless, port_label};
use crate::finding::{Action, Cost, Finding, Fix, ObjectRef, Severity, Verb};
use crate::inventory::ns_name;
use crate::istio::EXPORT_TO_NONE_FIXED;
use crate::kind::Kind;
use crate::manifest;
use crate::objects::{Labels, Service};
use crate::rules::kube_proxy::{SyncBehaviour, oldest_sync_behaviour, service_rules};

pub const EXPORT_TO: &str = "networking.istio.io/exportTo";
/// Put on a traffic Service so that its ServiceMonitors (given `DoesNotExist` on it) stop
/// selecting it once its `-metrics` twin exists. Adding a label changes nothing else.
pub const TRAFFIC_LABEL: &str = "herald.dev/traffic-service";
/// Carries the old Service name on the `-metrics` twin, used as the ServiceMonitor's `jobLabel`
/// so that the `job` label of the series does not change (prometheus-operator falls back to the
/// Service name where the label is absent: pkg/prometheus/promcfg.go generateServiceMonitorConfig).
pub const JOB_LABEL: &str = "herald.dev/job";

pub const METRICS_ONLY_CLUSTER_IP: Rule = Rule {
    code: "HA004",
    slug: "metrics-service-with-cluster-ip",
    about: "Services that exist only for metrics but carry a cluster IP",
    check: metrics_only_cluster_ip,
};

pub const SHARED_SERVICE: Rule = Rule {
    code: "HA005",
    slug: "service-shared-by-traffic-and-metrics",
    about: "Services that carry traffic and are also the discovery handle of a ServiceMonitor",
    check: shared_service,
};

pub const ISTIO_EXPORT: Rule = Rule {
    code: "HA006",
    slug: "istio-exports-metrics-service",
    about: "metrics Services exported to every sidecar of the mesh",
    check: istio_export,
};

fn svc_ref(svc: &Service) -> ObjectRef {
    let (ns, name) = ns_name(&svc.metadata);
    ObjectRef::new(Kind::Service, ns, name)
}

fn kube_proxy_cost(facts: &Facts<'_>, svc: &Service) -> (u64, usize) {
    let (ns, name) = ns_name(&svc.metadata);
    let e = facts.backends(ns, name).map_or(0, |(n, _)| n);
    (service_rules(svc, e).0, facts.cluster.nodes.len())
}

/// The exportTo value a new metrics Service should carry, when the mesh exports by default.
fn export_annotation(facts: &Facts<'_>) -> Option<String> {
    let istio = facts.istio.as_ref()?;
    istio
        .exports_by_default()
        .then(|| istio.advised_export_to(facts.cluster).0)
}

fn metrics_only_cluster_ip(facts: &Facts<'_>, _: &super::Options) -> Outcome {
    let c = facts.cluster;
    if let Err(o) = require(c, &[Kind::Service, Kind::ServiceMonitor]) {
        return o;
    }
    // When kube-proxy rewrites these rules depends on its version (rules/kube_proxy.rs).
    let rewrites = match oldest_sync_behaviour(c) {
        Some(b) if b < SyncBehaviour::Partial => {
            "with every Service or endpoint change in the cluster (kube-proxy < 1.27 restores every rule)"
        }
        Some(_) => "on every change of its endpoints",
        None => "on every change of its endpoints (and of any Service's, on kube-proxy < 1.27)",
    };
    let mut findings = Vec::new();
    for m in &facts.monitored {
        if m.class != (ServiceClass::MetricsOnly { headless: false }) {
            continue;
        }
        let svc = &m.service.obj;
        let me = svc_ref(svc);
        let (ns, name) = ns_name(&svc.metadata);
        let (rules, nodes) = kube_proxy_cost(facts, svc);
        let mut evidence = vec![
            format!(
                "selected by {}",
                m.monitors
                    .iter()
                    .map(|sm| format!("ServiceMonitor {}/{}", sm.namespace(), sm.name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!(
                "every port ({}) is a scraped metrics port; its type is ClusterIP with clusterIP {}",
                m.scraped_ports
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                svc.spec
                    .as_ref()
                    .and_then(|s| s.cluster_ip.as_deref())
                    .unwrap_or("unset")
            ),
        ];
        if !c.has(Kind::Ingress) {
            evidence.push(
                "Ingresses are not in the input: that none routes to it is not verified".into(),
            );
        }
        let mut figures = BTreeMap::new();
        figures.insert("iptables_rules_per_node".into(), rules as f64);
        figures.insert("nodes".into(), nodes as f64);
        let mut headless = manifest::service(svc);
        if let Some(spec) = headless.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("clusterIP".into(), json!("None"));
            spec.remove("clusterIPs");
        }
        if let Some(v) = export_annotation(facts) {
            manifest::annotate(&mut headless, EXPORT_TO, &v);
        }
        findings.push(Finding {
            code: METRICS_ONLY_CLUSTER_IP.code,
            rule: METRICS_ONLY_CLUSTER_IP.slug,
            severity: Severity::Warning,
            title: format!("Service {ns}/{name} exists only for metrics but has a cluster IP"),
            objects: vec![me.clone()],
            evidence,
            cost: Cost {
                summary: format!(
                    "~{} kube-proxy rules on {}, rewritten {}",
                    thousands(rules),
                    if c.has(Kind::Node) {
                        format!("each of {} nodes", thousands(nodes as u64))
                    } else {
                        "every node".to_string()
                    },
                    rewrites
                ),
                figures,
            },
            fix: Fix {
                summary: "recreate it headless (clusterIP: None); clusterIP is immutable".into(),
                steps: vec![
                    format!("kubectl delete service -n {ns} {name}"),
                    "kubectl create -f this file (the same Service, headless)".into(),
                    "the name, labels and ports are unchanged, so ServiceMonitors and job labels are too; \
                     targets drop for at most one discovery refresh"
                        .into(),
                    without_service(ns, name, svc, m),
                ],
                actions: vec![
                    Action { verb: Verb::Delete, object: me.clone() },
                    Action { verb: Verb::Create, object: me },
                ],
                manifests: vec![headless],
                file: None,
            },
        });
    }
    Outcome::Ran(findings)
}

/// The alternative that needs no Service at all: a PodMonitor on the same pods, which herald serves as
/// the job `podMonitor/<ns>/<name>/0` (`herald serve` with `monitors:`).
fn without_service(ns: &str, name: &str, svc: &Service, m: &Monitored<'_>) -> String {
    let selector = svc
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .map(|s| {
            s.iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let ports = m
        .scraped_ports
        .iter()
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "or drop the Service altogether: a PodMonitor {ns}/{name} selecting its pods \
         (matchLabels {{{selector}}}) on the container ports behind {ports}, with a relabeling setting \
         job to {name}, scrapes the same pods without a cluster IP; herald serves it as the job \
         podMonitor/{ns}/{name}/0 (herald serve with monitors:), or a herald job of role pod \
         keeping those pods does without the operator"
    )
}

/// The name of the `-metrics` twin of a traffic Service.
fn twin_name(facts: &Facts<'_>, ns: &str, name: &str) -> String {
    let base = if name.ends_with("-metrics") {
        format!("{name}-scrape")
    } else {
        format!("{name}-metrics")
    };
    let base = manifest::dns_label(&base);
    if facts.service(ns, &base).is_none() {
        base
    } else {
        manifest::dns_label(&format!("{base}-headless"))
    }
}

fn twin_manifest(m: &Monitored<'_>, twin: &str, export_to: Option<&str>) -> Value {
    let svc = &m.service.obj;
    let (ns, name) = ns_name(&svc.metadata);
    let spec = svc.spec.clone().unwrap_or_default();
    let ports: Vec<Value> = spec
        .ports
        .iter()
        .flatten()
        .filter(|p| m.scraped_ports.contains(&port_label(p)))
        .map(|p| {
            let mut v = json!({"port": p.port});
            let o = v.as_object_mut().expect("json! object");
            if let Some(n) = &p.name {
                o.insert("name".into(), json!(n));
            }
            if let Some(t) = &p.target_port {
                o.insert("targetPort".into(), json!(t));
            }
            if let Some(pr) = &p.protocol {
                o.insert("protocol".into(), json!(pr));
            }
            v
        })
        .collect();
    let mut labels = svc
        .metadata
        .labels
        .as_ref()
        .map(Labels::to_map)
        .unwrap_or_default();
    labels.insert(JOB_LABEL.into(), name.into());
    let mut v = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": twin, "namespace": ns, "labels": labels},
        "spec": {"clusterIP": "None", "selector": spec.selector, "ports": ports},
    });
    if spec.publish_not_ready_addresses == Some(true) {
        v["spec"]["publishNotReadyAddresses"] = json!(true);
    }
    if let Some(e) = export_to {
        manifest::annotate(&mut v, EXPORT_TO, e);
    }
    v
}

fn shared_service(facts: &Facts<'_>, _: &super::Options) -> Outcome {
    let c = facts.cluster;
    if let Err(o) = require(c, &[Kind::Service, Kind::ServiceMonitor]) {
        return o;
    }
    // Metrics-only Services per namespace, in inventory order, for the sibling check below.
    let mut metrics_only: BTreeMap<&str, Vec<&Monitored<'_>>> = BTreeMap::new();
    for m in &facts.monitored {
        if matches!(m.class, ServiceClass::MetricsOnly { .. }) {
            metrics_only
                .entry(ns_name(&m.service.metadata).0)
                .or_default()
                .push(m);
        }
    }
    let mut findings = Vec::new();
    for m in &facts.monitored {
        let ServiceClass::Traffic { reasons } = &m.class else {
            continue;
        };
        let svc = &m.service.obj;
        // A headless Service costs kube-proxy nothing; m.scraped_ports empty means nothing to split.
        if is_headless(svc) || m.scraped_ports.is_empty() {
            continue;
        }
        let me = svc_ref(svc);
        let (ns, name) = ns_name(&svc.metadata);
        let twin = twin_name(facts, ns, name);
        let twin_ref = ObjectRef::new(Kind::Service, ns, &twin);
        let mut evidence: Vec<String> = reasons
            .iter()
            .map(|r| format!("it carries traffic: {r}"))
            .collect();
        evidence.push(format!(
            "ServiceMonitors scrape port(s) {} through it",
            m.scraped_ports
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
        // A metrics-only sibling already scraping the same pods makes the twin redundant: say so.
        let selector = svc.spec.as_ref().and_then(|s| s.selector.as_ref());
        for sibling in metrics_only.get(ns).into_iter().flatten() {
            let s = &sibling.service.obj;
            let same_pods = s.spec.as_ref().and_then(|s| s.selector.as_ref()) == selector;
            if same_pods && sibling.scraped_ports.is_superset(&m.scraped_ports) {
                evidence.push(format!(
                    "metrics-only Service {ns}/{} already selects the same pods: excluding {name} from the \
                     ServiceMonitor (the label and expression below) may be enough",
                    ns_name(&s.metadata).1
                ));
            }
        }
        let mut objects = vec![me.clone()];
        let mut actions = Vec::new();
        let mut manifests = Vec::new();
        let mut steps = Vec::new();
        let has_selector = svc
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .is_some_and(|s| !s.is_empty());
        if has_selector {
            actions.push(Action {
                verb: Verb::Create,
                object: twin_ref.clone(),
            });
            manifests.push(twin_manifest(m, &twin, export_annotation(facts).as_deref()));
            steps.push(format!(
                "kubectl create Service {ns}/{twin} (headless, the scraped ports only)"
            ));
            let mut labelled = manifest::service(svc);
            manifest::label(&mut labelled, TRAFFIC_LABEL, "true");
            actions.push(Action {
                verb: Verb::Replace,
                object: me.clone(),
            });
            manifests.push(labelled);
            steps.push(format!(
                "kubectl replace Service {ns}/{name}: only the label {TRAFFIC_LABEL}=true is added"
            ));
        } else {
            steps.push(format!(
                "{ns}/{name} has no selector: create a headless {twin} with the same hand-made endpoints"
            ));
        }
        for sm in &m.monitors {
            let sm_ref = ObjectRef::new(Kind::ServiceMonitor, sm.namespace(), sm.name());
            objects.push(sm_ref.clone());
            if !has_selector {
                continue;
            }
            let mut v = sm.raw.clone();
            manifest::clean(&mut v);
            let spec = manifest::entry_object(&mut v, "spec");
            let sel = manifest::entry_object(spec, "selector");
            let exprs = sel
                .as_object_mut()
                .expect("entry_object returns an object")
                .entry("matchExpressions")
                .or_insert_with(|| json!([]));
            let req = json!({"key": TRAFFIC_LABEL, "operator": "DoesNotExist"});
            if let Some(list) = exprs.as_array_mut().filter(|l| !l.contains(&req)) {
                list.push(req);
            }
            if sm.spec.job_label.is_none() {
                spec["jobLabel"] = json!(JOB_LABEL);
            }
            actions.push(Action {
                verb: Verb::Replace,
                object: sm_ref.clone(),
            });
            manifests.push(v);
            steps.push(format!(
                "kubectl replace {sm_ref}: it now skips Services labelled {TRAFFIC_LABEL}{}",
                if sm.spec.job_label.is_none() {
                    format!(" and takes job from {JOB_LABEL}, so series keep job=\"{name}\"")
                } else {
                    String::new()
                }
            ));
        }
        steps.push(format!(
            "check that the targets of {ns}/{twin} are up, and that {ns}/{name}'s are gone"
        ));
        let mut figures = BTreeMap::new();
        figures.insert("scraped_ports".into(), m.scraped_ports.len() as f64);
        figures.insert("service_monitors".into(), m.monitors.len() as f64);
        findings.push(Finding {
            code: SHARED_SERVICE.code,
            rule: SHARED_SERVICE.slug,
            severity: Severity::Info,
            title: format!("Service {ns}/{name} carries traffic and is also a ServiceMonitor's discovery handle"),
            objects,
            evidence,
            cost: Cost {
                summary: "discovery is tied to the traffic Service: every watcher of its EndpointSlices (kube-proxy, \
                          the mesh) and every scrape config follow the same object"
                    .into(),
                figures,
            },
            fix: Fix {
                summary: format!("scrape through a separate headless Service {twin}"),
                steps,
                actions,
                manifests,
                file: None,
            },
        });
    }
    Outcome::Ran(findings)
}

fn istio_export(facts: &Facts<'_>, _: &super::Options) -> Outcome {
    let c = facts.cluster;
    if let Err(o) = require(c, &[Kind::Service, Kind::ServiceMonitor]) {
        return o;
    }
    if !c.has(Kind::Pod) && !c.has(Kind::Deployment) {
        return Outcome::NotChecked(vec![Kind::Pod, Kind::Deployment]);
    }
    let Some(istio) = &facts.istio else {
        return Outcome::Ran(Vec::new());
    };
    let (advised, why) = istio.advised_export_to(c);
    let sidecars = c
        .pods
        .iter()
        .filter(|p| crate::istio::sidecar(p).is_some())
        .count();
    let mut findings = Vec::new();
    for m in &facts.monitored {
        let ServiceClass::MetricsOnly { headless } = m.class else {
            continue;
        };
        let svc = &m.service.obj;
        let (ns, name) = ns_name(&svc.metadata);
        let current = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(EXPORT_TO))
            .cloned();
        let old_mesh = istio
            .version
            .is_some_and(|(a, b, _)| (a, b) < EXPORT_TO_NONE_FIXED);
        let problem = match current.as_deref() {
            None if istio.exports_by_default() => format!(
                "no {EXPORT_TO} annotation, and the mesh exports to {} by default",
                istio.default_export_to.join(",")
            ),
            Some("~") if old_mesh => {
                format!("{EXPORT_TO} is `~`, which this Istio version still pushes on")
            }
            _ => continue,
        };
        let me = svc_ref(svc);
        let evidence = vec![problem, istio.evidence.clone(), why.clone()];
        let mut figures = BTreeMap::new();
        figures.insert("sidecars".into(), sidecars as f64);
        let fix = if headless {
            let mut v = manifest::service(svc);
            manifest::annotate(&mut v, EXPORT_TO, &advised);
            Fix {
                summary: format!("annotate it {EXPORT_TO}: \"{advised}\""),
                steps: vec![format!(
                    "kubectl replace -f this file (Service {ns}/{name}, annotation added)"
                )],
                actions: vec![Action {
                    verb: Verb::Replace,
                    object: me.clone(),
                }],
                manifests: vec![v],
                file: None,
            }
        } else {
            Fix {
                summary: format!(
                    "annotate it {EXPORT_TO}: \"{advised}\" as part of HA004's headless re-creation"
                ),
                steps: vec![
                    "apply the HA004 fix of this Service: its manifest carries the annotation"
                        .into(),
                ],
                ..Fix::default()
            }
        };
        findings.push(Finding {
            code: ISTIO_EXPORT.code,
            rule: ISTIO_EXPORT.slug,
            severity: Severity::Warning,
            title: format!("metrics Service {ns}/{name} is pushed to every sidecar of the mesh"),
            objects: vec![me],
            evidence,
            cost: Cost {
                summary: format!(
                    "istiod pushes its cluster and endpoints to {} sidecars on every change",
                    thousands(sidecars as u64)
                ),
                figures,
            },
            fix,
        });
    }
    Outcome::Ran(findings)
}
