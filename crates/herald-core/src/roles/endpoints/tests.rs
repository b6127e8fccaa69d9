//! Ports of prometheus/prometheus `discovery/kubernetes/endpoints_test.go`.

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EndpointAddress, EndpointPort, EndpointSubset, Endpoints,
    ObjectReference, Pod, PodCondition, PodSpec, PodStatus, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{group, source};
use crate::target::{AttachMetadata, LabelSet, NoLookup, TargetGroup};
use crate::testing::{MapLookup, ls, map, mk_meta, mk_namespace, mk_node, s};

fn ep_port(name: &str, number: i32) -> EndpointPort {
    EndpointPort {
        name: s(name),
        port: number,
        protocol: s("TCP"),
        ..EndpointPort::default()
    }
}

fn addr(ip: &str) -> EndpointAddress {
    EndpointAddress {
        ip: ip.into(),
        ..EndpointAddress::default()
    }
}

fn pod_ref(ns: &str, name: &str) -> Option<ObjectReference> {
    Some(ObjectReference {
        kind: s("Pod"),
        name: s(name),
        namespace: s(ns),
        ..ObjectReference::default()
    })
}

/// `makeEndpoints`.
fn mk_endpoints(namespace: &str) -> Endpoints {
    Endpoints {
        metadata: ObjectMeta {
            annotations: map(&[("test.annotation", "test")]),
            ..mk_meta(namespace, "testendpoints")
        },
        subsets: Some(vec![
            EndpointSubset {
                addresses: Some(vec![EndpointAddress {
                    hostname: s("testendpoint1"),
                    node_name: s("foobar"),
                    ..addr("1.2.3.4")
                }]),
                ports: Some(vec![ep_port("testport", 9000)]),
                ..EndpointSubset::default()
            },
            EndpointSubset {
                addresses: Some(vec![addr("2.3.4.5")]),
                not_ready_addresses: Some(vec![addr("2.3.4.5")]),
                ports: Some(vec![ep_port("testport", 9001)]),
            },
            EndpointSubset {
                addresses: Some(vec![EndpointAddress {
                    target_ref: Some(ObjectReference {
                        kind: s("Node"),
                        name: s("barbaz"),
                        ..ObjectReference::default()
                    }),
                    ..addr("6.7.8.9")
                }]),
                ports: Some(vec![ep_port("testport", 9002)]),
                ..EndpointSubset::default()
            },
        ]),
    }
}

/// The four targets of `makeEndpoints`, in order.
fn mk_endpoints_targets() -> Vec<LabelSet> {
    vec![
        ls! {
            "__address__": "1.2.3.4:9000",
            "__meta_kubernetes_endpoint_hostname": "testendpoint1",
            "__meta_kubernetes_endpoint_node_name": "foobar",
            "__meta_kubernetes_endpoint_port_name": "testport",
            "__meta_kubernetes_endpoint_port_protocol": "TCP",
            "__meta_kubernetes_endpoint_ready": "true",
        },
        ls! {
            "__address__": "2.3.4.5:9001",
            "__meta_kubernetes_endpoint_port_name": "testport",
            "__meta_kubernetes_endpoint_port_protocol": "TCP",
            "__meta_kubernetes_endpoint_ready": "true",
        },
        ls! {
            "__address__": "2.3.4.5:9001",
            "__meta_kubernetes_endpoint_port_name": "testport",
            "__meta_kubernetes_endpoint_port_protocol": "TCP",
            "__meta_kubernetes_endpoint_ready": "false",
        },
        ls! {
            "__address__": "6.7.8.9:9002",
            "__meta_kubernetes_endpoint_address_target_kind": "Node",
            "__meta_kubernetes_endpoint_address_target_name": "barbaz",
            "__meta_kubernetes_endpoint_port_name": "testport",
            "__meta_kubernetes_endpoint_port_protocol": "TCP",
            "__meta_kubernetes_endpoint_ready": "true",
        },
    ]
}

fn mk_endpoints_labels(ns: &str) -> LabelSet {
    ls! {
        "__meta_kubernetes_namespace": ns,
        "__meta_kubernetes_endpoints_name": "testendpoints",
        "__meta_kubernetes_endpoints_annotation_test_annotation": "test",
        "__meta_kubernetes_endpoints_annotationpresent_test_annotation": "true",
    }
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

/// The pod labels of the Go tests' `testpod` with neither phase nor conditions.
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

fn with(mut a: LabelSet, b: LabelSet) -> LabelSet {
    a.extend(b);
    a
}

fn build(ep: &Endpoints, lookup: &MapLookup) -> TargetGroup {
    group(ep, lookup, AttachMetadata::default())
}

fn pod_backed_endpoints(ns: &str, name: &str, ports: Vec<EndpointPort>) -> Endpoints {
    Endpoints {
        metadata: mk_meta(ns, name),
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                target_ref: pod_ref(ns, "testpod"),
                ..addr("4.3.2.1")
            }]),
            ports: Some(ports),
            ..EndpointSubset::default()
        }]),
    }
}

