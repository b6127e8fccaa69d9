//! Ports of prometheus/prometheus `discovery/kubernetes/pod_test.go`: each Go case's input objects go
//! through the builder and must yield the Go case's expected group. Informer-only steps (add, update,
//! delete) become builder calls on the before and after objects.

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{group, group_with_owners, source};
use crate::target::{AttachMetadata, LabelSet, NoLookup, OwnerMetadata, TargetGroup};
use crate::testing::{MapLookup, ls, map, mk_controller, mk_meta, mk_namespace, mk_node, s};

fn port(name: &str, protocol: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: s(name),
        protocol: s(protocol),
        container_port: number,
        ..ContainerPort::default()
    }
}

fn container(name: &str, image: &str, ports: Vec<ContainerPort>) -> Container {
    Container {
        name: name.into(),
        image: s(image),
        ports: (!ports.is_empty()).then_some(ports),
        ..Container::default()
    }
}

fn status(name: &str, id: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        container_id: s(id),
        ..ContainerStatus::default()
    }
}

fn ready(st: &str) -> Option<Vec<PodCondition>> {
    Some(vec![PodCondition {
        type_: "Ready".into(),
        status: st.into(),
        ..PodCondition::default()
    }])
}

/// `makeMultiPortPods`.
fn mk_multi_port_pod() -> Pod {
    Pod {
        metadata: ObjectMeta {
            labels: map(&[("test/label", "testvalue")]),
            annotations: map(&[("test/annotation", "testannotationvalue")]),
            uid: s("abc123"),
            owner_references: Some(vec![mk_controller(
                "testcontrollerkind",
                "testcontrollername",
            )]),
            ..mk_meta("default", "testpod")
        },
        spec: Some(PodSpec {
            node_name: s("testnode"),
            containers: vec![
                container(
                    "testcontainer0",
                    "testcontainer0:latest",
                    vec![
                        port("testport0", "TCP", 9000),
                        port("testport1", "UDP", 9001),
                    ],
                ),
                container("testcontainer1", "testcontainer1:latest", vec![]),
            ],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            pod_ip: s("1.2.3.4"),
            host_ip: s("2.3.4.5"),
            phase: s("Running"),
            conditions: ready("True"),
            container_statuses: Some(vec![
                status("testcontainer0", "docker://a1b2c3d4e5f6"),
                status("testcontainer1", "containerd://6f5e4d3c2b1a"),
            ]),
            ..PodStatus::default()
        }),
    }
}

/// `makePods`.
fn mk_pod(namespace: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            uid: s("abc123"),
            ..mk_meta(namespace, "testpod")
        },
        spec: Some(PodSpec {
            node_name: s("testnode"),
            containers: vec![container(
                "testcontainer",
                "testcontainer:latest",
                vec![port("testport", "TCP", 9000)],
            )],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            pod_ip: s("1.2.3.4"),
            host_ip: s("2.3.4.5"),
            phase: s("Running"),
            conditions: ready("True"),
            container_statuses: Some(vec![status("testcontainer", "docker://a1b2c3d4e5f6")]),
            ..PodStatus::default()
        }),
    }
}

/// `makeInitContainerPods`.
fn mk_init_container_pod() -> Pod {
    let mut pod = mk_pod("default");
    let spec = pod.spec.as_mut().expect("spec");
    spec.init_containers = Some(vec![container(
        "initcontainer",
        "initcontainer:latest",
        vec![],
    )]);
    let st = pod.status.as_mut().expect("status");
    st.phase = s("Pending");
    st.conditions = ready("False");
    st.init_container_statuses = Some(vec![status("initcontainer", "containerd://6f5e4d3c2b1a")]);
    pod
}

