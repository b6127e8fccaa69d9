//! Ports of prometheus/prometheus `discovery/kubernetes/service_test.go`.

use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{group, source};
use crate::target::{AttachMetadata, NoLookup, TargetGroup};
use crate::testing::{MapLookup, ls, map, mk_meta, mk_namespace, s};

fn port(name: &str, protocol: &str, number: i32) -> ServicePort {
    ServicePort {
        name: s(name),
        protocol: s(protocol),
        port: number,
        ..ServicePort::default()
    }
}

/// `makeMultiPortService`.
fn mk_multi_port_service() -> Service {
    Service {
        metadata: ObjectMeta {
            labels: map(&[("test-label", "testvalue")]),
            annotations: map(&[("test-annotation", "testannotationvalue")]),
            ..mk_meta("default", "testservice")
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![
                port("testport0", "TCP", 30900),
                port("testport1", "UDP", 30901),
            ]),
            type_: s("ClusterIP"),
            cluster_ip: s("10.0.0.1"),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// `makeService`.
fn mk_service(namespace: &str) -> Service {
    Service {
        metadata: mk_meta(namespace, "testservice"),
        spec: Some(ServiceSpec {
            ports: Some(vec![port("testport", "TCP", 30900)]),
            type_: s("ClusterIP"),
            cluster_ip: s("10.0.0.1"),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// `makeExternalService`.
fn mk_external_service() -> Service {
    Service {
        metadata: mk_meta("default", "testservice-external"),
        spec: Some(ServiceSpec {
            ports: Some(vec![port("testport", "TCP", 31900)]),
            type_: s("ExternalName"),
            external_name: s("FooExternalName"),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// `makeLoadBalancerService`.
fn mk_load_balancer_service() -> Service {
    Service {
        metadata: mk_meta("default", "testservice-loadbalancer"),
        spec: Some(ServiceSpec {
            ports: Some(vec![port("testport", "TCP", 31900)]),
            type_: s("LoadBalancer"),
            load_balancer_ip: s("127.0.0.1"),
            cluster_ip: s("10.0.0.1"),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// `makeLoadBalancerServiceFromIngress`.
fn mk_load_balancer_service_from_ingress() -> Service {
    Service {
        metadata: mk_meta("default", "testservice-lb-ingress"),
        spec: Some(ServiceSpec {
            ports: Some(vec![port("testport", "TCP", 31900)]),
            type_: s("LoadBalancer"),
            cluster_ip: s("10.0.0.1"),
            ..ServiceSpec::default()
        }),
        status: Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![
                    LoadBalancerIngress {
                        ip: s("192.168.1.15"),
                        ..LoadBalancerIngress::default()
                    },
                    LoadBalancerIngress {
                        ip: s("2001:db8::1"),
                        ..LoadBalancerIngress::default()
                    },
                ]),
            }),
            ..ServiceStatus::default()
        }),
    }
}

fn expected_service_group(ns: &str) -> TargetGroup {
    TargetGroup {
        source: format!("svc/{ns}/testservice"),
        targets: vec![ls! {
            "__meta_kubernetes_service_port_protocol": "TCP",
            "__address__": format!("testservice.{ns}.svc:30900"),
            "__meta_kubernetes_service_type": "ClusterIP",
            "__meta_kubernetes_service_cluster_ip": "10.0.0.1",
            "__meta_kubernetes_service_port_name": "testport",
            "__meta_kubernetes_service_port_number": "30900",
        }],
        labels: ls! {
            "__meta_kubernetes_service_name": "testservice",
            "__meta_kubernetes_namespace": ns,
        },
    }
}

fn build(svc: &Service) -> TargetGroup {
    group(svc, &NoLookup, AttachMetadata::default())
}

#[test]
fn cluster_ip_service_yields_one_target_per_port_on_its_dns_name() {
    assert_eq!(
        build(&mk_service("default")),
        expected_service_group("default")
    );
}

#[test]
fn external_name_service_has_the_external_name_instead_of_a_cluster_ip() {
    assert_eq!(
        build(&mk_external_service()),
        TargetGroup {
            source: "svc/default/testservice-external".into(),
            targets: vec![ls! {
                "__meta_kubernetes_service_port_protocol": "TCP",
                "__address__": "testservice-external.default.svc:31900",
                "__meta_kubernetes_service_type": "ExternalName",
                "__meta_kubernetes_service_port_name": "testport",
                "__meta_kubernetes_service_port_number": "31900",
                "__meta_kubernetes_service_external_name": "FooExternalName",
            }],
            labels: ls! {
                "__meta_kubernetes_service_name": "testservice-external",
                "__meta_kubernetes_namespace": "default",
            },
        }
    );
}

#[test]
fn load_balancer_service_falls_back_to_the_spec_load_balancer_ip() {
    assert_eq!(
        build(&mk_load_balancer_service()),
        TargetGroup {
            source: "svc/default/testservice-loadbalancer".into(),
            targets: vec![ls! {
                "__meta_kubernetes_service_port_protocol": "TCP",
                "__address__": "testservice-loadbalancer.default.svc:31900",
                "__meta_kubernetes_service_type": "LoadBalancer",
                "__meta_kubernetes_service_port_name": "testport",
                "__meta_kubernetes_service_port_number": "31900",
                "__meta_kubernetes_service_cluster_ip": "10.0.0.1",
                "__meta_kubernetes_service_loadbalancer_ip": "127.0.0.1",
            }],
            labels: ls! {
                "__meta_kubernetes_service_name": "testservice-loadbalancer",
                "__meta_kubernetes_namespace": "default",
            },
        }
    );
}

#[test]
fn load_balancer_service_joins_its_status_ingress_ips_with_commas() {
    assert_eq!(
        build(&mk_load_balancer_service_from_ingress()),
        TargetGroup {
            source: "svc/default/testservice-lb-ingress".into(),
            targets: vec![ls! {
                "__meta_kubernetes_service_port_protocol": "TCP",
                "__address__": "testservice-lb-ingress.default.svc:31900",
                "__meta_kubernetes_service_type": "LoadBalancer",
                "__meta_kubernetes_service_port_name": "testport",
                "__meta_kubernetes_service_port_number": "31900",
                "__meta_kubernetes_service_cluster_ip": "10.0.0.1",
                "__meta_kubernetes_service_loadbalancer_ip": "192.168.1.15,2001:db8::1",
            }],
            labels: ls! {
                "__meta_kubernetes_service_name": "testservice-lb-ingress",
                "__meta_kubernetes_namespace": "default",
            },
        }
    );
}

#[test]
fn load_balancer_ingress_entries_without_ip_are_skipped() {
    let mut svc = mk_load_balancer_service();
    svc.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                hostname: s("lb.example.com"),
                ..LoadBalancerIngress::default()
            }]),
        }),
        ..ServiceStatus::default()
    });
    // Only a hostname: falls back to spec.loadBalancerIP.
    assert_eq!(
        build(&svc).targets[0]["__meta_kubernetes_service_loadbalancer_ip"],
        "127.0.0.1"
    );
}

#[test]
fn a_deleted_service_is_announced_by_an_empty_group_with_its_source() {
    assert_eq!(source("default", "testservice"), "svc/default/testservice");
    assert_eq!(
        source("default", "testservice"),
        expected_service_group("default").source
    );
}

#[test]
fn an_updated_service_yields_one_target_per_port_and_its_labels_and_annotations() {
    assert_eq!(
        build(&mk_service("default")),
        expected_service_group("default")
    );
    assert_eq!(
        build(&mk_multi_port_service()),
        TargetGroup {
            source: "svc/default/testservice".into(),
            targets: vec![
                ls! {
                    "__meta_kubernetes_service_port_protocol": "TCP",
                    "__address__": "testservice.default.svc:30900",
                    "__meta_kubernetes_service_type": "ClusterIP",
                    "__meta_kubernetes_service_cluster_ip": "10.0.0.1",
                    "__meta_kubernetes_service_port_name": "testport0",
                    "__meta_kubernetes_service_port_number": "30900",
                },
                ls! {
                    "__meta_kubernetes_service_port_protocol": "UDP",
                    "__address__": "testservice.default.svc:30901",
                    "__meta_kubernetes_service_type": "ClusterIP",
                    "__meta_kubernetes_service_cluster_ip": "10.0.0.1",
                    "__meta_kubernetes_service_port_name": "testport1",
                    "__meta_kubernetes_service_port_number": "30901",
                },
            ],
            labels: ls! {
                "__meta_kubernetes_service_name": "testservice",
                "__meta_kubernetes_namespace": "default",
                "__meta_kubernetes_service_label_test_label": "testvalue",
                "__meta_kubernetes_service_labelpresent_test_label": "true",
                "__meta_kubernetes_service_annotation_test_annotation": "testannotationvalue",
                "__meta_kubernetes_service_annotationpresent_test_annotation": "true",
            },
        }
    );
}

#[test]
fn services_in_several_namespaces_get_their_own_dns_name_and_namespace() {
    // Go: TestServiceDiscoveryNamespaces, ...OwnNamespace and ...AllNamespaces.
    for ns in ["ns1", "ns2", "own-ns", "non-own-ns"] {
        assert_eq!(build(&mk_service(ns)), expected_service_group(ns));
    }
}

#[test]
fn namespace_metadata_adds_the_namespace_labels_and_annotations() {
    let ns = "test-ns";
    let lookup = MapLookup::default().namespace(mk_namespace(
        ns,
        &[("environment", "production"), ("team", "backend")],
        &[("owner", "platform"), ("version", "v1.2.3")],
    ));
    let attach = AttachMetadata {
        node: false,
        namespace: true,
    };
    let mut expected = expected_service_group(ns);
    expected.labels.extend(ls! {
        "__meta_kubernetes_namespace_annotation_owner": "platform",
        "__meta_kubernetes_namespace_annotationpresent_owner": "true",
        "__meta_kubernetes_namespace_annotation_version": "v1.2.3",
        "__meta_kubernetes_namespace_annotationpresent_version": "true",
        "__meta_kubernetes_namespace_label_environment": "production",
        "__meta_kubernetes_namespace_labelpresent_environment": "true",
        "__meta_kubernetes_namespace_label_team": "backend",
        "__meta_kubernetes_namespace_labelpresent_team": "true",
    });
    assert_eq!(group(&mk_service(ns), &lookup, attach), expected);
}

#[test]
fn namespace_metadata_follows_an_updated_namespace() {
    let ns = "test-ns";
    let attach = AttachMetadata {
        node: false,
        namespace: true,
    };
    let updated = MapLookup::default().namespace(mk_namespace(
        ns,
        &[
            ("environment", "staging"),
            ("team", "frontend"),
            ("region", "us-west"),
        ],
        &[
            ("owner", "sre"),
            ("version", "v2.1.0"),
            ("cost-center", "engineering"),
        ],
    ));
    let mut expected = expected_service_group(ns);
    expected.labels.extend(ls! {
        "__meta_kubernetes_namespace_annotation_owner": "sre",
        "__meta_kubernetes_namespace_annotationpresent_owner": "true",
        "__meta_kubernetes_namespace_annotation_version": "v2.1.0",
        "__meta_kubernetes_namespace_annotationpresent_version": "true",
        "__meta_kubernetes_namespace_annotation_cost_center": "engineering",
        "__meta_kubernetes_namespace_annotationpresent_cost_center": "true",
        "__meta_kubernetes_namespace_label_environment": "staging",
        "__meta_kubernetes_namespace_labelpresent_environment": "true",
        "__meta_kubernetes_namespace_label_team": "frontend",
        "__meta_kubernetes_namespace_labelpresent_team": "true",
        "__meta_kubernetes_namespace_label_region": "us-west",
        "__meta_kubernetes_namespace_labelpresent_region": "true",
    });
    assert_eq!(group(&mk_service(ns), &updated, attach), expected);
}

#[test]
fn a_service_without_ports_or_spec_has_labels_but_no_targets() {
    let mut svc = mk_service("default");
    svc.spec.as_mut().expect("spec").ports = None;
    let g = build(&svc);
    assert!(g.targets.is_empty());
    assert_eq!(g.labels, expected_service_group("default").labels);
    svc.spec = None;
    assert_eq!(build(&svc).labels, expected_service_group("default").labels);
}

#[test]
fn a_headless_service_reports_cluster_ip_none() {
    let mut svc = mk_service("default");
    svc.spec.as_mut().expect("spec").cluster_ip = s("None");
    assert_eq!(
        build(&svc).targets[0]["__meta_kubernetes_service_cluster_ip"],
        "None"
    );
}
