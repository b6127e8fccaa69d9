//! Node and namespace metadata cases of endpoints_test.go.

use super::*;

fn node_meta_expected(foobar_az: &str) -> TargetGroup {
    let mut targets = mk_endpoints_targets();
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
        source: "endpoints/default/testendpoints".into(),
        targets,
        labels: with(
            mk_endpoints_labels("default"),
            ls! {
                "__meta_kubernetes_service_label_app_name": "test",
                "__meta_kubernetes_service_labelpresent_app_name": "true",
                "__meta_kubernetes_service_name": "testendpoints",
            },
        ),
    }
}

const NODE: AttachMetadata = AttachMetadata {
    node: true,
    namespace: false,
};

#[test]
fn node_metadata_labels_targets_by_node_name_or_node_target_ref() {
    let lookup = MapLookup::default()
        .node(mk_node("foobar", "", "", &[("az", "us-east1")], &[], &[]))
        .node(mk_node("barbaz", "", "", &[("az", "us-west2")], &[], &[]))
        .service(mk_service("default", &[("app/name", "test")]));
    assert_eq!(
        group(&mk_endpoints("default"), &lookup, NODE),
        node_meta_expected("us-east1")
    );
}

#[test]
fn node_metadata_reflects_the_node_as_known_when_the_group_is_built() {
    // Go: TestEndpointsDiscoveryWithUpdatedNodeMetadata still expects `us-east1` after the node update,
    // because Prometheus indexes endpoints by node only through Pod and Node target refs, and the
    // `foobar` address has neither, so the update never re-queues the Endpoints object. The labels
    // themselves are those of the node at build time: before the update they match Go's expectation,
    // and a rebuild after it sees the new value.
    let mk = |az: &str| {
        MapLookup::default()
            .node(mk_node("foobar", "", "", &[("az", az)], &[], &[]))
            .node(mk_node("barbaz", "", "", &[("az", "us-west2")], &[], &[]))
            .service(mk_service("default", &[("app/name", "test")]))
    };
    assert_eq!(
        group(&mk_endpoints("default"), &mk("us-east1"), NODE),
        node_meta_expected("us-east1")
    );
    assert_eq!(
        group(&mk_endpoints("default"), &mk("eu-central1"), NODE),
        node_meta_expected("eu-central1")
    );
}

const NAMESPACE: AttachMetadata = AttachMetadata {
    node: false,
    namespace: true,
};

#[test]
fn namespace_metadata_adds_the_namespace_labels_and_annotations() {
    let ns = "test-ns";
    let lookup = MapLookup::default().namespace(mk_namespace(
        ns,
        &[("environment", "production"), ("team", "backend")],
        &[("owner", "platform"), ("version", "v1.2.3")],
    ));
    assert_eq!(
        group(&mk_endpoints(ns), &lookup, NAMESPACE),
        TargetGroup {
            source: format!("endpoints/{ns}/testendpoints"),
            targets: mk_endpoints_targets(),
            labels: with(
                mk_endpoints_labels(ns),
                ls! {
                    "__meta_kubernetes_namespace_annotation_owner": "platform",
                    "__meta_kubernetes_namespace_annotationpresent_owner": "true",
                    "__meta_kubernetes_namespace_annotation_version": "v1.2.3",
                    "__meta_kubernetes_namespace_annotationpresent_version": "true",
                    "__meta_kubernetes_namespace_label_environment": "production",
                    "__meta_kubernetes_namespace_labelpresent_environment": "true",
                    "__meta_kubernetes_namespace_label_team": "backend",
                    "__meta_kubernetes_namespace_labelpresent_team": "true",
                }
            ),
        }
    );
}

#[test]
fn namespace_metadata_follows_an_updated_namespace() {
    let ns = "test-ns";
    let lookup = MapLookup::default().namespace(mk_namespace(
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
    assert_eq!(
        group(&mk_endpoints(ns), &lookup, NAMESPACE),
        TargetGroup {
            source: format!("endpoints/{ns}/testendpoints"),
            targets: mk_endpoints_targets(),
            labels: with(
                mk_endpoints_labels(ns),
                ls! {
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
                }
            ),
        }
    );
}

#[test]
fn node_metadata_for_a_pod_address_comes_from_its_node_name() {
    let lookup = MapLookup::default()
        .node(mk_node("n1", "", "", &[("zone", "a")], &[], &[]))
        .pod(mk_pod(
            "default",
            vec![container("c1", "m", 9000)],
            "4.3.2.1",
        ));
    let mut ep = pod_backed_endpoints("default", "e", vec![ep_port("m", 9000)]);
    ep.subsets.as_mut().expect("subsets")[0]
        .addresses
        .as_mut()
        .expect("addresses")[0]
        .node_name = s("n1");
    let g = group(&ep, &lookup, NODE);
    assert_eq!(g.targets[0]["__meta_kubernetes_node_name"], "n1");
    assert_eq!(g.targets[0]["__meta_kubernetes_node_label_zone"], "a");
    assert_eq!(g.targets[0]["__meta_kubernetes_endpoint_node_name"], "n1");
    // Without attach_metadata.node the same lookup adds no node labels.
    let plain = group(&ep, &lookup, AttachMetadata::default());
    assert!(!plain.targets[0].contains_key("__meta_kubernetes_node_name"));
}
