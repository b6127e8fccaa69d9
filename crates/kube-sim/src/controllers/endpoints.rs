//! The (legacy) Endpoints controller: a Service's selected pods → one v1 Endpoints named as the
//! Service, subsets packed by port, cut at 1000 addresses with the over-capacity annotation.
//!
//! Upstream: kubernetes/kubernetes pkg/controller/endpoint/endpoints_controller.go (`syncService`,
//! `addEndpointSubset`, `truncateEndpoints`, `podToEndpointAddressForService`) and
//! pkg/api/v1/endpoints/util.go (`RepackSubsets`, `SortSubsets`).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::endpointslice::should_set_hostname;
use super::{ANNOTATION_OVER_CAPACITY, PodView, ServiceInputs, ServiceView, is_ipv6};
use crate::kind::{Kind, Object, Write};

/// The most addresses (ready plus not ready, over all subsets) one Endpoints object carries
/// (`maxCapacity` in endpoints_controller.go).
pub const MAX_ENDPOINTS_ADDRESSES: usize = 1000;

/// The controller's memory of the Endpoints it wrote, per Service.
#[derive(Debug, Default)]
pub(super) struct EndpointsController {
    written: HashMap<(String, String), Endpoints>,
}

/// A port key for packing: a headless Service without ports packs its addresses under a sentinel
/// (upstream uses port -1 and strips it again).
type PackPort = Option<(String, i32, String, Option<String>)>;

/// An address's identity while packing: IP and pod UID (`addressKey`).
type AddrKey = (String, String);

/// One packed subset in the making: its ports and its addresses with their readiness.
type Packed = (Vec<PackPort>, Vec<(EndpointAddress, bool)>);

impl EndpointsController {
    /// Forget an Endpoints object deleted behind the controller's back; returns whether it was one of
    /// ours (the Service is then re-synced, which writes it again).
    pub(super) fn forget(&mut self, ns: &str, name: &str) -> bool {
        self.written
            .remove(&(ns.to_string(), name.to_string()))
            .is_some()
    }

    pub(super) fn delete_service(&mut self, ns: &str, name: &str) -> Vec<Write> {
        match self.written.remove(&(ns.to_string(), name.to_string())) {
            Some(_) => vec![Write::Delete {
                kind: Kind::Endpoints,
                namespace: Some(ns.to_string()),
                name: name.to_string(),
            }],
            None => Vec::new(),
        }
    }

    pub(super) fn reconcile(&mut self, input: &ServiceInputs<'_>) -> Vec<Write> {
        let want = desired(input);
        let key = (input.namespace.to_string(), input.name.to_string());
        if self.written.get(&key) == Some(&want) {
            return Vec::new();
        }
        self.written.insert(key, want.clone());
        vec![Write::Put(Object::Endpoints(want))]
    }
}

