//! Test support shared by the role tests: an in-memory `Lookup`, a label-set literal macro and fixtures
//! mirroring the `make*` helpers of prometheus/prometheus `discovery/kubernetes/*_test.go`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Namespace, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec,
    NodeStatus, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// A label set literal written like the Go tests' `model.LabelSet{"k": "v"}`.
macro_rules! ls {
    ($($k:literal : $v:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut m = $crate::target::LabelSet::new();
        $( m.insert(String::from($k), String::from($v)); )*
        m
    }};
}
pub(crate) use ls;

/// An in-memory `Lookup` over owned objects, the informer stores of the Go tests.
#[derive(Default)]
pub struct MapLookup {
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    pub nodes: Vec<Node>,
    pub namespaces: Vec<Namespace>,
    pub replica_sets: Vec<ReplicaSet>,
    pub jobs: Vec<Job>,
}

fn is(meta: &ObjectMeta, namespace: &str, name: &str) -> bool {
    meta.namespace.as_deref().unwrap_or("") == namespace && meta.name.as_deref() == Some(name)
}

impl MapLookup {
    pub fn pod(mut self, p: Pod) -> Self {
        self.pods.push(p);
        self
    }
    pub fn service(mut self, s: Service) -> Self {
        self.services.push(s);
        self
    }
    pub fn node(mut self, n: Node) -> Self {
        self.nodes.push(n);
        self
    }
    pub fn namespace(mut self, n: Namespace) -> Self {
        self.namespaces.push(n);
        self
    }
    pub fn replica_set(mut self, r: ReplicaSet) -> Self {
        self.replica_sets.push(r);
        self
    }
    pub fn job(mut self, j: Job) -> Self {
        self.jobs.push(j);
        self
    }
}

impl crate::target::Lookup for MapLookup {
    fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pods.iter().find(|p| is(&p.metadata, namespace, name))
    }
    fn service(&self, namespace: &str, name: &str) -> Option<&Service> {
        self.services
            .iter()
            .find(|s| is(&s.metadata, namespace, name))
    }
    fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| is(&n.metadata, "", name))
    }
    fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.iter().find(|n| is(&n.metadata, "", name))
    }
    fn replica_set(&self, namespace: &str, name: &str) -> Option<&ReplicaSet> {
        self.replica_sets
            .iter()
            .find(|r| is(&r.metadata, namespace, name))
    }
    fn job(&self, namespace: &str, name: &str) -> Option<&Job> {
        self.jobs.iter().find(|j| is(&j.metadata, namespace, name))
    }
}

/// `Some(map)` from pairs; `None` for no pairs, as Go's nil map.
pub fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    if pairs.is_empty() {
        return None;
    }
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

pub fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

pub fn mk_meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        name: s(name),
        ..ObjectMeta::default()
    }
}

/// A controller owner reference (`Controller: true`).
pub fn mk_controller(kind: &str, name: &str) -> OwnerReference {
    OwnerReference {
        kind: kind.to_owned(),
        name: name.to_owned(),
        controller: Some(true),
        ..OwnerReference::default()
    }
}

/// `makeNode`: one InternalIP address, kubelet on 10250.
pub fn mk_node(
    name: &str,
    address: &str,
    provider_id: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    conditions: &[(&str, &str)],
) -> Node {
    Node {
        metadata: ObjectMeta {
            labels: map(labels),
            annotations: map(annotations),
            ..mk_meta("", name)
        },
        spec: Some(NodeSpec {
            provider_id: s(provider_id),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: address.into(),
            }]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
            }),
            conditions: (!conditions.is_empty()).then(|| {
                conditions
                    .iter()
                    .map(|(t, st)| NodeCondition {
                        type_: (*t).into(),
                        status: (*st).into(),
                        ..NodeCondition::default()
                    })
                    .collect()
            }),
            ..NodeStatus::default()
        }),
    }
}

/// `makeNamespace`.
pub fn mk_namespace(
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            labels: map(labels),
            annotations: map(annotations),
            ..mk_meta("", name)
        },
        ..Namespace::default()
    }
}
