//! The EndpointSlice controller: a Service's selected pods → EndpointSlices of at most 100
//! endpoints, grouped by address type and port set, with the upstream reconciler's placement rules
//! so that one pod change rewrites one slice, not all of them.
//!
//! Upstream: kubernetes/kubernetes staging/src/k8s.io/endpointslice/reconciler.go
//! (`reconcileByAddressType`, `reconcileByPortMapping`, `finalize`) and utils.go (`podToEndpoint`,
//! `getEndpointPorts`, `getSliceToFill`, `setEndpointSliceLabels`).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{
    CONTROLLER_NAME, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, PodView, ServiceInputs, ServiceView,
    is_ipv6,
};
use crate::kind::{Kind, Object, Write};

/// The controller's default `--max-endpoints-per-slice`.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

const IPV4: &str = "IPv4";
const IPV6: &str = "IPv6";

/// The alphabet apimachinery's `SimpleNameGenerator` draws generateName suffixes from.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The set of ports a slice carries, in Service port order (`endpointMeta.ports`): each as
/// (name, port, protocol, appProtocol).
type PortKey = Vec<(String, i32, String, Option<String>)>;

/// An endpoint's identity within a port group: `endpointsliceutil.EndpointSet` hashes addresses,
/// hostname and the target's namespace and name; everything else is compared "beyond the hash".
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct EndpointId {
    addresses: Vec<String>,
    hostname: String,
    namespace: String,
    name: String,
}

