//! What scrapes a pod, and on which container port: its `prometheus.io` annotations, PodMonitors
//! selecting it, and ServiceMonitors selecting a Service that selects it. Each monitor scrape names
//! the monitor endpoint it comes from, so that a fix can edit exactly that endpoint.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::custom::ScrapeEndpoint;
use crate::facts::Facts;
use crate::finding::ObjectRef;
use crate::inventory::ns_name;
use crate::kind::Kind;
use crate::objects::Pod;
use crate::selector;

/// A monitor endpoint: the ServiceMonitor or PodMonitor, and the index of the entry in its
/// `endpoints` / `podMetricsEndpoints`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Via {
    pub monitor: ObjectRef,
    pub endpoint: usize,
}

/// One scrape of one pod port by a monitor endpoint.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Scrape {
    pub port: i32,
    /// `PodMonitor ns/name` or `ServiceMonitor ns/name via Service svc`, for evidence lines.
    pub how: String,
    /// Whether it is plaintext (scheme unset or http).
    pub plain: bool,
    pub via: Via,
}

/// The number of the container port `name` of `pod`.
pub fn container_port_named(pod: &Pod, name: &str) -> Option<i32> {
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

/// Every monitor scrape of `pod`, sorted. A PodMonitor endpoint names the container port by
/// `port` (name), `portNumber`, or the deprecated `targetPort`; a ServiceMonitor endpoint names a
/// Service port by `port` (name) or by the deprecated `targetPort`, which reaches the pod on the
/// Service port's `targetPort` (prometheus-operator:pkg/prometheus/promcfg.go
/// generateServiceMonitorConfig keeps targets whose endpoint port name or target port matches).
pub fn monitor_scrapes(facts: &Facts<'_>, pod: &Pod) -> Vec<Scrape> {
    let c = facts.cluster;
    let (ns, _) = ns_name(&pod.metadata);
    let mut out = Vec::new();
    for pm in &c.pod_monitors {
        if !selector::monitor_namespace_matches(&pm.spec.namespace_selector, pm.namespace(), ns)
            || !selector::matches(&pm.spec.selector, pod.metadata.labels.as_ref())
        {
            continue;
        }
        let monitor = ObjectRef::new(Kind::PodMonitor, pm.namespace(), pm.name());
        for (i, ep) in pm.spec.pod_metrics_endpoints.iter().enumerate() {
            let n = match (&ep.port, ep.port_number, &ep.target_port) {
                (Some(name), _, _) => container_port_named(pod, name),
                (None, Some(n), _) => Some(n),
                (None, None, Some(IntOrString::Int(n))) => Some(*n),
                (None, None, Some(IntOrString::String(s))) => container_port_named(pod, s),
                _ => None,
            };
            if let Some(port) = n {
                out.push(Scrape {
                    port,
                    how: monitor.to_string(),
                    plain: plain(ep),
                    via: Via {
                        monitor: monitor.clone(),
                        endpoint: i,
                    },
                });
            }
        }
    }
    for m in &facts.monitored {
        let svc = &m.service.obj;
        let (svc_ns, svc_name) = ns_name(&svc.metadata);
        if svc_ns != ns
            || !selector::service_selects(
                svc.spec.as_ref().and_then(|s| s.selector.as_ref()),
                pod.metadata.labels.as_ref(),
            )
        {
            continue;
        }
        for port in svc.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
            let pod_port = match &port.target_port {
                Some(IntOrString::Int(n)) => Some(*n),
                Some(IntOrString::String(s)) => container_port_named(pod, s),
                None => Some(port.port),
            };
            let Some(pod_port) = pod_port else { continue };
            for sm in &m.monitors {
                let monitor = ObjectRef::new(Kind::ServiceMonitor, sm.namespace(), sm.name());
                for (i, ep) in sm.spec.endpoints.iter().enumerate() {
                    let hit = match (&ep.port, &ep.target_port) {
                        (Some(name), _) if !name.is_empty() => {
                            port.name.as_deref() == Some(name.as_str())
                        }
                        (_, Some(IntOrString::Int(n))) => pod_port == *n,
                        (_, Some(IntOrString::String(s))) => {
                            container_port_named(pod, s) == Some(pod_port)
                        }
                        _ => false,
                    };
                    if hit {
                        out.push(Scrape {
                            port: pod_port,
                            how: format!("{monitor} via Service {svc_name}"),
                            plain: plain(ep),
                            via: Via {
                                monitor: monitor.clone(),
                                endpoint: i,
                            },
                        });
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}
