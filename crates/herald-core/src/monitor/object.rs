//! The monitor objects as the operator's CRDs define them (`monitoringv1.ServiceMonitor`,
//! `monitoringv1.PodMonitor`, the types they share, and the Prometheus resource's scrape classes),
//! decoded so that an error names the field at fault.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_yaml::Value as Yaml;

use super::field_err;
use super::rules::Rule;

/// `null` reads as the type's default (the API server may send `null` for an empty list or map).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The object metadata the operator reads.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Metadata {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub namespace: String,
    #[serde(deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
}

/// `metav1.LabelSelector`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(deserialize_with = "nullable")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct LabelSelectorRequirement {
    #[serde(deserialize_with = "nullable")]
    pub key: String,
    #[serde(deserialize_with = "nullable")]
    pub operator: String,
    #[serde(deserialize_with = "nullable")]
    pub values: Vec<String>,
}

/// `namespaceSelector`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NamespaceSelector {
    #[serde(deserialize_with = "nullable")]
    pub any: bool,
    #[serde(deserialize_with = "nullable")]
    pub match_names: Vec<String>,
}

/// `attachMetadata`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct MonitorAttachMetadata {
    pub node: Option<bool>,
}

/// `intstr.IntOrString` (`targetPort`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i32),
    String(String),
}

impl fmt::Display for IntOrString {
    /// Go's `IntOrString.String()`: the number in decimal, or the string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrString::Int(i) => write!(f, "{i}"),
            IntOrString::String(s) => f.write_str(s),
        }
    }
}

/// `v1.SecretKeySelector` / `v1.ConfigMapKeySelector`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct KeySelector {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub key: String,
    pub optional: Option<bool>,
}

/// `SecretOrConfigMap`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SecretOrConfigMap {
    pub secret: Option<KeySelector>,
    pub config_map: Option<KeySelector>,
}

impl SecretOrConfigMap {
    pub(super) fn describe(&self) -> Option<String> {
        match (&self.secret, &self.config_map) {
            (Some(s), _) => Some(secret(s)),
            (None, Some(c)) => Some(format!("ConfigMap {:?} key {:?}", c.name, c.key)),
            (None, None) => None,
        }
    }
}

pub(super) fn secret(s: &KeySelector) -> String {
    format!("Secret {:?} key {:?}", s.name, s.key)
}

/// `tlsConfig`: `TLSConfig` (ServiceMonitor: references and files) or `SafeTLSConfig` (PodMonitor:
/// references only; the file fields are then never set).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TlsConfig {
    pub ca: SecretOrConfigMap,
    pub cert: SecretOrConfigMap,
    pub key_secret: Option<KeySelector>,
    pub server_name: Option<String>,
    pub insecure_skip_verify: Option<bool>,
    pub min_version: Option<String>,
    pub max_version: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub ca_file: String,
    #[serde(deserialize_with = "nullable")]
    pub cert_file: String,
    #[serde(deserialize_with = "nullable")]
    pub key_file: String,
}

/// `basicAuth`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct BasicAuth {
    pub username: KeySelector,
    pub password: KeySelector,
}

/// `authorization` (`SafeAuthorization`: the credentials come from a Secret).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Authorization {
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    pub credentials: Option<KeySelector>,
}

/// `oauth2` (only what is needed to name it).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OAuth2 {
    pub client_id: SecretOrConfigMap,
    pub client_secret: KeySelector,
    #[serde(deserialize_with = "nullable")]
    pub token_url: String,
}

/// `authorization` of a scrape class (`Authorization`: a Secret or a file, not both).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClassAuthorization {
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    pub credentials: Option<KeySelector>,
    #[serde(deserialize_with = "nullable")]
    pub credentials_file: String,
}

/// A scrape class of the Prometheus resource (`spec.scrapeClasses[]`): settings a monitor takes by
/// naming it in `spec.scrapeClass`, or from the default class when it names none.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ScrapeClass {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    pub default: Option<bool>,
    pub fallback_scrape_protocol: Option<String>,
    pub tls_config: Option<TlsConfig>,
    pub authorization: Option<ClassAuthorization>,
    #[serde(deserialize_with = "nullable")]
    pub relabelings: Vec<MonitorRelabelConfig>,
    #[serde(deserialize_with = "nullable")]
    pub metric_relabelings: Vec<MonitorRelabelConfig>,
    pub attach_metadata: Option<MonitorAttachMetadata>,
}

/// A relabeling in the operator's syntax (`monitoringv1.RelabelConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MonitorRelabelConfig {
    #[serde(deserialize_with = "nullable")]
    pub source_labels: Vec<String>,
    pub separator: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub target_label: String,
    #[serde(deserialize_with = "nullable")]
    pub regex: String,
    #[serde(deserialize_with = "nullable")]
    pub modulus: u64,
    pub replacement: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub action: String,
}

