//! Istio-aware targets: what a scrape of a pod in an Istio mesh must look like to work.
//!
//! Two things break plain annotation-driven scraping in a mesh:
//! - **Metrics merging.** The sidecar injector moves a pod's `prometheus.io/scrape|path|port`
//!   annotations into the `ISTIO_PROMETHEUS_ANNOTATIONS` environment variable of `istio-proxy` and
//!   points the annotations at pilot-agent's :15020 `/stats/prometheus`, which serves the
//!   application's metrics and Envoy's together, in plaintext (istio/istio
//!   `pkg/kube/inject/webhook.go` `applyPrometheusMerge`, and `pilot/cmd/pilot-agent/status`
//!   `PrometheusScrapeConfiguration` for the variable's JSON, read at 86c9f01).
//! - **Strict mTLS.** Under a STRICT PeerAuthentication the sidecar accepts only mutual TLS on the
//!   application's ports: a plaintext scrape fails. Istio's own answer is a Prometheus with the
//!   workload certificates mounted (`/etc/prom-certs/`) scraping over `https` with
//!   `insecure_skip_verify` (Istio's "Prometheus TLS settings").
//!
//! A job with `istio: merged` serves merged pods as Istio intends (one :15020 target, plaintext);
//! `istio: separate` recovers the application's own annotations from the environment variable and
//! serves an application target and an Envoy :15090 target (also for sidecar pods not merged, beside
//! their application target). In both, every target on an application
//! port of a sidecar pod gets the scheme its PeerAuthentication gives that port: STRICT moves it to
//! the job's companion (`<job>/istio-mtls`, `__scheme__=https`, scraped with Istio's certificate
//! settings); PERMISSIVE and DISABLE stay plain. Istio's own ports stay plaintext.
//!
//! Everything is decided from the target's discovered labels (namespace, pod labels, pod
//! annotations, `security.istio.io/tlsMode`) and one herald-internal label carrying the
//! environment variable, so the same code serves every role.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use serde_json::Value;

use crate::JobRelabel;
use crate::labels::{NAMESPACE, sanitize_label_name};
use crate::target::LabelSet;

/// pilot-agent's status port, where merged metrics are served (`meshConfig.defaultConfig.statusPort`).
pub const STATUS_PORT: u16 = 15020;
/// Envoy's own Prometheus endpoint (`http-envoy-prom`).
pub const ENVOY_STATS_PORT: u16 = 15090;
/// The path of both.
pub const STATS_PATH: &str = "/stats/prometheus";
/// The label the injector puts on every sidecar pod; Istio itself sends mTLS only to pods with it.
pub const TLS_MODE_LABEL: &str = "__meta_kubernetes_pod_label_security_istio_io_tlsMode";
/// Internal (never served): `ISTIO_PROMETHEUS_ANNOTATIONS` of the pod's istio-proxy, set by the pod
/// role on the groups of `istio: separate` jobs.
pub const APP_ANNOTATIONS_LABEL: &str = "__herald_istio_prometheus_annotations";
/// The environment variable itself.
pub const APP_ANNOTATIONS_ENV: &str = "ISTIO_PROMETHEUS_ANNOTATIONS";
/// The suffix of a job's companion, which holds its targets under STRICT mTLS.
pub const MTLS_SUFFIX: &str = "/istio-mtls";
/// Where Istio's documented Prometheus setup mounts the workload certificates.
pub const DEFAULT_CERTS_DIR: &str = "/etc/prom-certs";
/// Istio's root namespace unless `meshConfig.rootNamespace` says otherwise.
pub const DEFAULT_ROOT_NAMESPACE: &str = "istio-system";

const ANNOTATION: &str = "__meta_kubernetes_pod_annotation_prometheus_io_";
const ANNOTATION_PRESENT: &str = "__meta_kubernetes_pod_annotationpresent_prometheus_io_";

/// `istio:` of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IstioMode {
    /// One target per merged pod at :15020, as Istio intends.
    Merged,
    /// The application's own target (recovered annotations) and Envoy's :15090.
    Separate,
}

/// The mTLS mode of a PeerAuthentication (or one of its ports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MtlsMode {
    Unset,
    Disable,
    Permissive,
    Strict,
}

