//! The targets kubernetes_sd must discover for each role, computed independently from kube-sim's own
//! objects (JSON as `SimHandle::objects_json` returns them), and the label projection both sides are
//! compared on.
//!
//! The rules follow vmagent 1.79 (VictoriaMetrics v1.79.5 lib/promscrape/discovery/kubernetes/
//! {node,pod,service,endpoints,endpointslice}.go), checked against current Prometheus
//! (prometheus/prometheus discovery/kubernetes/*.go). Only labels both produce are compared. Where
//! the two differ:
//! - pod: both list every container and every init container (`__meta_kubernetes_pod_container_init`);
//!   Prometheus adds `_container_image` and `_container_id`, vmagent 1.79 does not (not compared).
//! - endpoints: for the pod container ports no endpoint port covers, vmagent 1.79 walks only
//!   `spec.containers`; Prometheus also walks `spec.initContainers` (native sidecars with ports). The
//!   generated clusters have no init container with ports, so both give the same set here; the
//!   expectation follows vmagent. On a matched port vmagent writes the container port's protocol as
//!   `_pod_container_port_protocol`, Prometheus the endpoint port's (not compared).
//! - endpointslice: vmagent 1.79 always writes `_endpoint_conditions_ready` (`false` when unset) and
//!   reads the v1beta1 `topology` map (absent in v1, so no zone labels); Prometheus writes the ready,
//!   serving and terminating conditions only when set, plus `_endpoint_node_name` and
//!   `_endpoint_zone`. Compared: ready, which kube-sim always sets. A port without a number becomes
//!   `ip:0` in vmagent but a bare `ip` in Prometheus; kube-sim never writes such ports.
//! - endpointslice: Prometheus skips slices of the Service's non-primary IP family
//!   (`nonPrimaryIPFamilySlice`); kube-sim's Services are single-stack, so nothing is skipped.
//! - node: both take the first address by type in the order InternalIP, InternalDNS, ExternalIP,
//!   ExternalDNS, LegacyHostIP, Hostname, joined with the kubelet port, and set `instance` to the name.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use kube_sim::peers::Labels;

/// The kubernetes_sd roles under test, one scrape job each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Node,
    Pod,
    Service,
    Endpoints,
    EndpointSlice,
}

