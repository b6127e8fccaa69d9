//! Facts derived once from the inventory and shared by the rules: which Services are scraped and
//! whether they exist only for metrics, how many backends a Service really has, and the mesh.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::custom::ServiceMonitor;
use crate::inventory::{Cluster, Item, ns_name};
use crate::istio::Istio;
use crate::kind::Kind;
use crate::objects::{Pod, Service, ServicePort};
use crate::selector;

/// Facts the rules share.
pub struct Facts<'c> {
    pub cluster: &'c Cluster,
    /// Services selected by at least one ServiceMonitor, in inventory order.
    pub monitored: Vec<Monitored<'c>>,
    /// The mesh, when the input shows Istio.
    pub istio: Option<Istio>,
    /// `(namespace, service) -> backends`, see [`Facts::backends`].
    backends: BTreeMap<(String, String), usize>,
    /// `(namespace, service) -> index` into `monitored`.
    monitored_index: BTreeMap<(&'c str, &'c str), usize>,
    /// `(namespace, name) -> index` into the inventory's Services.
    services: BTreeMap<(&'c str, &'c str), usize>,
}

/// A Service that ServiceMonitors select.
pub struct Monitored<'c> {
    pub service: &'c Item<Service>,
    pub monitors: Vec<&'c Item<ServiceMonitor>>,
    /// Names (or numbers) of the Service's ports the monitors scrape.
    pub scraped_ports: BTreeSet<String>,
    pub class: ServiceClass,
}

/// What a scraped Service is for.
///
/// The metrics-only heuristic: a Service is metrics-only when (1) its type is ClusterIP, (2) every
/// one of its ports is scraped by a selecting ServiceMonitor endpoint (by `port` name, or by the
/// deprecated `targetPort` against the port's target or number) and is named for metrics (its name
/// or target name contains `metric`, `prom`, `monitoring` or `telemetry`), (3) no Ingress routes to it (when
/// Ingresses are in the input), and (4) it is not `default/kubernetes`. Anything else carries
/// traffic, and the reasons are kept as evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceClass {
    MetricsOnly { headless: bool },
    Traffic { reasons: Vec<String> },
}

impl<'c> Facts<'c> {
    pub fn new(cluster: &'c Cluster) -> Facts<'c> {
        let monitored = monitored_services(cluster);
        // The first of duplicates wins, as a search in input order would find it.
        let mut monitored_index = BTreeMap::new();
        for (i, m) in monitored.iter().enumerate() {
            monitored_index
                .entry(ns_name(&m.service.metadata))
                .or_insert(i);
        }
        let mut services = BTreeMap::new();
        for (i, s) in cluster.services.iter().enumerate() {
            services.entry(ns_name(&s.metadata)).or_insert(i);
        }
        Facts {
            cluster,
            monitored,
            istio: Istio::detect(cluster),
            backends: backend_index(cluster),
            monitored_index,
            services,
        }
    }

    /// The Service `namespace/name`, if the input has it.
    pub fn service(&self, namespace: &str, name: &str) -> Option<&'c Item<Service>> {
        let i = *self.services.get(&(namespace, name))?;
        Some(&self.cluster.services[i])
    }

    /// The real number of backends of a Service and where the number comes from: its EndpointSlices
    /// when the input has them (every endpoint, ready or not, as the Endpoints controller keeps both),
    /// else the pods its selector matches that have an IP.
    pub fn backends(&self, namespace: &str, name: &str) -> Option<(usize, &'static str)> {
        let n = self
            .backends
            .get(&(namespace.to_string(), name.to_string()));
        if self.cluster.has(Kind::EndpointSlice) {
            Some((n.copied().unwrap_or(0), "EndpointSlices"))
        } else if self.cluster.has(Kind::Pod) {
            Some((n.copied().unwrap_or(0), "pods matching the selector"))
        } else {
            None
        }
    }

    /// The monitored entry for a Service, if ServiceMonitors select it.
    pub fn monitored(&self, namespace: &str, name: &str) -> Option<&Monitored<'c>> {
        let i = *self.monitored_index.get(&(namespace, name))?;
        Some(&self.monitored[i])
    }
}

/// The pod's IP when it has one.
pub fn pod_ip(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .filter(|ip| !ip.is_empty())
}

/// A Service's type, ClusterIP when unset (the apiserver default).
pub fn service_type(svc: &Service) -> &str {
    svc.spec
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("ClusterIP")
}

pub fn is_headless(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// The label a port is known by in findings: its name, else its number.
pub fn port_label(port: &ServicePort) -> String {
    port.name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| port.port.to_string())
}