/// The Endpoints object the Service should have.
fn desired(input: &ServiceInputs<'_>) -> Endpoints {
    let svc = input.svc;
    // port → address → (address, ready); "not ready always trumps ready" when packing.
    let mut by_port: BTreeMap<PackPort, BTreeMap<AddrKey, (EndpointAddress, bool)>> =
        BTreeMap::new();
    for (name, pod) in &input.pods {
        if !pod.should_be_in_endpoints(svc.publish_not_ready) {
            continue;
        }
        let Some(mut addr) = endpoint_address(input.namespace, name, pod, svc) else {
            continue;
        };
        if should_set_hostname(pod, input.name) {
            addr.hostname = Some(pod.hostname.clone());
        }
        let ready = svc.publish_not_ready || pod.ready;
        let key: AddrKey = (addr.ip.clone(), pod.uid.clone());
        let mut add = |port: PackPort| {
            let slot = by_port
                .entry(port)
                .or_default()
                .entry(key.clone())
                .or_insert_with(|| (addr.clone(), ready));
            slot.1 &= ready;
        };
        if svc.ports.is_empty() {
            // Headless Services may have no ports; their addresses are still published.
            if svc.is_headless() {
                add(None);
            }
            continue;
        }
        for sp in &svc.ports {
            let Some(num) = pod.find_port(sp) else {
                continue;
            };
            add(Some((
                sp.name.clone().unwrap_or_default(),
                num,
                sp.protocol.clone().unwrap_or_else(|| "TCP".into()),
                sp.app_protocol.clone(),
            )));
        }
    }

    // RepackSubsets: ports that share exactly the same addresses (and readiness) form one subset.
    let mut by_addrs: BTreeMap<Vec<(AddrKey, bool)>, Packed> = BTreeMap::new();
    for (port, addrs) in by_port {
        let key: Vec<(AddrKey, bool)> = addrs.iter().map(|(k, (_, r))| (k.clone(), *r)).collect();
        let entry = by_addrs
            .entry(key)
            .or_insert_with(|| (Vec::new(), addrs.into_values().collect()));
        entry.0.push(port);
    }
    let mut subsets: Vec<EndpointSubset> = by_addrs
        .into_values()
        .map(|(ports, addrs)| {
            // Addresses come out of the BTreeMap sorted by (IP, UID), as SortSubsets orders them.
            let (ready, not_ready): (Vec<_>, Vec<_>) = addrs.into_iter().partition(|(_, r)| *r);
            let ports: Vec<EndpointPort> = ports
                .into_iter()
                .flatten()
                .map(|(name, port, protocol, app_protocol)| EndpointPort {
                    name: Some(name).filter(|n| !n.is_empty()),
                    port,
                    protocol: Some(protocol),
                    app_protocol,
                })
                .collect();
            EndpointSubset {
                addresses: non_empty(ready.into_iter().map(|(a, _)| a).collect()),
                not_ready_addresses: non_empty(not_ready.into_iter().map(|(a, _)| a).collect()),
                ports: non_empty(ports),
            }
        })
        .collect();

    let truncated = truncate(&mut subsets);
    let annotations = truncated.then(|| {
        BTreeMap::from([(
            ANNOTATION_OVER_CAPACITY.to_string(),
            "truncated".to_string(),
        )])
    });
    Endpoints {
        metadata: ObjectMeta {
            name: Some(input.name.to_string()),
            namespace: Some(input.namespace.to_string()),
            labels: Some(svc.copied_labels()).filter(|l| !l.is_empty()),
            annotations,
            ..Default::default()
        },
        subsets: non_empty(subsets),
    }
}

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

/// `podToEndpointAddressForService`: the pod IP of the Service's (primary) family.
fn endpoint_address(
    ns: &str,
    name: &str,
    pod: &PodView,
    svc: &ServiceView,
) -> Option<EndpointAddress> {
    let want_v6 = match svc.ip_families.first() {
        Some(f) => f == "IPv6",
        None if svc.is_ip_set() => is_ipv6(&svc.cluster_ip),
        // Headless and never defaulted: follow the pod's primary IP.
        None => pod.ips.first().is_some_and(|ip| is_ipv6(ip)),
    };
    let ip = pod.ips.iter().find(|ip| is_ipv6(ip) == want_v6)?;
    Some(EndpointAddress {
        ip: ip.clone(),
        node_name: Some(pod.node_name.clone()),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some(ns.to_string()),
            name: Some(name.to_string()),
            uid: Some(pod.uid.clone()),
            ..Default::default()
        }),
        hostname: None,
    })
}

