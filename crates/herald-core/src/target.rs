//! What discovery produces: Prometheus target groups, and the lookups a role needs to build them.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};

/// A set of labels. Sorted, so encodings and hashes are stable.
pub type LabelSet = BTreeMap<String, String>;

/// One target group, as Prometheus's `targetgroup.Group`: per-target labels (each with `__address__`),
/// plus labels common to the group. `source` is the group's key (e.g. `pod/ns/name`), as in Prometheus.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetGroup {
    pub source: String,
    pub targets: Vec<LabelSet>,
    pub labels: LabelSet,
}

/// A target whose pod labels (`podLabels` of Prometheus's endpoints roles) are shared with the other
/// targets of the same pod in its group instead of copied into each: built once per pod, and a store
/// can intern them once. Its own labels and the pod's never share a name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SharedTarget {
    pub own: LabelSet,
    pub pod: Option<std::sync::Arc<LabelSet>>,
}

impl SharedTarget {
    /// The target's whole label set.
    pub fn flatten(self) -> LabelSet {
        let mut ls = self.own;
        if let Some(pod) = self.pod {
            ls.extend(pod.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        ls
    }
}

/// A [`TargetGroup`] whose targets are [`SharedTarget`]s: what the endpoints roles build.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SharedGroup {
    pub source: String,
    pub targets: Vec<SharedTarget>,
    pub labels: LabelSet,
}

impl SharedGroup {
    /// The group as Prometheus builds it, every target with its pod's labels.
    pub fn flatten(self) -> TargetGroup {
        TargetGroup {
            source: self.source,
            targets: self
                .targets
                .into_iter()
                .map(SharedTarget::flatten)
                .collect(),
            labels: self.labels,
        }
    }
}

/// The `role` of a `kubernetes_sd_configs` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Node,
    Service,
    Pod,
    Endpoints,
    EndpointSlice,
    Ingress,
}

impl Role {
    pub const ALL: [Role; 6] = [
        Role::Node,
        Role::Service,
        Role::Pod,
        Role::Endpoints,
        Role::EndpointSlice,
        Role::Ingress,
    ];

    /// The name used in configs (`role: endpointslice`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Service => "service",
            Role::Pod => "pod",
            Role::Endpoints => "endpoints",
            Role::EndpointSlice => "endpointslice",
            Role::Ingress => "ingress",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// `attach_metadata` of a `kubernetes_sd_configs` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct AttachMetadata {
    pub node: bool,
    pub namespace: bool,
}

/// Read access to the other objects a role consults while building an object's targets
/// (the endpoints roles read Pods, Services and Nodes; attach_metadata reads Nodes and Namespaces).
pub trait Lookup {
    fn pod(&self, namespace: &str, name: &str) -> Option<&Pod>;
    /// `podLabels` of `pod`, which `build` computes from the pod alone (no lookups). A lookup that
    /// holds its pods for a while may keep what `build` returned and hand the same labels to every
    /// group built from that pod — the pod role's group and each endpoint target resolving to it — so
    /// they are built, and can be interned, once. Defaults to building them each time.
    fn memo_pod_labels(
        &self,
        _pod: &Pod,
        build: &dyn Fn() -> LabelSet,
    ) -> std::sync::Arc<LabelSet> {
        std::sync::Arc::new(build())
    }
    fn service(&self, namespace: &str, name: &str) -> Option<&Service>;
    fn node(&self, name: &str) -> Option<&Node>;
    fn namespace(&self, name: &str) -> Option<&Namespace>;
    /// The ReplicaSet owning a pod, read only with `OwnerMetadata::deployment`. Defaults to none so
    /// lookups that do not watch ReplicaSets need not implement it.
    fn replica_set(&self, _namespace: &str, _name: &str) -> Option<&ReplicaSet> {
        None
    }
    /// The Job owning a pod, read only with `OwnerMetadata::cronjob`. Defaults to none.
    fn job(&self, _namespace: &str, _name: &str) -> Option<&Job> {
        None
    }
}

/// The pod-owner part of `attach_metadata` (`deployment`, `job`, `cronjob`), kept apart from
/// `AttachMetadata` so that type stays as it is. Prometheus (discovery/kubernetes/pod.go `podLabels`)
/// adds `__meta_kubernetes_pod_deployment_name`, `_job_name` and `_cronjob_name` with these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct OwnerMetadata {
    pub deployment: bool,
    pub job: bool,
    pub cronjob: bool,
}

/// A `Lookup` that finds nothing, for roles and tests that need none.
pub struct NoLookup;

impl Lookup for NoLookup {
    fn pod(&self, _: &str, _: &str) -> Option<&Pod> {
        None
    }
    fn service(&self, _: &str, _: &str) -> Option<&Service> {
        None
    }
    fn node(&self, _: &str) -> Option<&Node> {
        None
    }
    fn namespace(&self, _: &str) -> Option<&Namespace> {
        None
    }
}
