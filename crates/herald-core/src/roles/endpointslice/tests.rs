//! Ports of prometheus/prometheus `discovery/kubernetes/endpointslice_test.go`.

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ObjectReference, Pod, PodSpec, PodStatus, Service, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{group, source};
use crate::target::{AttachMetadata, LabelSet, NoLookup, TargetGroup};
use crate::testing::{MapLookup, ls, map, mk_meta, mk_namespace, mk_node, s};

fn conditions(
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
) -> Option<EndpointConditions> {
    Some(EndpointConditions {
        ready,
        serving,
        terminating,
    })
}

fn es_port(name: &str, port: i32) -> EndpointPort {
    EndpointPort {
        name: s(name),
        port: Some(port),
        protocol: s("TCP"),
        ..EndpointPort::default()
    }
}

fn endpoint(address: &str) -> Endpoint {
    Endpoint {
        addresses: vec![address.into()],
        ..Endpoint::default()
    }
}

fn pod_ref(ns: &str) -> Option<ObjectReference> {
    Some(ObjectReference {
        kind: s("Pod"),
        name: s("testpod"),
        namespace: s(ns),
        ..ObjectReference::default()
    })
}

/// `makeEndpointSliceV1`.
fn mk_endpoint_slice(namespace: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            labels: map(&[("kubernetes.io/service-name", "testendpoints")]),
            annotations: map(&[("test.annotation", "test")]),
            ..mk_meta(namespace, "testendpoints")
        },
        address_type: "IPv4".into(),
        ports: Some(vec![EndpointPort {
            app_protocol: s("http"),
            ..es_port("testport", 9000)
        }]),
        endpoints: vec![
            Endpoint {
                conditions: conditions(Some(true), Some(true), Some(false)),
                hostname: s("testendpoint1"),
                target_ref: Some(ObjectReference::default()),
                node_name: s("foobar"),
                deprecated_topology: map(&[("topology", "value")]),
                zone: s("us-east-1a"),
                ..endpoint("1.2.3.4")
            },
            Endpoint {
                conditions: conditions(Some(true), Some(true), Some(false)),
                zone: s("us-east-1b"),
                ..endpoint("2.3.4.5")
            },
            Endpoint {
                conditions: conditions(Some(false), Some(true), Some(true)),
                zone: s("us-east-1c"),
                ..endpoint("3.4.5.6")
            },
            Endpoint {
                conditions: conditions(Some(true), Some(true), Some(false)),
                target_ref: Some(ObjectReference {
                    kind: s("Node"),
                    name: s("barbaz"),
                    ..ObjectReference::default()
                }),
                zone: s("us-east-1a"),
                ..endpoint("4.5.6.7")
            },
        ],
    }
}

