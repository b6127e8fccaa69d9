//! The reference for e2e tests: each job's HTTP SD body computed from scratch by
//! `herald_server::reference` over kube-sim's own state (`objects_json`) — independent of herald's
//! incremental index and its upstream.

#![allow(dead_code)] // each test binary uses a different subset

use herald_server::{JobSpec, Object, Reference, WatchKind};
use kube_sim::{Kind, SimHandle};

/// Every object of the kinds herald watches, as kube-sim holds them now.
pub struct ClusterState(Reference);

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
        let mut r = Reference::default();
        for kind in WatchKind::ALL {
            for v in sim.objects_json(sim_kind(kind)) {
                r.insert(Object::decode(kind, v).expect("kube-sim objects decode"));
            }
        }
        ClusterState(r)
    }

    /// The body herald should serve for `spec` (herald_server::reference, from scratch).
    pub fn expected_body(&self, spec: &JobSpec) -> Vec<u8> {
        self.0.expected_body(spec)
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
