//! Golden cases of prometheus-operator `pkg/prometheus/promcfg_test.go` (monitors rebuilt from the Go
//! tests, expectations read from the operator's `.golden` files in `testdata/`), and behaviour tests
//! applying the generated rules to herald's own targets.

use serde_json::{Value, json};
use serde_yaml::Value as Yaml;

use super::*;
use crate::httpsd::{HttpSdEntry, http_sd_entries};
use crate::testing::{MapLookup, ls};

/// The operator's tests run with `shards` unset, i.e. one shard and `$(SHARD)` left for its reloader.
fn op_ctx() -> MonitorContext {
    MonitorContext {
        sharding: Some(Sharding {
            shards: 1,
            shard: None,
        }),
        ..MonitorContext::default()
    }
}

fn sm(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": name, "namespace": namespace, "labels": {"group": "group1"}},
        "spec": spec,
    })
}

fn pm(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": name, "namespace": namespace, "labels": {"group": "group1"}},
        "spec": spec,
    })
}

fn one_sm(obj: &Value, ctx: &MonitorContext) -> MonitorJob {
    let mut jobs = service_monitor_jobs(obj, ctx).expect("valid ServiceMonitor");
    assert_eq!(jobs.len(), 1);
    jobs.remove(0)
}

fn one_pm(obj: &Value, ctx: &MonitorContext) -> MonitorJob {
    let mut jobs = pod_monitor_jobs(obj, ctx).expect("valid PodMonitor");
    assert_eq!(jobs.len(), 1);
    jobs.remove(0)
}

