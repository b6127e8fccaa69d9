//! The cluster generator: nodes, namespaces, Deployment- and DaemonSet-like workloads with their
//! pods and Services, Istio-injected pods, prometheus-operator objects, the kube-proxy ConfigMap and
//! Ingresses — deterministic by seed. EndpointSlices and Endpoints of selector Services are left to
//! the controllers (crate::controllers), as in a real cluster.

mod extras;
pub mod istio;
mod pods;

pub use istio::peer_authentications;

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::ipalloc::{IpAllocError, IpAllocator};
use crate::kind::Object;

pub use pods::{PodState, build_pod};

/// The Istio release the generated mesh runs (istiod image tag and sidecar image tag).
pub const ISTIO_VERSION: &str = "1.22.0";

/// How big and how shaped a generated cluster is.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSpec {
    pub nodes: usize,
    /// Application namespaces; kube-system, monitoring, istio-system and default come on top.
    pub namespaces: usize,
    /// Deployment-like application workloads, each with its own Service.
    pub services: usize,
    /// Total pods, DaemonSet and system pods included; application replicas follow a skewed
    /// (log-normal) distribution summing to what is left.
    pub pods: usize,
    pub zones: usize,
    pub pod_cidr: IpNet,
    pub node_cidr: IpNet,
    /// Where Service cluster IPs come from. Overridden by an IPv6 default when the pod CIDR is IPv6.
    pub service_cidr: IpNet,
    /// Share of application namespaces labelled `istio-injection=enabled` (their pods get sidecars).
    pub istio_fraction: f64,
    /// Share of application workloads whose pods carry `prometheus.io/*` annotations.
    pub annotated_fraction: f64,
    /// Share of application Services that are headless (`clusterIP: None`).
    pub headless_fraction: f64,
    /// Share of application pods that run but are not Ready.
    pub not_ready_fraction: f64,
    /// Share of application pods still Pending (scheduled, no IP yet).
    pub pending_fraction: f64,
    /// Share of application workloads a ServiceMonitor or PodMonitor selects.
    pub monitored_fraction: f64,
    /// Share of application workloads exposed through an Ingress.
    pub ingress_fraction: f64,
}

