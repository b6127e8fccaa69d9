//! prometheus-operator `ServiceMonitor` and `PodMonitor` objects (`monitoring.coreos.com/v1`) turned
//! into what a Prometheus managed by the operator would scrape for each of their endpoints: the
//! discovery role and namespaces, the whole generated target relabeling, and the endpoint's scrape
//! settings, as the operator's config generator builds them.
//!
//! Behaviour follows prometheus-operator `pkg/prometheus/promcfg.go` (`generateServiceMonitorConfig`,
//! `generatePodMonitorConfig`, `initRelabelings`, `generateRunningFilter`, `generateRelabelConfig`,
//! `appendShardingRelabelingWithLabel`, `getNamespacesFromNamespaceSelector`, `generateK8SSDConfig`,
//! `addTLStoYaml`, ...) as of commit 6adcebc5076c34f4f55f8f5f7b1e528929373ac7 (VERSION 0.93.0;
//! 2026-08-08, "alertmanager: add test cases (#8744)"). The Go code was read, not copied; its golden
//! files (`pkg/prometheus/testdata/*.golden`) are ported as tests (see `monitor/testdata/README`).
//!
//! What the Prometheus custom resource contributes is given by [`MonitorContext`]. Not modelled (see
//! [`MonitorJob::unsupported`] for what is reported per monitor): scrape classes, the operator's
//! DaemonSet mode, topology sharding and retention-aware sharding, `enforcedNamespaceLabel`
//! exclusions, the Prometheus version gates (a recent Prometheus 3 is assumed, with EndpointSlice
//! support), `selectorMechanism: RoleSelector` (selection is always done by relabeling, which keeps
//! the same targets when Endpoints/EndpointSlices carry their Service's labels), native histogram
//! settings, and anything read from Secrets or ConfigMaps.
//!
//! A monitor is also read against the operator's CRD schema (`crd`): a value the schema refuses is
//! an error, as the apiserver would refuse the object; a field it does not have is a warning of the
//! job (the apiserver would prune it). The operator's own checks that reject a monitor (`validate`:
//! a timeout over the interval, a client certificate without its key) are errors too.
//!
//! NB (for whoever applies the rules): the operator's rules run in Prometheus after it adds the scrape
//! defaults; the first one copies `job` (the job name) into `__tmp_prometheus_job_name`, which users'
//! relabelings may read. [`scrape_defaults`] gives those labels for a [`MonitorJob`].

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_yaml::{Mapping, Value as Yaml};

use crate::relabel::{RelabelConfig, validate_all};
use crate::target::{AttachMetadata, LabelSet, Role};

mod crd;
mod validate;

#[cfg(test)]
mod tests;

// ---------------------------------------------------------------------------------------------
// The objects
// ---------------------------------------------------------------------------------------------

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
    fn describe(&self) -> Option<String> {
        match (&self.secret, &self.config_map) {
            (Some(s), _) => Some(secret(s)),
            (None, Some(c)) => Some(format!("ConfigMap {:?} key {:?}", c.name, c.key)),
            (None, None) => None,
        }
    }
}

fn secret(s: &KeySelector) -> String {
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

/// The scrape classes of `value` (a Prometheus resource's `spec.scrapeClasses`, or herald's
/// `monitors.scrape_classes`; `null` is none), checked as the operator checks them
/// (`getScrapeClassConfig`): valid relabelings and metricRelabelings, a TLS config and an
/// authorization that go together, one default class at most; and, as the CRD's list key, a
/// non-empty name given once. The error names the class and field.
pub fn scrape_classes(value: &Value) -> Result<Vec<ScrapeClass>, String> {
    if value.is_null() {
        return Ok(Vec::new());
    }
    let classes: Vec<ScrapeClass> = serde_json::from_value(value.clone())
        .map_err(|e| format!("not a list of scrape classes: {e}"))?;
    let mut default: Option<&str> = None;
    for (i, c) in classes.iter().enumerate() {
        if c.name.is_empty() {
            return Err(format!("[{i}].name: must not be empty"));
        }
        let at = format!("{:?}", c.name);
        if classes[..i].iter().any(|o| o.name == c.name) {
            return Err(format!("{at}: name given twice"));
        }
        for (field, rules) in [
            ("relabelings", &c.relabelings),
            ("metricRelabelings", &c.metric_relabelings),
        ] {
            for (j, rc) in rules.iter().enumerate() {
                let parsed: RelabelConfig = serde_yaml::from_value(rc.to_yaml())
                    .map_err(|e| format!("{at}: {field}[{j}]: {e}"))?;
                parsed
                    .validate()
                    .map_err(|e| format!("{at}: {field}[{j}]: {e}"))?;
            }
        }
        if let Some(tls) = &c.tls_config {
            validate::tls(tls, true).map_err(|(f, m)| format!("{at}: tlsConfig.{f}: {m}"))?;
        }
        if let Some(a) = &c.authorization {
            if a.credentials.is_some() && !a.credentials_file.is_empty() {
                return Err(format!(
                    "{at}: authorization: can not specify both credentials and credentialsFile"
                ));
            }
            if a.kind.trim().eq_ignore_ascii_case("basic") {
                return Err(format!(
                    "{at}: authorization.type: cannot be \"basic\", use basicAuth instead"
                ));
            }
        }
        if c.default == Some(true) {
            if let Some(d) = default {
                return Err(format!(
                    "{at}: multiple default scrape classes defined ({d:?} is default too)"
                ));
            }
            default = Some(&c.name);
        }
    }
    Ok(classes)
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
    fn job_prefix(self) -> &'static str {
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

// ---------------------------------------------------------------------------------------------
// What herald produces
// ---------------------------------------------------------------------------------------------

/// What the Prometheus (or PrometheusAgent) resource selecting the monitors contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorContext {
    /// `ignoreNamespaceSelectors`: every monitor discovers in its own namespace only.
    pub ignore_namespace_selectors: bool,
    /// `serviceDiscoveryRole` of the Prometheus resource: the role of ServiceMonitors that set none,
    /// `Role::Endpoints` (the operator's default) or `Role::EndpointSlice`.
    pub service_discovery_role: Role,
    /// `podTargetLabels` of the Prometheus resource, appended to each monitor's.
    pub pod_target_labels: Vec<String>,
    /// `enforcedNamespaceLabel`: when set, a last relabeling (target and metric) sets this label to
    /// the monitor's namespace. (`excludedFromEnforcement` is not modelled.)
    pub enforced_namespace_label: Option<String>,
    /// The operator's hashmod sharding rules (off by default: herald shards with `?shard=`).
    pub sharding: Option<Sharding>,
    /// `scrapeInterval` of the Prometheus resource (the operator's default `30s`): an endpoint's
    /// `scrapeTimeout` must not exceed it when the endpoint sets no interval.
    pub scrape_interval: String,
    /// `scrapeClasses` of the Prometheus resource (see [`scrape_classes`]).
    pub scrape_classes: Vec<ScrapeClass>,
}

impl MonitorContext {
    /// The scrape class a monitor naming `name` gets (`getScrapeClassOrDefault` after
    /// `validateScrapeClass`): that class, else the default class, else none. A name no class has
    /// is an error, as the operator rejects such a monitor.
    pub fn scrape_class(&self, name: Option<&str>) -> Result<Option<&ScrapeClass>, String> {
        match name.filter(|n| !n.is_empty()) {
            Some(n) => match self.scrape_classes.iter().find(|c| c.name == n) {
                Some(c) => Ok(Some(c)),
                None => Err(format!(
                    "scrapeClass {n:?} not found in Prometheus scrapeClasses"
                )),
            },
            None => Ok(self.scrape_classes.iter().find(|c| c.default == Some(true))),
        }
    }
}

/// prometheus-operator's `DefaultScrapeInterval`.
pub const DEFAULT_SCRAPE_INTERVAL: &str = "30s";

impl Default for MonitorContext {
    fn default() -> Self {
        MonitorContext {
            ignore_namespace_selectors: false,
            service_discovery_role: Role::Endpoints,
            pod_target_labels: Vec::new(),
            enforced_namespace_label: None,
            sharding: None,
            scrape_interval: DEFAULT_SCRAPE_INTERVAL.to_owned(),
            scrape_classes: Vec::new(),
        }
    }
}

/// The operator's sharding: `__tmp_hash` from `__address__`, hashmod `shards`, keep this shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharding {
    /// `shards` of the Prometheus resource (at least 1).
    pub shards: u32,
    /// This shard's index; `None` writes `$(SHARD)` as the operator does (its config reloader
    /// substitutes the pod's shard).
    pub shard: Option<u32>,
}

