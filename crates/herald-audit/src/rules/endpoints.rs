//! HA001–HA003: the v1 Endpoints API's 1000-address ceiling and the consumers still on it.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Outcome, Rule, discovery_role, prometheus_selects, require, thousands};
use crate::custom::Prometheus;
use crate::facts::Facts;
use crate::finding::{Action, Cost, Finding, Fix, ObjectRef, Severity, Verb};
use crate::inventory::{Cluster, Item, ns_name};
use crate::kind::Kind;
use crate::objects::Endpoints;
use crate::{manifest, versions};

/// The Endpoints controller keeps at most this many addresses per object and annotates the rest
/// away (kubernetes:pkg/controller/endpoint/endpoints_controller.go maxCapacity).
pub const ENDPOINTS_MAX: usize = 1000;
const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";

pub const TRUNCATED: Rule = Rule {
    code: "HA001",
    slug: "endpoints-truncated",
    about: "Endpoints objects cut at 1000 addresses: consumers of the Endpoints API miss targets",
    check: truncated,
};

pub const PROMETHEUS_ROLE: Rule = Rule {
    code: "HA002",
    slug: "prometheus-endpoints-role",
    about: "Prometheus/PrometheusAgent discovering through the deprecated Endpoints API",
    check: prometheus_role,
};

pub const KUBELET_ENDPOINTS: Rule = Rule {
    code: "HA003",
    slug: "kubelet-endpoints-over-1000-nodes",
    about: "operator-managed kubelet Endpoints on a cluster over 1000 nodes",
    check: kubelet_endpoints,
};

/// prometheus-operator releases that brought what the fixes use: `spec.serviceDiscoveryRole` on
/// Prometheus and PrometheusAgent (v0.76.0, prometheus-operator#6672) and the kubelet controller's
/// `--kubelet-endpointslice` (v0.77.0, prometheus-operator#6882).
const OPERATOR_DISCOVERY_ROLE: (u32, u32, u32) = (0, 76, 0);
const OPERATOR_KUBELET_SLICES: (u32, u32, u32) = (0, 77, 0);

/// What the input says of the operator's support for a feature: an evidence line, and a first
/// step when an upgrade is needed or the version could not be read.
struct OperatorSupport {
    evidence: String,
    step: Option<String>,
}

fn operator_supports(c: &Cluster, since: (u32, u32, u32), feature: &str) -> OperatorSupport {
    let (a, b, p) = since;
    match versions::prometheus_operator(c) {
        Some((v, image)) if v < since => OperatorSupport {
            evidence: format!(
                "prometheus-operator runs {image}, older than v{a}.{b}.{p}, which brought {feature}"
            ),
            step: Some(format!(
                "upgrade prometheus-operator (and its CRDs) to v{a}.{b}.{p} or later: {image} does not know {feature}"
            )),
        },
        Some((_, image)) => OperatorSupport {
            evidence: format!(
                "prometheus-operator runs {image}, which has {feature} (v{a}.{b}.{p} and later)"
            ),
            step: None,
        },
        None => OperatorSupport {
            evidence: format!(
                "prometheus-operator's version is not in the input: {feature} needs v{a}.{b}.{p} or later"
            ),
            step: Some(format!(
                "check: prometheus-operator is v{a}.{b}.{p} or later, else upgrade it and its CRDs first ({feature})"
            )),
        },
    }
}

fn address_count(e: &Endpoints) -> usize {
    e.address_count()
}

fn is_operator_kubelet(e: &Endpoints) -> bool {
    let labels = e.metadata.labels.as_ref();
    let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    get("app.kubernetes.io/managed-by") == Some("prometheus-operator")
        && get("k8s-app") == Some("kubelet")
}

/// A truncated Endpoints object: listed addresses, real backends when known.
struct Truncation<'c> {
    endpoints: &'c Item<Endpoints>,
    listed: usize,
    real: Option<(usize, &'static str)>,
    annotation: Option<String>,
}

fn truncations<'c>(facts: &Facts<'c>) -> Vec<Truncation<'c>> {
    let mut out = Vec::new();
    for e in &facts.cluster.endpoints {
        let (ns, name) = ns_name(&e.metadata);
        let annotation = e
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(OVER_CAPACITY))
            .cloned();
        let listed = address_count(e);
        // The operator writes the kubelet object itself, uncapped: HA003 covers it.
        if is_operator_kubelet(e) && annotation.is_none() {
            continue;
        }
        let real = facts.backends(ns, name);
        let cut = listed >= ENDPOINTS_MAX && real.is_some_and(|(n, _)| n > listed);
        if annotation.is_some() || cut {
            out.push(Truncation {
                endpoints: e,
                listed,
                real,
                annotation,
            });
        }
    }
    out
}