/// Whether a Service port is named as a metrics port (`metrics`, `http-metrics`, `prom`,
/// `http-monitoring`, `telemetry`...), by its own name or by the container port name it targets.
fn named_for_metrics(port: &ServicePort) -> bool {
    let metricsy = |n: &str| {
        let n = n.to_ascii_lowercase();
        ["metric", "prom", "monitoring", "telemetry"]
            .iter()
            .any(|w| n.contains(w))
    };
    port.name.as_deref().is_some_and(metricsy)
        || matches!(&port.target_port, Some(IntOrString::String(t)) if metricsy(t))
}

/// Whether a ServiceMonitor endpoint scrapes this Service port.
fn endpoint_scrapes(ep: &crate::custom::ScrapeEndpoint, port: &ServicePort) -> bool {
    if let Some(name) = ep.port.as_deref().filter(|n| !n.is_empty()) {
        return port.name.as_deref() == Some(name);
    }
    match &ep.target_port {
        Some(IntOrString::Int(n)) => {
            port.port == *n || port.target_port == Some(IntOrString::Int(*n))
        }
        Some(IntOrString::String(s)) => {
            port.target_port == Some(IntOrString::String(s.clone()))
                || port.name.as_deref() == Some(s)
        }
        None => false,
    }
}

fn monitored_services(c: &Cluster) -> Vec<Monitored<'_>> {
    let routed = ingress_backends(c);
    let mut out = Vec::new();
    for svc in &c.services {
        let (ns, name) = ns_name(&svc.metadata);
        let monitors: Vec<_> = c
            .service_monitors
            .iter()
            .filter(|m| {
                selector::monitor_namespace_matches(&m.spec.namespace_selector, m.namespace(), ns)
            })
            .filter(|m| selector::matches(&m.spec.selector, svc.metadata.labels.as_ref()))
            .collect();
        if monitors.is_empty() {
            continue;
        }
        let ports = svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.clone())
            .unwrap_or_default();
        let mut scraped = BTreeSet::new();
        let mut reasons = Vec::new();
        for port in &ports {
            let hit = monitors
                .iter()
                .any(|m| m.spec.endpoints.iter().any(|ep| endpoint_scrapes(ep, port)));
            if hit {
                scraped.insert(port_label(port));
                // NB: a scraped port is not proof of a metrics port: a web app often serves
                // /metrics on its only (traffic) port. Recreating such a Service headless would
                // break its clients, so only ports named for metrics count.
                if !named_for_metrics(port) {
                    reasons.push(format!(
                        "port {} ({}) is scraped but not named for metrics: it may serve traffic too",
                        port_label(port),
                        port.port
                    ));
                }
            } else {
                reasons.push(format!(
                    "port {} ({}) is not scraped",
                    port_label(port),
                    port.port
                ));
            }
        }
        if ports.is_empty() {
            reasons.push("it has no ports".into());
        }
        let ty = service_type(svc);
        if ty != "ClusterIP" {
            reasons.push(format!("its type is {ty}"));
        }
        if let Some(ingresses) = routed.get(&(ns.to_string(), name.to_string())) {
            reasons.push(format!("Ingress {} routes to it", ingresses.join(", ")));
        }
        if (ns, name) == ("default", "kubernetes") {
            reasons.push("it is the apiserver's own Service".into());
        }
        let class = if reasons.is_empty() {
            ServiceClass::MetricsOnly {
                headless: is_headless(svc),
            }
        } else {
            ServiceClass::Traffic { reasons }
        };
        out.push(Monitored {
            service: svc,
            monitors,
            scraped_ports: scraped,
            class,
        });
    }
    out
}

