//! herald against a real kube-sim on loopback port 0: output equals kube-sim's own state after churn,
//! convergence through faults without ever serving an empty or partial snapshot, and one upstream watch
//! per kind however many consumers poll.

#[path = "support/reference.rs"]
mod reference;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herald_server::{Herald, InitialList, JobSpec, ServeOptions, USER_AGENT, job_specs};
use kube_sim::generate::ClusterSpec;
use kube_sim::{Fault, Object as SimObject, Sim, SimConfig, Write};
use reference::{ClusterState, describe_difference};

/// Jobs covering every role, attach_metadata, namespaces and selectors. Several pod jobs share one
/// upstream watch.
const JOBS: &str = "\
jobs:
- name: pods
  role: pod
- name: pods-meta
  role: pod
  attach_metadata: {node: true, namespace: true}
- name: pods-default
  role: pod
  namespaces: {names: [default, kube-system]}
- name: pods-running
  role: pod
  selectors:
  - role: pod
    field: status.phase=Running
- name: endpoints
  role: endpoints
- name: endpointslices
  role: endpointslice
  attach_metadata: {node: true}
- name: services
  role: service
- name: nodes
  role: node
- name: ingresses
  role: ingress
  attach_metadata: {namespace: true}
- name: pods-relabeled
  role: pod
  relabel_configs:
  - {source_labels: [__meta_kubernetes_pod_phase], regex: Running, action: keep}
  - source_labels: [__meta_kubernetes_pod_ip, __meta_kubernetes_pod_container_port_number]
    regex: '(.+);(.+)'
    target_label: __address__
    replacement: '$1:$2'
  - {action: labelmap, regex: __meta_kubernetes_pod_label_(.+)}
  - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
  - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
  - {source_labels: [__address__], modulus: 4, target_label: __tmp_hash, action: hashmod}
  - {source_labels: [__tmp_hash], regex: '[0-2]', action: keep}
- name: endpointslices-relabeled
  role: endpointslice
  keep_meta_labels: true
  relabel_configs:
  - {action: labeldrop, regex: __meta_kubernetes_pod_label_.+}
  - {source_labels: [__meta_kubernetes_service_name], target_label: service, replacement: 'svc-$1'}
";

fn loopback_cluster() -> ClusterSpec {
    ClusterSpec {
        pod_cidr: "127.16.0.0/12".parse().expect("cidr"),
        node_cidr: "127.8.0.0/16".parse().expect("cidr"),
        service_cidr: "127.4.0.0/16".parse().expect("cidr"),
        ..ClusterSpec::small()
    }
}

async fn start(churn: f64, initial_list: InitialList) -> (Sim, Herald, Vec<JobSpec>) {
    start_with_budget(
        churn,
        initial_list,
        herald_server::bodies::DEFAULT_BUDGET_BYTES,
    )
    .await
}

/// As `start`, the bodies herald keeps bounded by `budget` bytes.
async fn start_with_budget(
    churn: f64,
    initial_list: InitialList,
    budget: usize,
) -> (Sim, Herald, Vec<JobSpec>) {
    // Logs only with RUST_LOG set; captured per test by the test harness.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let sim = Sim::start(SimConfig {
        spec: loopback_cluster(),
        seed: 7,
        churn_per_sec: churn,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    let cfg = herald_core::parse_config(JOBS).expect("valid jobs");
    let specs = job_specs(&cfg, None).expect("valid specs");
    let herald = Herald::start(
        specs.clone(),
        kube::Config::new(sim.url().parse().expect("url")),
        ServeOptions {
            initial_list,
            body_budget_bytes: budget,
            ..ServeOptions::default()
        },
    )
    .await
    .expect("herald starts");
    tokio::time::timeout(Duration::from_secs(20), herald.ready())
        .await
        .expect("herald syncs with kube-sim");
    (sim, herald, specs)
}