/// Prometheus objects on the Endpoints role that pick up a ServiceMonitor selecting `ns/name`.
fn endpoints_consumers<'c>(facts: &Facts<'c>, ns: &str, name: &str) -> Vec<(ObjectRef, ObjectRef)> {
    let Some(m) = facts.monitored(ns, name) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (p, agent) in facts.cluster.all_prometheuses() {
        if discovery_role(p) != "Endpoints" {
            continue;
        }
        for sm in &m.monitors {
            if prometheus_selects(facts.cluster, p, sm) {
                out.push((
                    prometheus_ref(p, agent),
                    ObjectRef::new(Kind::ServiceMonitor, sm.namespace(), sm.name()),
                ));
            }
        }
    }
    out
}

fn prometheus_ref(p: &Prometheus, agent: bool) -> ObjectRef {
    let kind = if agent {
        Kind::PrometheusAgent
    } else {
        Kind::Prometheus
    };
    ObjectRef::new(kind, p.namespace(), p.name())
}

fn truncated(facts: &Facts<'_>, _: &crate::rules::Options) -> Outcome {
    if let Err(o) = require(facts.cluster, &[Kind::Endpoints]) {
        return o;
    }
    let mut findings = Vec::new();
    for t in truncations(facts) {
        let (ns, name) = ns_name(&t.endpoints.metadata);
        let mut evidence = vec![format!(
            "the Endpoints object lists {} addresses",
            thousands(t.listed as u64)
        )];
        if let Some(a) = &t.annotation {
            evidence.push(format!("annotated {OVER_CAPACITY}: {a}"));
        }
        let missing = t.real.map(|(n, _)| n.saturating_sub(t.listed));
        match t.real {
            Some((n, source)) => evidence.push(format!(
                "the Service has {} backends by its {source}: {} missing from Endpoints",
                thousands(n as u64),
                thousands(missing.unwrap_or(0) as u64)
            )),
            None => evidence.push(
                "the real backend count is unknown (no EndpointSlices or Pods in the input)".into(),
            ),
        }
        let consumers = endpoints_consumers(facts, ns, name);
        let mut objects = vec![ObjectRef::new(Kind::Endpoints, ns, name)];
        if consumers.is_empty() {
            evidence.push(
                "no Prometheus object in the input reads it through the Endpoints role; hand-written \
                 kubernetes_sd configs with role endpoints would"
                    .into(),
            );
        }
        for (p, sm) in &consumers {
            evidence.push(format!("{p} still reads Endpoints, via {sm}"));
            if !objects.contains(p) {
                objects.push(p.clone());
            }
        }
        let mut figures = BTreeMap::new();
        figures.insert("listed_addresses".into(), t.listed as f64);
        if let Some(m) = missing {
            figures.insert("missing_addresses".into(), m as f64);
        }
        let summary = match missing {
            Some(m) => format!(
                "{} targets invisible to every consumer of the Endpoints API",
                thousands(m as u64)
            ),
            None => {
                "an unknown number of targets invisible to consumers of the Endpoints API".into()
            }
        };
        findings.push(Finding {
            code: TRUNCATED.code,
            rule: TRUNCATED.slug,
            severity: Severity::Critical,
            title: format!("Endpoints {ns}/{name} is truncated at {ENDPOINTS_MAX} addresses"),
            objects,
            evidence,
            cost: Cost { summary, figures },
            fix: Fix {
                summary: "move its consumers to EndpointSlices, which have no such ceiling".into(),
                steps: vec![
                    "apply the HA002 fix of each Prometheus listed (serviceDiscoveryRole: EndpointSlice)".into(),
                    "move other Endpoints readers (hand-written role: endpoints jobs) to role: endpointslice".into(),
                ],
                ..Fix::default()
            },
        });
    }
    Outcome::Ran(findings)
}

