//! The job file: `jobs: [...]`, each job a name plus the fields of one Prometheus `kubernetes_sd_configs`
//! entry, validated as prometheus/prometheus `discovery/kubernetes/kubernetes.go` `SDConfig.UnmarshalYAML`
//! does. Client settings (api_server, tls_config, ...) are accepted and ignored: herald has one upstream.
//! A job may also carry `relabel_configs` (Prometheus's syntax and rules, see [`crate::relabel`]) and
//! `keep_meta_labels`.

use std::collections::{BTreeMap, BTreeSet};

use kube_selectors::{FieldSelector, LabelSelector};
use serde::Deserialize;

use crate::relabel::{RelabelConfig, RelabelError};
use crate::target::{AttachMetadata, OwnerMetadata, Role};

pub mod annotations;
mod server;
pub mod target_allocator;
pub use server::ServerConfig;
pub use target_allocator::TargetAllocatorConfig;

/// Fields of a Prometheus `kubernetes_sd_configs` entry that configure its own API client
/// (`api_server`, `kubeconfig_file` and the inlined `config.HTTPClientConfig` of prometheus/common).
/// Herald reads from its own upstream, so these are accepted and reported as ignored.
pub const CLIENT_SETTINGS: &[&str] = &[
    "api_server",
    "kubeconfig_file",
    "basic_auth",
    "authorization",
    "oauth2",
    "bearer_token",
    "bearer_token_file",
    "tls_config",
    "proxy_url",
    "no_proxy",
    "proxy_from_environment",
    "proxy_connect_header",
    "follow_redirects",
    "enable_http2",
    "http_headers",
];

/// The whole job file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub jobs: Vec<Job>,
    /// The `kube_api:` section: herald's read-only Kubernetes API face.
    pub kube_api: KubeApiConfig,
    /// The `server:` section: how herald's own port is secured.
    pub server: ServerConfig,
    /// The `monitors:` section: prometheus-operator ServiceMonitors and PodMonitors served as jobs.
    /// Unset: herald does not read monitors.
    pub monitors: Option<MonitorsConfig>,
    /// The `istio:` section: the mesh as jobs with `istio:` see it.
    pub istio: IstioConfig,
    /// The `target_allocator:` section: the OpenTelemetry target allocator's API. Unset: not served.
    pub target_allocator: Option<TargetAllocatorConfig>,
}

/// `istio:`: where the mesh keeps its mesh-wide policy, and where the Prometheus scraping under
/// STRICT mTLS finds Istio's certificates.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IstioConfig {
    /// `meshConfig.rootNamespace` (default `istio-system`): its selector-less PeerAuthentication is
    /// mesh-wide.
    #[serde(default = "default_root_namespace")]
    pub root_namespace: String,
    /// Where the scraping Prometheus mounts the workload certificates (default `/etc/prom-certs`, as
    /// Istio documents); written into the companion jobs' generated `tls_config`.
    #[serde(default = "default_certs_dir")]
    pub certs_dir: String,
}

fn default_root_namespace() -> String {
    crate::istio::DEFAULT_ROOT_NAMESPACE.to_string()
}

fn default_certs_dir() -> String {
    crate::istio::DEFAULT_CERTS_DIR.to_string()
}

impl Default for IstioConfig {
    fn default() -> IstioConfig {
        IstioConfig {
            root_namespace: default_root_namespace(),
            certs_dir: default_certs_dir(),
        }
    }
}

