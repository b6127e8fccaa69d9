//! Section `realcp`: the real control plane's cost (etcd 3.7, kube-apiserver and
//! kube-controller-manager v1.37.2, `peers/build`), N consumers directly on kube-apiserver against
//! the same N attached to one herald, measured from the apiserver's own metrics and `/proc`.
//!
//! Consumers, N of each: Prometheus-SD-shaped (`promsd`, Prometheus's kubernetes_sd as a library, role
//! endpointslice: informers of EndpointSlices, Services and Pods) and kube-proxy-shaped
//! (`proxy-informers`, N sets of kube-proxy's four informers, each set on its own connections).
//! Through herald, both read herald's Kubernetes API face, so the apiserver sees only herald.
//!
//! Three phases per row: the consumers' start (all at once, as in a rollout) until every one has
//! synced; a window of churn through the API (pods created, deleted and flapping readiness) while a
//! probe times another client's writes; and a restart of every consumer until all have synced again.
//! Per phase: kube-apiserver's and etcd's CPU seconds and peak RSS, the apiserver's watch events and
//! their bytes, its LIST/GET response bytes, its open watches per resource, and herald's CPU.
//!
//! NB: `apiserver_request_total` counts a WATCH when it ends, so watches are counted open
//! (`apiserver_longrunning_requests`), not started; client-go 1.37's informers start with a streaming
//! list, whose initial objects are watch events.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use herald_bench::procs::Proc;
use herald_bench::{median, procfs};
use kube_sim::generate::{ClusterSpec, generate};
use kube_sim::peers::controlplane::{ADMIN_TOKEN, Binaries, ControlPlane, Options};
use serde_json::{Value, json};

use crate::cluster::{Env, herald_jobs};

#[derive(Debug, Clone)]
pub struct Plan {
    /// `small`, or a scale of `k8s-limits`.
    pub preset: &'static str,
    pub scale: f64,
    pub seed: u64,
    pub consumers: Vec<usize>,
    /// Churn events a second through the API in the churn window.
    pub churn_rate: f64,
    pub churn_seconds: f64,
}

impl Plan {
    fn spec(&self) -> ClusterSpec {
        match self.preset {
            "small" => ClusterSpec::small(),
            _ => {
                let l = ClusterSpec::k8s_limits();
                let s = self.scale;
                ClusterSpec {
                    // Rounded as herald-bench's kube-sim clusters are (`cluster::ClusterSpec`).
                    nodes: ((l.nodes as f64 * s).round() as usize).max(1),
                    namespaces: ((l.namespaces as f64 * s).round() as usize).max(1),
                    services: ((l.services as f64 * s).round() as usize).max(1),
                    pods: ((l.pods as f64 * s).round() as usize).max(1),
                    ..l
                }
            }
        }
    }

    fn describe(&self) -> String {
        let s = self.spec();
        format!(
            "{} ×{} (seed {}): {} nodes, {} Services, {} pods",
            self.preset, self.scale, self.seed, s.nodes, s.services, s.pods
        )
    }
}

/// Counters and gauges read from the apiserver's `/metrics` and from `/proc`.
#[derive(Debug, Clone, Default)]
struct Snapshot {
    apiserver_cpu: f64,
    etcd_cpu: f64,
    herald_cpu: f64,
    watch_events: f64,
    watch_event_bytes: f64,
    response_bytes: f64,
    lists: f64,
    at: Option<Instant>,
}

/// The parsed samples of a Prometheus text exposition: (name, labels, value).
fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (head, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match head.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (head, ""),
        };
        let mut m = BTreeMap::new();
        // Label values here hold no `",` sequences (resource, verb, group, kind names).
        for pair in labels.split("\",") {
            if let Some((k, v)) = pair.split_once("=\"") {
                m.insert(k.trim().to_string(), v.trim_end_matches('"').to_string());
            }
        }
        out.push((name.to_string(), m, v));
    }
    out
}

fn sum(
    s: &[(String, BTreeMap<String, String>, f64)],
    name: &str,
    pick: impl Fn(&BTreeMap<String, String>) -> bool,
) -> f64 {
    s.iter()
        .filter(|(n, l, _)| n == name && pick(l))
        .map(|(_, _, v)| v)
        .sum()
}

