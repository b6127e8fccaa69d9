//! Relabeling tests: the cases of prometheus/prometheus `model/relabel/relabel_test.go` at commit
//! d15adb9ad7e5d9fbde3a9a8f30200593a5a14d86 (`TestRelabel`, `TestRelabelValidate`,
//! `TestTargetLabelLegacyValidity`, the configs of `BenchmarkRelabel`, and what can be ported of the
//! (un)marshaling tests), then herald's own: the YAML syntax, each validation error, Go's template
//! expansion and regex syntax.
//!
//! Not ported, with the reason:
//! - `TestConfig_UnmarshalThenMarshal` and `TestRegexp_ShouldMarshalAndUnmarshalZeroValue` check YAML
//!   marshaling, which herald does not do: their inputs are ported as unmarshaling checks below.
//! - `TestRegexp_JSONUnmarshalThenMarshal` checks JSON marshaling; its inputs are ported as reads (with
//!   serde_json), see `json_inputs_read_as_prometheus_reads_them`.
//! - `BenchmarkRelabel` is a benchmark; its three configs are ported as tests of their outcome.

use super::*;

fn labels(pairs: &[(&str, &str)]) -> LabelSet {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Rules from YAML (Prometheus syntax), each validated as `TestRelabel` validates them (UTF-8).
fn rules(yaml: &str) -> Vec<RelabelConfig> {
    let rules: Vec<RelabelConfig> = serde_yaml::from_str(yaml).expect("rules parse");
    validate_all(&rules).expect("rules are valid");
    rules
}

fn rule(yaml: &str) -> RelabelConfig {
    serde_yaml::from_str(yaml).expect("rule parses")
}

fn read_err(yaml: &str) -> String {
    serde_yaml::from_str::<RelabelConfig>(yaml)
        .expect_err("rule must be rejected")
        .to_string()
}

fn validate_err(yaml: &str) -> String {
    rule(yaml)
        .validate()
        .expect_err("rule must be invalid")
        .to_string()
}

struct Case {
    input: &'static [(&'static str, &'static str)],
    rules: &'static str,
    /// `None`: the target is dropped.
    output: Option<&'static [(&'static str, &'static str)]>,
}

/// `TestRelabel`, case by case, in its order.
const RELABEL_CASES: &[Case] = &[
    Case {
        input: &[("a", "foo"), ("b", "bar"), ("c", "baz")],
        rules: r#"
- source_labels: [a]
  regex: f(.*)
  target_label: d
  separator: ";"
  replacement: ch${1}-ch${1}
  action: replace
"#,
        output: Some(&[("a", "foo"), ("b", "bar"), ("c", "baz"), ("d", "choo-choo")]),
    },
    Case {
        input: &[("a", "foo"), ("b", "bar"), ("c", "baz")],
        rules: r#"
- source_labels: [a, b]
  regex: f(.*);(.*)r
  target_label: a
  separator: ";"
  replacement: b${1}${2}m
  action: replace
- source_labels: [c, a]
  regex: (b).*b(.*)ba(.*)
  target_label: d
  separator: ";"
  replacement: $1$2$2$3
  action: replace
"#,
        output: Some(&[("a", "boobam"), ("b", "bar"), ("c", "baz"), ("d", "boooom")]),
    },
    Case {
        input: &[("a", "foo")],
        rules: r#"
- source_labels: [a]
  regex: .*o.*
  action: drop
- source_labels: [a]
  regex: f(.*)
  target_label: d
  separator: ";"
  replacement: ch$1-ch$1
  action: replace
"#,
        output: None,
    },
    Case {
        input: &[("a", "foo"), ("b", "bar")],
        rules: r#"
- source_labels: [a]
  regex: .*o.*
  action: drop
"#,
        output: None,
    },
    Case {
        input: &[("a", "abc")],
        rules: r#"
- source_labels: [a]
  regex: .*(b).*
  target_label: d
  separator: ";"
  replacement: $1
  action: replace
"#,
        output: Some(&[("a", "abc"), ("d", "b")]),
    },
    Case {
        input: &[("a", "foo")],
        rules: r#"
- source_labels: [a]
  regex: no-match
  action: drop
"#,
        output: Some(&[("a", "foo")]),
    },
    Case {
        input: &[("a", "foo")],
        rules: r#"
- source_labels: [a]
  regex: f|o
  action: drop
"#,
        output: Some(&[("a", "foo")]),
    },
    Case {
        input: &[("a", "foo")],
        rules: r#"
- source_labels: [a]
  regex: no-match
  action: keep
"#,
        output: None,
    },
    Case {
        input: &[("a", "foo")],
        rules: r#"
- source_labels: [a]
  regex: f.*
  action: keep
"#,
        output: Some(&[("a", "foo")]),
    },
    // No replacement must be applied if there is no match.
    Case {
        input: &[("a", "boo")],
        rules: r#"
- source_labels: [a]
  regex: f
  target_label: b
  replacement: bar
  action: replace
"#,
        output: Some(&[("a", "boo")]),
    },
    // Blank replacement should delete the label.
    Case {
        input: &[("a", "foo"), ("f", "baz")],
        rules: r#"
- source_labels: [a]
  regex: (f).*
  target_label: $1
  replacement: $2
  action: replace
"#,
        output: Some(&[("a", "foo")]),
    },
    Case {
        input: &[("a", "foo"), ("b", "bar"), ("c", "baz")],
        rules: r#"
- source_labels: [c]
  target_label: d
  separator: ";"
  action: hashmod
  modulus: 1000
"#,
        output: Some(&[("a", "foo"), ("b", "bar"), ("c", "baz"), ("d", "976")]),
    },
    Case {
        input: &[("a", "foo\nbar")],
        rules: r#"
- source_labels: [a]
  target_label: b
  separator: ";"
  action: hashmod
  modulus: 1000
"#,
        output: Some(&[("a", "foo\nbar"), ("b", "734")]),
    },
    Case {
        input: &[("a", "foo"), ("b1", "bar"), ("b2", "baz")],
        rules: r#"
- regex: (b.*)
  replacement: bar_${1}
  action: labelmap
"#,
        output: Some(&[
            ("a", "foo"),
            ("b1", "bar"),
            ("b2", "baz"),
            ("bar_b1", "bar"),
            ("bar_b2", "baz"),
        ]),
    },
    Case {
        input: &[
            ("a", "foo"),
            ("__meta_my_bar", "aaa"),
            ("__meta_my_baz", "bbb"),
            ("__meta_other", "ccc"),
        ],
        rules: r#"
- regex: __meta_(my.*)
  replacement: ${1}
  action: labelmap
"#,
        output: Some(&[
            ("a", "foo"),
            ("__meta_my_bar", "aaa"),
            ("__meta_my_baz", "bbb"),
            ("__meta_other", "ccc"),
            ("my_bar", "aaa"),
            ("my_baz", "bbb"),
        ]),
    },
    // valid case
    Case {
        input: &[("a", "some-name-value")],
        rules: r#"
- source_labels: [a]
  regex: some-([^-]+)-([^,]+)
  action: replace
  replacement: ${2}
  target_label: ${1}
"#,
        output: Some(&[("a", "some-name-value"), ("name", "value")]),
    },
    // invalid replacement ""
    Case {
        input: &[("a", "some-name-value")],
        rules: r#"
- source_labels: [a]
  regex: some-([^-]+)-([^,]+)
  action: replace
  replacement: ${3}
  target_label: ${1}
"#,
        output: Some(&[("a", "some-name-value")]),
    },
    // invalid target_labels
    Case {
        input: &[("a", "some-name-0")],
        rules: r#"
- source_labels: [a]
  regex: some-([^-]+)-([^,]+)
  action: replace
  replacement: ${1}
  target_label: ${3}
- source_labels: [a]
  regex: some-([^-]+)-([^,]+)
  action: replace
  replacement: ${1}
  target_label: ${3}
- source_labels: [a]
  regex: some-([^-]+)(-[^,]+)
  action: replace
  replacement: ${1}
  target_label: ${3}
"#,
        output: Some(&[("a", "some-name-0")]),
    },
    // more complex real-life like usecase
    Case {
        input: &[("__meta_sd_tags", "path:/secret,job:some-job,label:foo=bar")],
        rules: r#"
- source_labels: [__meta_sd_tags]
  regex: (?:.+,|^)path:(/[^,]+).*
  action: replace
  replacement: ${1}
  target_label: __metrics_path__
- source_labels: [__meta_sd_tags]
  regex: (?:.+,|^)job:([^,]+).*
  action: replace
  replacement: ${1}
  target_label: job
- source_labels: [__meta_sd_tags]
  regex: (?:.+,|^)label:([^=]+)=([^,]+).*
  action: replace
  replacement: ${2}
  target_label: ${1}
"#,
        output: Some(&[
            ("__meta_sd_tags", "path:/secret,job:some-job,label:foo=bar"),
            ("__metrics_path__", "/secret"),
            ("job", "some-job"),
            ("foo", "bar"),
        ]),
    },
    // From https://github.com/prometheus/prometheus/issues/12283
    Case {
        input: &[
            ("__meta_kubernetes_pod_container_port_name", "foo"),
            ("__meta_kubernetes_pod_annotation_XXX_metrics_port", "9091"),
        ],
        rules: r#"
- regex: ^__meta_kubernetes_pod_container_port_name$
  action: labeldrop
- source_labels: [__meta_kubernetes_pod_annotation_XXX_metrics_port]
  regex: (.+)
  action: replace
  replacement: metrics
  target_label: __meta_kubernetes_pod_container_port_name
- source_labels: [__meta_kubernetes_pod_container_port_name]
  regex: ^metrics$
  action: keep
"#,
        output: Some(&[
            ("__meta_kubernetes_pod_annotation_XXX_metrics_port", "9091"),
            ("__meta_kubernetes_pod_container_port_name", "metrics"),
        ]),
    },
    Case {
        input: &[("a", "foo"), ("b1", "bar"), ("b2", "baz")],
        rules: r#"
- regex: (b.*)
  action: labelkeep
"#,
        output: Some(&[("b1", "bar"), ("b2", "baz")]),
    },
    Case {
        input: &[("a", "foo"), ("b1", "bar"), ("b2", "baz")],
        rules: r#"
- regex: (b.*)
  action: labeldrop
"#,
        output: Some(&[("a", "foo")]),
    },
    Case {
        input: &[("foo", "bAr123Foo")],
        rules: r#"
- source_labels: [foo]
  action: uppercase
  target_label: foo_uppercase
- source_labels: [foo]
  action: lowercase
  target_label: foo_lowercase
"#,
        output: Some(&[
            ("foo", "bAr123Foo"),
            ("foo_lowercase", "bar123foo"),
            ("foo_uppercase", "BAR123FOO"),
        ]),
    },
    Case {
        input: &[
            ("__tmp_port", "1234"),
            ("__port1", "1234"),
            ("__port2", "5678"),
        ],
        rules: r#"
- source_labels: [__tmp_port]
  action: keepequal
  target_label: __port1
"#,
        output: Some(&[
            ("__tmp_port", "1234"),
            ("__port1", "1234"),
            ("__port2", "5678"),
        ]),
    },
    Case {
        input: &[
            ("__tmp_port", "1234"),
            ("__port1", "1234"),
            ("__port2", "5678"),
        ],
        rules: r#"
- source_labels: [__tmp_port]
  action: dropequal
  target_label: __port1
"#,
        output: None,
    },
    Case {
        input: &[
            ("__tmp_port", "1234"),
            ("__port1", "1234"),
            ("__port2", "5678"),
        ],
        rules: r#"
- source_labels: [__tmp_port]
  action: dropequal
  target_label: __port2
"#,
        output: Some(&[
            ("__tmp_port", "1234"),
            ("__port1", "1234"),
            ("__port2", "5678"),
        ]),
    },
    Case {
        input: &[
            ("__tmp_port", "1234"),
            ("__port1", "1234"),
            ("__port2", "5678"),
        ],
        rules: r#"
- source_labels: [__tmp_port]
  action: keepequal
  target_label: __port2
"#,
        output: None,
    },
    Case {
        input: &[("a", "line1\nline2"), ("b", "bar"), ("c", "baz")],
        rules: r#"
- source_labels: [a]
  regex: line1.*line2
  target_label: d
  separator: ";"
  replacement: match${1}
  action: replace
"#,
        output: Some(&[
            ("a", "line1\nline2"),
            ("b", "bar"),
            ("c", "baz"),
            ("d", "match"),
        ]),
    },
    // Replace on source label with UTF-8 characters.
    Case {
        input: &[("utf-8.label", "line1\nline2"), ("b", "bar"), ("c", "baz")],
        rules: r#"
- source_labels: [utf-8.label]
  regex: line1.*line2
  target_label: d
  separator: ";"
  replacement: match${1}
  action: replace
"#,
        output: Some(&[
            ("utf-8.label", "line1\nline2"),
            ("b", "bar"),
            ("c", "baz"),
            ("d", "match"),
        ]),
    },
    // Replace targetLabel with UTF-8 characters.
    Case {
        input: &[("a", "line1\nline2"), ("b", "bar"), ("c", "baz")],
        rules: r#"
- source_labels: [a]
  regex: line1.*line2
  target_label: utf-8.label
  separator: ";"
  replacement: match${1}
  action: replace
"#,
        output: Some(&[
            ("a", "line1\nline2"),
            ("b", "bar"),
            ("c", "baz"),
            ("utf-8.label", "match"),
        ]),
    },
    // Replace targetLabel with UTF-8 characters and $variable.
    Case {
        input: &[("a", "line1\nline2"), ("b", "bar"), ("c", "baz")],
        rules: r#"
- source_labels: [a]
  regex: line1.*line2
  target_label: utf-8.label${1}
  separator: ";"
  replacement: match${1}
  action: replace
"#,
        output: Some(&[
            ("a", "line1\nline2"),
            ("b", "bar"),
            ("c", "baz"),
            ("utf-8.label", "match"),
        ]),
    },
    // Replace targetLabel with UTF-8 characters and various $var styles.
    Case {
        input: &[("a", "line1\nline2"), ("b", "bar"), ("c", "baz")],
        rules: r#"
- source_labels: [a]
  regex: (line1).*(?<second>line2)
  target_label: label1_${1}
  separator: ";"
  replacement: val_${second}
  action: replace
- source_labels: [a]
  regex: (line1).*(?<second>line2)
  target_label: label2_$1
  separator: ";"
  replacement: val_$second
  action: replace
"#,
        output: Some(&[
            ("a", "line1\nline2"),
            ("b", "bar"),
            ("c", "baz"),
            ("label1_line1", "val_line2"),
            ("label2_line1", "val_line2"),
        ]),
    },
    Case {
        input: &[("__name__", "http_requests_total")],
        rules: r#"
- source_labels: [__name__]
  regex: .*_total$
  target_label: __type__
  replacement: counter
  action: replace
"#,
        output: Some(&[("__name__", "http_requests_total"), ("__type__", "counter")]),
    },
    Case {
        input: &[("__name__", "disk_usage_bytes")],
        rules: r#"
- source_labels: [__name__]
  regex: .*_bytes$
  target_label: __unit__
  replacement: bytes
  action: replace
"#,
        output: Some(&[("__name__", "disk_usage_bytes"), ("__unit__", "bytes")]),
    },
];

#[test]
fn prometheus_relabel_cases() {
    assert_eq!(RELABEL_CASES.len(), 34, "every TestRelabel case is here");
    for (i, case) in RELABEL_CASES.iter().enumerate() {
        let rules = rules(case.rules);
        let mut lset = labels(case.input);
        let keep = process(&mut lset, &rules);
        assert_eq!(keep, case.output.is_some(), "case {i}: kept");
        if let Some(output) = case.output {
            assert_eq!(lset, labels(output), "case {i}: labels");
        }
        // The validated form does the same.
        let relabeler = Relabeler::new(rules).expect("valid");
        let mut again = labels(case.input);
        assert_eq!(relabeler.process(&mut again), keep, "case {i}: Relabeler");
        if keep {
            assert_eq!(again, lset, "case {i}: Relabeler labels");
        }
    }
}

/// `TestRelabelValidate`. Go builds `Config` literals, whose unset fields are Go's zero values
/// (`separator: ""`, `replacement: ""`); none of the cases depends on those two, so the literals here
/// start from the defaults.
#[test]
fn prometheus_validate_cases() {
    let config = |action, target: &str, names| RelabelConfig {
        action,
        target_label: target.to_owned(),
        name_validation: names,
        ..RelabelConfig::default()
    };
    let some_regex = Regexp::new("some-([^-]+)-([^,]+)").expect("compiles");
    let replace_to = |target: &str| RelabelConfig {
        source_labels: Some(vec!["a".to_owned()]),
        regex: some_regex.clone(),
        replacement: "${1}".to_owned(),
        ..config(Action::Replace, target, NameValidation::Utf8)
    };
    let label_map = |regex: &str, replacement: &str| RelabelConfig {
        regex: Regexp::new(regex).expect("compiles"),
        replacement: replacement.to_owned(),
        ..config(Action::LabelMap, "", NameValidation::Legacy)
    };
    let cases: Vec<(RelabelConfig, Option<&str>)> = vec![
        // Case 0 (`Config{}`, the empty action) cannot be built here: `Action` has no empty value.
        // The YAML that gives Go's empty action (`action: null`) is rejected when read; see
        // `an_empty_or_unknown_action_is_rejected_when_read`.
        (
            config(Action::Replace, "", NameValidation::Utf8),
            Some("requires 'target_label' value"),
        ),
        (
            config(Action::Lowercase, "", NameValidation::Utf8),
            Some("requires 'target_label' value"),
        ),
        // With UTF-8 naming, this is a legal relabel rule.
        (
            config(Action::Lowercase, "${3}", NameValidation::Utf8),
            None,
        ),
        (
            config(Action::Lowercase, "${3}", NameValidation::Legacy),
            Some("\"${3}\" is invalid 'target_label' for lowercase action"),
        ),
        (replace_to("${3}"), None),
        // With UTF-8 naming these target valid labels.
        (replace_to("0${3}"), None),
        (replace_to("-${3}"), None),
        (
            label_map("__meta_kubernetes_pod_label_(strimzi_io_.+)", "$1"),
            None,
        ),
        (label_map("__meta_(.+)", "${1}"), None),
    ];
    for (i, (config, expected)) in cases.into_iter().enumerate() {
        let result = config.validate();
        match expected {
            None => assert_eq!(result, Ok(()), "case {}", i + 1),
            Some(expected) => {
                let message = result.expect_err("invalid").to_string();
                assert!(message.contains(expected), "case {}: {message}", i + 1);
            }
        }
    }
}

/// `TestTargetLabelLegacyValidity` (`relabelTargetLegacy`).
#[test]
fn prometheus_legacy_target_label_cases() {
    let cases = [
        ("-label", false),
        ("label", true),
        ("label${1}", true),
        ("${1}label", true),
        ("${1}", true),
        ("${1}label", true),
        ("${", false),
        ("$", false),
        ("${}", false),
        ("foo${", false),
        ("$1", true),
        ("asd$2asd", true),
        ("-foo${1}bar-", false),
        ("bar.foo${1}bar", false),
        ("_${1}_", true),
        ("foo${bar}foo", true),
    ];
    for (name, valid) in cases {
        assert_eq!(
            NameValidation::Legacy.is_valid_template_name(name),
            valid,
            "{name:?}"
        );
    }
}

/// The configs of `BenchmarkRelabel` (read strictly, as it reads them) and what they do to its labels.
#[test]
fn prometheus_benchmark_configs() {
    let example = rules(
        r#"
            - source_labels: [job, __meta_dns_name]
              regex: "(.*)some-[regex]"
              target_label: job
              replacement: foo-${1}
              # action defaults to 'replace'
            - source_labels: [abc]
              target_label: cde
            - replacement: static
              target_label: abc
            - regex:
              replacement: static
              target_label: abc"#,
    );
    assert_eq!(example[3].regex.as_str(), "");
    let mut lset = labels(&[
        ("__meta_dns_name", "example-some-x.com"),
        ("abc", "def"),
        ("job", "foo"),
    ]);
    assert!(process(&mut lset, &example));
    assert_eq!(
        lset,
        labels(&[
            ("__meta_dns_name", "example-some-x.com"),
            ("abc", "static"),
            ("cde", "def"),
            ("job", "foo"),
        ])
    );

    let kubernetes = rules(
        r#"
        - source_labels:
            - __meta_kubernetes_pod_container_port_name
          regex: .*-metrics
          action: keep
        - source_labels:
            - __meta_kubernetes_pod_label_name
          action: drop
          regex: ""
        - source_labels:
            - __meta_kubernetes_pod_phase
          regex: Succeeded|Failed
          action: drop
        - source_labels:
            - __meta_kubernetes_pod_annotation_prometheus_io_scrape
          regex: "false"
          action: drop
        - source_labels:
            - __meta_kubernetes_pod_annotation_prometheus_io_scheme
          target_label: __scheme__
          regex: (https?)
          replacement: $1
          action: replace
        - source_labels:
            - __meta_kubernetes_pod_annotation_prometheus_io_path
          target_label: __metrics_path__
          regex: (.+)
          replacement: $1
          action: replace
        - source_labels:
            - __address__
            - __meta_kubernetes_pod_annotation_prometheus_io_port
          target_label: __address__
          regex: (.+?)(\:\d+)?;(\d+)
          replacement: $1:$3
          action: replace
        - regex: __meta_kubernetes_pod_annotation_prometheus_io_param_(.+)
          replacement: __param_$1
          action: labelmap
        - regex: __meta_kubernetes_pod_label_prometheus_io_label_(.+)
          action: labelmap
        - regex: __meta_kubernetes_pod_annotation_prometheus_io_label_(.+)
          action: labelmap
        - source_labels:
            - __meta_kubernetes_namespace
            - __meta_kubernetes_pod_label_name
          separator: /
          target_label: job
          replacement: $1
          action: replace
        - source_labels:
          - __meta_kubernetes_namespace
          target_label: namespace
          action: replace
        - source_labels:
            - __meta_kubernetes_pod_name
          target_label: pod
          action: replace
        - source_labels:
            - __meta_kubernetes_pod_container_name
          target_label: container
          action: replace
        - source_labels:
            - __meta_kubernetes_pod_name
            - __meta_kubernetes_pod_container_name
            - __meta_kubernetes_pod_container_port_name
          separator: ':'
          target_label: instance
          action: replace
        - target_label: cluster
          replacement: dev-us-central-0
        - source_labels:
            - __meta_kubernetes_namespace
          regex: hosted-grafana
          action: drop
        - source_labels:
            - __address__
          target_label: __tmp_hash
          modulus: 3
          action: hashmod
        - source_labels:
            - __tmp_hash
          regex: ^0$
          action: keep
        - regex: __tmp_hash
          action: labeldrop"#,
    );
    let input: &[(&str, &str)] = &[
        ("__address__", "10.132.183.40:80"),
        ("__meta_kubernetes_namespace", "loki-boltdb-shipper"),
        (
            "__meta_kubernetes_pod_annotation_promtail_loki_boltdb_shipper_hash",
            "50523b9759094a144adcec2eae0aa4ad",
        ),
        (
            "__meta_kubernetes_pod_annotationpresent_promtail_loki_boltdb_shipper_hash",
            "true",
        ),
        ("__meta_kubernetes_pod_container_init", "false"),
        ("__meta_kubernetes_pod_container_name", "promtail"),
        ("__meta_kubernetes_pod_container_port_name", "http-metrics"),
        ("__meta_kubernetes_pod_container_port_number", "80"),
        ("__meta_kubernetes_pod_container_port_protocol", "TCP"),
        ("__meta_kubernetes_pod_controller_kind", "DaemonSet"),
        (
            "__meta_kubernetes_pod_controller_name",
            "promtail-loki-boltdb-shipper",
        ),
        ("__meta_kubernetes_pod_host_ip", "10.128.0.178"),
        ("__meta_kubernetes_pod_ip", "10.132.183.40"),
        (
            "__meta_kubernetes_pod_label_controller_revision_hash",
            "555b77cd7d",
        ),
        (
            "__meta_kubernetes_pod_label_name",
            "promtail-loki-boltdb-shipper",
        ),
        ("__meta_kubernetes_pod_label_pod_template_generation", "45"),
        (
            "__meta_kubernetes_pod_labelpresent_controller_revision_hash",
            "true",
        ),
        ("__meta_kubernetes_pod_labelpresent_name", "true"),
        (
            "__meta_kubernetes_pod_labelpresent_pod_template_generation",
            "true",
        ),
        (
            "__meta_kubernetes_pod_name",
            "promtail-loki-boltdb-shipper-jgtr7",
        ),
        (
            "__meta_kubernetes_pod_node_name",
            "gke-dev-us-central-0-main-n2s8-2-14d53341-9hkr",
        ),
        ("__meta_kubernetes_pod_phase", "Running"),
        ("__meta_kubernetes_pod_ready", "true"),
        (
            "__meta_kubernetes_pod_uid",
            "4c586419-7f6c-448d-aeec-ca4fa5b05e60",
        ),
        ("__metrics_path__", "/metrics"),
        ("__scheme__", "http"),
        ("__scrape_interval__", "15s"),
        ("__scrape_timeout__", "10s"),
        ("job", "kubernetes-pods"),
    ];
    let mut lset = labels(input);
    let keep = process(&mut lset, &kubernetes);
    // The hashmod shard of the address decides; the shard module is checked against md5sum.
    assert_eq!(keep, crate::shard::hashmod("10.132.183.40:80", 3) == 0);
    // Without the sharding rules the outcome is fixed.
    let unsharded = &kubernetes[..kubernetes.len() - 3];
    let mut lset = labels(input);
    assert!(process(&mut lset, unsharded));
    let mut expected = labels(input);
    expected.extend(labels(&[
        ("job", "loki-boltdb-shipper/promtail-loki-boltdb-shipper"),
        ("namespace", "loki-boltdb-shipper"),
        ("pod", "promtail-loki-boltdb-shipper-jgtr7"),
        ("container", "promtail"),
        (
            "instance",
            "promtail-loki-boltdb-shipper-jgtr7:promtail:http-metrics",
        ),
        ("cluster", "dev-us-central-0"),
    ]));
    assert_eq!(lset, expected);
    // The address rule, on an address without a port and a port annotation.
    let mut lset = labels(&[
        ("__address__", "10.0.0.1"),
        (
            "__meta_kubernetes_pod_annotation_prometheus_io_port",
            "9102",
        ),
    ]);
    assert!(process(&mut lset, &kubernetes[6..7]));
    assert_eq!(lset["__address__"], "10.0.0.1:9102");

    let static_pairs = rules(
        r#"
        - replacement: wwwwww
          target_label: wwwwww
        - replacement: yyyyyyyyyyyy
          target_label: xxxxxxxxx
        - replacement: xxxxxxxxx
          target_label: yyyyyyyyyyyy
        - source_labels: ["something"]
          target_label: with_source_labels
          replacement: value
        - replacement: dropped
          target_label: ${0}
        - replacement: ${0}
          target_label: dropped"#,
    );
    let base: &[(&str, &str)] = &[
        ("abcdefg01", "hijklmn1"),
        ("abcdefg02", "hijklmn2"),
        ("abcdefg03", "hijklmn3"),
        ("abcdefg04", "hijklmn4"),
        ("abcdefg05", "hijklmn5"),
        ("abcdefg06", "hijklmn6"),
        ("abcdefg07", "hijklmn7"),
        ("abcdefg08", "hijklmn8"),
        ("job", "foo"),
    ];
    let mut lset = labels(base);
    assert!(process(&mut lset, &static_pairs));
    let mut expected = labels(base);
    expected.extend(labels(&[
        ("wwwwww", "wwwwww"),
        ("xxxxxxxxx", "yyyyyyyyyyyy"),
        ("yyyyyyyyyyyy", "xxxxxxxxx"),
        ("with_source_labels", "value"),
    ]));
    assert_eq!(lset, expected);
}

/// The inputs of `TestConfig_UnmarshalThenMarshal`: what they read as (herald does not marshal).
#[test]
fn prometheus_unmarshal_inputs() {
    let values = rule(
        r#"source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port]
separator: ;
regex: \\d+
target_label: __meta_kubernetes_pod_container_port_number
replacement: $1
action: replace
"#,
    );
    assert_eq!(
        values.source_labels(),
        ["__meta_kubernetes_pod_annotation_prometheus_io_port"]
    );
    assert_eq!(values.separator, ";");
    assert_eq!(values.regex.as_str(), r"\\d+");
    assert!(!values.regex.is_default());
    assert_eq!(
        values.target_label,
        "__meta_kubernetes_pod_container_port_number"
    );
    assert_eq!(values.replacement, "$1");
    assert_eq!(values.action, Action::Replace);

    let no_regex = rule(
        r#"source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port]
separator: ;
target_label: __meta_kubernetes_pod_container_port_number
replacement: $1
action: keepequal
"#,
    );
    assert!(no_regex.regex.is_default());
    assert_eq!(no_regex.action, Action::KeepEqual);
    assert_eq!(no_regex.validate(), Ok(()));

    let default_regex = rule(
        r#"source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port]
separator: ;
regex: (.*)
target_label: __meta_kubernetes_pod_container_port_number
replacement: $1
action: replace
"#,
    );
    assert_eq!(default_regex.regex.as_str(), "(.*)");

    // prometheus/prometheus#18652: explicit empty values are not the defaults.
    let empty = rule(
        r#"source_labels: [namespace, k8s_app]
separator: ""
regex: ""
target_label: target_cluster
replacement: ""
action: replace
"#,
    );
    assert_eq!(empty.separator, "");
    assert_eq!(empty.regex.as_str(), "");
    assert_eq!(empty.replacement, "");
    let mut lset = labels(&[("target_cluster", "x")]);
    assert!(empty.apply(&mut lset));
    assert!(lset.is_empty(), "an empty replacement deletes the target");
}

/// `TestRegexp_ShouldMarshalAndUnmarshalZeroValue`: a `null` regex. In Go the zero `Regexp` reads
/// back as nil, which `Config.UnmarshalYAML` turns into the empty regex.
#[test]
fn a_null_regex_is_the_empty_regex() {
    for yaml in ["regex: null\ntarget_label: a", "regex:\ntarget_label: a"] {
        let config = rule(yaml);
        assert_eq!(config.regex.as_str(), "");
        assert!(config.regex.is_match(""));
        assert!(!config.regex.is_match("x"));
    }
}

/// `TestRegexp_JSONUnmarshalThenMarshal`'s inputs. NB: Prometheus's JSON path applies no defaults
/// (`Config` has no `UnmarshalJSON`), so there a missing action is empty; herald reads JSON with its
/// YAML rules, so a missing action is `replace`.
#[test]
fn json_inputs_read_as_prometheus_reads_them() {
    for regex in ["", "foo", ".*foo.*"] {
        let json = format!(r#"{{"separator":"","regex":"{regex}","replacement":""}}"#);
        let config: RelabelConfig = serde_json::from_str(&json).expect("reads");
        assert_eq!(config.separator, "");
        assert_eq!(config.regex.as_str(), regex);
        assert_eq!(config.replacement, "");
    }
}

// ---- herald's own tests ----

#[test]
fn defaults_are_prometheus_defaults() {
    let config = rule("target_label: x");
    assert_eq!(config.source_labels, None);
    assert_eq!(config.separator, ";");
    assert_eq!(config.regex.as_str(), "(.*)");
    assert!(config.regex.is_default());
    assert_eq!(config.modulus, 0);
    assert_eq!(config.replacement, "$1");
    assert_eq!(config.action, Action::Replace);
    assert_eq!(
        config,
        RelabelConfig {
            target_label: "x".to_owned(),
            ..RelabelConfig::default()
        }
    );
}

#[test]
fn null_fields_read_as_go_zero_values() {
    let config =
        rule("source_labels:\nseparator:\nregex:\nmodulus:\ntarget_label:\nreplacement:\n");
    assert_eq!(config.source_labels, None);
    assert_eq!(config.separator, "");
    assert_eq!(config.regex.as_str(), "");
    assert!(!config.regex.is_default());
    assert_eq!(config.modulus, 0);
    assert_eq!(config.target_label, "");
    assert_eq!(config.replacement, "");
    assert_eq!(config.action, Action::Replace);
    // A null list entry is never checked by Go's LabelName unmarshaler and stays "".
    assert_eq!(rule("source_labels: [a, ~]").source_labels(), ["a", ""]);
}

#[test]
fn actions_are_read_in_any_case() {
    for action in Action::ALL {
        let upper = action.as_str().to_uppercase();
        assert_eq!(rule(&format!("action: {upper}")).action, action);
        assert_eq!(Action::parse(action.as_str()), Some(action));
        assert_eq!(action.to_string(), action.as_str());
    }
    // strings.ToLower maps the Kelvin sign to an ASCII k.
    assert_eq!(Action::parse("\u{212A}EEP"), Some(Action::Keep));
}

#[test]
fn an_empty_or_unknown_action_is_rejected_when_read() {
    assert!(
        read_err("action:").contains("relabel action cannot be empty"),
        "{}",
        read_err("action:")
    );
    let e = read_err("action: replce");
    assert!(e.contains(r#"unknown relabel action "replce""#), "{e}");
    let e = read_err("action: \"\"");
    assert!(e.contains(r#"unknown relabel action """#), "{e}");
}

#[test]
fn reading_errors_name_the_field() {
    let e = read_err("source_labels: [a, \"\"]");
    assert!(
        e.contains(r#"source_labels: "" is not a valid label name"#),
        "{e}"
    );
    let e = read_err("regex: \"(unclosed\"");
    assert!(e.contains(r#"'regex' "(unclosed" does not compile"#), "{e}");
    let e = read_err("modulus: -1\naction: hashmod");
    assert!(e.contains("modulus"), "{e}");
    let e = read_err("target: x");
    assert!(e.contains("unknown field `target`"), "{e}");
    let e = read_err("source_labels: a");
    assert!(e.contains("source_labels"), "{e}");
}

#[test]
fn each_validation_error_names_the_field() {
    let cases = [
        (
            "action: hashmod\ntarget_label: x",
            "relabel configuration for hashmod requires non-zero modulus",
        ),
        (
            "action: replace",
            "relabel configuration for replace action requires 'target_label' value",
        ),
        (
            "action: hashmod\nmodulus: 2",
            "relabel configuration for hashmod action requires 'target_label' value",
        ),
        (
            "action: uppercase",
            "relabel configuration for uppercase action requires 'target_label' value",
        ),
        (
            "action: keepequal",
            "relabel configuration for keepequal action requires 'target_label' value",
        ),
        (
            "action: dropequal",
            "relabel configuration for dropequal action requires 'target_label' value",
        ),
        (
            "action: lowercase\ntarget_label: x\nreplacement: y",
            "'replacement' can not be set for lowercase action",
        ),
        (
            "action: keepequal\ntarget_label: x\nreplacement: y",
            "'replacement' can not be set for keepequal action",
        ),
        (
            "action: labelmap\nreplacement: \"\"",
            r#""" is invalid 'replacement' for labelmap action"#,
        ),
        (
            "action: keepequal\ntarget_label: x\nregex: (.*)",
            "keepequal action requires only 'source_labels' and `target_label`, and no other fields",
        ),
        (
            "action: dropequal\ntarget_label: x\nseparator: ','",
            "dropequal action requires only 'source_labels' and `target_label`, and no other fields",
        ),
        (
            "action: dropequal\ntarget_label: x\nmodulus: 3",
            "dropequal action requires only 'source_labels' and `target_label`, and no other fields",
        ),
        (
            "action: labeldrop\nregex: a\nsource_labels: []",
            "labeldrop action requires only 'regex', and no other fields",
        ),
        (
            "action: labelkeep\nregex: a\ntarget_label: x",
            "labelkeep action requires only 'regex', and no other fields",
        ),
        (
            "action: labelkeep\nregex: a\nreplacement: x",
            "labelkeep action requires only 'regex', and no other fields",
        ),
    ];
    for (yaml, expected) in cases {
        assert_eq!(validate_err(yaml), expected, "{yaml}");
    }
    // Legacy names reject what UTF-8 accepts.
    let legacy = |yaml: &str| RelabelConfig {
        name_validation: NameValidation::Legacy,
        ..rule(yaml)
    };
    let expect = |config: RelabelConfig, message: &str| {
        assert_eq!(config.validate().expect_err("invalid").to_string(), message);
    };
    expect(
        legacy("target_label: a.b"),
        r#""a.b" is invalid 'target_label' for replace action"#,
    );
    expect(
        legacy("target_label: ${1"),
        r#""${1" is invalid 'target_label' for replace action"#,
    );
    expect(
        legacy("target_label: a\naction: hashmod"),
        "relabel configuration for hashmod requires non-zero modulus",
    );
    expect(
        legacy("target_label: 1a\naction: hashmod\nmodulus: 2"),
        r#""1a" is invalid 'target_label' for hashmod action"#,
    );
    expect(
        legacy("action: labelmap\nreplacement: a.$1"),
        r#""a.$1" is invalid 'replacement' for labelmap action"#,
    );
    // Under UTF-8 any non-empty name is valid, with or without `$` references.
    assert_eq!(rule("target_label: a.b").validate(), Ok(()));
    assert_eq!(rule("target_label: ${1").validate(), Ok(()));
    // A list names the rule's index.
    let list: Vec<RelabelConfig> =
        serde_yaml::from_str("- target_label: a\n- action: keepequal\n").expect("reads");
    assert_eq!(
        Relabeler::new(list).expect_err("invalid").to_string(),
        "relabel_configs[1]: relabel configuration for keepequal action requires 'target_label' value"
    );
}

#[test]
fn missing_source_labels_read_as_empty_and_join_with_the_separator() {
    let config = rule("source_labels: [a, missing, b]\nseparator: '|'\ntarget_label: t");
    let mut lset = labels(&[("a", "1"), ("b", "2")]);
    assert!(config.apply(&mut lset));
    assert_eq!(lset["t"], "1||2");
    // A label present with an empty value reads as missing too.
    let mut lset = labels(&[("a", ""), ("b", "2")]);
    assert!(config.apply(&mut lset));
    assert_eq!(lset["t"], "||2");
}

#[test]
fn replace_sets_deletes_or_leaves_alone() {
    // Static value with the default regex: always set (the regex matches anything).
    let mut lset = labels(&[("x", "old")]);
    assert!(rule("target_label: x\nreplacement: new").apply(&mut lset));
    assert_eq!(lset["x"], "new");
    // An empty result deletes.
    assert!(rule("target_label: x\nsource_labels: [nope]").apply(&mut lset));
    assert!(!lset.contains_key("x"));
    // No match: nothing changes.
    let mut lset = labels(&[("a", "v"), ("x", "keep")]);
    assert!(rule("source_labels: [a]\nregex: w\ntarget_label: x\nreplacement: y").apply(&mut lset));
    assert_eq!(lset["x"], "keep");
    // The expanded target must be a valid name, else nothing changes.
    let mut lset = labels(&[("a", "v")]);
    assert!(
        rule("source_labels: [a]\nregex: (x)?v\ntarget_label: $1\nreplacement: y").apply(&mut lset)
    );
    assert_eq!(lset, labels(&[("a", "v")]));
    // Under legacy rules the expanded target must be a legacy name.
    let legacy = RelabelConfig {
        name_validation: NameValidation::Legacy,
        ..rule("source_labels: [a]\nregex: (.*)\ntarget_label: x_$1\nreplacement: y")
    };
    assert_eq!(legacy.validate(), Ok(()));
    let mut lset = labels(&[("a", "b.c")]);
    assert!(legacy.apply(&mut lset));
    assert_eq!(lset, labels(&[("a", "b.c")]));
    let mut lset = labels(&[("a", "bc")]);
    assert!(legacy.apply(&mut lset));
    assert_eq!(lset["x_bc"], "y");
}

#[test]
fn templates_expand_as_go_expands_them() {
    let expand_with = |regex: &str, haystack: &str, template: &str| {
        let re = Regexp::new(regex).expect("compiles");
        let mut locations = re.regex().capture_locations();
        re.regex()
            .captures_read(&mut locations, haystack)
            .expect("matches");
        let mut out = String::new();
        expand(template, haystack, re.regex(), &locations, &mut out);
        out
    };
    let re = "(?P<first>a)(b)(c)?";
    let cases = [
        ("$1", "a"),
        ("${1}", "a"),
        ("$0", "ab"),
        ("$2x", ""), // the longest name: `2x`, no such group
        ("${2}x", "bx"),
        ("$first", "a"),
        ("${first}_", "a_"),
        ("$first_", ""), // `first_`
        ("$3", ""),      // did not take part
        ("$9", ""),      // no such group
        ("$$1", "$1"),
        ("$", "$"),
        ("a$", "a$"),
        ("$-", "$-"),
        ("${", "${"),
        ("${1", "${1"),
        ("${}", "${}"),
        ("${a-b}", "${a-b}"),
        ("$é", ""), // a letter: a name, no such group
        ("${999999999999999999999}", ""),
        ("x$1y$2z", "x"), // names `1y` and `2z`
        ("x${1}y${2}z", "xaybz"),
    ];
    for (template, expected) in cases {
        assert_eq!(expand_with(re, "ab", template), expected, "{template:?}");
    }
}

#[test]
fn regexes_are_anchored_and_dot_matches_newlines() {
    let re = Regexp::new("b").expect("compiles");
    assert!(re.is_match("b"));
    assert!(!re.is_match("abc"));
    let re = Regexp::new("a|b").expect("compiles");
    assert!(re.is_match("a") && re.is_match("b") && !re.is_match("ab"));
    let re = Regexp::new("a.*b").expect("compiles");
    assert!(re.is_match("a\n\nb"));
    assert_eq!(re.as_str(), "a.*b");
}

#[test]
fn regex_classes_are_ascii_as_in_go() {
    let cases: &[(&str, &str, bool)] = &[
        (r"\d+", "123", true),
        (r"\d+", "١٢٣", false), // Arabic-Indic digits are not \d in Go
        (r"\D", "١", true),
        (r"\w+", "abc_9", true),
        (r"\w+", "é", false),
        (r"\W", "é", true),
        (r"\s", " ", true),
        (r"\s", "\u{a0}", false),
        (r"\S", "\u{a0}", true),
        (r"[\d.]+", "1.2", true),
        (r"[\d.]+", "١", false),
        (r"[^\d]", "a", true),
        (r"[\w-]+", "a-b", true),
        (r"[\W]", "é", true),
        (r"a\b", "a", true),
        (r".*é\b.*", "éa", true), // not a word boundary in Go: é is not an ASCII word character
        (r"\pL+", "é", true),
        (r"[[:alpha:]]+", "ab", true),
        (r"[[:alpha:]]", "é", false),
        (r"[[]", "[", true),
        (r"[]a]+", "]a", true),
        (r"[a&&b]+", "a&b", true),
        (r"[~]", "~", true),
        (r"\Qa.b\E", "a.b", true),
        (r"\Qa.b\E", "axb", false),
        (r"\Q(\E.*", "(x", true),
        (r"(?:.+,|^)job:([^,]+).*", "a,job:x", true),
        (r"(.+?)(\:\d+)?;(\d+)", "h:1;2", true),
    ];
    for &(pattern, text, matches) in cases {
        let re = Regexp::new(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
        assert_eq!(re.is_match(text), matches, "{pattern:?} on {text:?}");
    }
}

#[test]
fn case_mapping_is_gos_simple_mapping() {
    assert_eq!(go_to_upper("straße"), "STRAßE");
    assert_eq!(go_to_lower("İSTANBUL"), "istanbul");
    assert_eq!(go_to_lower("ΟΔΟΣ"), "οδοσ"); // no final-sigma rule
    assert_eq!(go_to_upper("ᾳ"), "ᾼ");
    assert_eq!(go_to_upper("ᾀ"), "ᾈ");
    assert_eq!(go_to_upper("ﬁ"), "ﬁ");
    assert_eq!(go_to_upper("ǆ"), "Ǆ");
    assert_eq!(go_to_lower("ǅ"), "ǆ");
    let mut lset = labels(&[("a", "Ünïcode")]);
    assert!(rule("source_labels: [a]\naction: uppercase\ntarget_label: u").apply(&mut lset));
    assert!(rule("source_labels: [a]\naction: lowercase\ntarget_label: l").apply(&mut lset));
    assert_eq!(lset["u"], "ÜNÏCODE");
    assert_eq!(lset["l"], "ünïcode");
    // An empty result deletes.
    assert!(rule("source_labels: [none]\naction: lowercase\ntarget_label: l").apply(&mut lset));
    assert!(!lset.contains_key("l"));
}

#[test]
fn hashmod_agrees_with_the_shard_module() {
    let config = rule("source_labels: [__address__]\naction: hashmod\nmodulus: 7\ntarget_label: s");
    let mut lset = labels(&[("__address__", "1.2.3.4:9000")]);
    assert!(config.apply(&mut lset));
    assert_eq!(lset["s"], "1");
    // Not validated, modulus 0: no panic, nothing set.
    let zero = RelabelConfig {
        modulus: 0,
        ..config
    };
    let mut lset = labels(&[("__address__", "x")]);
    assert!(zero.apply(&mut lset));
    assert!(!lset.contains_key("s"));
}

#[test]
fn labelmap_reads_names_and_values_from_before_the_rule() {
    // `b` maps to `bb`, and `bb` (present before) to `bbbb`; the new `bb` is not mapped again.
    let config = rule("action: labelmap\nregex: (b+)\nreplacement: ${1}${1}");
    let mut lset = labels(&[("b", "1"), ("bb", "2")]);
    assert!(config.apply(&mut lset));
    assert_eq!(lset, labels(&[("b", "1"), ("bb", "1"), ("bbbb", "2")]));
    // A label present with an empty value maps to a deletion, as Builder.Set("") deletes.
    let config = rule("action: labelmap\nregex: __meta_(.+)");
    let mut lset = labels(&[("__meta_x", ""), ("x", "old")]);
    assert!(config.apply(&mut lset));
    assert_eq!(lset, labels(&[("__meta_x", "")]));
}

#[test]
fn a_dropped_target_stops_processing() {
    let rules = rules(
        "- target_label: before\n  replacement: 1\n- source_labels: [a]\n  regex: x\n  action: drop\n- target_label: after\n  replacement: 1\n",
    );
    let mut lset = labels(&[("a", "x")]);
    assert!(!process(&mut lset, &rules));
    assert_eq!(lset, labels(&[("a", "x"), ("before", "1")]));
}

#[test]
fn scalars_read_as_strings_where_strings_are_expected() {
    // Go's YAML decoder reads any scalar into a string field (`replacement: 9090`).
    let config = rule("replacement: 9090\ntarget_label: port\nseparator: 1");
    assert_eq!(config.replacement, "9090");
    assert_eq!(config.separator, "1");
    let config = rule("regex: 80\naction: keep\nsource_labels: [p]");
    let mut lset = labels(&[("p", "80")]);
    assert!(config.apply(&mut lset));
}

#[test]
fn a_rule_written_back_as_yaml_reads_as_the_same_rule() {
    let yaml = "\
- {source_labels: [a, b], separator: '/', regex: '(.+)', target_label: t, replacement: 'x$1'}
- {action: labeldrop, regex: 'tmp_.*'}
- {source_labels: [a], modulus: 4, target_label: h, action: hashmod}
- {source_labels: [a], target_label: b, action: keepequal}
- {target_label: c, replacement: v}
";
    let rules: Vec<RelabelConfig> = serde_yaml::from_str(yaml).expect("rules");
    for r in &rules {
        let back: RelabelConfig = serde_yaml::from_value(r.to_yaml()).expect("reads back");
        assert_eq!(&back, r);
        back.validate().expect("still valid");
    }
}

#[test]
fn rules_of_one_pattern_share_one_compiled_regex_while_one_lives() {
    // A pattern no other test uses: tests run in parallel and share the compiled regexes.
    let pattern = "shared-(\\d+)-only-in-this-test";
    let a = Regexp::new(pattern).expect("compiles");
    let b = Regexp::new(pattern).expect("compiles");
    assert!(Arc::ptr_eq(&a.regex, &b.regex));
    assert!(Arc::ptr_eq(&a.regex, &a.clone().regex));
    // Shared by what is compiled: Go's `\d` is translated to `[0-9]`, so both are one regex, and
    // each keeps the pattern as written. Another pattern is its own.
    let ascii = Regexp::new("shared-([0-9]+)-only-in-this-test").expect("compiles");
    assert!(Arc::ptr_eq(&a.regex, &ascii.regex));
    assert_eq!(
        (a.as_str(), ascii.as_str()),
        (pattern, "shared-([0-9]+)-only-in-this-test")
    );
    assert_ne!(a, ascii);
    let other = Regexp::new("shared-(\\d*)-only-in-this-test").expect("compiles");
    assert!(!Arc::ptr_eq(&a.regex, &other.regex));
    // Matching is unchanged: Go's ASCII `\d`, anchored.
    assert!(a.is_match("shared-42-only-in-this-test"));
    assert!(!b.is_match("shared-٤٢-only-in-this-test"));
    assert!(!b.is_match("xshared-42-only-in-this-test"));
    // Once no rule holds it, the pattern is compiled again (nothing keeps it alive).
    let weak = Arc::downgrade(&a.regex);
    drop((a, b, ascii));
    assert!(weak.upgrade().is_none());
    let again = Regexp::new(pattern).expect("compiles");
    assert!(again.is_match("shared-7-only-in-this-test"));
    // Rules read from YAML share it too; the default regex is one for every rule.
    let rules = rules(
        "- {source_labels: [a], regex: 'shared-(\\d+)-only-in-this-test', action: keep}\n- {source_labels: [a], target_label: b}\n- {source_labels: [b], target_label: c}",
    );
    assert!(Arc::ptr_eq(&rules[0].regex.regex, &again.regex));
    assert!(Arc::ptr_eq(&rules[1].regex.regex, &rules[2].regex.regex));
}

#[test]
fn dead_patterns_are_swept_out_of_the_shared_regexes() {
    // Many patterns compiled and dropped leave at most about twice the live ones behind.
    for i in 0..5_000 {
        Regexp::new(&format!("swept-{i}")).expect("compiles");
    }
    let held: Vec<Regexp> = (0..10)
        .map(|i| Regexp::new(&format!("held-{i}")).expect("compiles"))
        .collect();
    let entries = compiled_entries();
    // Other tests compile (and hold) patterns at the same time; 5,000 dead entries would be far more.
    assert!(entries < 4_000, "{entries} entries kept");
    assert!(held.iter().all(|r| r.is_match(r.as_str())));
}
