//! The cluster's endpoint controllers, as pure synchronous code: the EndpointSlice controller and the
//! (legacy) Endpoints controller of kube-controller-manager, sharing one view of Pods, Services and
//! Nodes. The store feeds every accepted change in; they answer with the EndpointSlice and Endpoints
//! writes that change actually causes.
//!
//! Upstream: kubernetes/kubernetes pkg/controller/endpointslice, staging/src/k8s.io/endpointslice
//! (reconciler.go, utils.go) and pkg/controller/endpoint/endpoints_controller.go.
//!
//! NB: the upstream controllers also stamp `endpoints.kubernetes.io/last-change-trigger-time`; these
//! are pure and clock-free, so they leave it out.

mod endpoints;
mod endpointslice;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::kind::{Kind, Object, Write};

/// Label naming the Service an EndpointSlice belongs to (`discovery.LabelServiceName`).
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Label naming the controller that manages an EndpointSlice (`discovery.LabelManagedBy`).
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// The EndpointSlice controller's name, the value of [`LABEL_MANAGED_BY`] on its slices.
pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
/// Label put on Endpoints and EndpointSlices of headless Services (`v1.IsHeadlessService`).
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// Annotation set on an Endpoints object that was cut at [`endpoints::MAX_ENDPOINTS_ADDRESSES`].
pub const ANNOTATION_OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// The zone label read from Nodes (`v1.LabelTopologyZone`).
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

pub use endpoints::MAX_ENDPOINTS_ADDRESSES;
pub use endpointslice::MAX_ENDPOINTS_PER_SLICE;

/// What the controllers need to know about a Pod: a small projection, so that a 150,000-pod view
/// stays cheap.
#[derive(Debug, Clone, PartialEq)]
struct PodView {
    uid: String,
    labels: BTreeMap<String, String>,
    /// `status.podIPs`, or `status.podIP` when the list is empty.
    ips: Vec<String>,
    node_name: String,
    hostname: String,
    subdomain: String,
    /// The `Ready` condition is `True` (`podutil.IsPodReady`).
    ready: bool,
    /// `metadata.deletionTimestamp` is set.
    terminating: bool,
    /// Phase `Succeeded` or `Failed` (`podutil.IsPodTerminal`).
    terminal: bool,
    /// Named container ports as (name, protocol, port), from containers and from sidecar (restartable)
    /// init containers, in the order `podutil.FindPort` searches them.
    named_ports: Vec<(String, String, i32)>,
}

