//! What kube-proxy reads, per service port: the Service's addresses and policies and the endpoints
//! of its EndpointSlices, from herald-audit's inventory (the same loaders as `herald audit`: dumps
//! and live clusters), or generated (`--services N`).
//!
//! Which Services kube-proxy skips follows kubernetes pkg/proxy/servicechangetracker.go
//! `serviceToServiceMap` and pkg/proxy/config: no cluster IP (headless, ExternalName) and the
//! `service.kubernetes.io/service-proxy-name` label (another proxy owns them). Only IPv4 is simulated
//! (one proxier per family; an IPv6 cluster IP is counted as skipped).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use herald_audit::Cluster;
use serde::Deserialize;

use crate::error::SimulateError;

/// The label that hands a Service to another proxy (kubernetes pkg/proxy/apis/well_known_labels.go).
pub const SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";

/// One endpoint of a service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: String,
    pub port: u16,
    pub ready: bool,
    /// On the simulated node.
    pub local: bool,
}

impl Endpoint {
    /// `ip:port`, as `BaseEndpointInfo.String()`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }
}

/// One port of one Service, as kube-proxy's `ServicePort`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServicePort {
    pub namespace: String,
    pub name: String,
    pub port_name: String,
    /// Lower case: tcp, udp, sctp.
    pub protocol: String,
    pub cluster_ip: String,
    pub port: u16,
    /// 0: none.
    pub node_port: u16,
    pub external_ips: Vec<String>,
    pub load_balancer_ips: Vec<String>,
    pub source_ranges: Vec<String>,
    pub internal_local: bool,
    /// externalTrafficPolicy Local on an externally accessible port.
    pub external_local: bool,
    /// ClientIP affinity timeout, when sessionAffinity is ClientIP.
    pub affinity_seconds: Option<u32>,
    pub health_check_node_port: u16,
    pub endpoints: Vec<Endpoint>,
}

impl ServicePort {
    /// `ExternallyAccessible` in kubernetes pkg/proxy/serviceport.go.
    pub fn externally_accessible(&self) -> bool {
        self.node_port != 0 || !self.load_balancer_ips.is_empty() || !self.external_ips.is_empty()
    }

    /// `UsesClusterEndpoints`: "if the internal traffic policy is Cluster, or if it accepts
    /// external traffic at all" (pkg/proxy/serviceport.go).
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_local || self.externally_accessible()
    }

    /// `UsesLocalEndpoints` (pkg/proxy/serviceport.go).
    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_local || (self.external_local && self.externally_accessible())
    }
}

/// The endpoints of a service port sorted as `CategorizeEndpoints` does
/// (kubernetes pkg/proxy/topology.go), without topology hints: ready endpoints only.
pub struct Categorized<'a> {
    pub cluster: Vec<&'a Endpoint>,
    pub local: Vec<&'a Endpoint>,
    pub reachable: Vec<&'a Endpoint>,
    pub has_endpoints: bool,
}

pub fn categorize(sp: &ServicePort) -> Categorized<'_> {
    let ready: Vec<&Endpoint> = sp.endpoints.iter().filter(|e| e.ready).collect();
    let cluster: Vec<&Endpoint> = if sp.uses_cluster_endpoints() {
        ready.clone()
    } else {
        Vec::new()
    };
    let has_endpoints = !ready.is_empty();
    if !sp.uses_local_endpoints() {
        return Categorized {
            reachable: cluster.clone(),
            cluster,
            local: Vec::new(),
            has_endpoints,
        };
    }
    let local: Vec<&Endpoint> = ready.iter().copied().filter(|e| e.local).collect();
    let reachable = if sp.uses_cluster_endpoints() {
        // The union; every local endpoint is also a cluster one.
        cluster.clone()
    } else {
        local.clone()
    };
    Categorized {
        cluster,
        local,
        reachable,
        has_endpoints,
    }
}

/// A node's view: every service port kube-proxy programs, and what was skipped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProxyInput {
    pub ports: Vec<ServicePort>,
    /// Services with no cluster IP (headless, ExternalName) or an IPv6 one.
    pub skipped_no_ip: usize,
    /// Services labelled `service.kubernetes.io/service-proxy-name`.
    pub skipped_proxy_name: usize,
    pub node: String,
    /// The pod CIDR kube-proxy's `LocalTrafficDetector` (detect-local-mode ClusterCIDR) tests.
    pub cluster_cidr: String,
    /// The ServiceCIDRs' ranges of this family (kube-proxy ≥ 1.33 reads ServiceCIDR objects and
    /// drops traffic to unallocated cluster IPs in them); empty when unknown.
    pub service_cidrs: Vec<String>,
}

impl ProxyInput {
    /// Distinct Services among the ports.
    pub fn services(&self) -> usize {
        self.ports
            .iter()
            .map(|p| (&p.namespace, &p.name))
            .collect::<BTreeSet<_>>()
            .len()
    }

