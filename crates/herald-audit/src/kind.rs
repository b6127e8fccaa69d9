//! The kinds the audit reads: their API coordinates and the `apiVersion`/`kind` pairs that identify them.

use serde::Serialize;

/// A kind the audit knows. Objects of any other kind are counted and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Kind {
    Namespace,
    Node,
    Pod,
    Service,
    Endpoints,
    EndpointSlice,
    ConfigMap,
    Deployment,
    Ingress,
    ServiceMonitor,
    PodMonitor,
    Prometheus,
    PrometheusAgent,
    PeerAuthentication,
}

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::Namespace,
        Kind::Node,
        Kind::Pod,
        Kind::Service,
        Kind::Endpoints,
        Kind::EndpointSlice,
        Kind::ConfigMap,
        Kind::Deployment,
        Kind::Ingress,
        Kind::ServiceMonitor,
        Kind::PodMonitor,
        Kind::Prometheus,
        Kind::PrometheusAgent,
        Kind::PeerAuthentication,
    ];

    /// The `kind` field.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Namespace => "Namespace",
            Kind::Node => "Node",
            Kind::Pod => "Pod",
            Kind::Service => "Service",
            Kind::Endpoints => "Endpoints",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::ConfigMap => "ConfigMap",
            Kind::Deployment => "Deployment",
            Kind::Ingress => "Ingress",
            Kind::ServiceMonitor => "ServiceMonitor",
            Kind::PodMonitor => "PodMonitor",
            Kind::Prometheus => "Prometheus",
            Kind::PrometheusAgent => "PrometheusAgent",
            Kind::PeerAuthentication => "PeerAuthentication",
        }
    }

    /// API group, "" for core.
    pub fn group(self) -> &'static str {
        match self {
            Kind::EndpointSlice => "discovery.k8s.io",
            Kind::Deployment => "apps",
            Kind::Ingress => "networking.k8s.io",
            Kind::ServiceMonitor | Kind::PodMonitor | Kind::Prometheus | Kind::PrometheusAgent => {
                "monitoring.coreos.com"
            }
            Kind::PeerAuthentication => "security.istio.io",
            _ => "",
        }
    }

    /// The version the audit lists in live mode.
    pub fn version(self) -> &'static str {
        match self {
            // prometheus-operator serves PrometheusAgent as v1alpha1 only
            // (prometheus-operator:pkg/apis/monitoring/v1alpha1/prometheusagent_types.go).
            Kind::PrometheusAgent => "v1alpha1",
            _ => "v1",
        }
    }

    /// Lower-case plural resource name, as in the URL path.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Namespace => "namespaces",
            Kind::Node => "nodes",
            Kind::Pod => "pods",
            Kind::Service => "services",
            Kind::Endpoints => "endpoints",
            Kind::EndpointSlice => "endpointslices",
            Kind::ConfigMap => "configmaps",
            Kind::Deployment => "deployments",
            Kind::Ingress => "ingresses",
            Kind::ServiceMonitor => "servicemonitors",
            Kind::PodMonitor => "podmonitors",
            Kind::Prometheus => "prometheuses",
            Kind::PrometheusAgent => "prometheusagents",
            Kind::PeerAuthentication => "peerauthentications",
        }
    }

    /// `apiVersion` as the audit writes it in fix manifests.
    pub fn api_version(self) -> String {
        if self.group().is_empty() {
            self.version().to_string()
        } else {
            format!("{}/{}", self.group(), self.version())
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::Namespace | Kind::Node)
    }

    /// Identifies an object's kind from its `apiVersion` and `kind` fields. Any version of a known
    /// group is accepted (security.istio.io serves v1beta1 and v1 with the same fields), except that
    /// an `Endpoints` must be core and a `Deployment` must be in `apps`.
    pub fn identify(api_version: &str, kind: &str) -> Option<Kind> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == kind && k.group() == group)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_accepts_known_groups_at_any_version_and_rejects_others() {
        assert_eq!(Kind::identify("v1", "Endpoints"), Some(Kind::Endpoints));
        assert_eq!(
            Kind::identify("security.istio.io/v1beta1", "PeerAuthentication"),
            Some(Kind::PeerAuthentication)
        );
        assert_eq!(
            Kind::identify("monitoring.coreos.com/v1alpha1", "PrometheusAgent"),
            Some(Kind::PrometheusAgent)
        );
        assert_eq!(Kind::identify("extensions/v1beta1", "Deployment"), None);
        assert_eq!(Kind::identify("example.com/v1", "Service"), None);
    }
}