/// Open WATCH requests per resource (`apiserver_longrunning_requests`).
fn watches_open(s: &[(String, BTreeMap<String, String>, f64)]) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for (n, l, v) in s {
        if n == "apiserver_longrunning_requests" && l.get("verb").is_some_and(|v| v == "WATCH") {
            *m.entry(l.get("resource").cloned().unwrap_or_default())
                .or_insert(0.0) += v;
        }
    }
    m.retain(|_, v| *v > 0.0);
    m
}

struct Run<'a> {
    env: &'a Env,
    cp: &'a ControlPlane,
    herald_pid: u32,
    promsd: PathBuf,
    proxy_informers: PathBuf,
    dir: PathBuf,
}

impl Run<'_> {
    async fn snapshot(&self) -> anyhow::Result<(Snapshot, BTreeMap<String, f64>)> {
        let text = self.cp.metrics().await?;
        let s = samples(&text);
        let pid = |p: Option<u32>| {
            p.map_or(f64::NAN, |p| {
                procfs::cpu_seconds(&p.to_string()).unwrap_or(f64::NAN)
            })
        };
        Ok((
            Snapshot {
                apiserver_cpu: pid(self.cp.apiserver.pid()),
                etcd_cpu: pid(self.cp.etcd.pid()),
                herald_cpu: pid(Some(self.herald_pid)),
                watch_events: sum(&s, "apiserver_watch_events_total", |_| true),
                watch_event_bytes: sum(&s, "apiserver_watch_events_sizes_sum", |_| true),
                // LIST and GET only: a WATCH's size is recorded when it ends, all of it at once.
                response_bytes: sum(&s, "apiserver_response_sizes_sum", |l| {
                    l.get("verb").is_some_and(|v| v == "LIST" || v == "GET")
                }),
                lists: sum(&s, "apiserver_request_total", |l| {
                    l.get("verb").is_some_and(|v| v == "LIST")
                }),
                at: Some(Instant::now()),
            },
            watches_open(&s),
        ))
    }

    /// N promsd and one proxy-informers with N sets, on `kubeconfig`; returns them once every one
    /// has synced.
    async fn start_consumers(
        &self,
        n: usize,
        kubeconfig: &Path,
        writes: &Path,
        tag: &str,
    ) -> anyhow::Result<Consumers> {
        let dir = self.dir.join(tag);
        std::fs::create_dir_all(&dir)?;
        let sd = dir.join("sd.yml");
        std::fs::write(
            &sd,
            format!(
                "role: endpointslice\nkubeconfig_file: {}\n",
                kubeconfig.display()
            ),
        )?;
        let mut promsd = Vec::new();
        for i in 0..n {
            let port = crate::cluster::free_port()?;
            let p = Proc::spawn_plain(
                "promsd",
                &self.promsd,
                &[
                    format!("--config={}", sd.display()),
                    format!("--listen=127.0.0.1:{port}"),
                ],
                &dir,
                &format!("promsd-{i}"),
            )?;
            promsd.push((p, format!("http://127.0.0.1:{port}")));
        }
        let proxy = Proc::spawn_plain(
            "proxy-informers",
            &self.proxy_informers,
            &[
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--write-kubeconfig={}", writes.display()),
                format!("--informers={n}"),
                "--protobuf".into(),
                "--warmup=0s".into(),
                "--seconds=100000s".into(),
                // One Service update every 10 s: the writer cannot be turned off; the same in
                // every row.
                "--rate=0.1".into(),
                format!("--json={}", dir.join("proxy-informers.json").display()),
            ],
            &dir,
            "proxy-informers",
        )?;
        let c = Consumers { promsd, proxy };
        let deadline = Instant::now() + self.sync_timeout();
        // promsd answers /targets once its Discoverer sent groups and then kept quiet for 500 ms.
        for (_, url) in &c.promsd {
            loop {
                let r = self
                    .env
                    .http
                    .get(format!("{url}/targets?quiet_ms=500"))
                    .send()
                    .await;
                if let Ok(r) = r
                    && r.status().is_success()
                {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "promsd at {url} did not sync within {:?}",
                        self.sync_timeout()
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        loop {
            let log = std::fs::read_to_string(dir.join("proxy-informers.log")).unwrap_or_default();
            if log.contains("sets synced in") {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "proxy-informers did not sync within {:?}:\n{log}",
                    self.sync_timeout()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(c)
    }

    fn sync_timeout(&self) -> Duration {
        Duration::from_secs(900)
    }
}

struct Consumers {
    promsd: Vec<(Proc, String)>,
    proxy: Proc,
}

impl Consumers {
    fn cpu(&self) -> f64 {
        self.promsd.iter().map(|(p, _)| p.cpu()).sum::<f64>() + self.proxy.cpu()
    }

    async fn stop(self) {
        for (p, _) in self.promsd {
            p.stop().await;
        }
        self.proxy.stop().await;
    }
}

/// Peak RSS of the apiserver, etcd and herald while a phase runs, sampled every 100 ms.
struct Peaks {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<[u64; 3]>,
}

impl Peaks {
    fn start(pids: [Option<u32>; 3]) -> Peaks {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let mut peak = [0u64; 3];
            while !s.load(Ordering::Relaxed) {
                for (i, p) in pids.iter().enumerate() {
                    if let Some(p) = p {
                        peak[i] = peak[i].max(procfs::rss_bytes(&p.to_string()).unwrap_or(0));
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        });
        Peaks { stop, task }
    }

    async fn finish(self) -> [u64; 3] {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or([0; 3])
    }
}

fn phase(a: &Snapshot, b: &Snapshot, peaks: [u64; 3], extra: Value) -> Value {
    let mib = |x: u64| x as f64 / 1048576.0;
    let mut v = json!({
        "seconds": b.at.zip(a.at).map(|(b, a)| (b - a).as_secs_f64()),
        "apiserver_cpu_seconds": b.apiserver_cpu - a.apiserver_cpu,
        "etcd_cpu_seconds": b.etcd_cpu - a.etcd_cpu,
        "herald_cpu_seconds": b.herald_cpu - a.herald_cpu,
        "apiserver_peak_rss_mib": mib(peaks[0]),
        "etcd_peak_rss_mib": mib(peaks[1]),
        "herald_peak_rss_mib": mib(peaks[2]),
        "watch_events": b.watch_events - a.watch_events,
        "watch_event_bytes": b.watch_event_bytes - a.watch_event_bytes,
        "response_bytes": b.response_bytes - a.response_bytes,
        "lists": b.lists - a.lists,
    });
    if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    v
}

/// Times PATCHes of one ConfigMap every 200 ms until `stop`: another client's writes.
async fn probe_writes(cp: &ControlPlane, stop: &AtomicBool, n: &AtomicU64) -> Vec<f64> {
    let path = "/api/v1/namespaces/default/configmaps/herald-bench-probe";
    let _ = cp
        .request(
            http::Method::POST,
            "/api/v1/namespaces/default/configmaps",
            Some((
                "application/json",
                br#"{"metadata":{"name":"herald-bench-probe"},"data":{"n":"0"}}"#.to_vec(),
            )),
        )
        .await;
    let mut ms = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let i = n.fetch_add(1, Ordering::Relaxed);
        let t = Instant::now();
        let body = format!(r#"{{"data":{{"n":"{i}"}}}}"#).into_bytes();
        if let Ok((code, _)) = cp
            .request(
                http::Method::PATCH,
                path,
                Some(("application/merge-patch+json", body)),
            )
            .await
            && code.is_success()
        {
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ms
}

fn percentile(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(s[((s.len() - 1) as f64 * p).round() as usize])
}

/// `SCALE=N,N,...;SCALE=N,...` → (scale, consumer counts) per cluster.
pub fn parse_runs(text: &str) -> anyhow::Result<Vec<(f64, Vec<usize>)>> {
    text.split(';')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (scale, ns) = p
                .split_once('=')
                .with_context(|| format!("--realcp {p:?}: expected SCALE=N,N,..."))?;
            let scale: f64 = scale
                .trim()
                .parse()
                .with_context(|| format!("--realcp {p:?}: the scale is not a number"))?;
            let ns = ns
                .split(',')
                .map(|n| n.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| {
                    format!("--realcp {p:?}: a consumer count is not a whole number")
                })?;
            anyhow::ensure!(
                scale > 0.0 && !ns.is_empty() && ns.iter().all(|&n| n > 0),
                "--realcp {p:?}: the scale and every count must be positive"
            );
            Ok((scale, ns))
        })
        .collect()
}

/// Every cluster of the plan in turn, each on a control plane of its own; a cluster that fails is
/// recorded with its error and the next one still runs.
pub async fn run_all(env: &Env, plans: &[Plan]) -> anyhow::Result<Value> {
    let mut out = Vec::new();
    for p in plans {
        out.push(match run(env, p).await {
            Ok(v) => v,
            Err(e) => {
                eprintln!("[realcp] {} failed: {e:#}", p.describe());
                json!({"cluster": p.describe(), "error": format!("{e:#}")})
            }
        });
    }
    Ok(json!({ "clusters": out }))
}

pub async fn run(env: &Env, plan: &Plan) -> anyhow::Result<Value> {
    let dir = env.dir(&format!("realcp-{}", plan.scale))?;
    eprintln!("[realcp] {}", plan.describe());
    let bins = Binaries::find().context("the control plane is not built: run peers/build")?;
    let find = |name: &str| {
        kube_sim::peers::find(name, kube_sim::peers::GO_PEERS_INSTALL)
            .with_context(|| format!("{name} is not built: run peers/build"))
    };
    let promsd = find("promsd")?;
    let proxy_informers = find("proxy-informers")?;
    let spec = plan.spec();
    let mut cp = ControlPlane::start_with(
        &bins,
        Options {
            service_cidr: spec.service_cidr.to_string(),
            ..Options::default()
        },
    )
    .await?;
    let rss = |p: Option<u32>| {
        p.and_then(|p| procfs::rss_bytes(&p.to_string()))
            .map_or(f64::NAN, |b| b as f64 / 1048576.0)
    };
    let apiserver_empty_mib = rss(cp.apiserver.pid());
    // herald on the empty cluster: what it holds before any object.
    let admin_kubeconfig = dir.join("admin.kubeconfig");
    std::fs::write(&admin_kubeconfig, cp.kubeconfig_yaml(ADMIN_TOKEN))?;
    let herald_empty_mib = {
        let config = dir.join("herald-empty.yaml");
        std::fs::write(&config, herald_jobs(""))?;
        let args: Vec<String> = vec![
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            "--kubeconfig".into(),
            admin_kubeconfig.display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--kube-listen".into(),
            "127.0.0.1:0".into(),
            "--kube-insecure".into(),
        ];
        let (p, found) = Proc::start(
            "herald",
            &env.herald,
            &args,
            &dir,
            &env.child_log,
            &["herald serving on", "kubernetes API on"],
        )
        .await?;
        env.wait_ok(&format!("{}/readyz", found[0]), Duration::from_secs(60))
            .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let m = p.rss() / 1048576.0;
        p.stop().await;
        m
    };
    let cluster = generate(&spec, plan.seed);
    let t = Instant::now();
    let objects = cp.load(&cluster).await?;
    let load_seconds = t.elapsed().as_secs_f64();
    cp.wait_endpointslices(Duration::from_secs(900)).await?;
    eprintln!("  loaded {objects} objects in {load_seconds:.1} s");
    // The apiserver holding the cluster, after a restart: its watch cache filled by its own
    // lists, nothing else in its heap from the load.
    cp.restart_apiserver().await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let apiserver_loaded_mib = rss(cp.apiserver.pid());

    let first_sync = first_sync(env, &cp, &admin_kubeconfig, &dir).await?;
    let raw_reads = raw_reads(&cp).await?;

    // herald, its face on the default kinds, started before the rows; its own start measured.
    let (herald, hurl, kube) = {
        let config = dir.join("herald.yaml");
        std::fs::write(&config, herald_jobs(""))?;
        let args: Vec<String> = vec![
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            "--kubeconfig".into(),
            admin_kubeconfig.display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--kube-listen".into(),
            "127.0.0.1:0".into(),
            "--kube-insecure".into(),
        ];
        let run0 = Run {
            env,
            cp: &cp,
            herald_pid: 0,
            promsd: promsd.clone(),
            proxy_informers: proxy_informers.clone(),
            dir: dir.clone(),
        };
        let (a, _) = run0.snapshot().await?;
        let peaks = Peaks::start([cp.apiserver.pid(), cp.etcd.pid(), None]);
        let (p, found) = Proc::start(
            "herald",
            &env.herald,
            &args,
            &dir,
            &env.child_log,
            &["herald serving on", "kubernetes API on"],
        )
        .await?;
        let hurl = found[0].clone();
        env.wait_ok(&format!("{hurl}/readyz"), Duration::from_secs(900))
            .await?;
        let (mut b, _) = run0.snapshot().await?;
        b.herald_cpu = p.cpu();
        let mut a = a;
        a.herald_cpu = 0.0;
        let start = phase(&a, &b, peaks.finish().await, json!({}));
        ((p, start), hurl, found[1].clone())
    };
    let (herald, herald_start) = herald;
    eprintln!("  herald synced: {herald_start}");
    let herald_synced_mib = herald.rss() / 1048576.0;
    let face_kubeconfig = dir.join("face.kubeconfig");
    std::fs::write(
        &face_kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {kube}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )?;
    let run = Run {
        env,
        cp: &cp,
        herald_pid: herald.pid,
        promsd,
        proxy_informers,
        dir: dir.clone(),
    };
    let mut churn = kube_sim::churn::Churn::new(plan.seed, &cluster);
    let mut rows = Vec::new();
    for &n in &plan.consumers {
        for via in ["direct", "herald"] {
            let kc = if via == "direct" {
                &admin_kubeconfig
            } else {
                &face_kubeconfig
            };
            let row = measure(&run, plan, &mut churn, n, via, kc).await;
            match row {
                Ok(r) => {
                    eprintln!("  {r}");
                    rows.push(r);
                }
                Err(e) => {
                    eprintln!("  N={n} {via} failed: {e:#}");
                    rows.push(json!({"n": n, "via": via, "error": format!("{e:#}")}));
                }
            }
        }
    }
    let herald_after_mib = herald.rss() / 1048576.0;
    herald.stop().await;
    let meter = match plan.consumers.iter().copied().filter(|&n| n > 1).min() {
        Some(n) => meter_check(&run, plan, n, &rows).await.unwrap_or_else(|e| {
            eprintln!("  kube-sim's meter check failed: {e:#}");
            json!({"error": format!("{e:#}")})
        }),
        None => Value::Null,
    };
    let pods = spec.pods as f64;
    let _ = hurl;
    Ok(json!({
        "cluster": plan.describe(),
        "objects_loaded": objects,
        "load_seconds": load_seconds,
        "churn_rate": plan.churn_rate,
        "churn_seconds": plan.churn_seconds,
        "memory": {
            "apiserver_empty_mib": apiserver_empty_mib,
            "apiserver_loaded_mib": apiserver_loaded_mib,
            "herald_empty_mib": herald_empty_mib,
            "herald_synced_mib": herald_synced_mib,
            "herald_after_rows_mib": herald_after_mib,
            "apiserver_kib_per_pod": (apiserver_loaded_mib - apiserver_empty_mib) * 1024.0 / pods,
            "herald_kib_per_pod": (herald_synced_mib - herald_empty_mib) * 1024.0 / pods,
            "herald_over_apiserver": (herald_synced_mib - herald_empty_mib) / (apiserver_loaded_mib - apiserver_empty_mib),
        },
        "herald_start": herald_start,
        "first_sync": first_sync,
        "raw_reads": raw_reads,
        "rows": rows,
        "meter": meter,
    }))
}

/// herald's first sync with each upstream format it can ask for: a streaming list or a paged LIST,
/// gzip or not (JSON both: herald does not decode the apiserver's protobuf). Each variant three
/// times, alternating; the median time to `/readyz` and the apiserver's and herald's CPU.
async fn first_sync(
    env: &Env,
    cp: &ControlPlane,
    kubeconfig: &Path,
    dir: &Path,
) -> anyhow::Result<Value> {
    let config = dir.join("herald-sync.yaml");
    std::fs::write(&config, herald_jobs(""))?;
    let variants = [
        ("streaming", "none"),
        ("streaming", "gzip"),
        ("list", "none"),
        ("list", "gzip"),
    ];
    // (initial list, compression) → [ready s, apiserver CPU s, herald CPU s, the apiserver's RSS
    // growth to its peak MiB] per run.
    type Runs<'a> = BTreeMap<(&'a str, &'a str), Vec<[f64; 4]>>;
    let mut runs: Runs = BTreeMap::new();
    for _ in 0..3 {
        for (initial, compression) in variants {
            let args: Vec<String> = vec![
                "serve".into(),
                "--config".into(),
                config.display().to_string(),
                "--kubeconfig".into(),
                kubeconfig.display().to_string(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--kube-listen".into(),
                "127.0.0.1:0".into(),
                "--kube-insecure".into(),
                format!("--initial-list={initial}"),
                format!("--upstream-compression={compression}"),
            ];
            let api0 = cp
                .apiserver
                .pid()
                .and_then(|p| procfs::cpu_seconds(&p.to_string()));
            let rss0 = cp
                .apiserver
                .pid()
                .and_then(|p| procfs::rss_bytes(&p.to_string()))
                .unwrap_or(0);
            let peaks = Peaks::start([cp.apiserver.pid(), None, None]);
            let t = Instant::now();
            let (p, found) = Proc::start(
                "herald",
                &env.herald,
                &args,
                dir,
                &env.child_log,
                &["herald serving on", "kubernetes API on"],
            )
            .await?;
            env.wait_ok(&format!("{}/readyz", found[0]), Duration::from_secs(900))
                .await?;
            let secs = t.elapsed().as_secs_f64();
            let peak = peaks.finish().await[0];
            let api1 = cp
                .apiserver
                .pid()
                .and_then(|p| procfs::cpu_seconds(&p.to_string()));
            let herald_cpu = p.cpu();
            p.stop().await;
            runs.entry((initial, compression)).or_default().push([
                secs,
                api1.zip(api0).map_or(f64::NAN, |(b, a)| b - a),
                herald_cpu,
                peak.saturating_sub(rss0) as f64 / 1048576.0,
            ]);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let rows: Vec<Value> = runs
        .into_iter()
        .map(|((initial, compression), r)| {
            let col = |i: usize| r.iter().map(|x| x[i]).collect::<Vec<_>>();
            json!({
                "initial_list": initial,
                "compression": compression,
                "runs": r.len(),
                "ready_seconds": median(&col(0)),
                "apiserver_cpu_seconds": median(&col(1)),
                "herald_cpu_seconds": median(&col(2)),
                "apiserver_rss_growth_mib": median(&col(3)),
            })
        })
        .collect();
    Ok(json!(rows))
}

/// The yardstick: every pod read whole in one LIST and discarded, as JSON and as protobuf, gzip or
/// not; the median of three.
async fn raw_reads(cp: &ControlPlane) -> anyhow::Result<Value> {
    use http_body_util::BodyExt as _;
    let mut rows = Vec::new();
    for (format, accept) in [
        ("json", "application/json"),
        ("protobuf", "application/vnd.kubernetes.protobuf"),
    ] {
        for gzip in [false, true] {
            let mut times = Vec::new();
            let mut bytes = 0;
            for _ in 0..3 {
                let t = Instant::now();
                let req = http::Request::get("/api/v1/pods")
                    .header(http::header::ACCEPT, accept)
                    .header(
                        http::header::ACCEPT_ENCODING,
                        if gzip { "gzip" } else { "identity" },
                    )
                    .body(kube::client::Body::empty())?;
                let res = cp.admin().send(req).await?;
                bytes = res.into_body().collect().await?.to_bytes().len();
                times.push(t.elapsed().as_secs_f64());
            }
            rows.push(json!({
                "format": format,
                "gzip": gzip,
                "decoded_bytes": bytes,
                "seconds": median(&times),
            }));
        }
    }
    Ok(json!(rows))
}

/// kube-sim's load accounting against the apiserver's metrics: the same N consumers started directly
/// on kube-sim (the same preset, scale and seed), its `/metrics` against the apiserver's row.
async fn meter_check(
    run: &Run<'_>,
    plan: &Plan,
    n: usize,
    rows: &[Value],
) -> anyhow::Result<Value> {
    let env = run.env;
    let dir = run.dir.join("meter");
    std::fs::create_dir_all(&dir)?;
    let spec = herald_bench::cluster::ClusterSpec {
        preset: plan.preset,
        scale: plan.scale,
        seed: plan.seed,
        churn: 0.0,
    };
    let sim = env.start_sim(&spec, &dir).await?;
    let kubeconfig = dir.join("sim.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n",
            sim.url
        ),
    )?;
    let read = |text: &str| {
        let s = samples(text);
        (
            sum(&s, "apiserver_watch_events_total", |_| true),
            sum(&s, "kube_sim_sent_bytes_total", |l| {
                l.get("verb").is_some_and(|v| v == "WATCH")
            }),
        )
    };
    let before = read(&env.get_text(&format!("{}/metrics", sim.url)).await?);
    let consumers = run
        .start_consumers(n, &kubeconfig, &kubeconfig, "meter-consumers")
        .await?;
    let text = env.get_text(&format!("{}/metrics", sim.url)).await?;
    let after = read(&text);
    let open = watches_open(&samples(&text));
    consumers.stop().await;
    sim.proc.stop().await;
    let real = rows
        .iter()
        .find(|r| r["n"] == n && r["via"] == "direct")
        .map(|r| r["start"].clone())
        .unwrap_or(Value::Null);
    Ok(json!({
        "n": n,
        "kube_sim": {
            "watch_events": after.0 - before.0,
            "watch_bytes": after.1 - before.1,
            "watches_open": open,
        },
        "apiserver": {
            "watch_events": real["watch_events"],
            "watch_bytes": real["watch_event_bytes"],
            "watches_open": real["watches_open"],
        },
    }))
}

async fn measure(
    run: &Run<'_>,
    plan: &Plan,
    churn: &mut kube_sim::churn::Churn,
    n: usize,
    via: &str,
    kubeconfig: &Path,
) -> anyhow::Result<Value> {
    let cp = run.cp;
    let pids = [cp.apiserver.pid(), cp.etcd.pid(), Some(run.herald_pid)];
    let tag = format!("{via}-{n}");
    let admin = run.dir.join("admin.kubeconfig");
    // Start: every consumer at once.
    let (a, _) = run.snapshot().await?;
    let peaks = Peaks::start(pids);
    let consumers = run
        .start_consumers(n, kubeconfig, &admin, &format!("{tag}-a"))
        .await?;
    let (b, open) = run.snapshot().await?;
    let start = phase(
        &a,
        &b,
        peaks.finish().await,
        json!({"watches_open": open, "consumers_cpu_seconds": consumers.cpu()}),
    );
    // Churn, paced, while a probe times another client's writes.
    let (a, _) = run.snapshot().await?;
    let peaks = Peaks::start(pids);
    let stop = AtomicBool::new(false);
    let probes = AtomicU64::new(0);
    let events = (plan.churn_rate * plan.churn_seconds).round() as usize;
    let t0 = Instant::now();
    let drive = async {
        let mut sent = 0;
        while sent < events {
            let due = (t0.elapsed().as_secs_f64() * plan.churn_rate) as usize;
            if due > sent {
                let k = (due - sent).min(events - sent);
                cp.apply(churn.next_events(k)).await?;
                sent += k;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Deliveries settle.
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.store(true, Ordering::Relaxed);
        anyhow::Ok(())
    };
    let (driven, latencies) = tokio::join!(drive, probe_writes(cp, &stop, &probes));
    driven?;
    let (b, _) = run.snapshot().await?;
    let churned = phase(
        &a,
        &b,
        peaks.finish().await,
        json!({
            "events": events,
            "probe_writes": latencies.len(),
            "probe_write_p50_ms": median(&latencies),
            "probe_write_p99_ms": percentile(&latencies, 0.99),
        }),
    );
    // Restart: every consumer killed, then all started again.
    consumers.stop().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (a, _) = run.snapshot().await?;
    let peaks = Peaks::start(pids);
    let consumers = run
        .start_consumers(n, kubeconfig, &admin, &format!("{tag}-b"))
        .await?;
    let (b, _) = run.snapshot().await?;
    let restarted = phase(
        &a,
        &b,
        peaks.finish().await,
        json!({"consumers_cpu_seconds": consumers.cpu()}),
    );
    consumers.stop().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(json!({
        "n": n,
        "via": via,
        "start": start,
        "churn": churned,
        "restart": restarted,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_parsed_and_bad_ones_named() {
        assert_eq!(
            parse_runs("0.02=1,10;0.1=1").expect("valid"),
            vec![(0.02, vec![1, 10]), (0.1, vec![1])]
        );
        for bad in ["0.1", "x=1", "0.1=a", "0=1", "0.1=0"] {
            let e = parse_runs(bad).expect_err(bad).to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn samples_are_parsed_with_their_labels() {
        let text = "# HELP x\napiserver_longrunning_requests{component=\"apiserver\",group=\"\",resource=\"pods\",scope=\"cluster\",subresource=\"\",verb=\"WATCH\",version=\"v1\"} 3\napiserver_watch_events_total{group=\"\",kind=\"Pod\",version=\"v1\"} 12\napiserver_watch_events_total{group=\"discovery.k8s.io\",kind=\"EndpointSlice\",version=\"v1\"} 5\n";
        let s = samples(text);
        assert_eq!(sum(&s, "apiserver_watch_events_total", |_| true), 17.0);
        assert_eq!(watches_open(&s).get("pods"), Some(&3.0));
    }
}
