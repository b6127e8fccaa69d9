//! The kinds kube-sim serves: their API coordinates, and a typed object enum that the generator,
//! controllers and churn use to describe writes to the store.

use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, ServiceCIDR};
use serde::Serialize;

/// Every kind kube-sim stores. The order is the order `/sim/dump` lists them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Kind {
    Namespace,
    Node,
    ConfigMap,
    Service,
    Pod,
    Endpoints,
    EndpointSlice,
    Ingress,
    ServiceMonitor,
    PodMonitor,
    Prometheus,
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
    PeerAuthentication,
    /// `networking.k8s.io/v1` ServiceCIDR: the cluster's Service ranges (kube-proxy ≥ 1.33 watches them).
    ServiceCidr,
}

impl Kind {
    pub const ALL: [Kind; 17] = [
        Kind::Namespace,
        Kind::Node,
        Kind::ConfigMap,
        Kind::Service,
        Kind::Pod,
        Kind::Endpoints,
        Kind::EndpointSlice,
        Kind::Ingress,
        Kind::ServiceMonitor,
        Kind::PodMonitor,
        Kind::Prometheus,
        Kind::ClusterRole,
        Kind::ClusterRoleBinding,
        Kind::Role,
        Kind::RoleBinding,
        Kind::PeerAuthentication,
        Kind::ServiceCidr,
    ];

    /// API group ("" for core).
    pub fn group(self) -> &'static str {
        match self {
            Kind::EndpointSlice => "discovery.k8s.io",
            Kind::Ingress | Kind::ServiceCidr => "networking.k8s.io",
            Kind::ServiceMonitor | Kind::PodMonitor | Kind::Prometheus => "monitoring.coreos.com",
            Kind::ClusterRole | Kind::ClusterRoleBinding | Kind::Role | Kind::RoleBinding => {
                "rbac.authorization.k8s.io"
            }
            Kind::PeerAuthentication => "security.istio.io",
            _ => "",
        }
    }

    pub fn version(self) -> &'static str {
        "v1"
    }

    /// `apiVersion` as written in objects: `v1` or `group/v1`.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::ClusterRole | Kind::ClusterRoleBinding | Kind::Role | Kind::RoleBinding => {
                "rbac.authorization.k8s.io/v1"
            }
            Kind::PeerAuthentication => "security.istio.io/v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::Ingress | Kind::ServiceCidr => "networking.k8s.io/v1",
            Kind::ServiceMonitor | Kind::PodMonitor | Kind::Prometheus => {
                "monitoring.coreos.com/v1"
            }
            _ => "v1",
        }
    }

    /// The `kind` field.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Namespace => "Namespace",
            Kind::Node => "Node",
            Kind::ConfigMap => "ConfigMap",
            Kind::Service => "Service",
            Kind::Pod => "Pod",
            Kind::Endpoints => "Endpoints",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Ingress => "Ingress",
            Kind::ServiceMonitor => "ServiceMonitor",
            Kind::PodMonitor => "PodMonitor",
            Kind::Prometheus => "Prometheus",
            Kind::ClusterRole => "ClusterRole",
            Kind::ClusterRoleBinding => "ClusterRoleBinding",
            Kind::Role => "Role",
            Kind::RoleBinding => "RoleBinding",
            Kind::PeerAuthentication => "PeerAuthentication",
            Kind::ServiceCidr => "ServiceCIDR",
        }
    }

    /// The plural resource name used in URLs and in the meter's `resource` label.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Namespace => "namespaces",
            Kind::Node => "nodes",
            Kind::ConfigMap => "configmaps",
            Kind::Service => "services",
            Kind::Pod => "pods",
            Kind::Endpoints => "endpoints",
            Kind::EndpointSlice => "endpointslices",
            Kind::Ingress => "ingresses",
            Kind::ServiceMonitor => "servicemonitors",
            Kind::PodMonitor => "podmonitors",
            Kind::Prometheus => "prometheuses",
            Kind::ClusterRole => "clusterroles",
            Kind::ClusterRoleBinding => "clusterrolebindings",
            Kind::Role => "roles",
            Kind::RoleBinding => "rolebindings",
            Kind::PeerAuthentication => "peerauthentications",
            Kind::ServiceCidr => "servicecidrs",
        }
    }

    pub fn singular(self) -> &'static str {
        match self {
            Kind::Endpoints => "endpoints",
            Kind::Prometheus => "prometheus",
            k => {
                let p = k.plural();
                // every other plural here is the singular plus "s" or "es"
                if p.ends_with("sses") {
                    &p[..p.len() - 2]
                } else {
                    &p[..p.len() - 1]
                }
            }
        }
    }

    pub fn namespaced(self) -> bool {
        !matches!(
            self,
            Kind::Namespace
                | Kind::Node
                | Kind::ClusterRole
                | Kind::ClusterRoleBinding
                | Kind::ServiceCidr
        )
    }

    /// kubectl short names, as the real apiserver advertises them in discovery.
    pub fn short_names(self) -> &'static [&'static str] {
        match self {
            Kind::Namespace => &["ns"],
            Kind::Node => &["no"],
            Kind::ConfigMap => &["cm"],
            Kind::Service => &["svc"],
            Kind::Pod => &["po"],
            Kind::Endpoints => &["ep"],
            Kind::Ingress => &["ing"],
            Kind::ServiceMonitor => &["smon"],
            Kind::PodMonitor => &["pmon"],
            Kind::Prometheus => &["prom"],
            Kind::PeerAuthentication => &["pa"],
            Kind::EndpointSlice
            | Kind::ClusterRole
            | Kind::ClusterRoleBinding
            | Kind::Role
            | Kind::RoleBinding
            | Kind::ServiceCidr => &[],
        }
    }

    /// The kind's API description, as kube-face serves it.
    pub fn resource(self) -> kube_face::Resource {
        let name = if self.group().is_empty() {
            self.plural().to_string()
        } else {
            format!("{}.{}", self.plural(), self.group())
        };
        kube_face::Resource::builtin(&name).expect("every kube-sim kind is a kube-face built-in")
    }

    /// The kind at a position of `Kind::ALL`, which is also its id in kube-sim's catalog.
    pub fn from_id(id: kube_face::ResId) -> Kind {
        Kind::ALL[id]
    }

    pub fn id(self) -> kube_face::ResId {
        Kind::ALL
            .iter()
            .position(|k| *k == self)
            .expect("ALL lists every kind")
    }

    pub fn from_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == plural)
    }

    pub fn from_group_plural(group: &str, plural: &str) -> Option<Kind> {
        Kind::from_plural(plural).filter(|k| k.group() == group)
    }
}