fn golden_text(file: &str) -> String {
    let path = format!("{}/src/monitor/testdata/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `scrape_configs` entry named `job` of a golden file.
fn golden_job(file: &str, job: &str) -> Yaml {
    let doc: Yaml = serde_yaml::from_str(&golden_text(file)).expect("golden YAML");
    doc["scrape_configs"]
        .as_sequence()
        .expect("scrape_configs")
        .iter()
        .find(|c| c["job_name"].as_str() == Some(job))
        .unwrap_or_else(|| panic!("{file}: no job {job}"))
        .clone()
}

/// A rule list of a golden file, numbers (`regex: 1024`, `modulus: 1`) as Prometheus reads them.
fn golden_rules(cfg: &Yaml, key: &str) -> Vec<RelabelConfig> {
    cfg[key]
        .as_sequence()
        .unwrap_or_else(|| panic!("no {key}"))
        .iter()
        .map(|r| {
            let mut r = r.as_mapping().expect("a rule").clone();
            for k in ["regex", "replacement"] {
                if let Some(Yaml::Number(n)) = r.get(k).cloned() {
                    r.insert(k.into(), n.to_string().into());
                }
            }
            serde_yaml::from_value(Yaml::Mapping(r)).expect("a valid rule")
        })
        .collect()
}

/// Assert `job` is the golden file's job: name, role, namespaces, relabel_configs, and the scrape
/// settings the golden file shows.
fn assert_golden(job: &MonitorJob, file: &str) {
    let cfg = golden_job(file, &job.name);
    let sd = &cfg["kubernetes_sd_configs"][0];
    assert_eq!(sd["role"].as_str(), Some(job.role.as_str()), "{file}: role");
    assert_namespaces(job, sd, file);
    // With RoleSelector the operator's selectors are kubernetes_sd `selectors`, which herald
    // applies as the leading rules (tested apart); the operator's own rules follow them.
    let selectors: Vec<(String, String)> = match sd.get("selectors") {
        Some(Yaml::Sequence(s)) => s
            .iter()
            .map(|e| {
                let field = |k: &str| e[k].as_str().expect("a string").to_owned();
                (field("role"), field("label"))
            })
            .collect(),
        _ => Vec::new(),
    };
    let ours: Vec<(String, String)> = job
        .role_selectors
        .iter()
        .flat_map(|rs| rs.roles.iter().map(|r| (r.to_string(), rs.label.clone())))
        .collect();
    assert_eq!(ours, selectors, "{file}: kubernetes_sd selectors");
    let own = job.role_selectors.as_ref().map_or(0, |rs| rs.rules);
    assert_eq!(
        job.relabel_configs[own..],
        golden_rules(&cfg, "relabel_configs"),
        "{file}: relabel_configs"
    );
    assert_eq!(
        cfg["honor_labels"].as_bool(),
        Some(job.scrape.honor_labels),
        "{file}: honor_labels"
    );
    assert_eq!(
        cfg["scrape_interval"].as_str(),
        job.scrape.scrape_interval.as_deref(),
        "{file}: scrape_interval"
    );
    assert_eq!(
        cfg["metrics_path"].as_str(),
        job.scrape.metrics_path.as_deref(),
        "{file}: metrics_path"
    );
    let metric = match cfg.get("metric_relabel_configs") {
        Some(Yaml::Sequence(s)) => s.clone(),
        _ => Vec::new(),
    };
    assert_eq!(
        job.scrape.metric_relabel_configs, metric,
        "{file}: metric_relabel_configs"
    );
}

fn assert_namespaces(job: &MonitorJob, sd: &Yaml, file: &str) {
    let names: Vec<String> = match sd.get("namespaces") {
        Some(ns) => ns["names"]
            .as_sequence()
            .expect("names")
            .iter()
            .map(|n| n.as_str().expect("a name").to_owned())
            .collect(),
        None => Vec::new(),
    };
    assert_eq!(job.namespaces, names, "{file}: namespaces");
    let node = sd
        .get("attach_metadata")
        .map(|a| a["node"].as_bool().expect("node"));
    assert_eq!(
        job.attach_metadata.map(|a| a.node),
        node,
        "{file}: attach_metadata"
    );
}

// --- golden cases ---------------------------------------------------------------------------

#[test]
fn golden_target_labels() {
    // TestTargetLabels: no selector, targetLabels.
    let obj = sm(
        "default",
        "testservicemonitor1",
        json!({"targetLabels": ["example", "env"], "endpoints": [{"port": "web", "interval": "30s"}]}),
    );
    assert_golden(&one_sm(&obj, &op_ctx()), "TargetLabels.golden");
}

#[test]
fn golden_pod_target_labels_of_a_service_monitor() {
    // TestPodTargetLabels.
    let obj = sm(
        "default",
        "testservicemonitor1",
        json!({"podTargetLabels": ["example", "env"], "endpoints": [{"port": "web", "interval": "30s"}]}),
    );
    assert_golden(&one_sm(&obj, &op_ctx()), "PodTargetLabels.golden");
}

#[test]
fn golden_pod_target_labels_of_a_pod_monitor() {
    // TestPodTargetLabelsFromPodMonitor.
    let obj = pm(
        "default",
        "testpodmonitor1",
        json!({"podTargetLabels": ["example", "env"], "podMetricsEndpoints": [{"port": "web", "interval": "30s"}]}),
    );
    assert_golden(
        &one_pm(&obj, &op_ctx()),
        "PodTargetLabelsFromPodMonitor.golden",
    );
}

#[test]
fn golden_empty_endpoint() {
    // TestEmptyEndpointPorts: no port rule, no endpoint label.
    let obj = sm(
        "default",
        "test",
        json!({"selector": {"matchLabels": {"foo": "bar"}}, "endpoints": [{}]}),
    );
    assert_golden(&one_sm(&obj, &op_ctx()), "EmptyEndpointPorts.golden");
}

#[test]
fn golden_match_expressions() {
    // TestMatchExpressionsServiceMonitor.
    let obj = sm(
        "default",
        "test",
        json!({
            "selector": {"matchExpressions": [{"key": "alpha", "operator": "In", "values": ["beta", "gamma"]}]},
            "endpoints": [{"port": "web", "interval": "30s"}],
        }),
    );
    assert_golden(
        &one_sm(&obj, &op_ctx()),
        "MatchExpressionsServiceMonitor.golden",
    );
}

fn crio_monitor() -> Value {
    // TestNoEnforcedNamespaceLabelServiceMonitor: the monitor's relabelings and metricRelabelings.
    sm(
        "default",
        "test",
        json!({
            "selector": {"matchLabels": {"foo": "bar"}},
            "endpoints": [{
                "port": "https-metrics",
                "honorLabels": true,
                "interval": "30s",
                "metricRelabelings": [{
                    "action": "drop",
                    "regex": "container_(network_tcp_usage_total|network_udp_usage_total|tasks_state|cpu_load_average_10s)",
                    "sourceLabels": ["__name__"],
                }],
                "relabelings": [
                    {"action": "replace", "regex": "(.+)(?::d+)", "replacement": "$1:9537",
                     "sourceLabels": ["__address__"], "targetLabel": "__address__"},
                    {"action": "replace", "replacement": "crio", "targetLabel": "job"},
                ],
            }],
        }),
    )
}

#[test]
fn golden_monitor_relabelings_and_metric_relabelings() {
    let job = one_sm(&crio_monitor(), &op_ctx());
    assert!(job.scrape.honor_labels);
    assert_golden(
        &job,
        "NoEnforcedNamespaceLabelServiceMonitor_Expected.golden",
    );
}

#[test]
fn golden_enforced_namespace_label() {
    // TestEnforcedNamespaceLabelServiceMonitor.
    let obj = sm(
        "default",
        "test",
        json!({
            "selector": {
                "matchLabels": {"foo": "bar"},
                "matchExpressions": [{"key": "alpha", "operator": "In", "values": ["beta", "gamma"]}],
            },
            "endpoints": [{
                "port": "web",
                "interval": "30s",
                "metricRelabelings": [{"action": "drop", "regex": "my-job-pod-.+",
                                       "sourceLabels": ["pod_name"], "targetLabel": "ns-key"}],
                "relabelings": [{"action": "replace", "regex": "(.*)", "replacement": "$1",
                                 "sourceLabels": ["__meta_kubernetes_pod_ready"], "targetLabel": "pod_ready"}],
            }],
        }),
    );
    let ctx = MonitorContext {
        enforced_namespace_label: Some("ns-key".into()),
        ..op_ctx()
    };
    assert_golden(
        &one_sm(&obj, &ctx),
        "EnforcedNamespaceLabelServiceMonitor_Expected.golden",
    );
}

#[test]
fn golden_service_discovery_roles() {
    // TestServiceMonitorWithServiceDiscoveryRole: the Prometheus's role, overridden by the monitor's.
    let cases = [
        (
            Role::Endpoints,
            None,
            "TestServiceMonitorWithDefaultServiceDiscoveryRole.golden",
        ),
        (
            Role::EndpointSlice,
            None,
            "TestServiceMonitorWithEndpointSliceEnable_Expected.golden",
        ),
        (
            Role::EndpointSlice,
            Some("Endpoints"),
            "TestServiceMonitorWithEndpointsAndPrometheusEndpointSlice.golden",
        ),
        (
            Role::Endpoints,
            Some("EndpointSlice"),
            "TestServiceMonitorWithEndpointSliceAndPrometheusEndpoints.golden",
        ),
    ];
    for (prom_role, smon_role, file) in cases {
        let mut spec = json!({
            "selector": {
                "matchLabels": {"foo": "bar"},
                "matchExpressions": [{"key": "alpha", "operator": "In", "values": ["beta", "gamma"]}],
            },
            "endpoints": [{"port": "web", "interval": "30s"}],
        });
        if let Some(r) = smon_role {
            spec["serviceDiscoveryRole"] = r.into();
        }
        let ctx = MonitorContext {
            service_discovery_role: prom_role,
            ..op_ctx()
        };
        assert_golden(&one_sm(&sm("default", "test", spec), &ctx), file);
    }
}

#[test]
fn golden_role_selectors() {
    // TestServiceMonitorSelectors and TestPodMonitorSelectors: selectorMechanism RoleSelector.
    let match_labels = json!({"matchLabels": {"group": "group1"}});
    let match_expression =
        json!({"matchExpressions": [{"key": "group", "operator": "In", "values": ["group1"]}]});
    let both = json!({
        "matchLabels": {"group": "group1"},
        "matchExpressions": [{"key": "group", "operator": "In", "values": ["group2"]}],
    });
    let service_cases = [
        (
            Role::Endpoints,
            &match_labels,
            "ServiceMonitorObjectWithMatchLabelSelector.golden",
        ),
        (
            Role::Endpoints,
            &match_expression,
            "ServiceMonitorObjectWithMatchExpressionSelector.golden",
        ),
        (
            Role::EndpointSlice,
            &match_labels,
            "ServiceMonitorObjectWithEndpointSliceSelectorAndMatchLabelSelector.golden",
        ),
        (
            Role::EndpointSlice,
            &both,
            "ServiceMonitorObjectWithSelectorAndMatchExpressionSelector.golden",
        ),
    ];
    for (role, selector, file) in service_cases {
        let spec = json!({
            "selectorMechanism": "RoleSelector",
            "selector": selector,
            "endpoints": [{"port": "web", "interval": "30s"}],
        });
        let ctx = MonitorContext {
            service_discovery_role: role,
            ..op_ctx()
        };
        let job = one_sm(&sm("default", "defaultServiceMonitor", spec), &ctx);
        assert!(job.unsupported.is_empty(), "{file}: {:?}", job.unsupported);
        assert_golden(&job, file);
    }
    let mut with_dne = both.clone();
    with_dne["matchExpressions"]
        .as_array_mut()
        .expect("a list")
        .push(json!({"key": "groupb", "operator": "DoesNotExist"}));
    let pod_cases = [
        (
            &match_labels,
            "PodMonitorObjectWithMatchLabelSelector.golden",
        ),
        (
            &match_expression,
            "PodMonitorObjectWithMatchExpressionSelector.golden",
        ),
        (
            &match_labels,
            "PodMonitorObjectWithEndpointSliceSelectorAndMatchLabelSelector.golden",
        ),
        (
            &with_dne,
            "PodMonitorObjectWithSelectorAndMatchExpressionSelector.golden",
        ),
    ];
    for (selector, file) in pod_cases {
        let spec = json!({
            "selectorMechanism": "RoleSelector",
            "selector": selector,
            "podMetricsEndpoints": [{"port": "web", "interval": "30s"}],
        });
        let job = one_pm(&pm("default", "defaultPodMonitor", spec), &op_ctx());
        assert!(job.unsupported.is_empty(), "{file}: {:?}", job.unsupported);
        assert_golden(&job, file);
    }
}

#[test]
fn role_selectors_keep_what_the_selector_would_list_by_the_objects_own_labels() {
    // Prometheus lists only the Endpoints/EndpointSlices/pods the selector matches; herald keeps
    // the targets of those objects, by their own labels (not their Service's).
    let selector = json!({
        "matchLabels": {"app.kubernetes.io/name": "api"},
        "matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["canary"]},
            {"key": "metrics", "operator": "Exists"},
        ],
    });
    let cases = [
        (Role::Endpoints, "endpoints"),
        (Role::EndpointSlice, "endpointslice"),
    ];
    for (role, object) in cases {
        let spec = json!({
            "selectorMechanism": "RoleSelector",
            "selector": selector,
            "endpoints": [{"port": "web"}],
        });
        let ctx = MonitorContext {
            service_discovery_role: role,
            ..MonitorContext::default()
        };
        let job = one_sm(&sm("default", "api", spec), &ctx);
        let target = |object_labels: &[(&str, &str)], service_labels: &[(&str, &str)]| {
            let mut t = ls! {
                "__address__": "127.16.0.1:8080",
                "job": "serviceMonitor/default/api/0",
                "__meta_kubernetes_namespace": "default",
                "__meta_kubernetes_service_name": "api",
            };
            let port_name = if object == "endpoints" {
                "__meta_kubernetes_endpoint_port_name"
            } else {
                "__meta_kubernetes_endpointslice_port_name"
            };
            t.insert(port_name.into(), "web".into());
            for (owner, labels) in [(object, object_labels), ("service", service_labels)] {
                for (k, v) in labels {
                    let k = sanitize_label_name(k);
                    let prefix = format!("__meta_kubernetes_{owner}");
                    t.insert(format!("{prefix}_label_{k}"), v.to_string());
                    t.insert(format!("{prefix}_labelpresent_{k}"), "true".into());
                }
            }
            crate::relabel::process(&mut t, &job.relabel_configs)
        };
        let matching = [("app.kubernetes.io/name", "api"), ("metrics", "on")];
        assert!(target(&matching, &[]), "{object}: its own labels match");
        assert!(
            !target(&[], &matching),
            "{object}: its Service's labels alone are not what Prometheus lists by"
        );
        assert!(
            !target(&[("app.kubernetes.io/name", "api")], &[]),
            "{object}: Exists"
        );
        let canary = [matching[0], matching[1], ("tier", "canary")];
        assert!(!target(&canary, &[]), "{object}: NotIn");
        let stable = [matching[0], matching[1], ("tier", "stable")];
        assert!(target(&stable, &[]), "{object}: NotIn, another value");
        let rs = job.role_selectors.as_ref().expect("role selectors");
        assert_eq!(rs.roles, [object, "service"]);
        assert_eq!(
            rs.label,
            "app.kubernetes.io/name=api,metrics,tier notin (canary)"
        );
    }
}

#[test]
fn without_role_selector_the_operator_selects_on_the_services_labels() {
    let spec = json!({
        "selector": {"matchLabels": {"app": "api"}},
        "endpoints": [{"port": "web"}],
    });
    let job = one_sm(&sm("default", "api", spec), &MonitorContext::default());
    assert_eq!(job.role_selectors, None);
    assert_eq!(
        job.relabel_configs[1]
            .source_labels
            .clone()
            .expect("sources"),
        [
            "__meta_kubernetes_service_label_app",
            "__meta_kubernetes_service_labelpresent_app"
        ]
    );
}

#[test]
fn label_selector_strings_are_apimachinerys() {
    let sel = |v: Value| -> LabelSelector { serde_json::from_value(v).expect("a selector") };
    assert_eq!(label_selector_string(&LabelSelector::default()), "");
    assert_eq!(
        label_selector_string(&sel(json!({
            "matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [
                {"key": "c", "operator": "In", "values": ["z", "y"]},
                {"key": "a", "operator": "DoesNotExist"},
                {"key": "b", "operator": "NotIn", "values": ["x"]},
            ],
        }))),
        "a=1,!a,b=2,b notin (x),c in (y,z)"
    );
}

#[test]
fn golden_pod_monitor_filter_running_false() {
    // TestPodMonitorPhaseFilter: no phase filter, no selector.
    let obj = pm(
        "default",
        "testpodmonitor1",
        json!({"podMetricsEndpoints": [{"filterRunning": false, "port": "test"}]}),
    );
    assert_golden(&one_pm(&obj, &op_ctx()), "PodMonitorPhaseFilter.golden");
}

