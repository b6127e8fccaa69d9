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
//! What the Prometheus custom resource contributes is given by [`MonitorContext`], its scrape
//! classes included. Not modelled (see [`MonitorJob::unsupported`] for what is reported per
//! monitor): the operator's DaemonSet mode, topology sharding and retention-aware sharding,
//! `enforcedNamespaceLabel` exclusions, the Prometheus version gates (a recent Prometheus 3 is
//! assumed, with EndpointSlice support), the `service` role selector of `selectorMechanism:
//! RoleSelector` (see [`RoleSelectors`]), native histogram settings, and anything read from Secrets
//! or ConfigMaps.
//!
//! A monitor is also read against the operator's CRD schema (`crd`): a value the schema refuses is
//! an error, as the apiserver would refuse the object; a field it does not have is a warning of the
//! job (the apiserver would prune it). The operator's own checks that reject a monitor (`validate`:
//! a timeout over the interval, a client certificate without its key) are errors too.
//!
//! The parts: `object` (the objects as the CRDs define them), `rules` (the generated relabeling),
//! `scrape` (scrape settings, scrape-class merging, the served scrape config), `crd` and `validate`
//! (what the apiserver and the operator refuse); this file turns one monitor endpoint into a job.
//!
//! NB (for whoever applies the rules): the operator's rules run in Prometheus after it adds the scrape
//! defaults; the first one copies `job` (the job name) into `__tmp_prometheus_job_name`, which users'
//! relabelings may read. [`scrape_defaults`] gives those labels for a [`MonitorJob`].

use serde_json::Value;

use crate::relabel::RelabelConfig;
use crate::target::{AttachMetadata, LabelSet, Role};

mod crd;
mod object;
mod rules;
mod scrape;
mod validate;

pub use object::*;
pub use scrape::{
    AuthorizationFile, ScrapeSettings, SdClient, TlsFiles, http_sd_configs_yaml, scrape_classes,
    scrape_config_yaml, scrape_config_yaml_with,
};

use rules::{Rule, Rules};
use scrape::common_scrape;

#[cfg(test)]
mod tests;

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
    /// herald's discovery attaches node metadata to every target (`monitors.attach_node_metadata`):
    /// a job whose monitor does not ask for it drops `__meta_kubernetes_node_*` before its scrape
    /// class's and its own relabelings (the operator's rules never read them), as Prometheus would
    /// not have them.
    pub node_metadata_attached: bool,
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
            node_metadata_attached: false,
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
    /// With `selectorMechanism: RoleSelector`, the kubernetes_sd `selectors` the operator writes
    /// instead of its selector rules.
    pub role_selectors: Option<RoleSelectors>,
    /// What some of [`MonitorJob::relabel_configs`] stand for, by rule index (ascending): the
    /// selector's requirements and the running filter, so `explain` can name the requirement a
    /// target failed rather than a generated regex.
    pub rule_notes: Vec<(usize, RuleNote)>,
}

/// What a generated rule of a monitor job stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleNote {
    /// One requirement of the monitor's `field` selector (`spec.selector`), on the labels of the
    /// `object` (`service`, `pod`, `endpoints`, `endpointslice`): `matchLabels: app=web` or
    /// `matchExpressions[0]: tier In (a,b)`.
    Selector {
        field: String,
        object: String,
        requirement: String,
    },
    /// `filterRunning` (on by default): pods in phase Failed or Succeeded are dropped.
    RunningFilter,
}

/// The kubernetes_sd `selectors` of a monitor with `selectorMechanism: RoleSelector`
/// (`withK8SRoleSelectorConfig`): the monitor's selector given to Prometheus's list+watch of each
/// role. herald holds one list+watch per kind for every job, so it keeps what the selector would
/// have listed by the labels of the discovered object itself (the pod, the Endpoints, the
/// EndpointSlice): the first [`RoleSelectors::rules`] rules of [`MonitorJob::relabel_configs`],
/// keep/drop rules on `__meta_kubernetes_<role>_label[present]_*`, ahead of the operator's own.
///
/// NB: the `service` role's selector only decides, in Prometheus, whether a target gets its
/// Service's labels. herald does not model that: a Service that fails the selector while its
/// Endpoints (or EndpointSlice) pass it still gives its labels. The Kubernetes controllers copy a
/// Service's labels onto its Endpoints and EndpointSlices, so this differs only for a selector on a
/// label the Service lacks (`kubernetes.io/service-name` on EndpointSlices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleSelectors {
    /// The roles, in the operator's order: `pod`; or the ServiceMonitor's role, then `service`.
    pub roles: Vec<&'static str>,
    /// The selector as a Kubernetes label selector string (`labels.Selector.String()`).
    pub label: String,
    /// How many leading rules of [`MonitorJob::relabel_configs`] apply it.
    pub rules: usize,
}

