//! Cluster churn, deterministic by seed: rolling-restart steps (a pod replaced by one with a new name
//! and IP; the old one first terminating, deleted in a later event), readiness flaps, and Deployment
//! scale-ups and -downs — as store writes. Pure: time is a logical clock that advances one second per
//! event, so the same seed gives the same writes.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::generate::{
    Cluster, NodeRef, PodState, Workload, WorkloadKind, build_pod, random_suffix, random_uid,
};
use crate::ipalloc::IpAllocator;
use crate::kind::{Kind, Object, Write};

/// Where the logical clock starts (2026-01-01T00:00:00Z): deletion timestamps count from here.
const EPOCH_SECONDS: i64 = 1_767_225_600;

/// A live pod as churn tracks it: enough to rebuild its object.
#[derive(Debug, Clone)]
struct LivePod {
    uid: String,
    node: usize,
    ip: Option<IpAddr>,
    state: PodState,
    /// Set once the pod is terminating: its deletionTimestamp, in logical seconds.
    terminating_since: Option<i64>,
}

#[derive(Debug, Clone)]
struct WorkloadState {
    w: Workload,
    pods: BTreeMap<String, LivePod>,
    /// Bounds for scaling: live (not terminating) pods stay within them.
    min: usize,
    max: usize,
}

impl WorkloadState {
    fn live(&self) -> impl Iterator<Item = (&String, &LivePod)> {
        self.pods
            .iter()
            .filter(|(_, p)| p.terminating_since.is_none())
    }

    fn live_count(&self) -> usize {
        self.live().count()
    }
}

/// What one churn event does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    FinishTermination,
    Restart,
    Flap,
    Scale,
}

/// The churn generator: owns the cluster's workloads and the pod IP allocator from then on.
#[derive(Debug, Clone)]
pub struct Churn {
    rng: ChaCha8Rng,
    workloads: Vec<WorkloadState>,
    nodes: Vec<NodeRef>,
    ips: IpAllocator,
    /// Terminating pods, oldest first, as (workload index, pod name).
    terminating: VecDeque<(usize, String)>,
    /// Logical seconds since [`EPOCH_SECONDS`].
    clock: i64,
}