    pub fn endpoints(&self) -> usize {
        self.ports.iter().map(|p| p.endpoints.len()).sum()
    }

    /// The input without the given Services (`(namespace, name)`), as after making them headless.
    pub fn without(&self, gone: &BTreeSet<(String, String)>) -> ProxyInput {
        let mut out = self.clone();
        out.ports
            .retain(|p| !gone.contains(&(p.namespace.clone(), p.name.clone())));
        out.skipped_no_ip += self.services() - out.services();
        out
    }

    /// This input's Services scaled by `factor`: a prefix below 1, copies in namespaces
    /// `<ns>-copyK` with fresh addresses above 1. The shape (types, policies, endpoints per
    /// Service) stays the cluster's.
    pub fn scaled(&self, factor: f64) -> ProxyInput {
        let services: Vec<(String, String)> = {
            let mut seen = BTreeSet::new();
            self.ports
                .iter()
                .map(|p| (p.namespace.clone(), p.name.clone()))
                .filter(|k| seen.insert(k.clone()))
                .collect()
        };
        let want = ((services.len() as f64) * factor).round().max(1.0) as usize;
        let mut out = ProxyInput {
            ports: Vec::new(),
            ..self.clone()
        };
        let mut by_service: BTreeMap<(String, String), Vec<&ServicePort>> = BTreeMap::new();
        for p in &self.ports {
            by_service
                .entry((p.namespace.clone(), p.name.clone()))
                .or_default()
                .push(p);
        }
        let mut addrs = AddressPlan::new(self);
        for i in 0..want {
            let copy = i / services.len().max(1);
            let key = &services[i % services.len().max(1)];
            for p in &by_service[key] {
                let mut q = (*p).clone();
                if copy > 0 {
                    q.namespace = format!("{}-copy{copy}", q.namespace);
                    q.cluster_ip = addrs.next_service_ip();
                    for e in &mut q.endpoints {
                        e.ip = addrs.next_pod_ip();
                    }
                    if q.node_port != 0 {
                        // Past the 2,768 NodePorts of the default range, copies are ClusterIP.
                        q.node_port = addrs.next_node_port().unwrap_or(0);
                        if q.node_port == 0 {
                            q.external_local = false;
                        }
                    }
                }
                out.ports.push(q);
            }
        }
        out
    }
}

const NODE_PORT_MIN: u16 = 30000;
const NODE_PORT_MAX: u16 = 32767;

/// Fresh addresses for scaled copies: above every address the input uses.
struct AddressPlan {
    service: u32,
    pod: u32,
    used_node_ports: BTreeSet<u16>,
    node_port: u16,
}

impl AddressPlan {
    fn new(input: &ProxyInput) -> AddressPlan {
        let max_of = |ips: &mut dyn Iterator<Item = &String>| {
            ips.filter_map(|ip| ip.parse::<Ipv4Addr>().ok())
                .map(u32::from)
                .max()
                .unwrap_or(0)
        };
        let service = max_of(&mut input.ports.iter().map(|p| &p.cluster_ip))
            .max(u32::from(Ipv4Addr::new(172, 16, 0, 0)));
        let pod = max_of(
            &mut input
                .ports
                .iter()
                .flat_map(|p| p.endpoints.iter().map(|e| &e.ip)),
        )
        .max(u32::from(Ipv4Addr::new(10, 0, 0, 0)));
        AddressPlan {
            service,
            pod,
            used_node_ports: input.ports.iter().map(|p| p.node_port).collect(),
            node_port: NODE_PORT_MIN,
        }
    }
    fn next_service_ip(&mut self) -> String {
        self.service = self.service.wrapping_add(1);
        Ipv4Addr::from(self.service).to_string()
    }
    fn next_pod_ip(&mut self) -> String {
        self.pod = self.pod.wrapping_add(1);
        Ipv4Addr::from(self.pod).to_string()
    }
    /// A NodePort no Service uses yet, in the apiserver's default range 30000-32767.
    fn next_node_port(&mut self) -> Option<u16> {
        while self.node_port <= NODE_PORT_MAX {
            let p = self.node_port;
            self.node_port += 1;
            if self.used_node_ports.insert(p) {
                return Some(p);
            }
        }
        None
    }
}

/// The Service fields kube-proxy reads, decoded from the object's JSON the inventory keeps.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SvcSpec {
    #[serde(rename = "type")]
    type_: Option<String>,
    #[serde(rename = "clusterIP")]
    cluster_ip: Option<String>,
    #[serde(default)]
    ports: Vec<SvcPort>,
    #[serde(rename = "externalIPs", default)]
    external_ips: Vec<String>,
    external_traffic_policy: Option<String>,
    internal_traffic_policy: Option<String>,
    session_affinity: Option<String>,
    session_affinity_config: Option<serde_json::Value>,
    #[serde(default)]
    load_balancer_source_ranges: Vec<String>,
    health_check_node_port: Option<u16>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SvcPort {
    name: Option<String>,
    protocol: Option<String>,
    port: u16,
    node_port: Option<u16>,
}