/// A typed object to write into the store. Custom resources are kept as JSON.
// NB: Pod is by far the largest variant; objects are built once and moved into the store, so boxing
// them would only add indirection to every generator and controller.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Namespace(Namespace),
    Node(Node),
    ConfigMap(ConfigMap),
    Service(Service),
    Pod(Pod),
    Endpoints(Endpoints),
    EndpointSlice(EndpointSlice),
    Ingress(Ingress),
    ServiceCidr(ServiceCIDR),
    /// ServiceMonitor, PodMonitor or Prometheus, as a full JSON object (apiVersion, kind, metadata, spec).
    Custom(Kind, serde_json::Value),
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Namespace(_) => Kind::Namespace,
            Object::Node(_) => Kind::Node,
            Object::ConfigMap(_) => Kind::ConfigMap,
            Object::Service(_) => Kind::Service,
            Object::Pod(_) => Kind::Pod,
            Object::Endpoints(_) => Kind::Endpoints,
            Object::EndpointSlice(_) => Kind::EndpointSlice,
            Object::Ingress(_) => Kind::Ingress,
            Object::ServiceCidr(_) => Kind::ServiceCidr,
            Object::Custom(k, _) => *k,
        }
    }

    /// The object as JSON with `apiVersion` and `kind` set.
    pub fn to_json(&self) -> serde_json::Value {
        fn typed<T: Serialize>(kind: Kind, obj: &T) -> serde_json::Value {
            let mut v = serde_json::to_value(obj).expect("k8s-openapi types always serialize");
            if let Some(m) = v.as_object_mut() {
                m.insert("apiVersion".into(), kind.api_version().into());
                m.insert("kind".into(), kind.name().into());
            }
            v
        }
        let k = self.kind();
        match self {
            Object::Namespace(o) => typed(k, o),
            Object::Node(o) => typed(k, o),
            Object::ConfigMap(o) => typed(k, o),
            Object::Service(o) => typed(k, o),
            Object::Pod(o) => typed(k, o),
            Object::Endpoints(o) => typed(k, o),
            Object::EndpointSlice(o) => typed(k, o),
            Object::Ingress(o) => typed(k, o),
            Object::ServiceCidr(o) => typed(k, o),
            Object::Custom(_, v) => v.clone(),
        }
    }
}

/// One change the generator, a controller or churn asks the store to make. `Put` creates or replaces
/// (no resourceVersion precondition: these are the cluster's own controllers, not API clients).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Put(Object),
    Delete {
        kind: Kind,
        namespace: Option<String>,
        name: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plural_and_singular_names_match_the_apiserver() {
        assert_eq!(Kind::Endpoints.singular(), "endpoints");
        assert_eq!(Kind::Ingress.singular(), "ingress");
        assert_eq!(Kind::EndpointSlice.singular(), "endpointslice");
        assert_eq!(Kind::Prometheus.plural(), "prometheuses");
        assert_eq!(Kind::from_group_plural("", "pods"), Some(Kind::Pod));
        assert_eq!(Kind::from_group_plural("apps", "pods"), None);
        for k in Kind::ALL {
            let r = k.resource();
            assert_eq!((r.kind.as_str(), r.plural.as_str()), (k.name(), k.plural()));
            assert_eq!(r.namespaced, k.namespaced());
            assert_eq!(r.api_version(), k.api_version());
            assert_eq!(r.singular, k.singular());
            assert_eq!(Kind::from_id(k.id()), k);
        }
    }
}
