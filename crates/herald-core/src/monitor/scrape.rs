//! The scrape settings of a monitor endpoint (merged with its scrape class as the operator merges
//! them), and the Prometheus `scrape_configs` entry herald serves for it.

use std::collections::BTreeMap;

use serde_json::Value;
use serde_yaml::{Mapping, Value as Yaml};

use super::object::secret;
use super::rules::user_rules;
use super::validate;
use super::*;
use crate::relabel::RelabelConfig;

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

/// The scrape settings and unsupported items common to both kinds. `tls_files`: the endpoint's TLS
/// config may name files (a ServiceMonitor's `TLSConfig`, not a PodMonitor's `SafeTLSConfig`).
#[allow(clippy::too_many_arguments)] // the translation context, passed down from `job`
pub(super) fn common_scrape(
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
            } else {
                // Without credentials the operator still writes the type
                // (`addSafeAuthorizationToYaml`), and so does herald.
                let kind = a.kind.trim();
                Some(AuthorizationFile {
                    kind: if kind.is_empty() { "Bearer" } else { kind }.to_owned(),
                    credentials_file: (!a.credentials_file.is_empty())
                        .then_some(a.credentials_file),
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

/// How a consumer reads herald's own HTTP SD: what each `http_sd_configs` entry herald writes
/// carries besides its `url`. Paths only: herald never writes a token or a key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SdClient {
    /// `authorization: {type: Bearer, credentials_file: …}`, when herald's port wants a token.
    pub credentials_file: Option<String>,
    /// `tls_config: {ca_file: …}`, when herald's port speaks TLS.
    pub ca_file: Option<String>,
}

impl SdClient {
    /// The `http_sd_configs` entry for `url`.
    fn entry(&self, url: &str) -> Mapping {
        let mut sd = Mapping::new();
        sd.insert("url".into(), url.into());
        if let Some(f) = &self.credentials_file {
            let mut a = Mapping::new();
            a.insert("type".into(), "Bearer".into());
            a.insert("credentials_file".into(), f.as_str().into());
            sd.insert("authorization".into(), Yaml::Mapping(a));
        }
        if let Some(f) = &self.ca_file {
            let mut t = Mapping::new();
            t.insert("ca_file".into(), f.as_str().into());
            sd.insert("tls_config".into(), Yaml::Mapping(t));
        }
        sd
    }
}

/// `http_sd_configs:` with one entry for `url` read as `client` says, each line indented by
/// `indent`.
pub fn http_sd_configs_yaml(url: &str, client: &SdClient, indent: &str) -> String {
    let mut m = Mapping::new();
    m.insert(
        "http_sd_configs".into(),
        Yaml::Sequence(vec![Yaml::Mapping(client.entry(url))]),
    );
    serde_yaml::to_string(&Yaml::Mapping(m))
        .expect("a mapping of strings always serializes")
        .lines()
        .map(|l| format!("{indent}{l}\n"))
        .collect()
}

/// The Prometheus `scrape_configs` entry (a one-item YAML list, so entries concatenate under
/// `scrape_configs:`) for `job`, discovering through herald's HTTP SD at `sd_url`: the job name, the
/// endpoint's scrape settings in the operator's order, and each [`MonitorJob::unsupported`] and
/// [`MonitorJob::warnings`] item as a `# unsupported:` or `# warning:` comment line before it. No
/// `relabel_configs`: herald applies them. Deterministic.
pub fn scrape_config_yaml(job: &MonitorJob, sd_url: &str) -> String {
    scrape_config_yaml_with(job, sd_url, &SdClient::default())
}

/// [`scrape_config_yaml`], its `http_sd_configs` entry reading herald as `client` says (a token
/// file and herald's CA, by path).
pub fn scrape_config_yaml_with(job: &MonitorJob, sd_url: &str, client: &SdClient) -> String {
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
    put(
        "http_sd_configs",
        Yaml::Sequence(vec![Yaml::Mapping(client.entry(sd_url))]),
    );
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
