//! The fields of prometheus-operator and Istio custom resources that the rules read, decoded leniently
//! (unknown fields ignored, absent ones defaulted) but strictly typed where present.
//!
//! Field names follow prometheus-operator:pkg/apis/monitoring/v1/{servicemonitor,podmonitor,
//! prometheus}_types.go and istio/api:security/v1beta1/peer_authentication.proto.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde_json::Value;

use crate::objects::Meta;

/// A custom resource: its metadata, the decoded spec, and the object as read (fix manifests start
/// from it so that fields the audit does not know survive a replace).
#[derive(Debug, Clone)]
pub struct Custom<S> {
    pub metadata: Meta,
    pub spec: S,
    pub raw: Value,
}

impl<S> Custom<S> {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSelector {
    #[serde(default)]
    pub any: bool,
    #[serde(default)]
    pub match_names: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMonitorSpec {
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub namespace_selector: NamespaceSelector,
    #[serde(default)]
    pub endpoints: Vec<ScrapeEndpoint>,
    pub job_label: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMonitorSpec {
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub namespace_selector: NamespaceSelector,
    #[serde(default)]
    pub pod_metrics_endpoints: Vec<ScrapeEndpoint>,
}

/// A ServiceMonitor `endpoints[]` or PodMonitor `podMetricsEndpoints[]` entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScrapeEndpoint {
    /// ServiceMonitor: the Service port name; PodMonitor: the container port name.
    pub port: Option<String>,
    /// PodMonitor only (operator ≥ 0.80): the container port number.
    pub port_number: Option<i32>,
    /// Deprecated in both: the pod port, by name or number.
    pub target_port: Option<IntOrString>,
    pub path: Option<String>,
    pub scheme: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusSpec {
    /// `Endpoints` (the operator's default when unset) or `EndpointSlice`.
    pub service_discovery_role: Option<String>,
    pub replicas: Option<i32>,
    pub shards: Option<i32>,
    pub service_account_name: Option<String>,
    /// NB: unset selects no ServiceMonitors at all; `{}` selects every one
    /// (prometheus-operator:pkg/prometheus/resource_selector.go).
    pub service_monitor_selector: Option<LabelSelector>,
    /// Unset means the Prometheus object's own namespace only.
    pub service_monitor_namespace_selector: Option<LabelSelector>,
    pub pod_monitor_selector: Option<LabelSelector>,
    pub pod_monitor_namespace_selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerAuthenticationSpec {
    pub selector: Option<WorkloadSelector>,
    pub mtls: Option<MutualTls>,
    #[serde(default)]
    pub port_level_mtls: BTreeMap<String, MutualTls>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct MutualTls {
    /// UNSET, DISABLE, PERMISSIVE or STRICT.
    pub mode: Option<String>,
}

pub type ServiceMonitor = Custom<ServiceMonitorSpec>;
pub type PodMonitor = Custom<PodMonitorSpec>;
pub type Prometheus = Custom<PrometheusSpec>;
pub type PeerAuthentication = Custom<PeerAuthenticationSpec>;