/// The targets of `makeEndpointSliceV1`, in order.
fn mk_slice_targets() -> Vec<LabelSet> {
    vec![
        ls! {
            "__address__": "1.2.3.4:9000",
            "__meta_kubernetes_endpointslice_address_target_kind": "",
            "__meta_kubernetes_endpointslice_address_target_name": "",
            "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "true",
            "__meta_kubernetes_endpointslice_endpoint_conditions_serving": "true",
            "__meta_kubernetes_endpointslice_endpoint_conditions_terminating": "false",
            "__meta_kubernetes_endpointslice_endpoint_hostname": "testendpoint1",
            "__meta_kubernetes_endpointslice_endpoint_node_name": "foobar",
            "__meta_kubernetes_endpointslice_endpoint_topology_present_topology": "true",
            "__meta_kubernetes_endpointslice_endpoint_topology_topology": "value",
            "__meta_kubernetes_endpointslice_endpoint_zone": "us-east-1a",
            "__meta_kubernetes_endpointslice_port": "9000",
            "__meta_kubernetes_endpointslice_port_app_protocol": "http",
            "__meta_kubernetes_endpointslice_port_name": "testport",
            "__meta_kubernetes_endpointslice_port_protocol": "TCP",
        },
        ls! {
            "__address__": "2.3.4.5:9000",
            "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "true",
            "__meta_kubernetes_endpointslice_endpoint_conditions_serving": "true",
            "__meta_kubernetes_endpointslice_endpoint_conditions_terminating": "false",
            "__meta_kubernetes_endpointslice_endpoint_zone": "us-east-1b",
            "__meta_kubernetes_endpointslice_port": "9000",
            "__meta_kubernetes_endpointslice_port_app_protocol": "http",
            "__meta_kubernetes_endpointslice_port_name": "testport",
            "__meta_kubernetes_endpointslice_port_protocol": "TCP",
        },
        ls! {
            "__address__": "3.4.5.6:9000",
            "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "false",
            "__meta_kubernetes_endpointslice_endpoint_conditions_serving": "true",
            "__meta_kubernetes_endpointslice_endpoint_conditions_terminating": "true",
            "__meta_kubernetes_endpointslice_endpoint_zone": "us-east-1c",
            "__meta_kubernetes_endpointslice_port": "9000",
            "__meta_kubernetes_endpointslice_port_app_protocol": "http",
            "__meta_kubernetes_endpointslice_port_name": "testport",
            "__meta_kubernetes_endpointslice_port_protocol": "TCP",
        },
        ls! {
            "__address__": "4.5.6.7:9000",
            "__meta_kubernetes_endpointslice_address_target_kind": "Node",
            "__meta_kubernetes_endpointslice_address_target_name": "barbaz",
            "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "true",
            "__meta_kubernetes_endpointslice_endpoint_conditions_serving": "true",
            "__meta_kubernetes_endpointslice_endpoint_conditions_terminating": "false",
            "__meta_kubernetes_endpointslice_endpoint_zone": "us-east-1a",
            "__meta_kubernetes_endpointslice_port": "9000",
            "__meta_kubernetes_endpointslice_port_app_protocol": "http",
            "__meta_kubernetes_endpointslice_port_name": "testport",
            "__meta_kubernetes_endpointslice_port_protocol": "TCP",
        },
    ]
}

fn mk_slice_labels(ns: &str) -> LabelSet {
    ls! {
        "__meta_kubernetes_endpointslice_address_type": "IPv4",
        "__meta_kubernetes_namespace": ns,
        "__meta_kubernetes_endpointslice_name": "testendpoints",
        "__meta_kubernetes_endpointslice_label_kubernetes_io_service_name": "testendpoints",
        "__meta_kubernetes_endpointslice_labelpresent_kubernetes_io_service_name": "true",
        "__meta_kubernetes_endpointslice_annotation_test_annotation": "test",
        "__meta_kubernetes_endpointslice_annotationpresent_test_annotation": "true",
    }
}

fn with(mut a: LabelSet, b: LabelSet) -> LabelSet {
    a.extend(b);
    a
}

fn mk_service(ns: &str, labels: &[(&str, &str)]) -> Service {
    Service {
        metadata: ObjectMeta {
            labels: map(labels),
            ..mk_meta(ns, "testendpoints")
        },
        ..Service::default()
    }
}

fn service_labels(pairs: LabelSet) -> LabelSet {
    with(
        ls! {"__meta_kubernetes_service_name": "testendpoints"},
        pairs,
    )
}

fn container(name: &str, port_name: &str, port: i32) -> Container {
    Container {
        name: name.into(),
        image: s(&format!("{name}:latest")),
        ports: Some(vec![ContainerPort {
            name: s(port_name),
            container_port: port,
            protocol: s("TCP"),
            ..ContainerPort::default()
        }]),
        ..Container::default()
    }
}

fn mk_pod(ns: &str, containers: Vec<Container>, pod_ip: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            uid: s("deadbeef"),
            ..mk_meta(ns, "testpod")
        },
        spec: Some(PodSpec {
            node_name: s("testnode"),
            containers,
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            host_ip: s("2.3.4.5"),
            pod_ip: s(pod_ip),
            ..PodStatus::default()
        }),
    }
}

