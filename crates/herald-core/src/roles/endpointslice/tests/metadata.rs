//! Node and namespace metadata and dual-stack cases of endpointslice_test.go.

use super::*;

const NODE: AttachMetadata = AttachMetadata {
    node: true,
    namespace: false,
};

fn node_meta_expected(foobar_az: &str) -> TargetGroup {
    let mut targets = mk_slice_targets();
    targets[0].extend(ls! {
        "__meta_kubernetes_node_label_az": foobar_az,
        "__meta_kubernetes_node_labelpresent_az": "true",
        "__meta_kubernetes_node_name": "foobar",
    });
    targets[3].extend(ls! {
        "__meta_kubernetes_node_label_az": "us-west2",
        "__meta_kubernetes_node_labelpresent_az": "true",
        "__meta_kubernetes_node_name": "barbaz",
    });
    TargetGroup {
        source: "endpointslice/default/testendpoints".into(),
        targets,
        labels: with(
            mk_slice_labels("default"),
            service_labels(ls! {
                "__meta_kubernetes_service_label_app_name": "test",
                "__meta_kubernetes_service_labelpresent_app_name": "true",
            }),
        ),
    }
}

fn mk_node_lookup(foobar_az: &str) -> MapLookup {
    MapLookup::default()
        .node(mk_node("foobar", "", "", &[("az", foobar_az)], &[], &[]))
        .node(mk_node("barbaz", "", "", &[("az", "us-west2")], &[], &[]))
        .service(mk_service("default", &[("app/name", "test")]))
}

#[test]
fn node_metadata_labels_targets_by_node_target_ref_or_node_name() {
    assert_eq!(
        group(
            &mk_endpoint_slice("default"),
            &mk_node_lookup("us-east1"),
            NODE
        ),
        node_meta_expected("us-east1")
    );
}

#[test]
fn node_metadata_reflects_the_node_as_known_when_the_group_is_built() {
    // Go: TestEndpointsSlicesDiscoveryWithUpdatedNodeMetadata still expects `us-east1` after the node
    // update: the endpoint on `foobar` has an empty targetRef kind, so Prometheus's node index never
    // maps the node to this slice and the update does not re-queue it. A rebuild sees the new node.
    assert_eq!(
        group(
            &mk_endpoint_slice("default"),
            &mk_node_lookup("us-east1"),
            NODE
        ),
        node_meta_expected("us-east1")
    );
    assert_eq!(
        group(
            &mk_endpoint_slice("default"),
            &mk_node_lookup("us-central1"),
            NODE
        ),
        node_meta_expected("us-central1")
    );
}

const NAMESPACE: AttachMetadata = AttachMetadata {
    node: false,
    namespace: true,
};

#[test]
fn namespace_metadata_adds_the_namespace_labels_and_annotations() {
    let ns = "test-ns";
    let lookup = MapLookup::default()
        .namespace(mk_namespace(
            ns,
            &[("service", "web"), ("layer", "frontend")],
            &[("contact", "platform"), ("release", "v5.6.7")],
        ))
        .service(mk_service(ns, &[("app/name", "test")]));
    assert_eq!(
        group(&mk_endpoint_slice(ns), &lookup, NAMESPACE),
        TargetGroup {
            source: format!("endpointslice/{ns}/testendpoints"),
            targets: mk_slice_targets(),
            labels: with(
                mk_slice_labels(ns),
                service_labels(ls! {
                    "__meta_kubernetes_namespace_annotation_contact": "platform",
                    "__meta_kubernetes_namespace_annotationpresent_contact": "true",
                    "__meta_kubernetes_namespace_annotation_release": "v5.6.7",
                    "__meta_kubernetes_namespace_annotationpresent_release": "true",
                    "__meta_kubernetes_namespace_label_service": "web",
                    "__meta_kubernetes_namespace_labelpresent_service": "true",
                    "__meta_kubernetes_namespace_label_layer": "frontend",
                    "__meta_kubernetes_namespace_labelpresent_layer": "true",
                    "__meta_kubernetes_service_label_app_name": "test",
                    "__meta_kubernetes_service_labelpresent_app_name": "true",
                })
            ),
        }
    );
}

#[test]
fn namespace_metadata_follows_an_updated_namespace() {
    let ns = "test-ns";
    let lookup = MapLookup::default()
        .namespace(mk_namespace(
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
        ))
        .service(mk_service(ns, &[("app/name", "test")]));
    assert_eq!(
        group(&mk_endpoint_slice(ns), &lookup, NAMESPACE),
        TargetGroup {
            source: format!("endpointslice/{ns}/testendpoints"),
            targets: mk_slice_targets(),
            labels: with(
                mk_slice_labels(ns),
                service_labels(ls! {
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
                    "__meta_kubernetes_service_label_app_name": "test",
                    "__meta_kubernetes_service_labelpresent_app_name": "true",
                })
            ),
        }
    );
}