/// `expectedPodTargetGroups`.
fn expected_pod_group(ns: &str) -> TargetGroup {
    TargetGroup {
        source: format!("pod/{ns}/testpod"),
        targets: vec![ls! {
            "__address__": "1.2.3.4:9000",
            "__meta_kubernetes_pod_container_name": "testcontainer",
            "__meta_kubernetes_pod_container_image": "testcontainer:latest",
            "__meta_kubernetes_pod_container_port_name": "testport",
            "__meta_kubernetes_pod_container_port_number": "9000",
            "__meta_kubernetes_pod_container_port_protocol": "TCP",
            "__meta_kubernetes_pod_container_init": "false",
            "__meta_kubernetes_pod_container_id": "docker://a1b2c3d4e5f6",
        }],
        labels: ls! {
            "__meta_kubernetes_pod_name": "testpod",
            "__meta_kubernetes_namespace": ns,
            "__meta_kubernetes_pod_node_name": "testnode",
            "__meta_kubernetes_pod_ip": "1.2.3.4",
            "__meta_kubernetes_pod_host_ip": "2.3.4.5",
            "__meta_kubernetes_pod_ready": "true",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_uid": "abc123",
        },
    }
}

/// `expectedPodTargetGroupsWithNodeMeta`.
fn expected_pod_group_with_node_meta(
    ns: &str,
    node: &str,
    node_labels: &[(&str, &str)],
) -> TargetGroup {
    let mut g = expected_pod_group(ns);
    g.labels
        .insert("__meta_kubernetes_node_name".into(), node.into());
    for (k, v) in node_labels {
        g.labels
            .insert(format!("__meta_kubernetes_node_label_{k}"), (*v).into());
        g.labels.insert(
            format!("__meta_kubernetes_node_labelpresent_{k}"),
            "true".into(),
        );
    }
    g
}

const NODE: AttachMetadata = AttachMetadata {
    node: true,
    namespace: false,
};
const NAMESPACE: AttachMetadata = AttachMetadata {
    node: false,
    namespace: true,
};

fn single_port_target() -> LabelSet {
    expected_pod_group("default").targets.remove(0)
}

#[test]
fn multi_port_pod_yields_one_target_per_port_and_one_for_the_portless_container() {
    let g = group(&mk_multi_port_pod(), &NoLookup, AttachMetadata::default());
    let expected = TargetGroup {
        source: "pod/default/testpod".into(),
        targets: vec![
            ls! {
                "__address__": "1.2.3.4:9000",
                "__meta_kubernetes_pod_container_name": "testcontainer0",
                "__meta_kubernetes_pod_container_image": "testcontainer0:latest",
                "__meta_kubernetes_pod_container_port_name": "testport0",
                "__meta_kubernetes_pod_container_port_number": "9000",
                "__meta_kubernetes_pod_container_port_protocol": "TCP",
                "__meta_kubernetes_pod_container_init": "false",
                "__meta_kubernetes_pod_container_id": "docker://a1b2c3d4e5f6",
            },
            ls! {
                "__address__": "1.2.3.4:9001",
                "__meta_kubernetes_pod_container_name": "testcontainer0",
                "__meta_kubernetes_pod_container_image": "testcontainer0:latest",
                "__meta_kubernetes_pod_container_port_name": "testport1",
                "__meta_kubernetes_pod_container_port_number": "9001",
                "__meta_kubernetes_pod_container_port_protocol": "UDP",
                "__meta_kubernetes_pod_container_init": "false",
                "__meta_kubernetes_pod_container_id": "docker://a1b2c3d4e5f6",
            },
            ls! {
                "__address__": "1.2.3.4",
                "__meta_kubernetes_pod_container_name": "testcontainer1",
                "__meta_kubernetes_pod_container_image": "testcontainer1:latest",
                "__meta_kubernetes_pod_container_init": "false",
                "__meta_kubernetes_pod_container_id": "containerd://6f5e4d3c2b1a",
            },
        ],
        labels: ls! {
            "__meta_kubernetes_pod_name": "testpod",
            "__meta_kubernetes_namespace": "default",
            "__meta_kubernetes_pod_label_test_label": "testvalue",
            "__meta_kubernetes_pod_labelpresent_test_label": "true",
            "__meta_kubernetes_pod_annotation_test_annotation": "testannotationvalue",
            "__meta_kubernetes_pod_annotationpresent_test_annotation": "true",
            "__meta_kubernetes_pod_node_name": "testnode",
            "__meta_kubernetes_pod_ip": "1.2.3.4",
            "__meta_kubernetes_pod_host_ip": "2.3.4.5",
            "__meta_kubernetes_pod_ready": "true",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_uid": "abc123",
            "__meta_kubernetes_pod_controller_kind": "testcontrollerkind",
            "__meta_kubernetes_pod_controller_name": "testcontrollername",
        },
    };
    assert_eq!(g, expected);
}