#[test]
fn golden_pod_monitor_ports() {
    // TestPodMonitorPortNumber on defaultPodMonitor: port beats portNumber beats targetPort.
    let cases = [
        (
            "podname",
            1024,
            json!("10240"),
            "podMonitorObjectWithPodName.golden",
        ),
        (
            "",
            1024,
            json!("10240"),
            "podMonitorObjectWithPortNumber.golden",
        ),
        (
            "",
            0,
            json!(10240),
            "podMonitorObjectWithTargetPortInt.golden",
        ),
        (
            "",
            0,
            json!("10240"),
            "podMonitorObjectWithTargetPortString.golden",
        ),
    ];
    for (port, number, target, file) in cases {
        let obj = pm(
            "default",
            "defaultPodMonitor",
            json!({
                "selector": {"matchLabels": {"group": "group1"}},
                "podMetricsEndpoints": [{
                    "port": port, "portNumber": number, "targetPort": target, "interval": "30s",
                }],
            }),
        );
        assert_golden(&one_pm(&obj, &op_ctx()), file);
    }
}

#[test]
fn golden_tls_secret_references_are_reported() {
    // TestServiceMonitorScrapeClassWithDefaultTLS, first case: defaultServiceMonitor with a
    // tlsConfig of Secret references, in a scrape class whose files the references override.
    let obj = sm(
        "default",
        "defaultServiceMonitor",
        json!({
            "scrapeClass": "test-tls-scrape-class",
            "selector": {"matchLabels": {"group": "group1"}},
            "endpoints": [{
                "port": "web",
                "interval": "30s",
                "tlsConfig": {
                    "ca": {"secret": {"name": "tls", "key": "ca"}},
                    "cert": {"secret": {"name": "tls", "key": "cert"}},
                    "keySecret": {"name": "tls", "key": "private-key"},
                },
            }],
        }),
    );
    let job = one_sm(&obj, &class_ctx(json!([TLS_CLASS]), false));
    let file = "serviceMonitorObjectWithNonDefaultScrapeClassAndExistingTLSConfig.golden";
    assert_golden(&job, file);
    // The operator writes the Secrets to files of its own; herald has neither.
    let cfg = golden_job(file, &job.name);
    assert_eq!(
        cfg["tls_config"]["ca_file"].as_str(),
        Some("/etc/prometheus/certs/0_default_tls_ca")
    );
    assert_eq!(
        job.unsupported,
        vec![
            r#"spec.endpoints[0].tlsConfig.ca: Secret "tls" key "ca""#,
            r#"spec.endpoints[0].tlsConfig.cert: Secret "tls" key "cert""#,
            r#"spec.endpoints[0].tlsConfig.keySecret: Secret "tls" key "private-key""#,
        ]
    );
    assert_eq!(job.scrape.tls_config, Some(TlsFiles::default()));
}

// --- scrape classes (TestScrapeClass, Test*ScrapeClassWithDefaultTLS,
// Test*WithDefaultScrapeClassRelabelings, Test*WithNonDefaultScrapeClassRelabelings,
// TestScrapeClassMetricRelabelings, TestScrapeClassAuthorization, TestScrapeClassAttachMetadata,
// TestScrapeClassFallbackScrapeProtocol) ---------------------------------------------------------

/// The scrape class of TestScrapeClass and Test*ScrapeClassWithDefaultTLS.
const TLS_CLASS: &str = "test-tls-scrape-class";

fn class_ctx(classes: Value, enforced_namespace_label: bool) -> MonitorContext {
    // A bare name stands for the TLS class of the operator's tests.
    let classes: Vec<Value> = classes
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| match c.as_str() {
            Some(TLS_CLASS) => json!({"name": TLS_CLASS, "tlsConfig": {
                "caFile": "/etc/prometheus/secrets/ca.crt",
                "certFile": "/etc/prometheus/secrets/tls.crt",
                "keyFile": "/etc/prometheus/secrets/tls.key",
            }}),
            _ => c.clone(),
        })
        .collect();
    MonitorContext {
        scrape_classes: scrape_classes(&Value::Array(classes)).expect("valid classes"),
        enforced_namespace_label: enforced_namespace_label.then(|| "namespace".to_owned()),
        ..op_ctx()
    }
}

/// The operator's defaultServiceMonitor or defaultPodMonitor, naming `class` if given, with
/// `endpoint` merged into its endpoint.
fn default_monitor(pod: bool, class: Option<&str>, endpoint: Value) -> Value {
    let mut ep = json!({"port": "web", "interval": "30s"});
    for (k, v) in endpoint.as_object().expect("an object") {
        ep[k] = v.clone();
    }
    let mut spec = json!({"selector": {"matchLabels": {"group": "group1"}}});
    if let Some(c) = class {
        spec["scrapeClass"] = json!(c);
    }
    if pod {
        spec["podMetricsEndpoints"] = json!([ep]);
        pm("default", "defaultPodMonitor", spec)
    } else {
        spec["endpoints"] = json!([ep]);
        sm("default", "defaultServiceMonitor", spec)
    }
}

/// The job's `scrape_configs` entry as herald writes it.
fn written(job: &MonitorJob) -> Yaml {
    let doc: Yaml =
        serde_yaml::from_str(&scrape_config_yaml(job, "http://herald/sd")).expect("YAML");
    doc[0].clone()
}

/// A golden scrape class case: the file, whether the monitor is a PodMonitor, the classes, the class
/// the monitor names, whether the enforced namespace label is set, the scrape settings compared.
type ClassCase<'a> = (String, bool, Value, Option<&'a str>, bool, &'a [&'a str]);

