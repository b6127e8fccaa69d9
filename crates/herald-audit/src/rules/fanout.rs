//! HA010: the watch fan-out of discovery — who watches Services, EndpointSlices, Endpoints, Pods
//! and Nodes, and the bytes per second the apiserver pushes to them at an assumed churn, next to
//! the same figure with herald in front (one upstream watch per kind).
//!
//! The churn model: `churn` pod changes per second. Each pushes one Pod event; when the pod backs a
//! Service, one EndpointSlice event (a slice of average size among those holding pods) and one Endpoints event (the pod's
//! Service's whole Endpoints object: the average is weighted by address count, since big Services
//! have proportionally more pod changes). Nodes report status every 5 minutes when nothing changes
//! (kubelet `nodeStatusReportFrequency`). Services are assumed not to churn. Event sizes are the
//! objects' real JSON sizes in the input plus the event's framing; a Pod event's is the average of
//! Deployment pods (owned by a ReplicaSet), the ones rolling updates replace. Calibrated against
//! kube-sim's meter by herald-simulate's tests/fanout_calibration.rs.

use std::collections::{BTreeMap, BTreeSet};

use super::{Outcome, Rule, discovery_role, human_bytes, prometheus_selects, require, thousands};
use crate::facts::Facts;
use crate::finding::{Cost, Finding, Fix, Severity};
use crate::inventory::{Cluster, ns_name};
use crate::kind::Kind;
use crate::selector;

pub const WATCH_FANOUT: Rule = Rule {
    code: "HA010",
    slug: "watch-fanout",
    about: "watchers of the discovery kinds and the bytes the apiserver pushes to them",
    check: fanout,
};

/// Pod changes per second assumed when `--churn-per-second` is not given: a few rolling updates
/// in flight at once on a mid-size cluster.
pub const DEFAULT_CHURN_PER_SECOND: f64 = 10.0;
/// Past this many concurrent watches on these kinds the finding is a warning: at the 50–100 KiB the
/// apiserver holds per watch (FIELD-NOTES), that is 0.5–1 GiB of apiserver memory.
const WATCH_WARNING: u64 = 10_000;
const WATCH_MEMORY_BYTES: f64 = 75.0 * 1024.0;
/// kubelet `nodeStatusReportFrequency` default (kubernetes:pkg/kubelet/apis/config/v1beta1/defaults.go).
const NODE_STATUS_SECONDS: f64 = 300.0;

const KINDS: [Kind; 5] = [
    Kind::Service,
    Kind::EndpointSlice,
    Kind::Endpoints,
    Kind::Pod,
    Kind::Node,
];

/// Watchers per kind, by who watches.
type Watchers = BTreeMap<Kind, BTreeMap<String, u64>>;

fn add(w: &mut Watchers, who: &str, n: u64, kinds: &[Kind]) {
    if n == 0 {
        return;
    }
    for k in kinds {
        *w.entry(*k).or_default().entry(who.to_string()).or_default() += n;
    }
}

fn pods_labelled(c: &Cluster, key: &str, value: &str) -> u64 {
    c.pods
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .map(String::as_str)
                == Some(value)
        })
        .count() as u64
}

