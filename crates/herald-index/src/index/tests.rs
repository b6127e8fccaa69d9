//! Index tests: synchronous, on fixtures — apply/delete/reset and assert on each job's groups.

use herald_core::AttachMetadata;
use serde_json::json;

use super::*;
use crate::filter::JobFilter;
use crate::groups::{Group, Interner};

fn obj(kind: WatchKind, v: serde_json::Value) -> Object {
    Object::decode(kind, v).expect("fixture decodes")
}

fn mk_pod(ns: &str, name: &str, ip: &str, app: &str, node: &str) -> Object {
    obj(
        WatchKind::Pod,
        json!({
            "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}"),
                         "labels": {"app": app}},
            "spec": {"nodeName": node, "containers": [
                {"name": "main", "image": "x", "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip, "hostIP": "127.0.0.10",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }),
    )
}

fn mk_service(ns: &str, name: &str, app: &str) -> Object {
    obj(
        WatchKind::Service,
        json!({
            "metadata": {"namespace": ns, "name": name, "labels": {"tier": "web"}},
            "spec": {"selector": {"app": app}, "clusterIP": "127.1.0.1",
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
        }),
    )
}

fn mk_endpoints(ns: &str, name: &str, pods: &[(&str, &str)]) -> Object {
    let addresses: Vec<serde_json::Value> = pods
        .iter()
        .map(|(pod, ip)| {
            json!({"ip": ip, "nodeName": "node-a",
                   "targetRef": {"kind": "Pod", "namespace": ns, "name": pod}})
        })
        .collect();
    obj(
        WatchKind::Endpoints,
        json!({
            "metadata": {"namespace": ns, "name": name},
            "subsets": [{"addresses": addresses, "ports": [{"name": "http", "port": 8080}]}]
        }),
    )
}

fn mk_node(name: &str, zone: &str) -> Object {
    obj(
        WatchKind::Node,
        json!({
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.10"}]}
        }),
    )
}

fn job(name: &str, role: Role, attach: AttachMetadata, namespaces: &[&str]) -> JobSpec {
    let names: Vec<String> = namespaces.iter().map(|s| s.to_string()).collect();
    JobSpec {
        name: name.into(),
        role,
        attach,
        filter: JobFilter::new(name, &names, false, None, &[]).expect("valid filter"),
        relabel: None,
        istio: None,
    }
}

fn pod_selector_job(name: &str, role: Role, label: &str) -> JobSpec {
    let yaml = format!(
        "jobs:\n- name: {name}\n  role: {}\n  selectors:\n  - role: pod\n    label: {label}\n",
        role.as_str()
    );
    let cfg = herald_core::parse_config(&yaml).expect("valid config");
    JobSpec::from_job(&cfg.jobs[0], None).expect("valid job")
}

fn labels_of(index: &Index, j: usize) -> Vec<LabelSetPair> {
    index
        .cut(j)
        .groups
        .iter()
        .flat_map(|g| {
            let mut scratch = Vec::new();
            g.iter()
                .map(|t| {
                    let mut json = Vec::new();
                    g.write_entry(t, &mut json, &mut scratch);
                    let v: serde_json::Value = serde_json::from_slice(&json).expect("json entry");
                    let labels = serde_json::from_value(v["labels"].clone()).expect("labels");
                    (t.address(&mut String::new()).to_string(), labels)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

type LabelSetPair = (String, herald_core::LabelSet);

const NONE: AttachMetadata = AttachMetadata {
    node: false,
    namespace: false,
};

#[test]
fn a_pod_job_has_one_group_per_pod_built_by_herald_core() {
    let mut index = Index::new(vec![job("pods", Role::Pod, NONE, &[])]);
    let p = mk_pod("default", "web-1", "127.16.0.5", "web", "node-a");
    let changed = index.apply(p.clone());
    assert_eq!(changed, Changed::from([0]));
    let cut = index.cut(0);
    assert_eq!(cut.generation, 1);
    let Object::Pod(pod) = &p else { unreachable!() };
    let expected = herald_core::pod_group(pod, &herald_core::NoLookup, NONE);
    // Served per target: the group's labels overlaid by the target's, byte for byte what herald-core's
    // group encodes to, wherever the index keeps the pod's labels (it shares them with the pod's
    // endpoint targets).
    let encode = |g: &Group| {
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        for t in g.iter() {
            g.write_entry(t, &mut out, &mut scratch);
        }
        out
    };
    let served = encode(&cut.groups[0]);
    assert!(!served.is_empty());
    assert_eq!(
        String::from_utf8(served).expect("utf-8"),
        String::from_utf8(encode(&Group::of(&expected, &Interner::default()))).expect("utf-8")
    );
    assert_eq!(index.targets(0), 1);
}

#[test]
fn an_unchanged_object_does_not_bump_the_generation() {
    let mut index = Index::new(vec![job("pods", Role::Pod, NONE, &[])]);
    let p = mk_pod("default", "web-1", "127.16.0.5", "web", "node-a");
    index.apply(p.clone());
    assert!(index.apply(p).is_empty());
    assert_eq!(index.generation(0), 1);
}

#[test]
fn the_cuts_of_one_generation_share_one_vector_and_a_change_makes_a_new_one() {
    let mut index = Index::new(vec![job("pods", Role::Pod, NONE, &[])]);
    index.apply(mk_pod("default", "web-1", "127.16.0.5", "web", "node-a"));
    let (a, b) = (index.cut(0), index.cut(0));
    assert!(
        Arc::ptr_eq(&a.groups, &b.groups),
        "every shard's body shares it"
    );
    index.apply(mk_pod("default", "web-2", "127.16.0.6", "web", "node-a"));
    let c = index.cut(0);
    assert_eq!(c.generation, a.generation + 1);
    assert_eq!((a.groups.len(), c.groups.len()), (1, 2));
    assert!(Arc::ptr_eq(&c.groups, &index.cut(0).groups));
}

#[test]
fn deleting_a_pod_removes_its_group_and_bumps_the_generation() {
    let mut index = Index::new(vec![job("pods", Role::Pod, NONE, &[])]);
    index.apply(mk_pod("default", "web-1", "127.16.0.5", "web", "node-a"));
    index.apply(mk_pod("default", "web-2", "127.16.0.6", "web", "node-a"));
    let changed = index.delete(WatchKind::Pod, &ObjectKey::new("default", "web-1"));
    assert_eq!(changed, Changed::from([0]));
    assert_eq!(index.groups(0), 1);
    assert_eq!(index.targets(0), 1);
    assert_eq!(index.generation(0), 3);
    assert!(
        index
            .delete(WatchKind::Pod, &ObjectKey::new("default", "gone"))
            .is_empty()
    );
}

#[test]
fn an_endpoints_group_is_rebuilt_when_a_pod_it_references_changes() {
    let mut index = Index::new(vec![job("eps", Role::Endpoints, NONE, &[])]);
    index.apply(mk_endpoints("default", "web", &[("web-1", "127.16.0.5")]));
    let before = labels_of(&index, 0);
    assert_eq!(before[0].1.get("__meta_kubernetes_pod_label_app"), None);

    let changed = index.apply(mk_pod("default", "web-1", "127.16.0.5", "web", "node-a"));
    assert_eq!(
        changed,
        Changed::from([0]),
        "the pod appearing rebuilds the endpoints"
    );
    let after = labels_of(&index, 0);
    assert_eq!(
        after[0]
            .1
            .get("__meta_kubernetes_pod_label_app")
            .map(String::as_str),
        Some("web")
    );

    index.apply(mk_pod("default", "web-1", "127.16.0.5", "api", "node-a"));
    assert_eq!(
        labels_of(&index, 0)[0]
            .1
            .get("__meta_kubernetes_pod_label_app")
            .map(String::as_str),
        Some("api")
    );
}

#[test]
fn an_endpoints_group_gains_service_labels_when_the_service_appears_later() {
    let mut index = Index::new(vec![job("eps", Role::Endpoints, NONE, &[])]);
    index.apply(mk_endpoints("default", "web", &[("web-1", "127.16.0.5")]));
    assert_eq!(
        index.apply(mk_service("default", "web", "web")),
        Changed::from([0])
    );
    let labels = &labels_of(&index, 0)[0].1;
    assert_eq!(
        labels
            .get("__meta_kubernetes_service_label_tier")
            .map(String::as_str),
        Some("web")
    );
    // An unrelated service changes nothing.
    assert!(index.apply(mk_service("default", "other", "x")).is_empty());
}

#[test]
fn attach_metadata_node_rebuilds_the_pods_on_a_changed_node() {
    let attach = AttachMetadata {
        node: true,
        namespace: false,
    };
    let mut index = Index::new(vec![job("pods", Role::Pod, attach, &[])]);
    index.apply(mk_node("node-a", "z1"));
    index.apply(mk_pod("default", "web-1", "127.16.0.5", "web", "node-a"));
    index.apply(mk_pod("default", "web-2", "127.16.0.6", "web", "node-b"));
    let zone = |index: &Index| -> Vec<Option<String>> {
        labels_of(index, 0)
            .into_iter()
            .map(|(_, l)| {
                l.get("__meta_kubernetes_node_label_topology_kubernetes_io_zone")
                    .cloned()
            })
            .collect()
    };
    // web-2's node is unknown: Prometheus gives it no targets (pod.go: node not in the informer).
    assert_eq!(zone(&index), vec![Some("z1".into())]);
    assert_eq!(index.apply(mk_node("node-a", "z2")), Changed::from([0]));
    assert_eq!(zone(&index), vec![Some("z2".into())]);
    // node-b appearing reaches web-2, whose earlier lookup of it found nothing.
    index.apply(mk_node("node-b", "z3"));
    assert_eq!(zone(&index), vec![Some("z2".into()), Some("z3".into())]);
}

#[test]
fn jobs_differing_in_namespaces_and_selectors_filter_the_shared_objects() {
    let mut index = Index::new(vec![
        job("all", Role::Pod, NONE, &[]),
        job("team-a", Role::Pod, NONE, &["a"]),
        pod_selector_job("web-only", Role::Pod, "app=web"),
    ]);
    index.apply(mk_pod("a", "web-1", "127.16.0.5", "web", "n"));
    index.apply(mk_pod("b", "db-1", "127.16.0.6", "db", "n"));
    index.apply(mk_pod("b", "web-2", "127.16.0.7", "web", "n"));
    assert_eq!(index.targets(0), 3);
    assert_eq!(index.targets(1), 1);
    assert_eq!(index.targets(2), 2);
    // A pod leaving the selector leaves the job.
    let changed = index.apply(mk_pod("b", "web-2", "127.16.0.7", "db", "n"));
    assert_eq!(changed, Changed::from([0, 2]));
    assert_eq!(index.targets(2), 1);
}

#[test]
fn a_pod_outside_the_pod_selector_is_invisible_to_an_endpoints_job() {
    // Prometheus's endpoints role reads pods through an informer filtered by the role: pod selector.
    let mut index = Index::new(vec![pod_selector_job("eps", Role::Endpoints, "app=web")]);
    index.apply(mk_endpoints("default", "web", &[("db-1", "127.16.0.6")]));
    index.apply(mk_pod("default", "db-1", "127.16.0.6", "db", "node-a"));
    assert_eq!(
        labels_of(&index, 0)[0].1.get("__meta_kubernetes_pod_name"),
        None
    );
}

#[test]
fn a_relist_is_applied_in_one_step_and_an_identical_one_changes_nothing() {
    let mut index = Index::new(vec![job("pods", Role::Pod, NONE, &[])]);
    let first = vec![
        mk_pod("default", "a", "127.16.0.1", "web", "n"),
        mk_pod("default", "b", "127.16.0.2", "web", "n"),
    ];
    assert_eq!(
        index.reset(WatchKind::Pod, first.clone(), &[]),
        Changed::from([0])
    );
    assert_eq!(index.generation(0), 1);
    assert!(index.reset(WatchKind::Pod, first, &[]).is_empty());

    let second = vec![
        mk_pod("default", "b", "127.16.0.2", "web", "n"),
        mk_pod("default", "c", "127.16.0.3", "web", "n"),
    ];
    assert_eq!(index.reset(WatchKind::Pod, second, &[]), Changed::from([0]));
    assert_eq!(index.generation(0), 2, "one relist, one generation");
    let names: Vec<String> = labels_of(&index, 0)
        .into_iter()
        .map(|(_, l)| l["__meta_kubernetes_pod_name"].clone())
        .collect();
    assert_eq!(names, vec!["b", "c"]);
}

#[test]
fn groups_are_listed_in_a_stable_order_whatever_the_arrival_order() {
    let mut a = Index::new(vec![job("pods", Role::Pod, NONE, &[])]);
    let mut b = Index::new(vec![job("pods", Role::Pod, NONE, &[])]);
    let pods: Vec<Object> = (0..5)
        .map(|i| {
            mk_pod(
                "default",
                &format!("p{i}"),
                &format!("127.16.0.{i}"),
                "web",
                "n",
            )
        })
        .collect();
    for p in &pods {
        a.apply(p.clone());
    }
    for p in pods.iter().rev() {
        b.apply(p.clone());
    }
    assert_eq!(labels_of(&a, 0), labels_of(&b, 0));
}

#[test]
fn a_job_builds_nothing_until_every_kind_it_reads_is_listed_then_builds_each_group_once() {
    let mut index = Index::new(vec![
        job("eps", Role::Endpoints, NONE, &[]),
        job("pods", Role::Pod, NONE, &[]),
    ]);
    index.expect_lists([WatchKind::Endpoints, WatchKind::Pod, WatchKind::Service]);
    let eps = vec![mk_endpoints("default", "web", &[("web-1", "127.16.0.5")])];
    assert!(
        index.reset(WatchKind::Endpoints, eps, &[]).is_empty(),
        "pods and services are not listed yet"
    );
    assert_eq!(index.groups(0), 0);
    // Objects arriving one by one before their kind's list are stored, not built.
    index.apply(mk_service("default", "web", "web"));
    assert_eq!(index.groups(0), 0);
    let pods = vec![mk_pod("default", "web-1", "127.16.0.5", "web", "node-a")];
    assert_eq!(
        index.reset(WatchKind::Pod, pods, &[]),
        Changed::from([1]),
        "the pod job reads only pods: it is built now"
    );
    assert_eq!(
        index.groups(0),
        0,
        "the endpoints job still waits for services"
    );
    assert_eq!(
        index.reset(
            WatchKind::Service,
            vec![mk_service("default", "web", "web")],
            &[]
        ),
        Changed::from([0])
    );
    assert_eq!(
        index.generation(0),
        1,
        "built once, with everything it reads"
    );
    let labels = &labels_of(&index, 0)[0].1;
    assert_eq!(
        labels
            .get("__meta_kubernetes_pod_label_app")
            .map(String::as_str),
        Some("web")
    );
    assert_eq!(
        labels
            .get("__meta_kubernetes_service_label_tier")
            .map(String::as_str),
        Some("web")
    );
    // Later changes flow as before.
    index.apply(mk_pod("default", "web-1", "127.16.0.5", "api", "node-a"));
    assert_eq!(index.generation(0), 2);
}

#[test]
fn dependents_hold_each_group_once_past_the_few_and_empty_out() {
    let mut d = Dependents::default();
    let keys: Vec<ObjectKey> = (0..12)
        .map(|i| ObjectKey::new("ns", &format!("p{i}")))
        .collect();
    for k in &keys {
        d.insert(0, k);
        d.insert(0, k);
    }
    let mut seen = Vec::new();
    d.each(|(j, k)| seen.push((*j, k.clone())));
    assert_eq!(seen.len(), 12, "no duplicates, none lost past the vector");
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(d.remove(0, k), i == keys.len() - 1);
    }
}

#[test]
fn a_large_relist_built_by_worker_threads_equals_the_same_objects_applied_one_by_one() {
    // Enough objects that `rebuild` hands the work to worker threads (`build_workers`), with
    // dependencies across chunks: every Endpoints object reads pods of its own and of its neighbour.
    const PODS: usize = 6 * BUILD_CHUNK;
    let specs = || {
        vec![
            job("pods", Role::Pod, NONE, &[]),
            job("endpoints", Role::Endpoints, NONE, &[]),
            job("in-b", Role::Pod, NONE, &["b"]),
        ]
    };
    let ns = |i: usize| if i.is_multiple_of(3) { "b" } else { "a" };
    let pods: Vec<Object> = (0..PODS)
        .map(|i| {
            let ip = format!("127.16.{}.{}", i / 250, i % 250 + 1);
            mk_pod(
                ns(i),
                &format!("web-{i:05}"),
                &ip,
                &format!("app-{}", i % 7),
                "node-a",
            )
        })
        .collect();
    let endpoints: Vec<Object> = (0..PODS / 4)
        .map(|e| {
            let members: Vec<(String, String)> = (0..6)
                .map(|k| (4 * e + k) % PODS)
                .filter(|&i| ns(i) == ns(4 * e))
                .map(|i| {
                    (
                        format!("web-{i:05}"),
                        format!("127.16.{}.{}", i / 250, i % 250 + 1),
                    )
                })
                .collect();
            let refs: Vec<(&str, &str)> = members
                .iter()
                .map(|(p, ip)| (p.as_str(), ip.as_str()))
                .collect();
            mk_endpoints(ns(4 * e), &format!("svc-{e:05}"), &refs)
        })
        .collect();
    assert!(build_workers(PODS) > 0, "the relist takes the worker path");

    let mut bulk = Index::new(specs());
    bulk.expect_lists([WatchKind::Pod, WatchKind::Endpoints]);
    bulk.reset(WatchKind::Endpoints, endpoints.clone(), &[]);
    let changed = bulk.reset(WatchKind::Pod, pods.clone(), &[]);
    assert_eq!(changed, Changed::from([0, 1, 2]));

    let mut single = Index::new(specs());
    for o in endpoints.into_iter().chain(pods) {
        single.apply(o);
    }
    for j in 0..3 {
        assert!(bulk.targets(j) > 0, "job {j} has targets");
        assert_eq!(bulk.targets(j), single.targets(j), "job {j}");
        assert_eq!(labels_of(&bulk, j), labels_of(&single, j), "job {j}");
    }
    assert_eq!(bulk.targets(0), PODS);
    // A change to one pod reaches the Endpoints group built from it on a worker thread.
    let moved = mk_pod("a", "web-00001", "127.16.9.9", "app-1", "node-a");
    let changed = bulk.apply(moved.clone());
    single.apply(moved);
    assert_eq!(changed, Changed::from([0, 1]));
    assert_eq!(labels_of(&bulk, 1), labels_of(&single, 1));
}
