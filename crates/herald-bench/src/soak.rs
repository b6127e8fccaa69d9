//! The fault soak's pure parts (`herald-bench soak`): the churn plan whose invariant gives a lower
//! bound on every job's true target count at every instant, the check of each served body against that
//! bound, the fault rotation, and the comparison of a served body with the truth.
//!
//! **The invariant.** The soak adds workloads of its own to kube-sim's generated cluster (which churns
//! no further): *rolling* workloads, whose pods are replaced create-before-delete, and *relabel*
//! workloads, whose pods only change a label and readiness (same name, same address). A rolling
//! workload has `replicas` slots; each slot holds one pod whose creation kube-sim confirmed, and a pod
//! is deleted only once it no longer holds a slot (its replacement was confirmed created first). So at
//! every resourceVersion each rolling workload has at least `replicas` pods, every relabel pod exists,
//! and every other object is as it was at the start. Every soak pod has one container port, which its
//! Service targets, so each pod adds the same targets to each job wherever it runs. Hence, for every
//! job, the number of targets at the start is a lower bound on the true number at every instant; for a
//! shard (hashmod of `__address__`, which a replacement pod's new address may move), the start's
//! targets in that shard that do not belong to a rolling pod are.
//!
//! A response with fewer targets than its bound is a **partial snapshot**: herald served something no
//! state of the cluster could have produced.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv4Addr;

use serde::Deserialize;
use serde_json::{Value, json};

/// The namespace the soak's own workloads live in.
pub const NAMESPACE: &str = "soak";
/// Pod label naming how the soak churns the pod: `roll` (replaced) or `relabel` (relabelled in place).
pub const CHURN_LABEL: &str = "soak-churn";
/// The same label as discovery exposes it on a target.
pub const CHURN_META_LABEL: &str = "__meta_kubernetes_pod_label_soak_churn";
/// The label relabel events change (a counter), so every relabel is a visible change.
pub const GEN_LABEL: &str = "soak-gen";
/// The one container port of every soak pod, and the port its Service targets.
pub const PORT: u16 = 9100;
/// Soak pod addresses start here: loopback, and outside kube-sim's generated pod and node ranges
/// (127.16.0.0/12, 127.8.0.0/16), so nothing dials out and no address is shared with a generated pod.
const FIRST_IP: Ipv4Addr = Ipv4Addr::new(127, 64, 0, 1);

/// One served body, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// A well-formed body with this many targets, at least the bound.
    Whole(usize),
    /// Fewer targets than the bound allows.
    Partial { got: usize, floor: usize },
    /// Not an HTTP SD body (truncated, not JSON, an entry without targets).
    Malformed(String),
}

#[derive(Deserialize)]
struct Entry<'a> {
    #[serde(borrow)]
    targets: Vec<Cow<'a, str>>,
    #[allow(dead_code)] // parsed to check the body is well-formed; its content is not needed
    labels: serde::de::IgnoredAny,
}

/// The number of targets in an HTTP SD body, or what is wrong with it.
pub fn count_targets(body: &[u8]) -> Result<usize, String> {
    let entries: Vec<Entry<'_>> =
        serde_json::from_slice(body).map_err(|e| format!("not an HTTP SD body: {e}"))?;
    let mut n = 0;
    for (i, e) in entries.iter().enumerate() {
        if e.targets.is_empty() {
            return Err(format!("entry {i} has no targets"));
        }
        n += e.targets.len();
    }
    Ok(n)
}

/// Checks a served body against its lower bound.
pub fn check(body: &[u8], floor: usize) -> Check {
    match count_targets(body) {
        Ok(n) if n >= floor => Check::Whole(n),
        Ok(got) => Check::Partial { got, floor },
        Err(e) => Check::Malformed(e),
    }
}

/// What a consumer asks for: a whole job or one shard of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slice {
    /// `(shard, shards)`, or `None` for the whole job.
    pub shard: Option<(u64, u64)>,
}

impl Slice {
    pub const WHOLE: Slice = Slice { shard: None };

    /// The query string herald takes for this slice (empty for the whole job).
    pub fn query(&self) -> String {
        match self.shard {
            None => String::new(),
            Some((i, n)) => format!("shard={i}&shards={n}"),
        }
    }

    /// Whether `address` is in this slice (Prometheus's hashmod, as herald shards).
    pub fn holds(&self, address: &str) -> bool {
        match self.shard {
            None => true,
            Some((i, n)) => herald_core::hashmod(address, n) == i,
        }
    }

    pub fn describe(&self) -> String {
        match self.shard {
            None => "whole".into(),
            Some((i, n)) => format!("shard {i}/{n}"),
        }
    }
}