impl EndpointId {
    fn of(ep: &Endpoint) -> EndpointId {
        let mut addresses = ep.addresses.clone();
        addresses.sort();
        let target = ep.target_ref.as_ref();
        EndpointId {
            addresses,
            hostname: ep.hostname.clone().unwrap_or_default(),
            namespace: target.and_then(|t| t.namespace.clone()).unwrap_or_default(),
            name: target.and_then(|t| t.name.clone()).unwrap_or_default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Slice {
    address_type: &'static str,
    ports: PortKey,
    endpoints: Vec<Endpoint>,
    labels: BTreeMap<String, String>,
    /// UID of the Service that owns it (its ownerReference).
    owner_uid: String,
}

#[derive(Debug, Default)]
struct ServiceSlices {
    /// Slice name → slice, as last written.
    slices: BTreeMap<String, Slice>,
    /// Feeds the deterministic name suffixes.
    created: u64,
}

/// The controller's memory of the slices it wrote, per Service.
#[derive(Debug, Default)]
pub(super) struct SliceController {
    /// (namespace, service) → its slices.
    services: HashMap<(String, String), ServiceSlices>,
    /// (namespace, slice name) → service name, for every slice written.
    names: HashMap<(String, String), String>,
}

/// A slice in the making during one reconcile: `name` is `None` until it exists.
struct Draft {
    name: Option<String>,
    slice: Slice,
}

impl SliceController {
    /// Forget a slice that was deleted behind the controller's back; returns its Service so the
    /// caller can reconcile it (upstream re-syncs the owning Service on a managed slice's deletion).
    pub(super) fn forget_slice(&mut self, ns: &str, name: &str) -> Option<String> {
        let svc = self.names.remove(&(ns.to_string(), name.to_string()))?;
        if let Some(s) = self.services.get_mut(&(ns.to_string(), svc.clone())) {
            s.slices.remove(name);
        }
        Some(svc)
    }

    /// The Service is gone: delete all of its slices.
    pub(super) fn delete_service(&mut self, ns: &str, svc: &str) -> Vec<Write> {
        let Some(state) = self.services.remove(&(ns.to_string(), svc.to_string())) else {
            return Vec::new();
        };
        state
            .slices
            .into_keys()
            .map(|name| {
                self.names.remove(&(ns.to_string(), name.clone()));
                delete_write(ns, name)
            })
            .collect()
    }

    pub(super) fn reconcile(&mut self, input: &ServiceInputs<'_>) -> Vec<Write> {
        let ns = input.namespace;
        let key = (ns.to_string(), input.name.to_string());
        let state = self.services.entry(key).or_default();
        let labels = slice_labels(input.name, input.svc);
        let mut to_create: Vec<Draft> = Vec::new();
        let mut to_update: Vec<(String, Slice)> = Vec::new();
        let mut to_delete: Vec<String> = Vec::new();

        let families = address_types(input);
        // Slices of an address type the Service no longer has are deleted outright.
        for (name, slice) in &state.slices {
            if !families.contains(&slice.address_type) {
                to_delete.push(name.clone());
            }
        }
        for family in families {
            let existing: Vec<(&String, &Slice)> = state
                .slices
                .iter()
                .filter(|(_, s)| s.address_type == family)
                .collect();
            let mut fam_create = Vec::new();
            let mut fam_update = Vec::new();
            let mut fam_delete = Vec::new();
            let mut by_ports: BTreeMap<PortKey, Vec<(&String, &Slice)>> = BTreeMap::new();
            for (name, slice) in &existing {
                if slice.owner_uid == input.svc.uid {
                    by_ports
                        .entry(slice.ports.clone())
                        .or_default()
                        .push((name, slice));
                } else {
                    fam_delete.push((*name).clone());
                }
            }
            let desired = desired_endpoints(input, family);
            for (ports, endpoints) in desired.iter() {
                let current = by_ports.get(ports).map(Vec::as_slice).unwrap_or(&[]);
                let (c, u, d) = reconcile_port_group(current, endpoints.clone(), &labels);
                fam_create.extend(c.into_iter().map(|mut slice| {
                    slice.address_type = family;
                    slice.ports = ports.clone();
                    slice.owner_uid = input.svc.uid.clone();
                    Draft { name: None, slice }
                }));
                fam_update.extend(u);
                fam_delete.extend(d);
            }
            for (ports, slices) in &by_ports {
                if !desired.contains_key(ports) {
                    fam_delete.extend(slices.iter().map(|(n, _)| (*n).clone()));
                }
            }
            // A Service with no endpoints keeps one empty placeholder slice per address type.
            if existing.len() == fam_delete.len() && fam_create.is_empty() {
                let placeholder = Slice {
                    address_type: family,
                    ports: Vec::new(),
                    endpoints: Vec::new(),
                    labels: labels.clone(),
                    owner_uid: input.svc.uid.clone(),
                };
                let keep = fam_delete.len() == 1
                    && state.slices.get(&fam_delete[0]).is_some_and(|s| {
                        s.ports.is_empty()
                            && s.endpoints.is_empty()
                            && s.labels == labels
                            && s.owner_uid == input.svc.uid
                    });
                if keep {
                    fam_delete.clear();
                } else {
                    fam_create.push(Draft {
                        name: None,
                        slice: placeholder,
                    });
                }
            }
            to_create.extend(fam_create);
            to_update.extend(fam_update);
            to_delete.extend(fam_delete);
        }

        // finalize: turn a create plus a delete of the same address type into one update that
        // reuses the doomed slice's name.
        let mut i = 0;
        while i < to_delete.len() && !to_create.is_empty() {
            let doomed = &state.slices[&to_delete[i]];
            let last = to_create.last().expect("checked non-empty");
            if doomed.address_type == last.slice.address_type && doomed.owner_uid == input.svc.uid {
                let mut draft = to_create.pop().expect("checked non-empty");
                let name = to_delete.remove(i);
                draft.name = Some(name);
                to_update.push((draft.name.clone().expect("just set"), draft.slice));
            } else {
                i += 1;
            }
        }

        let mut writes = Vec::new();
        for mut draft in to_create {
            let name = self.next_name(ns, input.name);
            draft.name = Some(name);
            let state = self
                .services
                .get_mut(&(ns.to_string(), input.name.to_string()))
                .expect("entry created above");
            let name = draft.name.expect("just set");
            writes.push(put_write(
                ns,
                input.name,
                &input.svc.uid,
                &name,
                &draft.slice,
            ));
            state.slices.insert(name, draft.slice);
        }
        let state = self
            .services
            .get_mut(&(ns.to_string(), input.name.to_string()))
            .expect("entry created above");
        for (name, slice) in to_update {
            if state.slices.get(&name) == Some(&slice) {
                continue;
            }
            writes.push(put_write(ns, input.name, &input.svc.uid, &name, &slice));
            state.slices.insert(name, slice);
        }
        for name in to_delete {
            state.slices.remove(&name);
            self.names.remove(&(ns.to_string(), name.clone()));
            writes.push(delete_write(ns, name));
        }
        writes
    }

    /// `<service>-<5 chars>` like apimachinery's generateName, deterministic from a per-Service
    /// counter, and unique among the namespace's slices.
    fn next_name(&mut self, ns: &str, svc: &str) -> String {
        let prefix = generate_name(svc);
        let state = self
            .services
            .get_mut(&(ns.to_string(), svc.to_string()))
            .expect("entry exists during reconcile");
        loop {
            state.created += 1;
            let mut h = fnv1a(ns.as_bytes()) ^ fnv1a(svc.as_bytes()).rotate_left(17);
            h = splitmix64(h ^ state.created);
            let suffix: String = (0..5)
                .map(|i| {
                    let idx = ((h >> (i * 8)) % NAME_ALPHABET.len() as u64) as usize;
                    char::from(NAME_ALPHABET[idx])
                })
                .collect();
            let name = format!("{prefix}{suffix}");
            let key = (ns.to_string(), name.clone());
            if let std::collections::hash_map::Entry::Vacant(e) = self.names.entry(key) {
                e.insert(svc.to_string());
                return name;
            }
        }
    }
}

/// One port group's step 1–3 of `reconcileByPortMapping`. Returns (slices to create, slices to
/// update by name, slice names to delete).
fn reconcile_port_group(
    existing: &[(&String, &Slice)],
    mut desired: BTreeMap<EndpointId, Endpoint>,
    labels: &BTreeMap<String, String>,
) -> (Vec<Slice>, Vec<(String, Slice)>, Vec<String>) {
    let mut to_update: Vec<(String, Slice)> = Vec::new();
    let mut unchanged: Vec<(String, &Slice)> = Vec::new();
    let mut to_delete = Vec::new();

    // 1. Keep desired endpoints where they are, refresh changed ones, drop the rest.
    for (name, slice) in existing {
        let mut kept = Vec::with_capacity(slice.endpoints.len());
        let mut changed = false;
        for ep in &slice.endpoints {
            if let Some(want) = desired.remove(&EndpointId::of(ep)) {
                changed |= &want != ep;
                kept.push(want);
            }
        }
        if changed || kept.len() != slice.endpoints.len() {
            if kept.is_empty() {
                to_delete.push((*name).clone());
            } else {
                let mut s = (*slice).clone();
                s.endpoints = kept;
                s.labels = labels.clone();
                to_update.push(((*name).clone(), s));
            }
        } else if &slice.labels != labels {
            let mut s = (*slice).clone();
            s.labels = labels.clone();
            to_update.push(((*name).clone(), s));
        } else {
            unchanged.push(((*name).clone(), *slice));
        }
    }

    // 2. Top up the slices that are being rewritten anyway, fullest first.
    if !desired.is_empty() && !to_update.is_empty() {
        to_update.sort_by_key(|s| std::cmp::Reverse(s.1.endpoints.len()));
        for (_, slice) in &mut to_update {
            while slice.endpoints.len() < MAX_ENDPOINTS_PER_SLICE {
                let Some((_, ep)) = desired.pop_first() else {
                    break;
                };
                slice.endpoints.push(ep);
            }
        }
    }

    // 3. Put what is left into the unchanged slice it fills best, else into new slices.
    let mut to_create = Vec::new();
    while !desired.is_empty() {
        let mut fill: Option<(String, Slice)> = None;
        if desired.len() < MAX_ENDPOINTS_PER_SLICE
            && let Some(idx) = slice_to_fill(&unchanged, desired.len())
        {
            let (name, s) = unchanged.remove(idx);
            fill = Some((name, s.clone()));
        }
        let (name, mut slice) = fill.map_or_else(
            || {
                (
                    None,
                    Slice {
                        address_type: IPV4,
                        ports: Vec::new(),
                        endpoints: Vec::new(),
                        labels: labels.clone(),
                        owner_uid: String::new(),
                    },
                )
            },
            |(n, s)| (Some(n), s),
        );
        while slice.endpoints.len() < MAX_ENDPOINTS_PER_SLICE {
            let Some((_, ep)) = desired.pop_first() else {
                break;
            };
            slice.endpoints.push(ep);
        }
        match name {
            Some(n) => to_update.push((n, slice)),
            None => to_create.push(slice),
        }
    }
    (to_create, to_update, to_delete)
}

/// `getSliceToFill`: the slice that ends up closest to full after taking `n` endpoints.
fn slice_to_fill(slices: &[(String, &Slice)], n: usize) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, (_, s)) in slices.iter().enumerate() {
        let Some(room) = MAX_ENDPOINTS_PER_SLICE.checked_sub(n + s.endpoints.len()) else {
            continue;
        };
        if best.is_none_or(|(_, r)| room < r) {
            best = Some((i, room));
            if room == 0 {
                break;
            }
        }
    }
    best.map(|(i, _)| i)
}

/// `getAddressTypesForService`, with the apiserver's defaulting filled in: `spec.ipFamilies` when
/// set, else the cluster IP's family, else (a headless Service nobody defaulted) the family of its
/// pods' primary IPs, IPv4 when there are none.
fn address_types(input: &ServiceInputs<'_>) -> Vec<&'static str> {
    let mut out = Vec::new();
    for f in &input.svc.ip_families {
        let t = if f == "IPv6" { IPV6 } else { IPV4 };
        if !out.contains(&t) {
            out.push(t);
        }
    }
    if !out.is_empty() {
        return out;
    }
    if input.svc.is_ip_set() {
        return vec![if is_ipv6(&input.svc.cluster_ip) {
            IPV6
        } else {
            IPV4
        }];
    }
    let v6 = input
        .pods
        .iter()
        .find_map(|(_, p)| p.ips.first())
        .is_some_and(|ip| is_ipv6(ip));
    vec![if v6 { IPV6 } else { IPV4 }]
}

/// The endpoints the Service should have for one address type, grouped by port set.
fn desired_endpoints(
    input: &ServiceInputs<'_>,
    family: &'static str,
) -> BTreeMap<PortKey, BTreeMap<EndpointId, Endpoint>> {
    let mut out: BTreeMap<PortKey, BTreeMap<EndpointId, Endpoint>> = BTreeMap::new();
    let svc = input.svc;
    for (name, pod) in &input.pods {
        // Terminating pods stay in slices (with terminating=true); terminal or IP-less ones do not.
        if !pod.should_be_in_endpoints(true) {
            continue;
        }
        let node_zone = input.nodes.get(&pod.node_name);
        // A pod on an unknown node is skipped until the node shows up, unless the Service publishes
        // not-ready addresses anyway.
        if node_zone.is_none() && !svc.publish_not_ready {
            continue;
        }
        let ep = pod_to_endpoint(
            input.namespace,
            input.name,
            name,
            pod,
            node_zone.cloned().flatten(),
            svc,
            family,
        );
        if ep.addresses.is_empty() {
            continue;
        }
        let ports = endpoint_ports(svc, pod);
        out.entry(ports)
            .or_default()
            .insert(EndpointId::of(&ep), ep);
    }
    out
}

/// `getEndpointPorts`: one entry per Service port the pod can serve.
fn endpoint_ports(svc: &ServiceView, pod: &PodView) -> PortKey {
    svc.ports
        .iter()
        .filter_map(|sp| {
            let port = pod.find_port(sp)?;
            Some((
                sp.name.clone().unwrap_or_default(),
                port,
                sp.protocol.clone().unwrap_or_else(|| "TCP".into()),
                sp.app_protocol.clone(),
            ))
        })
        .collect()
}

/// `podToEndpoint`.
fn pod_to_endpoint(
    ns: &str,
    svc_name: &str,
    name: &str,
    pod: &PodView,
    zone: Option<String>,
    svc: &ServiceView,
    family: &'static str,
) -> Endpoint {
    let serving = pod.ready;
    let terminating = pod.terminating;
    // "ready" is never true for a terminating pod unless publishNotReadyAddresses is set.
    let ready = svc.publish_not_ready || (serving && !terminating);
    let addresses = pod
        .ips
        .iter()
        .filter(|ip| is_ipv6(ip) == (family == IPV6))
        .cloned()
        .collect();
    Endpoint {
        addresses,
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some(ns.to_string()),
            name: Some(name.to_string()),
            uid: Some(pod.uid.clone()),
            ..Default::default()
        }),
        node_name: Some(pod.node_name.clone()).filter(|n| !n.is_empty()),
        zone,
        hostname: should_set_hostname(pod, svc_name).then(|| pod.hostname.clone()),
        ..Default::default()
    }
}