/// Who watches what, from what the input shows.
fn watchers(c: &Cluster, istiod_deployment: Option<(&str, &str)>) -> Watchers {
    let mut w = Watchers::new();
    let nodes = c.nodes.len() as u64;
    // Every kubelet watches all Services (for the service environment variables,
    // kubernetes:pkg/kubelet/kubelet.go serviceLister); its Pod and Node watches are node-scoped.
    add(&mut w, "kubelet", nodes, &[Kind::Service]);
    let kube_proxy = c.config_map("kube-system", "kube-proxy").is_some()
        || pods_labelled(c, "k8s-app", "kube-proxy") > 0;
    if kube_proxy {
        // kubernetes:pkg/proxy: Service and EndpointSlice informers on every node.
        add(
            &mut w,
            "kube-proxy",
            nodes,
            &[Kind::Service, Kind::EndpointSlice],
        );
    }
    add(
        &mut w,
        "CoreDNS",
        pods_labelled(c, "k8s-app", "kube-dns"),
        &[Kind::Service, Kind::EndpointSlice],
    );
    add(
        &mut w,
        "cilium-agent",
        pods_labelled(c, "k8s-app", "cilium"),
        &[Kind::Service, Kind::EndpointSlice, Kind::Node],
    );
    // istiod: its pods, else its Deployment's replicas when the input has no pods of it.
    let istiod_pods = pods_labelled(c, "app", "istiod");
    let istiod = if istiod_pods > 0 {
        istiod_pods
    } else {
        istiod_deployment
            .and_then(|(ns, name)| {
                c.deployments
                    .iter()
                    .find(|d| ns_name(&d.metadata) == (ns, name))
            })
            .map_or(0, |d| {
                d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1).max(0) as u64
            })
    };
    add(
        &mut w,
        "istiod",
        istiod,
        &[Kind::Service, Kind::EndpointSlice, Kind::Pod, Kind::Node],
    );
    add(
        &mut w,
        "ingress-nginx",
        pods_labelled(c, "app.kubernetes.io/name", "ingress-nginx"),
        &[Kind::Service, Kind::EndpointSlice],
    );
    for (p, agent) in c.all_prometheuses() {
        let pods = (p.spec.replicas.unwrap_or(1).max(0) * p.spec.shards.unwrap_or(1).max(1)) as u64;
        // Prometheus shares one discoverer between jobs with identical SD configs, and a
        // discoverer restricted to namespaces opens one watch per namespace
        // (prometheus:discovery/kubernetes/kubernetes.go). Distinct namespace sets are counted.
        let mut sets: BTreeSet<Vec<String>> = BTreeSet::new();
        for sm in c
            .service_monitors
            .iter()
            .filter(|sm| prometheus_selects(c, p, sm))
        {
            let sel = &sm.spec.namespace_selector;
            sets.insert(if sel.any {
                Vec::new()
            } else if sel.match_names.is_empty() {
                vec![sm.namespace().to_string()]
            } else {
                sel.match_names.clone()
            });
        }
        let per_pod: u64 = sets.iter().map(|s| s.len().max(1) as u64).sum();
        let who = format!(
            "{} {}/{} ({pods} pods)",
            if agent {
                "PrometheusAgent"
            } else {
                "Prometheus"
            },
            p.namespace(),
            p.name()
        );
        let role = if discovery_role(p) == "EndpointSlice" {
            Kind::EndpointSlice
        } else {
            Kind::Endpoints
        };
        add(
            &mut w,
            &who,
            pods * per_pod,
            &[role, Kind::Service, Kind::Pod],
        );
        let pod_monitors = c
            .pod_monitors
            .iter()
            .filter(|pm| {
                p.spec
                    .pod_monitor_selector
                    .as_ref()
                    .is_some_and(|s| selector::matches(s, pm.metadata.labels.as_ref()))
            })
            .count() as u64;
        add(&mut w, &who, pods * pod_monitors.min(1), &[Kind::Pod]);
    }
    w
}

/// The bytes a watch event adds around its object: `{"type":"MODIFIED","object":` … `}` and the
/// newline ending each event of a JSON watch stream.
const EVENT_FRAMING_BYTES: usize = r#"{"type":"MODIFIED","object":}"#.len() + 1;

/// Average event size: the objects' average JSON size plus the event's framing (0 without objects).
fn average(sizes: impl Iterator<Item = usize>) -> f64 {
    let (n, sum) = sizes.fold((0usize, 0usize), |(n, s), b| (n + 1, s + b));
    if n == 0 {
        0.0
    } else {
        (sum + n * EVENT_FRAMING_BYTES) as f64 / n as f64
    }
}

/// The slices pod churn rewrites: those with a pod endpoint (one on a node); not the apiserver's
/// own `default/kubernetes` slice, nor empty ones. All slices when none shows a node.
fn churning_slice_sizes(c: &Cluster) -> f64 {
    let of_pods = || {
        c.endpoint_slices
            .iter()
            .filter(|s| s.endpoints.iter().any(|e| e.node_name.is_some()))
    };
    if of_pods().next().is_some() {
        average(of_pods().map(|s| s.wire_bytes))
    } else {
        average(c.endpoint_slices.iter().map(|s| s.wire_bytes))
    }
}