/// Scrape settings of one endpoint, as the operator writes them (unset fields are left out).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ScrapeSettings {
    pub honor_labels: bool,
    pub honor_timestamps: Option<bool>,
    pub track_timestamps_staleness: Option<bool>,
    pub scrape_interval: Option<String>,
    pub scrape_timeout: Option<String>,
    pub metrics_path: Option<String>,
    pub params: Option<BTreeMap<String, Vec<String>>>,
    /// Lowercased (`http`, `https`).
    pub scheme: Option<String>,
    pub follow_redirects: Option<bool>,
    pub enable_http2: Option<bool>,
    pub proxy_url: Option<String>,
    pub no_proxy: Option<String>,
    pub proxy_from_environment: Option<bool>,
    /// The file and plain parts of `tlsConfig`; Secret/ConfigMap parts are in `unsupported`.
    pub tls_config: Option<TlsFiles>,
    pub bearer_token_file: Option<String>,
    /// `authorization` with a credentials file (from a scrape class); Secret credentials are in
    /// `unsupported`.
    pub authorization: Option<AuthorizationFile>,
    pub sample_limit: Option<u64>,
    pub target_limit: Option<u64>,
    pub label_limit: Option<u64>,
    pub label_name_length_limit: Option<u64>,
    pub label_value_length_limit: Option<u64>,
    pub keep_dropped_targets: Option<u64>,
    pub scrape_protocols: Vec<String>,
    pub fallback_scrape_protocol: Option<String>,
    pub body_size_limit: Option<String>,
    /// `metric_relabel_configs` in Prometheus's syntax (validated).
    pub metric_relabel_configs: Vec<Yaml>,
}

/// The `authorization` herald can write: a type and a credentials file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthorizationFile {
    /// `Bearer` unless given.
    pub kind: String,
    pub credentials_file: Option<String>,
}

/// The `tls_config` herald can write: what needs no Secret or ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsFiles {
    pub insecure_skip_verify: Option<bool>,
    pub server_name: Option<String>,
    pub min_version: Option<String>,
    pub max_version: Option<String>,
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

/// One scrape job of a monitor endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorJob {
    /// `serviceMonitor/<ns>/<name>/<i>` or `podMonitor/<ns>/<name>/<i>`.
    pub name: String,
    pub role: Role,
    /// Namespaces to discover in; empty means all.
    pub namespaces: Vec<String>,
    /// `attachMetadata.node` (`None`: not given, the operator writes no `attach_metadata`).
    pub attach_metadata: Option<AttachMetadata>,
    /// The whole generated target relabeling, in the operator's order, the monitor's own
    /// `relabelings` included.
    pub relabel_configs: Vec<RelabelConfig>,
    pub scrape: ScrapeSettings,
    /// What herald cannot express, each named by its field (Secret and ConfigMap references, scrape
    /// classes, ...).
    pub unsupported: Vec<String>,
    /// What herald ignored in the monitor while serving the rest, each named by its field: fields
    /// the operator's CRD does not have (see `crd`).
    pub warnings: Vec<String>,
    /// The keep rule the endpoint's port adds, if any: a port that matches no port of the objects
    /// the monitor selects is a silent empty job, which herald reports (herald-server).
    pub port_rule: Option<PortRule>,
}

/// The keep rule of an endpoint's `port`, `targetPort` or `portNumber`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortRule {
    /// The field that set it (`spec.endpoints[0].port`).
    pub field: String,
    /// The port name or number, as given.
    pub port: String,
    /// Its index in [`MonitorJob::relabel_configs`]: the rules before it select the monitor's
    /// objects (the operator's selector rules), the rule keeps the port.
    pub rule: usize,
    /// What the port is looked for in, for messages (`the ports of the selected Services`).
    pub among: &'static str,
}

/// The jobs of a ServiceMonitor object, one per `endpoints` entry, each with the fields the
/// operator's CRD does not have in its [`MonitorJob::warnings`]. A value the CRD refuses is an error
/// (see `crd`).
pub fn service_monitor_jobs(
    obj: &Value,
    ctx: &MonitorContext,
) -> Result<Vec<MonitorJob>, MonitorError> {
    let m = ServiceMonitor::from_value(obj)?;
    let jobs = m.jobs(ctx)?;
    read_against_crd(obj, MonitorKind::ServiceMonitor, &m.metadata, jobs)
}

