//! Ports of prometheus/prometheus `discovery/kubernetes/node_test.go`, plus the address priority and
//! IPv6 cases node.go implements.

use k8s_openapi::api::core::v1::{Node, NodeAddress};

use super::{group, source, try_group};
use crate::target::{AttachMetadata, NoLookup, TargetGroup};
use crate::testing::{ls, mk_node};

fn build(node: &Node) -> TargetGroup {
    group(node, &NoLookup, AttachMetadata::default())
}

/// `makeEnumeratedNode`.
fn mk_enumerated_node(i: usize) -> Node {
    mk_node(
        &format!("test{i}"),
        "1.2.3.4",
        &format!("aws:///de-west-3a/i-{i}"),
        &[],
        &[],
        &[],
    )
}

fn kubelet_target(name: &str) -> crate::target::LabelSet {
    ls! {
        "__address__": "1.2.3.4:10250",
        "instance": name,
        "__meta_kubernetes_node_address_InternalIP": "1.2.3.4",
    }
}

#[test]
fn node_yields_its_kubelet_target_with_labels_and_annotations() {
    let node = mk_node(
        "test",
        "1.2.3.4",
        "aws:///nl-north-7b/i-03149834983492827",
        &[("test-label", "testvalue")],
        &[("test-annotation", "testannotationvalue")],
        &[],
    );
    assert_eq!(
        build(&node),
        TargetGroup {
            source: "node/test".into(),
            targets: vec![kubelet_target("test")],
            labels: ls! {
                "__meta_kubernetes_node_name": "test",
                "__meta_kubernetes_node_provider_id": "aws:///nl-north-7b/i-03149834983492827",
                "__meta_kubernetes_node_label_test_label": "testvalue",
                "__meta_kubernetes_node_labelpresent_test_label": "true",
                "__meta_kubernetes_node_annotation_test_annotation": "testannotationvalue",
                "__meta_kubernetes_node_annotationpresent_test_annotation": "true",
            },
        }
    );
}

#[test]
fn an_added_node_yields_its_group() {
    assert_eq!(
        build(&mk_enumerated_node(1)),
        TargetGroup {
            source: "node/test1".into(),
            targets: vec![kubelet_target("test1")],
            labels: ls! {
                "__meta_kubernetes_node_name": "test1",
                "__meta_kubernetes_node_provider_id": "aws:///de-west-3a/i-1",
            },
        }
    );
}

#[test]
fn a_deleted_node_is_announced_by_an_empty_group_with_its_source() {
    assert_eq!(source("test0"), "node/test0");
    assert_eq!(source("test0"), build(&mk_enumerated_node(0)).source);
}

#[test]
fn an_updated_node_yields_the_group_of_its_new_state() {
    let before = build(&mk_enumerated_node(0));
    let updated = mk_node(
        "test0",
        "1.2.3.4",
        "aws:///fr-south-1c/i-49508290343823952",
        &[("Unschedulable", "true")],
        &[],
        &[],
    );
    let after = build(&updated);
    assert_ne!(before, after);
    assert_eq!(
        after,
        TargetGroup {
            source: "node/test0".into(),
            targets: vec![kubelet_target("test0")],
            labels: ls! {
                "__meta_kubernetes_node_label_Unschedulable": "true",
                "__meta_kubernetes_node_labelpresent_Unschedulable": "true",
                "__meta_kubernetes_node_name": "test0",
                "__meta_kubernetes_node_provider_id": "aws:///fr-south-1c/i-49508290343823952",
            },
        }
    );
}

