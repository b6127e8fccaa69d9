//! `GET /scrape-configs` judged by real Prometheus (Debian 2.42): `promtool check config` accepts the
//! generated scrape configs, whole and per shard, wrapped in a full `prometheus.yml`; and a
//! Prometheus running each of them discovers, job by job, exactly the targets herald serves for that
//! job (and shard): the same discovered labels — herald's, with the scrape settings of the monitor
//! endpoint the job comes from added as Prometheus adds them — and the same final labels, none
//! dropped. The shards' configs list the jobs of the whole config with the same settings, and their
//! bodies split each job's targets between them.
//!
//! The monitors: kube-sim's generated ones, and hand-written ones setting what Prometheus 2.42 knows
//! of the operator's endpoint settings (interval, scrapeTimeout, path, params, scheme, honorLabels,
//! honorTimestamps, followRedirects, enableHttp2, metricRelabelings, the limits, TLS files and a
//! bearer token file, written in a temp dir since promtool and Prometheus read them), one with a
//! Secret reference (an `# unsupported:` comment in its job) and one with a misspelled field (a
//! `# warning:` comment).
//!
//! NB: Prometheus scrapes the targets it keeps, at kube-sim's loopback pod IPs (127.16.0.0/12); the
//! scrapes fail, which is fine: discovery is compared, not scrape health.

#[path = "peers/harness.rs"]
mod peers;
#[path = "support/pki.rs"]
mod pki;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use herald_server::Herald;
use kube_sim::peers as installed;
use kube_sim::{Kind, Object, Sim, Write};
use peers::Labels;
use peers::cluster::{loopback_spec, start_herald, start_sim};
use peers::prometheus::Prometheus;
use serde_json::{Value, json};
use serde_yaml::Value as Yaml;

/// The shards the per-shard configs cut.
const SHARDS: usize = 3;

/// The `global` section every config is wrapped in: what a job that sets no interval or timeout
/// gets.
const GLOBAL_INTERVAL: &str = "1h";
const GLOBAL_TIMEOUT: &str = "10s";

/// How long a Prometheus gets to discover every target of its config.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// The files the hand-written TLS endpoint names.
struct Files {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    token: PathBuf,
}

