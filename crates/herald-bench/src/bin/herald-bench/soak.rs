//! The fault soak (issue 11): kube-sim and herald as processes, churn at a fixed write rate, a fault
//! every interval rotating through kube-sim's faults, and consumers polling every herald job (whole,
//! sharded, long-poll with If-None-Match) the whole time. Every served body is checked against the
//! lower bound the churn's invariant gives (`herald_bench::soak`); at the end, with churn stopped and
//! faults cleared, every job and shard herald serves is compared with the truth computed from scratch
//! over kube-sim's own objects (`/sim/dump`, `herald_server::reference`). `herald-bench soak` and
//! `bench/run --only soak` run it; `crates/herald-bench/tests/soak.rs` runs 60 s of it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use herald_bench::pace::paced;
use herald_bench::soak::{self, Check, Comparison, Shape, Slice, Step};
use herald_bench::{fmt, metric_sum};
use herald_server::{JobSpec, Reference};
use serde_json::{Value, json};

use crate::cluster::{ClusterSpec, Env, SETUP_UA, WRITER_UA};

/// The soak's parameters.
#[derive(Debug, Clone)]
pub struct Plan {
    pub spec: ClusterSpec,
    pub shape: Shape,
    pub seconds: f64,
    pub fault_every: f64,
    pub churn_rate: f64,
    pub poll_interval: Duration,
    pub converge_timeout: Duration,
}

/// Every role, attach_metadata, namespaces and selectors; the `soak-*` jobs see only the churned
/// workloads, so their bodies change on nearly every write.
const JOBS: &str = "\
jobs:
- name: pods
  role: pod
- name: pods-meta
  role: pod
  attach_metadata: {node: true, namespace: true}
- name: soak-pods
  role: pod
  namespaces: {names: [soak]}
- name: endpointslices
  role: endpointslice
  attach_metadata: {node: true}
- name: soak-endpointslices
  role: endpointslice
  namespaces: {names: [soak]}
  selectors:
  - role: pod
    label: soak-churn
- name: endpoints
  role: endpoints
- name: services
  role: service
- name: nodes
  role: node
- name: ingresses
  role: ingress
";

/// Jobs polled by shard as well as whole, with their shard counts.
const SHARDED: [(&str, u64); 4] = [
    ("pods", 2),
    ("endpointslices", 2),
    ("soak-pods", 3),
    ("soak-endpointslices", 2),
];

const CONSUMER_UA: &str = "soak-consumer";

/// Every (job, slice) a consumer asks for.
fn slices(specs: &[JobSpec]) -> Vec<(String, Slice)> {
    let mut out = Vec::new();
    for s in specs {
        out.push((s.name.clone(), Slice::WHOLE));
        if let Some((_, n)) = SHARDED.iter().find(|(j, _)| *j == s.name) {
            for i in 0..*n {
                out.push((
                    s.name.clone(),
                    Slice {
                        shard: Some((i, *n)),
                    },
                ));
            }
        }
    }
    out
}

fn url(herald: &str, job: &str, slice: Slice, wait: bool) -> String {
    let mut q = slice.query();
    if wait {
        if !q.is_empty() {
            q.push('&');
        }
        q.push_str("wait=5s");
    }
    if q.is_empty() {
        format!("{herald}/sd/v1/{job}")
    } else {
        format!("{herald}/sd/v1/{job}?{q}")
    }
}

/// What the consumers saw, per (job, slice) and in total.
#[derive(Debug, Default)]
struct Tally {
    responses: u64,
    ok: u64,
    not_modified: u64,
    by_code: BTreeMap<u16, u64>,
    transport_errors: u64,
    stale: u64,
    partial: u64,
    malformed: u64,
    examples: Vec<Value>,
    /// (checked bodies, min targets, max targets) per (job, slice).
    per_slice: BTreeMap<(String, Slice), (u64, usize, usize)>,
}

const EXAMPLES: usize = 20;

struct Shared {
    tally: Mutex<Tally>,
    /// The fault under way (for the examples of partial snapshots).
    fault: Mutex<&'static str>,
    started: Instant,
    stop: AtomicBool,
}