#[test]
fn init_containers_come_after_regular_ones_and_are_marked_init() {
    let mut expected = expected_pod_group("default");
    expected.targets.push(ls! {
        "__address__": "1.2.3.4",
        "__meta_kubernetes_pod_container_name": "initcontainer",
        "__meta_kubernetes_pod_container_image": "initcontainer:latest",
        "__meta_kubernetes_pod_container_init": "true",
        "__meta_kubernetes_pod_container_id": "containerd://6f5e4d3c2b1a",
    });
    expected
        .labels
        .insert("__meta_kubernetes_pod_phase".into(), "Pending".into());
    expected
        .labels
        .insert("__meta_kubernetes_pod_ready".into(), "false".into());
    assert_eq!(
        group(
            &mk_init_container_pod(),
            &NoLookup,
            AttachMetadata::default()
        ),
        expected
    );
}

#[test]
fn an_added_pod_yields_its_group() {
    assert_eq!(
        group(&mk_pod("default"), &NoLookup, AttachMetadata::default()),
        expected_pod_group("default")
    );
}

#[test]
fn a_deleted_pod_is_announced_by_an_empty_group_with_its_source() {
    // Go: TestPodDiscoveryDelete expects `{Source: "pod/default/testpod"}` after the delete.
    let deleted = TargetGroup {
        source: source("default", "testpod"),
        ..TargetGroup::default()
    };
    assert_eq!(deleted.source, expected_pod_group("default").source);
    assert!(deleted.targets.is_empty() && deleted.labels.is_empty());
}

#[test]
fn an_updated_pod_yields_the_group_of_its_new_state() {
    let before = Pod {
        metadata: ObjectMeta {
            uid: s("xyz321"),
            ..mk_meta("default", "testpod")
        },
        spec: mk_pod("default").spec,
        status: Some(PodStatus {
            pod_ip: s("1.2.3.4"),
            host_ip: s("2.3.4.5"),
            ..PodStatus::default()
        }),
    };
    let first = group(&before, &NoLookup, AttachMetadata::default());
    assert_eq!(first.labels["__meta_kubernetes_pod_uid"], "xyz321");
    assert_eq!(first.labels["__meta_kubernetes_pod_ready"], "unknown");
    assert_eq!(first.labels["__meta_kubernetes_pod_phase"], "");
    assert_eq!(first.targets[0]["__meta_kubernetes_pod_container_id"], "");
    assert_eq!(
        group(&mk_pod("default"), &NoLookup, AttachMetadata::default()),
        expected_pod_group("default")
    );
}

#[test]
fn a_pod_that_loses_its_ip_yields_an_empty_group() {
    let mut updated = mk_pod("default");
    updated.status.as_mut().expect("status").pod_ip = s("");
    assert_eq!(
        group(&updated, &NoLookup, AttachMetadata::default()),
        TargetGroup {
            source: "pod/default/testpod".into(),
            ..TargetGroup::default()
        }
    );
    updated.status.as_mut().expect("status").pod_ip = None;
    assert!(
        group(&updated, &NoLookup, AttachMetadata::default())
            .targets
            .is_empty()
    );
}

#[test]
fn pods_in_several_namespaces_get_their_own_namespace_label_and_source() {
    for ns in ["ns1", "ns2", "own-ns"] {
        assert_eq!(
            group(&mk_pod(ns), &NoLookup, AttachMetadata::default()),
            expected_pod_group(ns)
        );
    }
}

#[test]
fn node_metadata_adds_the_node_name_and_labels_to_the_group() {
    let lookup = MapLookup::default().node(mk_node("testnode", "", "", &[("l1", "v1")], &[], &[]));
    assert_eq!(
        group(&mk_pod("default"), &lookup, NODE),
        expected_pod_group_with_node_meta("default", "testnode", &[("l1", "v1")])
    );
}