impl RoleSelectors {
    /// With `selectorMechanism: RoleSelector`, the selectors for `roles`, their rules pushed to `r`
    /// (first: on `object`'s own labels); `None` otherwise.
    fn apply(
        r: &mut Rules<'_>,
        mechanism: Option<&str>,
        selector: &LabelSelector,
        object: &'static str,
        roles: Vec<&'static str>,
    ) -> Result<Option<RoleSelectors>, MonitorError> {
        if mechanism != Some("RoleSelector") {
            return Ok(None);
        }
        r.selector(selector, object, "spec.selector", true)?;
        Ok(Some(RoleSelectors {
            roles,
            label: label_selector_string(selector),
            rules: r.rules.len(),
        }))
    }
}

/// A label selector as apimachinery's `labels.Selector.String()` writes it after
/// `LabelSelectorAsSelector`: requirements sorted by key (matchLabels first where keys tie),
/// `k=v`, `k in (a,b)`, `k notin (a,b)` (values sorted), `k`, `!k`, comma-separated.
pub fn label_selector_string(sel: &LabelSelector) -> String {
    let mut reqs: Vec<(&str, String)> = sel
        .match_labels
        .iter()
        .map(|(k, v)| (k.as_str(), format!("{k}={v}")))
        .collect();
    for e in &sel.match_expressions {
        let mut values = e.values.clone();
        values.sort();
        let k = &e.key;
        let req = match e.operator.as_str() {
            "In" => format!("{k} in ({})", values.join(",")),
            "NotIn" => format!("{k} notin ({})", values.join(",")),
            "Exists" => k.clone(),
            "DoesNotExist" => format!("!{k}"),
            other => format!("{k} {other} ({})", values.join(",")),
        };
        reqs.push((k.as_str(), req));
    }
    // Stable, as Go's sort is for so few requirements (an insertion sort).
    reqs.sort_by_key(|(k, _)| *k);
    reqs.into_iter()
        .map(|(_, r)| r)
        .collect::<Vec<_>>()
        .join(",")
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

/// The operator's `sanitizeLabelName` is Prometheus's rule (every character outside `[a-zA-Z0-9_]`
/// becomes `_`), which herald-core already has.
pub use crate::labels::sanitize_label_name;

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
        if scrape.bearer_token_file.is_some() && scrape.authorization.is_some() {
            // The operator writes both; Prometheus then refuses the whole config ("authorization
            // is not compatible with bearer_token & bearer_token_file"), so herald serves neither.
            return Err(err(
                format!("{path}.bearerTokenFile"),
                "cannot go with an authorization (the endpoint's or its scrape class's): \
                 Prometheus refuses a scrape config with both"
                    .into(),
            ));
        }

        let slice = role == Role::EndpointSlice;
        let mut r = Rules {
            rules: Vec::new(),
            notes: Vec::new(),
            err,
        };
        let object = if slice { "endpointslice" } else { "endpoints" };
        let role_selectors = RoleSelectors::apply(
            &mut r,
            spec.common.selector_mechanism.as_deref(),
            &spec.common.selector,
            object,
            vec![object, "service"],
        )?;
        r.init();
        if role_selectors.is_none() {
            r.selector(&spec.common.selector, "service", "spec.selector", false)?;
        }

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
        r.unasked_node_metadata(ctx, attach(&spec.common, class));
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
            rule_notes: std::mem::take(&mut r.notes),
            relabel_configs: r.finish()?,
            scrape,
            unsupported,
            warnings: Vec::new(),
            port_rule,
            role_selectors,
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
            notes: Vec::new(),
            err,
        };
        let role_selectors = RoleSelectors::apply(
            &mut r,
            spec.common.selector_mechanism.as_deref(),
            &spec.common.selector,
            "pod",
            vec!["pod"],
        )?;
        r.init();
        if ep.common.filter_running.unwrap_or(true) {
            r.running_filter();
        }
        if role_selectors.is_none() {
            r.selector(&spec.common.selector, "pod", "spec.selector", false)?;
        }

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
        r.unasked_node_metadata(ctx, attach(&spec.common, class));
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
            rule_notes: std::mem::take(&mut r.notes),
            relabel_configs: r.finish()?,
            scrape,
            unsupported,
            warnings: Vec::new(),
            port_rule,
            role_selectors,
        })
    }
}