async fn fetch(client: &reqwest::Client, herald: &Herald, job: &str) -> (u16, Vec<u8>, bool) {
    let res = client
        .get(format!("{}/sd/v1/{job}", herald.url()))
        .send()
        .await
        .expect("herald answers");
    let status = res.status().as_u16();
    let stale = res.headers().contains_key("x-herald-stale");
    (status, res.bytes().await.expect("body").to_vec(), stale)
}

/// Polls until every job's body equals the reference computed over kube-sim's state, or panics with
/// the differences after `within`.
async fn assert_converges(sim: &Sim, herald: &Herald, specs: &[JobSpec], within: Duration) {
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let state = ClusterState::read(&sim.handle());
        let mut diffs = Vec::new();
        for spec in specs {
            let (status, got, _) = fetch(&client, herald, &spec.name).await;
            let want = state.expected_body(spec);
            if status != 200 || got != want {
                diffs.push(format!(
                    "{} ({status}): {}",
                    spec.name,
                    describe_difference(&got, &want)
                ));
            }
        }
        if diffs.is_empty() {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "herald did not converge on kube-sim's state:\n{}",
                diffs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn entries(body: &[u8]) -> usize {
    serde_json::from_slice::<Vec<serde_json::Value>>(body)
        .expect("json array")
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_churn_then_quiescence_every_job_equals_kube_sim_s_state() {
    let (sim, herald, specs) = start(30.0, InitialList::Auto).await;
    // Non-trivial output for every job (the cluster has pods, nodes, services, ingresses).
    let client = reqwest::Client::new();
    for spec in &specs {
        let (status, body, _) = fetch(&client, &herald, &spec.name).await;
        assert_eq!(status, 200, "{}", spec.name);
        assert!(entries(&body) > 0, "job {} has targets", spec.name);
    }
    // The relabeled jobs serve relabeled labels (their exact bodies are checked against herald-core's
    // reference below): the pods job only final labels, about 3/4 of the Running pods' ports.
    let labels_of = |body: &[u8]| -> Vec<BTreeMap<String, String>> {
        let v: Vec<serde_json::Value> = serde_json::from_slice(body).expect("json");
        v.iter()
            .map(|e| serde_json::from_value(e["labels"].clone()).expect("labels"))
            .collect()
    };
    let (_, all, _) = fetch(&client, &herald, "pods").await;
    let (_, relabeled, _) = fetch(&client, &herald, "pods-relabeled").await;
    let relabeled = labels_of(&relabeled);
    assert!(
        relabeled.len() < entries(&all),
        "the hashmod keep dropped some"
    );
    for l in &relabeled {
        assert!(
            l.contains_key("pod") && l.contains_key("namespace"),
            "{l:?}"
        );
        assert!(!l.keys().any(|k| k.starts_with("__meta_")), "{l:?}");
        assert!(["0", "1", "2"].contains(&l["__tmp_hash"].as_str()), "{l:?}");
    }
    let (_, eps, _) = fetch(&client, &herald, "endpointslices-relabeled").await;
    for l in labels_of(&eps) {
        assert!(l["service"].starts_with("svc-"), "{l:?}");
        assert!(
            l.contains_key("__meta_kubernetes_endpointslice_name"),
            "{l:?}"
        );
        assert!(
            !l.keys()
                .any(|k| k.starts_with("__meta_kubernetes_pod_label_")),
            "{l:?}"
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    sim.handle().set_churn(0.0);
    assert_converges(&sim, &herald, &specs, Duration::from_secs(20)).await;
    herald.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_faults_herald_converges_and_never_serves_an_empty_or_partial_snapshot() {
    let (sim, herald, specs) = start(0.0, InitialList::ListWatch).await;
    let herald = Arc::new(herald);
    let client = reqwest::Client::new();
    let mut floor = BTreeMap::new();
    for spec in &specs {
        let (_, body, _) = fetch(&client, &herald, &spec.name).await;
        floor.insert(spec.name.clone(), entries(&body));
    }

    // Poll every job continuously while faults run; the cluster only grows meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let saw_stale = Arc::new(AtomicBool::new(false));
    // Which fault is under way; the poller counts the rounds it completes in each.
    let phase = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    const PHASES: usize = 4;
    let done: Arc<[std::sync::atomic::AtomicUsize; PHASES]> = Arc::new(Default::default());
    let poller = {
        let (herald, stop, saw_stale, floor, phase, done) = (
            herald.clone(),
            stop.clone(),
            saw_stale.clone(),
            floor.clone(),
            phase.clone(),
            done.clone(),
        );
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut rounds = [0usize; PHASES];
            while !stop.load(Ordering::Relaxed) {
                let during = phase.load(Ordering::Relaxed);
                for name in &names {
                    let (status, body, stale) = fetch(&client, &herald, name).await;
                    assert_eq!(status, 200, "job {name} answered {status} during faults");
                    let n = entries(&body);
                    assert!(
                        n >= floor[name],
                        "job {name} dropped to {n} targets (from {})",
                        floor[name]
                    );
                    if stale {
                        saw_stale.store(true, Ordering::Relaxed);
                    }
                }
                // A round counts for a fault only when it ran wholly inside it.
                if phase.load(Ordering::Relaxed) == during {
                    rounds[during] += 1;
                    done[during].fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            rounds
        })
    };
    // Moves to the next fault once the poller has completed a round during the current one.
    let next_phase = |phase: Arc<std::sync::atomic::AtomicUsize>| {
        let done = done.clone();
        async move {
            let now = phase.load(Ordering::Relaxed);
            for _ in 0..600 {
                if done[now].load(Ordering::Relaxed) > 0 {
                    phase.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("the poller completed no round during phase {now}");
        }
    };

    let sim_h = sim.handle();
    let relists_before = relists(&herald);
    next_phase(phase.clone()).await;
    sim_h.fault(Fault::CloseWatches).expect("fault");
    tokio::time::sleep(Duration::from_millis(500)).await;
    next_phase(phase.clone()).await;
    // A restart; while it is down the cluster grows and history is compacted, so herald's resumed
    // watches get 410 Expired and it must relist.
    sim_h
        .fault(Fault::Restart {
            duration_ms: 2000,
            refuse: true,
        })
        .expect("fault");
    tokio::time::sleep(Duration::from_millis(200)).await;
    sim_h.apply(
        (0..5)
            .map(|i| Write::Put(SimObject::Pod(mk_extra_pod(i))))
            .collect(),
    );
    sim_h.fault(Fault::Compact).expect("fault");
    tokio::time::sleep(Duration::from_secs(3)).await;
    next_phase(phase.clone()).await;
    sim_h
        .fault(Fault::Errors {
            code: 429,
            fraction: 0.5,
            retry_after_seconds: 1,
        })
        .expect("fault");
    sim_h.fault(Fault::CloseWatches).expect("fault");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The last fault lasts until the poller has gone round once inside it.
    for _ in 0..600 {
        if done[PHASES - 1].load(Ordering::Relaxed) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sim_h.fault(Fault::Clear).expect("fault");

    stop.store(true, Ordering::Relaxed);
    let rounds = poller
        .await
        .expect("no empty or partial snapshot was served");
    assert!(
        rounds.iter().all(|r| *r > 0),
        "the poller completed rounds before and during every fault: {rounds:?}"
    );
    assert!(
        saw_stale.load(Ordering::Relaxed),
        "the outage was flagged with X-Herald-Stale"
    );
    assert_converges(&sim, &herald, &specs, Duration::from_secs(40)).await;
    assert!(
        relists(&herald) > relists_before,
        "compaction made herald relist"
    );
    // Watches still in backoff after the 429s reconnect within the backoff's cap; then nothing is stale.
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let mut stale_jobs = Vec::new();
        for spec in &specs {
            if fetch(&client, &herald, &spec.name).await.2 {
                stale_jobs.push(spec.name.clone());
            }
        }
        if stale_jobs.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still stale after recovery: {stale_jobs:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Arc::into_inner(herald)
        .expect("poller finished")
        .stop()
        .await;
    sim.shutdown().await;
}

/// A pod outside every Service, with a loopback IP: it only ever adds targets.
fn mk_extra_pod(i: usize) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "default", "name": format!("extra-{i}"), "uid": format!("extra-uid-{i}"),
                     "labels": {"app": "extra"}},
        "spec": {"nodeName": "node-0", "containers": [
            {"name": "main", "image": "x", "ports": [{"name": "metrics", "containerPort": 9100}]}]},
        "status": {"phase": "Running", "podIP": format!("127.31.255.{}", 10 + i),
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("valid pod")
}

fn relists(herald: &Herald) -> u64 {
    metric(herald, "herald_upstream_relists_total{")
}

/// The sum of the samples whose line starts with `prefix`.
fn metric(herald: &Herald, prefix: &str) -> u64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, herald.shared().registry())
        .expect("encode");
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Shard `index` of `count` of a whole body: its entries whose address Prometheus's `hashmod` puts
/// there, in order, byte for byte (herald writes no whitespace, so entries join with commas).
fn shard_of(whole: &[u8], index: u64, count: u64) -> Vec<u8> {
    let entries: Vec<&serde_json::value::RawValue> =
        serde_json::from_slice(whole).expect("a json array");
    let kept: Vec<&str> = entries
        .into_iter()
        .filter(|e| {
            let v: serde_json::Value = serde_json::from_str(e.get()).expect("an entry");
            let address = v["targets"][0].as_str().expect("an address");
            herald_core::hashmod(address, count) == index
        })
        .map(|e| e.get())
        .collect();
    format!("[{}]", kept.join(",")).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_budget_too_small_for_any_body_every_job_still_equals_kube_sim_s_state() {
    // One byte: no body is ever kept, every request builds its own and drops it.
    let (sim, herald, specs) = start_with_budget(30.0, InitialList::Auto, 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.handle().set_churn(0.0);
    assert_converges(&sim, &herald, &specs, Duration::from_secs(20)).await;
    assert_eq!(herald.shared().bodies.held(), 0);
    let builds = metric(&herald, "herald_sd_body_builds_total");
    let evictions = metric(&herald, "herald_sd_body_evictions_total");
    assert!(builds >= specs.len() as u64, "{builds} builds");
    assert_eq!(evictions, builds, "every body built was evicted at once");
    // gzip too: each request deflates its own body's blocks.
    let client = reqwest::Client::builder()
        .gzip(true)
        .build()
        .expect("client");
    let state = ClusterState::read(&sim.handle());
    for spec in &specs {
        let res = client
            .get(format!("{}/sd/v1/{}", herald.url(), spec.name))
            .header("accept-encoding", "gzip")
            .send()
            .await
            .expect("herald answers");
        let body = res.bytes().await.expect("body");
        assert_eq!(&body[..], &state.expected_body(spec)[..], "{}", spec.name);
    }
    herald.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_distinct_bodies_than_the_budget_holds_asked_at_once_each_equal_the_reference() {
    let (sim, herald, specs) = start_with_budget(0.0, InitialList::Auto, usize::MAX).await;
    let state = ClusterState::read(&sim.handle());
    let client = reqwest::Client::new();
    // Room for about two whole `pods` bodies; the requests below ask for ~20 bodies' worth.
    fetch(&client, &herald, "pods").await;
    let budget = herald.shared().bodies.held() * 2;
    herald.shared().set_body_budget(budget);
    // And room for about two whole `pods` bodies expanded: the HA pairs below make bodies hot
    // (each is asked for twice at once), more than fit.
    let pods_len = state
        .expected_body(specs.iter().find(|s| s.name == "pods").expect("pods job"))
        .len();
    let hot_budget = pods_len * 2;
    herald.shared().set_hot_body_budget(hot_budget);
    let herald = Arc::new(herald);
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (herald, done) = (herald.clone(), done.clone());
        tokio::spawn(async move {
            let (mut most, mut most_hot) = (0, 0);
            while !done.load(Ordering::Relaxed) {
                let (held, hot) = herald.shared().bodies.held_with_hot();
                most = most.max(held + hot);
                most_hot = most_hot.max(hot);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (most, most_hot)
        })
    };
    let jobs = ["pods", "pods-meta", "endpointslices", "pods-relabeled"];
    let mut requests = Vec::new();
    for round in 0..2 {
        for job in jobs {
            let want_whole = state.expected_body(
                specs
                    .iter()
                    .find(|s| s.name == job)
                    .expect("a configured job"),
            );
            for count in [1u64, 2, 3, 5] {
                for index in 0..count {
                    // Two consumers of each shard (an HA pair).
                    for _ in 0..2 {
                        let (client, herald) = (client.clone(), herald.clone());
                        let want = shard_of(&want_whole, index, count);
                        requests.push(tokio::spawn(async move {
                            let url = format!(
                                "{}/sd/v1/{job}?shard={index}&shards={count}",
                                herald.url()
                            );
                            let got = client
                                .get(url)
                                .send()
                                .await
                                .expect("herald answers")
                                .bytes()
                                .await
                                .expect("a body");
                            (round, job, index, count, got.to_vec() == want)
                        }));
                    }
                }
            }
        }
    }
    for r in requests {
        let (round, job, index, count, equal) = r.await.expect("request ran");
        assert!(
            equal,
            "round {round}: {job} shard {index} of {count} differs"
        );
    }
    done.store(true, Ordering::Relaxed);
    let (most, most_hot) = watcher.await.expect("watcher ran");
    assert!(
        most <= budget,
        "held {most} bytes with the hot forms, budget {budget}"
    );
    assert!(
        most_hot <= hot_budget,
        "hot bodies held {most_hot} bytes, budget {hot_budget}"
    );
    assert!(
        metric(&herald, "herald_sd_hot_bodies_admitted_total") > 0
            && metric(&herald, "herald_sd_hot_body_responses_total") > 0,
        "bodies asked for twice at once became hot"
    );
    assert!(
        metric(&herald, "herald_sd_body_evictions_total") > 0,
        "the bodies asked for did not all fit"
    );
    Arc::into_inner(herald)
        .expect("requests finished")
        .stop()
        .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_consumers_cost_kube_sim_exactly_one_watch_per_kind() {
    let (sim, herald, specs) = start(5.0, InitialList::Auto).await;
    let herald = Arc::new(herald);
    let mut consumers = Vec::new();
    for i in 0..50 {
        let herald = herald.clone();
        let name = specs[i % specs.len()].name.clone();
        consumers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut ok = 0;
            for _ in 0..10 {
                let res = client
                    .get(format!("{}/sd/v1/{name}", herald.url()))
                    .send()
                    .await
                    .expect("herald answers");
                if res.status().is_success() {
                    ok += 1;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            ok
        }));
    }
    for c in consumers {
        assert_eq!(c.await.expect("consumer ran"), 10);
    }
    let kinds: Vec<&str> = herald.shared().needed_kinds().map(|k| k.plural()).collect();
    assert_eq!(kinds.len(), 7, "these jobs need every kind herald knows");
    let stats = sim.stats();
    let ours = &stats["by_user_agent"][USER_AGENT];
    assert_eq!(ours["watches_open"], kinds.len() as u64, "stats: {ours}");
    assert_eq!(
        ours["watches_total"],
        kinds.len() as u64,
        "no watch was reopened: {ours}"
    );
    for kind in kinds {
        assert_eq!(
            stats["by_resource"][kind]["watches_open"], 1,
            "{kind}: {}",
            stats["by_resource"][kind]
        );
    }
    Arc::into_inner(herald)
        .expect("consumers finished")
        .stop()
        .await;
    sim.shutdown().await;
}