/// The lower bound for `slice` from the truth at the start (the invariant in the module docs): every
/// target of the whole job; of a shard, those that do not belong to a rolling pod.
pub fn floor(start: &[herald_core::HttpSdEntry], slice: Slice) -> usize {
    start
        .iter()
        .filter(|e| slice.holds(&e.target))
        .filter(|e| {
            slice.shard.is_none()
                || e.labels.get(CHURN_META_LABEL).map(String::as_str) != Some("roll")
        })
        .count()
}

/// How a served body differs from the truth, target by target.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Comparison {
    pub served: usize,
    pub truth: usize,
    /// Targets the truth has and the body lacks (first few).
    pub missing: Vec<String>,
    /// Targets the body has and the truth lacks (first few).
    pub extra: Vec<String>,
    /// Targets in both whose labels differ (first few, with the first differing label).
    pub differing: Vec<String>,
    pub equal: bool,
}

/// Compares a served body with the entries the truth gives (order aside: herald's order is checked
/// byte for byte by the end-to-end tests; here what matters is which targets with which labels).
pub fn compare(served: &[u8], truth: &[herald_core::HttpSdEntry]) -> Comparison {
    #[derive(Deserialize)]
    struct Owned {
        targets: Vec<String>,
        labels: BTreeMap<String, String>,
    }
    let parsed: Vec<Owned> = match serde_json::from_slice(served) {
        Ok(p) => p,
        Err(e) => {
            return Comparison {
                truth: truth.len(),
                missing: vec![format!("served body is not HTTP SD JSON: {e}")],
                ..Comparison::default()
            };
        }
    };
    let mut got: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    let mut served_n = 0;
    for e in parsed {
        for t in e.targets {
            served_n += 1;
            got.entry(t).or_default().push(e.labels.clone());
        }
    }
    let mut want: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for e in truth {
        want.entry(e.target.clone())
            .or_default()
            .push(e.labels.clone().into_iter().collect());
    }
    const SHOW: usize = 5;
    let mut c = Comparison {
        served: served_n,
        truth: truth.len(),
        ..Comparison::default()
    };
    for (t, w) in &want {
        match got.get_mut(t) {
            None => c.missing.push(t.clone()),
            Some(g) => {
                // The same address may carry several label sets (one per Service port name, ...):
                // match them as multisets.
                let mut g_sorted = g.clone();
                g_sorted.sort();
                let mut w_sorted = w.clone();
                w_sorted.sort();
                if g_sorted != w_sorted {
                    let detail = first_label_difference(&g_sorted, &w_sorted);
                    c.differing.push(format!("{t}: {detail}"));
                }
            }
        }
    }
    for t in got.keys() {
        if !want.contains_key(t) {
            c.extra.push(t.clone());
        }
    }
    c.equal = c.missing.is_empty() && c.extra.is_empty() && c.differing.is_empty();
    for v in [&mut c.missing, &mut c.extra, &mut c.differing] {
        v.truncate(SHOW);
    }
    c
}

fn first_label_difference(
    got: &[BTreeMap<String, String>],
    want: &[BTreeMap<String, String>],
) -> String {
    if got.len() != want.len() {
        return format!(
            "{} label sets served, {} in the truth",
            got.len(),
            want.len()
        );
    }
    for (g, w) in got.iter().zip(want) {
        for (k, v) in w {
            if g.get(k) != Some(v) {
                return format!("{k}: served {:?}, truth {v:?}", g.get(k));
            }
        }
        if let Some(k) = g.keys().find(|k| !w.contains_key(*k)) {
            return format!("{k}: served {:?}, not in the truth", g[k]);
        }
    }
    "label sets differ".into()
}

/// One fault of the rotation: what to post to kube-sim's `/sim/faults`, and how long it lasts before
/// the soak clears it (`None`: it is a one-off event).
#[derive(Debug, Clone)]
pub struct Fault {
    pub name: &'static str,
    /// Bodies posted in order (compaction is followed by closing watches, so herald must resume from a
    /// compacted resourceVersion and gets 410 Expired).
    pub posts: Vec<Value>,
    pub lasts_ms: Option<u64>,
}

