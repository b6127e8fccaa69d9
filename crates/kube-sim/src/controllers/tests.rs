//! Tests of the endpoint controllers through their public face: feed objects, check the writes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Node, Pod, PodCondition, PodIP, PodSpec, PodStatus, Service,
    ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{CONTROLLER_NAME, EndpointsControllers, LABEL_HEADLESS};
use crate::kind::{Kind, Object, Write};

pub(super) fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

pub(super) fn mk_node(name: &str, zone: &str) -> Object {
    Object::Node(Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: labels(&[("topology.kubernetes.io/zone", zone)]),
            ..Default::default()
        },
        ..Default::default()
    })
}

pub(super) fn svc_port(name: &str, port: i32, target: IntOrString) -> ServicePort {
    ServicePort {
        name: Some(name.into()).filter(|n: &String| !n.is_empty()),
        port,
        target_port: Some(target),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

pub(super) fn mk_service(
    name: &str,
    selector: &[(&str, &str)],
    ports: Vec<ServicePort>,
) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-svc-{name}")),
            labels: labels(&[("team", "a")]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(selector).filter(|s| !s.is_empty()).and_then(labels),
            ports: Some(ports),
            cluster_ip: Some("10.96.0.10".into()),
            ip_families: Some(vec!["IPv4".into()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A running, ready pod on `node` with one container exposing `http` on `port`.
pub(super) fn mk_pod(name: &str, app: &str, ip: &str, node: &str, port: i32) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            labels: labels(&[("app", app)]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "main".into(),
                ports: Some(vec![ContainerPort {
                    name: Some("http".into()),
                    container_port: port,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some(ip.into()),
            pod_ips: Some(vec![PodIP { ip: ip.into() }]),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

pub(super) fn set_ready(pod: &mut Pod, ready: bool) {
    let status = pod.status.as_mut().unwrap();
    status.conditions.as_mut().unwrap()[0].status = if ready { "True" } else { "False" }.into();
}

pub(super) fn set_terminating(pod: &mut Pod) {
    pod.metadata.deletion_timestamp = Some(Time("2026-01-01T00:00:00Z".parse().unwrap()));
}

/// `n` ready pods `p0..` labelled app=`app`, IPs 10.1.x.y, spread over nodes n0..n2.
pub(super) fn mk_pods(app: &str, n: usize) -> Vec<Object> {
    (0..n)
        .map(|i| {
            let ip = format!("10.1.{}.{}", i / 250, i % 250 + 1);
            Object::Pod(mk_pod(
                &format!("p{i}"),
                app,
                &ip,
                &format!("n{}", i % 3),
                8080,
            ))
        })
        .collect()
}

pub(super) fn nodes() -> Vec<Object> {
    vec![
        mk_node("n0", "z-a"),
        mk_node("n1", "z-b"),
        mk_node("n2", "z-c"),
    ]
}

/// A minimal store: applies writes, keyed by (kind, namespace, name).
#[derive(Default)]
pub(super) struct Store {
    pub(super) objects: BTreeMap<(Kind, String, String), Object>,
}

impl Store {
    pub(super) fn apply(&mut self, writes: &[Write]) {
        for w in writes {
            match w {
                Write::Put(o) => {
                    let j = o.to_json();
                    let key = (
                        o.kind(),
                        j["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                        j["metadata"]["name"].as_str().unwrap().to_string(),
                    );
                    self.objects.insert(key, o.clone());
                }
                Write::Delete {
                    kind,
                    namespace,
                    name,
                } => {
                    let key = (*kind, namespace.clone().unwrap_or_default(), name.clone());
                    assert!(
                        self.objects.remove(&key).is_some(),
                        "delete of unknown {key:?}"
                    );
                }
            }
        }
    }

    pub(super) fn slices(&self) -> Vec<&k8s_openapi::api::discovery::v1::EndpointSlice> {
        self.objects
            .values()
            .filter_map(|o| match o {
                Object::EndpointSlice(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    pub(super) fn endpoints(&self, name: &str) -> Option<&k8s_openapi::api::core::v1::Endpoints> {
        match self
            .objects
            .get(&(Kind::Endpoints, "default".into(), name.into()))
        {
            Some(Object::Endpoints(e)) => Some(e),
            _ => None,
        }
    }
}

/// Slice writes (puts and deletes) among `writes`.
pub(super) fn slice_writes(writes: &[Write]) -> usize {
    writes
        .iter()
        .filter(|w| match w {
            Write::Put(o) => o.kind() == Kind::EndpointSlice,
            Write::Delete { kind, .. } => *kind == Kind::EndpointSlice,
        })
        .count()
}

// ---- EndpointSlice controller ----

pub(super) fn ep_names(s: &k8s_openapi::api::discovery::v1::EndpointSlice) -> Vec<String> {
    let mut v: Vec<String> = s
        .endpoints
        .iter()
        .map(|e| e.target_ref.as_ref().unwrap().name.clone().unwrap())
        .collect();
    v.sort();
    v
}

pub(super) fn setup(
    svc: k8s_openapi::api::core::v1::Service,
    pods: Vec<Object>,
) -> (EndpointsControllers, Store) {
    let mut c = EndpointsControllers::new();
    let mut store = Store::default();
    let mut objs = nodes();
    objs.push(Object::Service(svc));
    objs.extend(pods);
    store.apply(&c.on_puts(objs.iter()));
    (c, store)
}

#[test]
fn slices_carry_service_labels_owner_and_endpoint_details() {
    let svc = mk_service(
        "web",
        &[("app", "web")],
        vec![svc_port("http", 80, IntOrString::Int(8080))],
    );
    let (_, store) = setup(svc, mk_pods("web", 3));
    let slices = store.slices();
    assert_eq!(slices.len(), 1);
    let s = slices[0];
    let labels = s.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["kubernetes.io/service-name"], "web");
    assert_eq!(
        labels["endpointslice.kubernetes.io/managed-by"],
        CONTROLLER_NAME
    );
    assert_eq!(labels["team"], "a", "service labels are mirrored");
    assert!(!labels.contains_key(LABEL_HEADLESS));
    let name = s.metadata.name.as_ref().unwrap();
    assert!(
        name.starts_with("web-") && name.len() == "web-".len() + 5,
        "{name}"
    );
    assert_eq!(s.metadata.generate_name.as_deref(), Some("web-"));
    let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Service", "web", "uid-svc-web")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(s.address_type, "IPv4");
    let port = &s.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.port, port.protocol.as_deref()),
        (Some("http"), Some(8080), Some("TCP"))
    );
    let ep = s
        .endpoints
        .iter()
        .find(|e| e.target_ref.as_ref().unwrap().name.as_deref() == Some("p1"))
        .unwrap();
    assert_eq!(ep.addresses, ["10.1.0.2"]);
    assert_eq!(ep.node_name.as_deref(), Some("n1"));
    assert_eq!(ep.zone.as_deref(), Some("z-b"));
    assert_eq!(
        ep.target_ref.as_ref().unwrap().uid.as_deref(),
        Some("uid-p1")
    );
    assert_eq!(ep.target_ref.as_ref().unwrap().kind.as_deref(), Some("Pod"));
    let c = ep.conditions.as_ref().unwrap();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(true), Some(true), Some(false))
    );
    assert_eq!(ep.hostname, None);
}

#[test]
fn named_target_port_is_resolved_per_pod_and_endpoints_are_grouped_by_port_set() {
    let svc = mk_service(
        "api",
        &[("app", "api")],
        vec![svc_port("web", 80, IntOrString::String("http".into()))],
    );
    let mut lacking = mk_pod("c", "api", "10.1.0.3", "n0", 1);
    lacking.spec.as_mut().unwrap().containers[0].ports = None;
    let pods = vec![
        Object::Pod(mk_pod("a", "api", "10.1.0.1", "n0", 8080)),
        Object::Pod(mk_pod("b", "api", "10.1.0.2", "n1", 9090)),
        Object::Pod(mk_pod("a2", "api", "10.1.0.4", "n1", 8080)),
        Object::Pod(lacking),
    ];
    let (_, store) = setup(svc, pods);
    let mut groups: Vec<(Option<i32>, Vec<String>)> = store
        .slices()
        .iter()
        .map(|s| (s.ports.as_ref().map(|p| p[0].port.unwrap()), ep_names(s)))
        .collect();
    groups.sort();
    assert_eq!(
        groups,
        vec![
            (None, vec!["c".to_string()]),
            (Some(8080), vec!["a".to_string(), "a2".to_string()]),
            (Some(9090), vec!["b".to_string()]),
        ]
    );
    let store_ep = store.endpoints("api").unwrap();
    let subsets = store_ep.subsets.as_ref().unwrap();
    assert_eq!(
        subsets.len(),
        2,
        "the pod without the port is not in Endpoints"
    );
}

#[test]
fn not_ready_and_terminating_pods_get_the_upstream_conditions() {
    let svc = mk_service(
        "web",
        &[("app", "web")],
        vec![svc_port("", 80, IntOrString::Int(8080))],
    );
    let mut not_ready = mk_pod("nr", "web", "10.1.0.1", "n0", 8080);
    set_ready(&mut not_ready, false);
    let mut terminating = mk_pod("t", "web", "10.1.0.2", "n0", 8080);
    set_terminating(&mut terminating);
    let (mut c, mut store) = setup(
        svc.clone(),
        vec![Object::Pod(not_ready), Object::Pod(terminating)],
    );
    let cond = |store: &Store, pod: &str| {
        let s = store.slices()[0];
        let e = s
            .endpoints
            .iter()
            .find(|e| e.target_ref.as_ref().unwrap().name.as_deref() == Some(pod))
            .unwrap();
        let c = e.conditions.clone().unwrap();
        (c.ready.unwrap(), c.serving.unwrap(), c.terminating.unwrap())
    };
    assert_eq!(cond(&store, "nr"), (false, false, false));
    assert_eq!(cond(&store, "t"), (false, true, true));

    let mut publish = svc;
    publish.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
    store.apply(&c.on_put(&Object::Service(publish)));
    assert_eq!(cond(&store, "nr"), (true, false, false));
    assert_eq!(cond(&store, "t"), (true, true, true));
}

#[test]
fn pods_without_ip_or_in_a_terminal_phase_are_left_out_and_an_empty_service_keeps_a_placeholder() {
    let svc = mk_service(
        "web",
        &[("app", "web")],
        vec![svc_port("http", 80, IntOrString::Int(8080))],
    );
    let mut pending = mk_pod("pending", "web", "", "n0", 8080);
    pending.status.as_mut().unwrap().pod_ips = None;
    let mut done = mk_pod("done", "web", "10.1.0.9", "n0", 8080);
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let (mut c, mut store) = setup(svc, vec![Object::Pod(pending), Object::Pod(done)]);
    let slices = store.slices();
    assert_eq!(slices.len(), 1);
    assert!(
        slices[0].endpoints.is_empty() && slices[0].ports.is_none(),
        "placeholder slice"
    );
    let placeholder = slices[0].metadata.name.clone();

    // The first real endpoint reuses the placeholder's name (finalize turns create+delete into
    // an update).
    let w = c.on_put(&Object::Pod(mk_pod("up", "web", "10.1.0.5", "n0", 8080)));
    assert_eq!(slice_writes(&w), 1);
    store.apply(&w);
    assert_eq!(store.slices()[0].metadata.name, placeholder);
    assert_eq!(ep_names(store.slices()[0]), ["up"]);
}

#[test]
fn headless_services_get_slices_with_the_headless_label_and_pod_hostnames() {
    let mut svc = mk_service(
        "db",
        &[("app", "db")],
        vec![svc_port("pg", 5432, IntOrString::Int(5432))],
    );
    svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
    let mut pod = mk_pod("db-0", "db", "10.1.0.1", "n0", 5432);
    let spec = pod.spec.as_mut().unwrap();
    spec.hostname = Some("db-0".into());
    spec.subdomain = Some("db".into());
    let (_, store) = setup(svc, vec![Object::Pod(pod)]);
    let s = store.slices()[0];
    assert_eq!(
        s.metadata
            .labels
            .as_ref()
            .unwrap()
            .get(LABEL_HEADLESS)
            .map(String::as_str),
        Some("")
    );
    assert_eq!(s.endpoints[0].hostname.as_deref(), Some("db-0"));
    let ep = store.endpoints("db").unwrap();
    assert_eq!(
        ep.metadata
            .labels
            .as_ref()
            .unwrap()
            .get(LABEL_HEADLESS)
            .map(String::as_str),
        Some("")
    );
    let addr = &ep.subsets.as_ref().unwrap()[0].addresses.as_ref().unwrap()[0];
    assert_eq!(addr.hostname.as_deref(), Some("db-0"));
}

#[test]
fn services_without_a_selector_get_no_slices_and_no_endpoints() {
    let svc = mk_service(
        "external",
        &[],
        vec![svc_port("http", 80, IntOrString::Int(80))],
    );
    let (_, store) = setup(svc, mk_pods("external", 3));
    assert!(store.objects.is_empty());
}

#[test]
fn a_thousand_and_one_pods_make_eleven_slices_of_at_most_a_hundred() {
    let svc = mk_service(
        "ds",
        &[("app", "ds")],
        vec![svc_port("metrics", 9100, IntOrString::Int(9100))],
    );
    let (_, store) = setup(svc, mk_pods("ds", 1001));
    let slices = store.slices();
    assert_eq!(slices.len(), 11);
    assert!(slices.iter().all(|s| s.endpoints.len() <= 100));
    assert_eq!(
        slices.iter().map(|s| s.endpoints.len()).sum::<usize>(),
        1001
    );
}

#[test]
fn replacing_one_pod_rewrites_exactly_one_slice() {
    let svc = mk_service(
        "web",
        &[("app", "web")],
        vec![svc_port("http", 80, IntOrString::Int(8080))],
    );
    let (mut c, mut store) = setup(svc, mk_pods("web", 250));
    assert_eq!(store.slices().len(), 3);

    // A deletion updates the one slice holding the pod.
    let w = c.on_delete(Kind::Pod, Some("default"), "p17");
    assert_eq!(slice_writes(&w), 1);
    store.apply(&w);
    // Its replacement goes into a slice with room: one write, no new slice.
    let w = c.on_put(&Object::Pod(mk_pod(
        "p17-new", "web", "10.9.0.1", "n2", 8080,
    )));
    assert_eq!(slice_writes(&w), 1);
    store.apply(&w);
    assert_eq!(store.slices().len(), 3);

    // The same pod name with a new IP (a pod recreated in place) is also one write.
    let w = c.on_put(&Object::Pod(mk_pod("p200", "web", "10.9.0.2", "n0", 8080)));
    assert_eq!(slice_writes(&w), 1);
    store.apply(&w);
    // A readiness flip is one write; an unrelated pod change is none.
    let mut flap = mk_pod("p3", "web", "10.1.0.4", "n0", 8080);
    set_ready(&mut flap, false);
    assert_eq!(slice_writes(&c.on_put(&Object::Pod(flap))), 1);
    let mut annotated = mk_pod("p4", "web", "10.1.0.5", "n1", 8080);
    annotated.metadata.annotations = labels(&[("x", "y")]);
    assert!(c.on_put(&Object::Pod(annotated)).is_empty());
    let total: usize = store.slices().iter().map(|s| s.endpoints.len()).sum();
    assert_eq!(total, 250);
}

#[test]
fn deleting_a_service_deletes_its_slices_and_endpoints() {
    let svc = mk_service(
        "web",
        &[("app", "web")],
        vec![svc_port("http", 80, IntOrString::Int(8080))],
    );
    let (mut c, mut store) = setup(svc, mk_pods("web", 150));
    assert_eq!(store.objects.len(), 3);
    let w = c.on_delete(Kind::Service, Some("default"), "web");
    assert_eq!(w.len(), 3);
    assert!(w.iter().all(|w| matches!(w, Write::Delete { .. })));
    store.apply(&w);
    assert!(store.objects.is_empty());
    // Pods of a deleted Service cause no writes.
    assert!(c.on_delete(Kind::Pod, Some("default"), "p1").is_empty());
}

#[test]
fn a_deleted_managed_slice_is_written_again() {
    let svc = mk_service(
        "web",
        &[("app", "web")],
        vec![svc_port("http", 80, IntOrString::Int(8080))],
    );
    let (mut c, mut store) = setup(svc, mk_pods("web", 5));
    let name = store.slices()[0].metadata.name.clone().unwrap();
    store
        .objects
        .remove(&(Kind::EndpointSlice, "default".into(), name.clone()));
    let w = c.on_delete(Kind::EndpointSlice, Some("default"), &name);
    store.apply(&w);
    assert_eq!(ep_names(store.slices()[0]).len(), 5);
}

#[test]
fn pods_on_unknown_nodes_wait_for_the_node_and_zones_follow_node_labels() {
    let mut c = EndpointsControllers::new();
    let mut store = Store::default();
    let svc = mk_service(
        "web",
        &[("app", "web")],
        vec![svc_port("http", 80, IntOrString::Int(8080))],
    );
    store.apply(&c.on_put(&Object::Service(svc)));
    store.apply(&c.on_put(&Object::Pod(mk_pod("a", "web", "10.1.0.1", "late", 8080))));
    assert!(store.slices()[0].endpoints.is_empty());
    store.apply(&c.on_put(&mk_node("late", "z-x")));
    assert_eq!(store.slices()[0].endpoints[0].zone.as_deref(), Some("z-x"));
    let w = c.on_put(&mk_node("late", "z-y"));
    assert_eq!(slice_writes(&w), 1);
    store.apply(&w);
    assert_eq!(store.slices()[0].endpoints[0].zone.as_deref(), Some("z-y"));
    assert!(
        c.on_put(&mk_node("late", "z-y")).is_empty(),
        "an unchanged node writes nothing"
    );
}

#[test]
fn ipv6_pods_get_ipv6_slices() {
    let mut svc = mk_service(
        "v6",
        &[("app", "v6")],
        vec![svc_port("http", 80, IntOrString::Int(8080))],
    );
    let spec = svc.spec.as_mut().unwrap();
    spec.cluster_ip = Some("fd00::10".into());
    spec.ip_families = Some(vec!["IPv6".into()]);
    let (_, store) = setup(
        svc,
        vec![Object::Pod(mk_pod("a", "v6", "fd00::1:1", "n0", 8080))],
    );
    let s = store.slices()[0];
    assert_eq!(s.address_type, "IPv6");
    assert_eq!(s.endpoints[0].addresses, ["fd00::1:1"]);
}

#[test]
fn bulk_feeding_reaches_the_same_state_as_one_by_one() {
    let svc = mk_service(
        "web",
        &[("app", "web")],
        vec![svc_port("http", 80, IntOrString::Int(8080))],
    );
    let (_, bulk) = setup(svc.clone(), mk_pods("web", 120));
    let mut c = EndpointsControllers::new();
    let mut one = Store::default();
    let mut objs = mk_pods("web", 120);
    objs.extend(nodes());
    objs.push(Object::Service(svc));
    for o in &objs {
        one.apply(&c.on_put(o));
    }
    let count = |s: &Store| {
        let mut v: Vec<Vec<String>> = s.slices().iter().map(|s| ep_names(s)).collect();
        v.iter_mut().for_each(|x| x.sort());
        v.into_iter().flatten().count()
    };
    assert_eq!(count(&bulk), count(&one));
    assert_eq!(bulk.endpoints("web"), one.endpoints("web"));
}