/// `(namespace, service) -> [ingress names]` for every Service an Ingress backend names.
fn ingress_backends(c: &Cluster) -> BTreeMap<(String, String), Vec<String>> {
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for ing in &c.ingresses {
        let (ns, name) = ns_name(&ing.metadata);
        let Some(spec) = &ing.spec else { continue };
        let mut backends: Vec<&str> = Vec::new();
        if let Some(svc) = spec
            .default_backend
            .as_ref()
            .and_then(|b| b.service.as_ref())
        {
            backends.push(&svc.name);
        }
        for rule in spec.rules.iter().flatten() {
            for path in rule.http.iter().flat_map(|h| &h.paths) {
                if let Some(svc) = &path.backend.service {
                    backends.push(&svc.name);
                }
            }
        }
        for b in backends {
            let names = out.entry((ns.to_string(), b.to_string())).or_default();
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
    }
    out
}

/// Backends per Service, computed in one pass over slices (or over each namespace's pods) so that
/// rules can ask per Service on clusters with hundreds of thousands of pods.
fn backend_index(c: &Cluster) -> BTreeMap<(String, String), usize> {
    let mut out = BTreeMap::new();
    if c.has(Kind::EndpointSlice) {
        let mut addresses: BTreeMap<(String, String), BTreeSet<&str>> = BTreeMap::new();
        for slice in &c.endpoint_slices {
            let owner = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"));
            let Some(owner) = owner else { continue };
            let key = (ns_name(&slice.metadata).0.to_string(), owner.clone());
            let set = addresses.entry(key).or_default();
            for ep in &slice.endpoints {
                if let Some(a) = ep.addresses.first() {
                    set.insert(a);
                }
            }
        }
        for (k, v) in addresses {
            out.insert(k, v.len());
        }
    } else if c.has(Kind::Pod) {
        let mut by_ns: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for p in &c.pods {
            if pod_ip(p).is_some() {
                by_ns.entry(ns_name(&p.metadata).0).or_default().push(p);
            }
        }
        for svc in &c.services {
            let (ns, name) = ns_name(&svc.metadata);
            let selector = svc.spec.as_ref().and_then(|s| s.selector.as_ref());
            let n = by_ns
                .get(ns)
                .into_iter()
                .flatten()
                .filter(|p| selector::service_selects(selector, p.metadata.labels.as_ref()))
                .count();
            out.insert((ns.to_string(), name.to_string()), n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn mk_cluster(objects: Vec<Value>) -> Cluster {
        let mut c = Cluster::default();
        for o in objects {
            c.add(o).expect("valid object");
        }
        c
    }

    fn mk_service(name: &str, ports: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "a", "labels": {"scrape": "yes"}},
            "spec": {"clusterIP": "10.0.0.1", "selector": {"app": name}, "ports": ports}})
    }

    #[test]
    fn the_deprecated_target_port_matches_a_service_port_by_target_or_number() {
        let c = mk_cluster(vec![
            mk_service(
                "by-target",
                json!([{"name": "http-metrics", "port": 80, "targetPort": 9090}]),
            ),
            mk_service(
                "mixed",
                json!([{"port": 9090}, {"name": "grpc", "port": 7000}]),
            ),
            json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": {"name": "m", "namespace": "a"},
                "spec": {"selector": {"matchLabels": {"scrape": "yes"}}, "endpoints": [{"targetPort": 9090}]}}),
        ]);
        let facts = Facts::new(&c);
        let by_target = facts.monitored("a", "by-target").expect("selected");
        assert_eq!(
            by_target.class,
            ServiceClass::MetricsOnly { headless: false }
        );
        let mixed = facts.monitored("a", "mixed").expect("selected");
        assert_eq!(
            mixed.class,
            ServiceClass::Traffic {
                reasons: vec![
                    "port 9090 (9090) is scraped but not named for metrics: it may serve traffic too"
                        .into(),
                    "port grpc (7000) is not scraped".into()
                ]
            }
        );
        assert_eq!(mixed.scraped_ports.iter().collect::<Vec<_>>(), ["9090"]);
    }

    #[test]
    fn a_monitor_looks_only_into_its_own_namespace_unless_told_otherwise() {
        let c = mk_cluster(vec![
            mk_service("s", json!([{"name": "metrics", "port": 9090}])),
            json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": {"name": "m", "namespace": "monitoring"},
                "spec": {"selector": {}, "endpoints": [{"port": "metrics"}]}}),
        ]);
        assert!(Facts::new(&c).monitored.is_empty());
    }

    #[test]
    fn backends_come_from_slices_when_the_input_has_them_else_from_pods() {
        let pod = |name: &str, ip: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "a", "labels": {"app": "s"}},
                "status": {"podIP": ip}})
        };
        let mut objects = vec![
            mk_service("s", json!([{"port": 80}])),
            pod("p1", "10.0.0.1"),
            pod("p2", "10.0.0.2"),
            pod("p3", ""),
        ];
        assert_eq!(
            Facts::new(&mk_cluster(objects.clone())).backends("a", "s"),
            Some((2, "pods matching the selector"))
        );
        objects.push(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "s-1", "namespace": "a", "labels": {"kubernetes.io/service-name": "s"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.9"]}]}));
        assert_eq!(
            Facts::new(&mk_cluster(objects)).backends("a", "s"),
            Some((2, "EndpointSlices"))
        );
    }
}