/// The faults the soak rotates through, one every interval.
pub fn rotation() -> Vec<Fault> {
    vec![
        Fault {
            name: "close_watches",
            posts: vec![json!({"fault": "close_watches"})],
            lasts_ms: None,
        },
        Fault {
            name: "compact (410)",
            posts: vec![
                json!({"fault": "compact"}),
                json!({"fault": "close_watches"}),
            ],
            lasts_ms: None,
        },
        Fault {
            name: "restart (503)",
            posts: vec![json!({"fault": "restart", "duration_ms": 3000, "refuse": false})],
            lasts_ms: None,
        },
        Fault {
            name: "restart (refused)",
            posts: vec![json!({"fault": "restart", "duration_ms": 3000, "refuse": true})],
            lasts_ms: None,
        },
        Fault {
            name: "429 burst",
            posts: vec![json!({"fault": "errors", "code": 429, "fraction": 0.5,
                               "retry_after_seconds": 1})],
            lasts_ms: Some(5000),
        },
        Fault {
            name: "500 burst",
            posts: vec![json!({"fault": "errors", "code": 500, "fraction": 0.5})],
            lasts_ms: Some(5000),
        },
        Fault {
            name: "slow watches",
            posts: vec![json!({"fault": "watch_delay", "delay_ms": 1500})],
            lasts_ms: Some(5000),
        },
    ]
}

/// A small deterministic generator (xorshift64*): the same seed gives the same churn plan.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// A soak pod as the plan tracks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub workload: usize,
    pub name: String,
    pub ip: Ipv4Addr,
}

/// The next write the churn makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create `pod` to take over `slot` of its (rolling) workload.
    Create { pod: PodRef, slot: usize },
    /// Delete a pod that no longer holds a slot.
    Delete { pod: PodRef },
    /// Change a relabel pod's generation label and readiness; its address stays.
    Relabel {
        pod: PodRef,
        generation: u64,
        ready: bool,
    },
}

/// Workload shape: `rolling` workloads replaced create-before-delete, `relabel` workloads relabelled,
/// `replicas` pods each.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub rolling: usize,
    pub relabel: usize,
    pub replicas: usize,
}

/// The churn plan: a state machine over confirmed writes (see the module docs for the invariant).
#[derive(Debug, Clone)]
pub struct Plan {
    shape: Shape,
    rng: Rng,
    /// Rolling workloads' slots: the pod holding each (created, confirmed, never deleted while held).
    slots: Vec<Vec<PodRef>>,
    /// Relabel workloads' pods.
    relabel: Vec<PodRef>,
    /// Pods replaced and awaiting deletion, oldest first.
    retired: VecDeque<PodRef>,
    /// Slots whose replacement is being created (one at a time per slot).
    busy: Vec<Vec<bool>>,
    generation: u64,
    next_ip: u32,
    next_name: u64,
}

impl Plan {
    /// A plan for `shape`; it needs at least one workload of each sort and one replica.
    pub fn new(shape: Shape, seed: u64) -> Result<Plan, String> {
        if shape.rolling == 0 || shape.relabel == 0 || shape.replicas == 0 {
            return Err(format!(
                "the soak needs at least one rolling and one relabel workload with at least one \
                 replica each, got {shape:?}"
            ));
        }
        let mut p = Plan {
            shape,
            rng: Rng::new(seed),
            slots: Vec::new(),
            relabel: Vec::new(),
            retired: VecDeque::new(),
            busy: Vec::new(),
            generation: 0,
            next_ip: u32::from(FIRST_IP),
            next_name: 0,
        };
        for w in 0..shape.rolling {
            let pods = (0..shape.replicas).map(|_| p.new_pod(w)).collect();
            p.slots.push(pods);
            p.busy.push(vec![false; shape.replicas]);
        }
        for w in shape.rolling..shape.rolling + shape.relabel {
            for _ in 0..shape.replicas {
                let pod = p.new_pod(w);
                p.relabel.push(pod);
            }
        }
        Ok(p)
    }

    pub fn workloads(&self) -> usize {
        self.shape.rolling + self.shape.relabel
    }

    /// Whether workload `w` is a rolling one (else relabel).
    pub fn rolling(&self, w: usize) -> bool {
        w < self.shape.rolling
    }

    /// The pods to create before the soak starts.
    pub fn initial_pods(&self) -> Vec<PodRef> {
        self.slots
            .iter()
            .flatten()
            .chain(&self.relabel)
            .cloned()
            .collect()
    }

    fn new_pod(&mut self, workload: usize) -> PodRef {
        let ip = Ipv4Addr::from(self.next_ip);
        self.next_ip += 1;
        self.next_name += 1;
        PodRef {
            workload,
            name: format!(
                "{}-{}",
                workload_name(workload, self.rolling(workload)),
                self.next_name
            ),
            ip,
        }
    }