#[test]
fn golden_scrape_classes() {
    let relabel_classes = json!([
        {"name": "default", "default": true, "relabelings": [
            {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_app_name"], "targetLabel": "app"}]},
        {"name": "not-default", "relabelings": [
            {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]},
    ]);
    let extra_relabel_class = json!([{"name": "test-extra-relabelings-scrape-class", "relabelings": [
        {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]}]);
    let metric_classes = json!([
        {"name": "default", "default": true, "metricRelabelings": [
            {"sourceLabels": ["namespace"], "regex": "tenant1-.*", "targetLabel": "tenant", "replacement": "tenant1"},
            {"sourceLabels": ["namespace"], "regex": "tenant2-.*", "targetLabel": "tenant", "replacement": "tenant2"}]},
        {"name": "not-default", "metricRelabelings": [{"targetLabel": "tenant", "replacement": "not-default"}]},
    ]);
    let extra_metric_class = json!([{"name": "test-extra-relabelings-scrape-class",
        "metricRelabelings": [{"targetLabel": "extra", "replacement": "value1"}]}]);
    let attach_default = json!([
        {"name": "default", "default": true, "attachMetadata": {"node": true}},
        {"name": "not-default", "attachMetadata": {"node": true}},
    ]);
    let attach_named =
        json!([{"name": "test-attachmetadata-scrape-class", "attachMetadata": {"node": true}}]);
    let fallback_default = json!([{"name": "default", "default": true, "fallbackScrapeProtocol": "OpenMetricsText1.0.0"}]);
    let fallback_named = json!([{"name": "test-fallback-scrapeprotocol-scrape-class",
        "fallbackScrapeProtocol": "PrometheusText0.0.4"}]);
    let authz_default = json!([{"name": "default", "default": true,
        "authorization": {"credentialsFile": "/etc/secret/credentials"}}]);
    // The PodMonitor case's default class has its own file, beside a class not taken.
    let authz_default_pod = json!([
        {"name": "default", "default": true,
            "authorization": {"credentialsFile": "/etc/secret/credentials/default"}},
        {"name": "not-default",
            "authorization": {"credentialsFile": "/etc/secret/credentials/non-default"}},
    ]);
    let authz_named = json!([{"name": "test-attach-authz-scrape-class",
        "authorization": {"credentialsFile": "/etc/secret/credentials"}}]);
    let tls_default = json!([{"name": "test-tls-scrape-class", "default": true, "tlsConfig": {
        "caFile": "/etc/prometheus/secrets/default/ca.crt",
        "certFile": "/etc/prometheus/secrets/default/tls.crt",
        "keyFile": "/etc/prometheus/secrets/default/tls.key"}}]);

    let mut cases: Vec<ClassCase<'_>> = Vec::new();
    for (pod, prefix) in [(false, "serviceMonitor"), (true, "podMonitor")] {
        let authz_default = if pod {
            &authz_default_pod
        } else {
            &authz_default
        };
        for (stem, classes, named, enforced, keys) in [
            (
                "DefaultScrapeClassWithRelabelings",
                &relabel_classes,
                None,
                false,
                &[][..],
            ),
            (
                "NonDefaultScrapeClassWithRelabelings",
                &extra_relabel_class,
                Some("test-extra-relabelings-scrape-class"),
                false,
                &[],
            ),
            (
                "DefaultScrapeClassWithMetricRelabelings",
                &metric_classes,
                None,
                true,
                &[],
            ),
            (
                "NonDefaultScrapeClassWithMetricRelabelings",
                &extra_metric_class,
                Some("test-extra-relabelings-scrape-class"),
                true,
                &[],
            ),
            (
                "DefaultScrapeClassWithAttachMetadata",
                &attach_default,
                None,
                true,
                &[],
            ),
            (
                "NonDefaultScrapeClassWithAttachMetadata",
                &attach_named,
                Some("test-attachmetadata-scrape-class"),
                true,
                &[],
            ),
            (
                "DefaultScrapeClassWithFallbackScrapeProtocol",
                &fallback_default,
                None,
                true,
                &["fallback_scrape_protocol"],
            ),
            (
                "NonDefaultScrapeClassWithFallbackScrapeProtocol",
                &fallback_named,
                Some("test-fallback-scrapeprotocol-scrape-class"),
                true,
                &["fallback_scrape_protocol"],
            ),
            (
                "DefaultScrapeClassAuthz",
                authz_default,
                None,
                true,
                &["authorization"],
            ),
            (
                "NonDefaultScrapeClassAuthz",
                &authz_named,
                Some("test-attach-authz-scrape-class"),
                true,
                &["authorization"],
            ),
        ] {
            cases.push((
                format!("{prefix}ObjectWith{stem}.golden"),
                pod,
                classes.clone(),
                named,
                enforced,
                keys,
            ));
        }
        cases.push((
            "monitorObjectWithNonDefaultScrapeClassAndTLSConfig.golden".into(),
            pod,
            json!([TLS_CLASS]),
            Some(TLS_CLASS),
            false,
            &["tls_config"],
        ));
        cases.push((
            "monitorObjectWithDefaultScrapeClassAndTLSConfig.golden".into(),
            pod,
            tls_default.clone(),
            None,
            false,
            &["tls_config"],
        ));
    }
    for (file, pod, classes, named, enforced, keys) in cases {
        let ctx = class_ctx(classes, enforced);
        let obj = default_monitor(pod, named, json!({}));
        let job = if pod {
            one_pm(&obj, &ctx)
        } else {
            one_sm(&obj, &ctx)
        };
        assert_golden(&job, &file);
        assert!(job.unsupported.is_empty(), "{file}: {:?}", job.unsupported);
        let ours = written(&job);
        let golden = golden_job(&file, &job.name);
        for key in keys {
            assert_eq!(ours.get(key), golden.get(key), "{file}: {key}");
            assert!(
                golden.get(key).is_some(),
                "{file}: the golden file has {key}"
            );
        }
    }
}

#[test]
fn golden_scrape_class_tls_fills_only_what_the_endpoint_does_not_give() {
    // Test{Service,Pod}MonitorScrapeClassWithDefaultTLS, "missing ca": the endpoint gives the
    // certificate and key as Secret references (reported), the class's CA file fills the CA.
    let ctx = class_ctx(json!([TLS_CLASS]), false);
    let tls = json!({"tlsConfig": {
        "cert": {"secret": {"name": "secret-cert"}},
        "keySecret": {"name": "secret", "key": "key"},
    }});
    for (pod, file) in [
        (
            false,
            "serviceMonitorObjectWithNonDefaultScrapeClassAndExistingTLSConfigMissingCA.golden",
        ),
        (
            true,
            "podMonitorObjectWithNonDefaultScrapeClassAndExistingTLSConfigMissingCA.golden",
        ),
    ] {
        let obj = default_monitor(pod, Some(TLS_CLASS), tls.clone());
        let job = if pod {
            one_pm(&obj, &ctx)
        } else {
            one_sm(&obj, &ctx)
        };
        assert_golden(&job, file);
        let golden = golden_job(file, &job.name);
        assert_eq!(
            golden["tls_config"]["ca_file"].as_str(),
            Some("/etc/prometheus/secrets/ca.crt"),
            "{file}"
        );
        let files = job.scrape.tls_config.clone().expect("a TLS config");
        assert_eq!(
            files.ca_file.as_deref(),
            Some("/etc/prometheus/secrets/ca.crt")
        );
        assert_eq!((files.cert_file, files.key_file), (None, None), "{file}");
        let path = if pod {
            "spec.podMetricsEndpoints[0]"
        } else {
            "spec.endpoints[0]"
        };
        assert_eq!(
            job.unsupported,
            vec![
                format!(r#"{path}.tlsConfig.cert: Secret "secret-cert" key """#),
                format!(r#"{path}.tlsConfig.keySecret: Secret "secret" key "key""#),
            ],
            "{file}"
        );
    }
    // TestPodMonitorScrapeClassWithDefaultTLS, first case: every part given as a reference.
    let file = "podMonitorObjectWithNonDefaultScrapeClassAndExistingTLSConfig.golden";
    let obj = default_monitor(
        true,
        Some(TLS_CLASS),
        json!({"tlsConfig": {
            "ca": {"secret": {"name": "tls", "key": "ca"}},
            "cert": {"secret": {"name": "tls", "key": "cert"}},
            "keySecret": {"name": "tls", "key": "private-key"},
        }}),
    );
    let job = one_pm(&obj, &ctx);
    assert_golden(&job, file);
    assert_eq!(job.scrape.tls_config, Some(TlsFiles::default()));
    assert_eq!(job.unsupported.len(), 3, "{:?}", job.unsupported);
}

#[test]
fn an_authorization_type_without_credentials_is_written_as_the_operator_writes_it() {
    // `addSafeAuthorizationToYaml`: the type alone, `Bearer` when empty; nothing unsupported.
    let ctx = class_ctx(
        json!([{"name": "typed", "default": true, "authorization": {"type": "Token"}}]),
        true,
    );
    for pod in [false, true] {
        let obj = default_monitor(pod, None, json!({}));
        let job = if pod {
            one_pm(&obj, &ctx)
        } else {
            one_sm(&obj, &ctx)
        };
        assert_eq!(
            job.scrape.authorization,
            Some(AuthorizationFile {
                kind: "Token".into(),
                credentials_file: None
            })
        );
        assert_eq!(job.unsupported, Vec::<String>::new());
        let yaml = scrape_config_yaml(&job, "http://herald/sd/v1/x");
        assert!(yaml.contains("authorization:\n    type: Token\n"), "{yaml}");
    }
}

#[test]
fn golden_user_authorization_is_not_overridden_by_a_class() {
    // TestScrapeClassAuthorization, "user defined Authorization not overridden by ScrapeClass":
    // the monitor names no class and the class is not default; its own Secret is reported.
    let ctx = class_ctx(
        json!([{"name": "test-attach-authz-scrape-class",
            "authorization": {"credentialsFile": "/etc/secret/credentials"}}]),
        true,
    );
    for (pod, prefix) in [(false, "serviceMonitor"), (true, "podMonitor")] {
        let file = format!("{prefix}ObjectWithNonDefaultScrapeClassUserDefinedAuthz.golden");
        let obj = default_monitor(
            pod,
            None,
            json!({"authorization": {"type": "Bearer", "credentials": {"name": "secret", "key": "token"}}}),
        );
        let job = if pod {
            one_pm(&obj, &ctx)
        } else {
            one_sm(&obj, &ctx)
        };
        assert_golden(&job, &file);
        assert_eq!(
            golden_job(&file, &job.name)["authorization"]["credentials"].as_str(),
            Some("token")
        );
        assert_eq!(job.scrape.authorization, None);
        assert_eq!(job.unsupported.len(), 1, "{:?}", job.unsupported);
        assert!(
            job.unsupported[0]
                .ends_with(r#"authorization: credentials Secret "secret" key "token""#)
        );
    }
}

#[test]
fn a_monitor_naming_a_missing_class_is_refused_and_bad_classes_are_named() {
    let obj = default_monitor(false, Some("nope"), json!({}));
    let e = service_monitor_jobs(&obj, &class_ctx(json!([TLS_CLASS]), false))
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("spec.scrapeClass") && e.contains(r#""nope" not found"#),
        "{e}"
    );
    // An endpoint's own settings win over its class's (fallback protocol, attachMetadata), and a
    // class's rules come before the endpoint's own.
    let ctx = class_ctx(
        json!([{"name": "c", "default": true, "fallbackScrapeProtocol": "PrometheusText0.0.4",
            "attachMetadata": {"node": true},
            "relabelings": [{"targetLabel": "from", "replacement": "class"}]}]),
        false,
    );
    let obj = sm(
        "default",
        "own",
        json!({"selector": {}, "fallbackScrapeProtocol": "OpenMetricsText1.0.0",
            "attachMetadata": {"node": false},
            "endpoints": [{"port": "web", "relabelings": [{"targetLabel": "from", "replacement": "own"}]}]}),
    );
    let job = one_sm(&obj, &ctx);
    assert_eq!(
        job.scrape.fallback_scrape_protocol.as_deref(),
        Some("OpenMetricsText1.0.0")
    );
    assert_eq!(job.attach_metadata.map(|a| a.node), Some(false));
    let froms: Vec<&str> = job
        .relabel_configs
        .iter()
        .filter(|r| r.target_label == "from")
        .map(|r| r.replacement.as_str())
        .collect();
    assert_eq!(froms, ["class", "own"]);

    for (classes, needle) in [
        (json!([{"name": ""}]), "[0].name: must not be empty"),
        (
            json!([{"name": "a"}, {"name": "a"}]),
            r#""a": name given twice"#,
        ),
        (
            json!([{"name": "a", "default": true}, {"name": "b", "default": true}]),
            r#""b": multiple default scrape classes defined ("a" is default too)"#,
        ),
        (
            json!([{"name": "a", "relabelings": [{"regex": "(", "targetLabel": "x"}]}]),
            r#""a": relabelings[0]"#,
        ),
        (
            json!([{"name": "a", "metricRelabelings": [{"action": "hashmod", "targetLabel": "x"}]}]),
            r#""a": metricRelabelings[0]"#,
        ),
        (
            json!([{"name": "a", "authorization": {"credentials": {"name": "s", "key": "k"}, "credentialsFile": "/f"}}]),
            "both credentials and credentialsFile",
        ),
        (
            json!([{"name": "a", "authorization": {"type": "Basic"}}]),
            "use basicAuth instead",
        ),
        (
            json!([{"name": "a", "tlsConfig": {"certFile": "/c"}}]),
            r#""a": tlsConfig."#,
        ),
        (json!({"name": "a"}), "not a list of scrape classes"),
    ] {
        let e = scrape_classes(&classes).expect_err(needle);
        assert!(e.contains(needle), "{classes}: {e}");
    }
    assert_eq!(scrape_classes(&Value::Null), Ok(Vec::new()));
}

#[test]
fn golden_namespaces() {
    // TestNamespaceSetCorrectly and TestNamespaceSetCorrectlyForPodMonitor (generateK8SSDConfig
    // alone: the golden job is "k8s-sd-test").
    let cases = [
        (
            json!({"namespaceSelector": {"matchNames": ["test1", "test2"]}, "attachMetadata": {"node": true}}),
            false,
            "namespaces_from_MatchNames_are_returned_instead_of_the_current_namespace.golden",
        ),
        (
            json!({"namespaceSelector": {"any": true}}),
            false,
            "Any_returns_an_empty_list_instead_of_the_current_namespace.golden",
        ),
        (
            json!({"namespaceSelector": {"any": true, "matchNames": ["foo", "bar"]}}),
            false,
            "Any_takes_precedence_over_MatchNames.golden",
        ),
        (
            json!({"namespaceSelector": {"any": true, "matchNames": ["foo", "bar"]}}),
            true,
            "IgnoreNamespaceSelectors_overrides_Any_and_MatchNames.golden",
        ),
    ];
    for (mut spec, ignore, file) in cases {
        spec["endpoints"] = json!([{}]);
        let ctx = MonitorContext {
            ignore_namespace_selectors: ignore,
            ..op_ctx()
        };
        let job = one_sm(&sm("default", "testservicemonitor1", spec), &ctx);
        let cfg = golden_job(file, "k8s-sd-test");
        let sd = &cfg["kubernetes_sd_configs"][0];
        assert_eq!(sd["role"].as_str(), Some("endpoints"));
        assert_namespaces(&job, sd, file);
    }
    let obj = pm(
        "default",
        "testpodmonitor1",
        json!({"namespaceSelector": {"matchNames": ["test"]}, "attachMetadata": {"node": true},
               "podMetricsEndpoints": [{}]}),
    );
    let job = one_pm(&obj, &op_ctx());
    let file = "NamespaceSetCorrectlyForPodMonitor.golden";
    let cfg = golden_job(file, "k8s-sd-test");
    assert_eq!(
        cfg["kubernetes_sd_configs"][0]["role"].as_str(),
        Some("pod")
    );
    assert_namespaces(&job, &cfg["kubernetes_sd_configs"][0], file);
}

#[test]
fn golden_sharding() {
    // TestShardingRelabelConfigsWithRetention "without_retention": shards 2.
    let obj = sm(
        "default",
        "test",
        json!({"selector": {"matchLabels": {"foo": "bar"}}, "endpoints": [{"port": "web", "interval": "30s"}]}),
    );
    let ctx = MonitorContext {
        sharding: Some(Sharding {
            shards: 2,
            shard: None,
        }),
        ..MonitorContext::default()
    };
    assert_golden(
        &one_sm(&obj, &ctx),
        "ShardingRelabelConfigs_without_retention.golden",
    );
}

// --- rules the goldens do not show ------------------------------------------------------------

fn yaml_rules(text: &str) -> Vec<RelabelConfig> {
    serde_yaml::from_str(text).expect("rules")
}

#[test]
fn job_label_and_target_port_of_a_service_monitor() {
    // No golden covers these: the rules promcfg.go writes for them, spelled out.
    let obj = sm(
        "ns",
        "m",
        json!({
            "jobLabel": "app.kubernetes.io/name",
            "endpoints": [{"targetPort": "metrics"}, {"targetPort": 9100}, {"targetPort": 0}],
        }),
    );
    let jobs = service_monitor_jobs(&obj, &MonitorContext::default()).expect("valid");
    assert_eq!(jobs.len(), 3);
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "serviceMonitor/ns/m/0",
            "serviceMonitor/ns/m/1",
            "serviceMonitor/ns/m/2"
        ]
    );
    let port_rule = |j: &MonitorJob| j.relabel_configs[1].clone();
    assert_eq!(
        vec![port_rule(&jobs[0]), port_rule(&jobs[1])],
        yaml_rules(
            "- {action: keep, source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics}\n\
             - {action: keep, source_labels: [__meta_kubernetes_pod_container_port_number], regex: '9100'}\n"
        )
    );
    let tail = |j: &MonitorJob, n: usize| j.relabel_configs[j.relabel_configs.len() - n..].to_vec();
    assert_eq!(
        tail(&jobs[0], 3),
        yaml_rules(
            "- {source_labels: [__meta_kubernetes_service_name], target_label: job, replacement: '${1}'}\n\
             - {source_labels: [__meta_kubernetes_service_label_app_kubernetes_io_name], target_label: job, regex: (.+), replacement: '${1}'}\n\
             - {target_label: endpoint, replacement: metrics}\n"
        )
    );
    // targetPort 0: no port rule, but Go's IntOrString.String() still gives endpoint "0".
    assert_eq!(
        tail(&jobs[2], 1),
        yaml_rules("- {target_label: endpoint, replacement: '0'}\n")
    );
    assert_eq!(
        jobs[2].relabel_configs.len(),
        jobs[0].relabel_configs.len() - 1
    );
}

#[test]
fn pod_monitor_job_label_and_selector_expressions() {
    let obj = pm(
        "ns",
        "m",
        json!({
            "jobLabel": "team",
            "selector": {"matchExpressions": [
                {"key": "a.b/c", "operator": "NotIn", "values": ["x", "y"]},
                {"key": "e", "operator": "Exists"},
                {"key": "d", "operator": "DoesNotExist"},
            ]},
            "podMetricsEndpoints": [{"port": "metrics"}],
        }),
    );
    let job = one_pm(&obj, &MonitorContext::default());
    assert_eq!(
        job.relabel_configs,
        yaml_rules(
            "- {source_labels: [job], target_label: __tmp_prometheus_job_name}\n\
             - {action: drop, source_labels: [__meta_kubernetes_pod_phase], regex: (Failed|Succeeded)}\n\
             - {action: drop, source_labels: [__meta_kubernetes_pod_label_a_b_c, __meta_kubernetes_pod_labelpresent_a_b_c], regex: '(x|y);true'}\n\
             - {action: keep, source_labels: [__meta_kubernetes_pod_labelpresent_e], regex: 'true'}\n\
             - {action: drop, source_labels: [__meta_kubernetes_pod_labelpresent_d], regex: 'true'}\n\
             - {action: keep, source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics}\n\
             - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}\n\
             - {source_labels: [__meta_kubernetes_pod_container_name], target_label: container}\n\
             - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}\n\
             - {target_label: job, replacement: ns/m}\n\
             - {source_labels: [__meta_kubernetes_pod_label_team], target_label: job, regex: (.+), replacement: '${1}'}\n\
             - {target_label: endpoint, replacement: metrics}\n"
        )
    );
}

// --- behaviour on herald's targets ----------------------------------------------------------

fn service(labels: Value) -> k8s_openapi::api::core::v1::Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "prod", "labels": labels},
        "spec": {"ports": [{"name": "metrics", "port": 9100}, {"name": "http", "port": 80}]},
    }))
    .expect("service")
}

fn pod(phase: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "prod", "labels": {"team": "a"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "ports": [
            {"name": "metrics", "containerPort": 9100}, {"name": "http", "containerPort": 80}]}]},
        "status": {"phase": phase, "podIP": "10.0.0.5"},
    }))
    .expect("pod")
}