impl MonitorRelabelConfig {
    /// `generateRelabelConfig`: the fields given, in Prometheus's syntax, the action lowercased.
    pub fn to_yaml(&self) -> Yaml {
        let mut r = Rule::default();
        if !self.source_labels.is_empty() {
            r = r.source(&self.source_labels);
        }
        if let Some(s) = &self.separator {
            r = r.set("separator", s);
        }
        if !self.target_label.is_empty() {
            r = r.set("target_label", &self.target_label);
        }
        if !self.regex.is_empty() {
            r = r.set("regex", &self.regex);
        }
        if self.modulus != 0 {
            r.0.insert("modulus".into(), self.modulus.into());
        }
        if let Some(s) = &self.replacement {
            r = r.set("replacement", s);
        }
        if !self.action.is_empty() {
            r = r.set("action", &self.action.to_lowercase());
        }
        Yaml::Mapping(r.0)
    }
}

/// The fields shared by `endpoints` and `podMetricsEndpoints` entries.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndpointCommon {
    pub target_port: Option<IntOrString>,
    #[serde(deserialize_with = "nullable")]
    pub path: String,
    pub scheme: Option<String>,
    pub params: Option<BTreeMap<String, Vec<String>>>,
    #[serde(deserialize_with = "nullable")]
    pub interval: String,
    #[serde(deserialize_with = "nullable")]
    pub scrape_timeout: String,
    #[serde(deserialize_with = "nullable")]
    pub honor_labels: bool,
    pub honor_timestamps: Option<bool>,
    pub track_timestamps_staleness: Option<bool>,
    #[serde(deserialize_with = "nullable")]
    pub metric_relabelings: Vec<MonitorRelabelConfig>,
    #[serde(deserialize_with = "nullable")]
    pub relabelings: Vec<MonitorRelabelConfig>,
    pub filter_running: Option<bool>,
    pub tls_config: Option<TlsConfig>,
    pub bearer_token_secret: Option<KeySelector>,
    pub basic_auth: Option<BasicAuth>,
    pub authorization: Option<Authorization>,
    pub oauth2: Option<OAuth2>,
    pub follow_redirects: Option<bool>,
    #[serde(rename = "enableHttp2")]
    pub enable_http2: Option<bool>,
    pub proxy_url: Option<String>,
    pub no_proxy: Option<String>,
    pub proxy_from_environment: Option<bool>,
    pub proxy_connect_header: Option<BTreeMap<String, Vec<KeySelector>>>,
}

/// A ServiceMonitor `endpoints` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Endpoint {
    #[serde(deserialize_with = "nullable")]
    pub port: String,
    #[serde(deserialize_with = "nullable")]
    pub bearer_token_file: String,
    #[serde(flatten)]
    pub common: EndpointCommon,
}

/// A PodMonitor `podMetricsEndpoints` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodMetricsEndpoint {
    pub port: Option<String>,
    pub port_number: Option<i32>,
    #[serde(flatten)]
    pub common: EndpointCommon,
}

/// The spec fields shared by ServiceMonitor and PodMonitor.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MonitorSpecCommon {
    #[serde(deserialize_with = "nullable")]
    pub job_label: String,
    #[serde(deserialize_with = "nullable")]
    pub pod_target_labels: Vec<String>,
    pub selector: LabelSelector,
    pub selector_mechanism: Option<String>,
    pub namespace_selector: NamespaceSelector,
    pub sample_limit: Option<u64>,
    pub target_limit: Option<u64>,
    pub label_limit: Option<u64>,
    pub label_name_length_limit: Option<u64>,
    pub label_value_length_limit: Option<u64>,
    pub keep_dropped_targets: Option<u64>,
    #[serde(deserialize_with = "nullable")]
    pub scrape_protocols: Vec<String>,
    pub fallback_scrape_protocol: Option<String>,
    pub attach_metadata: Option<MonitorAttachMetadata>,
    #[serde(rename = "scrapeClass")]
    pub scrape_class_name: Option<String>,
    pub body_size_limit: Option<String>,
    /// Native histogram settings: not applied, reported (any value counts as set).
    pub scrape_classic_histograms: Option<Value>,
    pub scrape_native_histograms: Option<Value>,
    pub native_histogram_bucket_limit: Option<Value>,
    pub native_histogram_min_bucket_factor: Option<Value>,
    #[serde(rename = "convertClassicHistogramsToNHCB")]
    pub convert_classic_histograms_to_nhcb: Option<Value>,
}

/// `ServiceMonitor.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceMonitorSpec {
    #[serde(deserialize_with = "nullable")]
    pub target_labels: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub endpoints: Vec<Endpoint>,
    pub service_discovery_role: Option<String>,
    #[serde(flatten)]
    pub common: MonitorSpecCommon,
}

/// `PodMonitor.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodMonitorSpec {
    #[serde(deserialize_with = "nullable")]
    pub pod_metrics_endpoints: Vec<PodMetricsEndpoint>,
    #[serde(flatten)]
    pub common: MonitorSpecCommon,
}

/// A ServiceMonitor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceMonitor {
    pub metadata: Metadata,
    pub spec: ServiceMonitorSpec,
}

