//! The job file and upstream objects are untrusted bytes: for any input, `parse_config` returns a
//! config or an error naming the job, section or field at fault, the slim projection of every
//! kind returns bytes or an error, and a monitor translates to jobs (whose scrape configs are YAML,
//! whose warnings name a field) or to an error naming the monitor — never a panic. 10,000 cases each.

use herald_core::monitor::{self, MonitorContext, MonitorKind};
use herald_core::{parse_config, slim};
use proptest::prelude::*;
use serde_json::Value;

/// Job files built from the job file's own vocabulary, so most cases reach the validation.
fn job_file_like() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        Just("jobs:".to_string()),
        Just("- name: pods".to_string()),
        Just("- name: pods".to_string()),
        Just("  role: pod".to_string()),
        Just("  role: endpointslice".to_string()),
        Just("  role: widget".to_string()),
        Just("  namespaces: {names: [a, b], own_namespace: true}".to_string()),
        Just("  selectors:".to_string()),
        Just("  - role: pod".to_string()),
        Just("    label: app in (a,b".to_string()),
        Just("    label: app=web".to_string()),
        Just("    field: status.phase!=Running".to_string()),
        Just("    field: =".to_string()),
        Just("  attach_metadata: {node: true}".to_string()),
        Just("  tls_config: {ca_file: /x}".to_string()),
        Just("  bogus: 1".to_string()),
        Just("kube_api: {listen: 1, kinds: [pods]}".to_string()),
        Just("server: {token_file: /t}".to_string()),
        Just("server: [".to_string()),
        Just("- 7".to_string()),
        Just("  - ~".to_string()),
        Just("&a [*a]".to_string()),
        "[ -~]{0,30}",
    ];
    prop::collection::vec(line, 0..10).prop_map(|l| l.join("\n"))
}

fn object_like() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"[".to_vec()),
        Just(b"]".to_vec()),
        Just(
            b"\"metadata\":{\"name\":\"p\",\"namespace\":\"n\",\"labels\":{\"a\":\"b\"}}".to_vec()
        ),
        Just(b"\"spec\":".to_vec()),
        Just(b"\"status\":".to_vec()),
        Just(b"\"containers\":[{\"name\":\"c\",\"ports\":[{\"containerPort\":80}]}]".to_vec()),
        Just(b"\"ports\":".to_vec()),
        Just(b"\"podIP\":\"10.0.0.1\"".to_vec()),
        Just(b"\"endpoints\":[{\"addresses\":[\"1.2.3.4\"]}]".to_vec()),
        Just(b"null".to_vec()),
        Just(b"1e999".to_vec()),
        Just(b"\"\\ud800\"".to_vec()),
        Just(b",".to_vec()),
        Just(b":".to_vec()),
        prop::collection::vec(any::<u8>(), 0..6),
    ];
    prop::collection::vec(piece, 0..16).prop_map(|p| p.concat())
}

/// A key of a monitor's spec: the operator's vocabulary, or not.
fn monitor_key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        prop::sample::select(vec![
            "endpoints",
            "podMetricsEndpoints",
            "selector",
            "matchLabels",
            "matchExpressions",
            "key",
            "operator",
            "values",
            "namespaceSelector",
            "any",
            "matchNames",
            "port",
            "targetPort",
            "portNumber",
            "path",
            "interval",
            "scrapeTimeout",
            "scheme",
            "params",
            "tlsConfig",
            "caFile",
            "certFile",
            "keyFile",
            "ca",
            "cert",
            "keySecret",
            "secret",
            "name",
            "minVersion",
            "relabelings",
            "metricRelabelings",
            "sourceLabels",
            "regex",
            "action",
            "targetLabel",
            "replacement",
            "modulus",
            "honorLabels",
            "jobLabel",
            "targetLabels",
            "podTargetLabels",
            "bearerTokenSecret",
            "sampleLimit",
            "prot",
        ])
        .prop_map(str::to_string),
        "[a-zA-Z]{1,6}",
    ]
}

/// Monitor specs built from the operator's vocabulary (and typos of it), nested as the CRD nests
/// them, with values of every JSON type.
fn monitor_spec_like() -> impl Strategy<Value = Value> {
    let key = monitor_key();
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![
            "30s",
            "15sec",
            "1m",
            "0",
            "web",
            "metrics",
            "(",
            ".+",
            "HTTPS",
            "ftp",
            "keep",
            "KEEP",
            "labelmap",
            "TLS12",
            "In",
            "Gt",
            "EndpointSlice",
            "10MiB",
            "$1",
        ])
        .prop_map(Value::from),
        "[ -~]{0,8}".prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    });
    prop::collection::vec((monitor_key(), value), 0..6)
        .prop_map(|kv| Value::Object(kv.into_iter().collect()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn any_monitor_translates_or_says_which_monitor_and_field(spec in monitor_spec_like()) {
        for (kind, translate) in [
            (MonitorKind::ServiceMonitor, monitor::service_monitor_jobs as fn(&Value, &MonitorContext) -> _),
            (MonitorKind::PodMonitor, monitor::pod_monitor_jobs),
        ] {
            let obj = serde_json::json!({
                "kind": kind.as_str(),
                "metadata": {"name": "m", "namespace": "n"},
                "spec": spec,
            });
            for w in monitor::unknown_fields(&obj, kind) {
                prop_assert!(w.starts_with("unknown field spec") || w.ends_with("more unknown fields"), "{w}");
            }
            match translate(&obj, &MonitorContext::default()) {
                Ok(jobs) => {
                    for job in jobs {
                        let yaml = monitor::scrape_config_yaml(&job, "http://herald/sd/v1/x");
                        prop_assert!(serde_yaml::from_str::<serde_yaml::Value>(&yaml).is_ok(), "{yaml}");
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    prop_assert!(msg.starts_with(&format!("{kind}")), "{msg}");
                }
            }
        }
    }

    #[test]
    fn any_job_file_parses_or_says_what_is_wrong(yaml in prop_oneof![job_file_like(), any::<String>()]) {
        if let Err(e) = parse_config(&yaml) {
            let msg = e.to_string();
            prop_assert!(!msg.trim().is_empty(), "an empty error for {yaml:?}");
            prop_assert!(
                ["job", "jobs", "kube_api", "server", "line", "field", "invalid", "selectors", "role", "unknown"]
                    .iter()
                    .any(|w| msg.contains(w)),
                "the error names what is wrong: {msg:?} for {yaml:?}"
            );
        }
    }

    #[test]
    fn any_upstream_object_is_projected_or_refused_for_every_kind(raw in prop_oneof![object_like(), prop::collection::vec(any::<u8>(), 0..48)]) {
        for mask in [&slim::POD, &slim::SERVICE, &slim::ENDPOINTS, &slim::ENDPOINT_SLICE, &slim::NODE, &slim::NAMESPACE, &slim::INGRESS] {
            match slim::project(mask, &raw) {
                Ok(out) => prop_assert!(serde_json::from_slice::<serde_json::Value>(&out).is_ok(), "the projection is JSON"),
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}