fn slice() -> k8s_openapi::api::discovery::v1::EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "namespace": "prod",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": true},
                       "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "prod"}}],
        "ports": [{"name": "metrics", "port": 9100}, {"name": "http", "port": 80}],
    }))
    .expect("endpointslice")
}

/// Herald's endpointslice targets of the `web` service, relabeled by `job` the way Prometheus would
/// (scrape defaults first, empty values removed, `__` labels dropped after).
fn scrape(job: &MonitorJob, svc_labels: Value, phase: &str) -> Vec<HttpSdEntry> {
    let lookup = MapLookup::default()
        .service(service(svc_labels))
        .pod(pod(phase));
    let group = crate::endpointslice_group(&slice(), &lookup, AttachMetadata::default());
    let rules = crate::relabel::Relabeler::new(job.relabel_configs.clone()).expect("valid");
    http_sd_entries(&group)
        .into_iter()
        .filter_map(|e| {
            let mut labels = scrape_defaults(job);
            labels.extend(e.labels);
            labels.insert("__address__".into(), e.target);
            labels.retain(|_, v| !v.is_empty());
            if !rules.process(&mut labels) {
                return None;
            }
            let target = labels.remove("__address__")?;
            labels.retain(|k, _| !k.starts_with("__"));
            Some(HttpSdEntry { target, labels })
        })
        .collect()
}

fn web_monitor() -> Value {
    sm(
        "prod",
        "web",
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "targetLabels": ["tier"],
            "podTargetLabels": ["team"],
            "serviceDiscoveryRole": "EndpointSlice",
            "endpoints": [{"port": "metrics", "interval": "15s"}],
        }),
    )
}

#[test]
fn a_matching_service_port_is_kept_with_the_operator_labels() {
    let job = one_sm(&web_monitor(), &MonitorContext::default());
    assert_eq!(job.role, Role::EndpointSlice);
    assert_eq!(job.namespaces, ["prod"]);
    let got = scrape(&job, json!({"app": "web", "tier": "front"}), "Running");
    assert_eq!(
        got,
        vec![HttpSdEntry {
            target: "10.0.0.5:9100".into(),
            labels: ls! {
                "container": "app", "endpoint": "metrics", "job": "web", "namespace": "prod",
                "pod": "web-0", "service": "web", "team": "a", "tier": "front",
            },
        }]
    );
}

#[test]
fn a_service_not_matching_the_selector_or_a_finished_pod_is_dropped() {
    let job = one_sm(&web_monitor(), &MonitorContext::default());
    assert_eq!(scrape(&job, json!({"app": "db"}), "Running"), vec![]);
    assert_eq!(scrape(&job, json!({"tier": "front"}), "Running"), vec![]);
    assert_eq!(scrape(&job, json!({"app": "web"}), "Succeeded"), vec![]);
}

