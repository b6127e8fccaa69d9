//! herald-core: pure discovery logic — Kubernetes objects in, Prometheus target groups out, exactly as
//! Prometheus's kubernetes_sd builds them; plus hashmod sharding, HTTP SD encoding and the job config.
//! No I/O.
//!
//! Behaviour follows prometheus/prometheus `discovery/kubernetes/` as of commit
//! d15adb9ad7e5d9fbde3a9a8f30200593a5a14d86 (main after v3.14.0 / v0.314.0-rc.0, VERSION 3.14.0;
//! 2026-08-21, "fix(deps): update module google.golang.org/protobuf to v1.36.12 (#19481)"): its Go
//! code and `*_test.go` cases were read and ported as tests, not copied.
//!
//! Where Prometheus's output depends on informer plumbing rather than on the objects (when a group is
//! re-sent, Go map iteration order), the builders here are the pure function of the objects and the
//! lookups at build time; the role modules mark those places with `NB:`.

pub mod allocation;
pub mod config;
pub mod httpsd;
pub mod istio;
pub mod labels;
pub mod monitor;
pub mod relabel;
pub mod roles;
pub mod shard;
pub mod slim;
pub mod target;

#[cfg(test)]
mod testing;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;

pub use config::{
    Config, ConfigError, IstioConfig, Job, KindRef, KubeApiConfig, MonitorsConfig, ServerConfig,
    TargetAllocatorConfig, parse_config,
};
pub use httpsd::{HttpSdEntry, JobRelabel, RelabelStop, encode_http_sd, http_sd_entries};
pub use relabel::{RelabelConfig, RelabelError, Relabeler};
pub use shard::hashmod;
pub use target::{
    AttachMetadata, LabelSet, Lookup, NoLookup, OwnerMetadata, Role, SharedGroup, SharedTarget,
    TargetGroup,
};

/// `role: pod` — see [`roles::pod::group`].
pub fn pod_group(pod: &Pod, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    roles::pod::group(pod, lookup, attach)
}

/// `role: pod`, the pod's labels shared by its targets — see [`roles::pod::shared_group_with_owners`].
pub fn pod_shared_group(pod: &Pod, lookup: &dyn Lookup, attach: AttachMetadata) -> SharedGroup {
    roles::pod::shared_group_with_owners(pod, lookup, attach, OwnerMetadata::default())
}

/// `role: service` — see [`roles::service::group`].
pub fn service_group(svc: &Service, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    roles::service::group(svc, lookup, attach)
}

/// `role: endpoints` — see [`roles::endpoints::group`].
pub fn endpoints_group(ep: &Endpoints, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    roles::endpoints::group(ep, lookup, attach)
}

/// `role: endpoints`, each pod's labels shared by its targets — see [`roles::endpoints::shared_group`].
pub fn endpoints_shared_group(
    ep: &Endpoints,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
) -> SharedGroup {
    roles::endpoints::shared_group(ep, lookup, attach, OwnerMetadata::default())
}

/// `role: endpointslice`, each pod's labels shared by its targets — see
/// [`roles::endpointslice::shared_group`].
pub fn endpointslice_shared_group(
    es: &EndpointSlice,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
) -> SharedGroup {
    roles::endpointslice::shared_group(es, lookup, attach, OwnerMetadata::default())
}

/// `role: endpointslice` — see [`roles::endpointslice::group`].
pub fn endpointslice_group(
    es: &EndpointSlice,
    lookup: &dyn Lookup,
    attach: AttachMetadata,
) -> TargetGroup {
    roles::endpointslice::group(es, lookup, attach)
}

/// `role: node` — see [`roles::node::group`].
pub fn node_group(node: &Node, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    roles::node::group(node, lookup, attach)
}

/// `role: ingress` — see [`roles::ingress::group`].
pub fn ingress_group(ing: &Ingress, lookup: &dyn Lookup, attach: AttachMetadata) -> TargetGroup {
    roles::ingress::group(ing, lookup, attach)
}