    /// The next write: a pending deletion about a third of the time (always when many are pending), else
    /// a replacement or a relabel, about evenly. The caller reports the outcome with [`Plan::done`].
    pub fn next_step(&mut self) -> Step {
        let r = self.rng.below(6);
        if !self.retired.is_empty() && (r < 2 || self.retired.len() > 32) {
            let pod = self.retired.pop_front().expect("checked non-empty");
            return Step::Delete { pod };
        }
        if r.is_multiple_of(2) {
            let w = self.rng.below(self.shape.rolling);
            let free: Vec<usize> = (0..self.shape.replicas)
                .filter(|s| !self.busy[w][*s])
                .collect();
            if !free.is_empty() {
                let slot = free[self.rng.below(free.len())];
                self.busy[w][slot] = true;
                let pod = self.new_pod(w);
                return Step::Create { pod, slot };
            }
        }
        let i = self.rng.below(self.relabel.len());
        self.generation += 1;
        Step::Relabel {
            pod: self.relabel[i].clone(),
            generation: self.generation,
            ready: self.rng.below(4) != 0,
        }
    }

    /// Records a step's outcome. `ok` means kube-sim confirmed the write (2xx; for a deletion, a 404
    /// too: the pod is gone). A create that failed, or whose outcome is unknown, leaves the slot's pod
    /// in place: an unconfirmed new pod may exist, which only adds targets. A failed deletion is retried.
    pub fn done(&mut self, step: Step, ok: bool) {
        match step {
            Step::Create { pod, slot } => {
                let w = pod.workload;
                self.busy[w][slot] = false;
                if ok {
                    let old = std::mem::replace(&mut self.slots[w][slot], pod);
                    self.retired.push_back(old);
                }
            }
            Step::Delete { pod } => {
                if !ok {
                    self.retired.push_front(pod);
                }
            }
            Step::Relabel { .. } => {}
        }
    }
}

/// A workload's name (its Service's too).
pub fn workload_name(w: usize, rolling: bool) -> String {
    if rolling {
        format!("roll-{w}")
    } else {
        format!("relabel-{w}")
    }
}

/// The soak pod's object.
pub fn pod_json(pod: &PodRef, rolling: bool, node: &str, generation: u64, ready: bool) -> Value {
    let app = workload_name(pod.workload, rolling);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": NAMESPACE, "name": pod.name,
                     "labels": {"app": app, CHURN_LABEL: if rolling { "roll" } else { "relabel" },
                                GEN_LABEL: generation.to_string()}},
        "spec": {"nodeName": node, "containers": [
            {"name": "main", "image": "soak", "ports": [{"name": "metrics", "containerPort": PORT}]}]},
        "status": {"phase": "Running", "podIP": pod.ip.to_string(), "podIPs": [{"ip": pod.ip.to_string()}],
                   "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    })
}

/// The Service selecting workload `w`'s pods (its EndpointSlices and Endpoints follow the pods).
pub fn service_json(w: usize, rolling: bool) -> Value {
    let app = workload_name(w, rolling);
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": NAMESPACE, "name": app, "labels": {"app": app}},
        "spec": {"selector": {"app": app},
                 "ports": [{"name": "metrics", "port": PORT, "targetPort": "metrics", "protocol": "TCP"}]}
    })
}