#[test]
fn monitor_relabelings_see_the_prometheus_job_name() {
    let obj = sm(
        "prod",
        "web",
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "serviceDiscoveryRole": "EndpointSlice",
            "endpoints": [{"port": "metrics", "relabelings": [
                {"sourceLabels": ["__tmp_prometheus_job_name"], "targetLabel": "scrape_job"},
                {"action": "Replace", "targetLabel": "job", "replacement": "custom"},
            ]}],
        }),
    );
    let job = one_sm(&obj, &MonitorContext::default());
    let got = scrape(&job, json!({"app": "web"}), "Running");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].labels["scrape_job"], "serviceMonitor/prod/web/0");
    assert_eq!(got[0].labels["job"], "custom");
}

#[test]
fn sharding_with_a_known_shard_keeps_each_target_on_exactly_one_shard() {
    let kept = |shard| {
        let ctx = MonitorContext {
            sharding: Some(Sharding {
                shards: 3,
                shard: Some(shard),
            }),
            ..MonitorContext::default()
        };
        scrape(
            &one_sm(&web_monitor(), &ctx),
            json!({"app": "web"}),
            "Running",
        )
        .len()
    };
    assert_eq!(kept(0) + kept(1) + kept(2), 1);
    let ctx = MonitorContext {
        sharding: Some(Sharding {
            shards: 0,
            shard: None,
        }),
        ..MonitorContext::default()
    };
    assert_eq!(
        service_monitor_jobs(&web_monitor(), &ctx),
        Err(MonitorError::NoShards)
    );
}

// --- scrape config and unsupported items ----------------------------------------------------

#[test]
fn secret_references_are_unsupported_and_commented_in_the_scrape_config() {
    let obj = sm(
        "prod",
        "web",
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "sampleLimit": 5000,
            "endpoints": [{
                "port": "metrics",
                "interval": "30s",
                "scrapeTimeout": "10s",
                "path": "/metrics/x",
                "scheme": "HTTPS",
                "params": {"module": ["a", "b"]},
                "honorTimestamps": false,
                "followRedirects": false,
                "enableHttp2": true,
                "bearerTokenFile": "/var/run/secrets/token",
                "bearerTokenSecret": {"name": "tok", "key": "token"},
                "basicAuth": {"username": {"name": "ba", "key": "user"}, "password": {"name": "ba", "key": "pass"}},
                "authorization": {"type": "Bearer", "credentials": {"name": "auth", "key": "c"}},
                "oauth2": {"clientId": {"configMap": {"name": "oa", "key": "id"}},
                           "clientSecret": {"name": "oa", "key": "secret"}, "tokenUrl": "https://t"},
                "tlsConfig": {"caFile": "/etc/ca.pem", "serverName": "web.prod", "insecureSkipVerify": false,
                              "cert": {"configMap": {"name": "certs", "key": "crt"}},
                              "keySecret": {"name": "certs", "key": "key"}},
                "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}],
            }],
        }),
    );
    let job = one_sm(&obj, &MonitorContext::default());
    assert_eq!(
        job.unsupported,
        vec![
            r#"spec.endpoints[0].tlsConfig.cert: ConfigMap "certs" key "crt""#,
            r#"spec.endpoints[0].tlsConfig.keySecret: Secret "certs" key "key""#,
            r#"spec.endpoints[0].bearerTokenSecret: Secret "tok" key "token""#,
            r#"spec.endpoints[0].basicAuth: username Secret "ba" key "user", password Secret "ba" key "pass""#,
            r#"spec.endpoints[0].authorization: credentials Secret "auth" key "c""#,
            r#"spec.endpoints[0].oauth2: clientId ConfigMap "oa" key "id", clientSecret Secret "oa" key "secret""#,
        ]
    );
    let text = scrape_config_yaml(&job, "http://herald:8080/sd?job=serviceMonitor/prod/web/0");
    assert_eq!(
        text,
        scrape_config_yaml(&job, "http://herald:8080/sd?job=serviceMonitor/prod/web/0")
    );
    let expected = "\
# unsupported: spec.endpoints[0].tlsConfig.cert: ConfigMap \"certs\" key \"crt\"
# unsupported: spec.endpoints[0].tlsConfig.keySecret: Secret \"certs\" key \"key\"
# unsupported: spec.endpoints[0].bearerTokenSecret: Secret \"tok\" key \"token\"
# unsupported: spec.endpoints[0].basicAuth: username Secret \"ba\" key \"user\", password Secret \"ba\" key \"pass\"
# unsupported: spec.endpoints[0].authorization: credentials Secret \"auth\" key \"c\"
# unsupported: spec.endpoints[0].oauth2: clientId ConfigMap \"oa\" key \"id\", clientSecret Secret \"oa\" key \"secret\"
- job_name: serviceMonitor/prod/web/0
  honor_labels: false
  honor_timestamps: false
  http_sd_configs:
  - url: http://herald:8080/sd?job=serviceMonitor/prod/web/0
  scrape_interval: 30s
  scrape_timeout: 10s
  metrics_path: /metrics/x
  params:
    module:
    - a
    - b
  scheme: https
  follow_redirects: false
  enable_http2: true
  tls_config:
    insecure_skip_verify: false
    server_name: web.prod
    ca_file: /etc/ca.pem
  bearer_token_file: /var/run/secrets/token
  sample_limit: 5000
  metric_relabel_configs:
  - source_labels:
    - __name__
    regex: go_.*
    action: drop
";
    assert_eq!(text, expected);
    let parsed: Yaml = serde_yaml::from_str(&text).expect("valid YAML");
    assert!(parsed[0].get("relabel_configs").is_none());
}

#[test]
fn a_plain_monitor_has_nothing_unsupported() {
    let job = one_sm(&web_monitor(), &MonitorContext::default());
    assert!(job.unsupported.is_empty());
    assert!(!scrape_config_yaml(&job, "http://h/sd").contains('#'));
}

// --- errors ---------------------------------------------------------------------------------

fn err_of(obj: Value) -> String {
    service_monitor_jobs(&obj, &MonitorContext::default())
        .expect_err("rejected")
        .to_string()
}

#[test]
fn malformed_monitors_are_errors_naming_the_monitor_and_field() {
    assert_eq!(err_of(json!("nope")), "ServiceMonitor: not a JSON object");
    assert_eq!(
        err_of(json!({"kind": "ServiceMonitor", "metadata": {"namespace": "a"}, "spec": {}})),
        "ServiceMonitor: metadata.name is missing"
    );
    assert_eq!(
        err_of(
            json!({"kind": "PodMonitor", "metadata": {"name": "x", "namespace": "a"}, "spec": {}})
        ),
        "ServiceMonitor: kind is \"PodMonitor\""
    );
    let e = err_of(sm(
        "a",
        "m",
        json!({"endpoints": [{"port": "web"}, {"targetPort": [1]}]}),
    ));
    assert!(
        e.starts_with("ServiceMonitor a/m: spec.endpoints[1].targetPort: "),
        "{e}"
    );
    let e = err_of(sm(
        "a",
        "m",
        json!({"endpoints": [{"relabelings": [{"action": "keep"}, {"action": "nope"}]}]}),
    ));
    assert!(
        e.starts_with("ServiceMonitor a/m: spec.endpoints[0].relabelings[1]: "),
        "{e}"
    );
    let e = err_of(sm(
        "a",
        "m",
        json!({"endpoints": [{"relabelings": [{"regex": "(", "action": "keep"}]}]}),
    ));
    assert!(
        e.starts_with("ServiceMonitor a/m: spec.endpoints[0].relabelings[0]: "),
        "{e}"
    );
    let e = err_of(sm("a", "m", json!({"endpoints": [{"scheme": "ftp"}]})));
    assert_eq!(
        e,
        "ServiceMonitor a/m: spec.endpoints[0].scheme: \"ftp\" is not one of HTTP, HTTPS"
    );
    let e = err_of(sm(
        "a",
        "m",
        json!({"serviceDiscoveryRole": "Pod", "endpoints": [{}]}),
    ));
    assert!(
        e.starts_with("ServiceMonitor a/m: spec.serviceDiscoveryRole: "),
        "{e}"
    );
    let e = err_of(sm(
        "a",
        "m",
        json!({"selector": {"matchExpressions": [{"key": "k", "operator": "Gt"}]}, "endpoints": [{}]}),
    ));
    assert!(
        e.starts_with("ServiceMonitor a/m: spec.selector.matchExpressions[0].operator: "),
        "{e}"
    );
    let e = err_of(sm(
        "a",
        "m",
        json!({"sampleLimit": "many", "endpoints": []}),
    ));
    assert!(
        e.starts_with("ServiceMonitor a/m: spec.sampleLimit: "),
        "{e}"
    );
    let e = pod_monitor_jobs(
        &pm(
            "a",
            "p",
            json!({"podMetricsEndpoints": [{"portNumber": "x"}]}),
        ),
        &MonitorContext::default(),
    )
    .expect_err("rejected")
    .to_string();
    assert!(
        e.starts_with("PodMonitor a/p: spec.podMetricsEndpoints[0].portNumber: "),
        "{e}"
    );
}

#[test]
fn nulls_and_missing_lists_read_as_empty() {
    let obj = sm(
        "a",
        "m",
        json!({"selector": {"matchLabels": null}, "targetLabels": null, "endpoints": null}),
    );
    assert_eq!(
        service_monitor_jobs(&obj, &MonitorContext::default()),
        Ok(vec![])
    );
    let obj = pm(
        "a",
        "p",
        json!({"podMetricsEndpoints": [{"relabelings": null, "port": null}]}),
    );
    assert_eq!(
        one_pm(&obj, &MonitorContext::default()).name,
        "podMonitor/a/p/0"
    );
}