/// Why a [`ClusterSpec`] cannot be generated as asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "spec.pods {pods} is below the {needed} needed: 2 DaemonSet pods per node, {system} system pods and one per service"
    )]
    TooFewPods {
        pods: usize,
        needed: usize,
        system: usize,
    },
    #[error("spec.{field} must be at least 1")]
    Zero { field: &'static str },
    #[error("spec.{field} {value} is not a fraction between 0 and 1")]
    Fraction { field: &'static str, value: f64 },
    #[error("spec.{field} {cidr} holds fewer than the {needed} addresses needed")]
    CidrTooSmall {
        field: &'static str,
        cidr: IpNet,
        needed: usize,
    },
}

/// Pods of system Deployments: coredns (2) and istiod (2).
const SYSTEM_DEPLOYMENT_PODS: usize = 4;

impl ClusterSpec {
    /// Demo-sized: 10 nodes, 4 application namespaces, 20 Services, 200 pods.
    pub fn small() -> Self {
        ClusterSpec {
            nodes: 10,
            namespaces: 4,
            services: 20,
            pods: 200,
            zones: 3,
            pod_cidr: "10.0.0.0/8".parse().expect("valid literal cidr"),
            node_cidr: "192.168.0.0/16".parse().expect("valid literal cidr"),
            service_cidr: "172.20.0.0/16".parse().expect("valid literal cidr"),
            istio_fraction: 0.5,
            annotated_fraction: 0.4,
            headless_fraction: 0.05,
            not_ready_fraction: 0.02,
            pending_fraction: 0.01,
            monitored_fraction: 0.5,
            ingress_fraction: 0.2,
        }
    }

    /// The Kubernetes scalability thresholds: 5,000 nodes, 150,000 pods, 10,000 Services.
    pub fn k8s_limits() -> Self {
        ClusterSpec {
            nodes: 5_000,
            namespaces: 100,
            services: 10_000,
            pods: 150_000,
            istio_fraction: 0.3,
            ..Self::small()
        }
    }

    fn system_pods(&self) -> usize {
        2 * self.nodes + SYSTEM_DEPLOYMENT_PODS
    }

    /// This spec with `nodes` and `services` replaced; unless `pods` is given, the pod count follows
    /// them: the system pods the nodes need plus this spec's application pods per Service.
    pub fn resized(
        mut self,
        nodes: Option<usize>,
        services: Option<usize>,
        pods: Option<usize>,
    ) -> Self {
        let per_service =
            self.pods.saturating_sub(self.system_pods()) as f64 / self.services.max(1) as f64;
        self.nodes = nodes.unwrap_or(self.nodes);
        self.services = services.unwrap_or(self.services);
        self.pods = match pods {
            Some(p) => p,
            None if nodes.is_some() || services.is_some() => {
                let app = (per_service * self.services as f64).round() as usize;
                self.system_pods() + app.max(self.services)
            }
            None => self.pods,
        };
        self
    }

    /// Checks the spec can be generated exactly as asked.
    pub fn validate(&self) -> Result<(), SpecError> {
        for (field, v) in [
            ("nodes", self.nodes),
            ("namespaces", self.namespaces),
            ("services", self.services),
            ("zones", self.zones),
        ] {
            if v == 0 {
                return Err(SpecError::Zero { field });
            }
        }
        for (field, value) in [
            ("istio_fraction", self.istio_fraction),
            ("annotated_fraction", self.annotated_fraction),
            ("headless_fraction", self.headless_fraction),
            ("not_ready_fraction", self.not_ready_fraction),
            ("pending_fraction", self.pending_fraction),
            ("monitored_fraction", self.monitored_fraction),
            ("ingress_fraction", self.ingress_fraction),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(SpecError::Fraction { field, value });
            }
        }
        let needed = self.system_pods() + self.services;
        if self.pods < needed {
            return Err(SpecError::TooFewPods {
                pods: self.pods,
                needed,
                system: SYSTEM_DEPLOYMENT_PODS,
            });
        }
        let mut pod_needed = self.pods + 1;
        if overlaps(self.pod_cidr, self.node_cidr) {
            pod_needed += self.nodes;
        }
        for (field, cidr, needed) in [
            ("pod_cidr", self.pod_cidr, pod_needed),
            ("node_cidr", self.node_cidr, self.nodes),
        ] {
            if capacity(cidr) < needed as u128 {
                return Err(SpecError::CidrTooSmall {
                    field,
                    cidr,
                    needed,
                });
            }
        }
        Ok(())
    }
}

/// Assignable addresses in a CIDR (an upper bound; the allocator skips a few more).
fn capacity(net: IpNet) -> u128 {
    let bits = u32::from(net.max_prefix_len() - net.prefix_len());
    if bits >= 127 {
        u128::MAX
    } else {
        (1u128 << bits).saturating_sub(2)
    }
}

fn overlaps(a: IpNet, b: IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// A node as workloads see it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRef {
    pub name: String,
    pub ip: IpAddr,
    pub zone: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    Deployment,
    DaemonSet,
}

/// A group of identical pods, as churn needs it to replace, flap and scale them.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub namespace: String,
    pub name: String,
    pub kind: WorkloadKind,
    /// Desired pods (for a DaemonSet, one per node).
    pub replicas: usize,
    /// The pod template: labels, annotations and spec, without name, node, IP or status.
    pub template: Pod,
    /// `pod-template-hash` (Deployment) or `controller-revision-hash` (DaemonSet).
    pub template_hash: String,
    /// The pods' controller: the ReplicaSet or the DaemonSet.
    pub owner: OwnerReference,
    /// Names of the pods generated for it.
    pub pod_names: Vec<String>,
}

/// A generated cluster: the objects to load, the workloads churn acts on, and the pod IP
/// allocator in the state the generator left it (churn continues from it, so IPs stay unique).
#[derive(Debug, Clone)]
pub struct Cluster {
    pub objects: Vec<Object>,
    pub workloads: Vec<Workload>,
    pub nodes: Vec<NodeRef>,
    pub pod_ips: IpAllocator,
    /// The spec with defaults applied (e.g. an IPv6 service CIDR for an IPv6 pod CIDR).
    pub spec: ClusterSpec,
}