/// The jobs of a PodMonitor object, one per `podMetricsEndpoints` entry (as
/// [`service_monitor_jobs`]).
pub fn pod_monitor_jobs(
    obj: &Value,
    ctx: &MonitorContext,
) -> Result<Vec<MonitorJob>, MonitorError> {
    let m = PodMonitor::from_value(obj)?;
    let jobs = m.jobs(ctx)?;
    read_against_crd(obj, MonitorKind::PodMonitor, &m.metadata, jobs)
}

/// The fields of monitor `obj` that the operator's CRD does not have, each as a warning
/// (`unknown field spec.endpoints[0].prot (...)`); herald serves the monitor without them.
pub fn unknown_fields(obj: &Value, kind: MonitorKind) -> Vec<String> {
    unknown_field_warnings(&crd::check(obj, kind))
}

fn unknown_field_warnings(f: &crd::Findings) -> Vec<String> {
    let mut out: Vec<String> = f
        .unknown
        .iter()
        .map(|path| format!("unknown field {path} (not in the operator's CRD: ignored)"))
        .collect();
    if f.more_unknown > 0 {
        out.push(format!("{} more unknown fields", f.more_unknown));
    }
    out
}

/// `jobs` of `obj` after reading it against the CRD: the first value it refuses is the monitor's
/// error; each unknown field is a warning of the job of its endpoint, or of every job.
fn read_against_crd(
    obj: &Value,
    kind: MonitorKind,
    meta: &Metadata,
    mut jobs: Vec<MonitorJob>,
) -> Result<Vec<MonitorJob>, MonitorError> {
    let findings = crd::check(obj, kind);
    if let Some((field, message)) = findings.invalid.first() {
        return Err(field_err(kind, meta)(field.clone(), message.clone()));
    }
    let list = match kind {
        MonitorKind::ServiceMonitor => "spec.endpoints[",
        MonitorKind::PodMonitor => "spec.podMetricsEndpoints[",
    };
    let warnings = unknown_field_warnings(&findings);
    for (path, warning) in findings.unknown.iter().zip(&warnings) {
        let endpoint: Option<usize> = path
            .strip_prefix(list)
            .and_then(|rest| rest.split_once(']'))
            .and_then(|(i, _)| i.parse().ok());
        for (i, job) in jobs.iter_mut().enumerate() {
            if endpoint.is_none_or(|e| e == i) {
                job.warnings.push(warning.clone());
            }
        }
    }
    for more in warnings.iter().skip(findings.unknown.len()) {
        for job in &mut jobs {
            job.warnings.push(more.clone());
        }
    }
    Ok(jobs)
}

/// The labels Prometheus sets on every target of `job` before its relabeling runs, from the job's
/// settings (`job`, and `__scheme__`, `__metrics_path__`, `__scrape_interval__`,
/// `__scrape_timeout__`, `__param_<name>` when the endpoint sets them; the ones the endpoint leaves
/// to the Prometheus's globals are not known here).
pub fn scrape_defaults(job: &MonitorJob) -> LabelSet {
    let s = &job.scrape;
    let mut ls = LabelSet::new();
    ls.insert("job".into(), job.name.clone());
    let mut put = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            ls.insert(k.into(), v.clone());
        }
    };
    put("__scheme__", &s.scheme);
    put("__metrics_path__", &s.metrics_path);
    put("__scrape_interval__", &s.scrape_interval);
    put("__scrape_timeout__", &s.scrape_timeout);
    for (k, v) in s.params.iter().flatten() {
        if let Some(first) = v.first() {
            ls.insert(format!("__param_{k}"), first.clone());
        }
    }
    ls
}

// ---------------------------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------------------------

/// One rule under construction, keys in the operator's order.
#[derive(Default)]
struct Rule(Mapping);

impl Rule {
    fn set(mut self, k: &str, v: &str) -> Self {
        self.0.insert(k.into(), v.into());
        self
    }
    fn action(self, a: &str) -> Self {
        self.set("action", a)
    }
    fn source<S: AsRef<str>>(mut self, labels: &[S]) -> Self {
        let seq = labels.iter().map(|l| Yaml::from(l.as_ref())).collect();
        self.0.insert("source_labels".into(), Yaml::Sequence(seq));
        self
    }
    fn regex(self, r: &str) -> Self {
        self.set("regex", r)
    }
    fn target(self, t: &str) -> Self {
        self.set("target_label", t)
    }
    fn replacement(self, r: &str) -> Self {
        self.set("replacement", r)
    }
}

/// The operator's `sanitizeLabelName` is Prometheus's rule (every character outside `[a-zA-Z0-9_]`
/// becomes `_`), which herald-core already has.
pub use crate::labels::sanitize_label_name;

/// Rules accumulated for one job, with the error context.
struct Rules<'a> {
    rules: Vec<Yaml>,
    err: &'a dyn Fn(String, String) -> MonitorError,
}