fn prometheus_role(facts: &Facts<'_>, _: &crate::rules::Options) -> Outcome {
    let c = facts.cluster;
    if !c.has(Kind::Prometheus) && !c.has(Kind::PrometheusAgent) {
        return Outcome::NotChecked(vec![Kind::Prometheus, Kind::PrometheusAgent]);
    }
    let truncated = truncations(facts);
    let mut findings = Vec::new();
    for (p, agent) in c.all_prometheuses() {
        let role = discovery_role(p);
        if role != "Endpoints" {
            continue;
        }
        let me = prometheus_ref(p, agent);
        let set = p.spec.service_discovery_role.is_some();
        let mut evidence = vec![if set {
            "spec.serviceDiscoveryRole is Endpoints".to_string()
        } else {
            "spec.serviceDiscoveryRole is unset, and the operator defaults it to Endpoints"
                .to_string()
        }];
        let mut missing_targets = 0;
        let mut reads_truncated = Vec::new();
        for t in &truncated {
            let (ns, name) = ns_name(&t.endpoints.metadata);
            if endpoints_consumers(facts, ns, name)
                .iter()
                .any(|(who, _)| *who == me)
            {
                missing_targets += t.real.map_or(0, |(n, _)| n.saturating_sub(t.listed));
                reads_truncated.push(format!("{ns}/{name}"));
            }
        }
        if !reads_truncated.is_empty() {
            evidence.push(format!(
                "it reads truncated Endpoints {}: {} targets missing",
                reads_truncated.join(", "),
                thousands(missing_targets as u64)
            ));
        }
        evidence.push(match versions::newest_kubelet(c) {
            Some((a, b)) if (a, b) >= (1, 33) => format!(
                "Endpoints is deprecated from Kubernetes 1.33, which this cluster runs (kubelets up to {a}.{b}): \
                 the apiserver warns on every use"
            ),
            Some((a, b)) => format!(
                "Endpoints is deprecated from Kubernetes 1.33 (this cluster's kubelets run up to {a}.{b}): \
                 the apiserver warns on every use from that upgrade on"
            ),
            None => "Endpoints is deprecated from Kubernetes 1.33; the apiserver warns on every use".into(),
        });
        if versions::newest_kubelet(c).is_some_and(|v| v < (1, 21)) {
            evidence.push(
                "discovery.k8s.io/v1 EndpointSlices need Kubernetes 1.21 or later: upgrade the cluster first"
                    .into(),
            );
        }
        let operator = operator_supports(c, OPERATOR_DISCOVERY_ROLE, "spec.serviceDiscoveryRole");
        evidence.push(operator.evidence.clone());
        let severity = if reads_truncated.is_empty() {
            Severity::Warning
        } else {
            Severity::Critical
        };
        let endpoints_bytes: usize = c.endpoints.iter().map(|e| e.wire_bytes).sum();
        let mut figures = BTreeMap::new();
        figures.insert("missing_targets".into(), missing_targets as f64);
        figures.insert("endpoints_bytes_listed".into(), endpoints_bytes as f64);
        let (ns, name) = (p.namespace(), p.name());
        let sa = p
            .spec
            .service_account_name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let rbac_name = manifest::dns_label(&format!("{name}-{ns}-endpointslices"));
        let role_manifest = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": rbac_name, "labels": {"app.kubernetes.io/managed-by": "herald-audit"}},
            "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                       "verbs": ["get", "list", "watch"]}],
        });
        let binding_manifest = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": rbac_name, "labels": {"app.kubernetes.io/managed-by": "herald-audit"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": rbac_name},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
        });
        let mut replaced = p.raw.clone();
        manifest::clean(&mut replaced);
        manifest::entry_object(&mut replaced, "spec")
            .as_object_mut()
            .expect("entry_object returns an object")
            .insert("serviceDiscoveryRole".into(), "EndpointSlice".into());
        findings.push(Finding {
            code: PROMETHEUS_ROLE.code,
            rule: PROMETHEUS_ROLE.slug,
            severity,
            title: format!("{me} discovers targets through Endpoints"),
            objects: vec![me.clone()],
            evidence,
            cost: Cost {
                summary: if missing_targets > 0 {
                    format!("{} targets never scraped", thousands(missing_targets as u64))
                } else {
                    format!(
                        "every replica lists and watches whole Endpoints objects ({} in all) instead of slices",
                        super::human_bytes(endpoints_bytes as f64)
                    )
                },
                figures,
            },
            fix: Fix {
                summary: "set serviceDiscoveryRole: EndpointSlice and grant get/list/watch on endpointslices".into(),
                steps: operator.step.clone().into_iter().chain([
                    format!("kubectl create the ClusterRole and ClusterRoleBinding {rbac_name} (ServiceAccount {ns}/{sa})"),
                    format!("kubectl replace {me} with serviceDiscoveryRole: EndpointSlice"),
                    "check that every target is up again in the Prometheus UI (the operator rolls the config; no restart)".into(),
                ]).collect(),
                actions: vec![
                    Action { verb: Verb::Create, object: ObjectRef::other("ClusterRole", None, &rbac_name) },
                    Action { verb: Verb::Create, object: ObjectRef::other("ClusterRoleBinding", None, &rbac_name) },
                    Action { verb: Verb::Replace, object: me },
                ],
                manifests: vec![role_manifest, binding_manifest, replaced],
                file: None,
            },
        });
    }
    Outcome::Ran(findings)
}