impl Shared {
    fn record(&self, job: &str, slice: Slice, status: u16, stale: bool, check: Option<Check>) {
        let mut t = self.tally.lock().expect("tally lock is never poisoned");
        t.responses += 1;
        if stale {
            t.stale += 1;
        }
        match status {
            200 => t.ok += 1,
            304 => t.not_modified += 1,
            c => *t.by_code.entry(c).or_default() += 1,
        }
        let Some(check) = check else {
            return;
        };
        let n = match &check {
            Check::Whole(n) => *n,
            Check::Partial { got, .. } => *got,
            Check::Malformed(_) => 0,
        };
        let e = t
            .per_slice
            .entry((job.to_string(), slice))
            .or_insert((0, usize::MAX, 0));
        e.0 += 1;
        e.1 = e.1.min(n);
        e.2 = e.2.max(n);
        let example = match check {
            Check::Whole(_) => None,
            Check::Partial { got, floor } => {
                t.partial += 1;
                Some(json!({"job": job, "slice": slice.describe(), "targets": got, "floor": floor}))
            }
            Check::Malformed(e) => {
                t.malformed += 1;
                Some(json!({"job": job, "slice": slice.describe(), "malformed": e}))
            }
        };
        if let Some(mut ex) = example
            && t.examples.len() < EXAMPLES
        {
            ex["at_s"] = json!(self.started.elapsed().as_secs_f64());
            ex["fault"] = json!(*self.fault.lock().expect("fault lock is never poisoned"));
            t.examples.push(ex);
        }
    }
}

/// What one consumer asks for, and the bound its answers are held to.
struct Poll {
    job: String,
    slice: Slice,
    floor: usize,
    /// Sends the last ETag as If-None-Match with `?wait=5s`.
    long_poll: bool,
}