/// `monitors:`: which prometheus-operator monitors herald serves, selected as a Prometheus object's
/// `serviceMonitorSelector`/`podMonitorSelector` and `*NamespaceSelector` select them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorsConfig {
    /// Serve `monitoring.coreos.com/v1` ServiceMonitors (default true).
    #[serde(default = "yes")]
    pub service_monitors: bool,
    /// Serve `monitoring.coreos.com/v1` PodMonitors (default true).
    #[serde(default = "yes")]
    pub pod_monitors: bool,
    /// Namespaces whose monitors are taken; empty: every namespace.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// A label selector (kubectl syntax) the monitors must match; empty: every monitor.
    #[serde(default)]
    pub selector: String,
    /// How ServiceMonitors discover, as the Prometheus object's `serviceDiscoveryRole`: `Endpoints`
    /// (the operator's default) or `EndpointSlice`.
    #[serde(default = "endpoints_role")]
    pub service_discovery_role: String,
    /// The roles ServiceMonitors may discover with, one base job (an index over that kind) each.
    /// Empty: `service_discovery_role` alone. List both `Endpoints` and `EndpointSlice` when some
    /// ServiceMonitors set their own `serviceDiscoveryRole`, or when the followed Prometheus object
    /// may switch roles; a ServiceMonitor needing a role not listed is reported, not served.
    #[serde(default)]
    pub service_discovery_roles: Vec<String>,
    /// Scrape classes, as the Prometheus object's `scrapeClasses` (same fields: `name`, `default`,
    /// `relabelings`, `metricRelabelings`, `tlsConfig`, `authorization`, `attachMetadata`,
    /// `fallbackScrapeProtocol`), for monitors naming one in `spec.scrapeClass` or taking the
    /// default. With `prometheus:` they come from the Prometheus object instead.
    #[serde(default)]
    pub scrape_classes: Vec<serde_json::Value>,
    /// As the Prometheus object's `ignoreNamespaceSelectors`: every monitor discovers in its own
    /// namespace only.
    #[serde(default)]
    pub ignore_namespace_selectors: bool,
    /// `<namespace>/<name>` of a `monitoring.coreos.com/v1` Prometheus object: take the selection from
    /// it instead (`serviceMonitorSelector`, `serviceMonitorNamespaceSelector`, `podMonitorSelector`,
    /// `podMonitorNamespaceSelector`, `serviceDiscoveryRole`, `ignoreNamespaceSelectors`), following
    /// its changes. `namespaces`, `selector` and `ignore_namespace_selectors` must then be unset.
    #[serde(default)]
    pub prometheus: Option<String>,
    /// Place each monitor job's targets by Istio's PeerAuthentications (as a job's `istio:` does,
    /// without rewriting merged annotations: a monitor names its ports): a target of a sidecar pod
    /// whose port is under STRICT mTLS moves to the companion job `<job>/istio-mtls`, scraped over
    /// https with the certificates of the top-level `istio:` section.
    #[serde(default)]
    pub istio: bool,
    /// Attach node metadata (`__meta_kubernetes_node_*`) in the base jobs, so monitors with
    /// `attachMetadata: {node: true}` (their own or their scrape class's) get their node's labels, as
    /// Prometheus's `attach_metadata` gives them. It costs a watch of Nodes and their labels on every
    /// target; monitors that do not ask for it never see them. Off: such monitors are served without
    /// node labels and warned about.
    #[serde(default)]
    pub attach_node_metadata: bool,
}

fn yes() -> bool {
    true
}

fn endpoints_role() -> String {
    "Endpoints".into()
}

impl MonitorsConfig {
    /// The parsed `selector`.
    pub fn label_selector(&self) -> kube_selectors::LabelSelector {
        kube_selectors::LabelSelector::parse(&self.selector)
            .expect("parse_config validated monitors.selector")
    }

    /// The Prometheus object the selection comes from, as (namespace, name).
    pub fn prometheus_object(&self) -> Option<(&str, &str)> {
        self.prometheus.as_deref().and_then(|p| p.split_once('/'))
    }

    /// The role ServiceMonitors discover with unless they set their own.
    pub fn service_role(&self) -> Role {
        service_role_named(&self.service_discovery_role)
    }

    /// The parsed `scrape_classes`.
    pub fn scrape_classes(&self) -> Vec<crate::monitor::ScrapeClass> {
        crate::monitor::scrape_classes(&serde_json::Value::Array(self.scrape_classes.clone()))
            .expect("parse_config validated monitors.scrape_classes")
    }

