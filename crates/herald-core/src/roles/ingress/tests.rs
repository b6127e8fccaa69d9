//! Ports of prometheus/prometheus `discovery/kubernetes/ingress_test.go`.

use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressRule, IngressSpec, IngressTLS,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{group, matches_hostname_pattern, source};
use crate::target::{AttachMetadata, NoLookup, TargetGroup};
use crate::testing::{MapLookup, ls, map, mk_meta, mk_namespace, s};

#[derive(Clone, Copy)]
enum Tls {
    No,
    Yes,
    Mixed,
    Wildcard,
}

fn path(p: Option<&str>) -> HTTPIngressPath {
    HTTPIngressPath {
        path: p.map(str::to_owned),
        ..HTTPIngressPath::default()
    }
}

/// `makeIngress`.
fn mk_ingress(namespace: &str, tls: Tls) -> Ingress {
    let tls_hosts: Option<Vec<&str>> = match tls {
        Tls::No => None,
        Tls::Yes => Some(vec!["example.com", "test.example.com"]),
        Tls::Mixed => Some(vec!["example.com"]),
        Tls::Wildcard => Some(vec!["*.example.com"]),
    };
    Ingress {
        metadata: ObjectMeta {
            labels: map(&[("test/label", "testvalue")]),
            annotations: map(&[("test/annotation", "testannotationvalue")]),
            ..mk_meta(namespace, "testingress")
        },
        spec: Some(IngressSpec {
            ingress_class_name: s("testclass"),
            tls: tls_hosts.map(|hosts| {
                vec![IngressTLS {
                    hosts: Some(hosts.into_iter().map(str::to_owned).collect()),
                    ..IngressTLS::default()
                }]
            }),
            rules: Some(vec![
                IngressRule {
                    host: s("example.com"),
                    http: Some(HTTPIngressRuleValue {
                        paths: vec![path(Some("/")), path(Some("/foo"))],
                    }),
                },
                // No backend config, ignored.
                IngressRule {
                    host: s("nobackend.example.com"),
                    http: Some(HTTPIngressRuleValue { paths: vec![] }),
                },
                IngressRule {
                    host: s("test.example.com"),
                    http: Some(HTTPIngressRuleValue {
                        paths: vec![path(None)],
                    }),
                },
            ]),
            ..IngressSpec::default()
        }),
        status: None,
    }
}

/// `expectedTargetGroups`.
fn expected_group(ns: &str, tls: Tls) -> TargetGroup {
    let (scheme1, scheme2) = match tls {
        Tls::No => ("http", "http"),
        Tls::Yes => ("https", "https"),
        Tls::Mixed => ("https", "http"),
        Tls::Wildcard => ("http", "https"),
    };
    TargetGroup {
        source: format!("ingress/{ns}/testingress"),
        targets: vec![
            ls! {
                "__meta_kubernetes_ingress_scheme": scheme1,
                "__meta_kubernetes_ingress_host": "example.com",
                "__meta_kubernetes_ingress_path": "/",
                "__address__": "example.com",
            },
            ls! {
                "__meta_kubernetes_ingress_scheme": scheme1,
                "__meta_kubernetes_ingress_host": "example.com",
                "__meta_kubernetes_ingress_path": "/foo",
                "__address__": "example.com",
            },
            ls! {
                "__meta_kubernetes_ingress_scheme": scheme2,
                "__meta_kubernetes_ingress_host": "test.example.com",
                "__address__": "test.example.com",
                "__meta_kubernetes_ingress_path": "/",
            },
        ],
        labels: ls! {
            "__meta_kubernetes_ingress_name": "testingress",
            "__meta_kubernetes_namespace": ns,
            "__meta_kubernetes_ingress_label_test_label": "testvalue",
            "__meta_kubernetes_ingress_labelpresent_test_label": "true",
            "__meta_kubernetes_ingress_annotation_test_annotation": "testannotationvalue",
            "__meta_kubernetes_ingress_annotationpresent_test_annotation": "true",
            "__meta_kubernetes_ingress_class_name": "testclass",
        },
    }
}

fn build(ing: &Ingress) -> TargetGroup {
    group(ing, &NoLookup, AttachMetadata::default())
}

#[test]
fn ingress_without_tls_yields_http_targets_per_rule_path() {
    assert_eq!(
        build(&mk_ingress("default", Tls::No)),
        expected_group("default", Tls::No)
    );
}

#[test]
fn ingress_with_tls_for_every_host_yields_https_targets() {
    assert_eq!(
        build(&mk_ingress("default", Tls::Yes)),
        expected_group("default", Tls::Yes)
    );
}

#[test]
fn ingress_with_tls_for_some_hosts_mixes_schemes() {
    assert_eq!(
        build(&mk_ingress("default", Tls::Mixed)),
        expected_group("default", Tls::Mixed)
    );
}