fn pod_labels(pod_ip: &str) -> LabelSet {
    ls! {
        "__meta_kubernetes_pod_name": "testpod",
        "__meta_kubernetes_pod_ip": pod_ip,
        "__meta_kubernetes_pod_ready": "unknown",
        "__meta_kubernetes_pod_phase": "",
        "__meta_kubernetes_pod_node_name": "testnode",
        "__meta_kubernetes_pod_host_ip": "2.3.4.5",
        "__meta_kubernetes_pod_uid": "deadbeef",
    }
}

fn pod_backed_slice(
    ns: &str,
    name: &str,
    ports: Vec<EndpointPort>,
    ready: Option<bool>,
) -> EndpointSlice {
    EndpointSlice {
        metadata: mk_meta(ns, name),
        address_type: "IPv4".into(),
        ports: Some(ports),
        endpoints: vec![Endpoint {
            target_ref: pod_ref(ns),
            conditions: ready.and_then(|r| conditions(Some(r), None, None)),
            ..endpoint("4.3.2.1")
        }],
    }
}

fn build(es: &EndpointSlice, lookup: &MapLookup) -> TargetGroup {
    group(es, lookup, AttachMetadata::default())
}

#[test]
fn slice_yields_a_target_per_endpoint_address_and_port_with_conditions_and_topology() {
    assert_eq!(
        build(&mk_endpoint_slice("default"), &MapLookup::default()),
        TargetGroup {
            source: "endpointslice/default/testendpoints".into(),
            targets: mk_slice_targets(),
            labels: mk_slice_labels("default"),
        }
    );
}

#[test]
fn pod_backed_endpoints_get_pod_labels_and_uncovered_container_ports_get_their_own_targets() {
    let lookup = MapLookup::default().pod(mk_pod(
        "default",
        vec![
            container("c1", "mainport", 9000),
            container("c2", "sideport", 9001),
        ],
        "1.2.3.4",
    ));
    let es = pod_backed_slice(
        "default",
        "testendpoints",
        vec![es_port("testport", 9000)],
        Some(false),
    );
    assert_eq!(
        build(&es, &lookup),
        TargetGroup {
            source: "endpointslice/default/testendpoints".into(),
            targets: vec![
                with(
                    ls! {
                        "__address__": "4.3.2.1:9000",
                        "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
                        "__meta_kubernetes_endpointslice_address_target_name": "testpod",
                        "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "false",
                        "__meta_kubernetes_endpointslice_port": "9000",
                        "__meta_kubernetes_endpointslice_port_name": "testport",
                        "__meta_kubernetes_endpointslice_port_protocol": "TCP",
                        "__meta_kubernetes_pod_container_name": "c1",
                        "__meta_kubernetes_pod_container_image": "c1:latest",
                        "__meta_kubernetes_pod_container_port_name": "mainport",
                        "__meta_kubernetes_pod_container_port_number": "9000",
                        "__meta_kubernetes_pod_container_port_protocol": "TCP",
                        "__meta_kubernetes_pod_container_init": "false",
                    },
                    pod_labels("1.2.3.4")
                ),
                with(
                    ls! {
                        "__address__": "1.2.3.4:9001",
                        "__meta_kubernetes_pod_container_name": "c2",
                        "__meta_kubernetes_pod_container_image": "c2:latest",
                        "__meta_kubernetes_pod_container_port_name": "sideport",
                        "__meta_kubernetes_pod_container_port_number": "9001",
                        "__meta_kubernetes_pod_container_port_protocol": "TCP",
                        "__meta_kubernetes_pod_container_init": "false",
                    },
                    pod_labels("1.2.3.4")
                ),
            ],
            labels: ls! {
                "__meta_kubernetes_endpointslice_address_type": "IPv4",
                "__meta_kubernetes_endpointslice_name": "testendpoints",
                "__meta_kubernetes_namespace": "default",
            },
        }
    );
}

#[test]
fn a_deleted_slice_is_announced_by_an_empty_group_with_its_source() {
    assert_eq!(
        source("default", "testendpoints"),
        "endpointslice/default/testendpoints"
    );
    assert_eq!(
        source("default", "testendpoints"),
        build(&mk_endpoint_slice("default"), &MapLookup::default()).source
    );
}

