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
            let desired_ports: Vec<PortKey> = desired.keys().cloned().collect();
            for (ports, endpoints) in desired {
                let current = by_ports.get(&ports).map(Vec::as_slice).unwrap_or(&[]);
                let (c, u, d) = reconcile_port_group(current, endpoints, &labels);
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
                if !desired_ports.contains(ports) {
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