/// A PodMonitor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodMonitor {
    pub metadata: Metadata,
    pub spec: PodMonitorSpec,
}

/// Which kind of monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorKind {
    ServiceMonitor,
    PodMonitor,
}

impl MonitorKind {
    /// The kind's name (`ServiceMonitor`).
    pub fn as_str(self) -> &'static str {
        match self {
            MonitorKind::ServiceMonitor => "ServiceMonitor",
            MonitorKind::PodMonitor => "PodMonitor",
        }
    }
    /// The job name prefix (`serviceMonitor`).
    pub(super) fn job_prefix(self) -> &'static str {
        match self {
            MonitorKind::ServiceMonitor => "serviceMonitor",
            MonitorKind::PodMonitor => "podMonitor",
        }
    }
}

impl fmt::Display for MonitorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a monitor could not be translated. Messages name the monitor and the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MonitorError {
    #[error("{kind}: {message}")]
    Object { kind: MonitorKind, message: String },
    #[error("{kind} {monitor}: {field}: {message}")]
    Field {
        kind: MonitorKind,
        /// `namespace/name`.
        monitor: String,
        /// The field's path, e.g. `spec.endpoints[0].relabelings[1]`.
        field: String,
        message: String,
    },
    #[error("sharding: shards must be at least 1")]
    NoShards,
}

/// Decode `value` as `T`; on failure, find the first member (of an object) that fails alone, so the
/// error names it. Every field of the types decoded this way has a default.
fn decode<T: DeserializeOwned>(value: &Value, path: &str) -> Result<T, (String, String)> {
    serde_json::from_value(value.clone()).map_err(|e| {
        if let Value::Object(map) = value {
            for (k, v) in map {
                let one = Value::Object([(k.clone(), v.clone())].into_iter().collect());
                if let Err(e) = serde_json::from_value::<T>(one) {
                    return (format!("{path}.{k}"), e.to_string());
                }
            }
        }
        (path.to_owned(), e.to_string())
    })
}

/// Decode each element of the array `spec[key]` as `T`, naming the failing one.
fn decode_list<T: DeserializeOwned>(
    spec: &Value,
    key: &str,
) -> Result<Option<Vec<T>>, (String, String)> {
    match spec.get(key) {
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| decode(item, &format!("spec.{key}[{i}]")))
            .collect::<Result<Vec<T>, _>>()
            .map(Some),
        Some(Value::Null) | None => Ok(None),
        Some(_) => Err((format!("spec.{key}"), "not a list".into())),
    }
}

/// The metadata and spec of a monitor object.
fn read_object(obj: &Value, kind: MonitorKind) -> Result<(Metadata, &Value), MonitorError> {
    let object_err = |message: String| MonitorError::Object { kind, message };
    if !obj.is_object() {
        return Err(object_err("not a JSON object".into()));
    }
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && k != kind.as_str()
    {
        return Err(object_err(format!("kind is {k:?}")));
    }
    let meta: Metadata = decode(obj.get("metadata").unwrap_or(&Value::Null), "metadata")
        .map_err(|(f, m)| object_err(format!("{f}: {m}")))?;
    if meta.name.is_empty() {
        return Err(object_err("metadata.name is missing".into()));
    }
    if meta.namespace.is_empty() {
        return Err(object_err(format!(
            "{}: metadata.namespace is missing",
            meta.name
        )));
    }
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    if !spec.is_object() {
        return Err(field_err(kind, &meta)(
            "spec".into(),
            "missing or not an object".into(),
        ));
    }
    Ok((meta, spec))
}

impl ServiceMonitor {
    /// Decode a whole ServiceMonitor object (unknown fields are ignored).
    pub fn from_value(obj: &Value) -> Result<ServiceMonitor, MonitorError> {
        let (metadata, spec_value) = read_object(obj, MonitorKind::ServiceMonitor)?;
        let err = field_err(MonitorKind::ServiceMonitor, &metadata);
        let endpoints =
            decode_list::<Endpoint>(spec_value, "endpoints").map_err(|(f, m)| err(f, m))?;
        let mut spec: ServiceMonitorSpec =
            decode(spec_value, "spec").map_err(|(f, m)| err(f, m))?;
        spec.endpoints = endpoints.unwrap_or_default();
        Ok(ServiceMonitor { metadata, spec })
    }
}

impl PodMonitor {
    /// Decode a whole PodMonitor object (unknown fields are ignored).
    pub fn from_value(obj: &Value) -> Result<PodMonitor, MonitorError> {
        let (metadata, spec_value) = read_object(obj, MonitorKind::PodMonitor)?;
        let err = field_err(MonitorKind::PodMonitor, &metadata);
        let endpoints = decode_list::<PodMetricsEndpoint>(spec_value, "podMetricsEndpoints")
            .map_err(|(f, m)| err(f, m))?;
        let mut spec: PodMonitorSpec = decode(spec_value, "spec").map_err(|(f, m)| err(f, m))?;
        spec.pod_metrics_endpoints = endpoints.unwrap_or_default();
        Ok(PodMonitor { metadata, spec })
    }
}