#[test]
fn endpoints_yield_a_target_per_address_and_port_with_not_ready_addresses_repeated() {
    assert_eq!(
        build(&mk_endpoints("default"), &MapLookup::default()),
        TargetGroup {
            source: "endpoints/default/testendpoints".into(),
            targets: mk_endpoints_targets(),
            labels: mk_endpoints_labels("default"),
        }
    );
}

#[test]
fn pod_backed_addresses_get_pod_labels_and_uncovered_container_ports_get_their_own_targets() {
    let pod = mk_pod(
        "default",
        vec![
            container("c1", "mainport", 9000),
            container("c2", "sideport", 9001),
        ],
        "1.2.3.4",
    );
    let lookup = MapLookup::default().pod(pod);
    let ep = pod_backed_endpoints("default", "testendpoints", vec![ep_port("testport", 9000)]);
    assert_eq!(
        build(&ep, &lookup),
        TargetGroup {
            source: "endpoints/default/testendpoints".into(),
            targets: vec![
                with(
                    ls! {
                        "__address__": "4.3.2.1:9000",
                        "__meta_kubernetes_endpoint_port_name": "testport",
                        "__meta_kubernetes_endpoint_port_protocol": "TCP",
                        "__meta_kubernetes_endpoint_ready": "true",
                        "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                        "__meta_kubernetes_endpoint_address_target_name": "testpod",
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
                "__meta_kubernetes_endpoints_name": "testendpoints",
                "__meta_kubernetes_namespace": "default",
            },
        }
    );
}

#[test]
fn a_deleted_endpoints_object_is_announced_by_an_empty_group_with_its_source() {
    assert_eq!(
        source("default", "testendpoints"),
        "endpoints/default/testendpoints"
    );
    assert_eq!(
        source("default", "testendpoints"),
        build(&mk_endpoints("default"), &MapLookup::default()).source
    );
}

#[test]
fn updated_endpoints_yield_the_targets_of_their_new_subsets() {
    let updated = Endpoints {
        metadata: mk_meta("default", "testendpoints"),
        subsets: Some(vec![
            EndpointSubset {
                addresses: Some(vec![addr("1.2.3.4")]),
                ports: Some(vec![ep_port("testport", 9000)]),
                ..EndpointSubset::default()
            },
            EndpointSubset {
                addresses: Some(vec![addr("2.3.4.5")]),
                ports: Some(vec![ep_port("testport", 9001)]),
                ..EndpointSubset::default()
            },
        ]),
    };
    assert_eq!(
        build(&updated, &MapLookup::default()),
        TargetGroup {
            source: "endpoints/default/testendpoints".into(),
            targets: vec![
                ls! {
                    "__address__": "1.2.3.4:9000",
                    "__meta_kubernetes_endpoint_port_name": "testport",
                    "__meta_kubernetes_endpoint_port_protocol": "TCP",
                    "__meta_kubernetes_endpoint_ready": "true",
                },
                ls! {
                    "__address__": "2.3.4.5:9001",
                    "__meta_kubernetes_endpoint_port_name": "testport",
                    "__meta_kubernetes_endpoint_port_protocol": "TCP",
                    "__meta_kubernetes_endpoint_ready": "true",
                },
            ],
            labels: ls! {
                "__meta_kubernetes_namespace": "default",
                "__meta_kubernetes_endpoints_name": "testendpoints",
            },
        }
    );
}

#[test]
fn endpoints_with_empty_subsets_keep_their_group_labels_but_have_no_targets() {
    let empty = Endpoints {
        metadata: mk_meta("default", "testendpoints"),
        subsets: Some(vec![]),
    };
    assert_eq!(
        build(&empty, &MapLookup::default()),
        TargetGroup {
            source: "endpoints/default/testendpoints".into(),
            targets: vec![],
            labels: ls! {
                "__meta_kubernetes_namespace": "default",
                "__meta_kubernetes_endpoints_name": "testendpoints",
            },
        }
    );
}

#[test]
fn the_service_of_the_same_name_adds_its_labels_to_the_group() {
    let lookup = MapLookup::default().service(mk_service("default", &[("app/name", "test")]));
    assert_eq!(
        build(&mk_endpoints("default"), &lookup),
        TargetGroup {
            source: "endpoints/default/testendpoints".into(),
            targets: mk_endpoints_targets(),
            labels: with(
                mk_endpoints_labels("default"),
                ls! {
                    "__meta_kubernetes_service_label_app_name": "test",
                    "__meta_kubernetes_service_labelpresent_app_name": "true",
                    "__meta_kubernetes_service_name": "testendpoints",
                }
            ),
        }
    );
}

#[test]
fn service_labels_follow_an_updated_service() {
    let updated = MapLookup::default().service(mk_service(
        "default",
        &[("app/name", "svc"), ("component", "testing")],
    ));
    assert_eq!(
        build(&mk_endpoints("default"), &updated),
        TargetGroup {
            source: "endpoints/default/testendpoints".into(),
            targets: mk_endpoints_targets(),
            labels: with(
                mk_endpoints_labels("default"),
                ls! {
                    "__meta_kubernetes_service_label_app_name": "svc",
                    "__meta_kubernetes_service_labelpresent_app_name": "true",
                    "__meta_kubernetes_service_name": "testendpoints",
                    "__meta_kubernetes_service_label_component": "testing",
                    "__meta_kubernetes_service_labelpresent_component": "true",
                }
            ),
        }
    );
}

#[test]
fn endpoints_in_several_namespaces_resolve_services_and_pods_in_their_own_namespace() {
    let mut ep_one = mk_endpoints("ns1");
    ep_one.metadata.namespace = s("ns1");
    let ep_two = pod_backed_endpoints("ns2", "testendpoints", vec![ep_port("testport", 9000)]);
    let lookup = MapLookup::default()
        .service(mk_service("ns1", &[("app", "app1")]))
        .pod(mk_pod(
            "ns2",
            vec![container("c1", "mainport", 9000)],
            "4.3.2.1",
        ));

    assert_eq!(
        build(&ep_one, &lookup),
        TargetGroup {
            source: "endpoints/ns1/testendpoints".into(),
            targets: mk_endpoints_targets(),
            labels: with(
                mk_endpoints_labels("ns1"),
                ls! {
                    "__meta_kubernetes_service_label_app": "app1",
                    "__meta_kubernetes_service_labelpresent_app": "true",
                    "__meta_kubernetes_service_name": "testendpoints",
                }
            ),
        }
    );
    assert_eq!(
        build(&ep_two, &lookup),
        TargetGroup {
            source: "endpoints/ns2/testendpoints".into(),
            targets: vec![with(
                ls! {
                    "__address__": "4.3.2.1:9000",
                    "__meta_kubernetes_endpoint_port_name": "testport",
                    "__meta_kubernetes_endpoint_port_protocol": "TCP",
                    "__meta_kubernetes_endpoint_ready": "true",
                    "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                    "__meta_kubernetes_endpoint_address_target_name": "testpod",
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
                "__meta_kubernetes_namespace": "ns2",
                "__meta_kubernetes_endpoints_name": "testendpoints",
            },
        }
    );
}

#[test]
fn endpoints_in_the_own_namespace_do_not_see_pods_of_another_namespace() {
    // Go: TestEndpointsDiscoveryOwnNamespace — the `own-ns` object is unaffected by pods elsewhere.
    let mut ep = mk_endpoints("own-ns");
    ep.metadata.namespace = s("own-ns");
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
        build(&ep, &lookup),
        TargetGroup {
            source: "endpoints/own-ns/testendpoints".into(),
            targets: mk_endpoints_targets(),
            labels: mk_endpoints_labels("own-ns"),
        }
    );
}

#[test]
fn a_pod_without_an_ip_gets_no_targets_for_its_uncovered_container_ports() {
    // Go: TestEndpointsDiscoveryEmptyPodStatus; buildEndpoints skips seen pods whose PodIP is empty.
    let mut pod = mk_pod("ns", vec![container("p1", "mainport", 9000)], "");
    pod.status = Some(PodStatus::default());
    let lookup = MapLookup::default().pod(pod);
    let ep = pod_backed_endpoints("ns", "testendpoints", vec![ep_port("other", 9100)]);
    let g = build(&ep, &lookup);
    assert_eq!(g.targets.len(), 1);
    assert_eq!(g.targets[0]["__address__"], "4.3.2.1:9100");
    assert_eq!(g.targets[0]["__meta_kubernetes_pod_ip"], "");
    assert!(!g.targets[0].contains_key("__meta_kubernetes_pod_container_name"));
}

#[test]
fn pod_labels_follow_an_updated_pod_phase() {
    // Go: TestEndpointsDiscoveryUpdatePod (prometheus#11305).
    let mut pod = mk_pod(
        "default",
        vec![container("c1", "mainport", 9000)],
        "4.3.2.1",
    );
    let ep = pod_backed_endpoints("default", "testendpoints", vec![ep_port("mainport", 9000)]);
    let st = pod.status.as_mut().expect("status");
    st.phase = s("Pending");
    st.conditions = Some(vec![PodCondition {
        type_: "Ready".into(),
        status: "False".into(),
        ..PodCondition::default()
    }]);
    let pending = build(&ep, &MapLookup::default().pod(pod.clone()));
    assert_eq!(pending.targets[0]["__meta_kubernetes_pod_phase"], "Pending");
    assert_eq!(pending.targets[0]["__meta_kubernetes_pod_ready"], "false");

    let st = pod.status.as_mut().expect("status");
    st.phase = s("Running");
    st.conditions = Some(vec![PodCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..PodCondition::default()
    }]);
    assert_eq!(
        build(&ep, &MapLookup::default().pod(pod)),
        TargetGroup {
            source: "endpoints/default/testendpoints".into(),
            targets: vec![with(
                ls! {
                    "__address__": "4.3.2.1:9000",
                    "__meta_kubernetes_endpoint_port_name": "mainport",
                    "__meta_kubernetes_endpoint_port_protocol": "TCP",
                    "__meta_kubernetes_endpoint_ready": "true",
                    "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                    "__meta_kubernetes_endpoint_address_target_name": "testpod",
                    "__meta_kubernetes_pod_container_name": "c1",
                    "__meta_kubernetes_pod_container_image": "c1:latest",
                    "__meta_kubernetes_pod_container_port_name": "mainport",
                    "__meta_kubernetes_pod_container_port_number": "9000",
                    "__meta_kubernetes_pod_container_port_protocol": "TCP",
                    "__meta_kubernetes_pod_container_init": "false",
                },
                with(
                    pod_labels("4.3.2.1"),
                    ls! {
                        "__meta_kubernetes_pod_ready": "true",
                        "__meta_kubernetes_pod_phase": "Running",
                    }
                )
            )],
            labels: ls! {
                "__meta_kubernetes_namespace": "default",
                "__meta_kubernetes_endpoints_name": "testendpoints",
            },
        }
    );
}

/// The pod of the sidecar cases: init containers ic1 (1111) and ic2 (9111), container c1 (9000).
fn mk_sidecar_pod() -> Pod {
    let mut pod = mk_pod(
        "default",
        vec![container("c1", "mainport", 9000)],
        "4.3.2.1",
    );
    pod.spec.as_mut().expect("spec").init_containers = Some(vec![
        container("ic1", "initport", 1111),
        container("ic2", "initport", 9111),
    ]);
    pod
}

#[test]
fn init_container_ports_match_endpoint_ports_and_uncovered_ones_get_targets() {
    let ep = pod_backed_endpoints(
        "default",
        "testsidecar",
        vec![ep_port("testport", 9000), ep_port("initport", 9111)],
    );
    let lookup = MapLookup::default().pod(mk_sidecar_pod());
    let pod = pod_labels("4.3.2.1");
    assert_eq!(
        build(&ep, &lookup),
        TargetGroup {
            source: "endpoints/default/testsidecar".into(),
            targets: vec![
                with(
                    ls! {
                        "__address__": "4.3.2.1:9000",
                        "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                        "__meta_kubernetes_endpoint_address_target_name": "testpod",
                        "__meta_kubernetes_endpoint_port_name": "testport",
                        "__meta_kubernetes_endpoint_port_protocol": "TCP",
                        "__meta_kubernetes_endpoint_ready": "true",
                        "__meta_kubernetes_pod_container_image": "c1:latest",
                        "__meta_kubernetes_pod_container_name": "c1",
                        "__meta_kubernetes_pod_container_port_name": "mainport",
                        "__meta_kubernetes_pod_container_port_number": "9000",
                        "__meta_kubernetes_pod_container_port_protocol": "TCP",
                        "__meta_kubernetes_pod_container_init": "false",
                    },
                    pod.clone()
                ),
                with(
                    ls! {
                        "__address__": "4.3.2.1:9111",
                        "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                        "__meta_kubernetes_endpoint_address_target_name": "testpod",
                        "__meta_kubernetes_endpoint_port_name": "initport",
                        "__meta_kubernetes_endpoint_port_protocol": "TCP",
                        "__meta_kubernetes_endpoint_ready": "true",
                        "__meta_kubernetes_pod_container_image": "ic2:latest",
                        "__meta_kubernetes_pod_container_name": "ic2",
                        "__meta_kubernetes_pod_container_port_name": "initport",
                        "__meta_kubernetes_pod_container_port_number": "9111",
                        "__meta_kubernetes_pod_container_port_protocol": "TCP",
                        "__meta_kubernetes_pod_container_init": "true",
                    },
                    pod.clone()
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
                    pod
                ),
            ],
            labels: ls! {
                "__meta_kubernetes_endpoints_name": "testsidecar",
                "__meta_kubernetes_namespace": "default",
            },
        }
    );
}

#[test]
fn a_pod_target_ref_to_an_unknown_pod_is_treated_as_a_plain_address() {
    let ep = pod_backed_endpoints("default", "e", vec![ep_port("p", 80)]);
    let g = group(&ep, &NoLookup, AttachMetadata::default());
    assert_eq!(
        g.targets,
        vec![ls! {
            "__address__": "4.3.2.1:80",
            "__meta_kubernetes_endpoint_port_name": "p",
            "__meta_kubernetes_endpoint_port_protocol": "TCP",
            "__meta_kubernetes_endpoint_ready": "true",
            "__meta_kubernetes_endpoint_address_target_kind": "Pod",
            "__meta_kubernetes_endpoint_address_target_name": "testpod",
        }]
    );
}

#[test]
fn ipv6_endpoint_addresses_are_bracketed() {
    let ep = Endpoints {
        metadata: mk_meta("default", "v6"),
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![addr("fd00::1")]),
            ports: Some(vec![ep_port("p", 80)]),
            ..EndpointSubset::default()
        }]),
    };
    assert_eq!(
        group(&ep, &NoLookup, AttachMetadata::default()).targets[0]["__address__"],
        "[fd00::1]:80"
    );
}