impl PodView {
    fn from_pod(pod: &Pod) -> PodView {
        let meta = &pod.metadata;
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let mut ips: Vec<String> = status
            .and_then(|s| s.pod_ips.as_ref())
            .map(|l| {
                l.iter()
                    .map(|p| p.ip.clone())
                    .filter(|ip| !ip.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if ips.is_empty()
            && let Some(ip) = status
                .and_then(|s| s.pod_ip.clone())
                .filter(|ip| !ip.is_empty())
        {
            ips.push(ip);
        }
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
        let mut named_ports = Vec::new();
        if let Some(spec) = spec {
            let sidecars = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            for c in spec.containers.iter().chain(sidecars) {
                for p in c.ports.iter().flatten() {
                    if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
                        let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                        named_ports.push((name.to_string(), proto, p.container_port));
                    }
                }
            }
        }
        PodView {
            uid: meta.uid.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            ips,
            node_name: spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
            hostname: spec.and_then(|s| s.hostname.clone()).unwrap_or_default(),
            subdomain: spec.and_then(|s| s.subdomain.clone()).unwrap_or_default(),
            ready,
            terminating: meta.deletion_timestamp.is_some(),
            terminal: phase == "Succeeded" || phase == "Failed",
            named_ports,
        }
    }

    /// `endpointsliceutil.ShouldPodBeInEndpoints`: not terminal, has an IP, and (unless
    /// `include_terminating`) not being deleted.
    fn should_be_in_endpoints(&self, include_terminating: bool) -> bool {
        !self.terminal && !self.ips.is_empty() && (include_terminating || !self.terminating)
    }

    /// `podutil.FindPort`: a numeric targetPort is used as is; a named one is looked up among the
    /// pod's named container ports with the same protocol. `None` leaves the pod out of that port.
    fn find_port(&self, port: &ServicePort) -> Option<i32> {
        match &port.target_port {
            // NB: the apiserver defaults an unset targetPort to `port`; kube-sim's store may not.
            None | Some(IntOrString::Int(0)) => Some(port.port),
            Some(IntOrString::Int(n)) => Some(*n),
            Some(IntOrString::String(name)) => {
                let proto = port.protocol.as_deref().unwrap_or("TCP");
                self.named_ports
                    .iter()
                    .find(|(n, p, _)| n == name && p == proto)
                    .map(|(_, _, num)| *num)
            }
        }
    }
}

/// What the controllers need to know about a Service.
#[derive(Debug, Clone, PartialEq)]
struct ServiceView {
    uid: String,
    labels: BTreeMap<String, String>,
    /// Empty means "no selector": the Service's endpoints are user-managed.
    selector: BTreeMap<String, String>,
    ports: Vec<ServicePort>,
    cluster_ip: String,
    ip_families: Vec<String>,
    publish_not_ready: bool,
}

impl ServiceView {
    fn from_service(svc: &Service) -> ServiceView {
        let spec = svc.spec.as_ref();
        ServiceView {
            uid: svc.metadata.uid.clone().unwrap_or_default(),
            labels: svc.metadata.labels.clone().unwrap_or_default(),
            selector: spec.and_then(|s| s.selector.clone()).unwrap_or_default(),
            ports: spec.and_then(|s| s.ports.clone()).unwrap_or_default(),
            cluster_ip: spec.and_then(|s| s.cluster_ip.clone()).unwrap_or_default(),
            ip_families: spec.and_then(|s| s.ip_families.clone()).unwrap_or_default(),
            publish_not_ready: spec
                .and_then(|s| s.publish_not_ready_addresses)
                .unwrap_or(false),
        }
    }

    fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.selector.is_empty()
            && self
                .selector
                .iter()
                .all(|(k, v)| labels.get(k).is_some_and(|l| l == v))
    }

    /// `helper.IsServiceIPSet`: false for headless (`None`) and for an unset clusterIP.
    fn is_ip_set(&self) -> bool {
        !self.cluster_ip.is_empty() && self.cluster_ip != "None"
    }

    fn is_headless(&self) -> bool {
        self.cluster_ip == "None"
    }

    /// The Service's labels as the controllers copy them onto Endpoints and EndpointSlices, with the
    /// headless marker added for Services without a cluster IP.
    fn copied_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        if self.is_ip_set() {
            labels.remove(LABEL_HEADLESS);
        } else {
            labels.insert(LABEL_HEADLESS.into(), String::new());
        }
        labels
    }
}

fn is_ipv6(ip: &str) -> bool {
    ip.contains(':')
}

/// A Service's pods and the node zones, as handed to one reconcile.
struct ServiceInputs<'a> {
    namespace: &'a str,
    name: &'a str,
    svc: &'a ServiceView,
    /// Selected pods, by name.
    pods: Vec<(&'a str, &'a PodView)>,
    /// Node name → zone label (`None` when the node has no zone label).
    nodes: &'a HashMap<String, Option<String>>,
}

#[derive(Debug, Default)]
struct ServiceEntry {
    view: Option<ServiceView>,
    /// Names of the pods in the namespace the selector matches.
    members: BTreeSet<String>,
}