const M: &str = "__meta_kubernetes_";

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Node,
        Role::Pod,
        Role::Service,
        Role::Endpoints,
        Role::EndpointSlice,
    ];

    /// The `role:` value in kubernetes_sd_configs.
    pub fn name(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Pod => "pod",
            Role::Service => "service",
            Role::Endpoints => "endpoints",
            Role::EndpointSlice => "endpointslice",
        }
    }

    /// The scrape job discovering this role.
    pub fn job(self) -> String {
        format!("sd-{}", self.name())
    }

    /// The labels compared for this role (without the `__meta_kubernetes_` prefix, except
    /// `__address__` and `instance`): the address plus what identifies the object, container and port
    /// behind a target, and the state that decides whether it is scraped.
    fn compared(self) -> Vec<&'static str> {
        // What the endpoints roles copy from the pod behind an address.
        const POD: &[&str] = &[
            "pod_name",
            "pod_ip",
            "pod_ready",
            "pod_phase",
            "pod_node_name",
            "pod_host_ip",
            "pod_uid",
            "pod_controller_kind",
            "pod_controller_name",
            "pod_container_name",
            "pod_container_port_name",
            "pod_container_port_number",
        ];
        let own: &[&str] = match self {
            Role::Node => &[
                "__address__",
                "instance",
                "node_name",
                "node_provider_id",
                "node_address_InternalIP",
                "node_address_Hostname",
                "node_label_topology_kubernetes_io_zone",
            ],
            Role::Pod => &[
                "__address__",
                "namespace",
                "pod_container_init",
                "pod_container_port_protocol",
            ],
            Role::Service => &[
                "__address__",
                "namespace",
                "service_name",
                "service_type",
                "service_cluster_ip",
                "service_external_name",
                "service_port_name",
                "service_port_protocol",
            ],
            Role::Endpoints => &[
                "__address__",
                "namespace",
                "endpoints_name",
                "endpoint_ready",
                "endpoint_port_name",
                "endpoint_port_protocol",
                "endpoint_address_target_kind",
                "endpoint_address_target_name",
                "endpoint_node_name",
                "endpoint_hostname",
                "service_name",
            ],
            Role::EndpointSlice => &[
                "__address__",
                "namespace",
                "endpointslice_name",
                "endpointslice_label_kubernetes_io_service_name",
                "endpointslice_address_type",
                "endpointslice_endpoint_conditions_ready",
                "endpointslice_port",
                "endpointslice_port_name",
                "endpointslice_port_protocol",
                "endpointslice_port_app_protocol",
                "endpointslice_address_target_kind",
                "endpointslice_address_target_name",
                "endpointslice_endpoint_hostname",
                "service_name",
            ],
        };
        let pod: &[&str] = if self == Role::Node || self == Role::Service {
            &[]
        } else {
            POD
        };
        own.iter().chain(pod).copied().collect()
    }

    /// `labels` cut down to the compared ones, empty values dropped (vmagent writes some labels with
    /// empty values where Prometheus leaves them out; neither side's choice matters here).
    pub fn project(self, labels: &Labels) -> Labels {
        let mut out = Labels::new();
        for name in self.compared() {
            let full = if name.starts_with("__") || name == "instance" {
                name.to_string()
            } else {
                format!("{M}{name}")
            };
            if let Some(v) = labels.get(&full).filter(|v| !v.is_empty()) {
                out.insert(full, v.clone());
            }
        }
        out
    }
}

/// kube-sim's objects of the kinds the five roles read.
pub struct State {
    pub nodes: Vec<Value>,
    pub pods: Vec<Value>,
    pub services: Vec<Value>,
    pub endpoints: Vec<Value>,
    pub slices: Vec<Value>,
}

impl State {
    /// Every target `role` must discover, projected onto the compared labels.
    pub fn expected(&self, role: Role) -> Vec<Labels> {
        let full: Vec<Labels> = match role {
            Role::Node => self.nodes.iter().flat_map(node_targets).collect(),
            Role::Pod => self.pods.iter().flat_map(pod_targets).collect(),
            Role::Service => self.services.iter().flat_map(service_targets).collect(),
            Role::Endpoints => {
                let idx = Index::new(self);
                self.endpoints
                    .iter()
                    .flat_map(|e| endpoints_targets(e, &idx))
                    .collect()
            }
            Role::EndpointSlice => {
                let idx = Index::new(self);
                self.slices
                    .iter()
                    .flat_map(|e| slice_targets(e, &idx))
                    .collect()
            }
        };
        full.iter().map(|t| role.project(t)).collect()
    }
}

/// Pods and Services by (namespace, name), as the endpoints roles look them up.
struct Index<'a> {
    pods: HashMap<(&'a str, &'a str), &'a Value>,
    services: HashMap<(&'a str, &'a str), &'a Value>,
}

impl<'a> Index<'a> {
    fn new(state: &'a State) -> Self {
        let key = |o: &'a Value| (s(o, "/metadata/namespace"), s(o, "/metadata/name"));
        Index {
            pods: state.pods.iter().map(|p| (key(p), p)).collect(),
            services: state.services.iter().map(|v| (key(v), v)).collect(),
        }
    }
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn n(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

fn arr<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn set(m: &mut Labels, name: &str, value: impl Into<String>) {
    m.insert(format!("{M}{name}"), value.into());
}

/// Go's `net.JoinHostPort`: IPv6 hosts in brackets.
pub fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Prometheus's `strutil.SanitizeLabelName` (vmagent's `discoveryutils.SanitizeLabelName`).
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn object_labels(m: &mut Labels, prefix: &str, obj: &Value) {
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            set(
                m,
                &format!("{prefix}_label_{}", sanitize(k)),
                v.as_str().unwrap_or(""),
            );
        }
    }
}