#[test]
fn an_updated_slice_without_labels_yields_its_remaining_endpoints_and_no_service_lookup() {
    let mut es = mk_endpoint_slice("default");
    es.metadata.labels = None;
    es.metadata.annotations = None;
    es.endpoints.truncate(2);
    // The Service exists, but without the service-name label the slice does not name it.
    let lookup = MapLookup::default().service(mk_service("default", &[("app/name", "test")]));
    assert_eq!(
        build(&es, &lookup),
        TargetGroup {
            source: "endpointslice/default/testendpoints".into(),
            targets: mk_slice_targets()[..2].to_vec(),
            labels: ls! {
                "__meta_kubernetes_endpointslice_address_type": "IPv4",
                "__meta_kubernetes_endpointslice_name": "testendpoints",
                "__meta_kubernetes_namespace": "default",
            },
        }
    );
}

#[test]
fn a_slice_without_endpoints_keeps_its_group_labels_but_has_no_targets() {
    let mut es = mk_endpoint_slice("default");
    es.endpoints.clear();
    assert_eq!(
        build(&es, &MapLookup::default()),
        TargetGroup {
            source: "endpointslice/default/testendpoints".into(),
            targets: vec![],
            labels: mk_slice_labels("default"),
        }
    );
}

#[test]
fn the_service_named_by_the_service_name_label_adds_its_labels() {
    let lookup = MapLookup::default().service(mk_service("default", &[("app/name", "test")]));
    assert_eq!(
        build(&mk_endpoint_slice("default"), &lookup),
        TargetGroup {
            source: "endpointslice/default/testendpoints".into(),
            targets: mk_slice_targets(),
            labels: with(
                mk_slice_labels("default"),
                service_labels(ls! {
                    "__meta_kubernetes_service_label_app_name": "test",
                    "__meta_kubernetes_service_labelpresent_app_name": "true",
                })
            ),
        }
    );
}

#[test]
fn service_labels_follow_an_updated_service() {
    let lookup = MapLookup::default().service(mk_service(
        "default",
        &[("app/name", "svc"), ("component", "testing")],
    ));
    assert_eq!(
        build(&mk_endpoint_slice("default"), &lookup),
        TargetGroup {
            source: "endpointslice/default/testendpoints".into(),
            targets: mk_slice_targets(),
            labels: with(
                mk_slice_labels("default"),
                service_labels(ls! {
                    "__meta_kubernetes_service_label_app_name": "svc",
                    "__meta_kubernetes_service_label_component": "testing",
                    "__meta_kubernetes_service_labelpresent_app_name": "true",
                    "__meta_kubernetes_service_labelpresent_component": "true",
                })
            ),
        }
    );
}

#[test]
fn slices_in_several_namespaces_resolve_services_and_pods_in_their_own_namespace() {
    let lookup = MapLookup::default()
        .service(mk_service("ns1", &[("app", "app1")]))
        .pod(mk_pod(
            "ns2",
            vec![container("c1", "mainport", 9000)],
            "4.3.2.1",
        ));
    assert_eq!(
        build(&mk_endpoint_slice("ns1"), &lookup),
        TargetGroup {
            source: "endpointslice/ns1/testendpoints".into(),
            targets: mk_slice_targets(),
            labels: with(
                mk_slice_labels("ns1"),
                service_labels(ls! {
                    "__meta_kubernetes_service_label_app": "app1",
                    "__meta_kubernetes_service_labelpresent_app": "true",
                })
            ),
        }
    );
    let es = pod_backed_slice(
        "ns2",
        "testendpoints",
        vec![es_port("testport", 9000)],
        None,
    );
    assert_eq!(
        build(&es, &lookup),
        TargetGroup {
            source: "endpointslice/ns2/testendpoints".into(),
            targets: vec![with(
                ls! {
                    "__address__": "4.3.2.1:9000",
                    "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
                    "__meta_kubernetes_endpointslice_address_target_name": "testpod",
                    "__meta_kubernetes_endpointslice_port": "9000",
                    "__meta_kubernetes_endpointslice_port_name": "testport",
                    "__meta_kubernetes_endpointslice_port_protocol": "TCP",
                    "__meta_kubernetes_pod_container_name": "c1",
                    "__meta_kubernetes_pod_container_image": "c1:latest",
                    "__meta_kubernetes_pod_container_port_name": "mainport",
                    "__meta_kubernetes_pod_container_port_number": "9000",
                    "__meta_kubernetes_pod_container_port_protocol": "TCP",
                    "__meta_kubernetes_pod_container_init": "false",
                },
                pod_labels("4.3.2.1")
            )],
            labels: ls! {
                "__meta_kubernetes_endpointslice_address_type": "IPv4",
                "__meta_kubernetes_endpointslice_name": "testendpoints",
                "__meta_kubernetes_namespace": "ns2",
            },
        }
    );
}