/// The pods churn touches: rolling updates replace the pods of Deployments (owned by a
/// ReplicaSet); all pods when the input shows no such owner.
fn churning_pod_sizes(c: &Cluster) -> f64 {
    let of_replica_sets = || {
        c.pods.iter().filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "ReplicaSet")
        })
    };
    if of_replica_sets().next().is_some() {
        average(of_replica_sets().map(|p| p.wire_bytes))
    } else {
        average(c.pods.iter().map(|p| p.wire_bytes))
    }
}

/// `(events per second, average event bytes)` per kind under the churn model.
fn event_rates(facts: &Facts<'_>, churn: f64) -> BTreeMap<Kind, (f64, f64)> {
    let c = facts.cluster;
    let pods = c.pods.len().max(1) as f64;
    let backed: usize = c
        .services
        .iter()
        .map(|s| {
            let (ns, name) = ns_name(&s.metadata);
            facts.backends(ns, name).map_or(0, |(n, _)| n)
        })
        .sum();
    let behind_service = (backed as f64 / pods).min(1.0);
    let (weighted, addresses) = c.endpoints.iter().fold((0.0, 0usize), |(w, a), e| {
        let n = e.address_count();
        (w + (e.wire_bytes * n) as f64, a + n)
    });
    let endpoints_bytes = if addresses == 0 {
        0.0
    } else {
        weighted / addresses as f64 + EVENT_FRAMING_BYTES as f64
    };
    let mut out = BTreeMap::new();
    out.insert(Kind::Pod, (churn, churning_pod_sizes(c)));
    out.insert(
        Kind::EndpointSlice,
        (churn * behind_service, churning_slice_sizes(c)),
    );
    out.insert(Kind::Endpoints, (churn * behind_service, endpoints_bytes));
    out.insert(
        Kind::Service,
        (0.0, average(c.services.iter().map(|s| s.wire_bytes))),
    );
    out.insert(
        Kind::Node,
        (
            c.nodes.len() as f64 / NODE_STATUS_SECONDS,
            average(c.nodes.iter().map(|n| n.wire_bytes)),
        ),
    );
    out
}

/// The watch fan-out cost model, shared by HA010 and `herald simulate`: who watches each discovery
/// kind, and the events and bytes per second one watch of it receives under the churn model above.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchFanout {
    pub churn_per_second: f64,
    pub kinds: Vec<KindFanout>,
}

/// One kind's share of [`WatchFanout`].
#[derive(Debug, Clone, PartialEq)]
pub struct KindFanout {
    pub kind: Kind,
    /// Watches by who opens them.
    pub watchers: BTreeMap<String, u64>,
    pub events_per_second: f64,
    /// Average JSON size of one event's object.
    pub event_bytes: f64,
}

impl KindFanout {
    pub fn watches(&self) -> u64 {
        self.watchers.values().sum()
    }

    /// Bytes per second one watch of this kind receives.
    pub fn bytes_per_watch(&self) -> f64 {
        self.events_per_second * self.event_bytes
    }

    /// Bytes per second the apiserver sends when every watcher watches it directly.
    pub fn direct_bytes_per_second(&self) -> f64 {
        self.bytes_per_watch() * self.watches() as f64
    }

    /// Bytes per second the apiserver sends when `heralds` herald replicas stand in front of the
    /// watchers: one upstream watch per replica, whatever the number of watchers.
    pub fn herald_bytes_per_second(&self, heralds: u64) -> f64 {
        if self.watches() == 0 {
            0.0
        } else {
            self.bytes_per_watch() * heralds as f64
        }
    }
}

/// The fan-out model of a cluster at `churn` pod changes per second.
pub fn watch_fanout(cluster: &Cluster, churn: f64) -> WatchFanout {
    fanout_of(&Facts::new(cluster), churn)
}