impl Churn {
    /// Take over a generated cluster: its workloads, the pods the generator made for them, its nodes
    /// and its pod IP allocator (so new pods never reuse a live pod's address).
    pub fn new(seed: u64, cluster: &Cluster) -> Self {
        let node_index: HashMap<String, usize> = cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let mut owner: HashMap<(&str, &str), usize> = HashMap::new();
        for (i, w) in cluster.workloads.iter().enumerate() {
            for name in &w.pod_names {
                owner.insert((w.namespace.as_str(), name.as_str()), i);
            }
        }
        let mut workloads: Vec<WorkloadState> = cluster
            .workloads
            .iter()
            .map(|w| WorkloadState {
                w: Workload {
                    pod_names: Vec::new(),
                    ..w.clone()
                },
                pods: BTreeMap::new(),
                min: (w.replicas / 2).max(1),
                max: w.replicas * 2 + 1,
            })
            .collect();
        for obj in &cluster.objects {
            let Object::Pod(pod) = obj else {
                continue;
            };
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let Some(&wi) = owner.get(&(ns, name)) else {
                continue;
            };
            let status = pod.status.as_ref();
            let ip = status
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok());
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let state = match (ip, ready) {
                (None, _) => PodState::Pending,
                (Some(_), true) => PodState::Ready,
                (Some(_), false) => PodState::NotReady,
            };
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .and_then(|n| node_index.get(n))
                .copied()
                .unwrap_or(0);
            workloads[wi].pods.insert(
                name.to_string(),
                LivePod {
                    uid: pod.metadata.uid.clone().unwrap_or_default(),
                    node,
                    ip,
                    state,
                    terminating_since: None,
                },
            );
        }
        Churn {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x6368_7572_6e00_0000),
            workloads,
            nodes: cluster.nodes.clone(),
            ips: cluster.pod_ips.clone(),
            terminating: VecDeque::new(),
            clock: 0,
        }
    }

    /// Pods churn currently tracks (terminating ones included).
    pub fn pod_count(&self) -> usize {
        self.workloads.iter().map(|w| w.pods.len()).sum()
    }

    /// The next `n` churn events as store writes (an event is one or two writes).
    pub fn next_events(&mut self, n: usize) -> Vec<Write> {
        let mut writes = Vec::with_capacity(n * 2);
        for _ in 0..n {
            self.clock += 1;
            self.event(&mut writes);
        }
        writes
    }

    fn pick_action(&mut self) -> Action {
        // Terminating pods linger a few events (their grace period), then go.
        let overdue = self
            .terminating
            .front()
            .and_then(|(wi, name)| self.workloads[*wi].pods.get(name))
            .and_then(|p| p.terminating_since)
            .is_some_and(|since| self.clock - since >= 5);
        if overdue || self.terminating.len() > 64 {
            return Action::FinishTermination;
        }
        let roll: f64 = self.rng.random();
        match roll {
            r if r < 0.45 => Action::Restart,
            r if r < 0.80 => Action::Flap,
            _ => Action::Scale,
        }
    }

    fn event(&mut self, writes: &mut Vec<Write>) {
        if self.workloads.is_empty() || self.nodes.is_empty() {
            return;
        }
        let done = match self.pick_action() {
            Action::FinishTermination => self.finish_termination(writes),
            Action::Restart => self.restart(writes),
            Action::Flap => self.flap(writes),
            Action::Scale => self.scale(writes),
        };
        if !done {
            // Nothing to act on (e.g. every pod terminating): fall back to finishing a termination.
            self.finish_termination(writes);
        }
    }

    fn random_workload(&mut self, deployments_only: bool) -> Option<usize> {
        for _ in 0..16 {
            let wi = self.rng.random_range(0..self.workloads.len());
            let ws = &self.workloads[wi];
            if (!deployments_only || ws.w.kind == WorkloadKind::Deployment) && ws.live_count() > 0 {
                return Some(wi);
            }
        }
        None
    }

    fn random_live_pod(&mut self, wi: usize) -> Option<String> {
        let live: Vec<&String> = self.workloads[wi].live().map(|(n, _)| n).collect();
        if live.is_empty() {
            return None;
        }
        let i = self.rng.random_range(0..live.len());
        Some(live[i].clone())
    }

    fn put(&self, wi: usize, name: &str, writes: &mut Vec<Write>) {
        let ws = &self.workloads[wi];
        let p = &ws.pods[name];
        let mut pod = build_pod(&ws.w, name, &p.uid, &self.nodes[p.node], p.ip, p.state);
        if let Some(since) = p.terminating_since {
            // Upstream sets deletionTimestamp to now + the grace period.
            let grace =
                ws.w.template
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30);
            let ts = Timestamp::from_second(EPOCH_SECONDS + since + grace)
                .expect("the logical clock stays within jiff's range");
            pod.metadata.deletion_timestamp = Some(Time(ts));
            pod.metadata.deletion_grace_period_seconds = Some(grace);
        }
        writes.push(Write::Put(Object::Pod(pod)));
    }

    fn start_termination(&mut self, wi: usize, name: &str, writes: &mut Vec<Write>) {
        let clock = self.clock;
        let p = self.workloads[wi]
            .pods
            .get_mut(name)
            .expect("callers pass a tracked pod");
        p.terminating_since = Some(clock);
        // A terminating pod's containers are being stopped: it fails readiness.
        if p.state == PodState::Ready {
            p.state = PodState::NotReady;
        }
        self.terminating.push_back((wi, name.to_string()));
        self.put(wi, name, writes);
    }

    fn finish_termination(&mut self, writes: &mut Vec<Write>) -> bool {
        let Some((wi, name)) = self.terminating.pop_front() else {
            return false;
        };
        if let Some(p) = self.workloads[wi].pods.remove(&name) {
            if let Some(ip) = p.ip {
                self.ips.release(ip);
            }
            writes.push(Write::Delete {
                kind: Kind::Pod,
                namespace: Some(self.workloads[wi].w.namespace.clone()),
                name,
            });
        }
        true
    }

    /// A new pod for workload `wi` on `node`, Ready with a fresh IP (Pending if the CIDR ran dry).
    fn create_pod(&mut self, wi: usize, node: usize, writes: &mut Vec<Write>) {
        let name = loop {
            let w = &self.workloads[wi].w;
            let candidate = match w.kind {
                WorkloadKind::Deployment => format!(
                    "{}-{}-{}",
                    w.name,
                    w.template_hash,
                    random_suffix(&mut self.rng, 5)
                ),
                WorkloadKind::DaemonSet => {
                    format!("{}-{}", w.name, random_suffix(&mut self.rng, 5))
                }
            };
            if !self.workloads[wi].pods.contains_key(&candidate) {
                break candidate;
            }
        };
        let ip = self.ips.allocate().ok();
        let state = if ip.is_some() {
            PodState::Ready
        } else {
            PodState::Pending
        };
        let uid = random_uid(&mut self.rng);
        self.workloads[wi].pods.insert(
            name.clone(),
            LivePod {
                uid,
                node,
                ip,
                state,
                terminating_since: None,
            },
        );
        self.put(wi, &name, writes);
    }

    /// One rolling-restart step: a replacement pod comes up, then the old one starts terminating.
    /// A DaemonSet's replacement lands on the same node.
    fn restart(&mut self, writes: &mut Vec<Write>) -> bool {
        let Some(wi) = self.random_workload(false) else {
            return false;
        };
        let Some(old) = self.random_live_pod(wi) else {
            return false;
        };
        let node = match self.workloads[wi].w.kind {
            WorkloadKind::DaemonSet => self.workloads[wi].pods[&old].node,
            WorkloadKind::Deployment => self.rng.random_range(0..self.nodes.len()),
        };
        self.create_pod(wi, node, writes);
        self.start_termination(wi, &old, writes);
        true
    }

    /// A running pod's readiness probe flips.
    fn flap(&mut self, writes: &mut Vec<Write>) -> bool {
        let Some(wi) = self.random_workload(false) else {
            return false;
        };
        let Some(name) = self.random_live_pod(wi) else {
            return false;
        };
        let p = self.workloads[wi]
            .pods
            .get_mut(&name)
            .expect("picked from the map");
        p.state = match p.state {
            PodState::Ready => PodState::NotReady,
            PodState::NotReady => PodState::Ready,
            // A pending pod cannot flap; it would need an IP first.
            PodState::Pending => return false,
        };
        self.put(wi, &name, writes);
        true
    }

    /// A Deployment scales by one replica, within half to twice its generated size.
    fn scale(&mut self, writes: &mut Vec<Write>) -> bool {
        let Some(wi) = self.random_workload(true) else {
            return false;
        };
        let ws = &self.workloads[wi];
        let live = ws.live_count();
        let up = if live <= ws.min {
            true
        } else if live >= ws.max {
            false
        } else {
            self.rng.random_bool(0.5)
        };
        if up {
            let node = self.rng.random_range(0..self.nodes.len());
            self.create_pod(wi, node, writes);
            self.workloads[wi].w.replicas = live + 1;
        } else {
            let Some(name) = self.random_live_pod(wi) else {
                return false;
            };
            self.start_termination(wi, &name, writes);
            self.workloads[wi].w.replicas = live - 1;
        }
        true
    }

    /// The node a pod runs on, if churn tracks it (for tests and the library handle).
    pub fn node_of(&self, namespace: &str, pod: &str) -> Option<&str> {
        self.workloads
            .iter()
            .filter(|w| w.w.namespace == namespace)
            .find_map(|w| w.pods.get(pod))
            .map(|p| self.nodes[p.node].name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;
    use crate::generate::{ClusterSpec, generate};

    fn spec() -> ClusterSpec {
        ClusterSpec {
            nodes: 6,
            namespaces: 3,
            services: 12,
            pods: 120,
            pod_cidr: "10.50.0.0/16".parse().unwrap(),
            ..ClusterSpec::small()
        }
    }

    /// Applies writes to a map of live pods: (namespace, name) → (ip, terminating, node).
    fn apply(
        live: &mut HashMap<(String, String), (Option<String>, bool, String)>,
        writes: &[Write],
    ) {
        for w in writes {
            match w {
                Write::Put(Object::Pod(p)) => {
                    let key = (
                        p.metadata.namespace.clone().unwrap(),
                        p.metadata.name.clone().unwrap(),
                    );
                    let ip = p.status.as_ref().unwrap().pod_ip.clone();
                    let node = p.spec.as_ref().unwrap().node_name.clone().unwrap();
                    if let Some((old_ip, _, old_node)) = live.get(&key) {
                        assert_eq!(old_ip, &ip, "a pod keeps its IP for life");
                        assert_eq!(old_node, &node, "a pod keeps its node for life");
                    }
                    live.insert(key, (ip, p.metadata.deletion_timestamp.is_some(), node));
                }
                Write::Delete {
                    kind: Kind::Pod,
                    namespace,
                    name,
                } => {
                    let key = (namespace.clone().unwrap(), name.clone());
                    let (_, terminating, _) = live.remove(&key).expect("deleting a live pod");
                    assert!(terminating, "pods are marked terminating before deletion");
                }
                other => panic!("churn writes only pods: {other:?}"),
            }
        }
    }

    #[test]
    fn churn_is_deterministic_by_seed() {
        let cluster = generate(&spec(), 1);
        let a = Churn::new(5, &cluster).next_events(300);
        let b = Churn::new(5, &cluster).next_events(300);
        assert_eq!(a, b);
        let c = Churn::new(6, &cluster).next_events(300);
        assert_ne!(a, c);
        // Split calls give the same stream as one call.
        let mut split = Churn::new(5, &cluster);
        let mut joined = split.next_events(100);
        joined.extend(split.next_events(200));
        assert_eq!(a, joined);
    }

    #[test]
    fn pod_count_stays_bounded_and_live_pod_ips_stay_unique() {
        let cluster = generate(&spec(), 2);
        let mut live: HashMap<(String, String), (Option<String>, bool, String)> = cluster
            .objects
            .iter()
            .filter_map(|o| match o {
                Object::Pod(p) => Some((
                    (
                        p.metadata.namespace.clone().unwrap(),
                        p.metadata.name.clone().unwrap(),
                    ),
                    (
                        p.status.as_ref().unwrap().pod_ip.clone(),
                        false,
                        p.spec.as_ref().unwrap().node_name.clone().unwrap(),
                    ),
                )),
                _ => None,
            })
            .collect();
        let initial = live.len();
        let mut churn = Churn::new(9, &cluster);
        let mut kinds = HashSet::new();
        for _ in 0..40 {
            let writes = churn.next_events(50);
            for w in &writes {
                kinds.insert(match w {
                    Write::Put(Object::Pod(p)) if p.metadata.deletion_timestamp.is_some() => {
                        "terminate"
                    }
                    Write::Put(_) => "put",
                    Write::Delete { .. } => "delete",
                });
            }
            apply(&mut live, &writes);
            assert!(
                live.len() >= initial / 2 && live.len() <= initial * 2 + 64,
                "{} pods",
                live.len()
            );
            assert_eq!(live.len(), churn.pod_count());
            let mut ips = HashSet::new();
            for (ip, _, _) in live.values() {
                if let Some(ip) = ip {
                    assert!(ips.insert(ip.clone()), "ip {ip} used by two live pods");
                }
            }
        }
        assert_eq!(
            kinds.len(),
            3,
            "puts, terminations and deletions all happen: {kinds:?}"
        );
    }

    #[test]
    fn daemonset_pods_are_replaced_on_their_own_node() {
        let cluster = generate(&spec(), 3);
        let mut churn = Churn::new(4, &cluster);
        let per_node = |live: &HashMap<(String, String), (Option<String>, bool, String)>| {
            let mut m: HashMap<String, usize> = HashMap::new();
            for ((ns, name), (_, terminating, node)) in live {
                if ns == "monitoring" && name.starts_with("node-exporter-") && !terminating {
                    *m.entry(node.clone()).or_default() += 1;
                }
            }
            m
        };
        let mut live = HashMap::new();
        for o in &cluster.objects {
            if let Object::Pod(p) = o {
                live.insert(
                    (
                        p.metadata.namespace.clone().unwrap(),
                        p.metadata.name.clone().unwrap(),
                    ),
                    (
                        p.status.as_ref().unwrap().pod_ip.clone(),
                        false,
                        p.spec.as_ref().unwrap().node_name.clone().unwrap(),
                    ),
                );
            }
        }
        for _ in 0..20 {
            apply(&mut live, &churn.next_events(50));
            let m = per_node(&live);
            assert_eq!(m.len(), 6);
            assert!(m.values().all(|&n| n == 1), "{m:?}");
        }
    }
}