#[test]
fn a_slice_in_the_own_namespace_is_unaffected_by_pods_elsewhere() {
    let lookup = MapLookup::default()
        .pod(mk_pod(
            "own-ns",
            vec![container("p1", "mainport", 9000)],
            "4.3.2.1",
        ))
        .pod(mk_pod(
            "non-own-ns",
            vec![container("p1", "mainport", 9000)],
            "4.3.2.1",
        ));
    assert_eq!(
        build(&mk_endpoint_slice("own-ns"), &lookup),
        TargetGroup {
            source: "endpointslice/own-ns/testendpoints".into(),
            targets: mk_slice_targets(),
            labels: mk_slice_labels("own-ns"),
        }
    );
}

#[test]
fn a_pod_without_an_ip_gets_no_targets_for_its_uncovered_container_ports() {
    // Go: TestEndpointSliceDiscoveryEmptyPodStatus.
    let mut pod = mk_pod("ns", vec![container("p1", "mainport", 9000)], "");
    pod.status = Some(PodStatus::default());
    let es = pod_backed_slice("ns", "testendpoints", vec![es_port("other", 9100)], None);
    let g = build(&es, &MapLookup::default().pod(pod));
    assert_eq!(g.targets.len(), 1);
    assert_eq!(g.targets[0]["__address__"], "4.3.2.1:9100");
    assert!(!g.targets[0].contains_key("__meta_kubernetes_pod_container_name"));
}

#[test]
fn init_container_ports_match_slice_ports_and_uncovered_ones_get_targets() {
    let mut pod = mk_pod(
        "default",
        vec![container("c1", "mainport", 9000)],
        "4.3.2.1",
    );
    pod.spec.as_mut().expect("spec").init_containers = Some(vec![
        container("ic1", "initport", 1111),
        container("ic2", "initport", 9111),
    ]);
    let es = pod_backed_slice(
        "default",
        "testsidecar",
        vec![es_port("testport", 9000), es_port("initport", 9111)],
        None,
    );
    let p = pod_labels("4.3.2.1");
    assert_eq!(
        build(&es, &MapLookup::default().pod(pod)),
        TargetGroup {
            source: "endpointslice/default/testsidecar".into(),
            targets: vec![
                with(
                    ls! {
                        "__address__": "4.3.2.1:9000",
                        "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
                        "__meta_kubernetes_endpointslice_address_target_name": "testpod",
                        "__meta_kubernetes_endpointslice_port": "9000",
                        "__meta_kubernetes_endpointslice_port_name": "testport",
                        "__meta_kubernetes_endpointslice_port_protocol": "TCP",
                        "__meta_kubernetes_pod_container_image": "c1:latest",
                        "__meta_kubernetes_pod_container_name": "c1",
                        "__meta_kubernetes_pod_container_port_name": "mainport",
                        "__meta_kubernetes_pod_container_port_number": "9000",
                        "__meta_kubernetes_pod_container_port_protocol": "TCP",
                        "__meta_kubernetes_pod_container_init": "false",
                    },
                    p.clone()
                ),
                with(
                    ls! {
                        "__address__": "4.3.2.1:9111",
                        "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
                        "__meta_kubernetes_endpointslice_address_target_name": "testpod",
                        "__meta_kubernetes_endpointslice_port": "9111",
                        "__meta_kubernetes_endpointslice_port_name": "initport",
                        "__meta_kubernetes_endpointslice_port_protocol": "TCP",
                        "__meta_kubernetes_pod_container_image": "ic2:latest",
                        "__meta_kubernetes_pod_container_name": "ic2",
                        "__meta_kubernetes_pod_container_port_name": "initport",
                        "__meta_kubernetes_pod_container_port_number": "9111",
                        "__meta_kubernetes_pod_container_port_protocol": "TCP",
                        "__meta_kubernetes_pod_container_init": "true",
                    },
                    p.clone()
                ),
                with(
                    ls! {
                        "__address__": "4.3.2.1:1111",
                        "__meta_kubernetes_pod_container_image": "ic1:latest",
                        "__meta_kubernetes_pod_container_name": "ic1",
                        "__meta_kubernetes_pod_container_port_name": "initport",
                        "__meta_kubernetes_pod_container_port_number": "1111",
                        "__meta_kubernetes_pod_container_port_protocol": "TCP",
                        "__meta_kubernetes_pod_container_init": "true",
                    },
                    p
                ),
            ],
            labels: ls! {
                "__meta_kubernetes_endpointslice_address_type": "IPv4",
                "__meta_kubernetes_endpointslice_name": "testsidecar",
                "__meta_kubernetes_namespace": "default",
            },
        }
    );
}