#[test]
fn node_conditions_become_lower_cased_condition_labels() {
    let base = ls! {
        "__meta_kubernetes_node_name": "test",
        "__meta_kubernetes_node_provider_id": "aws:///test-zone/i-test",
    };
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], crate::target::LabelSet);
    let cases: &[Case<'_>] = &[
        (
            "node ready true",
            &[("Ready", "True")],
            ls! {"__meta_kubernetes_node_condition_ready": "true"},
        ),
        (
            "node ready false",
            &[("Ready", "False")],
            ls! {"__meta_kubernetes_node_condition_ready": "false"},
        ),
        (
            "node ready unknown",
            &[("Ready", "Unknown")],
            ls! {"__meta_kubernetes_node_condition_ready": "unknown"},
        ),
        ("node no conditions", &[], ls! {}),
        (
            "node multiple conditions",
            &[
                ("MemoryPressure", "False"),
                ("Ready", "True"),
                ("DiskPressure", "False"),
            ],
            ls! {
                "__meta_kubernetes_node_condition_memorypressure": "false",
                "__meta_kubernetes_node_condition_ready": "true",
                "__meta_kubernetes_node_condition_diskpressure": "false",
            },
        ),
    ];
    for (name, conditions, extra) in cases {
        let node = mk_node(
            "test",
            "1.2.3.4",
            "aws:///test-zone/i-test",
            &[],
            &[],
            conditions,
        );
        let mut labels = base.clone();
        labels.extend(extra.clone());
        assert_eq!(
            build(&node),
            TargetGroup {
                source: "node/test".into(),
                targets: vec![kubelet_target("test")],
                labels,
            },
            "{name}"
        );
    }
}

fn with_addresses(addrs: &[(&str, &str)]) -> Node {
    let mut node = mk_node("n", "", "", &[], &[], &[]);
    node.status.as_mut().expect("status").addresses = Some(
        addrs
            .iter()
            .map(|(t, a)| NodeAddress {
                type_: (*t).into(),
                address: (*a).into(),
            })
            .collect(),
    );
    node
}

#[test]
fn the_target_address_follows_prometheus_address_type_priority() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("Hostname", "h"),
                ("ExternalIP", "5.5.5.5"),
                ("InternalIP", "10.0.0.1"),
            ],
            "10.0.0.1:10250",
        ),
        (
            &[
                ("Hostname", "h"),
                ("InternalDNS", "n.internal"),
                ("ExternalIP", "5.5.5.5"),
            ],
            "n.internal:10250",
        ),
        (
            &[
                ("Hostname", "h"),
                ("ExternalDNS", "n.example.com"),
                ("ExternalIP", "5.5.5.5"),
            ],
            "5.5.5.5:10250",
        ),
        (
            &[("Hostname", "h"), ("ExternalDNS", "n.example.com")],
            "n.example.com:10250",
        ),
        (
            &[("Hostname", "h"), ("LegacyHostIP", "9.9.9.9")],
            "9.9.9.9:10250",
        ),
        (&[("Hostname", "h")], "h:10250"),
        (&[("InternalIP", "fd00::1")], "[fd00::1]:10250"),
    ];
    for (addrs, want) in cases {
        let g = build(&with_addresses(addrs));
        assert_eq!(g.targets[0]["__address__"], *want, "{addrs:?}");
    }
}

#[test]
fn every_address_type_gets_a_label_with_its_first_address() {
    let g = build(&with_addresses(&[
        ("InternalIP", "10.0.0.1"),
        ("InternalIP", "10.0.0.2"),
        ("Hostname", "host-1"),
        ("Weird-Type", "x"),
    ]));
    assert_eq!(
        g.targets[0],
        ls! {
            "__address__": "10.0.0.1:10250",
            "instance": "n",
            "__meta_kubernetes_node_address_InternalIP": "10.0.0.1",
            "__meta_kubernetes_node_address_Hostname": "host-1",
            "__meta_kubernetes_node_address_Weird_Type": "x",
        }
    );
}

#[test]
fn a_node_without_a_known_address_type_yields_no_group_in_prometheus() {
    let node = with_addresses(&[("Weird", "x")]);
    assert_eq!(try_group(&node, &NoLookup, AttachMetadata::default()), None);
    assert_eq!(
        build(&node),
        TargetGroup {
            source: "node/n".into(),
            ..TargetGroup::default()
        }
    );
}

#[test]
fn a_node_without_daemon_endpoints_gets_kubelet_port_zero() {
    let mut node = mk_node("n", "1.1.1.1", "", &[], &[], &[]);
    node.status.as_mut().expect("status").daemon_endpoints = None;
    assert_eq!(build(&node).targets[0]["__address__"], "1.1.1.1:0");
}