/// `truncateEndpoints`: past [`MAX_ENDPOINTS_ADDRESSES`], keep ready addresses first and share the
/// room between subsets in proportion to their size (rounded up, the last subset getting what is
/// left). Returns whether anything was cut.
fn truncate(subsets: &mut [EndpointSubset]) -> bool {
    let len = |v: &Option<Vec<EndpointAddress>>| v.as_ref().map_or(0, Vec::len);
    let total_ready: usize = subsets.iter().map(|s| len(&s.addresses)).sum();
    let total_not_ready: usize = subsets.iter().map(|s| len(&s.not_ready_addresses)).sum();
    if total_ready + total_not_ready <= MAX_ENDPOINTS_ADDRESSES {
        return false;
    }
    let truncate_ready = total_ready > MAX_ENDPOINTS_ADDRESSES;
    let (max, num_total) = if truncate_ready {
        (MAX_ENDPOINTS_ADDRESSES, total_ready)
    } else {
        (MAX_ENDPOINTS_ADDRESSES - total_ready, total_not_ready)
    };
    let mut can_be_added = max;
    for subset in subsets.iter_mut() {
        let in_subset = if truncate_ready {
            len(&subset.addresses)
        } else {
            len(&subset.not_ready_addresses)
        };
        // ceil(in_subset / num_total * max) in integers.
        let to_add = (in_subset * max).div_ceil(num_total).min(can_be_added);
        if truncate_ready {
            if let Some(a) = subset.addresses.as_mut() {
                a.truncate(to_add);
            }
            subset.not_ready_addresses = None;
            can_be_added -= len(&subset.addresses);
        } else {
            if let Some(a) = subset.not_ready_addresses.as_mut() {
                a.truncate(to_add);
            }
            can_be_added -= len(&subset.not_ready_addresses);
        }
        if subset.addresses.as_ref().is_some_and(Vec::is_empty) {
            subset.addresses = None;
        }
        if subset
            .not_ready_addresses
            .as_ref()
            .is_some_and(Vec::is_empty)
        {
            subset.not_ready_addresses = None;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::super::tests::*;
    use crate::kind::{Kind, Object};

    fn subsets(store: &Store, name: &str) -> Vec<(Vec<String>, Vec<String>, Vec<i32>)> {
        let ips = |v: &Option<Vec<k8s_openapi::api::core::v1::EndpointAddress>>| {
            v.iter().flatten().map(|a| a.ip.clone()).collect::<Vec<_>>()
        };
        store
            .endpoints(name)
            .unwrap()
            .subsets
            .iter()
            .flatten()
            .map(|s| {
                (
                    ips(&s.addresses),
                    ips(&s.not_ready_addresses),
                    s.ports.iter().flatten().map(|p| p.port).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn endpoints_split_ready_and_not_ready_and_leave_terminating_pods_out() {
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let mut not_ready = mk_pod("nr", "web", "10.1.0.2", "n0", 8080);
        set_ready(&mut not_ready, false);
        let mut terminating = mk_pod("t", "web", "10.1.0.3", "n0", 8080);
        set_terminating(&mut terminating);
        let pods = vec![
            Object::Pod(mk_pod("r", "web", "10.1.0.1", "n1", 8080)),
            Object::Pod(not_ready),
            Object::Pod(terminating),
        ];
        let (mut c, mut store) = setup(svc.clone(), pods);
        assert_eq!(
            subsets(&store, "web"),
            vec![(
                vec!["10.1.0.1".to_string()],
                vec!["10.1.0.2".to_string()],
                vec![8080]
            )]
        );
        let ep = store.endpoints("web").unwrap();
        let addr = &ep.subsets.as_ref().unwrap()[0].addresses.as_ref().unwrap()[0];
        assert_eq!(addr.node_name.as_deref(), Some("n1"));
        let target = addr.target_ref.as_ref().unwrap();
        assert_eq!(
            (
                target.kind.as_deref(),
                target.name.as_deref(),
                target.uid.as_deref()
            ),
            (Some("Pod"), Some("r"), Some("uid-r"))
        );
        assert_eq!(ep.metadata.labels.as_ref().unwrap()["team"], "a");
        assert!(ep.metadata.annotations.is_none());

        // publishNotReadyAddresses: every pod, terminating ones included, is a ready address.
        let mut publish = svc;
        publish.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        store.apply(&c.on_put(&Object::Service(publish)));
        assert_eq!(
            subsets(&store, "web"),
            vec![(
                vec![
                    "10.1.0.1".to_string(),
                    "10.1.0.2".to_string(),
                    "10.1.0.3".to_string()
                ],
                vec![],
                vec![8080]
            )]
        );
    }

    #[test]
    fn endpoints_pack_ports_that_share_the_same_addresses() {
        let svc = mk_service(
            "api",
            &[("app", "api")],
            vec![
                svc_port("web", 80, IntOrString::String("http".into())),
                svc_port("admin", 9000, IntOrString::Int(9000)),
            ],
        );
        let mut lacking = mk_pod("b", "api", "10.1.0.2", "n0", 1);
        lacking.spec.as_mut().unwrap().containers[0].ports = None;
        let pods = vec![
            Object::Pod(mk_pod("a", "api", "10.1.0.1", "n0", 8080)),
            Object::Pod(lacking),
        ];
        let (_, store) = setup(svc, pods);
        let mut got = subsets(&store, "api");
        got.sort();
        assert_eq!(
            got,
            vec![
                (vec!["10.1.0.1".to_string()], vec![], vec![8080]),
                (
                    vec!["10.1.0.1".to_string(), "10.1.0.2".to_string()],
                    vec![],
                    vec![9000]
                ),
            ]
        );
    }

    #[test]
    fn endpoints_are_cut_at_a_thousand_addresses_and_annotated_until_back_under() {
        let svc = mk_service(
            "ds",
            &[("app", "ds")],
            vec![svc_port("metrics", 9100, IntOrString::Int(9100))],
        );
        let (mut c, mut store) = setup(svc, mk_pods("ds", 1001));
        let count = |store: &Store| -> usize {
            subsets(store, "ds")
                .iter()
                .map(|(r, n, _)| r.len() + n.len())
                .sum()
        };
        assert_eq!(count(&store), 1000);
        let annotations =
            |store: &Store| store.endpoints("ds").unwrap().metadata.annotations.clone();
        assert_eq!(
            annotations(&store),
            Some(BTreeMap::from([(
                "endpoints.kubernetes.io/over-capacity".to_string(),
                "truncated".to_string()
            )]))
        );
        store.apply(&c.on_delete(Kind::Pod, Some("default"), "p0"));
        assert_eq!(count(&store), 1000);
        assert_eq!(
            annotations(&store),
            None,
            "exactly 1000 fits: the annotation goes"
        );
    }

    #[test]
    fn truncation_keeps_ready_addresses_before_not_ready_ones() {
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let mut pods = mk_pods("web", 990);
        for i in 0..20 {
            let mut p = mk_pod(
                &format!("nr{i}"),
                "web",
                &format!("10.2.0.{}", i + 1),
                "n0",
                8080,
            );
            set_ready(&mut p, false);
            pods.push(Object::Pod(p));
        }
        let (_, store) = setup(svc, pods);
        let s = subsets(&store, "web");
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].0.len(), s[0].1.len()), (990, 10));
    }

    #[test]
    fn an_unchanged_service_writes_nothing() {
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let (mut c, _) = setup(svc.clone(), mk_pods("web", 3));
        assert!(c.on_put(&Object::Service(svc.clone())).is_empty());
        let mut relabelled = svc;
        relabelled.metadata.labels = labels(&[("team", "b")]);
        let w = c.on_put(&Object::Service(relabelled));
        assert_eq!(
            w.len(),
            2,
            "the slice and the Endpoints mirror the new labels"
        );
    }

    #[test]
    fn a_headless_service_without_ports_still_publishes_addresses() {
        let mut svc = mk_service("peers", &[("app", "peers")], vec![]);
        svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        let (_, store) = setup(svc, mk_pods("peers", 2));
        let s = store.slices()[0];
        assert!(s.ports.is_none());
        assert_eq!(ep_names(s), ["p0", "p1"]);
        assert_eq!(
            subsets(&store, "peers"),
            vec![(
                vec!["10.1.0.1".to_string(), "10.1.0.2".to_string()],
                vec![],
                vec![]
            )]
        );
    }

    #[test]
    fn changing_a_selector_moves_the_endpoints_to_the_newly_selected_pods() {
        let svc = mk_service(
            "web",
            &[("app", "a")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let mut pods = mk_pods("a", 3);
        pods.push(Object::Pod(mk_pod("b0", "b", "10.3.0.1", "n0", 8080)));
        let (mut c, mut store) = setup(svc.clone(), pods);
        assert_eq!(ep_names(store.slices()[0]), ["p0", "p1", "p2"]);
        let mut moved = svc;
        moved.spec.as_mut().unwrap().selector = labels(&[("app", "b")]);
        store.apply(&c.on_put(&Object::Service(moved)));
        assert_eq!(ep_names(store.slices()[0]), ["b0"]);
        assert_eq!(subsets(&store, "web")[0].0, ["10.3.0.1"]);
        // Relabelling a pod into the selector adds it.
        let mut joined = mk_pod("p1", "b", "10.1.0.2", "n1", 8080);
        joined.metadata.labels = labels(&[("app", "b")]);
        store.apply(&c.on_put(&Object::Pod(joined)));
        assert_eq!(ep_names(store.slices()[0]), ["b0", "p1"]);
    }
}