impl MtlsMode {
    fn parse(s: &str) -> Option<MtlsMode> {
        Some(match s {
            "UNSET" | "" => MtlsMode::Unset,
            "DISABLE" => MtlsMode::Disable,
            "PERMISSIVE" => MtlsMode::Permissive,
            "STRICT" => MtlsMode::Strict,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MtlsMode::Unset => "UNSET",
            MtlsMode::Disable => "DISABLE",
            MtlsMode::Permissive => "PERMISSIVE",
            MtlsMode::Strict => "STRICT",
        }
    }
}

/// What herald reads of a `security.istio.io` PeerAuthentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAuthentication {
    pub namespace: String,
    pub name: String,
    /// RFC 3339, as the apiserver writes it: orders as time.
    pub created: String,
    /// `selector.matchLabels`; empty: namespace- or mesh-wide.
    pub selector: BTreeMap<String, String>,
    pub mode: MtlsMode,
    /// `portLevelMtls`, by workload (container) port.
    pub ports: BTreeMap<u32, MtlsMode>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSpec {
    #[serde(default)]
    selector: Option<RawSelector>,
    #[serde(default)]
    mtls: Option<RawMtls>,
    #[serde(default)]
    port_level_mtls: Option<BTreeMap<String, RawMtls>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSelector {
    #[serde(default)]
    match_labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct RawMtls {
    #[serde(default)]
    mode: Option<String>,
}

impl PeerAuthentication {
    /// Decodes a PeerAuthentication object; the error names the object and the field at fault.
    pub fn from_value(obj: &Value) -> Result<PeerAuthentication, String> {
        let meta = &obj["metadata"];
        let namespace = meta["namespace"].as_str().unwrap_or_default().to_string();
        let name = meta["name"].as_str().unwrap_or_default().to_string();
        let at = format!("PeerAuthentication {namespace}/{name}");
        if name.is_empty() {
            return Err("PeerAuthentication without metadata.name".into());
        }
        let spec: RawSpec = match obj.get("spec") {
            None | Some(Value::Null) => RawSpec {
                selector: None,
                mtls: None,
                port_level_mtls: None,
            },
            Some(v) => RawSpec::deserialize(v).map_err(|e| format!("{at}: spec: {e}"))?,
        };
        let mode_of = |m: Option<&RawMtls>, field: &str| -> Result<MtlsMode, String> {
            let raw = m.and_then(|m| m.mode.as_deref()).unwrap_or("");
            MtlsMode::parse(raw).ok_or_else(|| {
                format!(
                    "{at}: {field}: unknown mode {raw:?} (UNSET, DISABLE, PERMISSIVE or STRICT)"
                )
            })
        };
        let mode = mode_of(spec.mtls.as_ref(), "spec.mtls.mode")?;
        let mut ports = BTreeMap::new();
        for (port, m) in spec.port_level_mtls.iter().flatten() {
            let n: u32 = port
                .parse()
                .ok()
                .filter(|n| (1..=65535).contains(n))
                .ok_or_else(|| {
                    format!("{at}: spec.portLevelMtls: {port:?} is not a port number")
                })?;
            ports.insert(
                n,
                mode_of(Some(m), &format!("spec.portLevelMtls.{port}.mode"))?,
            );
        }
        Ok(PeerAuthentication {
            namespace,
            name,
            created: meta["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            selector: spec
                .selector
                .and_then(|s| s.match_labels)
                .unwrap_or_default(),
            mode,
            ports,
        })
    }
}

/// Which PeerAuthentication decided a port's mode, and at what level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Never `Unset`: PERMISSIVE when no policy sets a mode.
    pub mode: MtlsMode,
    /// `"<namespace>/<name> (<level>)"`, or `None` for the default.
    pub by: Option<String>,
}

/// Every PeerAuthentication, ready to answer "which mode applies to this port of this pod".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policies {
    root_namespace: String,
    /// Per namespace, oldest first (Istio: the oldest of one level wins).
    by_namespace: HashMap<String, Vec<PeerAuthentication>>,
}

impl Policies {
    pub fn new(root_namespace: &str, mut all: Vec<PeerAuthentication>) -> Policies {
        all.sort_by(|a, b| {
            (a.created.as_str(), a.name.as_str()).cmp(&(b.created.as_str(), b.name.as_str()))
        });
        let mut by_namespace: HashMap<String, Vec<PeerAuthentication>> = HashMap::new();
        for p in all {
            by_namespace.entry(p.namespace.clone()).or_default().push(p);
        }
        Policies {
            root_namespace: root_namespace.to_string(),
            by_namespace,
        }
    }

    /// The mode for `port` (a container port; `None` when the target names none) of a pod in
    /// `namespace` whose label `key` is `label(key)`. As istio/istio
    /// `pilot/pkg/security/authn/policy_applier.go` `ComposePeerAuthentication` (read at 86c9f01):
    /// the oldest mesh-wide (selector-less, root namespace), namespace-wide (selector-less, the pod's
    /// namespace) and workload (selector matching, not in the root namespace) policies apply in that
    /// order, each overriding the one before unless UNSET; the workload policy's port-level mode,
    /// unless UNSET, overrides them all; PERMISSIVE when nothing sets a mode.
    pub fn mode<'a>(
        &self,
        namespace: &str,
        label: impl Fn(&str) -> Option<&'a str>,
        port: Option<u16>,
    ) -> Decision {
        let in_ns = |ns: &str| self.by_namespace.get(ns).map(Vec::as_slice).unwrap_or(&[]);
        let mesh = in_ns(&self.root_namespace)
            .iter()
            .find(|p| p.selector.is_empty());
        let namespaced = (namespace != self.root_namespace)
            .then(|| in_ns(namespace).iter().find(|p| p.selector.is_empty()))
            .flatten();
        let workload = (namespace != self.root_namespace)
            .then(|| {
                in_ns(namespace).iter().find(|p| {
                    !p.selector.is_empty()
                        && p.selector.iter().all(|(k, v)| label(k) == Some(v.as_str()))
                })
            })
            .flatten();
        let mut decision = Decision {
            mode: MtlsMode::Permissive,
            by: None,
        };
        let levels = [
            (mesh, "mesh-wide"),
            (namespaced, "namespace"),
            (workload, "workload"),
        ];
        for (p, level) in levels {
            if let Some(p) = p.filter(|p| p.mode != MtlsMode::Unset) {
                decision = Decision {
                    mode: p.mode,
                    by: Some(format!("{}/{} ({level})", p.namespace, p.name)),
                };
            }
        }
        if let (Some(p), Some(port)) = (workload, port)
            && let Some(m) = p
                .ports
                .get(&u32::from(port))
                .filter(|m| **m != MtlsMode::Unset)
        {
            decision = Decision {
                mode: *m,
                by: Some(format!("{}/{} (port {port})", p.namespace, p.name)),
            };
        }
        decision
    }

    /// The number of policies held.
    pub fn len(&self) -> usize {
        self.by_namespace.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which of a job's two bodies a target belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    /// The job itself: plaintext targets.
    Plain,
    /// The companion `<job>/istio-mtls`: targets under STRICT mTLS, scraped over https with Istio's
    /// certificates.
    Mtls,
}

impl Part {
    /// The job's other body.
    pub fn other(self) -> Part {
        match self {
            Part::Plain => Part::Mtls,
            Part::Mtls => Part::Plain,
        }
    }
}

/// One scrape configuration recovered from `ISTIO_PROMETHEUS_ANNOTATIONS`: the application's own
/// `prometheus.io/scrape`, `path` and `port` (one per `targets` entry when the pod names several).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppScrape {
    pub scrape: String,
    pub path: String,
    pub port: String,
}

#[derive(Deserialize)]
struct RawScrape {
    #[serde(default)]
    scrape: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    port: String,
    #[serde(default)]
    targets: Vec<RawScrapeTarget>,
}

#[derive(Deserialize)]
struct RawScrapeTarget {
    #[serde(default)]
    port: String,
    #[serde(default)]
    path: String,
}

/// The application's scrape settings from the variable's JSON; empty when it is not JSON of that
/// shape (pilot-agent would not scrape the application either).
pub fn app_scrapes(env: &str) -> Vec<AppScrape> {
    let Ok(raw) = serde_json::from_str::<RawScrape>(env) else {
        return Vec::new();
    };
    if raw.targets.is_empty() {
        return vec![AppScrape {
            scrape: raw.scrape,
            path: raw.path,
            port: raw.port,
        }];
    }
    raw.targets
        .into_iter()
        .map(|t| AppScrape {
            scrape: raw.scrape.clone(),
            path: t.path,
            port: t.port,
        })
        .collect()
}

/// The `ISTIO_PROMETHEUS_ANNOTATIONS` value of a pod's `istio-proxy` (a container, or a native
/// sidecar init container).
pub fn pod_app_annotations(pod: &k8s_openapi::api::core::v1::Pod) -> Option<&str> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == "istio-proxy")?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == APP_ANNOTATIONS_ENV)?
        .value
        .as_deref()
}

