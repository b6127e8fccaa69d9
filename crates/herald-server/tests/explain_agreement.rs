//! `GET /explain` agrees with what is served: on kube-sim's generated cluster with its monitors,
//! its Istio mesh and the PeerAuthentications it generates at every level, and jobs that relabel,
//! 1,000 objects drawn at random are each explained as served in a job and a shard exactly when
//! that job's and shard's `/sd/v1` body holds its targets with the same labels; and every body is
//! exactly the targets explained for the objects of its role's kind, as a multiset.

#[path = "peers/harness.rs"]
mod peers;

use std::collections::{BTreeMap, BTreeSet};

use kube_sim::{Kind, Object, Write};
use peers::cluster::{loopback_spec, start_herald, start_sim};
use serde_json::Value;

const JOBS: &str = "\
istio: {root_namespace: istio-system}
jobs:
- {name: pods, role: pod}
- name: ready-slices
  role: endpointslice
  relabel_configs:
  - {source_labels: [__meta_kubernetes_endpointslice_endpoint_conditions_ready], regex: 'true', action: keep}
  - {action: labelmap, regex: __meta_kubernetes_pod_label_(.+)}
  - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
- {name: annotated, role: pod, annotations: prometheus.io, istio: separate}
- {name: eps, role: endpoints, annotations: prometheus.io}
- {name: nodes, role: node}
- name: services
  role: service
  selectors: [{role: service, label: 'app.kubernetes.io/name'}]
- {name: ingresses, role: ingress}
monitors: {istio: true}
";

const DRAWS: usize = 1000;
const SHARDS: u64 = 2;

/// splitmix64: a fixed sequence, so a failure names the same objects on every run.
struct Draw(u64);

impl Draw {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// One served entry: address and labels, as a body holds it.
type Entry = (String, BTreeMap<String, String>);

/// A job's role, whole body and each shard's body.
type Bodies = (String, Vec<Entry>, Vec<Vec<Entry>>);

fn entries(body: &Value) -> Vec<Entry> {
    body.as_array()
        .expect("an SD body is a list")
        .iter()
        .map(|e| {
            let labels = e["labels"]
                .as_object()
                .expect("labels")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().expect("a string").to_string()))
                .collect();
            (
                e["targets"][0].as_str().expect("address").to_string(),
                labels,
            )
        })
        .collect()
}

fn counted(list: &[Entry]) -> BTreeMap<&Entry, usize> {
    let mut out = BTreeMap::new();
    for e in list {
        *out.entry(e).or_default() += 1;
    }
    out
}

async fn get(http: &reqwest::Client, url: &str) -> Value {
    let res = http.get(url).send().await.expect("herald answers");
    assert_eq!(res.status(), 200, "GET {url}");
    res.json().await.expect("JSON")
}

