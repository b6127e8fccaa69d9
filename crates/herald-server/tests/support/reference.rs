//! The reference for e2e tests: each job's HTTP SD body computed from scratch, with herald-core, over
//! kube-sim's own state (`objects_json`) — independent of herald's incremental index and its upstream.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;

use herald_core::{Lookup, Role, TargetGroup};
use herald_server::{JobFilter, JobSpec, Object, ObjectKey, WatchKind};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube_sim::{Kind, SimHandle};

/// Every object of the kinds herald watches, as kube-sim holds them now.
pub struct ClusterState {
    objects: BTreeMap<WatchKind, BTreeMap<ObjectKey, Object>>,
}

fn sim_kind(kind: WatchKind) -> Kind {
    match kind {
        WatchKind::Namespace => Kind::Namespace,
        WatchKind::Node => Kind::Node,
        WatchKind::Service => Kind::Service,
        WatchKind::Pod => Kind::Pod,
        WatchKind::Endpoints => Kind::Endpoints,
        WatchKind::EndpointSlice => Kind::EndpointSlice,
        WatchKind::Ingress => Kind::Ingress,
    }
}

impl ClusterState {
    pub fn read(sim: &SimHandle) -> ClusterState {
        let objects = WatchKind::ALL
            .into_iter()
            .map(|kind| {
                let objs = sim
                    .objects_json(sim_kind(kind))
                    .into_iter()
                    .map(|v| {
                        let o = Object::decode(kind, v).expect("kube-sim objects decode");
                        (o.key(), o)
                    })
                    .collect();
                (kind, objs)
            })
            .collect();
        ClusterState { objects }
    }

    fn get(&self, kind: WatchKind, ns: &str, name: &str) -> Option<&Object> {
        self.objects.get(&kind)?.get(&ObjectKey::new(ns, name))
    }

    /// The body herald should serve for `spec`: groups in object-key order, as HTTP SD JSON.
    pub fn expected_body(&self, spec: &JobSpec) -> Vec<u8> {
        let lookup = RefLookup {
            state: self,
            filter: &spec.filter,
        };
        let primary = WatchKind::primary(spec.role);
        // Encoded in one go by herald-core, not through herald's fragments.
        let entries: Vec<herald_core::HttpSdEntry> = self.objects[&primary]
            .values()
            .filter(|o| spec.filter.admits(o))
            .flat_map(|o| herald_core::http_sd_entries(&group(spec, o, &lookup)))
            .collect();
        herald_core::encode_http_sd(&entries)
    }
}

fn group(spec: &JobSpec, obj: &Object, lookup: &dyn Lookup) -> TargetGroup {
    let a = spec.attach;
    match (spec.role, obj) {
        (Role::Pod, Object::Pod(o)) => herald_core::pod_group(o, lookup, a),
        (Role::Service, Object::Service(o)) => herald_core::service_group(o, lookup, a),
        (Role::Endpoints, Object::Endpoints(o)) => herald_core::endpoints_group(o, lookup, a),
        (Role::EndpointSlice, Object::EndpointSlice(o)) => {
            herald_core::endpointslice_group(o, lookup, a)
        }
        (Role::Node, Object::Node(o)) => herald_core::node_group(o, lookup, a),
        (Role::Ingress, Object::Ingress(o)) => herald_core::ingress_group(o, lookup, a),
        _ => panic!("object of the wrong kind for the job"),
    }
}

struct RefLookup<'a> {
    state: &'a ClusterState,
    filter: &'a JobFilter,
}

impl RefLookup<'_> {
    fn find(&self, kind: WatchKind, ns: &str, name: &str) -> Option<&Object> {
        self.state
            .get(kind, ns, name)
            .filter(|o| self.filter.admits(o))
    }
}

impl Lookup for RefLookup<'_> {
    fn pod(&self, ns: &str, name: &str) -> Option<&Pod> {
        match self.find(WatchKind::Pod, ns, name)? {
            Object::Pod(p) => Some(p),
            _ => None,
        }
    }
    fn service(&self, ns: &str, name: &str) -> Option<&Service> {
        match self.find(WatchKind::Service, ns, name)? {
            Object::Service(s) => Some(s),
            _ => None,
        }
    }
    fn node(&self, name: &str) -> Option<&Node> {
        match self.find(WatchKind::Node, "", name)? {
            Object::Node(n) => Some(n),
            _ => None,
        }
    }
    fn namespace(&self, name: &str) -> Option<&Namespace> {
        match self.find(WatchKind::Namespace, "", name)? {
            Object::Namespace(n) => Some(n),
            _ => None,
        }
    }
}

/// A short description of how two HTTP SD bodies differ, for assertion messages.
pub fn describe_difference(got: &[u8], want: &[u8]) -> String {
    let parse =
        |b: &[u8]| -> Vec<serde_json::Value> { serde_json::from_slice(b).unwrap_or_default() };
    let (g, w) = (parse(got), parse(want));
    let first = g.iter().zip(&w).position(|(a, b)| a != b);
    format!(
        "got {} entries, want {}; first difference at {:?}: got {} want {}",
        g.len(),
        w.len(),
        first,
        first
            .and_then(|i| g.get(i))
            .map_or("-".into(), |v| v.to_string()),
        first
            .and_then(|i| w.get(i))
            .map_or("-".into(), |v| v.to_string()),
    )
}
