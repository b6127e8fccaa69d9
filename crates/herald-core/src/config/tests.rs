//! Job file parsing and the validation rules of prometheus/prometheus `discovery/kubernetes/kubernetes.go`
//! `SDConfig.UnmarshalYAML`.

use super::*;

fn err(yaml: &str) -> String {
    parse_config(yaml)
        .expect_err("config must be rejected")
        .to_string()
}

#[test]
fn a_full_job_parses_into_its_model() {
    let cfg = parse_config(
        r#"
jobs:
  - name: pods
    role: pod
    namespaces:
      names: [a, b]
      own_namespace: true
    selectors:
      - role: pod
        label: "app=web,tier!=db"
        field: "spec.nodeName=n1"
      - role: node
        label: "node-type in (worker)"
    attach_metadata:
      node: true
      namespace: true
      deployment: true
  - name: slices
    role: endpointslice
"#,
    )
    .expect("valid");
    assert_eq!(cfg.jobs.len(), 2);
    let pods = &cfg.jobs[0];
    assert_eq!(pods.name, "pods");
    assert_eq!(pods.role, Role::Pod);
    assert_eq!(
        pods.namespaces,
        Namespaces {
            names: vec!["a".into(), "b".into()],
            own_namespace: true
        }
    );
    assert_eq!(pods.selectors.len(), 2);
    let pod_sel = pods.selector(Role::Pod).expect("pod selector");
    assert_eq!(pod_sel.label, "app=web,tier!=db");
    assert_eq!(pod_sel.field, "spec.nodeName=n1");
    assert_eq!(
        pod_sel.label_selector,
        LabelSelector::parse("app=web,tier!=db").expect("parses")
    );
    assert_eq!(pods.selector(Role::Node).expect("node").field, "");
    assert!(pods.selector(Role::Service).is_none());
    assert_eq!(
        pods.attach_metadata,
        AttachMetadata {
            node: true,
            namespace: true
        }
    );
    assert_eq!(
        pods.owner_metadata,
        OwnerMetadata {
            deployment: true,
            job: false,
            cronjob: false
        }
    );
    let slices = &cfg.jobs[1];
    assert_eq!(slices.role, Role::EndpointSlice);
    assert_eq!(slices.namespaces, Namespaces::default());
    assert!(slices.selectors.is_empty());
    assert_eq!(slices.attach_metadata, AttachMetadata::default());
    assert!(slices.ignored.is_empty());
    // Without relabel_configs and keep_meta_labels: none, and __meta_ labels dropped.
    assert!(slices.relabel_configs.is_empty());
    assert!(!slices.keep_meta_labels);
    assert!(pods.relabel_configs.is_empty());
}

#[test]
fn relabel_configs_and_keep_meta_labels_are_read() {
    let cfg = parse_config(
        r#"
jobs:
  - name: pods
    role: pod
    keep_meta_labels: true
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
        regex: "true"
        action: keep
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - regex: __meta_kubernetes_pod_label_(.+)
        action: LabelMap
  - name: nodes
    role: node
    relabel_configs:
    keep_meta_labels:
"#,
    )
    .expect("valid");
    let pods = &cfg.jobs[0];
    assert!(pods.keep_meta_labels);
    let rules = &pods.relabel_configs;
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[0].action, crate::relabel::Action::Keep);
    assert_eq!(rules[0].regex.as_str(), "true");
    assert_eq!(rules[1].target_label, "namespace");
    assert_eq!(rules[1].replacement, "$1");
    assert_eq!(rules[2].action, crate::relabel::Action::LabelMap);
    let nodes = &cfg.jobs[1];
    assert!(nodes.relabel_configs.is_empty());
    assert!(!nodes.keep_meta_labels);
}