#[test]
fn node_metadata_follows_an_updated_node() {
    let old = MapLookup::default().node(mk_node("testnode", "", "", &[("l1", "v1")], &[], &[]));
    let new = MapLookup::default().node(mk_node("testnode", "", "", &[("l2", "v2")], &[], &[]));
    assert_eq!(
        group(&mk_pod("default"), &old, NODE),
        expected_pod_group_with_node_meta("default", "testnode", &[("l1", "v1")])
    );
    assert_eq!(
        group(&mk_pod("default"), &new, NODE),
        expected_pod_group_with_node_meta("default", "testnode", &[("l2", "v2")])
    );
}

fn mk_ns_lookup(ns: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> MapLookup {
    MapLookup::default().namespace(mk_namespace(ns, labels, annotations))
}

#[test]
fn namespace_metadata_adds_the_namespace_labels_and_annotations() {
    let ns = "test-ns";
    let lookup = mk_ns_lookup(
        ns,
        &[("app", "web"), ("tier", "frontend")],
        &[("maintainer", "devops"), ("build", "v3.4.5")],
    );
    let expected = TargetGroup {
        source: format!("pod/{ns}/testpod"),
        targets: vec![single_port_target()],
        labels: ls! {
            "__meta_kubernetes_namespace": ns,
            "__meta_kubernetes_namespace_annotation_maintainer": "devops",
            "__meta_kubernetes_namespace_annotationpresent_maintainer": "true",
            "__meta_kubernetes_namespace_annotation_build": "v3.4.5",
            "__meta_kubernetes_namespace_annotationpresent_build": "true",
            "__meta_kubernetes_namespace_label_app": "web",
            "__meta_kubernetes_namespace_labelpresent_app": "true",
            "__meta_kubernetes_namespace_label_tier": "frontend",
            "__meta_kubernetes_namespace_labelpresent_tier": "true",
            "__meta_kubernetes_pod_name": "testpod",
            "__meta_kubernetes_pod_ip": "1.2.3.4",
            "__meta_kubernetes_pod_ready": "true",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_node_name": "testnode",
            "__meta_kubernetes_pod_host_ip": "2.3.4.5",
            "__meta_kubernetes_pod_uid": "abc123",
        },
    };
    assert_eq!(group(&mk_pod(ns), &lookup, NAMESPACE), expected);
    // Without attach_metadata.namespace the same lookup adds nothing.
    assert_eq!(
        group(&mk_pod(ns), &lookup, AttachMetadata::default()),
        expected_pod_group(ns)
    );
}

#[test]
fn namespace_metadata_follows_an_updated_namespace() {
    let ns = "test-ns";
    let updated = mk_ns_lookup(
        ns,
        &[("app", "service"), ("tier", "backend"), ("zone", "us-east")],
        &[
            ("maintainer", "sre"),
            ("build", "v4.5.6"),
            ("deployment", "canary"),
        ],
    );
    let expected = TargetGroup {
        source: format!("pod/{ns}/testpod"),
        targets: vec![single_port_target()],
        labels: ls! {
            "__meta_kubernetes_namespace": ns,
            "__meta_kubernetes_namespace_annotation_maintainer": "sre",
            "__meta_kubernetes_namespace_annotationpresent_maintainer": "true",
            "__meta_kubernetes_namespace_annotation_build": "v4.5.6",
            "__meta_kubernetes_namespace_annotationpresent_build": "true",
            "__meta_kubernetes_namespace_annotation_deployment": "canary",
            "__meta_kubernetes_namespace_annotationpresent_deployment": "true",
            "__meta_kubernetes_namespace_label_app": "service",
            "__meta_kubernetes_namespace_labelpresent_app": "true",
            "__meta_kubernetes_namespace_label_tier": "backend",
            "__meta_kubernetes_namespace_labelpresent_tier": "true",
            "__meta_kubernetes_namespace_label_zone": "us-east",
            "__meta_kubernetes_namespace_labelpresent_zone": "true",
            "__meta_kubernetes_pod_name": "testpod",
            "__meta_kubernetes_pod_ip": "1.2.3.4",
            "__meta_kubernetes_pod_ready": "true",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_node_name": "testnode",
            "__meta_kubernetes_pod_host_ip": "2.3.4.5",
            "__meta_kubernetes_pod_uid": "abc123",
        },
    };
    let before = mk_ns_lookup(
        ns,
        &[("app", "api"), ("tier", "backend")],
        &[("maintainer", "platform"), ("build", "v4.5.6")],
    );
    assert_ne!(group(&mk_pod(ns), &before, NAMESPACE), expected);
    assert_eq!(group(&mk_pod(ns), &updated, NAMESPACE), expected);
}

#[test]
fn with_node_metadata_a_pod_on_a_node_filtered_out_by_node_selectors_yields_an_empty_group() {
    // Go: TestPodDiscoveryWithNodeSelector — only the worker node passes the node selector, so only it
    // is in the node store.
    let lookup = MapLookup::default().node(mk_node(
        "worker-node",
        "10.0.0.1",
        "",
        &[("node-type", "worker")],
        &[],
        &[],
    ));
    let mut on_worker = mk_pod("default");
    on_worker.metadata.name = s("pod-on-worker");
    on_worker.metadata.uid = s("worker-pod-123");
    on_worker.spec.as_mut().expect("spec").node_name = s("worker-node");
    on_worker.status.as_mut().expect("status").pod_ip = s("192.168.1.1");
    let mut on_filtered = mk_pod("default");
    on_filtered.metadata.name = s("pod-on-filtered-node");
    on_filtered.metadata.uid = s("filtered-pod-456");
    on_filtered.spec.as_mut().expect("spec").node_name = s("filtered-node");
    on_filtered.status.as_mut().expect("status").pod_ip = s("192.168.1.2");

    let mut target = single_port_target();
    target.insert("__address__".into(), "192.168.1.1:9000".into());
    assert_eq!(
        group(&on_worker, &lookup, NODE),
        TargetGroup {
            source: "pod/default/pod-on-worker".into(),
            targets: vec![target],
            labels: ls! {
                "__meta_kubernetes_namespace": "default",
                "__meta_kubernetes_pod_name": "pod-on-worker",
                "__meta_kubernetes_pod_ip": "192.168.1.1",
                "__meta_kubernetes_pod_ready": "true",
                "__meta_kubernetes_pod_phase": "Running",
                "__meta_kubernetes_pod_node_name": "worker-node",
                "__meta_kubernetes_pod_host_ip": "2.3.4.5",
                "__meta_kubernetes_pod_uid": "worker-pod-123",
                "__meta_kubernetes_node_name": "worker-node",
                "__meta_kubernetes_node_label_node_type": "worker",
                "__meta_kubernetes_node_labelpresent_node_type": "true",
            },
        }
    );
    assert_eq!(
        group(&on_filtered, &lookup, NODE),
        TargetGroup {
            source: "pod/default/pod-on-filtered-node".into(),
            ..TargetGroup::default()
        }
    );
}

fn mk_replica_set(name: &str, ns: &str, deployment: &str) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            uid: s("rs123"),
            owner_references: Some(vec![mk_controller("Deployment", deployment)]),
            ..mk_meta(ns, name)
        },
        ..ReplicaSet::default()
    }
}