fn node_targets(node: &Value) -> Vec<Labels> {
    let addresses = arr(node, "/status/addresses");
    let host = [
        "InternalIP",
        "InternalDNS",
        "ExternalIP",
        "ExternalDNS",
        "LegacyHostIP",
        "Hostname",
    ]
    .iter()
    .find_map(|t| {
        addresses
            .iter()
            .find(|a| s(a, "/type") == *t)
            .map(|a| s(a, "/address"))
            .filter(|a| !a.is_empty())
    });
    let Some(host) = host else {
        return Vec::new();
    };
    let name = s(node, "/metadata/name");
    let mut m = Labels::new();
    m.insert(
        "__address__".into(),
        join_host_port(
            host,
            n(node, "/status/daemonEndpoints/kubeletEndpoint/Port"),
        ),
    );
    m.insert("instance".into(), name.into());
    set(&mut m, "node_name", name);
    set(&mut m, "node_provider_id", s(node, "/spec/providerID"));
    object_labels(&mut m, "node", node);
    for a in addresses.iter().rev() {
        // The first address of each type wins: walking backwards lets it overwrite later ones.
        set(
            &mut m,
            &format!("node_address_{}", sanitize(s(a, "/type"))),
            s(a, "/address"),
        );
    }
    vec![m]
}

/// `__meta_kubernetes_pod_*` common to every target of a pod, in any role.
fn pod_common(m: &mut Labels, pod: &Value) {
    set(m, "namespace", s(pod, "/metadata/namespace"));
    set(m, "pod_name", s(pod, "/metadata/name"));
    set(m, "pod_ip", s(pod, "/status/podIP"));
    let ready = arr(pod, "/status/conditions")
        .iter()
        .find(|c| s(c, "/type") == "Ready")
        .map(|c| s(c, "/status").to_lowercase())
        .unwrap_or_else(|| "unknown".into());
    set(m, "pod_ready", ready);
    set(m, "pod_phase", s(pod, "/status/phase"));
    set(m, "pod_node_name", s(pod, "/spec/nodeName"));
    set(m, "pod_host_ip", s(pod, "/status/hostIP"));
    set(m, "pod_uid", s(pod, "/metadata/uid"));
    if let Some(owner) = arr(pod, "/metadata/ownerReferences")
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
    {
        set(m, "pod_controller_kind", s(owner, "/kind"));
        set(m, "pod_controller_name", s(owner, "/name"));
    }
    object_labels(m, "pod", pod);
}

fn container_labels(m: &mut Labels, container: &Value, port: Option<&Value>) {
    set(m, "pod_container_name", s(container, "/name"));
    if let Some(p) = port {
        set(m, "pod_container_port_name", s(p, "/name"));
        set(
            m,
            "pod_container_port_number",
            n(p, "/containerPort").to_string(),
        );
        set(m, "pod_container_port_protocol", s(p, "/protocol"));
    }
}

fn pod_targets(pod: &Value) -> Vec<Labels> {
    let ip = s(pod, "/status/podIP");
    if ip.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (list, init) in [
        ("/spec/containers", "false"),
        ("/spec/initContainers", "true"),
    ] {
        for c in arr(pod, list) {
            let ports = arr(c, "/ports");
            let each: Vec<Option<&Value>> = if ports.is_empty() {
                vec![None]
            } else {
                ports.iter().map(Some).collect()
            };
            for p in each {
                let mut m = Labels::new();
                let addr = match p {
                    Some(p) => join_host_port(ip, n(p, "/containerPort")),
                    None => ip.to_string(),
                };
                m.insert("__address__".into(), addr);
                set(&mut m, "pod_container_init", init);
                pod_common(&mut m, pod);
                container_labels(&mut m, c, p);
                out.push(m);
            }
        }
    }
    out
}