/// `ShouldSetHostname`: the pod names a hostname and its subdomain is this Service.
pub(super) fn should_set_hostname(pod: &PodView, svc_name: &str) -> bool {
    !pod.hostname.is_empty() && pod.subdomain == svc_name
}

/// `setEndpointSliceLabels`: the Service's labels minus the reserved ones, plus the service-name,
/// managed-by and (for Services without a cluster IP) headless labels.
fn slice_labels(svc_name: &str, svc: &ServiceView) -> BTreeMap<String, String> {
    let mut labels = svc.copied_labels();
    labels.insert(LABEL_SERVICE_NAME.into(), svc_name.to_string());
    labels.insert(LABEL_MANAGED_BY.into(), CONTROLLER_NAME.into());
    labels
}

/// `getEndpointSlicePrefix` plus apiserver generateName truncation (base cut to 58 characters).
fn generate_name(svc: &str) -> String {
    let base = format!("{svc}-");
    let cut = base.char_indices().nth(58).map_or(base.len(), |(i, _)| i);
    base[..cut].to_string()
}

fn put_write(ns: &str, svc: &str, svc_uid: &str, name: &str, slice: &Slice) -> Write {
    Write::Put(Object::EndpointSlice(EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            generate_name: Some(generate_name(svc)),
            namespace: Some(ns.to_string()),
            labels: Some(slice.labels.clone()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: svc.to_string(),
                uid: svc_uid.to_string(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        address_type: slice.address_type.to_string(),
        endpoints: slice.endpoints.clone(),
        ports: (!slice.ports.is_empty()).then(|| {
            slice
                .ports
                .iter()
                .map(|(name, port, protocol, app_protocol)| EndpointPort {
                    name: Some(name.clone()),
                    port: Some(*port),
                    protocol: Some(protocol.clone()),
                    app_protocol: app_protocol.clone(),
                })
                .collect()
        }),
    }))
}

fn delete_write(ns: &str, name: String) -> Write {
    Write::Delete {
        kind: Kind::EndpointSlice,
        namespace: Some(ns.to_string()),
        name,
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::super::fixtures::*;
    use super::super::{CONTROLLER_NAME, EndpointsControllers, LABEL_HEADLESS};
    use crate::kind::{Kind, Object, Write};

    fn ep_names(s: &k8s_openapi::api::discovery::v1::EndpointSlice) -> Vec<String> {
        let mut v: Vec<String> = s
            .endpoints
            .iter()
            .map(|e| e.target_ref.as_ref().unwrap().name.clone().unwrap())
            .collect();
        v.sort();
        v
    }

    fn setup(
        svc: k8s_openapi::api::core::v1::Service,
        pods: Vec<Object>,
    ) -> (EndpointsControllers, Store) {
        let mut c = EndpointsControllers::new();
        let mut store = Store::default();
        let mut objs = nodes();
        objs.push(Object::Service(svc));
        objs.extend(pods);
        store.apply(&c.on_puts(objs.iter()));
        (c, store)
    }

    #[test]
    fn slices_carry_service_labels_owner_and_endpoint_details() {
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let (_, store) = setup(svc, mk_pods("web", 3));
        let slices = store.slices();
        assert_eq!(slices.len(), 1);
        let s = slices[0];
        let labels = s.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/service-name"], "web");
        assert_eq!(
            labels["endpointslice.kubernetes.io/managed-by"],
            CONTROLLER_NAME
        );
        assert_eq!(labels["team"], "a", "service labels are mirrored");
        assert!(!labels.contains_key(LABEL_HEADLESS));
        let name = s.metadata.name.as_ref().unwrap();
        assert!(
            name.starts_with("web-") && name.len() == "web-".len() + 5,
            "{name}"
        );
        assert_eq!(s.metadata.generate_name.as_deref(), Some("web-"));
        let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Service", "web", "uid-svc-web")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(s.address_type, "IPv4");
        let port = &s.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.port, port.protocol.as_deref()),
            (Some("http"), Some(8080), Some("TCP"))
        );
        let ep = s
            .endpoints
            .iter()
            .find(|e| e.target_ref.as_ref().unwrap().name.as_deref() == Some("p1"))
            .unwrap();
        assert_eq!(ep.addresses, ["10.1.0.2"]);
        assert_eq!(ep.node_name.as_deref(), Some("n1"));
        assert_eq!(ep.zone.as_deref(), Some("z-b"));
        assert_eq!(
            ep.target_ref.as_ref().unwrap().uid.as_deref(),
            Some("uid-p1")
        );
        assert_eq!(ep.target_ref.as_ref().unwrap().kind.as_deref(), Some("Pod"));
        let c = ep.conditions.as_ref().unwrap();
        assert_eq!(
            (c.ready, c.serving, c.terminating),
            (Some(true), Some(true), Some(false))
        );
        assert_eq!(ep.hostname, None);
    }

    #[test]
    fn named_target_port_is_resolved_per_pod_and_endpoints_are_grouped_by_port_set() {
        let svc = mk_service(
            "api",
            &[("app", "api")],
            vec![svc_port("web", 80, IntOrString::String("http".into()))],
        );
        let mut lacking = mk_pod("c", "api", "10.1.0.3", "n0", 1);
        lacking.spec.as_mut().unwrap().containers[0].ports = None;
        let pods = vec![
            Object::Pod(mk_pod("a", "api", "10.1.0.1", "n0", 8080)),
            Object::Pod(mk_pod("b", "api", "10.1.0.2", "n1", 9090)),
            Object::Pod(mk_pod("a2", "api", "10.1.0.4", "n1", 8080)),
            Object::Pod(lacking),
        ];
        let (_, store) = setup(svc, pods);
        let mut groups: Vec<(Option<i32>, Vec<String>)> = store
            .slices()
            .iter()
            .map(|s| (s.ports.as_ref().map(|p| p[0].port.unwrap()), ep_names(s)))
            .collect();
        groups.sort();
        assert_eq!(
            groups,
            vec![
                (None, vec!["c".to_string()]),
                (Some(8080), vec!["a".to_string(), "a2".to_string()]),
                (Some(9090), vec!["b".to_string()]),
            ]
        );
        let store_ep = store.endpoints("api").unwrap();
        let subsets = store_ep.subsets.as_ref().unwrap();
        assert_eq!(
            subsets.len(),
            2,
            "the pod without the port is not in Endpoints"
        );
    }

    #[test]
    fn not_ready_and_terminating_pods_get_the_upstream_conditions() {
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("", 80, IntOrString::Int(8080))],
        );
        let mut not_ready = mk_pod("nr", "web", "10.1.0.1", "n0", 8080);
        set_ready(&mut not_ready, false);
        let mut terminating = mk_pod("t", "web", "10.1.0.2", "n0", 8080);
        set_terminating(&mut terminating);
        let (mut c, mut store) = setup(
            svc.clone(),
            vec![Object::Pod(not_ready), Object::Pod(terminating)],
        );
        let cond = |store: &Store, pod: &str| {
            let s = store.slices()[0];
            let e = s
                .endpoints
                .iter()
                .find(|e| e.target_ref.as_ref().unwrap().name.as_deref() == Some(pod))
                .unwrap();
            let c = e.conditions.clone().unwrap();
            (c.ready.unwrap(), c.serving.unwrap(), c.terminating.unwrap())
        };
        assert_eq!(cond(&store, "nr"), (false, false, false));
        assert_eq!(cond(&store, "t"), (false, true, true));

        let mut publish = svc;
        publish.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        store.apply(&c.on_put(&Object::Service(publish)));
        assert_eq!(cond(&store, "nr"), (true, false, false));
        assert_eq!(cond(&store, "t"), (true, true, true));
    }

    #[test]
    fn pods_without_ip_or_in_a_terminal_phase_are_left_out_and_an_empty_service_keeps_a_placeholder()
     {
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let mut pending = mk_pod("pending", "web", "", "n0", 8080);
        pending.status.as_mut().unwrap().pod_ips = None;
        let mut done = mk_pod("done", "web", "10.1.0.9", "n0", 8080);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let (mut c, mut store) = setup(svc, vec![Object::Pod(pending), Object::Pod(done)]);
        let slices = store.slices();
        assert_eq!(slices.len(), 1);
        assert!(
            slices[0].endpoints.is_empty() && slices[0].ports.is_none(),
            "placeholder slice"
        );
        let placeholder = slices[0].metadata.name.clone();

        // The first real endpoint reuses the placeholder's name (finalize turns create+delete into
        // an update).
        let w = c.on_put(&Object::Pod(mk_pod("up", "web", "10.1.0.5", "n0", 8080)));
        assert_eq!(slice_writes(&w), 1);
        store.apply(&w);
        assert_eq!(store.slices()[0].metadata.name, placeholder);
        assert_eq!(ep_names(store.slices()[0]), ["up"]);
    }

    #[test]
    fn headless_services_get_slices_with_the_headless_label_and_pod_hostnames() {
        let mut svc = mk_service(
            "db",
            &[("app", "db")],
            vec![svc_port("pg", 5432, IntOrString::Int(5432))],
        );
        svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        let mut pod = mk_pod("db-0", "db", "10.1.0.1", "n0", 5432);
        let spec = pod.spec.as_mut().unwrap();
        spec.hostname = Some("db-0".into());
        spec.subdomain = Some("db".into());
        let (_, store) = setup(svc, vec![Object::Pod(pod)]);
        let s = store.slices()[0];
        assert_eq!(
            s.metadata
                .labels
                .as_ref()
                .unwrap()
                .get(LABEL_HEADLESS)
                .map(String::as_str),
            Some("")
        );
        assert_eq!(s.endpoints[0].hostname.as_deref(), Some("db-0"));
        let ep = store.endpoints("db").unwrap();
        assert_eq!(
            ep.metadata
                .labels
                .as_ref()
                .unwrap()
                .get(LABEL_HEADLESS)
                .map(String::as_str),
            Some("")
        );
        let addr = &ep.subsets.as_ref().unwrap()[0].addresses.as_ref().unwrap()[0];
        assert_eq!(addr.hostname.as_deref(), Some("db-0"));
    }

    #[test]
    fn services_without_a_selector_get_no_slices_and_no_endpoints() {
        let svc = mk_service(
            "external",
            &[],
            vec![svc_port("http", 80, IntOrString::Int(80))],
        );
        let (_, store) = setup(svc, mk_pods("external", 3));
        assert!(store.objects.is_empty());
    }

    #[test]
    fn a_thousand_and_one_pods_make_eleven_slices_of_at_most_a_hundred() {
        let svc = mk_service(
            "ds",
            &[("app", "ds")],
            vec![svc_port("metrics", 9100, IntOrString::Int(9100))],
        );
        let (_, store) = setup(svc, mk_pods("ds", 1001));
        let slices = store.slices();
        assert_eq!(slices.len(), 11);
        assert!(slices.iter().all(|s| s.endpoints.len() <= 100));
        assert_eq!(
            slices.iter().map(|s| s.endpoints.len()).sum::<usize>(),
            1001
        );
    }

    #[test]
    fn replacing_one_pod_rewrites_exactly_one_slice() {
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let (mut c, mut store) = setup(svc, mk_pods("web", 250));
        assert_eq!(store.slices().len(), 3);

        // A deletion updates the one slice holding the pod.
        let w = c.on_delete(Kind::Pod, Some("default"), "p17");
        assert_eq!(slice_writes(&w), 1);
        store.apply(&w);
        // Its replacement goes into a slice with room: one write, no new slice.
        let w = c.on_put(&Object::Pod(mk_pod(
            "p17-new", "web", "10.9.0.1", "n2", 8080,
        )));
        assert_eq!(slice_writes(&w), 1);
        store.apply(&w);
        assert_eq!(store.slices().len(), 3);

        // The same pod name with a new IP (a pod recreated in place) is also one write.
        let w = c.on_put(&Object::Pod(mk_pod("p200", "web", "10.9.0.2", "n0", 8080)));
        assert_eq!(slice_writes(&w), 1);
        store.apply(&w);
        // A readiness flip is one write; an unrelated pod change is none.
        let mut flap = mk_pod("p3", "web", "10.1.0.4", "n0", 8080);
        set_ready(&mut flap, false);
        assert_eq!(slice_writes(&c.on_put(&Object::Pod(flap))), 1);
        let mut annotated = mk_pod("p4", "web", "10.1.0.5", "n1", 8080);
        annotated.metadata.annotations = labels(&[("x", "y")]);
        assert!(c.on_put(&Object::Pod(annotated)).is_empty());
        let total: usize = store.slices().iter().map(|s| s.endpoints.len()).sum();
        assert_eq!(total, 250);
    }

    #[test]
    fn deleting_a_service_deletes_its_slices_and_endpoints() {
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let (mut c, mut store) = setup(svc, mk_pods("web", 150));
        assert_eq!(store.objects.len(), 3);
        let w = c.on_delete(Kind::Service, Some("default"), "web");
        assert_eq!(w.len(), 3);
        assert!(w.iter().all(|w| matches!(w, Write::Delete { .. })));
        store.apply(&w);
        assert!(store.objects.is_empty());
        // Pods of a deleted Service cause no writes.
        assert!(c.on_delete(Kind::Pod, Some("default"), "p1").is_empty());
    }

    #[test]
    fn a_deleted_managed_slice_is_written_again() {
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let (mut c, mut store) = setup(svc, mk_pods("web", 5));
        let name = store.slices()[0].metadata.name.clone().unwrap();
        store
            .objects
            .remove(&(Kind::EndpointSlice, "default".into(), name.clone()));
        let w = c.on_delete(Kind::EndpointSlice, Some("default"), &name);
        store.apply(&w);
        assert_eq!(ep_names(store.slices()[0]).len(), 5);
    }

    #[test]
    fn pods_on_unknown_nodes_wait_for_the_node_and_zones_follow_node_labels() {
        let mut c = EndpointsControllers::new();
        let mut store = Store::default();
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        store.apply(&c.on_put(&Object::Service(svc)));
        store.apply(&c.on_put(&Object::Pod(mk_pod("a", "web", "10.1.0.1", "late", 8080))));
        assert!(store.slices()[0].endpoints.is_empty());
        store.apply(&c.on_put(&mk_node("late", "z-x")));
        assert_eq!(store.slices()[0].endpoints[0].zone.as_deref(), Some("z-x"));
        let w = c.on_put(&mk_node("late", "z-y"));
        assert_eq!(slice_writes(&w), 1);
        store.apply(&w);
        assert_eq!(store.slices()[0].endpoints[0].zone.as_deref(), Some("z-y"));
        assert!(
            c.on_put(&mk_node("late", "z-y")).is_empty(),
            "an unchanged node writes nothing"
        );
    }

    #[test]
    fn ipv6_pods_get_ipv6_slices() {
        let mut svc = mk_service(
            "v6",
            &[("app", "v6")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let spec = svc.spec.as_mut().unwrap();
        spec.cluster_ip = Some("fd00::10".into());
        spec.ip_families = Some(vec!["IPv6".into()]);
        let (_, store) = setup(
            svc,
            vec![Object::Pod(mk_pod("a", "v6", "fd00::1:1", "n0", 8080))],
        );
        let s = store.slices()[0];
        assert_eq!(s.address_type, "IPv6");
        assert_eq!(s.endpoints[0].addresses, ["fd00::1:1"]);
    }

    #[test]
    fn bulk_feeding_reaches_the_same_state_as_one_by_one() {
        let svc = mk_service(
            "web",
            &[("app", "web")],
            vec![svc_port("http", 80, IntOrString::Int(8080))],
        );
        let (_, bulk) = setup(svc.clone(), mk_pods("web", 120));
        let mut c = EndpointsControllers::new();
        let mut one = Store::default();
        let mut objs = mk_pods("web", 120);
        objs.extend(nodes());
        objs.push(Object::Service(svc));
        for o in &objs {
            one.apply(&c.on_put(o));
        }
        let count = |s: &Store| {
            let mut v: Vec<Vec<String>> = s.slices().iter().map(|s| ep_names(s)).collect();
            v.iter_mut().for_each(|x| x.sort());
            v.into_iter().flatten().count()
        };
        assert_eq!(count(&bulk), count(&one));
        assert_eq!(bulk.endpoints("web"), one.endpoints("web"));
    }
}
