//! The crate-root API other crates code against: one builder per role, HTTP SD flattening and
//! encoding, hashmod and the job file, exercised together as a consumer would.

use std::collections::BTreeMap;

use herald_core::{
    AttachMetadata, HttpSdEntry, Lookup, NoLookup, Role, TargetGroup, encode_http_sd,
    endpoints_group, endpointslice_group, hashmod, http_sd_entries, ingress_group, node_group,
    parse_config, pod_group, service_group,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Namespace,
    Node, NodeAddress, NodeStatus, Pod, PodSpec, PodStatus, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::api::networking::v1::{Ingress, IngressRule, IngressSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: (!ns.is_empty()).then(|| ns.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

fn mk_pod(name: &str, ip: &str, ports: &[i32]) -> Pod {
    Pod {
        metadata: meta("default", name),
        spec: Some(PodSpec {
            node_name: Some("n1".into()),
            containers: vec![Container {
                name: "app".into(),
                ports: Some(
                    ports
                        .iter()
                        .map(|p| ContainerPort {
                            container_port: *p,
                            ..ContainerPort::default()
                        })
                        .collect(),
                ),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            pod_ip: Some(ip.into()),
            ..PodStatus::default()
        }),
    }
}

/// A consumer-side lookup, as the server's cache would implement it.
struct Store {
    pods: BTreeMap<(String, String), Pod>,
    namespaces: BTreeMap<String, Namespace>,
}

impl Lookup for Store {
    fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pods.get(&(namespace.to_owned(), name.to_owned()))
    }
    fn service(&self, _: &str, _: &str) -> Option<&Service> {
        None
    }
    fn node(&self, _: &str) -> Option<&Node> {
        None
    }
    fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.get(name)
    }
}

#[test]
fn every_role_builder_is_reachable_from_the_crate_root_with_prometheus_sources() {
    let none = AttachMetadata::default();
    let pod = pod_group(&mk_pod("p", "10.0.0.1", &[80]), &NoLookup, none);
    assert_eq!(pod.source, "pod/default/p");

    let svc = Service {
        metadata: meta("default", "s"),
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port: 80,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    assert_eq!(service_group(&svc, &NoLookup, none).source, "svc/default/s");

    let ep = Endpoints {
        metadata: meta("default", "s"),
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: "10.0.0.1".into(),
                ..EndpointAddress::default()
            }]),
            ports: Some(vec![EndpointPort {
                port: 80,
                ..EndpointPort::default()
            }]),
            ..EndpointSubset::default()
        }]),
    };
    assert_eq!(
        endpoints_group(&ep, &NoLookup, none).source,
        "endpoints/default/s"
    );

    let es = EndpointSlice {
        metadata: meta("default", "s-abc"),
        address_type: "IPv4".into(),
        endpoints: vec![Endpoint {
            addresses: vec!["10.0.0.1".into()],
            ..Endpoint::default()
        }],
        ports: None,
    };
    assert_eq!(
        endpointslice_group(&es, &NoLookup, none).source,
        "endpointslice/default/s-abc"
    );

    let node = Node {
        metadata: meta("", "n1"),
        spec: None,
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: "192.0.2.1".into(),
            }]),
            ..NodeStatus::default()
        }),
    };
    assert_eq!(node_group(&node, &NoLookup, none).source, "node/n1");

    let ing = Ingress {
        metadata: meta("default", "i"),
        spec: Some(IngressSpec {
            rules: Some(vec![IngressRule {
                host: Some("example.com".into()),
                http: None,
            }]),
            ..IngressSpec::default()
        }),
        status: None,
    };
    assert_eq!(
        ingress_group(&ing, &NoLookup, none).source,
        "ingress/default/i"
    );
}

#[test]
fn endpoints_targets_flatten_to_http_sd_and_shard_by_address() {
    let store = Store {
        pods: [(
            ("default".to_owned(), "p".to_owned()),
            mk_pod("p", "10.0.0.1", &[8080, 9090]),
        )]
        .into_iter()
        .collect(),
        namespaces: BTreeMap::new(),
    };
    let ep = Endpoints {
        metadata: meta("default", "web"),
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: "10.0.0.1".into(),
                target_ref: Some(k8s_openapi::api::core::v1::ObjectReference {
                    kind: Some("Pod".into()),
                    name: Some("p".into()),
                    namespace: Some("default".into()),
                    ..Default::default()
                }),
                ..EndpointAddress::default()
            }]),
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: 8080,
                ..EndpointPort::default()
            }]),
            ..EndpointSubset::default()
        }]),
    };
    let group: TargetGroup = endpoints_group(&ep, &store, AttachMetadata::default());
    let entries: Vec<HttpSdEntry> = http_sd_entries(&group);
    let addrs: Vec<&str> = entries.iter().map(|e| e.target.as_str()).collect();
    // The endpoint port first, then the pod's uncovered container port.
    assert_eq!(addrs, ["10.0.0.1:8080", "10.0.0.1:9090"]);
    for e in &entries {
        assert_eq!(e.labels["__meta_kubernetes_endpoints_name"], "web");
        assert_eq!(e.labels["__meta_kubernetes_pod_name"], "p");
        assert!(!e.labels.contains_key("__address__"));
    }
    let body: serde_json::Value =
        serde_json::from_slice(&encode_http_sd(&entries)).expect("valid json");
    assert_eq!(body[1]["targets"][0], "10.0.0.1:9090");

    // Splitting the entries over 3 shards with hashmod keeps every target exactly once.
    let mut per_shard = [0usize; 3];
    for e in &entries {
        per_shard[hashmod(&e.target, 3) as usize] += 1;
    }
    assert_eq!(per_shard.iter().sum::<usize>(), entries.len());
}

#[test]
fn a_job_file_drives_the_builders() {
    let cfg = parse_config(
        "jobs:\n  - name: pods\n    role: pod\n    attach_metadata:\n      namespace: true\n",
    )
    .expect("valid");
    let job = &cfg.jobs[0];
    assert_eq!(job.role, Role::Pod);
    let store = Store {
        pods: BTreeMap::new(),
        namespaces: [(
            "default".to_owned(),
            Namespace {
                metadata: ObjectMeta {
                    name: Some("default".into()),
                    labels: Some([("team".to_owned(), "a".to_owned())].into_iter().collect()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )]
        .into_iter()
        .collect(),
    };
    let g = pod_group(&mk_pod("p", "10.0.0.1", &[80]), &store, job.attach_metadata);
    assert_eq!(g.labels["__meta_kubernetes_namespace_label_team"], "a");
}