#[test]
fn relabel_config_errors_name_the_job_and_the_rule() {
    let rules = |yaml: &str| {
        err(&format!(
            "jobs:\n  - name: j\n    role: pod\n    relabel_configs:\n      - target_label: ok\n{yaml}"
        ))
    };
    assert_eq!(
        rules("      - action: hashmod\n        target_label: shard\n"),
        r#"job "j": relabel_configs[1]: relabel configuration for hashmod requires non-zero modulus"#
    );
    assert_eq!(
        rules("      - action: replace\n"),
        r#"job "j": relabel_configs[1]: relabel configuration for replace action requires 'target_label' value"#
    );
    assert_eq!(
        rules("      - action: labeldrop\n        regex: x\n        separator: ','\n"),
        r#"job "j": relabel_configs[1]: labeldrop action requires only 'regex', and no other fields"#
    );
    assert_eq!(
        rules("      - action: tidy\n"),
        r#"job "j": relabel_configs[1]: unknown relabel action "tidy""#
    );
    let e = rules("      - regex: '('\n");
    assert!(
        e.starts_with(r#"job "j": relabel_configs[1]: 'regex' "(" does not compile"#),
        "{e}"
    );
    let e = rules("      - sources: [a]\n");
    assert!(
        e.starts_with(r#"job "j": relabel_configs[1]: unknown field `sources`"#),
        "{e}"
    );
    let e = err("jobs:\n  - name: j\n    role: pod\n    relabel_configs: {a: 1}\n");
    assert!(e.starts_with(r#"job "j": relabel_configs: "#), "{e}");
    let e = err("jobs:\n  - name: j\n    role: pod\n    keep_meta_labels: maybe\n");
    assert!(e.starts_with(r#"job "j": keep_meta_labels: "#), "{e}");
}

#[test]
fn client_settings_are_accepted_and_reported_as_ignored() {
    let cfg = parse_config(
        r#"
jobs:
  - name: nodes
    role: node
    api_server: https://10.0.0.1:6443
    tls_config:
      insecure_skip_verify: true
    bearer_token_file: /var/run/token
    follow_redirects: false
    enable_http2: true
    proxy_url: http://proxy:3128
"#,
    )
    .expect("valid");
    assert_eq!(
        cfg.jobs[0].ignored,
        vec![
            "api_server",
            "bearer_token_file",
            "tls_config",
            "proxy_url",
            "follow_redirects",
            "enable_http2"
        ]
    );
    let all: Vec<_> = cfg.ignored_fields().collect();
    assert_eq!(all[0], ("nodes", "api_server"));
    assert_eq!(all.len(), 6);
}

#[test]
fn every_role_name_parses() {
    for role in Role::ALL {
        let cfg = parse_config(&format!(
            "jobs:\n  - name: j\n    role: {}\n",
            role.as_str()
        ))
        .expect("valid");
        assert_eq!(cfg.jobs[0].role, role);
    }
}

#[test]
fn an_empty_file_or_job_list_has_no_jobs() {
    assert!(parse_config("jobs: []").expect("valid").jobs.is_empty());
    assert!(parse_config("{}").expect("valid").jobs.is_empty());
}

#[test]
fn unknown_fields_are_errors_that_name_the_job_and_field() {
    let e = err("jobs:\n  - name: pods\n    role: pod\n    colour: blue\n");
    assert_eq!(e, r#"job "pods": unknown field "colour""#);
    let e = err("jobs:\n  - name: pods\n    role: pod\n    attach_metadata: {nod: true}\n");
    assert!(
        e.starts_with(r#"job "pods": attach_metadata: unknown field `nod`"#),
        "{e}"
    );
    let e = err("jobs: []\nextra: 1\n");
    assert!(e.contains("extra"), "{e}");
}

#[test]
fn the_role_is_required_and_must_be_a_role() {
    assert_eq!(
        err("jobs:\n  - name: pods\n"),
        r#"job "pods": role is missing (one of: pod, service, endpoints, endpointslice, node, ingress)"#
    );
    assert_eq!(
        err("jobs:\n  - name: pods\n    role: pods\n"),
        r#"job "pods": role "pods" is not a role (one of: pod, service, endpoints, endpointslice, node, ingress)"#
    );
}

#[test]
fn a_selector_role_must_be_a_role() {
    assert_eq!(
        err("jobs:\n  - name: pods\n    role: pod\n    selectors:\n      - role: foo\n"),
        r#"job "pods": selectors[0].role "foo" is not a role"#
    );
    assert_eq!(
        err("jobs:\n  - name: pods\n    role: pod\n    selectors:\n      - label: a=b\n"),
        r#"job "pods": selectors[0].role is missing"#
    );
}

#[test]
fn a_selector_role_must_be_one_the_job_role_watches() {
    assert_eq!(
        err("jobs:\n  - name: pods\n    role: pod\n    selectors:\n      - role: service\n"),
        r#"job "pods": selectors[0].role "service" is not watched by role pod, which supports only pod, node selectors"#
    );
    let e = err("jobs:\n  - name: eps\n    role: endpoints\n    selectors:\n      - role: node\n");
    assert!(e.contains("supports only pod, service, endpoints"), "{e}");
    let e = err(
        "jobs:\n  - name: s\n    role: endpointslice\n    selectors:\n      - role: endpoints\n",
    );
    assert!(
        e.contains("supports only pod, service, endpointslice"),
        "{e}"
    );
    for (role, sel) in [
        ("service", "service"),
        ("node", "node"),
        ("ingress", "ingress"),
        ("endpoints", "pod"),
        ("endpointslice", "service"),
    ] {
        parse_config(&format!(
            "jobs:\n  - name: j\n    role: {role}\n    selectors:\n      - role: {sel}\n"
        ))
        .expect("allowed selector");
    }
    assert!(
        err("jobs:\n  - name: n\n    role: node\n    selectors:\n      - role: pod\n")
            .contains("only node")
    );
    assert!(
        err("jobs:\n  - name: i\n    role: ingress\n    selectors:\n      - role: service\n")
            .contains("only ingress")
    );
    assert!(
        err("jobs:\n  - name: s\n    role: service\n    selectors:\n      - role: pod\n")
            .contains("only service")
    );
}

#[test]
fn a_selector_role_may_appear_once() {
    assert_eq!(
        err(
            "jobs:\n  - name: pods\n    role: pod\n    selectors:\n      - role: pod\n      - role: pod\n"
        ),
        r#"job "pods": selectors[1].role "pod" is duplicated"#
    );
}

#[test]
fn selector_syntax_is_validated_with_the_field_named() {
    let e = err(
        "jobs:\n  - name: pods\n    role: pod\n    selectors:\n      - role: pod\n        label: \"app in (\"\n",
    );
    assert!(
        e.starts_with(r#"job "pods": selectors[0].label "app in (": "#),
        "{e}"
    );
    let e = err(
        "jobs:\n  - name: pods\n    role: pod\n    selectors:\n      - role: pod\n        field: \"nonsense\"\n",
    );
    assert!(
        e.starts_with(r#"job "pods": selectors[0].field "nonsense": "#),
        "{e}"
    );
}

#[test]
fn job_names_are_required_and_unique() {
    assert_eq!(err("jobs:\n  - role: pod\n"), "jobs[0]: name is missing");
    assert_eq!(
        err("jobs:\n  - name: \"\"\n    role: pod\n"),
        "jobs[0]: name is empty"
    );
    assert_eq!(
        err("jobs:\n  - name: [x]\n    role: pod\n"),
        "jobs[0]: name must be a string"
    );
    assert_eq!(err("jobs:\n  - pod\n"), "jobs[0]: a job must be a mapping");
    assert_eq!(
        err("jobs:\n  - name: a\n    role: pod\n  - name: a\n    role: node\n"),
        r#"job "a" is defined twice"#
    );
}

#[test]
fn section_type_errors_name_the_section() {
    let e = err(
        "jobs:\n  - name: j\n    role: pod\n    selectors:\n      - role: pod\n        labels: x\n",
    );
    assert!(
        e.starts_with(r#"job "j": selectors[0]: unknown field `labels`"#),
        "{e}"
    );
    let e = err("jobs:\n  - name: j\n    role: [pod]\n");
    assert!(e.starts_with(r#"job "j": role: "#), "{e}");
    let e = err("jobs:\n  - name: j\n    role: pod\n    attach_metadata:\n      node: maybe\n");
    assert!(e.starts_with(r#"job "j": attach_metadata: "#), "{e}");
}

#[test]
fn null_sections_read_as_defaults() {
    let cfg = parse_config("jobs:\n  - name: j\n    role: pod\n    namespaces:\n    attach_metadata:\n    selectors:\n")
        .expect("valid");
    assert_eq!(cfg.jobs[0].namespaces, Namespaces::default());
    assert!(cfg.jobs[0].selectors.is_empty());
}

#[test]
fn malformed_yaml_is_reported() {
    assert!(err("jobs: [").starts_with("invalid job file: "));
}

#[test]
fn allowed_selector_roles_match_prometheus() {
    assert_eq!(allowed_selector_roles(Role::Pod), &[Role::Pod, Role::Node]);
    assert_eq!(
        allowed_selector_roles(Role::Endpoints),
        &[Role::Pod, Role::Service, Role::Endpoints]
    );
}

/// One job in the shape of a prometheus/prometheus `config/testdata/kubernetes_*.yml` entry.
fn job(role: &str, selectors: &[(&str, &str, &str)]) -> String {
    let mut y = format!("jobs:\n  - name: prometheus\n    role: {role}\n    selectors:\n");
    for (r, label, field) in selectors {
        y.push_str(&format!(
            "      - role: \"{r}\"\n        label: \"{label}\"\n        field: \"{field}\"\n"
        ));
    }
    y
}

#[test]
fn prometheus_config_testdata_verdicts_are_reproduced() {
    const RUNNING: &str = "metadata.status=Running";
    // config/testdata/kubernetes_selectors_*.good.yml
    for (role, sels) in [
        (
            "endpoints",
            vec![
                ("pod", "foo=bar", RUNNING),
                ("service", "foo=bar", RUNNING),
                ("endpoints", "foo=bar", RUNNING),
            ],
        ),
        ("node", vec![("node", "foo=bar", RUNNING)]),
        ("ingress", vec![("ingress", "foo=bar", RUNNING)]),
        ("pod", vec![("pod", "foo=bar", RUNNING)]),
        ("pod", vec![("pod", "foo in (bar,baz)", RUNNING)]),
        ("pod", vec![("node", "foo=bar", RUNNING)]),
        ("service", vec![("service", "foo=bar", RUNNING)]),
    ] {
        parse_config(&job(role, &sels)).unwrap_or_else(|e| panic!("{role} {sels:?}: {e}"));
    }
    // config/testdata/kubernetes_selectors_*.bad.yml with the substring config_test.go expects.
    for (role, sels, want) in [
        (
            "endpoints",
            vec![
                ("node", "foo=bar", RUNNING),
                ("service", "foo=bar", RUNNING),
            ],
            "endpoints, which supports only pod, service, endpoints selectors",
        ),
        (
            "ingress",
            vec![("node", "foo=bar", RUNNING)],
            "ingress, which supports only ingress selectors",
        ),
        (
            "node",
            vec![("pod", "foo=bar", RUNNING)],
            "node, which supports only node selectors",
        ),
        (
            "pod",
            vec![
                ("node", "foo=bar", RUNNING),
                ("service", "baz=que", RUNNING),
            ],
            "pod, which supports only pod, node selectors",
        ),
        (
            "service",
            vec![("pod", "foo=bar", RUNNING)],
            "service, which supports only service selectors",
        ),
        (
            "endpoints",
            vec![("pod", "foo=bar", RUNNING), ("pod", "foo=bar", RUNNING)],
            r#"selectors[1].role "pod" is duplicated"#,
        ),
        (
            "endpoints",
            vec![("pod", "", "metadata.status-Running")],
            r#"selectors[0].field "metadata.status-Running""#,
        ),
    ] {
        let e = err(&job(role, &sels));
        assert!(e.contains(want), "{role} {sels:?}: {e}");
    }
    // kubernetes_role.bad.yml and kubernetes_namespace_discovery.bad.yml.
    assert!(
        err("jobs:\n  - name: j\n    api_server: kubernetes:443\n    role: vacation\n")
            .contains("role \"vacation\"")
    );
    let e = err("jobs:\n  - name: j\n    role: endpoints\n    namespaces:\n      foo: bar\n");
    assert!(
        e.starts_with(r#"job "j": namespaces: unknown field `foo`"#),
        "{e}"
    );
}

#[test]
fn the_kube_api_section_takes_builtin_and_custom_kinds_and_rejects_unknown_fields() {
    let cfg = parse_config(
        "jobs: []\nkube_api:\n  listen: 127.0.0.1:6443\n  kinds: [pods, {group: example.com, version: v1, resource: widgets}]\n  admission_rate: 50\n",
    )
    .expect("valid");
    assert_eq!(cfg.kube_api.listen.as_deref(), Some("127.0.0.1:6443"));
    assert_eq!(
        cfg.kube_api.kinds,
        vec![
            KindRef::Builtin("pods".into()),
            KindRef::Custom {
                group: "example.com".into(),
                version: "v1".into(),
                resource: "widgets".into()
            }
        ]
    );
    assert_eq!(cfg.kube_api.admission_rate, Some(50.0));
    let err = parse_config("jobs: []\nkube_api:\n  lisen: x\n").expect_err("typo");
    assert!(
        err.to_string().contains("kube_api") && err.to_string().contains("lisen"),
        "{err}"
    );
    assert_eq!(
        parse_config("jobs: []\n").expect("valid").kube_api,
        KubeApiConfig::default()
    );
}

#[test]
fn the_server_section_takes_tls_tokens_and_a_client_ca_and_rejects_unknown_fields() {
    let cfg = parse_config(
        "jobs: []\nserver:\n  listen: 0.0.0.0:9095\n  token_file: /t\n  tls_cert_file: /c\n  tls_key_file: /k\n  client_ca_file: /ca\n",
    )
    .expect("valid");
    assert_eq!(cfg.server.listen.as_deref(), Some("0.0.0.0:9095"));
    assert_eq!(cfg.server.client_ca_file.as_deref(), Some("/ca"));
    assert!(!cfg.server.insecure);
    let e = parse_config("jobs: []\nserver:\n  tokens: /t\n").expect_err("unknown key");
    assert!(
        e.to_string().contains("server") && e.to_string().contains("tokens"),
        "{e}"
    );
}

#[test]
fn the_monitors_section_defaults_to_every_monitor_and_names_what_is_wrong() {
    let cfg = parse_config("jobs: []\nmonitors: {}\n").expect("valid");
    let m = cfg.monitors.expect("monitors on");
    assert!(m.service_monitors && m.pod_monitors);
    assert_eq!(m.service_role(), Role::Endpoints);
    assert_eq!(m.prometheus_object(), None);
    assert!(!m.istio, "monitor jobs are not Istio-aware unless asked");
    let istio = parse_config("jobs: []\nmonitors: {istio: true}\n")
        .expect("valid")
        .monitors
        .expect("on");
    assert!(istio.istio);
    assert!(
        parse_config("jobs: []\n")
            .expect("valid")
            .monitors
            .is_none()
    );
    let p = parse_config(
        "jobs: []\nmonitors: {prometheus: monitoring/k8s, service_discovery_role: EndpointSlice}\n",
    )
    .expect("valid")
    .monitors
    .expect("on");
    assert_eq!(p.prometheus_object(), Some(("monitoring", "k8s")));
    assert_eq!(p.service_role(), Role::EndpointSlice);
    assert_eq!(p.service_roles(), vec![Role::EndpointSlice]);
    let both = parse_config(
        "jobs: []\nmonitors: {service_discovery_roles: [EndpointSlice, Endpoints, Endpoints]}\n",
    )
    .expect("valid")
    .monitors
    .expect("on");
    assert_eq!(both.service_role(), Role::Endpoints);
    let classes = parse_config(
        "jobs: []\nmonitors: {scrape_classes: [{name: mtls, default: true, tlsConfig: {caFile: /c, insecureSkipVerify: true}}]}\n",
    )
    .expect("valid")
    .monitors
    .expect("on")
    .scrape_classes();
    assert_eq!(classes.len(), 1);
    assert_eq!(classes[0].name, "mtls");
    assert_eq!(
        classes[0].tls_config.as_ref().map(|t| t.ca_file.as_str()),
        Some("/c")
    );
    assert_eq!(
        both.service_roles(),
        vec![Role::EndpointSlice, Role::Endpoints]
    );
    for (yaml, needle) in [
        (
            "monitors: {service_discovery_roles: [Endpoints, Pod]}",
            "monitors.service_discovery_roles \"Pod\"",
        ),
        (
            "monitors: {service_discovery_roles: [EndpointSlice]}",
            "lacks the default role",
        ),
        (
            "monitors: {scrape_classes: [{name: a, relabelings: [{regex: '(', targetLabel: x}]}]}",
            "monitors.scrape_classes: \"a\": relabelings[0]",
        ),
        (
            "monitors: {prometheus: monitoring/k8s, scrape_classes: [{name: a}]}",
            "monitors.scrape_classes unset",
        ),
        ("monitors: {prometheus: k8s}", "must be <namespace>/<name>"),
        (
            "monitors: {prometheus: monitoring/k8s, selector: a=b}",
            "leave monitors.namespaces",
        ),
        ("monitors: {selector: 'a in (b'}", "monitors.selector"),
        (
            "monitors: {service_discovery_role: Pods}",
            "Endpoints or EndpointSlice",
        ),
        ("monitors: {podmonitors: true}", "podmonitors"),
    ] {
        let e = parse_config(&format!("jobs: []\n{yaml}\n")).expect_err(yaml);
        assert!(e.to_string().contains(needle), "{yaml}: {e}");
    }
}

#[test]
fn istio_jobs_need_targets_picked_by_relabeling_on_pod_roles_and_the_section_has_defaults() {
    let cfg = parse_config(
        "istio: {certs_dir: /certs}\njobs:\n- {name: p, role: pod, annotations: prometheus.io, istio: separate}\n",
    )
    .expect("valid");
    assert_eq!(cfg.jobs[0].istio, Some(crate::istio::IstioMode::Separate));
    assert_eq!(cfg.istio.certs_dir, "/certs");
    assert_eq!(cfg.istio.root_namespace, "istio-system");
    assert_eq!(
        parse_config("jobs: []\n").expect("valid").istio,
        IstioConfig::default()
    );
    let err = |yaml: &str| parse_config(yaml).expect_err("refused").to_string();
    let e = err("jobs:\n- {name: p, role: pod, istio: merged}\n");
    assert!(
        e.contains("job \"p\"") && e.contains("istio") && e.contains("relabel"),
        "{e}"
    );
    let e = err(
        "jobs:\n- {name: n, role: node, relabel_configs: [{target_label: a, replacement: b}], istio: merged}\n",
    );
    assert!(e.contains("istio") && e.contains("node"), "{e}");
    let e = err("jobs:\n- {name: p, role: pod, annotations: prometheus.io, istio: both}\n");
    assert!(e.contains("istio") && e.contains("both"), "{e}");
    let e = err("istio: {root: x}\njobs: []\n");
    assert!(e.contains("istio") && e.contains("root"), "{e}");
    let e = err(
        "jobs:\n- {name: p, role: pod, annotations: prometheus.io, istio: merged}\n\
         - {name: p/istio-mtls, role: pod}\n",
    );
    assert!(e.contains("p/istio-mtls") && e.contains("companion"), "{e}");
}