/// Generate a cluster. Deterministic: the same spec and seed give identical objects. A spec that
/// fails [`ClusterSpec::validate`] is generated as best it can be: zero counts become one,
/// fractions are clamped to 0..=1, every Service still gets one pod (so there are more pods than
/// asked), and pods past the end of the pod CIDR stay Pending without an IP, as they would when a
/// node's IPAM runs dry.
pub fn generate(spec: &ClusterSpec, seed: u64) -> Cluster {
    Generator::new(spec, seed).run()
}

/// Alphabet of apimachinery's generateName suffixes and of pod-template hashes.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub(crate) fn random_suffix(rng: &mut ChaCha8Rng, len: usize) -> String {
    (0..len)
        .map(|_| char::from(NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())]))
        .collect()
}

/// A random (version 4) UID.
pub(crate) fn random_uid(rng: &mut ChaCha8Rng) -> String {
    let mut b: [u8; 16] = rng.random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A standard normal sample (Box–Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Split `total` into `n` parts of at least 1 following a log-normal spread (sigma 1.3: most
/// workloads run a handful of replicas, a few run hundreds), summing exactly to `total`.
fn skewed_split(rng: &mut ChaCha8Rng, n: usize, total: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let weights: Vec<f64> = (0..n).map(|_| (1.3 * normal(rng)).exp()).collect();
    let sum: f64 = weights.iter().sum();
    let extra = total.saturating_sub(n) as f64;
    let shares: Vec<f64> = weights.iter().map(|w| w / sum * extra).collect();
    let mut parts: Vec<usize> = shares.iter().map(|s| 1 + s.floor() as usize).collect();
    let assigned: usize = parts.iter().sum();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        let fa = shares[a] - shares[a].floor();
        let fb = shares[b] - shares[b].floor();
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for &i in order.iter().take(total.max(n).saturating_sub(assigned)) {
        parts[i] += 1;
    }
    parts
}

const ZONE_LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
pub(crate) const REGION: &str = "eu-west-1";

const NAMESPACE_WORDS: &[&str] = &[
    "payments",
    "checkout",
    "search",
    "identity",
    "catalog",
    "media",
    "ledger",
    "growth",
    "platform",
    "data",
    "ml",
    "ads",
    "messaging",
    "mobile-api",
    "partners",
    "risk",
    "support",
    "logistics",
    "pricing",
    "reviews",
];

const WORKLOAD_WORDS: &[&str] = &[
    "api",
    "web",
    "frontend",
    "gateway",
    "auth",
    "users",
    "orders",
    "cart",
    "inventory",
    "billing",
    "invoices",
    "shipping",
    "notifications",
    "recommender",
    "reviews",
    "ratings",
    "search-indexer",
    "image-resizer",
    "session",
    "profile",
    "feed",
    "events",
    "audit-log",
    "scheduler",
    "reports",
    "exporter",
    "webhooks",
    "uploader",
    "pricing-engine",
    "fraud-check",
    "ledger-writer",
    "email-sender",
    "sms-sender",
    "geo",
    "tags",
    "graphql",
    "cache-warmer",
    "thumbnailer",
    "subscriptions",
    "coupons",
];

struct Generator {
    spec: ClusterSpec,
    rng: ChaCha8Rng,
    pod_ips: IpAllocator,
    /// Separate allocators for node and service CIDRs that do not overlap the pod CIDR.
    node_ips: Option<IpAllocator>,
    service_ips: Option<IpAllocator>,
    objects: Vec<Object>,
    workloads: Vec<Workload>,
    nodes: Vec<NodeRef>,
}

/// Where an address comes from when CIDRs overlap: the pod allocator hands out all of them.
fn allocate(own: &mut Option<IpAllocator>, pods: &mut IpAllocator) -> Result<IpAddr, IpAllocError> {
    match own {
        Some(a) => a.allocate(),
        None => pods.allocate(),
    }
}

impl Generator {
    fn new(spec: &ClusterSpec, seed: u64) -> Self {
        let mut spec = spec.clone();
        // What validate() refuses is bent into shape rather than panicking mid-generation.
        spec.nodes = spec.nodes.max(1);
        spec.namespaces = spec.namespaces.max(1);
        spec.zones = spec.zones.max(1);
        for f in [
            &mut spec.istio_fraction,
            &mut spec.annotated_fraction,
            &mut spec.headless_fraction,
            &mut spec.not_ready_fraction,
            &mut spec.pending_fraction,
            &mut spec.monitored_fraction,
            &mut spec.ingress_fraction,
        ] {
            *f = if f.is_nan() { 0.0 } else { f.clamp(0.0, 1.0) };
        }
        if matches!(spec.pod_cidr, IpNet::V6(_)) && matches!(spec.service_cidr, IpNet::V4(_)) {
            spec.service_cidr = "fd00:10:96::/108".parse().expect("valid literal cidr");
        }
        // A pod CIDR without host addresses leaves every pod Pending.
        let pod_ips =
            IpAllocator::new(spec.pod_cidr).unwrap_or_else(|_| IpAllocator::empty(spec.pod_cidr));
        let own = |net: IpNet| {
            if overlaps(net, spec.pod_cidr) {
                None
            } else {
                IpAllocator::new(net).ok()
            }
        };
        let node_ips = own(spec.node_cidr);
        let service_ips = own(spec.service_cidr);
        Generator {
            rng: ChaCha8Rng::seed_from_u64(seed),
            pod_ips,
            node_ips,
            service_ips,
            objects: Vec::new(),
            workloads: Vec::new(),
            nodes: Vec::new(),
            spec,
        }
    }

    fn run(mut self) -> Cluster {
        let app_namespaces = self.namespaces();
        self.nodes();
        let system = self.system_workloads();
        let apps = self.app_workloads(&app_namespaces);
        let mut all = system;
        all.extend(apps);
        for plan in &all {
            self.emit_workload(plan);
        }
        self.emit_extras(&all);
        self.assign_uids();
        Cluster {
            objects: self.objects,
            workloads: self.workloads,
            nodes: self.nodes,
            pod_ips: self.pod_ips,
            spec: self.spec,
        }
    }

    /// Namespaces; returns the application ones as (name, istio-injected).
    fn namespaces(&mut self) -> Vec<(String, bool)> {
        let mut names: Vec<(String, bool)> = Vec::new();
        let injected = (self.spec.namespaces as f64 * self.spec.istio_fraction).round() as usize;
        for i in 0..self.spec.namespaces {
            let word = NAMESPACE_WORDS[i % NAMESPACE_WORDS.len()];
            let name = if i < NAMESPACE_WORDS.len() {
                word.to_string()
            } else {
                format!("{word}-{}", i / NAMESPACE_WORDS.len())
            };
            names.push((name, i < injected));
        }
        for ns in ["default", "kube-system", "monitoring", "istio-system"] {
            self.objects.push(extras::namespace(ns, false));
        }
        for (ns, istio) in &names {
            self.objects.push(extras::namespace(ns, *istio));
        }
        names
    }

    fn nodes(&mut self) {
        let zones = self.spec.zones.max(1);
        for i in 0..self.spec.nodes {
            let zone_letter = char::from(ZONE_LETTERS[(i % zones) % ZONE_LETTERS.len()]);
            let zone = if zones > ZONE_LETTERS.len() {
                format!("{REGION}{zone_letter}{}", (i % zones) / ZONE_LETTERS.len())
            } else {
                format!("{REGION}{zone_letter}")
            };
            let name = format!("worker-{zone_letter}-{i:05}");
            // An exhausted node CIDR (a spec validate() refuses) borrows from the pod CIDR, and past
            // that repeats the network address rather than failing.
            let ip = allocate(&mut self.node_ips, &mut self.pod_ips)
                .or_else(|_| self.pod_ips.allocate())
                .unwrap_or(self.spec.node_cidr.network());
            let boot: String = random_uid(&mut self.rng);
            self.objects
                .push(Object::Node(extras::node(&name, &zone, ip, &boot)));
            self.nodes.push(NodeRef { name, ip, zone });
        }
    }
}

/// A workload to emit: what kind of pods, how many, and its Service.
pub(crate) struct Plan {
    pub namespace: String,
    pub name: String,
    pub kind: WorkloadKind,
    pub replicas: usize,
    pub template: Pod,
    pub service: Option<k8s_openapi::api::core::v1::Service>,
    /// Index into [`pods::VARIANTS`] for application workloads.
    pub variant: Option<usize>,
}

impl Generator {
    /// kube-proxy and node-exporter DaemonSets, coredns and istiod.
    fn system_workloads(&mut self) -> Vec<Plan> {
        let mut plans = vec![
            Plan {
                namespace: "kube-system".into(),
                name: "kube-proxy".into(),
                kind: WorkloadKind::DaemonSet,
                replicas: self.spec.nodes,
                template: pods::kube_proxy_template(),
                service: None,
                variant: None,
            },
            Plan {
                namespace: "monitoring".into(),
                name: "node-exporter".into(),
                kind: WorkloadKind::DaemonSet,
                replicas: self.spec.nodes,
                template: pods::node_exporter_template(),
                service: Some(extras::node_exporter_service(self.family())),
                variant: None,
            },
        ];
        let dns_ip = allocate(&mut self.service_ips, &mut self.pod_ips).ok();
        plans.push(Plan {
            namespace: "kube-system".into(),
            name: "coredns".into(),
            kind: WorkloadKind::Deployment,
            replicas: 2,
            template: pods::coredns_template(),
            service: Some(extras::kube_dns_service(dns_ip, self.family())),
            variant: None,
        });
        let istiod_ip = allocate(&mut self.service_ips, &mut self.pod_ips).ok();
        plans.push(Plan {
            namespace: "istio-system".into(),
            name: "istiod".into(),
            kind: WorkloadKind::Deployment,
            replicas: 2,
            template: pods::istiod_template(),
            service: Some(extras::istiod_service(istiod_ip, self.family())),
            variant: None,
        });
        plans
    }

    fn family(&self) -> &'static str {
        match self.spec.service_cidr {
            IpNet::V4(_) => "IPv4",
            IpNet::V6(_) => "IPv6",
        }
    }

    /// Application Deployments with their Services, spread over the application namespaces.
    fn app_workloads(&mut self, namespaces: &[(String, bool)]) -> Vec<Plan> {
        let n = self.spec.services;
        let budget = self.spec.pods.saturating_sub(self.spec.system_pods());
        let replicas = skewed_split(&mut self.rng, n, budget);
        let mut per_ns_count = vec![0usize; namespaces.len()];
        let mut plans = Vec::with_capacity(n);
        for r in replicas {
            let ns_idx = self.rng.random_range(0..namespaces.len());
            let (ns, istio) = &namespaces[ns_idx];
            let k = per_ns_count[ns_idx];
            per_ns_count[ns_idx] += 1;
            let word = WORKLOAD_WORDS[k % WORKLOAD_WORDS.len()];
            let name = if k < WORKLOAD_WORDS.len() {
                word.to_string()
            } else {
                format!("{word}-{}", k / WORKLOAD_WORDS.len())
            };
            let variant = self.rng.random_range(0..pods::VARIANTS.len());
            let annotated = self.rng.random_bool(self.spec.annotated_fraction);
            let mut template = pods::app_template(&mut self.rng, ns, &name, variant, annotated);
            if *istio {
                pods::inject_istio(&mut template, &name);
            }
            let headless = self.rng.random_bool(self.spec.headless_fraction);
            let ip = if headless {
                None
            } else {
                allocate(&mut self.service_ips, &mut self.pod_ips).ok()
            };
            let service = extras::app_service(ns, &name, variant, ip, headless, self.family());
            plans.push(Plan {
                namespace: ns.clone(),
                name,
                kind: WorkloadKind::Deployment,
                replicas: r,
                template,
                service: Some(service),
                variant: Some(variant),
            });
        }
        plans
    }

    fn emit_workload(&mut self, plan: &Plan) {
        let hash = random_suffix(&mut self.rng, 10);
        let owner_uid = random_uid(&mut self.rng);
        let owner = match plan.kind {
            WorkloadKind::Deployment => OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: format!("{}-{hash}", plan.name),
                uid: owner_uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            WorkloadKind::DaemonSet => OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: plan.name.clone(),
                uid: owner_uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
        };
        let mut template = plan.template.clone();
        let labels = template.metadata.labels.get_or_insert_default();
        match plan.kind {
            WorkloadKind::Deployment => {
                labels.insert("pod-template-hash".into(), hash.clone());
            }
            WorkloadKind::DaemonSet => {
                labels.insert("controller-revision-hash".into(), hash.clone());
                labels.insert("pod-template-generation".into(), "1".into());
            }
        }
        template.metadata.namespace = Some(plan.namespace.clone());
        let mut workload = Workload {
            namespace: plan.namespace.clone(),
            name: plan.name.clone(),
            kind: plan.kind,
            replicas: plan.replicas,
            template,
            template_hash: hash,
            owner,
            pod_names: Vec::with_capacity(plan.replicas),
        };
        if let Some(svc) = &plan.service {
            self.objects.push(Object::Service(svc.clone()));
        }
        let mut names: HashSet<String> = HashSet::with_capacity(plan.replicas);
        let is_app = plan.variant.is_some();
        for i in 0..plan.replicas {
            let node = match plan.kind {
                WorkloadKind::DaemonSet => &self.nodes[i % self.nodes.len()],
                WorkloadKind::Deployment => &self.nodes[self.rng.random_range(0..self.nodes.len())],
            };
            let name = loop {
                let candidate = pods::pod_name(&workload, &mut self.rng);
                if names.insert(candidate.clone()) {
                    break candidate;
                }
            };
            let mut state = PodState::Ready;
            if is_app {
                let roll: f64 = self.rng.random();
                if roll < self.spec.pending_fraction {
                    state = PodState::Pending;
                } else if roll < self.spec.pending_fraction + self.spec.not_ready_fraction {
                    state = PodState::NotReady;
                }
            }
            let ip = if state == PodState::Pending {
                None
            } else {
                self.pod_ips.allocate().ok()
            };
            if ip.is_none() {
                state = PodState::Pending;
            }
            let uid = random_uid(&mut self.rng);
            let node = node.clone();
            let pod = build_pod(&workload, &name, &uid, &node, ip, state);
            self.objects.push(Object::Pod(pod));
            workload.pod_names.push(name);
        }
        self.workloads.push(workload);
    }

    fn emit_extras(&mut self, plans: &[Plan]) {
        let spec = self.spec.clone();
        let mut out = Vec::new();
        extras::monitoring_objects(&mut self.rng, &spec, plans, &mut out);
        extras::kube_proxy_config_map(&mut self.rng, &spec, &mut out);
        extras::ingresses(&mut self.rng, &spec, plans, &mut out);
        let ext_ip = self.pod_ips.allocate().ok();
        let svc_ip = allocate(&mut self.service_ips, &mut self.pod_ips).ok();
        let family = self.family();
        extras::external_service(&mut self.rng, ext_ip, svc_ip, family, &mut out);
        // Last, so that every other object's UID stays what the seed gave before ServiceCIDRs.
        out.push(extras::service_cidr(spec.service_cidr));
        self.objects.extend(out);
    }

    /// Every object gets a UID, as the apiserver gives on create; the controllers copy Service and
    /// Pod UIDs into ownerReferences and targetRefs.
    fn assign_uids(&mut self) {
        for obj in &mut self.objects {
            let meta = match obj {
                Object::Namespace(o) => &mut o.metadata,
                Object::Node(o) => &mut o.metadata,
                Object::ConfigMap(o) => &mut o.metadata,
                Object::Service(o) => &mut o.metadata,
                Object::Pod(o) => &mut o.metadata,
                Object::Endpoints(o) => &mut o.metadata,
                Object::EndpointSlice(o) => &mut o.metadata,
                Object::Ingress(o) => &mut o.metadata,
                Object::ServiceCidr(o) => &mut o.metadata,
                Object::Custom(_, v) => {
                    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut())
                        && !m.contains_key("uid")
                    {
                        m.insert("uid".into(), random_uid(&mut self.rng).into());
                    }
                    continue;
                }
            };
            if meta.uid.is_none() {
                meta.uid = Some(random_uid(&mut self.rng));
            }
        }
    }
}

#[cfg(test)]
mod tests;