fn primary(role: &str) -> &'static str {
    match role {
        "pod" => "Pod",
        "service" => "Service",
        "endpoints" => "Endpoints",
        "endpointslice" => "EndpointSlice",
        "node" => "Node",
        "ingress" => "Ingress",
        other => panic!("role {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explained_targets_are_exactly_what_each_job_and_shard_serves() {
    let spec = kube_sim::generate::ClusterSpec {
        namespaces: 6,
        istio_fraction: 0.67,
        annotated_fraction: 0.6,
        ..loopback_spec()
    };
    let sim = start_sim(spec, 23).await;
    let h = sim.handle();
    let policies = kube_sim::generate::peer_authentications(
        &h.objects_json(Kind::Namespace),
        &h.objects_json(Kind::Pod),
    );
    assert!(
        !policies.is_empty(),
        "kube-sim generates PeerAuthentications"
    );
    h.apply(policies.into_iter().map(Write::Put).collect());
    let herald = start_herald(&sim, JOBS).await;
    let http = reqwest::Client::new();
    let base = herald.url();
    // PeerAuthentications are applied within a second of herald's sync.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;

    // Every job herald lists: its role, whole body and each shard's.
    let listed = get(&http, &format!("{base}/sd/v1")).await;
    let mut jobs: BTreeMap<String, Bodies> = BTreeMap::new();
    for j in listed.as_array().expect("a list") {
        let Some(name) = j["job"].as_str() else {
            continue;
        };
        let whole = entries(&get(&http, &format!("{base}/sd/v1/{name}")).await);
        let mut shards = Vec::new();
        for i in 0..SHARDS {
            let url = format!("{base}/sd/v1/{name}?shard={i}&shards={SHARDS}");
            shards.push(entries(&get(&http, &url).await));
        }
        let role = j["role"].as_str().expect("role").to_string();
        jobs.insert(name.to_string(), (role, whole, shards));
    }
    let monitor_jobs = jobs
        .keys()
        .filter(|j| j.starts_with("serviceMonitor/"))
        .count();
    assert!(
        monitor_jobs > 0,
        "kube-sim's monitors are served: {:?}",
        jobs.keys()
    );
    assert!(jobs.contains_key("annotated/istio-mtls"));
    assert!(
        !jobs["annotated/istio-mtls"].1.is_empty(),
        "the mesh puts some targets under STRICT mTLS"
    );

    // The objects, and the draw.
    let mut objects: Vec<(&'static str, String, String)> = Vec::new();
    for (kind, name) in [
        (Kind::Pod, "Pod"),
        (Kind::Service, "Service"),
        (Kind::Endpoints, "Endpoints"),
        (Kind::EndpointSlice, "EndpointSlice"),
        (Kind::Node, "Node"),
        (Kind::Ingress, "Ingress"),
    ] {
        for o in h.objects_json(kind) {
            let ns = o["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let n = o["metadata"]["name"].as_str().expect("name").to_string();
            objects.push((name, ns, n));
        }
    }
    let mut draw = Draw(0x5eed);
    let drawn: Vec<usize> = (0..DRAWS).map(|_| draw.next(objects.len())).collect();
    let mut explained: BTreeMap<usize, Value> = BTreeMap::new();
    let explain = |i: usize| {
        let (kind, ns, name) = &objects[i];
        let mut url = format!("{base}/explain?kind={kind}&name={name}&shards={SHARDS}");
        if !ns.is_empty() {
            url.push_str(&format!("&namespace={ns}"));
        }
        let http = http.clone();
        async move { get(&http, &url).await }
    };
    for &i in &drawn {
        if let std::collections::btree_map::Entry::Vacant(slot) = explained.entry(i) {
            slot.insert(explain(i).await);
        }
    }

    // Forward: every target explained as served is in its job's body and in exactly the shard
    // explained, with the same labels; a job explained as serving nothing gives a reason.
    let mut checked = 0;
    let mut served_in: BTreeSet<&str> = BTreeSet::new();
    for &i in &drawn {
        let e = &explained[&i];
        for answer in e["jobs"].as_array().expect("jobs") {
            let job = answer["job"].as_str().expect("job");
            let (_, whole, shards) = jobs
                .get(job)
                .unwrap_or_else(|| panic!("explain names job {job}, which /sd/v1 lists"));
            let targets = answer["targets"].as_array().expect("targets");
            if targets.is_empty() {
                assert!(
                    !answer["reason"].is_null(),
                    "{:?} in {job}: no target and no reason",
                    objects[i]
                );
            }
            for t in targets {
                let entry: Entry = entries(&Value::Array(vec![serde_json::json!({
                    "targets": [t["address"]], "labels": t["labels"]
                })]))
                .remove(0);
                assert!(
                    whole.contains(&entry),
                    "{:?}: explained as served in {job} as {entry:?}, which its body lacks",
                    objects[i]
                );
                let shard = t["shards"][SHARDS.to_string()].as_u64().expect("a shard") as usize;
                for (s, body) in shards.iter().enumerate() {
                    assert_eq!(
                        body.contains(&entry),
                        s == shard,
                        "{:?} in {job}: explained in shard {shard}/{SHARDS}; shard {s} holds it: {}",
                        objects[i],
                        body.contains(&entry)
                    );
                }
                checked += 1;
                served_in.insert(if job.ends_with("/istio-mtls") {
                    "istio-mtls"
                } else if job.starts_with("serviceMonitor/") || job.starts_with("podMonitor/") {
                    "monitor"
                } else if job == "ready-slices" {
                    "relabeled"
                } else {
                    "other"
                });
            }
        }
    }
    assert!(checked > DRAWS, "the draw checked {checked} served targets");
    assert_eq!(
        served_in.len(),
        4,
        "served targets checked in monitor, Istio companion, relabeled and other jobs: {served_in:?}"
    );

    // Backward: each job's body is, entry for entry, the targets explained for the objects of
    // its role's kind — so an object explained as not served has nothing in it.
    for (i, o) in objects.iter().enumerate() {
        if let std::collections::btree_map::Entry::Vacant(slot) = explained.entry(i) {
            slot.insert(explain(i).await);
        }
        let _ = o;
    }
    for (job, (role, whole, shards)) in &jobs {
        let kind = primary(role);
        let mut from_explain: Vec<Entry> = Vec::new();
        let mut by_shard: Vec<Vec<Entry>> = vec![Vec::new(); SHARDS as usize];
        for (i, (k, _, _)) in objects.iter().enumerate() {
            if *k != kind {
                continue;
            }
            let answer = explained[&i]["jobs"]
                .as_array()
                .expect("jobs")
                .iter()
                .find(|a| a["job"] == job.as_str())
                .unwrap_or_else(|| panic!("{:?} is explained for {job}", objects[i]))
                .clone();
            assert!(
                answer["served"].as_u64()
                    == Some(answer["targets"].as_array().map_or(0, |t| t.len() as u64)),
                "{:?} in {job}: more than the listed targets",
                objects[i]
            );
            for t in answer["targets"].as_array().expect("targets") {
                let entry = entries(&Value::Array(vec![serde_json::json!({
                    "targets": [t["address"]], "labels": t["labels"]
                })]))
                .remove(0);
                let s = t["shards"][SHARDS.to_string()].as_u64().expect("shard") as usize;
                by_shard[s].push(entry.clone());
                from_explain.push(entry);
            }
        }
        assert_eq!(
            counted(&from_explain),
            counted(whole),
            "{job}: the body is not the targets explained for its {kind}s"
        );
        for (s, body) in shards.iter().enumerate() {
            assert_eq!(
                counted(&by_shard[s]),
                counted(body),
                "{job} shard {s}/{SHARDS}: not the targets explained in it"
            );
        }
    }
    let kinds: BTreeSet<&str> = drawn.iter().map(|i| objects[*i].0).collect();
    assert!(kinds.len() >= 5, "the draw reaches most kinds: {kinds:?}");
    let _ = Object::Custom;
}