/// One consumer: polls every interval until told to stop. Every 200 body is checked against the
/// bound.
async fn consumer(
    http: reqwest::Client,
    herald: String,
    poll: Poll,
    interval: Duration,
    shared: Arc<Shared>,
) {
    let Poll {
        job,
        slice,
        floor,
        long_poll,
    } = poll;
    let mut etag: Option<String> = None;
    let target = url(&herald, &job, slice, long_poll);
    while !shared.stop.load(Relaxed) {
        let mut req = http
            .get(&target)
            .header(reqwest::header::USER_AGENT, CONSUMER_UA)
            .timeout(Duration::from_secs(30));
        if let Some(e) = etag.as_deref().filter(|_| long_poll) {
            req = req.header(reqwest::header::IF_NONE_MATCH, e);
        }
        match req.send().await {
            Err(_) => shared.tally.lock().expect("tally lock").transport_errors += 1,
            Ok(r) => {
                let status = r.status().as_u16();
                let stale = r.headers().contains_key("x-herald-stale");
                if let Some(e) = r.headers().get(reqwest::header::ETAG)
                    && let Ok(e) = e.to_str()
                {
                    etag = Some(e.to_string());
                }
                let check = if status == 200 {
                    Some(match r.bytes().await {
                        Ok(body) => soak::check(&body, floor),
                        Err(e) => Check::Malformed(format!("body not read whole: {e}")),
                    })
                } else {
                    None
                };
                shared.record(&job, slice, status, stale, check);
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// Counters of the churn writer.
#[derive(Debug, Default)]
struct Writes {
    attempted: AtomicU64,
    applied: AtomicU64,
    failed: AtomicU64,
    creates: AtomicU64,
    deletes: AtomicU64,
    relabels: AtomicU64,
}

/// Writes the churn plan at `rate` writes per second, at most 16 in flight (a write stalled by a fault
/// holds its slot; ticks missed meanwhile are not made up for by a burst). The plan stays correct with
/// writes in flight: a slot being replaced is busy until its create is answered, and a pod is deleted
/// only after its replacement was confirmed.
async fn writer(
    http: reqwest::Client,
    sim: String,
    plan: soak::Plan,
    node: String,
    rate: f64,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Writes {
    let w = Arc::new(Writes::default());
    let plan = Arc::new(Mutex::new(plan));
    let pods = format!("{sim}/api/v1/namespaces/{}/pods", soak::NAMESPACE);
    paced(rate, 16, stop, |_| {
        let step = plan
            .lock()
            .expect("plan lock is never poisoned")
            .next_step();
        let (http, plan, w, pods, node) = (
            http.clone(),
            plan.clone(),
            w.clone(),
            pods.clone(),
            node.clone(),
        );
        async move {
            let req = match &step {
                Step::Create { pod, .. } => {
                    w.creates.fetch_add(1, Relaxed);
                    http.post(&pods)
                        .json(&soak::pod_json(pod, true, &node, 0, true))
                }
                Step::Delete { pod } => {
                    w.deletes.fetch_add(1, Relaxed);
                    http.delete(format!("{pods}/{}", pod.name))
                }
                Step::Relabel {
                    pod,
                    generation,
                    ready,
                } => {
                    w.relabels.fetch_add(1, Relaxed);
                    http.put(format!("{pods}/{}", pod.name))
                        .json(&soak::pod_json(pod, false, &node, *generation, *ready))
                }
            };
            w.attempted.fetch_add(1, Relaxed);
            let res = req
                .header(reqwest::header::USER_AGENT, WRITER_UA)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            let ok = match (&step, res) {
                (_, Ok(r)) if r.status().is_success() => true,
                // Already gone: what a deletion wanted.
                (Step::Delete { .. }, Ok(r)) if r.status().as_u16() == 404 => true,
                _ => false,
            };
            if ok {
                w.applied.fetch_add(1, Relaxed);
            } else {
                w.failed.fetch_add(1, Relaxed);
            }
            plan.lock()
                .expect("plan lock is never poisoned")
                .done(step, ok);
        }
    })
    .await;
    Arc::into_inner(w).expect("every write has finished")
}

async fn post_fault(env: &Env, sim: &str, body: &Value) -> anyhow::Result<()> {
    let r = env
        .http
        .post(format!("{sim}/sim/faults"))
        .header(reqwest::header::USER_AGENT, SETUP_UA)
        .timeout(Duration::from_secs(5))
        .json(body)
        .send()
        .await
        .with_context(|| format!("posting fault {body}"))?;
    anyhow::ensure!(
        r.status().is_success(),
        "fault {body}: {}",
        r.text().await.unwrap_or_default()
    );
    Ok(())
}

/// Clears faults, retrying while a refusing restart still drops connections.
async fn clear(env: &Env, sim: &str) -> anyhow::Result<()> {
    let mut last = None;
    for _ in 0..50 {
        match post_fault(env, sim, &json!({"fault": "clear"})).await {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last.expect("fifty attempts made")).context("clearing faults")
}

/// Injects the rotation's faults, one every `every`, the first after 2 s, until `seconds`.
async fn faults(env: Env, sim: String, plan: Plan, shared: Arc<Shared>) -> Vec<Value> {
    let rotation = soak::rotation();
    let mut log = Vec::new();
    let mut at = 2.0;
    let mut k = 0;
    while at < plan.seconds {
        let wait = at - shared.started.elapsed().as_secs_f64();
        if wait > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
        let f = &rotation[k % rotation.len()];
        let mut result = clear(&env, &sim).await;
        *shared.fault.lock().expect("fault lock") = f.name;
        for p in &f.posts {
            if result.is_ok() {
                result = post_fault(&env, &sim, p).await;
            }
        }
        log.push(json!({
            "at_s": shared.started.elapsed().as_secs_f64(), "fault": f.name,
            "error": result.err().map(|e| format!("{e:#}")),
        }));
        if let Some(ms) = f.lasts_ms {
            let left = plan.seconds - shared.started.elapsed().as_secs_f64();
            tokio::time::sleep(
                Duration::from_millis(ms).min(Duration::from_secs_f64(left.max(0.0))),
            )
            .await;
            let _ = clear(&env, &sim).await;
            *shared.fault.lock().expect("fault lock") = "none";
        }
        k += 1;
        at += plan.fault_every;
    }
    log
}

async fn truth(env: &Env, sim: &str) -> anyhow::Result<Reference> {
    let dump = env.get_json(&format!("{sim}/sim/dump")).await?;
    Reference::from_list(dump).context("kube-sim's dump")
}

/// Compares every (job, slice) herald serves with `truth`.
async fn compare_all(
    env: &Env,
    herald: &str,
    specs: &[JobSpec],
    truth: &Reference,
) -> anyhow::Result<Vec<(String, Slice, Comparison)>> {
    let mut out = Vec::new();
    for (job, slice) in slices(specs) {
        let spec = specs
            .iter()
            .find(|s| s.name == job)
            .expect("slices come from the specs");
        let want: Vec<_> = truth
            .entries(spec)
            .into_iter()
            .filter(|e| slice.holds(&e.target))
            .collect();
        let body = env
            .get(&url(herald, &job, slice, false))
            .await?
            .bytes()
            .await?;
        out.push((job, slice, soak::compare(&body, &want)));
    }
    Ok(out)
}

/// Polls until herald serves the truth for every job and slice; returns the last comparison and the
/// seconds it took (`None` when `within` ran out).
async fn converge(
    env: &Env,
    sim: &str,
    herald: &str,
    specs: &[JobSpec],
    within: Duration,
) -> anyhow::Result<(Vec<(String, Slice, Comparison)>, Option<f64>)> {
    let t = Instant::now();
    loop {
        let truth = truth(env, sim).await?;
        let cmp = compare_all(env, herald, specs, &truth).await?;
        if cmp.iter().all(|(_, _, c)| c.equal) {
            return Ok((cmp, Some(t.elapsed().as_secs_f64())));
        }
        if t.elapsed() > within {
            return Ok((cmp, None));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn setup(env: &Env, sim: &str, plan: &soak::Plan) -> anyhow::Result<String> {
    let nodes = env.get_json(&format!("{sim}/api/v1/nodes")).await?;
    let node = nodes["items"][0]["metadata"]["name"]
        .as_str()
        .context("kube-sim has no node")?
        .to_string();
    let post = |path: String, body: Value| {
        let http = env.http.clone();
        async move {
            let r = http
                .post(&path)
                .header(reqwest::header::USER_AGENT, SETUP_UA)
                .json(&body)
                .send()
                .await
                .with_context(|| format!("POST {path}"))?;
            anyhow::ensure!(
                r.status().is_success(),
                "POST {path}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            );
            anyhow::Ok(())
        }
    };
    post(format!("{sim}/api/v1/namespaces"), soak::namespace_json()).await?;
    let ns = format!("{sim}/api/v1/namespaces/{}", soak::NAMESPACE);
    for w in 0..plan.workloads() {
        post(
            format!("{ns}/services"),
            soak::service_json(w, plan.rolling(w)),
        )
        .await?;
    }
    for p in plan.initial_pods() {
        let rolling = plan.rolling(p.workload);
        post(
            format!("{ns}/pods"),
            soak::pod_json(&p, rolling, &node, 0, true),
        )
        .await?;
    }
    Ok(node)
}

pub async fn run(env: &Env, plan: &Plan) -> anyhow::Result<Value> {
    let dir = env.dir("soak")?;
    eprintln!(
        "[soak] {} + soak workloads {:?}; {} s, a fault every {} s, churn {} writes/s",
        plan.spec.describe(),
        plan.shape,
        plan.seconds,
        plan.fault_every,
        plan.churn_rate
    );
    let cfg = herald_core::parse_config(JOBS).context("the soak's job file")?;
    let specs = herald_server::job_specs(&cfg, None).context("the soak's jobs")?;
    let churn = soak::Plan::new(plan.shape, plan.spec.seed).map_err(anyhow::Error::msg)?;
    let sim = env.start_sim(&plan.spec, &dir).await?;
    let node = setup(env, &sim.url, &churn).await?;
    let (herald, hurl, _) = env.start_herald(&sim.url, JOBS, false, &dir).await?;
    env.wait_ok(&format!("{hurl}/readyz"), Duration::from_secs(300))
        .await?;
    // The bounds come from the truth at the start, once herald serves it.
    let (start_cmp, start_secs) =
        converge(env, &sim.url, &hurl, &specs, plan.converge_timeout).await?;
    anyhow::ensure!(
        start_secs.is_some(),
        "herald did not serve kube-sim's state before the soak: {}",
        differences(&start_cmp).join("; ")
    );
    let start = truth(env, &sim.url).await?;
    let mut floors = BTreeMap::new();
    for (job, slice) in slices(&specs) {
        let spec = specs.iter().find(|s| s.name == job).expect("from specs");
        floors.insert((job, slice), soak::floor(&start.entries(spec), slice));
    }

    let shared = Arc::new(Shared {
        tally: Mutex::new(Tally::default()),
        fault: Mutex::new("none"),
        started: Instant::now(),
        stop: AtomicBool::new(false),
    });
    let consumers_http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(256)
        .build()?;
    let mut consumers = Vec::new();
    for ((job, slice), floor) in &floors {
        // Every slice polled plainly; every whole job long-polled too.
        let long = if slice.shard.is_none() {
            &[false, true][..]
        } else {
            &[false][..]
        };
        for &lp in long {
            let poll = Poll {
                job: job.clone(),
                slice: *slice,
                floor: *floor,
                long_poll: lp,
            };
            consumers.push(tokio::spawn(consumer(
                consumers_http.clone(),
                hurl.clone(),
                poll,
                plan.poll_interval,
                shared.clone(),
            )));
        }
    }
    let cpu_before = (herald.cpu(), sim.proc.cpu());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let w = tokio::spawn(writer(
        env.http.clone(),
        sim.url.clone(),
        churn,
        node,
        plan.churn_rate,
        stop_rx,
    ));
    let f = tokio::spawn(faults(
        env.clone(),
        sim.url.clone(),
        plan.clone(),
        shared.clone(),
    ));
    let fault_log = f.await.context("fault task")?;
    let left = plan.seconds - shared.started.elapsed().as_secs_f64();
    if left > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(left)).await;
    }
    shared.stop.store(true, Relaxed);
    let _ = stop_tx.send(true);
    let soak_secs = shared.started.elapsed().as_secs_f64();
    let writes = w.await.context("writer task")?;
    clear(env, &sim.url).await?;
    for c in consumers {
        c.await.context("consumer task")?;
    }
    let cpu_after = (herald.cpu(), sim.proc.cpu());
    let (final_cmp, converge_secs) =
        converge(env, &sim.url, &hurl, &specs, plan.converge_timeout).await?;
    let final_truth = truth(env, &sim.url).await?;
    let metrics = env.get_text(&format!("{hurl}/metrics")).await?;
    let m = |name: &str| metric_sum(&metrics, name).unwrap_or(0.0);
    let herald_rss = herald.rss();
    herald.stop().await;
    sim.proc.stop().await;

    let t = shared.tally.lock().expect("tally lock");
    let n = |a: &AtomicU64| a.load(Relaxed);
    let equal = converge_secs.is_some();
    let passed = t.partial == 0 && t.malformed == 0 && equal;
    let per_slice: Vec<Value> = floors
        .iter()
        .map(|((job, slice), floor)| {
            let (n, lo, hi) = t
                .per_slice
                .get(&(job.clone(), *slice))
                .copied()
                .unwrap_or((0, 0, 0));
            json!({"job": job, "slice": slice.describe(), "floor": floor, "bodies": n,
                   "min_targets": if n == 0 { None } else { Some(lo) }, "max_targets": hi})
        })
        .collect();
    let finals: Vec<Value> = final_cmp
        .iter()
        .map(|(job, slice, c)| {
            json!({"job": job, "slice": slice.describe(), "truth_targets": c.truth,
                   "served_targets": c.served, "equal": c.equal, "missing": c.missing,
                   "extra": c.extra, "differing": c.differing})
        })
        .collect();
    let mut faults_by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    for f in &fault_log {
        *faults_by_kind
            .entry(f["fault"].as_str().unwrap_or("?"))
            .or_default() += 1;
    }
    Ok(json!({
        "passed": passed,
        "cluster": plan.spec.describe(),
        "soak_workloads": {"rolling": plan.shape.rolling, "relabel": plan.shape.relabel,
                           "replicas": plan.shape.replicas},
        "seconds": soak_secs,
        "fault_every_s": plan.fault_every,
        "churn": {
            "rate_asked": plan.churn_rate, "attempted": n(&writes.attempted),
            "attempted_per_s": n(&writes.attempted) as f64 / soak_secs,
            "applied": n(&writes.applied), "failed": n(&writes.failed),
            "applied_per_s": n(&writes.applied) as f64 / soak_secs,
            "creates": n(&writes.creates), "deletes": n(&writes.deletes), "relabels": n(&writes.relabels),
        },
        "faults": fault_log,
        "faults_by_kind": faults_by_kind,
        "consumers": {"count": per_slice.len() + specs.len(), "poll_interval_ms": plan.poll_interval.as_millis() as u64,
                      "jobs": specs.len(), "slices": per_slice.len()},
        "responses": {
            "total": t.responses, "ok_200": t.ok, "not_modified_304": t.not_modified,
            "other_by_code": t.by_code.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "transport_errors": t.transport_errors, "stale": t.stale,
            "partial_snapshots": t.partial, "malformed": t.malformed,
            "examples": t.examples,
        },
        "per_slice": per_slice,
        "final": {
            "equal": equal, "converge_seconds": converge_secs,
            "truth_objects": {"pods": final_truth.count(herald_server::WatchKind::Pod),
                              "endpointslices": final_truth.count(herald_server::WatchKind::EndpointSlice)},
            "slices": finals,
        },
        "herald": {
            "upstream_watches": m("herald_upstream_watches_total"),
            "upstream_relists": m("herald_upstream_relists_total"),
            "upstream_errors": m("herald_upstream_errors_total"),
            "cpu_seconds_during_soak": cpu_after.0 - cpu_before.0,
            "rss_bytes_at_end": herald_rss,
        },
        "kube_sim_cpu_seconds_during_soak": cpu_after.1 - cpu_before.1,
        "start_converge_seconds": start_secs,
    }))
}

fn differences(cmp: &[(String, Slice, Comparison)]) -> Vec<String> {
    cmp.iter()
        .filter(|(_, _, c)| !c.equal)
        .map(|(job, slice, c)| {
            format!(
                "{job} ({}): served {} targets, truth {}; missing {:?}, extra {:?}, differing {:?}",
                slice.describe(),
                c.served,
                c.truth,
                c.missing,
                c.extra,
                c.differing
            )
        })
        .collect()
}

/// Why a soak's data is a failure, or `None` when it passed.
pub fn failure(d: &Value) -> Option<String> {
    if d["passed"].as_bool() == Some(true) {
        return None;
    }
    let r = &d["responses"];
    let mut why = Vec::new();
    if r["partial_snapshots"].as_u64() != Some(0) {
        why.push(format!(
            "{} partial snapshots served (e.g. {})",
            r["partial_snapshots"], r["examples"]
        ));
    }
    if r["malformed"].as_u64() != Some(0) {
        why.push(format!("{} malformed bodies", r["malformed"]));
    }
    if d["final"]["equal"].as_bool() != Some(true) {
        let bad: Vec<&Value> = d["final"]["slices"]
            .as_array()
            .map(|a| a.iter().filter(|s| s["equal"] != true).collect())
            .unwrap_or_default();
        why.push(format!(
            "the final state differs from kube-sim's: {}",
            Value::from(bad.into_iter().cloned().collect::<Vec<_>>())
        ));
    }
    Some(why.join("; "))
}

/// The soak's figures as markdown (RESULTS.md's "Fault soak" section and `soak.md`).
pub fn markdown(d: &Value) -> String {
    let n = |v: &Value| v.as_f64();
    let r = &d["responses"];
    let c = &d["churn"];
    let h = &d["herald"];
    let other: Vec<String> = r["other_by_code"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| format!("{k}: {v}")).collect())
        .unwrap_or_default();
    let faults: Vec<String> = d["faults_by_kind"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| format!("{k} ×{v}")).collect())
        .unwrap_or_default();
    let fault_errors = d["faults"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|f| !f["error"].is_null()).count());
    let mut o = format!(
        "**{}**: {} s on {}, plus soak workloads ({} rolling, {} relabel, {} replicas each); a fault \
         every {} s ({}; {} injections failed).\n\n",
        if d["passed"] == true {
            "Passed"
        } else {
            "FAILED"
        },
        fmt(n(&d["seconds"]), 0),
        d["cluster"].as_str().unwrap_or("?"),
        d["soak_workloads"]["rolling"],
        d["soak_workloads"]["relabel"],
        d["soak_workloads"]["replicas"],
        fmt(n(&d["fault_every_s"]), 0),
        faults.join(", "),
        fault_errors,
    );
    o.push_str("| | |\n|---|---|\n");
    let rows = [
        (
            "churn writes applied / attempted",
            format!(
                "{} / {} ({}/s attempted; {} creates, {} deletes, {} relabels; failed during faults: {})",
                fmt(n(&c["applied"]), 0),
                fmt(n(&c["attempted"]), 0),
                fmt(n(&c["attempted_per_s"]), 1),
                fmt(n(&c["creates"]), 0),
                fmt(n(&c["deletes"]), 0),
                fmt(n(&c["relabels"]), 0),
                fmt(n(&c["failed"]), 0),
            ),
        ),
        (
            "consumers (job × slice, poll interval)",
            format!(
                "{} ({} jobs, {} slices polled, whole jobs long-polled too; {} ms)",
                d["consumers"]["count"],
                d["consumers"]["jobs"],
                d["consumers"]["slices"],
                d["consumers"]["poll_interval_ms"]
            ),
        ),
        (
            "responses served",
            format!(
                "{} (200: {}, 304: {})",
                fmt(n(&r["total"]), 0),
                fmt(n(&r["ok_200"]), 0),
                fmt(n(&r["not_modified_304"]), 0)
            ),
        ),
        (
            "non-200/304 by code",
            if other.is_empty() {
                "none".into()
            } else {
                other.join(", ")
            },
        ),
        ("transport errors", fmt(n(&r["transport_errors"]), 0)),
        ("responses marked X-Herald-Stale", fmt(n(&r["stale"]), 0)),
        (
            "**partial snapshots** (fewer targets than the bound)",
            format!("**{}**", fmt(n(&r["partial_snapshots"]), 0)),
        ),
        ("malformed bodies", fmt(n(&r["malformed"]), 0)),
        (
            "**final state equal to kube-sim's** (every job and shard)",
            format!(
                "**{}** (caught up {} s after faults cleared; {} pods, {} EndpointSlices)",
                if d["final"]["equal"] == true {
                    "yes"
                } else {
                    "no"
                },
                fmt(n(&d["final"]["converge_seconds"]), 1),
                d["final"]["truth_objects"]["pods"],
                d["final"]["truth_objects"]["endpointslices"],
            ),
        ),
        (
            "herald upstream: watches started, relists, errors",
            format!(
                "{}, {}, {}",
                fmt(n(&h["upstream_watches"]), 0),
                fmt(n(&h["upstream_relists"]), 0),
                fmt(n(&h["upstream_errors"]), 0)
            ),
        ),
        (
            "herald CPU during the soak, RSS at the end",
            format!(
                "{} s, {} MiB",
                fmt(n(&h["cpu_seconds_during_soak"]), 1),
                fmt(n(&h["rss_bytes_at_end"]).map(|b| b / 1048576.0), 0)
            ),
        ),
    ];
    for (k, v) in rows {
        o.push_str(&format!("| {k} | {v} |\n"));
    }
    o
}