impl Rules<'_> {
    fn push(&mut self, r: Rule) {
        self.rules.push(Yaml::Mapping(r.0));
    }

    /// `initRelabelings`.
    fn init(&mut self) {
        self.push(
            Rule::default()
                .source(&["job"])
                .target("__tmp_prometheus_job_name"),
        );
    }

    /// `generateRunningFilter`.
    fn running_filter(&mut self) {
        self.push(
            Rule::default()
                .action("drop")
                .source(&["__meta_kubernetes_pod_phase"])
                .regex("(Failed|Succeeded)"),
        );
    }

    /// The selector as keep/drop rules on `__meta_kubernetes_<object>_label[present]_<key>`.
    fn selector(
        &mut self,
        sel: &LabelSelector,
        object: &str,
        field: &str,
    ) -> Result<(), MonitorError> {
        let label = |k: &str| {
            format!(
                "__meta_kubernetes_{object}_label_{}",
                sanitize_label_name(k)
            )
        };
        let present = |k: &str| {
            format!(
                "__meta_kubernetes_{object}_labelpresent_{}",
                sanitize_label_name(k)
            )
        };
        for (k, v) in &sel.match_labels {
            self.push(
                Rule::default()
                    .action("keep")
                    .source(&[label(k), present(k)])
                    .regex(&format!("({v});true")),
            );
        }
        for (i, exp) in sel.match_expressions.iter().enumerate() {
            let k = &exp.key;
            let values = exp.values.join("|");
            let rule = match exp.operator.as_str() {
                "In" => Rule::default()
                    .action("keep")
                    .source(&[label(k), present(k)])
                    .regex(&format!("({values});true")),
                "NotIn" => Rule::default()
                    .action("drop")
                    .source(&[label(k), present(k)])
                    .regex(&format!("({values});true")),
                "Exists" => Rule::default()
                    .action("keep")
                    .source(&[present(k)])
                    .regex("true"),
                "DoesNotExist" => Rule::default()
                    .action("drop")
                    .source(&[present(k)])
                    .regex("true"),
                other => {
                    return Err((self.err)(
                        format!("{field}.matchExpressions[{i}].operator"),
                        format!("{other:?} is not one of In, NotIn, Exists, DoesNotExist"),
                    ));
                }
            };
            self.push(rule);
        }
        Ok(())
    }

    /// `<source>` copied to `<target>` when not empty (target labels, pod target labels, jobLabel).
    fn copy_if_set(&mut self, source: &str, target: &str) {
        self.push(
            Rule::default()
                .source(&[source])
                .target(target)
                .regex("(.+)")
                .replacement("${1}"),
        );
    }

    /// The monitor's `relabelings` and the enforced namespace label.
    fn user(
        &mut self,
        rcs: &[MonitorRelabelConfig],
        field: &str,
        namespace: &str,
        ctx: &MonitorContext,
    ) -> Result<(), MonitorError> {
        self.rules
            .extend(user_rules(rcs, field, namespace, ctx, self.err)?);
        Ok(())
    }

    /// The scrape class's relabelings (validated with the class), before the monitor's own.
    fn class(&mut self, class: Option<&ScrapeClass>) {
        for rc in class.iter().flat_map(|c| &c.relabelings) {
            self.rules.push(rc.to_yaml());
        }
    }

    /// `appendShardingRelabelingWithLabel` on `__address__`.
    fn sharding(&mut self, ctx: &MonitorContext) -> Result<(), MonitorError> {
        let Some(sh) = ctx.sharding else {
            return Ok(());
        };
        if sh.shards == 0 {
            return Err(MonitorError::NoShards);
        }
        let shard = sh
            .shard
            .map_or_else(|| "$(SHARD)".to_owned(), |s| s.to_string());
        self.push(
            Rule::default()
                .source(&["__address__", "__tmp_hash"])
                .target("__tmp_hash")
                .regex("(.+);")
                .replacement("$1")
                .action("replace"),
        );
        let mut hashmod = Rule::default().source(&["__tmp_hash"]).target("__tmp_hash");
        hashmod
            .0
            .insert("modulus".into(), u64::from(sh.shards).into());
        self.push(hashmod.action("hashmod"));
        self.push(
            Rule::default()
                .source(&["__tmp_hash", "__tmp_disable_sharding"])
                .regex(&format!("{shard};|.+;.+"))
                .action("keep"),
        );
        Ok(())
    }

    fn finish(self) -> Result<Vec<RelabelConfig>, MonitorError> {
        let configs = to_relabel_configs(&self.rules)
            .map_err(|(i, m)| (self.err)(format!("generated relabel_configs[{i}]"), m))?;
        validate_all(&configs)
            .map_err(|e| (self.err)("generated relabel_configs".into(), e.to_string()))?;
        Ok(configs)
    }
}

fn to_relabel_configs(rules: &[Yaml]) -> Result<Vec<RelabelConfig>, (usize, String)> {
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| serde_yaml::from_value(r.clone()).map_err(|e| (i, e.to_string())))
        .collect()
}

/// `generateRelabelConfig` of a monitor's `relabelings`/`metricRelabelings`, plus the enforced
/// namespace label, each checked as a Prometheus relabel rule.
fn user_rules(
    rcs: &[MonitorRelabelConfig],
    field: &str,
    namespace: &str,
    ctx: &MonitorContext,
    err: &dyn Fn(String, String) -> MonitorError,
) -> Result<Vec<Yaml>, MonitorError> {
    let mut out = Vec::with_capacity(rcs.len() + 1);
    for (i, rc) in rcs.iter().enumerate() {
        let y = rc.to_yaml();
        let parsed: RelabelConfig = serde_yaml::from_value(y.clone())
            .map_err(|e| err(format!("{field}[{i}]"), e.to_string()))?;
        parsed
            .validate()
            .map_err(|e| err(format!("{field}[{i}]"), e.to_string()))?;
        out.push(y);
    }
    if let Some(label) = ctx
        .enforced_namespace_label
        .as_deref()
        .filter(|l| !l.is_empty())
    {
        out.push(Yaml::Mapping(
            Rule::default().target(label).replacement(namespace).0,
        ));
    }
    Ok(out)
}

fn namespaces(sel: &NamespaceSelector, own: &str, ctx: &MonitorContext) -> Vec<String> {
    if ctx.ignore_namespace_selectors {
        vec![own.to_owned()]
    } else if sel.any {
        Vec::new()
    } else if sel.match_names.is_empty() {
        vec![own.to_owned()]
    } else {
        sel.match_names.clone()
    }
}