/// A job's Istio handling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IstioJob {
    pub mode: IstioMode,
    /// The job's name, given to companion targets as `job` so both bodies' series share it.
    pub job: String,
}

/// One target a job serves: which body, the final address, the final labels.
pub type Served = (Part, String, LabelSet);

fn port_of(address: &str) -> Option<u16> {
    address.rsplit_once(':')?.1.parse().ok()
}

fn with_port(address: &str, port: u16) -> String {
    match address.rsplit_once(':') {
        Some((host, _)) => format!("{host}:{port}"),
        None => format!("{address}:{port}"),
    }
}

impl IstioJob {
    /// The targets the job serves for one discovered target (`labels`, with `__address__`): its
    /// relabeled form as the mesh needs it (see the module docs), pushed onto `out`.
    pub fn targets(
        &self,
        mut labels: LabelSet,
        relabel: &JobRelabel,
        policies: &Policies,
        out: &mut Vec<Served>,
    ) {
        let app_env = labels.remove(APP_ANNOTATIONS_LABEL);
        let sidecar = labels.get(TLS_MODE_LABEL).is_some_and(|v| v == "istio");
        if !sidecar {
            if let Some(address) = relabel.apply(&mut labels) {
                out.push((Part::Plain, address, labels));
            }
            return;
        }
        let annotation = |labels: &LabelSet, name: &str| {
            labels
                .get(&format!("{ANNOTATION}{name}"))
                .map(String::as_str)
                .unwrap_or("")
                .to_string()
        };
        let merged = annotation(&labels, "port") == STATUS_PORT.to_string()
            && annotation(&labels, "path") == STATS_PATH;
        if !merged || self.mode == IstioMode::Merged {
            let mut l = labels.clone();
            if let Some(address) = relabel.apply(&mut l) {
                // Separate, on a pod not merged: Envoy's endpoint beside the application's.
                if self.mode == IstioMode::Separate
                    && !matches!(port_of(&address), Some(STATUS_PORT | ENVOY_STATS_PORT))
                {
                    let mut envoy = l.clone();
                    envoy.insert("__metrics_path__".into(), STATS_PATH.into());
                    let at = with_port(&address, ENVOY_STATS_PORT);
                    out.push(self.decide(at, envoy, &labels, policies));
                }
                out.push(self.decide(address, l, &labels, policies));
            }
            return;
        }
        // Separate: Envoy's own endpoint where the merged target would be...
        let mut l = labels.clone();
        if let Some(address) = relabel.apply(&mut l) {
            if port_of(&address) == Some(STATUS_PORT) {
                l.insert("__metrics_path__".into(), STATS_PATH.into());
                out.push(self.decide(with_port(&address, ENVOY_STATS_PORT), l, &labels, policies));
            } else {
                out.push(self.decide(address, l, &labels, policies));
            }
        }
        // ...and the application's, from the annotations the injector moved away.
        for app in app_env.as_deref().map(app_scrapes).unwrap_or_default() {
            let mut l = labels.clone();
            for name in ["scrape", "path", "port"] {
                l.remove(&format!("{ANNOTATION}{name}"));
                l.remove(&format!("{ANNOTATION_PRESENT}{name}"));
            }
            for (name, value) in [
                ("scrape", &app.scrape),
                ("path", &app.path),
                ("port", &app.port),
            ] {
                if !value.is_empty() {
                    l.insert(format!("{ANNOTATION}{name}"), value.clone());
                    l.insert(format!("{ANNOTATION_PRESENT}{name}"), "true".into());
                }
            }
            if let Some(address) = relabel.apply(&mut l) {
                out.push(self.decide(address, l, &labels, policies));
            }
        }
    }