impl Files {
    fn write(dir: &Path) -> Files {
        let ca = pki::Ca::new("e2e-scrape-configs");
        let ca_path = dir.join("ca.crt");
        std::fs::write(&ca_path, ca.pem()).expect("write the CA");
        let (cert, key) = ca.client("prometheus").write(dir, "client");
        let token = dir.join("token");
        std::fs::write(&token, "not-a-real-token\n").expect("write the token");
        Files {
            ca: ca_path,
            cert,
            key,
            token,
        }
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Hand-written monitors over a Service of kube-sim's cluster (one with an app selector and a named
/// port) and its pods.
fn hand_written(sim: &Sim, files: &Files) -> Vec<Object> {
    let svc = peers::cluster::app_service(sim);
    let (ns, app, port) = (svc.namespace.as_str(), svc.app.as_str(), svc.port.as_str());
    let target_port = svc.target_port.clone();
    let monitor = peers::cluster::monitor;
    vec![
        monitor(
            Kind::ServiceMonitor,
            "monitoring",
            "settings",
            json!({
                "selector": {"matchLabels": {"app": app}},
                "namespaceSelector": {"matchNames": [ns]},
                "sampleLimit": 5000,
                "labelLimit": 60,
                "labelNameLengthLimit": 200,
                "labelValueLengthLimit": 2000,
                "bodySizeLimit": "10MiB",
                "endpoints": [
                    {"port": port, "interval": "15s", "scrapeTimeout": "5s", "path": "/custom/metrics",
                     "params": {"module": ["http_2xx"], "target": ["a", "b"]},
                     "honorLabels": true, "honorTimestamps": false,
                     "followRedirects": false, "enableHttp2": false,
                     "metricRelabelings": [
                         {"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"},
                         {"action": "labeldrop", "regex": "pod_template_hash"},
                         {"sourceLabels": ["instance"], "targetLabel": "host", "regex": "([^:]+):.*", "replacement": "$1"},
                     ]},
                    {"targetPort": target_port, "scheme": "HTTPS", "interval": "20s",
                     "tlsConfig": {"caFile": path(&files.ca), "certFile": path(&files.cert),
                                   "keyFile": path(&files.key), "serverName": "web.local",
                                   "minVersion": "TLS12"},
                     "bearerTokenFile": path(&files.token)},
                    {"port": port, "scheme": "https",
                     "tlsConfig": {"caFile": path(&files.ca), "insecureSkipVerify": true},
                     "bearerTokenSecret": {"name": "scrape-token", "key": "token"}},
                ],
            }),
        ),
        monitor(
            Kind::PodMonitor,
            ns,
            "settings-pods",
            json!({
                "selector": {"matchLabels": {"app": app}},
                "podMetricsEndpoints": [
                    {"port": port, "interval": "30s", "scrapeTimeout": "30s", "path": "/stats",
                     "params": {"format": ["prometheus"]}, "honorLabels": true,
                     "tlsConfig": {"insecureSkipVerify": true, "serverName": "pods.local"},
                     "metricRelabelings": [{"action": "keep", "sourceLabels": ["__name__"], "regex": "http_.*"}]},
                ],
            }),
        ),
        monitor(
            Kind::ServiceMonitor,
            ns,
            "misspelled",
            json!({
                "selector": {"matchLabels": {"app": app}},
                "endpoints": [{"port": port, "interval": "30s", "scrapeTimout": "10s"}],
            }),
        ),
    ]
}

/// `GET /scrape-configs[?shard=I&shards=N]` with herald's own URL as the SD base.
async fn scrape_configs(http: &reqwest::Client, herald: &Herald, shard: Option<usize>) -> String {
    let base = herald.url().trim_end_matches('/').to_string();
    let query = shard.map_or(String::new(), |i| format!("shard={i}&shards={SHARDS}&"));
    let res = http
        .get(format!("{base}/scrape-configs?{query}base={base}"))
        .send()
        .await
        .expect("herald answers")
        .error_for_status()
        .expect("200");
    res.text().await.expect("text")
}

/// `scrape_configs` wrapped in a complete Prometheus configuration.
fn prometheus_yml(scrape_configs: &str) -> String {
    format!(
        "global:\n  scrape_interval: {GLOBAL_INTERVAL}\n  scrape_timeout: {GLOBAL_TIMEOUT}\n{scrape_configs}"
    )
}

/// The jobs of a `/scrape-configs` body, by name.
fn jobs_of(yaml: &str) -> BTreeMap<String, Yaml> {
    let doc: Yaml = serde_yaml::from_str(yaml).expect("valid YAML");
    doc["scrape_configs"]
        .as_sequence()
        .expect("scrape_configs")
        .iter()
        .map(|j| {
            let name = j["job_name"].as_str().expect("job_name").to_string();
            (name, j.clone())
        })
        .collect()
}

fn sd_url(job: &Yaml) -> &str {
    job["http_sd_configs"][0]["url"]
        .as_str()
        .expect("an http_sd url")
}

/// One target of herald's body: its address and labels.
type Entry = (String, Labels);

async fn body(http: &reqwest::Client, url: &str) -> Vec<Entry> {
    let groups: Vec<Value> = http
        .get(url)
        .send()
        .await
        .expect("herald answers")
        .error_for_status()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .expect("HTTP SD JSON");
    let mut out = Vec::new();
    for g in groups {
        let labels: Labels = serde_json::from_value(g["labels"].clone()).unwrap_or_default();
        for t in g["targets"].as_array().expect("targets") {
            out.push((t.as_str().expect("address").to_string(), labels.clone()));
        }
    }
    out.sort();
    out
}

/// Seconds of the durations used here (`5s`, `1h`).
fn seconds(d: &str) -> u64 {
    let (n, unit) = d.split_at(d.len() - 1);
    let n: u64 = n
        .parse()
        .unwrap_or_else(|_| panic!("a simple duration: {d}"));
    match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => panic!("a simple duration: {d}"),
    }
}

/// One target as Prometheus lists it: (scrape pool, discovered labels, final labels).
type Seen = (String, Labels, Labels);

/// What Prometheus 2.42 lists for `entries`, the targets herald serves to scrape job `job`
/// (prometheus/prometheus v2.42.0 scrape/target.go `PopulateLabels`, no relabeling): the discovered
/// labels are herald's, the address, http_sd's `__meta_url`, the job's scrape settings where herald
/// set none (`job`, interval, timeout, path, scheme) and its params (always); the final labels are
/// the discovered ones without `__` names, `instance` defaulting to the address.
fn expected(job_name: &str, job: &Yaml, entries: &[Entry]) -> Vec<Seen> {
    let setting = |k: &str| job[k].as_str().map(str::to_string);
    let interval = setting("scrape_interval").unwrap_or_else(|| GLOBAL_INTERVAL.into());
    let timeout = setting("scrape_timeout").unwrap_or_else(|| {
        if seconds(&interval) < seconds(GLOBAL_TIMEOUT) {
            interval.clone()
        } else {
            GLOBAL_TIMEOUT.into()
        }
    });
    let defaults = [
        ("job", job_name.to_string()),
        ("__scrape_interval__", interval),
        ("__scrape_timeout__", timeout),
        (
            "__metrics_path__",
            setting("metrics_path").unwrap_or_else(|| "/metrics".into()),
        ),
        (
            "__scheme__",
            setting("scheme").unwrap_or_else(|| "http".into()),
        ),
    ];
    let mut out = Vec::new();
    for (address, labels) in entries {
        let mut d = labels.clone();
        d.insert("__address__".into(), address.clone());
        for (k, v) in &defaults {
            if d.get(*k).is_none_or(|v| v.is_empty()) {
                d.insert(k.to_string(), v.clone());
            }
        }
        if let Some(params) = job["params"].as_mapping() {
            for (k, vs) in params {
                if let Some(first) = vs[0].as_str() {
                    d.insert(
                        format!("__param_{}", k.as_str().expect("param name")),
                        first.into(),
                    );
                }
            }
        }
        d.insert("__meta_url".into(), sd_url(job).into());
        let mut labels: Labels = d
            .iter()
            .filter(|(k, _)| !k.starts_with("__"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels
            .entry("instance".into())
            .or_insert_with(|| address.clone());
        out.push((job_name.to_string(), d, labels));
    }
    out
}

/// Waits until `prom` lists exactly `want` as active targets and drops none. NB: targets with equal
/// labels are one target to Prometheus (v2.42.0 scrape/scrape.go `scrapePool.sync` keys them by
/// `Target.hash`, of labels and URL): herald serves them as discovery gives them (Istio's
/// envoy-stats PodMonitor rewrites every istio-proxy port to the one merged-metrics port), and
/// Prometheus scrapes them once, as it would running the operator's config itself.
async fn discovers_exactly(prom: &mut Prometheus, what: &str, mut want: Vec<Seen>) {
    want.sort();
    want.dedup();
    let deadline = tokio::time::Instant::now() + DISCOVERY_TIMEOUT;
    loop {
        let targets = match prom.targets().await {
            Ok(t) => t,
            Err(e) => {
                prom.check_alive().expect("Prometheus runs");
                panic!("Prometheus ({what}) lists no targets: {e}");
            }
        };
        let dropped: Vec<&Labels> = targets
            .iter()
            .filter(|t| t.labels.is_empty())
            .map(|t| &t.discovered)
            .collect();
        assert!(
            dropped.is_empty(),
            "Prometheus ({what}) dropped targets herald served: {dropped:#?}"
        );
        let mut got: Vec<Seen> = targets
            .iter()
            .map(|t| (t.job.clone(), t.discovered.clone(), t.labels.clone()))
            .collect();
        got.sort();
        if got == want {
            return;
        }
        prom.check_alive().expect("Prometheus runs");
        if tokio::time::Instant::now() >= deadline {
            let only_herald: Vec<&Seen> = want.iter().filter(|s| !got.contains(s)).collect();
            let only_prom: Vec<&Seen> = got.iter().filter(|s| !want.contains(s)).collect();
            panic!(
                "Prometheus ({what}) lists {} targets, herald serves {}; only in herald (first 3): \
                 {:#?}\nonly in Prometheus (first 3): {:#?}\nits problems: {:?}",
                got.len(),
                want.len(),
                &only_herald[..only_herald.len().min(3)],
                &only_prom[..only_prom.len().min(3)],
                prom.problems()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_loads_the_generated_scrape_configs_and_discovers_exactly_herald_s_targets_per_shard()
 {
    let Some(prom_bin) = installed::find("prometheus", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let Some(promtool) = installed::find("promtool", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let files = Files::write(dir.path());
    let sim = start_sim(loopback_spec(), 7).await;
    sim.handle().apply(
        hand_written(&sim, &files)
            .into_iter()
            .map(Write::Put)
            .collect(),
    );
    let herald = start_herald(&sim, "jobs: []\nmonitors: {}\n").await;
    let http = reqwest::Client::new();

    // The whole config and each shard's: promtool accepts them all.
    let whole_yaml = scrape_configs(&http, &herald, None).await;
    peers::prometheus::promtool_check(&promtool, dir.path(), "whole", &prometheus_yml(&whole_yaml));
    let mut shard_yamls = Vec::new();
    for i in 0..SHARDS {
        let yaml = scrape_configs(&http, &herald, Some(i)).await;
        peers::prometheus::promtool_check(
            &promtool,
            dir.path(),
            &format!("shard-{i}"),
            &prometheus_yml(&yaml),
        );
        shard_yamls.push(yaml);
    }

    // The hand-written endpoints' settings are in their jobs; what herald cannot write or ignored is
    // a comment there.
    let whole = jobs_of(&whole_yaml);
    let settings = &whole["serviceMonitor/monitoring/settings/0"];
    assert_eq!(settings["scrape_interval"], "15s");
    assert_eq!(settings["scrape_timeout"], "5s");
    assert_eq!(settings["metrics_path"], "/custom/metrics");
    assert_eq!(settings["honor_labels"], true);
    assert_eq!(settings["honor_timestamps"], false);
    assert_eq!(settings["params"]["target"][1], "b");
    assert_eq!(settings["sample_limit"], 5000);
    assert_eq!(settings["body_size_limit"], "10MiB");
    assert_eq!(
        settings["metric_relabel_configs"]
            .as_sequence()
            .map(Vec::len),
        Some(3)
    );
    let tls = &whole["serviceMonitor/monitoring/settings/1"];
    assert_eq!(tls["scheme"], "https");
    assert_eq!(tls["tls_config"]["cert_file"], path(&files.cert).as_str());
    assert_eq!(tls["tls_config"]["key_file"], path(&files.key).as_str());
    assert_eq!(tls["tls_config"]["min_version"], "TLS12");
    assert_eq!(tls["bearer_token_file"], path(&files.token).as_str());
    let pods = whole
        .iter()
        .find(|(n, _)| n.ends_with("/settings-pods/0"))
        .expect("the PodMonitor's job")
        .1;
    assert_eq!(pods["tls_config"]["server_name"], "pods.local");
    assert!(
        whole_yaml.contains(
            "# unsupported: spec.endpoints[2].bearerTokenSecret: Secret \"scrape-token\" key \"token\"\n\
             - job_name: serviceMonitor/monitoring/settings/2\n"
        ),
        "{whole_yaml}"
    );
    assert!(
        whole_yaml.contains(
            "# warning: unknown field spec.endpoints[0].scrapeTimout (not in the operator's CRD: ignored)\n"
        ),
        "{whole_yaml}"
    );

    // The shards' configs: the same jobs with the same settings, reading the job's shard; their
    // bodies split each job's targets.
    let shard_jobs: Vec<BTreeMap<String, Yaml>> = shard_yamls.iter().map(|y| jobs_of(y)).collect();
    let mut bodies: BTreeMap<(String, Option<usize>), Vec<Entry>> = BTreeMap::new();
    for (name, job) in &whole {
        let all = body(&http, sd_url(job)).await;
        let mut union = Vec::new();
        for (i, jobs) in shard_jobs.iter().enumerate() {
            let shard = jobs
                .get(name)
                .unwrap_or_else(|| panic!("shard {i} has job {name}"));
            assert_eq!(
                sd_url(shard),
                format!("{}?shard={i}&shards={SHARDS}", sd_url(job)),
                "shard {i}'s {name} reads its shard"
            );
            let mut same = shard.clone();
            same["http_sd_configs"][0]["url"] = sd_url(job).into();
            assert_eq!(&same, job, "shard {i}'s {name} has the whole's settings");
            let part = body(&http, sd_url(shard)).await;
            union.extend(part.iter().cloned());
            bodies.insert((name.clone(), Some(i)), part);
        }
        union.sort();
        assert_eq!(
            union, all,
            "{name}: the shards' targets are the whole's, once"
        );
        bodies.insert((name.clone(), None), all);
    }
    for (i, jobs) in shard_jobs.iter().enumerate() {
        assert_eq!(
            jobs.keys().collect::<Vec<_>>(),
            whole.keys().collect::<Vec<_>>(),
            "shard {i} lists the whole's jobs"
        );
    }
    for (name, _) in whole.iter().filter(|(n, _)| {
        n.contains("/settings/") || n.contains("/settings-pods/") || n.contains("/misspelled/")
    }) {
        assert!(
            !bodies[&(name.clone(), None)].is_empty(),
            "the hand-written job {name} has targets"
        );
    }
    let with_targets = whole
        .keys()
        .filter(|n| !bodies[&((*n).clone(), None)].is_empty())
        .count();
    assert!(
        with_targets * 2 > whole.len(),
        "most of the {} jobs have targets ({with_targets})",
        whole.len()
    );
    let shards_with_targets: BTreeSet<usize> = bodies
        .iter()
        .filter(|((_, shard), b)| shard.is_some() && !b.is_empty())
        .filter_map(|((_, shard), _)| *shard)
        .collect();
    assert_eq!(shards_with_targets.len(), SHARDS, "every shard has targets");

    // A Prometheus per config: each discovers exactly what herald serves its jobs.
    let runs: Vec<(String, Option<usize>, &str)> =
        std::iter::once(("whole".to_string(), None, whole_yaml.as_str()))
            .chain(
                shard_yamls
                    .iter()
                    .enumerate()
                    .map(|(i, y)| (format!("shard {i}/{SHARDS}"), Some(i), y.as_str())),
            )
            .collect();
    let mut proms = Vec::new();
    for (what, shard, yaml) in &runs {
        let jobs = jobs_of(yaml);
        let mut want = Vec::new();
        for (name, job) in &jobs {
            want.extend(expected(name, job, &bodies[&(name.clone(), *shard)]));
        }
        let prom = Prometheus::start(&prom_bin, &prometheus_yml(yaml)).await;
        proms.push((what.clone(), prom, want));
    }
    for (what, prom, want) in &mut proms {
        discovers_exactly(prom, what, std::mem::take(want)).await;
    }
    drop(proms);
    herald.stop().await;
    sim.shutdown().await;
}