/// The scrape settings and unsupported items common to both kinds. `tls_files`: the endpoint's TLS
/// config may name files (a ServiceMonitor's `TLSConfig`, not a PodMonitor's `SafeTLSConfig`).
#[allow(clippy::too_many_arguments)] // the translation context, passed down from `job`
fn common_scrape(
    spec: &MonitorSpecCommon,
    ep: &EndpointCommon,
    path: &str,
    namespace: &str,
    ctx: &MonitorContext,
    err: &dyn Fn(String, String) -> MonitorError,
    unsupported: &mut Vec<String>,
    tls_files: bool,
    class: Option<&ScrapeClass>,
) -> Result<ScrapeSettings, MonitorError> {
    validate::interval_and_timeout(&ep.interval, &ep.scrape_timeout, &ctx.scrape_interval)
        .map_err(|(field, m)| err(format!("{path}.{field}"), m))?;
    validate::proxy(ep).map_err(|(field, m)| err(format!("{path}.{field}"), m))?;
    if let Some((i, p)) = validate::repeated(&spec.scrape_protocols) {
        return Err(err(
            format!("spec.scrapeProtocols[{i}]"),
            format!("{p:?} is listed twice"),
        ));
    }
    let scheme = match ep.scheme.as_deref() {
        None => None,
        Some(s) if s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https") => {
            Some(s.to_lowercase())
        }
        Some(s) => {
            return Err(err(
                format!("{path}.scheme"),
                format!("{s:?} is not one of HTTP, HTTPS"),
            ));
        }
    };
    if let Some(tls) = &ep.tls_config {
        validate::tls(tls, tls_files)
            .map_err(|(field, m)| err(format!("{path}.tlsConfig.{field}"), m))?;
    }
    let mut tls_config = None;
    if let Some((tls, from)) = merged_tls(ep.tls_config.as_ref(), tls_files, class, path) {
        if let Some(d) = tls.ca.describe() {
            unsupported.push(format!("{from}.ca: {d}"));
        }
        if let Some(d) = tls.cert.describe() {
            unsupported.push(format!("{from}.cert: {d}"));
        }
        if let Some(k) = &tls.key_secret {
            unsupported.push(format!("{from}.keySecret: {}", secret(k)));
        }
        let some = |s: &String| (!s.is_empty()).then(|| s.clone());
        tls_config = Some(TlsFiles {
            insecure_skip_verify: tls.insecure_skip_verify,
            server_name: tls.server_name.clone().filter(|s| !s.is_empty()),
            min_version: tls.min_version.clone(),
            max_version: tls.max_version.clone(),
            ca_file: some(&tls.ca_file),
            cert_file: some(&tls.cert_file),
            key_file: some(&tls.key_file),
        });
    }
    if let Some(s) = ep
        .bearer_token_secret
        .as_ref()
        .filter(|s| !s.name.is_empty())
    {
        unsupported.push(format!("{path}.bearerTokenSecret: {}", secret(s)));
    }
    if let Some(b) = &ep.basic_auth {
        unsupported.push(format!(
            "{path}.basicAuth: username {}, password {}",
            secret(&b.username),
            secret(&b.password)
        ));
    }
    let authorization = match merged_authorization(ep.authorization.as_ref(), class, path) {
        None => None,
        Some((a, from)) => {
            if let Some(c) = &a.credentials {
                unsupported.push(format!("{from}: credentials {}", secret(c)));
                None
            } else if a.credentials_file.is_empty() {
                unsupported.push(format!("{from}: credentials none"));
                None
            } else {
                let kind = a.kind.trim();
                Some(AuthorizationFile {
                    kind: if kind.is_empty() { "Bearer" } else { kind }.to_owned(),
                    credentials_file: Some(a.credentials_file),
                })
            }
        }
    };
    if let Some(o) = &ep.oauth2 {
        let id = o.client_id.describe().unwrap_or_else(|| "none".into());
        unsupported.push(format!(
            "{path}.oauth2: clientId {id}, clientSecret {}",
            secret(&o.client_secret)
        ));
    }
    for (header, secrets) in ep.proxy_connect_header.iter().flatten() {
        let names: Vec<String> = secrets.iter().map(secret).collect();
        unsupported.push(format!(
            "{path}.proxyConnectHeader.{header}: {}",
            names.join(", ")
        ));
    }
    for (field, set) in [
        ("scrapeClassicHistograms", &spec.scrape_classic_histograms),
        ("scrapeNativeHistograms", &spec.scrape_native_histograms),
        (
            "nativeHistogramBucketLimit",
            &spec.native_histogram_bucket_limit,
        ),
        (
            "nativeHistogramMinBucketFactor",
            &spec.native_histogram_min_bucket_factor,
        ),
        (
            "convertClassicHistogramsToNHCB",
            &spec.convert_classic_histograms_to_nhcb,
        ),
    ] {
        if let Some(v) = set.as_ref().filter(|v| !v.is_null()) {
            unsupported.push(format!(
                "spec.{field}: {v} (native histogram settings are not written)"
            ));
        }
    }
    if spec.selector_mechanism.as_deref() == Some("RoleSelector") {
        unsupported.push(
            "spec.selectorMechanism: RoleSelector (the selector is applied by relabeling instead)"
                .into(),
        );
    }
    // The class's metricRelabelings first, then the endpoint's (validated with the class).
    let mut metric_relabel_configs: Vec<Yaml> = class
        .iter()
        .flat_map(|c| {
            c.metric_relabelings
                .iter()
                .map(MonitorRelabelConfig::to_yaml)
        })
        .collect();
    metric_relabel_configs.extend(user_rules(
        &ep.metric_relabelings,
        &format!("{path}.metricRelabelings"),
        namespace,
        ctx,
        err,
    )?);
    let nonempty = |s: &String| (!s.is_empty()).then(|| s.clone());
    Ok(ScrapeSettings {
        honor_labels: ep.honor_labels,
        honor_timestamps: ep.honor_timestamps,
        track_timestamps_staleness: ep.track_timestamps_staleness,
        scrape_interval: nonempty(&ep.interval),
        scrape_timeout: nonempty(&ep.scrape_timeout),
        metrics_path: nonempty(&ep.path),
        params: ep.params.clone(),
        scheme,
        follow_redirects: ep.follow_redirects,
        enable_http2: ep.enable_http2,
        proxy_url: ep.proxy_url.clone(),
        no_proxy: ep.no_proxy.clone(),
        proxy_from_environment: ep.proxy_from_environment,
        tls_config,
        bearer_token_file: None,
        authorization,
        sample_limit: spec.sample_limit,
        target_limit: spec.target_limit,
        label_limit: spec.label_limit,
        label_name_length_limit: spec.label_name_length_limit,
        label_value_length_limit: spec.label_value_length_limit,
        keep_dropped_targets: spec.keep_dropped_targets,
        scrape_protocols: spec.scrape_protocols.clone(),
        fallback_scrape_protocol: spec
            .fallback_scrape_protocol
            .clone()
            .or_else(|| class.and_then(|c| c.fallback_scrape_protocol.clone())),
        body_size_limit: spec.body_size_limit.clone(),
        metric_relabel_configs,
    })
}