pub fn namespace_json() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;

    fn body(n: usize) -> Vec<u8> {
        let entries: Vec<Value> = (0..n)
            .map(|i| json!({"targets": [format!("127.64.0.{i}:9100")], "labels": {"a": "b"}}))
            .collect();
        serde_json::to_vec(&entries).expect("json")
    }

    #[test]
    fn a_truncated_response_is_caught_as_partial_or_malformed() {
        let whole = body(10);
        assert_eq!(check(&whole, 10), Check::Whole(10));
        assert_eq!(check(&whole, 7), Check::Whole(10));
        // One entry fewer than the bound: a partial snapshot.
        assert_eq!(check(&body(9), 10), Check::Partial { got: 9, floor: 10 });
        // The empty snapshot a half-built relist would serve.
        assert_eq!(check(b"[]", 10), Check::Partial { got: 0, floor: 10 });
        // Cut mid-way through the bytes.
        assert!(matches!(
            check(&whole[..whole.len() / 2], 10),
            Check::Malformed(_)
        ));
        assert!(matches!(
            check(br#"[{"targets":[],"labels":{}}]"#, 0),
            Check::Malformed(_)
        ));
        assert!(matches!(
            check(b"{\"error\":\"x\"}", 0),
            Check::Malformed(_)
        ));
    }

    fn entry(addr: &str, churn: &str) -> herald_core::HttpSdEntry {
        let mut labels = herald_core::LabelSet::new();
        labels.insert(CHURN_META_LABEL.into(), churn.into());
        herald_core::HttpSdEntry {
            target: addr.into(),
            labels,
        }
    }

    #[test]
    fn shard_floors_leave_out_rolling_pods_and_whole_floors_count_everything() {
        let start: Vec<_> = (0..40)
            .map(|i| {
                entry(
                    &format!("127.64.0.{i}:9100"),
                    if i % 2 == 0 { "roll" } else { "relabel" },
                )
            })
            .collect();
        assert_eq!(floor(&start, Slice::WHOLE), 40);
        let shards: Vec<usize> = (0..2)
            .map(|i| {
                floor(
                    &start,
                    Slice {
                        shard: Some((i, 2)),
                    },
                )
            })
            .collect();
        assert_eq!(shards.iter().sum::<usize>(), 20, "{shards:?}");
    }

    #[test]
    fn comparison_names_missing_extra_and_relabelled_targets() {
        let truth = vec![entry("a:1", "roll"), entry("b:1", "relabel")];
        let same = herald_core::encode_http_sd(&truth);
        assert!(compare(&same, &truth).equal);
        let other = herald_core::encode_http_sd(&[entry("a:1", "relabel"), entry("c:1", "roll")]);
        let c = compare(&other, &truth);
        assert!(!c.equal);
        assert_eq!(c.missing, vec!["b:1".to_string()]);
        assert_eq!(c.extra, vec!["c:1".to_string()]);
        assert_eq!(c.differing.len(), 1, "{c:?}");
        assert!(c.differing[0].contains("soak_churn"), "{c:?}");
        assert!(!compare(b"[{", &truth).equal);
    }

    /// Drives the plan against a model of kube-sim with writes failing at random, and checks the
    /// invariant after every write: each rolling workload keeps at least `replicas` pods, every relabel
    /// pod keeps its address, and no two live pods share an address.
    #[test]
    fn churn_never_leaves_a_workload_below_its_replicas() {
        let shape = Shape {
            rolling: 3,
            relabel: 2,
            replicas: 4,
        };
        let mut plan = Plan::new(shape, 7).expect("valid shape");
        let mut live: HashMap<String, PodRef> = plan
            .initial_pods()
            .into_iter()
            .map(|p| (p.name.clone(), p))
            .collect();
        let relabel_ips: BTreeSet<Ipv4Addr> = live
            .values()
            .filter(|p| !plan.rolling(p.workload))
            .map(|p| p.ip)
            .collect();
        let mut fail = Rng::new(3);
        let mut kinds = BTreeSet::new();
        for _ in 0..5000 {
            let step = plan.next_step();
            let ok = fail.below(4) != 0;
            kinds.insert(match &step {
                Step::Create { .. } => "create",
                Step::Delete { .. } => "delete",
                Step::Relabel { .. } => "relabel",
            });
            if ok {
                match &step {
                    Step::Create { pod, .. } => {
                        assert!(live.insert(pod.name.clone(), pod.clone()).is_none());
                    }
                    Step::Delete { pod } => {
                        live.remove(&pod.name).expect("deleting a live pod");
                    }
                    Step::Relabel { pod, .. } => {
                        assert_eq!(live[&pod.name].ip, pod.ip, "a relabel keeps the address");
                    }
                }
            }
            plan.done(step, ok);
            for w in 0..shape.rolling {
                let n = live.values().filter(|p| p.workload == w).count();
                assert!(n >= shape.replicas, "workload {w} down to {n} pods");
            }
            let ips: BTreeSet<Ipv4Addr> = live.values().map(|p| p.ip).collect();
            assert_eq!(ips.len(), live.len(), "two live pods share an address");
            assert!(relabel_ips.is_subset(&ips));
        }
        assert_eq!(kinds.len(), 3, "creates, deletes and relabels all happen");
        // Deletions keep up: the retired queue stays bounded.
        assert!(live.len() <= (shape.rolling + shape.relabel) * shape.replicas + 40);
    }

    #[test]
    fn a_shape_without_both_sorts_of_workload_is_refused() {
        let e = Plan::new(
            Shape {
                rolling: 0,
                relabel: 1,
                replicas: 1,
            },
            1,
        )
        .expect_err("no rolling workload");
        assert!(e.contains("rolling"), "{e}");
    }

    #[test]
    fn pods_are_loopback_and_outside_kube_sim_s_generated_ranges() {
        let plan = Plan::new(
            Shape {
                rolling: 2,
                relabel: 2,
                replicas: 3,
            },
            1,
        )
        .expect("valid shape");
        for p in plan.initial_pods() {
            assert!(p.ip.is_loopback(), "{}", p.ip);
            assert!(p.ip.octets()[1] >= 64, "{}", p.ip);
        }
    }
}