#[test]
fn matched_container_ports_take_the_endpoint_ports_protocol_and_the_last_matching_container() {
    // buildEndpoints labels `pod_container_port_protocol` with the endpoint port's protocol, and its
    // `break` only leaves the port loop, so a later container exposing the same port wins.
    let mut udp = container("first", "dns", 53);
    udp.ports.as_mut().expect("ports")[0].protocol = s("UDP");
    let second = container("second", "dns-too", 53);
    let lookup = MapLookup::default().pod(mk_pod("default", vec![udp, second], "4.3.2.1"));
    let mut port = ep_port("dns", 53);
    port.protocol = s("SCTP");
    let ep = pod_backed_endpoints("default", "e", vec![port]);
    let g = build(&ep, &lookup);
    assert_eq!(g.targets.len(), 1, "both containers' port 53 is covered");
    assert_eq!(
        g.targets[0]["__meta_kubernetes_pod_container_name"],
        "second"
    );
    assert_eq!(
        g.targets[0]["__meta_kubernetes_pod_container_port_name"],
        "dns-too"
    );
    assert_eq!(
        g.targets[0]["__meta_kubernetes_pod_container_port_protocol"],
        "SCTP"
    );
}

#[test]
fn endpoints_of_a_service_without_selector_carry_the_service_labels_and_plain_addresses() {
    // A selector-less Service has manually managed Endpoints: plain IPs, no target refs.
    let svc = Service {
        spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
            cluster_ip: s("None"),
            ..Default::default()
        }),
        ..mk_service("default", &[("team", "db")])
    };
    let ep = Endpoints {
        metadata: mk_meta("default", "testendpoints"),
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![addr("192.0.2.10")]),
            ports: Some(vec![ep_port("pg", 5432)]),
            ..EndpointSubset::default()
        }]),
    };
    assert_eq!(
        build(&ep, &MapLookup::default().service(svc)),
        TargetGroup {
            source: "endpoints/default/testendpoints".into(),
            targets: vec![ls! {
                "__address__": "192.0.2.10:5432",
                "__meta_kubernetes_endpoint_port_name": "pg",
                "__meta_kubernetes_endpoint_port_protocol": "TCP",
                "__meta_kubernetes_endpoint_ready": "true",
            }],
            labels: ls! {
                "__meta_kubernetes_namespace": "default",
                "__meta_kubernetes_endpoints_name": "testendpoints",
                "__meta_kubernetes_service_name": "testendpoints",
                "__meta_kubernetes_service_label_team": "db",
                "__meta_kubernetes_service_labelpresent_team": "true",
            },
        }
    );
}

mod metadata;