#[test]
fn label_names_are_sanitized_as_the_operator_does() {
    assert_eq!(
        sanitize_label_name("app.kubernetes.io/name"),
        "app_kubernetes_io_name"
    );
    assert_eq!(sanitize_label_name("é-x_1"), "__x_1");
}

// --- what the operator's CRD and checks refuse, what herald ignores -------------------------

#[test]
fn unknown_fields_are_warnings_of_their_endpoint_s_job_and_the_rest_is_served() {
    let spec = |typos: bool| {
        let mut spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "endpoints": [{"port": "web"}, {"port": "metrics"}],
        });
        if typos {
            spec["jobLable"] = json!("app");
            spec["endpoints"][0]["prot"] = json!("http");
        }
        spec
    };
    let obj = sm("a", "m", spec(true));
    let jobs = service_monitor_jobs(&obj, &MonitorContext::default()).expect("served");
    let prot = "unknown field spec.endpoints[0].prot (not in the operator's CRD: ignored)";
    let lable = "unknown field spec.jobLable (not in the operator's CRD: ignored)";
    assert_eq!(jobs[0].warnings, [prot, lable]);
    assert_eq!(jobs[1].warnings, [lable]);
    assert_eq!(
        unknown_fields(&obj, MonitorKind::ServiceMonitor),
        [prot, lable]
    );
    // Served as the apiserver would store it: without the unknown fields.
    let pruned = service_monitor_jobs(&sm("a", "m", spec(false)), &MonitorContext::default())
        .expect("served");
    for (typo, clean) in jobs.iter().zip(&pruned) {
        assert_eq!(typo.relabel_configs, clean.relabel_configs);
        assert_eq!(typo.scrape, clean.scrape);
        assert!(clean.warnings.is_empty());
    }
    let yaml = scrape_config_yaml(&jobs[0], "http://h/sd");
    assert!(
        yaml.starts_with(&format!(
            "# warning: {prot}\n# warning: {lable}\n- job_name: "
        )),
        "{yaml}"
    );
    let parsed: Yaml = serde_yaml::from_str(&yaml).expect("comments keep it valid YAML");
    assert_eq!(parsed[0]["job_name"], "serviceMonitor/a/m/0");
}

#[test]
fn a_misspelled_endpoint_list_is_reported_though_no_job_is_left() {
    let obj = sm("a", "m", json!({"endpoint": [{"port": "web"}]}));
    assert_eq!(
        service_monitor_jobs(&obj, &MonitorContext::default()),
        Ok(vec![])
    );
    assert_eq!(
        unknown_fields(&obj, MonitorKind::ServiceMonitor),
        ["unknown field spec.endpoint (not in the operator's CRD: ignored)"]
    );
}

#[test]
fn values_the_crd_refuses_make_the_monitor_an_error_naming_the_field() {
    let e = err_of(sm(
        "a",
        "m",
        json!({"endpoints": [{"port": "web"}, {"port": "x", "interval": "15sec"}]}),
    ));
    assert!(
        e.starts_with(
            "ServiceMonitor a/m: spec.endpoints[1].interval: \"15sec\" does not match the CRD's pattern"
        ),
        "{e}"
    );
    let e = err_of(sm(
        "a",
        "m",
        json!({"bodySizeLimit": "10 MB", "endpoints": [{}]}),
    ));
    assert!(
        e.starts_with("ServiceMonitor a/m: spec.bodySizeLimit: "),
        "{e}"
    );
    let e = pod_monitor_jobs(
        &pm(
            "a",
            "p",
            json!({"podMetricsEndpoints": [{"tlsConfig": {"minVersion": "TLS1.3"}}]}),
        ),
        &MonitorContext::default(),
    )
    .expect_err("refused")
    .to_string();
    assert_eq!(
        e,
        "PodMonitor a/p: spec.podMetricsEndpoints[0].tlsConfig.minVersion: \"TLS1.3\" is not one of TLS10, TLS11, TLS12, TLS13"
    );
}

#[test]
fn a_scrape_timeout_over_the_interval_rejects_the_monitor_as_the_operator_does() {
    let e = err_of(sm(
        "a",
        "m",
        json!({"endpoints": [{"interval": "10s", "scrapeTimeout": "20s"}]}),
    ));
    assert_eq!(
        e,
        "ServiceMonitor a/m: spec.endpoints[0].scrapeTimeout: \"20s\" is greater than interval \"10s\""
    );
    // Without an interval, the Prometheus's (the operator's default 30s unless given).
    let obj = sm("a", "m", json!({"endpoints": [{"scrapeTimeout": "45s"}]}));
    let e = err_of(obj.clone());
    assert_eq!(
        e,
        "ServiceMonitor a/m: spec.endpoints[0].scrapeTimeout: \"45s\" is greater than the Prometheus's scrapeInterval \"30s\""
    );
    let ctx = MonitorContext {
        scrape_interval: "1m".into(),
        ..MonitorContext::default()
    };
    assert_eq!(
        one_sm(&obj, &ctx).scrape.scrape_timeout.as_deref(),
        Some("45s")
    );
}

#[test]
fn a_client_certificate_without_its_key_rejects_the_monitor() {
    let e = err_of(sm(
        "a",
        "m",
        json!({"endpoints": [{"tlsConfig": {"certFile": "/etc/c.crt"}}]}),
    ));
    assert_eq!(
        e,
        "ServiceMonitor a/m: spec.endpoints[0].tlsConfig.certFile: a client certificate without a client key"
    );
    let e = err_of(sm(
        "a",
        "m",
        json!({"endpoints": [{"tlsConfig": {"caFile": "/ca", "ca": {"secret": {"name": "s", "key": "k"}}}}]}),
    ));
    assert_eq!(
        e,
        "ServiceMonitor a/m: spec.endpoints[0].tlsConfig.caFile: cannot specify both caFile and ca"
    );
}

#[test]
fn a_pod_monitor_s_tls_files_are_ignored_and_reported() {
    let obj = pm(
        "a",
        "p",
        json!({"podMetricsEndpoints": [{"port": "web",
            "tlsConfig": {"caFile": "/ca", "insecureSkipVerify": true}}]}),
    );
    let job = one_pm(&obj, &MonitorContext::default());
    assert_eq!(
        job.scrape.tls_config,
        Some(TlsFiles {
            insecure_skip_verify: Some(true),
            ..TlsFiles::default()
        })
    );
    assert_eq!(
        job.warnings,
        [
            "unknown field spec.podMetricsEndpoints[0].tlsConfig.caFile (not in the operator's CRD: ignored)"
        ]
    );
}

#[test]
fn native_histogram_settings_are_reported_as_unsupported() {
    let obj = sm(
        "a",
        "m",
        json!({"nativeHistogramBucketLimit": 160, "scrapeClassicHistograms": true,
               "endpoints": [{"port": "web"}]}),
    );
    let job = one_sm(&obj, &MonitorContext::default());
    assert_eq!(
        job.unsupported,
        [
            "spec.scrapeClassicHistograms: true (native histogram settings are not written)",
            "spec.nativeHistogramBucketLimit: 160 (native histogram settings are not written)",
        ]
    );
}

#[test]
fn the_port_rule_is_the_keep_rule_after_the_operator_s_selection() {
    let check = |job: &MonitorJob, field: &str, port: &str, source: &str| {
        let rule = job.port_rule.as_ref().expect("a port rule");
        assert_eq!((rule.field.as_str(), rule.port.as_str()), (field, port));
        let keep = &job.relabel_configs[rule.rule];
        assert_eq!(keep.action, crate::relabel::Action::Keep);
        assert_eq!(keep.source_labels(), [source]);
        assert!(keep.regex.is_match(port));
        // The rules before it only select: none reads a port.
        assert!(
            job.relabel_configs[..rule.rule]
                .iter()
                .all(|r| r.source_labels().iter().all(|l| !l.contains("port"))),
            "{:?}",
            &job.relabel_configs[..rule.rule]
        );
    };
    let ctx = MonitorContext::default();
    let svc = |ep: Value| {
        one_sm(
            &sm(
                "a",
                "m",
                json!({"selector": {"matchLabels": {"app": "x"}}, "endpoints": [ep]}),
            ),
            &ctx,
        )
    };
    check(
        &svc(json!({"port": "web"})),
        "spec.endpoints[0].port",
        "web",
        "__meta_kubernetes_endpoint_port_name",
    );
    check(
        &svc(json!({"targetPort": "http"})),
        "spec.endpoints[0].targetPort",
        "http",
        "__meta_kubernetes_pod_container_port_name",
    );
    check(
        &svc(json!({"targetPort": 8080})),
        "spec.endpoints[0].targetPort",
        "8080",
        "__meta_kubernetes_pod_container_port_number",
    );
    assert_eq!(svc(json!({"path": "/m"})).port_rule, None);
    let pod = |ep: Value| {
        one_pm(
            &pm(
                "a",
                "p",
                json!({"selector": {"matchLabels": {"app": "x"}}, "podMetricsEndpoints": [ep]}),
            ),
            &ctx,
        )
    };
    check(
        &pod(json!({"port": "web"})),
        "spec.podMetricsEndpoints[0].port",
        "web",
        "__meta_kubernetes_pod_container_port_name",
    );
    check(
        &pod(json!({"portNumber": 9090})),
        "spec.podMetricsEndpoints[0].portNumber",
        "9090",
        "__meta_kubernetes_pod_container_port_number",
    );
    check(
        &pod(json!({"targetPort": "metrics"})),
        "spec.podMetricsEndpoints[0].targetPort",
        "metrics",
        "__meta_kubernetes_pod_container_port_name",
    );
}