    /// Every role ServiceMonitors may discover with (`service_discovery_roles`, else the default
    /// role alone), in the order configured, without repeats.
    pub fn service_roles(&self) -> Vec<Role> {
        if self.service_discovery_roles.is_empty() {
            return vec![self.service_role()];
        }
        let mut roles = Vec::new();
        for r in self
            .service_discovery_roles
            .iter()
            .map(|r| service_role_named(r))
        {
            if !roles.contains(&r) {
                roles.push(r);
            }
        }
        roles
    }
}

/// A validated `serviceDiscoveryRole` value as a role.
fn service_role_named(name: &str) -> Role {
    if name == "EndpointSlice" {
        Role::EndpointSlice
    } else {
        Role::Endpoints
    }
}

/// `kube_api:`: what herald's Kubernetes API face serves and how. Resource names are resolved (and
/// rejected when unknown) by the server, which knows the built-in resources.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeApiConfig {
    /// Where to serve it (`--kube-listen` overrides). Unset: the face is off.
    #[serde(default)]
    pub listen: Option<String>,
    /// Cached and served kinds beyond what the jobs need. Empty: the default set.
    #[serde(default)]
    pub kinds: Vec<KindRef>,
    /// A file of bearer tokens, one per line, re-read when it changes.
    #[serde(default)]
    pub token_file: Option<String>,
    /// PEM certificate chain and key to serve over TLS (client-go sends tokens only over TLS).
    #[serde(default)]
    pub tls_cert_file: Option<String>,
    #[serde(default)]
    pub tls_key_file: Option<String>,
    /// A PEM CA: clients presenting a certificate it signed are authenticated (mTLS). Needs TLS.
    #[serde(default)]
    pub client_ca_file: Option<String>,
    /// Serve without authentication on a non-loopback address.
    #[serde(default)]
    pub insecure: bool,
    /// New lists and watches admitted per second (a token bucket), and its burst.
    #[serde(default)]
    pub admission_rate: Option<f64>,
    #[serde(default)]
    pub admission_burst: Option<u32>,
    /// Events kept per kind for downstream watch resumption.
    #[serde(default)]
    pub history_window: Option<usize>,
    /// Milliseconds a watcher that has just written waits before its next write, so that events
    /// arriving meanwhile share one write (0: none; default 50).
    #[serde(default)]
    pub watch_batch_ms: Option<u64>,
}

/// A kind to serve: a built-in by plural name (`pods`, `ingresses.networking.k8s.io`), or a custom
/// resource by group, version and resource.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum KindRef {
    Builtin(String),
    Custom {
        group: String,
        version: String,
        resource: String,
    },
}

impl Config {
    /// Every ignored client setting, as `(job name, field name)`.
    pub fn ignored_fields(&self) -> impl Iterator<Item = (&str, &str)> {
        self.jobs
            .iter()
            .flat_map(|j| j.ignored.iter().map(move |f| (j.name.as_str(), f.as_str())))
    }
}

/// One discovery job: what a `kubernetes_sd_configs` entry would discover, under a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub name: String,
    pub role: Role,
    pub namespaces: Namespaces,
    pub selectors: Vec<Selector>,
    pub attach_metadata: AttachMetadata,
    /// `attach_metadata.deployment`, `.job` and `.cronjob`.
    pub owner_metadata: OwnerMetadata,
    /// Client settings present in the job and ignored, in the order of [`CLIENT_SETTINGS`].
    pub ignored: Vec<String>,
    /// `relabel_configs`: Prometheus relabel rules in Prometheus's syntax, validated when the job is
    /// read (label names by Prometheus 3's default UTF-8 rules). Empty when not given.
    pub relabel_configs: Vec<RelabelConfig>,
    /// `annotations: prometheus.io` or `prometheus.io/slow`: the `prometheus.io/*` annotation rules
    /// (see [`annotations`]), placed before the job's own `relabel_configs` (and included in them).
    pub annotations: Option<String>,
    /// `keep_meta_labels` (default false): after relabeling, labels starting with `__meta_` are
    /// dropped unless keep_meta_labels is true.
    pub keep_meta_labels: bool,
    /// `istio: merged` or `separate`: targets of pods in an Istio mesh as the mesh needs them (see
    /// [`crate::istio`]); STRICT targets are served in the companion `<name>/istio-mtls`.
    pub istio: Option<crate::istio::IstioMode>,
}