fn mk_job(name: &str, ns: &str, cronjob: &str) -> Job {
    Job {
        metadata: ObjectMeta {
            uid: s("job123"),
            owner_references: (!cronjob.is_empty())
                .then(|| vec![mk_controller("CronJob", cronjob)]),
            ..mk_meta(ns, name)
        },
        ..Job::default()
    }
}

/// `makeReplicaSetOwnedPod` / `makeJobOwnedPod`.
fn mk_owned_pod(ns: &str, kind: &str, owner: &str) -> Pod {
    let mut pod = mk_pod(ns);
    pod.metadata.uid = s("pod123");
    pod.metadata.owner_references = Some(vec![mk_controller(kind, owner)]);
    pod
}

fn expected_owned_group(kind: &str, owner: &str, extra: LabelSet) -> TargetGroup {
    let mut labels = ls! {
        "__meta_kubernetes_pod_name": "testpod",
        "__meta_kubernetes_namespace": "default",
        "__meta_kubernetes_pod_node_name": "testnode",
        "__meta_kubernetes_pod_ip": "1.2.3.4",
        "__meta_kubernetes_pod_host_ip": "2.3.4.5",
        "__meta_kubernetes_pod_ready": "true",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_uid": "pod123",
        "__meta_kubernetes_pod_controller_kind": kind,
        "__meta_kubernetes_pod_controller_name": owner,
    };
    labels.extend(extra);
    TargetGroup {
        source: "pod/default/testpod".into(),
        targets: vec![single_port_target()],
        labels,
    }
}