fn service_common(m: &mut Labels, svc: &Value) {
    set(m, "namespace", s(svc, "/metadata/namespace"));
    set(m, "service_name", s(svc, "/metadata/name"));
    let ty = s(svc, "/spec/type");
    set(m, "service_type", ty);
    if ty == "ExternalName" {
        set(m, "service_external_name", s(svc, "/spec/externalName"));
    } else {
        set(m, "service_cluster_ip", s(svc, "/spec/clusterIP"));
    }
    object_labels(m, "service", svc);
}

fn service_targets(svc: &Value) -> Vec<Labels> {
    let host = format!(
        "{}.{}.svc",
        s(svc, "/metadata/name"),
        s(svc, "/metadata/namespace")
    );
    arr(svc, "/spec/ports")
        .iter()
        .map(|p| {
            let mut m = Labels::new();
            m.insert("__address__".into(), join_host_port(&host, n(p, "/port")));
            set(&mut m, "service_port_name", s(p, "/name"));
            set(&mut m, "service_port_protocol", s(p, "/protocol"));
            service_common(&mut m, svc);
            m
        })
        .collect()
}

/// Pods an Endpoints or EndpointSlice object points at, with the ports already listed for them.
#[derive(Default)]
struct SeenPods<'a> {
    order: Vec<(&'a str, &'a str)>,
    ports: BTreeMap<(&'a str, &'a str), (&'a Value, Vec<i64>)>,
}

impl<'a> SeenPods<'a> {
    /// Adds the pod's labels to an address target, and the container port matching the endpoint
    /// port. Both implementations match on the number only and let the last container with it win.
    fn attach(&mut self, m: &mut Labels, pod: &'a Value, port: i64) {
        pod_common(m, pod);
        let key = (s(pod, "/metadata/namespace"), s(pod, "/metadata/name"));
        if !self.ports.contains_key(&key) {
            self.order.push(key);
        }
        let entry = self.ports.entry(key).or_insert((pod, Vec::new()));
        for c in arr(pod, "/spec/containers") {
            if let Some(p) = arr(c, "/ports")
                .iter()
                .find(|p| n(p, "/containerPort") == port)
            {
                entry.1.push(port);
                container_labels(m, c, Some(p));
            }
        }
    }

    /// One target per container port of a seen pod that no endpoint port covered.
    fn leftovers(&self, svc: Option<&Value>) -> Vec<Labels> {
        let mut out = Vec::new();
        for key in &self.order {
            let (pod, seen) = &self.ports[key];
            for c in arr(pod, "/spec/containers") {
                for p in arr(c, "/ports") {
                    let number = n(p, "/containerPort");
                    if seen.contains(&number) {
                        continue;
                    }
                    let mut m = Labels::new();
                    m.insert(
                        "__address__".into(),
                        join_host_port(s(pod, "/status/podIP"), number),
                    );
                    pod_common(&mut m, pod);
                    container_labels(&mut m, c, Some(p));
                    if let Some(svc) = svc {
                        service_common(&mut m, svc);
                    }
                    out.push(m);
                }
            }
        }
        out
    }
}