impl Job {
    /// The selector for objects of `role` watched by this job, if one is configured.
    pub fn selector(&self, role: Role) -> Option<&Selector> {
        self.selectors.iter().find(|s| s.role == role)
    }
}

/// `namespaces`: which namespaces to discover in. Empty `names` without `own_namespace` means all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Namespaces {
    pub names: Vec<String>,
    pub own_namespace: bool,
}

/// One `selectors` entry: label and field selectors for the objects of `role` the job watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub role: Role,
    pub label: String,
    pub field: String,
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
}

/// Why a job file was rejected. Messages name the job and the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid job file: {0}")]
    Yaml(String),
    #[error("jobs[{index}]: {message}")]
    Unnamed { index: usize, message: String },
    #[error("job {job:?} is defined twice")]
    DuplicateJob { job: String },
    #[error("job {job:?}: {error}")]
    Job { job: String, error: Box<JobError> },
}

/// What is wrong inside one job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("{0}")]
    Field(String),
    #[error("unknown field {0:?}")]
    UnknownField(String),
    #[error("role is missing (one of: pod, service, endpoints, endpointslice, node, ingress)")]
    MissingRole,
    #[error(
        "role {0:?} is not a role (one of: pod, service, endpoints, endpointslice, node, ingress)"
    )]
    UnknownRole(String),
    #[error("selectors[{index}].role is missing")]
    SelectorRoleMissing { index: usize },
    #[error("selectors[{index}].role {role:?} is not a role")]
    SelectorRoleUnknown { index: usize, role: String },
    #[error("selectors[{index}].role {role:?} is duplicated")]
    SelectorRoleDuplicated { index: usize, role: String },
    #[error(
        "selectors[{index}].role {role:?} is not watched by role {job_role}, which supports only {allowed} selectors"
    )]
    SelectorRoleNotWatched {
        index: usize,
        role: String,
        job_role: &'static str,
        allowed: String,
    },
    #[error("selectors[{index}].label {selector:?}: {error}")]
    LabelSelector {
        index: usize,
        selector: String,
        error: kube_selectors::Error,
    },
    #[error("selectors[{index}].field {selector:?}: {error}")]
    FieldSelector {
        index: usize,
        selector: String,
        error: kube_selectors::Error,
    },
    /// A `relabel_configs` rule that does not read or is not valid, by its index.
    #[error("relabel_configs[{index}]: {error}")]
    Relabel { index: usize, error: RelabelError },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    jobs: Option<Vec<serde_yaml::Value>>,
    #[serde(default)]
    kube_api: Option<serde_yaml::Value>,
    #[serde(default)]
    server: Option<serde_yaml::Value>,
    #[serde(default)]
    monitors: Option<serde_yaml::Value>,
    #[serde(default)]
    istio: Option<serde_yaml::Value>,
    #[serde(default)]
    target_allocator: Option<serde_yaml::Value>,
}

/// A job's top level. Sections stay raw YAML so each is decoded on its own and its errors can say
/// which section they come from.
#[derive(Deserialize)]
struct RawJob {
    #[allow(dead_code)] // read beforehand to name the job in errors; listed so it is not "unknown"
    name: serde_yaml::Value,
    #[serde(default)]
    role: serde_yaml::Value,
    #[serde(default)]
    namespaces: serde_yaml::Value,
    #[serde(default)]
    selectors: Option<Vec<serde_yaml::Value>>,
    #[serde(default)]
    attach_metadata: serde_yaml::Value,
    #[serde(default)]
    relabel_configs: serde_yaml::Value,
    #[serde(default)]
    keep_meta_labels: serde_yaml::Value,
    #[serde(default)]
    annotations: serde_yaml::Value,
    #[serde(default)]
    istio: serde_yaml::Value,
    #[serde(flatten)]
    rest: BTreeMap<String, serde_yaml::Value>,
}