const DEPLOYMENT: OwnerMetadata = OwnerMetadata {
    deployment: true,
    job: false,
    cronjob: false,
};
const JOB: OwnerMetadata = OwnerMetadata {
    deployment: false,
    job: true,
    cronjob: false,
};
const CRONJOB: OwnerMetadata = OwnerMetadata {
    deployment: false,
    job: false,
    cronjob: true,
};

#[test]
fn deployment_metadata_names_the_deployment_owning_the_pods_replica_set() {
    let lookup = MapLookup::default().replica_set(mk_replica_set(
        "testdeployment-rs-abc",
        "default",
        "testdeployment",
    ));
    let pod = mk_owned_pod("default", "ReplicaSet", "testdeployment-rs-abc");
    let expected = expected_owned_group(
        "ReplicaSet",
        "testdeployment-rs-abc",
        ls! {"__meta_kubernetes_pod_deployment_name": "testdeployment"},
    );
    assert_eq!(
        group_with_owners(&pod, &lookup, AttachMetadata::default(), DEPLOYMENT),
        expected
    );
    // Go: TestPodDiscoveryWithDeploymentUpdate — changing the Deployment's own labels changes nothing.
    assert_eq!(
        group_with_owners(&pod, &lookup, AttachMetadata::default(), DEPLOYMENT),
        expected
    );
    // Without the option, or without the ReplicaSet, there is no deployment label.
    let plain = expected_owned_group("ReplicaSet", "testdeployment-rs-abc", LabelSet::new());
    assert_eq!(group(&pod, &lookup, AttachMetadata::default()), plain);
    assert_eq!(
        group_with_owners(&pod, &NoLookup, AttachMetadata::default(), DEPLOYMENT),
        plain
    );
}

#[test]
fn job_metadata_names_the_owning_job() {
    let lookup = MapLookup::default().job(mk_job("testjob", "default", ""));
    let pod = mk_owned_pod("default", "Job", "testjob");
    let expected = expected_owned_group(
        "Job",
        "testjob",
        ls! {"__meta_kubernetes_pod_job_name": "testjob"},
    );
    assert_eq!(
        group_with_owners(&pod, &lookup, AttachMetadata::default(), JOB),
        expected
    );
    // The job name needs no lookup at all (Go: TestPodDiscoveryWithJobUpdate).
    assert_eq!(
        group_with_owners(&pod, &NoLookup, AttachMetadata::default(), JOB),
        expected
    );
}

#[test]
fn job_metadata_alone_does_not_name_the_cronjob() {
    // Go: TestPodDiscoveryWithCronJob runs with `Job: true` only.
    let lookup = MapLookup::default().job(mk_job("testcronjob-job-abc", "default", "testcronjob"));
    let pod = mk_owned_pod("default", "Job", "testcronjob-job-abc");
    assert_eq!(
        group_with_owners(&pod, &lookup, AttachMetadata::default(), JOB),
        expected_owned_group(
            "Job",
            "testcronjob-job-abc",
            ls! {"__meta_kubernetes_pod_job_name": "testcronjob-job-abc"},
        )
    );
}