/// The endpoint's TLS config merged with its scrape class's (`mergeTLSConfigWithScrapeClass`, or
/// for a PodMonitor's `SafeTLSConfig` `mergeSafeTLSConfigWithScrapeClass`), with the field path its
/// references are reported under. No endpoint config takes the class's whole; otherwise each of the
/// CA, certificate and key the endpoint gives neither as file nor as reference is the class's file.
/// A PodMonitor's own file fields do not exist (`tls_files` false) and are never used.
fn merged_tls(
    ep: Option<&TlsConfig>,
    tls_files: bool,
    class: Option<&ScrapeClass>,
    path: &str,
) -> Option<(TlsConfig, String)> {
    let class_tls = class.and_then(|c| c.tls_config.as_ref().map(|t| (c, t)));
    let own = ep.map(|t| {
        let mut t = t.clone();
        if !tls_files {
            t.ca_file.clear();
            t.cert_file.clear();
            t.key_file.clear();
        }
        t
    });
    // A PodMonitor's empty `tlsConfig: {}` counts as none; a ServiceMonitor's does not.
    let own = own.filter(|t| tls_files || *t != TlsConfig::default());
    match (own, class_tls) {
        (None, None) => None,
        (None, Some((c, t))) => Some((t.clone(), format!("scrapeClass {:?} tlsConfig", c.name))),
        (Some(t), None) => Some((t, format!("{path}.tlsConfig"))),
        (Some(mut t), Some((_, ct))) => {
            if t.ca_file.is_empty() && t.ca == SecretOrConfigMap::default() {
                t.ca_file = ct.ca_file.clone();
            }
            if t.cert_file.is_empty() && t.cert == SecretOrConfigMap::default() {
                t.cert_file = ct.cert_file.clone();
            }
            if t.key_file.is_empty() && t.key_secret.is_none() {
                t.key_file = ct.key_file.clone();
            }
            Some((t, format!("{path}.tlsConfig")))
        }
    }
}

/// The endpoint's authorization merged with its scrape class's
/// (`mergeSafeAuthorizationWithScrapeClass`), with the field path it is reported under: none given
/// takes the class's; given without credentials, it takes the class's credentials (Secret or file).
fn merged_authorization(
    ep: Option<&Authorization>,
    class: Option<&ScrapeClass>,
    path: &str,
) -> Option<(ClassAuthorization, String)> {
    let own = ep.filter(|a| **a != Authorization::default());
    let class_authz = class.and_then(|c| c.authorization.as_ref().map(|a| (c, a)));
    match (own, class_authz) {
        (None, None) => None,
        (None, Some((c, a))) => {
            Some((a.clone(), format!("scrapeClass {:?} authorization", c.name)))
        }
        (Some(a), class_authz) => {
            let mut out = ClassAuthorization {
                kind: a.kind.clone(),
                credentials: a.credentials.clone(),
                credentials_file: String::new(),
            };
            if let (None, Some((_, ca))) = (&out.credentials, class_authz) {
                out.credentials = ca.credentials.clone();
                out.credentials_file = ca.credentials_file.clone();
            }
            Some((out, format!("{path}.authorization")))
        }
    }
}

/// `serviceMonitor/<ns>/<name>/<i>`, `podMonitor/<ns>/<name>/<i>`.
fn job_name(kind: MonitorKind, meta: &Metadata, i: usize) -> String {
    format!("{}/{}/{}/{i}", kind.job_prefix(), meta.namespace, meta.name)
}

/// `attachMetadata`: the monitor's, else its scrape class's.
fn attach(spec: &MonitorSpecCommon, class: Option<&ScrapeClass>) -> Option<AttachMetadata> {
    let given = spec
        .attach_metadata
        .as_ref()
        .or_else(|| class.and_then(|c| c.attach_metadata.as_ref()));
    given.map(|a| AttachMetadata {
        node: a.node.unwrap_or(false),
        namespace: false,
    })
}

fn field_err(
    kind: MonitorKind,
    meta: &Metadata,
) -> impl Fn(String, String) -> MonitorError + use<> {
    let monitor = format!("{}/{}", meta.namespace, meta.name);
    move |field, message| MonitorError::Field {
        kind,
        monitor: monitor.clone(),
        field,
        message,
    }
}

impl ServiceMonitor {
    /// The jobs of this monitor (`generateServiceMonitorConfig` for each endpoint).
    pub fn jobs(&self, ctx: &MonitorContext) -> Result<Vec<MonitorJob>, MonitorError> {
        let err = field_err(MonitorKind::ServiceMonitor, &self.metadata);
        let role = match self.spec.service_discovery_role.as_deref() {
            None => match ctx.service_discovery_role {
                Role::EndpointSlice => Role::EndpointSlice,
                _ => Role::Endpoints,
            },
            Some("Endpoints") => Role::Endpoints,
            Some("EndpointSlice") => Role::EndpointSlice,
            Some(other) => {
                return Err(err(
                    "spec.serviceDiscoveryRole".into(),
                    format!("{other:?} is not one of Endpoints, EndpointSlice"),
                ));
            }
        };
        (0..self.spec.endpoints.len())
            .map(|i| self.job(i, role, ctx, &err))
            .collect()
    }

    fn job(
        &self,
        i: usize,
        role: Role,
        ctx: &MonitorContext,
        err: &dyn Fn(String, String) -> MonitorError,
    ) -> Result<MonitorJob, MonitorError> {
        let meta = &self.metadata;
        let spec = &self.spec;
        let ep = &spec.endpoints[i];
        let path = format!("spec.endpoints[{i}]");
        let mut unsupported = Vec::new();
        let class = ctx
            .scrape_class(spec.common.scrape_class_name.as_deref())
            .map_err(|m| err("spec.scrapeClass".into(), m))?;
        let mut scrape = common_scrape(
            &spec.common,
            &ep.common,
            &path,
            &meta.namespace,
            ctx,
            err,
            &mut unsupported,
            true,
            class,
        )?;
        scrape.bearer_token_file =
            (!ep.bearer_token_file.is_empty()).then(|| ep.bearer_token_file.clone());

        let slice = role == Role::EndpointSlice;
        let mut r = Rules {
            rules: Vec::new(),
            err,
        };
        r.init();
        r.selector(&spec.common.selector, "service", "spec.selector")?;

        // The endpoint's port.
        let mut port_rule = None;
        let mut keep_port = |r: &mut Rules<'_>, source: &str, port: String, field: &str, among| {
            port_rule = Some(PortRule {
                field: format!("{path}.{field}"),
                rule: r.rules.len(),
                port: port.clone(),
                among,
            });
            r.push(
                Rule::default()
                    .action("keep")
                    .source(&[source])
                    .regex(&port),
            );
        };
        if !ep.port.is_empty() {
            let source = if slice {
                "__meta_kubernetes_endpointslice_port_name"
            } else {
                "__meta_kubernetes_endpoint_port_name"
            };
            keep_port(
                &mut r,
                source,
                ep.port.clone(),
                "port",
                "the ports of the selected Services",
            );
        } else if let Some(tp) = &ep.common.target_port {
            let among = "the container ports of the selected Services' pods";
            match tp {
                IntOrString::String(s) if !s.is_empty() => keep_port(
                    &mut r,
                    "__meta_kubernetes_pod_container_port_name",
                    s.clone(),
                    "targetPort",
                    among,
                ),
                IntOrString::Int(n) if *n != 0 => keep_port(
                    &mut r,
                    "__meta_kubernetes_pod_container_port_number",
                    n.to_string(),
                    "targetPort",
                    among,
                ),
                _ => {}
            }
        }