#[test]
fn a_port_without_a_number_addresses_the_bare_endpoint_and_a_slice_without_ports_has_no_targets() {
    let mut es = mk_dual_stack_slice("s", "IPv4", "1.2.3.4");
    es.ports = Some(vec![EndpointPort::default()]);
    let g = group(&es, &NoLookup, AttachMetadata::default());
    assert_eq!(
        g.targets,
        vec![ls! {
            "__address__": "1.2.3.4",
            "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "true",
        }]
    );
    es.ports = None;
    assert!(
        group(&es, &NoLookup, AttachMetadata::default())
            .targets
            .is_empty()
    );
}

#[test]
fn matched_container_ports_take_the_container_ports_protocol() {
    // Unlike the endpoints role, buildEndpointSlice labels the protocol from the container port.
    let mut udp = container("dns", "dns", 53);
    udp.ports.as_mut().expect("ports")[0].protocol = s("UDP");
    let lookup = MapLookup::default().pod(mk_pod("default", vec![udp], "4.3.2.1"));
    let mut port = es_port("dns", 53);
    port.protocol = s("SCTP");
    let es = pod_backed_slice("default", "s", vec![port], None);
    let g = build(&es, &lookup);
    assert_eq!(g.targets.len(), 1);
    assert_eq!(
        g.targets[0]["__meta_kubernetes_endpointslice_port_protocol"],
        "SCTP"
    );
    assert_eq!(
        g.targets[0]["__meta_kubernetes_pod_container_port_protocol"],
        "UDP"
    );
}

#[test]
fn terminating_endpoints_are_kept_with_their_conditions() {
    let es = EndpointSlice {
        endpoints: vec![Endpoint {
            conditions: conditions(Some(false), Some(false), Some(true)),
            ..endpoint("10.0.0.9")
        }],
        ..mk_dual_stack_slice("s", "IPv4", "unused")
    };
    assert_eq!(
        group(&es, &NoLookup, AttachMetadata::default()).targets,
        vec![ls! {
            "__address__": "10.0.0.9:9000",
            "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "false",
            "__meta_kubernetes_endpointslice_endpoint_conditions_serving": "false",
            "__meta_kubernetes_endpointslice_endpoint_conditions_terminating": "true",
            "__meta_kubernetes_endpointslice_port": "9000",
            "__meta_kubernetes_endpointslice_port_name": "http",
            "__meta_kubernetes_endpointslice_port_protocol": "TCP",
        }]
    );
}

/// `makeDualStackEndpointSlice`.
fn mk_dual_stack_slice(name: &str, address_type: &str, addr: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            labels: map(&[("kubernetes.io/service-name", "testsvc")]),
            ..mk_meta("default", name)
        },
        address_type: address_type.into(),
        ports: Some(vec![es_port("http", 9000)]),
        endpoints: vec![Endpoint {
            conditions: conditions(Some(true), None, None),
            ..endpoint(addr)
        }],
    }
}

mod metadata;