/// `makeDualStackService`.
fn mk_dual_stack_service(policy: &str, families: &[&str]) -> Service {
    Service {
        metadata: mk_meta("default", "testsvc"),
        spec: Some(ServiceSpec {
            ip_family_policy: s(policy),
            ip_families: Some(families.iter().map(|f| (*f).to_owned()).collect()),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// `dualStackGroupLabels` / `dualStackTarget`.
fn dual_stack_group(name: &str, address_type: &str, target: Option<&str>) -> TargetGroup {
    TargetGroup {
        source: format!("endpointslice/default/{name}"),
        targets: target
            .map(|a| {
                vec![ls! {
                    "__address__": a,
                    "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "true",
                    "__meta_kubernetes_endpointslice_port": "9000",
                    "__meta_kubernetes_endpointslice_port_name": "http",
                    "__meta_kubernetes_endpointslice_port_protocol": "TCP",
                }]
            })
            .unwrap_or_default(),
        labels: ls! {
            "__meta_kubernetes_namespace": "default",
            "__meta_kubernetes_endpointslice_address_type": address_type,
            "__meta_kubernetes_endpointslice_name": name,
            "__meta_kubernetes_endpointslice_label_kubernetes_io_service_name": "testsvc",
            "__meta_kubernetes_endpointslice_labelpresent_kubernetes_io_service_name": "true",
            "__meta_kubernetes_service_name": "testsvc",
        },
    }
}

#[test]
fn prefer_dual_stack_services_skip_the_secondary_family_slice() {
    let lookup =
        MapLookup::default().service(mk_dual_stack_service("PreferDualStack", &["IPv4", "IPv6"]));
    assert_eq!(
        build(
            &mk_dual_stack_slice("testsvc-ipv4", "IPv4", "1.2.3.4"),
            &lookup
        ),
        dual_stack_group("testsvc-ipv4", "IPv4", Some("1.2.3.4:9000"))
    );
    assert_eq!(
        build(
            &mk_dual_stack_slice("testsvc-ipv6", "IPv6", "fd00::1"),
            &lookup
        ),
        dual_stack_group("testsvc-ipv6", "IPv6", None)
    );
}

#[test]
fn require_dual_stack_services_skip_the_secondary_family_slice() {
    let lookup =
        MapLookup::default().service(mk_dual_stack_service("RequireDualStack", &["IPv4", "IPv6"]));
    assert_eq!(
        build(
            &mk_dual_stack_slice("testsvc-ipv4", "IPv4", "1.2.3.4"),
            &lookup
        ),
        dual_stack_group("testsvc-ipv4", "IPv4", Some("1.2.3.4:9000"))
    );
    assert_eq!(
        build(
            &mk_dual_stack_slice("testsvc-ipv6", "IPv6", "fd00::1"),
            &lookup
        ),
        dual_stack_group("testsvc-ipv6", "IPv6", None)
    );
}

#[test]
fn single_stack_ipv4_services_are_unaffected() {
    let lookup = MapLookup::default().service(mk_dual_stack_service("SingleStack", &["IPv4"]));
    assert_eq!(
        build(
            &mk_dual_stack_slice("testsvc-ipv4", "IPv4", "1.2.3.4"),
            &lookup
        ),
        dual_stack_group("testsvc-ipv4", "IPv4", Some("1.2.3.4:9000"))
    );
}

#[test]
fn single_stack_ipv6_services_are_unaffected_and_addresses_are_bracketed() {
    let lookup = MapLookup::default().service(mk_dual_stack_service("SingleStack", &["IPv6"]));
    assert_eq!(
        build(
            &mk_dual_stack_slice("testsvc-ipv6", "IPv6", "fd00::1"),
            &lookup
        ),
        dual_stack_group("testsvc-ipv6", "IPv6", Some("[fd00::1]:9000"))
    );
}

#[test]
fn an_ipv6_primary_dual_stack_service_skips_the_ipv4_slice() {
    let lookup =
        MapLookup::default().service(mk_dual_stack_service("PreferDualStack", &["IPv6", "IPv4"]));
    assert_eq!(
        build(
            &mk_dual_stack_slice("testsvc-ipv6", "IPv6", "fd00::1"),
            &lookup
        ),
        dual_stack_group("testsvc-ipv6", "IPv6", Some("[fd00::1]:9000"))
    );
    assert_eq!(
        build(
            &mk_dual_stack_slice("testsvc-ipv4", "IPv4", "1.2.3.4"),
            &lookup
        ),
        dual_stack_group("testsvc-ipv4", "IPv4", None)
    );
}

#[test]
fn node_metadata_for_a_pod_endpoint_comes_from_its_node_name() {
    let lookup = MapLookup::default().node(mk_node("n1", "", "", &[("zone", "a")], &[], &[]));
    let mut es = pod_backed_slice("default", "s", vec![es_port("m", 9000)], None);
    es.endpoints[0].node_name = s("n1");
    let g = group(&es, &lookup, NODE);
    assert_eq!(g.targets[0]["__meta_kubernetes_node_name"], "n1");
    assert_eq!(g.targets[0]["__meta_kubernetes_node_label_zone"], "a");
}