fn fanout_of(facts: &Facts<'_>, churn: f64) -> WatchFanout {
    let istiod = facts
        .istio
        .as_ref()
        .and_then(|i| i.istiod.as_ref())
        .filter(|o| o.kind == "Deployment")
        .map(|o| (o.namespace.as_deref().unwrap_or_default(), o.name.as_str()));
    let mut w = watchers(facts.cluster, istiod);
    let rates = event_rates(facts, churn);
    let kinds = KINDS
        .iter()
        .map(|kind| KindFanout {
            kind: *kind,
            watchers: w.remove(kind).unwrap_or_default(),
            events_per_second: rates[kind].0,
            event_bytes: rates[kind].1,
        })
        .collect();
    WatchFanout {
        churn_per_second: churn,
        kinds,
    }
}

fn fanout(facts: &Facts<'_>, options: &super::Options) -> Outcome {
    let c = facts.cluster;
    if let Err(o) = require(c, &[Kind::Pod, Kind::Node]) {
        return o;
    }
    let model = fanout_of(facts, options.churn_per_second);
    let mut evidence = Vec::new();
    let mut figures = BTreeMap::new();
    let (mut total_watches, mut total_bytes, mut herald_bytes) = (0u64, 0.0, 0.0);
    for k in &model.kinds {
        let kind = k.kind;
        let n = k.watches();
        let (events, size) = (k.events_per_second, k.event_bytes);
        let pushed = k.direct_bytes_per_second();
        let with_herald = k.herald_bytes_per_second(1);
        total_watches += n;
        total_bytes += pushed;
        herald_bytes += with_herald;
        let who = k
            .watchers
            .iter()
            .map(|(k, v)| format!("{k} {}", thousands(*v)))
            .collect::<Vec<_>>()
            .join(", ");
        let known = if c.has(kind) {
            ""
        } else {
            " (kind not in the input: sizes unknown)"
        };
        evidence.push(format!(
            "{kind}: {} watches [{}]; {events:.2} events/s × {} = {}/s pushed, {}/s with herald{known}",
            thousands(n),
            if who.is_empty() { "none seen".to_string() } else { who },
            human_bytes(size),
            human_bytes(pushed),
            human_bytes(with_herald),
        ));
        let slug = kind.name().to_ascii_lowercase();
        figures.insert(format!("{slug}_watches"), n as f64);
        figures.insert(format!("{slug}_bytes_per_second"), pushed);
        figures.insert(format!("{slug}_bytes_per_second_with_herald"), with_herald);
    }
    evidence.push(format!(
        "assumed churn: {} pod changes/s (--churn-per-second); Services assumed static; Nodes report every 5 min",
        options.churn_per_second
    ));
    let herald_watches = model.kinds.iter().filter(|k| k.watches() > 0).count() as u64;
    figures.insert("watches".into(), total_watches as f64);
    figures.insert("watches_with_herald".into(), herald_watches as f64);
    figures.insert("bytes_per_second".into(), total_bytes);
    figures.insert("bytes_per_second_with_herald".into(), herald_bytes);
    figures.insert(
        "watch_memory_bytes".into(),
        total_watches as f64 * WATCH_MEMORY_BYTES,
    );
    figures.insert("churn_per_second".into(), options.churn_per_second);
    Outcome::Ran(vec![Finding {
        code: WATCH_FANOUT.code,
        rule: WATCH_FANOUT.slug,
        severity: if total_watches > WATCH_WARNING { Severity::Warning } else { Severity::Info },
        title: format!(
            "{} watches on discovery kinds: the apiserver pushes {}/s ({}/s with herald)",
            thousands(total_watches),
            human_bytes(total_bytes),
            human_bytes(herald_bytes)
        ),
        objects: Vec::new(),
        evidence,
        cost: Cost {
            summary: format!(
                "{}/s of watch events and ~{} of apiserver memory for {} watches (50–100 KiB each)",
                human_bytes(total_bytes),
                human_bytes(total_watches as f64 * WATCH_MEMORY_BYTES),
                thousands(total_watches)
            ),
            figures,
        },
        fix: Fix {
            summary: format!("put herald in front: {herald_watches} upstream watches, one per kind"),
            steps: vec![
                "run herald serve against the apiserver (one list+watch per kind)".into(),
                "point Prometheus at herald's /sd/v1/{job} (http_sd) or its kube face instead of the apiserver".into(),
                "point node agents (kube-proxy, CNI agents) and ingress controllers at herald's kube face".into(),
            ],
            ..Fix::default()
        },
    }])
}