#[test]
fn node_metadata_herald_attaches_is_dropped_for_monitors_that_do_not_ask_for_it() {
    let spec = |attach: bool| {
        let mut s = json!({
            "selector": {"matchLabels": {"app": "api"}},
            "podMetricsEndpoints": [{"port": "web", "relabelings": [
                {"sourceLabels": ["__meta_kubernetes_node_label_zone"], "targetLabel": "zone"},
            ]}],
        });
        if attach {
            s["attachMetadata"] = json!({"node": true});
        }
        s
    };
    let zone_of = |job: &MonitorJob| {
        let mut t = ls! {
            "__address__": "127.16.0.1:8080",
            "job": "podMonitor/default/api/0",
            "__meta_kubernetes_namespace": "default",
            "__meta_kubernetes_pod_name": "api-0",
            "__meta_kubernetes_pod_label_app": "api",
            "__meta_kubernetes_pod_labelpresent_app": "true",
            "__meta_kubernetes_pod_container_port_name": "web",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_node_label_zone": "a",
        };
        assert!(crate::relabel::process(&mut t, &job.relabel_configs));
        t.get("zone").cloned()
    };
    let attached = MonitorContext {
        node_metadata_attached: true,
        ..MonitorContext::default()
    };
    let asked = one_pm(&pm("default", "api", spec(true)), &attached);
    assert_eq!(zone_of(&asked), Some("a".into()), "asked for: kept");
    let unasked = one_pm(&pm("default", "api", spec(false)), &attached);
    assert_eq!(
        zone_of(&unasked),
        None,
        "not asked for: Prometheus would not have it"
    );
    // Discovery without node metadata: the operator's rules, nothing added.
    let plain = one_pm(
        &pm("default", "api", spec(false)),
        &MonitorContext::default(),
    );
    assert_eq!(
        plain.relabel_configs.len() + 1,
        unasked.relabel_configs.len()
    );
}

#[test]
fn a_role_selector_matches_values_literally_as_the_apiserver_does() {
    let spec = json!({
        "selectorMechanism": "RoleSelector",
        "selector": {"matchLabels": {"version": "1.0"}},
        "podMetricsEndpoints": [{"port": "web"}],
    });
    let job = one_pm(&pm("default", "api", spec), &MonitorContext::default());
    let kept = |version: &str| {
        let mut t = ls! {
            "__address__": "127.16.0.1:8080",
            "__meta_kubernetes_pod_label_version": version,
            "__meta_kubernetes_pod_labelpresent_version": "true",
            "__meta_kubernetes_pod_container_port_name": "web",
        };
        crate::relabel::process(&mut t, &job.relabel_configs)
    };
    assert!(kept("1.0"));
    assert!(!kept("100"), "a '.' is not a wildcard in a selector");
    // The operator's own selection rules take the value as a regex (golden files): unchanged.
    let spec = json!({
        "selector": {"matchLabels": {"version": "1.0"}},
        "podMetricsEndpoints": [{"port": "web"}],
    });
    let job = one_pm(&pm("default", "api", spec), &MonitorContext::default());
    assert_eq!(job.relabel_configs[2].regex.as_str(), "(1.0);true");
}

#[test]
fn an_invalid_selector_rejects_the_monitor_as_the_operator_does() {
    let cases = [
        json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": []}]}),
        json!({"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["a"]}]}),
        json!({"matchLabels": {"app": "a|b"}}),
        json!({"matchLabels": {"-bad-key": "a"}}),
    ];
    for mechanism in ["RelabelConfig", "RoleSelector"] {
        for selector in &cases {
            let spec = json!({
                "selectorMechanism": mechanism,
                "selector": selector,
                "endpoints": [{"port": "web"}],
            });
            match service_monitor_jobs(&sm("default", "api", spec), &MonitorContext::default()) {
                Err(MonitorError::Field { field, .. }) => {
                    assert_eq!(field, "spec.selector", "{mechanism} {selector}")
                }
                other => panic!("{mechanism} {selector}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_bearer_token_file_with_an_authorization_is_refused_as_prometheus_would_refuse_it() {
    let spec = json!({
        "selector": {"matchLabels": {"app": "api"}},
        "endpoints": [{"port": "web", "bearerTokenFile": "/var/run/token",
                       "authorization": {"type": "Bearer"}}],
    });
    match service_monitor_jobs(&sm("default", "api", spec), &MonitorContext::default()) {
        Err(MonitorError::Field { field, message, .. }) => {
            assert_eq!(field, "spec.endpoints[0].bearerTokenFile");
            assert!(message.contains("Prometheus refuses"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_selector_requirement_and_the_running_filter_is_noted_at_its_rule() {
    let obj = pm(
        "ns",
        "m",
        json!({
            "selector": {"matchLabels": {"app": "web"},
                         "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
            "podMetricsEndpoints": [{"port": "metrics"}],
        }),
    );
    let job = one_pm(&obj, &MonitorContext::default());
    let notes: Vec<(usize, RuleNote)> = job.rule_notes.clone();
    assert_eq!(notes.len(), 3, "{notes:?}");
    let (run, _) = notes
        .iter()
        .find(|(_, n)| *n == RuleNote::RunningFilter)
        .expect("the running filter is noted");
    assert_eq!(
        job.relabel_configs[*run].source_labels(),
        ["__meta_kubernetes_pod_phase"]
    );
    let requirement = |text: &str| {
        let (i, _) = notes
            .iter()
            .find(|(_, n)| {
                matches!(n, RuleNote::Selector { requirement, object, field }
                if requirement == text && object == "pod" && field == "spec.selector")
            })
            .unwrap_or_else(|| panic!("{text} is noted: {notes:?}"));
        &job.relabel_configs[*i]
    };
    let app = requirement("matchLabels: app=web");
    assert_eq!(app.source_labels()[0], "__meta_kubernetes_pod_label_app");
    let tier = requirement("matchExpressions[0]: tier In (a,b)");
    assert_eq!(tier.source_labels()[0], "__meta_kubernetes_pod_label_tier");
    // The note's rule is the one that drops a pod failing that requirement, and only it.
    let mut labels = ls! {
        "__meta_kubernetes_pod_label_app": "web",
        "__meta_kubernetes_pod_labelpresent_app": "true",
        "__meta_kubernetes_pod_label_tier": "c",
        "__meta_kubernetes_pod_labelpresent_tier": "true",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_container_port_name": "metrics",
        "__address__": "10.0.0.1:8080",
    };
    let relabel = crate::JobRelabel::new(job.relabel_configs.clone(), false)
        .expect("valid")
        .with_defaults(scrape_defaults(&job));
    let stop = relabel.apply_or_stop(&mut labels);
    let tier_at = notes
        .iter()
        .find(|(_, n)| matches!(n, RuleNote::Selector { requirement, .. } if requirement.starts_with("matchExpressions[0]")))
        .map(|(i, _)| *i)
        .expect("noted");
    assert_eq!(stop, Err(crate::RelabelStop::Rule(tier_at)));
}

#[test]
fn http_sd_configs_read_herald_with_a_token_file_and_its_ca_by_path_only() {
    let ctx = op_ctx();
    let job = one_sm(
        &sm(
            "default",
            "web",
            json!({"selector": {}, "endpoints": [{"port": "http"}]}),
        ),
        &ctx,
    );
    let url = "https://herald.herald.svc:9095/sd/v1/x?shard=0&shards=2";
    // Neither: the URL alone, as before.
    let plain: Yaml = serde_yaml::from_str(&scrape_config_yaml(&job, url)).expect("YAML");
    let sd = plain[0]["http_sd_configs"][0].clone();
    assert_eq!(
        sd,
        serde_yaml::from_str::<Yaml>(&format!("url: {url:?}")).unwrap()
    );

    let client = SdClient {
        credentials_file: Some("/etc/prometheus/secrets/herald-consumer/token".into()),
        ca_file: Some("/etc/prometheus/secrets/herald-consumer/ca.crt".into()),
    };
    let text = scrape_config_yaml_with(&job, url, &client);
    let doc: Yaml = serde_yaml::from_str(&text).expect("YAML");
    let want: Yaml = serde_yaml::from_str(&format!(
        "url: {url:?}\n\
         authorization: {{type: Bearer, credentials_file: /etc/prometheus/secrets/herald-consumer/token}}\n\
         tls_config: {{ca_file: /etc/prometheus/secrets/herald-consumer/ca.crt}}\n"
    ))
    .unwrap();
    assert_eq!(doc[0]["http_sd_configs"][0], want, "{text}");
    // Only the SD entry reads herald so: the job's own scrape settings are the endpoint's.
    assert!(
        doc[0]["authorization"].is_null() && doc[0]["tls_config"].is_null(),
        "{text}"
    );
    assert!(
        !text.contains("credentials:"),
        "no secret is written: {text}"
    );
    // One at a time, and the same entry for a hand-written job (Istio's) by indentation.
    let token_only = SdClient {
        ca_file: None,
        ..client.clone()
    };
    let lines = http_sd_configs_yaml(url, &token_only, "  ");
    assert!(lines.lines().all(|l| l.starts_with("  ")), "{lines}");
    let entry: Yaml = serde_yaml::from_str(&format!("- job_name: j\n{lines}")).expect("YAML");
    assert_eq!(
        entry[0]["http_sd_configs"][0]["authorization"]["credentials_file"],
        Yaml::from("/etc/prometheus/secrets/herald-consumer/token")
    );
    assert!(entry[0]["http_sd_configs"][0]["tls_config"].is_null());
}