fn kubelet_endpoints(facts: &Facts<'_>, _: &crate::rules::Options) -> Outcome {
    let c: &Cluster = facts.cluster;
    if let Err(o) = require(c, &[Kind::Endpoints, Kind::Node]) {
        return o;
    }
    let nodes = c.nodes.len();
    let mut findings = Vec::new();
    for e in c.endpoints.iter().filter(|e| is_operator_kubelet(e)) {
        if nodes <= ENDPOINTS_MAX {
            continue;
        }
        let (ns, name) = ns_name(&e.metadata);
        let slice_count = |managed_by: &str| -> usize {
            c.endpoint_slices
                .iter()
                .filter(|s| {
                    let l = s.metadata.labels.as_ref();
                    let get = |k: &str| l.and_then(|l| l.get(k)).map(String::as_str);
                    ns_name(&s.metadata).0 == ns
                        && get("kubernetes.io/service-name") == Some(name)
                        && get("endpointslice.kubernetes.io/managed-by") == Some(managed_by)
                })
                .map(|s| s.endpoints.len())
                .sum()
        };
        let mirrored = slice_count("endpointslicemirroring-controller.k8s.io");
        let operator = slice_count("prometheus-operator");
        let migrated = operator >= nodes;
        let missing = nodes - ENDPOINTS_MAX;
        let mut evidence = vec![
            format!("the cluster has {} nodes", thousands(nodes as u64)),
            format!(
                "the operator-managed Endpoints lists {} kubelets",
                thousands(address_count(e) as u64)
            ),
        ];
        if c.has(Kind::EndpointSlice) {
            evidence.push(format!(
                "EndpointSlices: {} mirrored endpoints (the mirroring controller copies at most {ENDPOINTS_MAX}), \
                 {} in operator-managed slices",
                thousands(mirrored as u64),
                thousands(operator as u64)
            ));
        }
        let mut figures = BTreeMap::new();
        figures.insert("nodes".into(), nodes as f64);
        figures.insert(
            "kubelets_missing_from_mirrored_slices".into(),
            missing as f64,
        );
        let operator = operator_supports(c, OPERATOR_KUBELET_SLICES, "--kubelet-endpointslice");
        evidence.push(operator.evidence.clone());
        let mut steps = vec![
            "run prometheus-operator with --kubelet-endpoints=true --kubelet-endpointslice=true"
                .into(),
            format!(
                "verify: kubectl get endpointslices -n {ns} -l endpointslice.kubernetes.io/managed-by=prometheus-operator \
                 lists all {nodes} kubelets"
            ),
            "switch every Prometheus to serviceDiscoveryRole: EndpointSlice (HA002)".into(),
            "run prometheus-operator with --kubelet-endpoints=false".into(),
            format!("kubectl delete endpoints -n {ns} {name} (its mirrored slices go with it)"),
        ];
        if migrated {
            steps.drain(..2);
        } else if let Some(step) = operator.step.clone() {
            steps.insert(0, step);
        }
        findings.push(Finding {
            code: KUBELET_ENDPOINTS.code,
            rule: KUBELET_ENDPOINTS.slug,
            severity: if migrated { Severity::Warning } else { Severity::Critical },
            title: format!("kubelet targets come from Endpoints {ns}/{name} on a {nodes}-node cluster"),
            objects: vec![ObjectRef::new(Kind::Endpoints, ns, name)],
            evidence,
            cost: Cost {
                summary: format!(
                    "{} kubelets (and their cAdvisor) invisible to EndpointSlice consumers of the mirrored slices",
                    thousands(missing as u64)
                ),
                figures,
            },
            fix: Fix {
                summary: if migrated {
                    "finish the migration to operator-managed kubelet EndpointSlices".into()
                } else {
                    "let the operator manage kubelet EndpointSlices, then drop the Endpoints".into()
                },
                steps,
                ..Fix::default()
            },
        });
    }
    Outcome::Ran(findings)
}