        let target = if slice {
            [
                "__meta_kubernetes_endpointslice_address_target_kind",
                "__meta_kubernetes_endpointslice_address_target_name",
            ]
        } else {
            [
                "__meta_kubernetes_endpoint_address_target_kind",
                "__meta_kubernetes_endpoint_address_target_name",
            ]
        };
        for (kind, label) in [("Node", "node"), ("Pod", "pod")] {
            r.push(
                Rule::default()
                    .source(&target)
                    .set("separator", ";")
                    .regex(&format!("{kind};(.*)"))
                    .replacement("${1}")
                    .target(label),
            );
        }
        for (source, label) in [
            ("__meta_kubernetes_namespace", "namespace"),
            ("__meta_kubernetes_service_name", "service"),
            ("__meta_kubernetes_pod_name", "pod"),
            ("__meta_kubernetes_pod_container_name", "container"),
        ] {
            r.push(Rule::default().source(&[source]).target(label));
        }
        if ep.common.filter_running.unwrap_or(true) {
            r.running_filter();
        }
        for l in &spec.target_labels {
            let l = sanitize_label_name(l);
            r.copy_if_set(&format!("__meta_kubernetes_service_label_{l}"), &l);
        }
        for l in spec
            .common
            .pod_target_labels
            .iter()
            .chain(&ctx.pod_target_labels)
        {
            let l = sanitize_label_name(l);
            r.copy_if_set(&format!("__meta_kubernetes_pod_label_{l}"), &l);
        }
        r.push(
            Rule::default()
                .source(&["__meta_kubernetes_service_name"])
                .target("job")
                .replacement("${1}"),
        );
        if !spec.common.job_label.is_empty() {
            let l = sanitize_label_name(&spec.common.job_label);
            r.copy_if_set(&format!("__meta_kubernetes_service_label_{l}"), "job");
        }
        endpoint_label(&mut r, Some(&ep.port), ep.common.target_port.as_ref());
        r.class(class);
        r.user(
            &ep.common.relabelings,
            &format!("{path}.relabelings"),
            &meta.namespace,
            ctx,
        )?;
        r.sharding(ctx)?;

        Ok(MonitorJob {
            name: job_name(MonitorKind::ServiceMonitor, meta, i),
            role,
            namespaces: namespaces(&spec.common.namespace_selector, &meta.namespace, ctx),
            attach_metadata: attach(&spec.common, class),
            relabel_configs: r.finish()?,
            scrape,
            unsupported,
            warnings: Vec::new(),
            port_rule,
        })
    }
}

/// The `endpoint` label: the port name, else `targetPort` as a string (an int 0 gives "0", as Go's
/// `IntOrString.String()` does).
fn endpoint_label(r: &mut Rules<'_>, port: Option<&str>, target_port: Option<&IntOrString>) {
    let value = match (port.filter(|p| !p.is_empty()), target_port) {
        (Some(p), _) => p.to_owned(),
        (None, Some(tp)) => tp.to_string(),
        (None, None) => return,
    };
    if value.is_empty() {
        return;
    }
    r.push(Rule::default().target("endpoint").replacement(&value));
}

impl PodMonitor {
    /// The jobs of this monitor (`generatePodMonitorConfig` for each endpoint).
    pub fn jobs(&self, ctx: &MonitorContext) -> Result<Vec<MonitorJob>, MonitorError> {
        let err = field_err(MonitorKind::PodMonitor, &self.metadata);
        (0..self.spec.pod_metrics_endpoints.len())
            .map(|i| self.job(i, ctx, &err))
            .collect()
    }

    fn job(
        &self,
        i: usize,
        ctx: &MonitorContext,
        err: &dyn Fn(String, String) -> MonitorError,
    ) -> Result<MonitorJob, MonitorError> {
        let meta = &self.metadata;
        let spec = &self.spec;
        let ep = &spec.pod_metrics_endpoints[i];
        let path = format!("spec.podMetricsEndpoints[{i}]");
        let mut unsupported = Vec::new();
        let class = ctx
            .scrape_class(spec.common.scrape_class_name.as_deref())
            .map_err(|m| err("spec.scrapeClass".into(), m))?;
        // SafeTLSConfig: no file fields (the apiserver prunes them; herald reports them).
        let scrape = common_scrape(
            &spec.common,
            &ep.common,
            &path,
            &meta.namespace,
            ctx,
            err,
            &mut unsupported,
            false,
            class,
        )?;
        let mut r = Rules {
            rules: Vec::new(),
            err,
        };
        r.init();
        if ep.common.filter_running.unwrap_or(true) {
            r.running_filter();
        }
        r.selector(&spec.common.selector, "pod", "spec.selector")?;

        let port = ep.port.as_deref().filter(|p| !p.is_empty());
        let mut port_rule = None;
        let mut keep_port = |r: &mut Rules<'_>, field: &str, port: &str, by_name: bool| {
            port_rule = Some(PortRule {
                field: format!("{path}.{field}"),
                port: port.to_owned(),
                rule: r.rules.len(),
                among: "the container ports of the selected pods",
            });
            let source = if by_name {
                "__meta_kubernetes_pod_container_port_name"
            } else {
                "__meta_kubernetes_pod_container_port_number"
            };
            r.push(Rule::default().action("keep").source(&[source]).regex(port));
        };
        if let Some(p) = port {
            keep_port(&mut r, "port", p, true);
        } else if let Some(n) = ep.port_number.filter(|n| *n != 0) {
            keep_port(&mut r, "portNumber", &n.to_string(), false);
        } else if let Some(tp) = &ep.common.target_port {
            match tp {
                IntOrString::String(s) if !s.is_empty() => keep_port(&mut r, "targetPort", s, true),
                IntOrString::Int(n) if *n != 0 => {
                    keep_port(&mut r, "targetPort", &n.to_string(), false);
                }
                _ => {}
            }
        }
        for (source, label) in [
            ("__meta_kubernetes_namespace", "namespace"),
            ("__meta_kubernetes_pod_container_name", "container"),
            ("__meta_kubernetes_pod_name", "pod"),
        ] {
            r.push(Rule::default().source(&[source]).target(label));
        }
        for l in spec
            .common
            .pod_target_labels
            .iter()
            .chain(&ctx.pod_target_labels)
        {
            let l = sanitize_label_name(l);
            r.copy_if_set(&format!("__meta_kubernetes_pod_label_{l}"), &l);
        }
        r.push(
            Rule::default()
                .target("job")
                .replacement(&format!("{}/{}", meta.namespace, meta.name)),
        );
        if !spec.common.job_label.is_empty() {
            let l = sanitize_label_name(&spec.common.job_label);
            r.copy_if_set(&format!("__meta_kubernetes_pod_label_{l}"), "job");
        }
        endpoint_label(&mut r, port, ep.common.target_port.as_ref());
        r.class(class);
        r.user(
            &ep.common.relabelings,
            &format!("{path}.relabelings"),
            &meta.namespace,
            ctx,
        )?;
        r.sharding(ctx)?;