    /// The PeerAuthentication decision for a relabeled target at `address` of the sidecar pod
    /// `discovered` describes; `None` on Istio's own ports (15020, 15090), always plaintext. What
    /// placing a target reads, and what `explain` names.
    pub fn decision(address: &str, discovered: &LabelSet, policies: &Policies) -> Option<Decision> {
        let port = port_of(address);
        if matches!(port, Some(STATUS_PORT | ENVOY_STATS_PORT)) {
            return None;
        }
        let namespace = discovered.get(NAMESPACE).map(String::as_str).unwrap_or("");
        Some(policies.mode(
            namespace,
            |key| {
                discovered
                    .get(&format!(
                        "__meta_kubernetes_pod_label_{}",
                        sanitize_label_name(key)
                    ))
                    .map(String::as_str)
            },
            port,
        ))
    }

    /// Where a relabeled target of a sidecar pod goes: Istio's own ports stay plaintext; an
    /// application port under STRICT moves to the companion, over https.
    fn decide(
        &self,
        address: String,
        mut labels: LabelSet,
        discovered: &LabelSet,
        policies: &Policies,
    ) -> Served {
        let Some(decision) = Self::decision(&address, discovered, policies) else {
            labels.insert("__scheme__".into(), "http".into());
            return (Part::Plain, address, labels);
        };
        if decision.mode != MtlsMode::Strict {
            return (Part::Plain, address, labels);
        }
        labels.insert("__scheme__".into(), "https".into());
        labels
            .entry("job".into())
            .or_insert_with(|| self.job.clone());
        (Part::Mtls, address, labels)
    }
}

/// The companion job of `job`.
pub fn mtls_job_name(job: &str) -> String {
    format!("{job}{MTLS_SUFFIX}")
}

#[cfg(test)]
mod tests;