/// Decode one section of a job; YAML `null` (or an absent section) gives the default.
fn section<T: serde::de::DeserializeOwned + Default>(
    what: &str,
    value: serde_yaml::Value,
) -> Result<T, JobError> {
    if value.is_null() {
        return Ok(T::default());
    }
    serde_yaml::from_value(value).map_err(|e| JobError::Field(format!("{what}: {e}")))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawNamespaces {
    #[serde(default)]
    names: Option<Vec<String>>,
    #[serde(default)]
    own_namespace: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSelector {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    field: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAttachMetadata {
    #[serde(default)]
    node: bool,
    #[serde(default)]
    namespace: bool,
    #[serde(default)]
    deployment: bool,
    #[serde(default)]
    job: bool,
    #[serde(default)]
    cronjob: bool,
}

/// Parse and validate a job file.
pub fn parse_config(yaml: &str) -> Result<Config, ConfigError> {
    let raw: RawConfig =
        serde_yaml::from_str(yaml).map_err(|e| ConfigError::Yaml(e.to_string()))?;
    let mut jobs = Vec::new();
    let mut names = BTreeSet::new();
    for (index, value) in raw.jobs.unwrap_or_default().into_iter().enumerate() {
        let name = job_name(index, &value)?;
        if !names.insert(name.clone()) {
            return Err(ConfigError::DuplicateJob { job: name });
        }
        let job = parse_job(name.clone(), value).map_err(|error| ConfigError::Job {
            job: name,
            error: Box::new(error),
        })?;
        jobs.push(job);
    }
    let kube_api = match raw.kube_api {
        None | Some(serde_yaml::Value::Null) => KubeApiConfig::default(),
        Some(v) => {
            serde_yaml::from_value(v).map_err(|e| ConfigError::Yaml(format!("kube_api: {e}")))?
        }
    };
    let monitors = match raw.monitors {
        None | Some(serde_yaml::Value::Null) => None,
        Some(v) => {
            let m: MonitorsConfig = serde_yaml::from_value(v)
                .map_err(|e| ConfigError::Yaml(format!("monitors: {e}")))?;
            kube_selectors::LabelSelector::parse(&m.selector).map_err(|e| {
                ConfigError::Yaml(format!("monitors.selector {:?}: {e}", m.selector))
            })?;
            if let Some(p) = &m.prometheus {
                let valid = p.split_once('/').is_some_and(|(ns, name)| {
                    !ns.is_empty() && !name.is_empty() && !name.contains('/')
                });
                if !valid {
                    return Err(ConfigError::Yaml(format!(
                        "monitors.prometheus {p:?}: must be <namespace>/<name>"
                    )));
                }
                if !m.namespaces.is_empty()
                    || !m.selector.is_empty()
                    || m.ignore_namespace_selectors
                    || !m.scrape_classes.is_empty()
                {
                    return Err(ConfigError::Yaml(format!(
                        "monitors.prometheus {p:?} takes the selection from the Prometheus object: \
                         leave monitors.namespaces, monitors.selector, \
                         monitors.ignore_namespace_selectors and monitors.scrape_classes unset"
                    )));
                }
            }
            for (field, role) in
                std::iter::once(("service_discovery_role", &m.service_discovery_role)).chain(
                    m.service_discovery_roles
                        .iter()
                        .map(|r| ("service_discovery_roles", r)),
                )
            {
                if !["Endpoints", "EndpointSlice"].contains(&role.as_str()) {
                    return Err(ConfigError::Yaml(format!(
                        "monitors.{field} {role:?}: must be Endpoints or EndpointSlice"
                    )));
                }
            }
            crate::monitor::scrape_classes(&serde_json::Value::Array(m.scrape_classes.clone()))
                .map_err(|e| ConfigError::Yaml(format!("monitors.scrape_classes: {e}")))?;
            if !m.service_discovery_roles.is_empty()
                && !m
                    .service_discovery_roles
                    .contains(&m.service_discovery_role)
            {
                return Err(ConfigError::Yaml(format!(
                    "monitors.service_discovery_roles {:?} lacks the default role \
                     monitors.service_discovery_role {:?}",
                    m.service_discovery_roles, m.service_discovery_role
                )));
            }
            Some(m)
        }
    };
    let server = match raw.server {
        None | Some(serde_yaml::Value::Null) => ServerConfig::default(),
        Some(v) => {
            serde_yaml::from_value(v).map_err(|e| ConfigError::Yaml(format!("server: {e}")))?
        }
    };
    let istio = match raw.istio {
        None | Some(serde_yaml::Value::Null) => IstioConfig::default(),
        Some(v) => {
            serde_yaml::from_value(v).map_err(|e| ConfigError::Yaml(format!("istio: {e}")))?
        }
    };
    if let Some(job) = jobs.iter().find(|j| {
        j.istio.is_some()
            && crate::istio::mtls_job_name(&j.name) != j.name
            && names.contains(&crate::istio::mtls_job_name(&j.name))
    }) {
        return Err(ConfigError::Job {
            job: job.name.clone(),
            error: Box::new(JobError::Field(format!(
                "istio: its companion job {:?} is also configured",
                crate::istio::mtls_job_name(&job.name)
            ))),
        });
    }
    let target_allocator = match raw.target_allocator {
        None | Some(serde_yaml::Value::Null) => None,
        Some(v) => Some(
            target_allocator::parse(v)
                .map_err(|e| ConfigError::Yaml(format!("target_allocator: {e}")))?,
        ),
    };
    if target_allocator
        .as_ref()
        .is_some_and(|t| matches!(t.collectors, target_allocator::Collectors::Pods { .. }))
        && names.contains(target_allocator::COLLECTORS_JOB)
    {
        return Err(ConfigError::Yaml(format!(
            "job {:?} is reserved: herald finds the collector pods with it",
            target_allocator::COLLECTORS_JOB
        )));
    }
    Ok(Config {
        jobs,
        kube_api,
        server,
        monitors,
        istio,
        target_allocator,
    })
}

fn job_name(index: usize, value: &serde_yaml::Value) -> Result<String, ConfigError> {
    let unnamed = |message: &str| ConfigError::Unnamed {
        index,
        message: message.to_owned(),
    };
    let map = value
        .as_mapping()
        .ok_or_else(|| unnamed("a job must be a mapping"))?;
    match map.get("name") {
        None | Some(serde_yaml::Value::Null) => Err(unnamed("name is missing")),
        Some(serde_yaml::Value::String(s)) if s.is_empty() => Err(unnamed("name is empty")),
        Some(serde_yaml::Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(unnamed("name must be a string")),
    }
}

fn parse_job(name: String, value: serde_yaml::Value) -> Result<Job, JobError> {
    let raw: RawJob = serde_yaml::from_value(value).map_err(|e| JobError::Field(e.to_string()))?;

    let mut ignored = Vec::new();
    for key in raw.rest.keys() {
        if !CLIENT_SETTINGS.contains(&key.as_str()) {
            return Err(JobError::UnknownField(key.clone()));
        }
    }
    for setting in CLIENT_SETTINGS {
        if raw.rest.contains_key(*setting) {
            ignored.push((*setting).to_owned());
        }
    }

    let role: Option<String> = section("role", raw.role)?;
    let role = match role.as_deref() {
        None | Some("") => return Err(JobError::MissingRole),
        Some(r) => Role::parse(r).ok_or_else(|| JobError::UnknownRole(r.to_owned()))?,
    };
    let namespaces: RawNamespaces = section("namespaces", raw.namespaces)?;
    let attach: RawAttachMetadata = section("attach_metadata", raw.attach_metadata)?;
    let mut selectors: Vec<Selector> = Vec::new();
    for (index, value) in raw.selectors.unwrap_or_default().into_iter().enumerate() {
        let raw_selector: RawSelector = section(&format!("selectors[{index}]"), value)?;
        let selector = parse_selector(role, index, raw_selector, &selectors)?;
        selectors.push(selector);
    }
    let mut relabel_configs = parse_relabel_configs(raw.relabel_configs)?;
    let annotations: Option<String> = section("annotations", raw.annotations)?;
    if let Some(preset) = &annotations {
        let mut rules = annotations::rules(preset, role)?;
        rules.append(&mut relabel_configs);
        relabel_configs = rules;
    }
    let keep_meta_labels: bool = section("keep_meta_labels", raw.keep_meta_labels)?;
    let istio: Option<crate::istio::IstioMode> = section("istio", raw.istio)?;
    if istio.is_some() {
        if !matches!(role, Role::Pod | Role::Endpoints | Role::EndpointSlice) {
            return Err(JobError::Field(format!(
                "istio: applies to roles pod, endpoints and endpointslice (targets on pods), not {}",
                role.as_str()
            )));
        }
        if relabel_configs.is_empty() {
            return Err(JobError::Field(
                "istio: needs the job to pick its targets by relabeling (annotations: prometheus.io or \
                 relabel_configs): every container port of a pod is not a scrape target"
                    .into(),
            ));
        }
    }

    Ok(Job {
        name,
        role,
        namespaces: Namespaces {
            names: namespaces.names.unwrap_or_default(),
            own_namespace: namespaces.own_namespace,
        },
        selectors,
        attach_metadata: AttachMetadata {
            node: attach.node,
            namespace: attach.namespace,
        },
        owner_metadata: OwnerMetadata {
            deployment: attach.deployment,
            job: attach.job,
            cronjob: attach.cronjob,
        },
        ignored,
        relabel_configs,
        annotations,
        keep_meta_labels,
        istio,
    })
}

/// `relabel_configs`: each rule read (Prometheus's syntax and defaults) and validated; errors name the
/// rule's index.
fn parse_relabel_configs(value: serde_yaml::Value) -> Result<Vec<RelabelConfig>, JobError> {
    let rules: Vec<serde_yaml::Value> = section("relabel_configs", value)?;
    rules
        .into_iter()
        .enumerate()
        .map(|(index, rule)| {
            let config: RelabelConfig =
                serde_yaml::from_value(rule).map_err(|e| JobError::Relabel {
                    index,
                    error: RelabelError::Syntax(e.to_string()),
                })?;
            config
                .validate()
                .map_err(|error| JobError::Relabel { index, error })?;
            Ok(config)
        })
        .collect()
}

/// The selector roles each job role watches (`allowedSelectors` in kubernetes.go): a pod job also
/// watches nodes, the endpoints roles also watch pods and services.
pub fn allowed_selector_roles(role: Role) -> &'static [Role] {
    match role {
        Role::Pod => &[Role::Pod, Role::Node],
        Role::Service => &[Role::Service],
        Role::EndpointSlice => &[Role::Pod, Role::Service, Role::EndpointSlice],
        Role::Endpoints => &[Role::Pod, Role::Service, Role::Endpoints],
        Role::Node => &[Role::Node],
        Role::Ingress => &[Role::Ingress],
    }
}

fn parse_selector(
    job_role: Role,
    index: usize,
    raw: RawSelector,
    earlier: &[Selector],
) -> Result<Selector, JobError> {
    let role = match raw.role.as_deref() {
        None | Some("") => return Err(JobError::SelectorRoleMissing { index }),
        Some(r) => Role::parse(r).ok_or_else(|| JobError::SelectorRoleUnknown {
            index,
            role: r.to_owned(),
        })?,
    };
    if earlier.iter().any(|s| s.role == role) {
        return Err(JobError::SelectorRoleDuplicated {
            index,
            role: role.as_str().to_owned(),
        });
    }
    let allowed = allowed_selector_roles(job_role);
    if !allowed.contains(&role) {
        return Err(JobError::SelectorRoleNotWatched {
            index,
            role: role.as_str().to_owned(),
            job_role: job_role.as_str(),
            allowed: allowed
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let field = raw.field.unwrap_or_default();
    let field_selector = FieldSelector::parse(&field).map_err(|error| JobError::FieldSelector {
        index,
        selector: field.clone(),
        error,
    })?;
    let label = raw.label.unwrap_or_default();
    let label_selector = LabelSelector::parse(&label).map_err(|error| JobError::LabelSelector {
        index,
        selector: label.clone(),
        error,
    })?;
    Ok(Selector {
        role,
        label,
        field,
        label_selector,
        field_selector,
    })
}

#[cfg(test)]
mod tests;