        Ok(MonitorJob {
            name: job_name(MonitorKind::PodMonitor, meta, i),
            role: Role::Pod,
            namespaces: namespaces(&spec.common.namespace_selector, &meta.namespace, ctx),
            attach_metadata: attach(&spec.common, class),
            relabel_configs: r.finish()?,
            scrape,
            unsupported,
            warnings: Vec::new(),
            port_rule,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The scrape config herald serves
// ---------------------------------------------------------------------------------------------

/// The Prometheus `scrape_configs` entry (a one-item YAML list, so entries concatenate under
/// `scrape_configs:`) for `job`, discovering through herald's HTTP SD at `sd_url`: the job name, the
/// endpoint's scrape settings in the operator's order, and each [`MonitorJob::unsupported`] and
/// [`MonitorJob::warnings`] item as a `# unsupported:` or `# warning:` comment line before it. No
/// `relabel_configs`: herald applies them. Deterministic.
pub fn scrape_config_yaml(job: &MonitorJob, sd_url: &str) -> String {
    let s = &job.scrape;
    let mut m = Mapping::new();
    let mut put = |k: &str, v: Yaml| {
        m.insert(k.into(), v);
    };
    put("job_name", job.name.as_str().into());
    put("honor_labels", s.honor_labels.into());
    if let Some(v) = s.honor_timestamps {
        put("honor_timestamps", v.into());
    }
    if let Some(v) = s.track_timestamps_staleness {
        put("track_timestamps_staleness", v.into());
    }
    let mut sd = Mapping::new();
    sd.insert("url".into(), sd_url.into());
    put("http_sd_configs", Yaml::Sequence(vec![Yaml::Mapping(sd)]));
    let opt_str = |v: &Option<String>| v.as_deref().map(Yaml::from);
    for (k, v) in [
        ("scrape_interval", &s.scrape_interval),
        ("scrape_timeout", &s.scrape_timeout),
        ("metrics_path", &s.metrics_path),
    ] {
        if let Some(v) = opt_str(v) {
            put(k, v);
        }
    }
    if let Some(params) = &s.params {
        let pm: Mapping = params
            .iter()
            .map(|(k, vs)| {
                let seq = vs.iter().map(|v| Yaml::from(v.as_str())).collect();
                (Yaml::from(k.as_str()), Yaml::Sequence(seq))
            })
            .collect();
        put("params", Yaml::Mapping(pm));
    }
    if let Some(v) = opt_str(&s.scheme) {
        put("scheme", v);
    }
    if let Some(v) = s.follow_redirects {
        put("follow_redirects", v.into());
    }
    if let Some(v) = s.enable_http2 {
        put("enable_http2", v.into());
    }
    if let Some(v) = opt_str(&s.proxy_url) {
        put("proxy_url", v);
    }
    if let Some(v) = opt_str(&s.no_proxy) {
        put("no_proxy", v);
    }
    if let Some(v) = s.proxy_from_environment {
        put("proxy_from_environment", v.into());
    }
    if let Some(t) = &s.tls_config {
        let mut tm = Mapping::new();
        if let Some(v) = t.insecure_skip_verify {
            tm.insert("insecure_skip_verify".into(), v.into());
        }
        for (k, v) in [
            ("server_name", &t.server_name),
            ("min_version", &t.min_version),
            ("max_version", &t.max_version),
            ("ca_file", &t.ca_file),
            ("cert_file", &t.cert_file),
            ("key_file", &t.key_file),
        ] {
            if let Some(v) = opt_str(v) {
                tm.insert(k.into(), v);
            }
        }
        put("tls_config", Yaml::Mapping(tm));
    }
    if let Some(v) = opt_str(&s.bearer_token_file) {
        put("bearer_token_file", v);
    }
    if let Some(a) = &s.authorization {
        let mut am = Mapping::new();
        am.insert("type".into(), a.kind.as_str().into());
        if let Some(f) = opt_str(&a.credentials_file) {
            am.insert("credentials_file".into(), f);
        }
        put("authorization", Yaml::Mapping(am));
    }
    for (k, v) in [
        ("sample_limit", s.sample_limit),
        ("target_limit", s.target_limit),
        ("label_limit", s.label_limit),
        ("label_name_length_limit", s.label_name_length_limit),
        ("label_value_length_limit", s.label_value_length_limit),
        ("keep_dropped_targets", s.keep_dropped_targets),
    ] {
        if let Some(v) = v {
            put(k, v.into());
        }
    }
    if !s.scrape_protocols.is_empty() {
        let seq = s
            .scrape_protocols
            .iter()
            .map(|p| Yaml::from(p.as_str()))
            .collect();
        put("scrape_protocols", Yaml::Sequence(seq));
    }
    if let Some(v) = opt_str(&s.fallback_scrape_protocol) {
        put("fallback_scrape_protocol", v);
    }
    if let Some(v) = opt_str(&s.body_size_limit) {
        put("body_size_limit", v);
    }
    if !s.metric_relabel_configs.is_empty() {
        put(
            "metric_relabel_configs",
            Yaml::Sequence(s.metric_relabel_configs.clone()),
        );
    }
    let body = serde_yaml::to_string(&Yaml::Sequence(vec![Yaml::Mapping(m)]))
        .expect("a mapping of strings, numbers and booleans always serializes");
    let mut out = String::new();
    for (what, items) in [
        ("unsupported", &job.unsupported),
        ("warning", &job.warnings),
    ] {
        for u in items {
            // One comment line each, whatever the item holds.
            out.push_str("# ");
            out.push_str(what);
            out.push_str(": ");
            out.push_str(&u.replace(['\n', '\r'], " "));
            out.push('\n');
        }
    }
    out.push_str(&body);
    out
}