/// Both endpoint controllers over one shared view of Pods, Services and Nodes.
#[derive(Debug, Default)]
pub struct EndpointsControllers {
    /// namespace → pod name → projection.
    pods: HashMap<String, BTreeMap<String, PodView>>,
    /// namespace → service name → view and matched pods.
    services: HashMap<String, BTreeMap<String, ServiceEntry>>,
    /// namespace → selector key → selector value → services indexed under that (first) pair.
    selector_index: HashMap<String, HashMap<String, HashMap<String, BTreeSet<String>>>>,
    /// Node name → zone label.
    nodes: HashMap<String, Option<String>>,
    /// Node name → pods (namespace, name) scheduled there.
    pods_by_node: HashMap<String, BTreeSet<(String, String)>>,
    slices: endpointslice::SliceController,
    endpoints: endpoints::EndpointsController,
    /// Services to reconcile at the next flush, as (namespace, name).
    dirty: BTreeSet<(String, String)>,
    /// Services whose matched pods must be recomputed before the next reconcile.
    rescan: BTreeSet<(String, String)>,
}

impl EndpointsControllers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed a change the store accepted. Pods, Services and Nodes drive the controllers; a
    /// controller-managed EndpointSlice or Endpoints is ignored here (its content is the controllers'
    /// own); other kinds are ignored. Returns the EndpointSlice and Endpoints writes to make.
    pub fn on_put(&mut self, obj: &Object) -> Vec<Write> {
        self.ingest(obj);
        self.flush()
    }

    /// Feed many changes at once (e.g. a freshly generated cluster) and reconcile every affected
    /// Service once at the end, rather than once per object — as the real controllers' work queues
    /// coalesce a burst. NB: loading a cluster through [`Self::on_put`] one object at a time is
    /// quadratic in the size of big Services: for `k8s-limits` it takes minutes and derives ~2 GB of
    /// intermediate Endpoints/EndpointSlice JSON, against ~2.5 s and one write per final object here.
    pub fn on_puts<'a>(&mut self, objs: impl IntoIterator<Item = &'a Object>) -> Vec<Write> {
        for obj in objs {
            self.ingest(obj);
        }
        self.flush()
    }

    /// Feed a deletion the store accepted. Deleting a Service deletes its Endpoints and slices (the
    /// Endpoints controller does the former, the garbage collector the latter via ownerReferences).
    /// Deleting one of the controllers' own slices or Endpoints makes them write it again.
    pub fn on_delete(&mut self, kind: Kind, namespace: Option<&str>, name: &str) -> Vec<Write> {
        let ns = namespace.unwrap_or("");
        match kind {
            Kind::Pod => self.remove_pod(ns, name),
            Kind::Node if self.nodes.remove(name).is_some() => self.mark_node_pods(name),
            Kind::Service => {
                let mut writes = Vec::new();
                if self.remove_service(ns, name) {
                    writes.extend(self.slices.delete_service(ns, name));
                    writes.extend(self.endpoints.delete_service(ns, name));
                }
                self.dirty.remove(&(ns.to_string(), name.to_string()));
                self.rescan.remove(&(ns.to_string(), name.to_string()));
                writes.extend(self.flush());
                return writes;
            }
            Kind::EndpointSlice => {
                if let Some(svc) = self.slices.forget_slice(ns, name) {
                    self.dirty.insert((ns.to_string(), svc));
                }
            }
            Kind::Endpoints if self.endpoints.forget(ns, name) => {
                self.dirty.insert((ns.to_string(), name.to_string()));
            }
            _ => {}
        }
        self.flush()
    }

    fn ingest(&mut self, obj: &Object) {
        match obj {
            Object::Pod(pod) => {
                let ns = pod.metadata.namespace.clone().unwrap_or_default();
                let name = pod.metadata.name.clone().unwrap_or_default();
                self.put_pod(ns, name, PodView::from_pod(pod));
            }
            Object::Service(svc) => {
                let ns = svc.metadata.namespace.clone().unwrap_or_default();
                let name = svc.metadata.name.clone().unwrap_or_default();
                self.put_service(ns, name, ServiceView::from_service(svc));
            }
            Object::Node(node) => self.put_node(node),
            _ => {}
        }
    }

    fn put_node(&mut self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let zone = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_ZONE))
            .filter(|z| !z.is_empty())
            .cloned();
        // Only a node's existence and zone show in endpoints; status heartbeats change nothing.
        if self.nodes.get(&name) != Some(&zone) {
            self.nodes.insert(name.clone(), zone);
            self.mark_node_pods(&name);
        }
    }

    fn mark_node_pods(&mut self, node: &str) {
        let Some(pods) = self.pods_by_node.get(node) else {
            return;
        };
        let mut dirty = Vec::new();
        for (ns, pod_name) in pods {
            if let Some(pod) = self.pods.get(ns).and_then(|m| m.get(pod_name)) {
                for svc in self.services_selecting(ns, &pod.labels) {
                    dirty.push((ns.clone(), svc));
                }
            }
        }
        self.dirty.extend(dirty);
    }

    /// Services in `ns` whose selector matches `labels`.
    fn services_selecting(&self, ns: &str, labels: &BTreeMap<String, String>) -> Vec<String> {
        let (Some(index), Some(services)) = (self.selector_index.get(ns), self.services.get(ns))
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in labels {
            let Some(names) = index.get(k).and_then(|by_value| by_value.get(v)) else {
                continue;
            };
            for name in names {
                let selected = services
                    .get(name)
                    .and_then(|e| e.view.as_ref())
                    .is_some_and(|s| s.selects(labels));
                if selected {
                    out.push(name.clone());
                }
            }
        }
        out
    }

    fn put_pod(&mut self, ns: String, name: String, view: PodView) {
        let old = self.pods.get(&ns).and_then(|m| m.get(&name));
        if old == Some(&view) {
            return;
        }
        let old_services = old
            .map(|p| self.services_selecting(&ns, &p.labels))
            .unwrap_or_default();
        let new_services = self.services_selecting(&ns, &view.labels);
        if let Some(old) = old
            && old.node_name != view.node_name
            && let Some(set) = self.pods_by_node.get_mut(&old.node_name)
        {
            set.remove(&(ns.clone(), name.clone()));
        }
        if !view.node_name.is_empty() {
            self.pods_by_node
                .entry(view.node_name.clone())
                .or_default()
                .insert((ns.clone(), name.clone()));
        }
        let ns_services = self.services.entry(ns.clone()).or_default();
        for svc in &old_services {
            if let Some(e) = ns_services.get_mut(svc) {
                e.members.remove(&name);
            }
            self.dirty.insert((ns.clone(), svc.clone()));
        }
        for svc in &new_services {
            if let Some(e) = ns_services.get_mut(svc) {
                e.members.insert(name.clone());
            }
            self.dirty.insert((ns.clone(), svc.clone()));
        }
        self.pods.entry(ns).or_default().insert(name, view);
    }

    fn remove_pod(&mut self, ns: &str, name: &str) {
        let Some(old) = self.pods.get_mut(ns).and_then(|m| m.remove(name)) else {
            return;
        };
        if let Some(set) = self.pods_by_node.get_mut(&old.node_name) {
            set.remove(&(ns.to_string(), name.to_string()));
        }
        let services = self.services_selecting(ns, &old.labels);
        if let Some(ns_services) = self.services.get_mut(ns) {
            for svc in services {
                if let Some(e) = ns_services.get_mut(&svc) {
                    e.members.remove(name);
                }
                self.dirty.insert((ns.to_string(), svc));
            }
        }
    }

    fn index_service(&mut self, ns: &str, name: &str, view: &ServiceView, insert: bool) {
        let Some((k, v)) = view.selector.iter().next() else {
            return;
        };
        let by_value = self
            .selector_index
            .entry(ns.to_string())
            .or_default()
            .entry(k.clone())
            .or_default();
        if insert {
            by_value
                .entry(v.clone())
                .or_default()
                .insert(name.to_string());
        } else if let Some(set) = by_value.get_mut(v) {
            set.remove(name);
            if set.is_empty() {
                by_value.remove(v);
            }
        }
    }

    fn put_service(&mut self, ns: String, name: String, view: ServiceView) {
        let old = self
            .services
            .get(&ns)
            .and_then(|m| m.get(&name))
            .and_then(|e| e.view.clone());
        if old.as_ref() == Some(&view) {
            return;
        }
        let selector_changed = old.as_ref().map(|o| &o.selector) != Some(&view.selector);
        if selector_changed {
            if let Some(old) = &old {
                self.index_service(&ns, &name, old, false);
            }
            self.index_service(&ns, &name, &view, true);
        }
        let entry = self
            .services
            .entry(ns.clone())
            .or_default()
            .entry(name.clone())
            .or_default();
        entry.view = Some(view);
        if selector_changed {
            // Matched pods are recomputed at the next flush, one pass over the namespace for all
            // Services whose selector changed (a bulk load would otherwise scan it per Service).
            entry.members.clear();
            self.rescan.insert((ns.clone(), name.clone()));
        }
        self.dirty.insert((ns, name));
    }

    /// Returns whether the Service was known.
    fn remove_service(&mut self, ns: &str, name: &str) -> bool {
        let Some(entry) = self.services.get_mut(ns).and_then(|m| m.remove(name)) else {
            return false;
        };
        if let Some(view) = &entry.view {
            self.index_service(ns, name, view, false);
        }
        true
    }

    /// Recompute the matched pods of every Service queued for a rescan.
    fn rescan_members(&mut self) {
        let rescan = std::mem::take(&mut self.rescan);
        let mut by_ns: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (ns, name) in &rescan {
            by_ns.entry(ns).or_default().push(name);
        }
        for (ns, names) in by_ns {
            let mut found: Vec<(String, String)> = Vec::new();
            if let Some(pods) = self.pods.get(ns) {
                for (pod, view) in pods {
                    for svc in self.services_selecting(ns, &view.labels) {
                        if rescan.contains(&(ns.to_string(), svc.clone())) {
                            found.push((svc, pod.clone()));
                        }
                    }
                }
            }
            let Some(services) = self.services.get_mut(ns) else {
                continue;
            };
            for name in names {
                if let Some(e) = services.get_mut(name) {
                    e.members.clear();
                }
            }
            for (svc, pod) in found {
                if let Some(e) = services.get_mut(&svc) {
                    e.members.insert(pod);
                }
            }
        }
    }

    /// Reconcile every dirty Service.
    fn flush(&mut self) -> Vec<Write> {
        if !self.rescan.is_empty() {
            self.rescan_members();
        }
        let dirty = std::mem::take(&mut self.dirty);
        let mut writes = Vec::new();
        for (ns, name) in dirty {
            let Some(entry) = self.services.get(&ns).and_then(|m| m.get(&name)) else {
                continue;
            };
            let Some(svc) = entry.view.as_ref() else {
                continue;
            };
            // Upstream: "services without a selector receive no endpoint slices from this
            // controller" — the same holds for Endpoints. Whatever exists is left alone.
            if svc.selector.is_empty() {
                continue;
            }
            let ns_pods = self.pods.get(&ns);
            let pods = entry
                .members
                .iter()
                .filter_map(|m| ns_pods.and_then(|p| p.get(m)).map(|p| (m.as_str(), p)))
                .collect();
            let inputs = ServiceInputs {
                namespace: &ns,
                name: &name,
                svc,
                pods,
                nodes: &self.nodes,
            };
            writes.extend(self.slices.reconcile(&inputs));
            writes.extend(self.endpoints.reconcile(&inputs));
        }
        writes
    }
}

#[cfg(test)]
mod tests;