#[test]
fn a_wildcard_tls_host_covers_one_label_below_it() {
    assert_eq!(
        build(&mk_ingress("default", Tls::Wildcard)),
        expected_group("default", Tls::Wildcard)
    );
    assert!(matches_hostname_pattern(
        "*.example.com",
        "test.example.com"
    ));
    assert!(!matches_hostname_pattern("*.example.com", "example.com"));
    assert!(!matches_hostname_pattern(
        "*.example.com",
        "a.b.example.com"
    ));
    assert!(!matches_hostname_pattern(
        "x.example.com",
        "test.example.com"
    ));
    assert!(matches_hostname_pattern("", ""));
}

#[test]
fn ingresses_in_several_namespaces_get_their_own_namespace_and_source() {
    for ns in ["ns1", "ns2", "own-ns"] {
        assert_eq!(build(&mk_ingress(ns, Tls::No)), expected_group(ns, Tls::No));
    }
    assert_eq!(source("ns1", "testingress"), "ingress/ns1/testingress");
}

fn ns_labels_group(ns: &str, extra: crate::target::LabelSet) -> TargetGroup {
    let mut g = expected_group(ns, Tls::No);
    g.labels.extend(extra);
    g
}

#[test]
fn namespace_metadata_adds_the_namespace_labels_and_annotations() {
    let ns = "test-ns";
    let attach = AttachMetadata {
        node: false,
        namespace: true,
    };
    let lookup = MapLookup::default().namespace(mk_namespace(
        ns,
        &[("service", "web"), ("layer", "frontend")],
        &[("contact", "platform"), ("release", "v5.6.7")],
    ));
    assert_eq!(
        group(&mk_ingress(ns, Tls::No), &lookup, attach),
        ns_labels_group(
            ns,
            ls! {
                "__meta_kubernetes_namespace_annotation_contact": "platform",
                "__meta_kubernetes_namespace_annotationpresent_contact": "true",
                "__meta_kubernetes_namespace_annotation_release": "v5.6.7",
                "__meta_kubernetes_namespace_annotationpresent_release": "true",
                "__meta_kubernetes_namespace_label_service": "web",
                "__meta_kubernetes_namespace_labelpresent_service": "true",
                "__meta_kubernetes_namespace_label_layer": "frontend",
                "__meta_kubernetes_namespace_labelpresent_layer": "true",
            }
        )
    );
}

#[test]
fn namespace_metadata_follows_an_updated_namespace() {
    let ns = "test-ns";
    let attach = AttachMetadata {
        node: false,
        namespace: true,
    };
    let lookup = MapLookup::default().namespace(mk_namespace(
        ns,
        &[
            ("component", "cache"),
            ("layer", "backend"),
            ("region", "us-central"),
        ],
        &[
            ("contact", "sre"),
            ("release", "v6.7.8"),
            ("monitoring", "enabled"),
        ],
    ));
    assert_eq!(
        group(&mk_ingress(ns, Tls::No), &lookup, attach),
        ns_labels_group(
            ns,
            ls! {
                "__meta_kubernetes_namespace_annotation_contact": "sre",
                "__meta_kubernetes_namespace_annotationpresent_contact": "true",
                "__meta_kubernetes_namespace_annotation_release": "v6.7.8",
                "__meta_kubernetes_namespace_annotationpresent_release": "true",
                "__meta_kubernetes_namespace_annotation_monitoring": "enabled",
                "__meta_kubernetes_namespace_annotationpresent_monitoring": "true",
                "__meta_kubernetes_namespace_label_component": "cache",
                "__meta_kubernetes_namespace_labelpresent_component": "true",
                "__meta_kubernetes_namespace_label_layer": "backend",
                "__meta_kubernetes_namespace_labelpresent_layer": "true",
                "__meta_kubernetes_namespace_label_region": "us-central",
                "__meta_kubernetes_namespace_labelpresent_region": "true",
            }
        )
    );
}

#[test]
fn a_rule_without_http_counts_as_the_root_path_and_a_missing_host_is_empty() {
    let ing = Ingress {
        metadata: mk_meta("default", "bare"),
        spec: Some(IngressSpec {
            rules: Some(vec![IngressRule::default()]),
            ..IngressSpec::default()
        }),
        status: None,
    };
    let g = build(&ing);
    assert_eq!(
        g.targets,
        vec![ls! {
            "__address__": "",
            "__meta_kubernetes_ingress_scheme": "http",
            "__meta_kubernetes_ingress_host": "",
            "__meta_kubernetes_ingress_path": "/",
        }]
    );
    assert!(
        !g.labels
            .contains_key("__meta_kubernetes_ingress_class_name")
    );
}