fn endpoints_targets<'a>(eps: &'a Value, idx: &Index<'a>) -> Vec<Labels> {
    let ns = s(eps, "/metadata/namespace");
    let name = s(eps, "/metadata/name");
    let svc = idx.services.get(&(ns, name)).copied();
    let mut seen = SeenPods::default();
    let mut out = Vec::new();
    for subset in arr(eps, "/subsets") {
        for port in arr(subset, "/ports") {
            for (list, ready) in [("/addresses", "true"), ("/notReadyAddresses", "false")] {
                for a in arr(subset, list) {
                    let mut m = Labels::new();
                    m.insert(
                        "__address__".into(),
                        join_host_port(s(a, "/ip"), n(port, "/port")),
                    );
                    set(&mut m, "namespace", ns);
                    set(&mut m, "endpoints_name", name);
                    set(&mut m, "endpoint_ready", ready);
                    set(&mut m, "endpoint_port_name", s(port, "/name"));
                    set(&mut m, "endpoint_port_protocol", s(port, "/protocol"));
                    let kind = s(a, "/targetRef/kind");
                    if !kind.is_empty() {
                        set(&mut m, "endpoint_address_target_kind", kind);
                        set(
                            &mut m,
                            "endpoint_address_target_name",
                            s(a, "/targetRef/name"),
                        );
                    }
                    set(&mut m, "endpoint_node_name", s(a, "/nodeName"));
                    set(&mut m, "endpoint_hostname", s(a, "/hostname"));
                    if let Some(svc) = svc {
                        service_common(&mut m, svc);
                    }
                    object_labels(&mut m, "endpoints", eps);
                    let pod = idx
                        .pods
                        .get(&(s(a, "/targetRef/namespace"), s(a, "/targetRef/name")))
                        .copied();
                    if let (Some(pod), "Pod") = (pod, kind) {
                        seen.attach(&mut m, pod, n(port, "/port"));
                    }
                    out.push(m);
                }
            }
        }
    }
    out.extend(seen.leftovers(svc));
    out
}

fn slice_targets<'a>(slice: &'a Value, idx: &Index<'a>) -> Vec<Labels> {
    let ns = s(slice, "/metadata/namespace");
    let svc_name = s(slice, "/metadata/labels/kubernetes.io~1service-name");
    let svc = idx.services.get(&(ns, svc_name)).copied();
    let mut seen = SeenPods::default();
    let mut out = Vec::new();
    for ep in arr(slice, "/endpoints") {
        let pod = idx
            .pods
            .get(&(s(ep, "/targetRef/namespace"), s(ep, "/targetRef/name")))
            .copied();
        for port in arr(slice, "/ports") {
            for addr in arr(ep, "/addresses") {
                let mut m = Labels::new();
                let number = n(port, "/port");
                m.insert(
                    "__address__".into(),
                    join_host_port(addr.as_str().unwrap_or(""), number),
                );
                set(&mut m, "namespace", ns);
                set(&mut m, "endpointslice_name", s(slice, "/metadata/name"));
                set(
                    &mut m,
                    "endpointslice_address_type",
                    s(slice, "/addressType"),
                );
                let ready = ep.pointer("/conditions/ready").and_then(Value::as_bool) == Some(true);
                set(
                    &mut m,
                    "endpointslice_endpoint_conditions_ready",
                    ready.to_string(),
                );
                set(&mut m, "endpointslice_port_name", s(port, "/name"));
                set(&mut m, "endpointslice_port_protocol", s(port, "/protocol"));
                set(&mut m, "endpointslice_port", number.to_string());
                set(
                    &mut m,
                    "endpointslice_port_app_protocol",
                    s(port, "/appProtocol"),
                );
                let kind = s(ep, "/targetRef/kind");
                if !kind.is_empty() {
                    set(&mut m, "endpointslice_address_target_kind", kind);
                    set(
                        &mut m,
                        "endpointslice_address_target_name",
                        s(ep, "/targetRef/name"),
                    );
                }
                set(
                    &mut m,
                    "endpointslice_endpoint_hostname",
                    s(ep, "/hostname"),
                );
                if let Some(svc) = svc {
                    service_common(&mut m, svc);
                }
                object_labels(&mut m, "endpointslice", slice);
                if let (Some(pod), "Pod") = (pod, kind) {
                    seen.attach(&mut m, pod, number);
                }
                out.push(m);
            }
        }
    }
    out.extend(seen.leftovers(svc));
    out
}