#[derive(Deserialize, Default)]
struct SvcObject {
    #[serde(default)]
    spec: SvcSpec,
    #[serde(default)]
    status: serde_json::Value,
}

/// Reads the node's view of `cluster`: every Service port with its endpoints; `node` is the node the
/// rules are for (local endpoints), `cluster_cidr` the pod CIDR.
pub fn from_cluster(
    cluster: &Cluster,
    node: &str,
    cluster_cidr: &str,
) -> Result<ProxyInput, SimulateError> {
    // Endpoints by (namespace, service, port name): the slices' `kubernetes.io/service-name`.
    let mut eps: BTreeMap<(String, String, String), Vec<Endpoint>> = BTreeMap::new();
    for slice in &cluster.endpoint_slices {
        let meta = &slice.metadata;
        let Some(service) = meta
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"))
        else {
            continue;
        };
        let namespace = meta.namespace.clone().unwrap_or_default();
        for port in slice.ports.iter().flatten() {
            let Some(number) = port.port.and_then(|p| u16::try_from(p).ok()) else {
                continue;
            };
            let list = eps
                .entry((
                    namespace.clone(),
                    service.clone(),
                    port.name.clone().unwrap_or_default(),
                ))
                .or_default();
            for e in &slice.endpoints {
                let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                let local = e.node_name.as_deref() == Some(node);
                // kube-proxy uses the first address of each endpoint (pkg/proxy/endpointslicecache.go).
                if let Some(ip) = e
                    .addresses
                    .first()
                    .filter(|ip| ip.parse::<Ipv4Addr>().is_ok())
                {
                    list.push(Endpoint {
                        ip: ip.clone(),
                        port: number,
                        ready,
                        local,
                    });
                }
            }
        }
    }
    let mut input = ProxyInput {
        node: node.to_string(),
        cluster_cidr: cluster_cidr.to_string(),
        ..ProxyInput::default()
    };
    for svc in &cluster.services {
        let meta = &svc.metadata;
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        if meta
            .labels
            .as_ref()
            .is_some_and(|l| l.get(SERVICE_PROXY_NAME).is_some())
        {
            input.skipped_proxy_name += 1;
            continue;
        }
        let obj: SvcObject =
            serde_json::from_str(&svc.raw).map_err(|e| SimulateError::Service {
                object: format!("{namespace}/{name}"),
                reason: e.to_string(),
            })?;
        let spec = obj.spec;
        let Some(cluster_ip) = spec
            .cluster_ip
            .clone()
            .filter(|ip| ip.parse::<Ipv4Addr>().is_ok())
        else {
            input.skipped_no_ip += 1;
            continue;
        };
        if spec.type_.as_deref() == Some("ExternalName") {
            input.skipped_no_ip += 1;
            continue;
        }
        input.ports.extend(ports_of(
            &namespace,
            &name,
            &spec,
            &obj.status,
            cluster_ip,
            &eps,
        ));
    }
    Ok(input)
}

fn ports_of(
    namespace: &str,
    name: &str,
    spec: &SvcSpec,
    status: &serde_json::Value,
    cluster_ip: String,
    eps: &BTreeMap<(String, String, String), Vec<Endpoint>>,
) -> Vec<ServicePort> {
    let ty = spec.type_.as_deref().unwrap_or("ClusterIP");
    let load_balancer_ips: Vec<String> = if ty == "LoadBalancer" {
        status["loadBalancer"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["ip"].as_str())
            .filter(|ip| ip.parse::<Ipv4Addr>().is_ok())
            .map(str::to_string)
            .collect()
    } else {
        Vec::new()
    };
    let affinity_seconds = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c["clientIP"]["timeoutSeconds"].as_u64())
            .map_or(10_800, |s| s as u32)
    });
    spec.ports
        .iter()
        .map(|p| {
            let port_name = p.name.clone().unwrap_or_default();
            let mut sp = ServicePort {
                namespace: namespace.to_string(),
                name: name.to_string(),
                protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
                cluster_ip: cluster_ip.clone(),
                port: p.port,
                node_port: if ty == "NodePort" || ty == "LoadBalancer" {
                    p.node_port.unwrap_or(0)
                } else {
                    0
                },
                external_ips: spec.external_ips.clone(),
                load_balancer_ips: load_balancer_ips.clone(),
                source_ranges: spec.load_balancer_source_ranges.clone(),
                internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
                external_local: false,
                affinity_seconds,
                health_check_node_port: spec.health_check_node_port.unwrap_or(0),
                endpoints: eps
                    .get(&(namespace.to_string(), name.to_string(), port_name.clone()))
                    .cloned()
                    .unwrap_or_default(),
                port_name,
            };
            sp.external_local = sp.externally_accessible()
                && spec.external_traffic_policy.as_deref() == Some("Local");
            sp
        })
        .collect()
}