#[test]
fn cronjob_metadata_names_the_cronjob_owning_the_pods_job() {
    // Go: TestPodDiscoveryWithCronJobUpdate runs with `CronJob: true` only: no job name label.
    let lookup = MapLookup::default().job(mk_job("testcronjob-job-abc", "default", "testcronjob"));
    let pod = mk_owned_pod("default", "Job", "testcronjob-job-abc");
    assert_eq!(
        group_with_owners(&pod, &lookup, AttachMetadata::default(), CRONJOB),
        expected_owned_group(
            "Job",
            "testcronjob-job-abc",
            ls! {"__meta_kubernetes_pod_cronjob_name": "testcronjob"},
        )
    );
}

#[test]
fn ipv6_pod_addresses_are_bracketed() {
    let mut pod = mk_pod("default");
    pod.status.as_mut().expect("status").pod_ip = s("2001:db8::1");
    let g = group(&pod, &NoLookup, AttachMetadata::default());
    assert_eq!(g.targets[0]["__address__"], "[2001:db8::1]:9000");
    assert_eq!(g.labels["__meta_kubernetes_pod_ip"], "2001:db8::1");
}

/// A lookup that keeps each pod's labels, as herald's index does while it builds a chunk of groups.
struct Memo(
    std::cell::RefCell<Vec<(usize, std::sync::Arc<LabelSet>)>>,
    std::cell::Cell<usize>,
);

impl crate::target::Lookup for Memo {
    fn pod(&self, _: &str, _: &str) -> Option<&Pod> {
        None
    }
    fn service(&self, _: &str, _: &str) -> Option<&k8s_openapi::api::core::v1::Service> {
        None
    }
    fn node(&self, _: &str) -> Option<&k8s_openapi::api::core::v1::Node> {
        None
    }
    fn namespace(&self, _: &str) -> Option<&k8s_openapi::api::core::v1::Namespace> {
        None
    }
    fn memo_pod_labels(&self, pod: &Pod, build: &dyn Fn() -> LabelSet) -> std::sync::Arc<LabelSet> {
        let at = std::ptr::from_ref(pod) as usize;
        let mut memo = self.0.borrow_mut();
        if let Some((_, l)) = memo.iter().find(|(p, _)| *p == at) {
            return l.clone();
        }
        self.1.set(self.1.get() + 1);
        let l = std::sync::Arc::new(build());
        memo.push((at, l.clone()));
        l
    }
}

#[test]
fn the_shared_pod_group_serves_the_same_targets_and_builds_the_pod_labels_once_per_memo() {
    let pod = mk_multi_port_pod();
    let memo = Memo(Default::default(), Default::default());
    let shared = super::shared_group_with_owners(
        &pod,
        &memo,
        AttachMetadata::default(),
        OwnerMetadata::default(),
    );
    let plain = group(&pod, &NoLookup, AttachMetadata::default());
    // Every target carries the group's labels and the pod's: the same label sets as the plain group.
    let served = |labels: &LabelSet, targets: Vec<LabelSet>| -> Vec<LabelSet> {
        targets
            .into_iter()
            .map(|t| {
                let mut all = labels.clone();
                all.extend(t);
                all
            })
            .collect()
    };
    let flat = shared.clone().flatten();
    assert_eq!(
        served(&flat.labels, flat.targets),
        served(&plain.labels, plain.targets)
    );
    assert!(shared.targets.len() > 1);
    let first = shared.targets[0].pod.clone().expect("pod labels");
    assert!(
        shared.targets.iter().all(|t| t
            .pod
            .as_ref()
            .is_some_and(|p| std::sync::Arc::ptr_eq(p, &first))),
        "one pod label set for every target"
    );
    // Built again from the same pod through the same memo: the same labels, not rebuilt.
    let again = super::shared_group_with_owners(
        &pod,
        &memo,
        AttachMetadata::default(),
        OwnerMetadata::default(),
    );
    assert!(std::sync::Arc::ptr_eq(
        again.targets[0].pod.as_ref().expect("pod labels"),
        &first
    ));
    assert_eq!(memo.1.get(), 1, "podLabels built once");
    // With pod-owner metadata the labels read other objects, so the memo is not used.
    let owners = OwnerMetadata {
        deployment: true,
        ..OwnerMetadata::default()
    };
    super::shared_group_with_owners(&pod, &memo, AttachMetadata::default(), owners);
    assert_eq!(memo.1.get(), 1);
}
