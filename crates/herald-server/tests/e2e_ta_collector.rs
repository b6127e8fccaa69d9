//! The OpenTelemetry collector's target-allocator client fetching its targets through herald, over a
//! kube-sim cluster on loopback, the collectors found as the allocator finds them: the pods of one
//! namespace matching a label selector, through herald's own pod watch.
//!
//! The client, two ways:
//! - always, `Client` below: the requests of open-telemetry/opentelemetry-collector-contrib
//!   `receiver/prometheusreceiver/internal/targetallocator/manager.go` (v0.165.1) made exactly —
//!   `GET {endpoint}/scrape_configs`, read as YAML into job → scrape config (each must carry its
//!   `job_name`), `$(SHARD)` replaced, then per job Prometheus's http_sd
//!   (prometheus/prometheus `discovery/http/http.go`) on
//!   `{endpoint}/jobs/{url.QueryEscape(job)}/targets?collector_id={id}` with its headers and checks
//!   (200, `Content-Type: application/json`, target groups with valid label names);
//! - when built (`TAJUDGE_BIN`, or `tajudge` in the Go peers' folder: `HERALD_TAJUDGE=1
//!   peers/build`), the real receiver from its Go module (`peers/tajudge`), whose scrape manager's
//!   active targets are compared with herald's assignment. Not built by CI: the module's build takes
//!   ~13 CPU-minutes (measured), beyond what CI's budget leaves.

#[path = "peers/harness.rs"]
mod peers;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use herald_server::{Herald, ServeOptions, job_specs};
use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_sim::{Kind, Object, Sim, Write};
use peers::cluster::{loopback_spec, s, start_sim};
use serde_json::Value;

const NAMESPACE: &str = "observability";
const COLLECTORS: usize = 3;

const CONFIG: &str = "\
jobs:
- name: pods
  role: pod
- name: endpointslices
  role: endpointslice
target_allocator:
  collector_namespace: observability
  collector_selector: app.kubernetes.io/component=opentelemetry-collector
";

/// A collector pod `name` on `node`, as the operator's StatefulSet makes them.
fn mk_collector_pod(name: &str, node: &str, ip: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some(NAMESPACE.into()),
            name: Some(name.into()),
            uid: Some(format!("5d0b5f0e-0000-4000-8000-{:0>12}", name.len())),
            labels: Some(
                [(
                    "app.kubernetes.io/component".to_string(),
                    "opentelemetry-collector".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "otc-container".into(),
                image: Some("otel/opentelemetry-collector-contrib:0.165.0".into()),
                ports: Some(vec![ContainerPort {
                    name: Some("metrics".into()),
                    container_port: 8888,
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
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn collector_names() -> Vec<String> {
    (0..COLLECTORS)
        .map(|i| format!("otel-collector-{i}"))
        .collect()
}

async fn start() -> (Sim, Herald) {
    let sim = start_sim(loopback_spec(), 11).await;
    let nodes: Vec<String> = sim
        .handle()
        .objects_json(Kind::Node)
        .iter()
        .map(|n| s(n, "/metadata/name").to_string())
        .collect();
    let writes = collector_names()
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let pod = mk_collector_pod(
                name,
                &nodes[i % nodes.len()],
                &format!("127.31.0.{}", i + 1),
            );
            Write::Put(Object::Pod(pod))
        })
        .collect();
    sim.handle().apply(writes);
    let cfg = herald_core::parse_config(CONFIG).expect("valid config");
    let herald = Herald::start(
        job_specs(&cfg, None).expect("valid specs"),
        kube::Config::new(sim.url().parse().expect("kube-sim's url")),
        ServeOptions {
            target_allocator: cfg.target_allocator.clone(),
            ..ServeOptions::default()
        },
    )
    .await
    .expect("herald starts");
    tokio::time::timeout(Duration::from_secs(20), herald.ready())
        .await
        .expect("herald syncs with kube-sim");
    (sim, herald)
}

/// `url.QueryEscape`.
fn query_escape(s: &str) -> String {
    herald_server::allocator::api::query_escape(s)
}

/// The collector's client, request for request.
struct Client {
    http: reqwest::Client,
    endpoint: String,
    collector_id: String,
}

impl Client {
    fn new(endpoint: &str, collector_id: &str) -> Client {
        Client {
            // Go's http.Client: no redirects followed for http_sd (FollowRedirects = false).
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            endpoint: endpoint.to_string(),
            collector_id: collector_id.to_string(),
        }
    }

    /// `getScrapeConfigsResponse`: job → scrape config, read as YAML, `$(SHARD)` → `0`.
    async fn scrape_configs(&self) -> BTreeMap<String, serde_yaml::Value> {
        let res = self
            .http
            .get(format!("{}/scrape_configs", self.endpoint))
            .header("User-Agent", "Go-http-client/1.1")
            .send()
            .await
            .expect("herald answers");
        // NB: the client reads the body whatever the status; a non-2xx body would fail to parse.
        let body = res.text().await.expect("body");
        let body = body.replace("$(SHARD)", "0");
        let configs: BTreeMap<String, serde_yaml::Value> =
            serde_yaml::from_str(&body).expect("/scrape_configs parses as YAML job → config");
        for (job, cfg) in &configs {
            // `ScrapeConfig.Validate`: a job name is required; the client keys by the map's key.
            assert_eq!(
                cfg.get("job_name").and_then(serde_yaml::Value::as_str),
                Some(job.as_str()),
                "{job}: its scrape config names it"
            );
        }
        configs
    }

    /// Prometheus's http_sd refresh of `job`: target groups, each target with its group's labels.
    async fn targets(&self, job: &str) -> Targets {
        let url = format!(
            "{}/jobs/{}/targets?collector_id={}",
            self.endpoint,
            query_escape(job),
            self.collector_id
        );
        let res = self
            .http
            .get(&url)
            .header("Accept", "application/json")
            .header("User-Agent", "Prometheus/3.9.1")
            .header("X-Prometheus-Refresh-Interval-Seconds", "30")
            .send()
            .await
            .expect("herald answers");
        assert_eq!(res.status().as_u16(), 200, "{url}");
        let ct = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        // http.go: `matchContentType = regexp.MustCompile(`^(?i:application\/json(;\s*charset=("utf-8"|utf-8))?)$`)`
        assert!(
            ct.eq_ignore_ascii_case("application/json"),
            "{url}: content type {ct:?}"
        );
        let groups: Vec<Value> = res.json().await.expect("target groups");
        let mut out = Vec::new();
        for g in groups {
            let labels: BTreeMap<String, String> =
                serde_json::from_value(g["labels"].clone()).expect("labels are strings");
            for name in labels.keys() {
                // model.LabelName.IsValid under the legacy scheme Prometheus validates SD with.
                let valid = name.chars().enumerate().all(|(i, c)| {
                    c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
                });
                assert!(valid && !name.is_empty(), "{url}: label name {name:?}");
            }
            for t in g["targets"].as_array().expect("targets") {
                let t = t.as_str().expect("a target is a string").to_string();
                out.push((t, labels.clone()));
            }
        }
        out.sort();
        out
    }
}

/// A job's targets with their labels, sorted. NB: one address may be several targets (a pod's
/// containers without ports, an address in two EndpointSlices), with different labels.
type Targets = Vec<(String, BTreeMap<String, String>)>;

/// herald's own answer for `job` (`/sd/v1`).
async fn sd(herald: &Herald, job: &str) -> Targets {
    let groups: Vec<Value> = reqwest::get(format!("{}/sd/v1/{job}", herald.url()))
        .await
        .expect("herald answers")
        .json()
        .await
        .expect("json");
    let mut out = Vec::new();
    for g in groups {
        let labels: BTreeMap<String, String> =
            serde_json::from_value(g["labels"].clone()).expect("labels");
        for t in g["targets"].as_array().expect("targets") {
            out.push((t.as_str().expect("string").to_string(), labels.clone()));
        }
    }
    out.sort();
    out
}

/// Waits until herald's collectors are `want` (by the allocator's own `/jobs/{job}/targets`).
async fn wait_for_collectors(herald: &Herald, want: &[String]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let all: Value = reqwest::get(format!("{}/jobs/pods/targets", herald.url()))
            .await
            .expect("herald answers")
            .json()
            .await
            .expect("json");
        let have: Vec<String> = all
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        if have == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "collectors {have:?}, waiting for {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_collectors_client_fetches_disjoint_shares_of_every_job_through_herald() {
    let (sim, herald) = start().await;
    let names = collector_names();
    wait_for_collectors(&herald, &names).await;
    let configs = Client::new(&herald.url(), &names[0]).scrape_configs().await;
    assert_eq!(
        configs.keys().cloned().collect::<Vec<_>>(),
        ["endpointslices", "pods"],
        "every job but the collectors' own"
    );
    for job in configs.keys() {
        let whole = sd(&herald, job).await;
        assert!(!whole.is_empty(), "{job} has targets");
        let mut all: Targets = Vec::new();
        let mut owner: BTreeMap<String, String> = BTreeMap::new();
        for name in &names {
            let share = Client::new(&herald.url(), name).targets(job).await;
            for (t, _) in &share {
                // Placed by address: every target at one address on one collector.
                let first = owner.entry(t.clone()).or_insert_with(|| name.clone());
                assert_eq!(first, name, "{job}: {t} on two collectors");
            }
            all.extend(share);
        }
        all.sort();
        // Disjoint, together the job, each with its /sd/v1 labels (a multiset comparison).
        assert_eq!(all.len(), whole.len(), "{job}: as many targets as /sd/v1");
        assert!(
            all == whole,
            "{job}: the shares are /sd/v1's targets and labels"
        );
    }

    // A collector leaves: the others take its targets, and it gets an empty list.
    let gone = names[2].clone();
    sim.handle().apply(vec![Write::Delete {
        kind: Kind::Pod,
        namespace: Some(NAMESPACE.into()),
        name: gone.clone(),
    }]);
    wait_for_collectors(&herald, &names[..2]).await;
    let whole = sd(&herald, "pods").await;
    let mut held = 0;
    for name in &names[..2] {
        held += Client::new(&herald.url(), name).targets("pods").await.len();
    }
    assert_eq!(held, whole.len());
    assert!(
        Client::new(&herald.url(), &gone)
            .targets("pods")
            .await
            .is_empty()
    );
    herald.stop().await;
}

/// The real receiver, when built.
fn tajudge() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TAJUDGE_BIN") {
        return Some(PathBuf::from(p));
    }
    let cache = std::env::var_os("HERALD_PEERS_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/herald-peers"))
        })?;
    Some(cache.join("bin/tajudge")).filter(|p| p.is_file())
}

/// The labels Prometheus's scrape layer adds to what discovery gave (`PopulateDiscoveredLabels`)
/// and http_sd's own `__meta_url`: not herald's.
const ADDED: &[&str] = &[
    "job",
    "__scheme__",
    "__metrics_path__",
    "__scrape_interval__",
    "__scrape_timeout__",
    "__scrape_native_histograms__",
    "__always_scrape_classic_histograms__",
    "__convert_classic_histograms_to_nhcb__",
    "__meta_url",
];

/// herald's labels without those the scrape layer would add anyway, and without empty values (to
/// Prometheus an empty label is an absent one).
fn strip(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut l = labels.clone();
    l.retain(|k, v| !ADDED.contains(&k.as_str()) && !v.is_empty());
    l
}

#[tokio::test]
async fn the_real_receiver_scrapes_what_herald_assigned_it() {
    let Some(bin) = tajudge() else {
        eprintln!(
            "SKIPPED: tajudge (the collector's Prometheus receiver) not built; \
             HERALD_TAJUDGE=1 peers/build builds it"
        );
        return;
    };
    let (_sim, herald) = start().await;
    let names = collector_names();
    wait_for_collectors(&herald, &names).await;
    let whole = sd(&herald, "pods").await;
    let mut runs = Vec::new();
    for name in &names {
        let out = tokio::process::Command::new(&bin)
            .args(["-endpoint", &herald.url(), "-collector-id", name])
            .args(["-expect-jobs", "2", "-settle", "3s", "-timeout", "90s"])
            .kill_on_drop(true)
            .output();
        runs.push((name.clone(), out));
    }
    let mut union = BTreeSet::new();
    for (name, run) in runs {
        let out = run.await.expect("tajudge runs");
        assert!(
            out.status.success(),
            "tajudge for {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let targets: Vec<Value> = serde_json::from_slice(&out.stdout).expect("tajudge prints JSON");
        let mine = Client::new(&herald.url(), &name).targets("pods").await;
        let mut seen = BTreeSet::new();
        for t in targets.iter().filter(|t| t["scrapePool"] == "pods") {
            let mut labels: BTreeMap<String, String> =
                serde_json::from_value(t["discoveredLabels"].clone()).expect("labels");
            let address = labels.remove("__address__").expect("an address");
            labels = strip(&labels);
            // Prometheus keeps one of the targets that end up with the same labels (one address
            // several times): its discovered labels are one of herald's sets for that address.
            let candidates: Vec<&BTreeMap<String, String>> = mine
                .iter()
                .filter(|(t, _)| *t == address)
                .map(|(_, l)| l)
                .collect();
            if !candidates.iter().any(|l| strip(l) == labels) {
                let diff = |a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| {
                    a.iter()
                        .filter(|(k, v)| b.get(*k) != Some(*v))
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                };
                let near = candidates.first().map(|l| strip(l)).unwrap_or_default();
                panic!(
                    "{name} scrapes {address} with labels herald did not give it ({} sets at that \
                     address): only the receiver's: {:?}; only herald's: {:?}",
                    candidates.len(),
                    diff(&labels, &near),
                    diff(&near, &labels)
                );
            }
            seen.insert(address.clone());
            assert!(union.insert(address), "on two collectors");
        }
        assert_eq!(
            seen,
            mine.iter().map(|(t, _)| t.clone()).collect::<BTreeSet<_>>(),
            "{name} scrapes exactly its share"
        );
    }
    assert_eq!(
        union,
        whole.into_iter().map(|(t, _)| t).collect::<BTreeSet<_>>()
    );
    herald.stop().await;
}

#[tokio::test]
async fn the_allocator_api_sits_behind_the_same_authentication_as_sd() {
    let sim = start_sim(loopback_spec(), 12).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "collector-token\n").expect("tokens");
    let cfg = herald_core::parse_config(
        "jobs:\n- name: pods\n  role: pod\ntarget_allocator:\n  collectors: [a, b]\n",
    )
    .expect("valid config");
    let herald = Herald::start(
        job_specs(&cfg, None).expect("valid specs"),
        kube::Config::new(sim.url().parse().expect("kube-sim's url")),
        ServeOptions {
            target_allocator: cfg.target_allocator.clone(),
            security: herald_server::Security {
                token_file: Some(tokens),
                tls: None,
                insecure: false,
            },
            ..ServeOptions::default()
        },
    )
    .await
    .expect("herald starts");
    tokio::time::timeout(Duration::from_secs(20), herald.ready())
        .await
        .expect("herald syncs with kube-sim");
    let http = reqwest::Client::new();
    for path in [
        "/scrape_configs",
        "/jobs",
        "/jobs/pods/targets",
        "/jobs/pods/targets?collector_id=a",
        "/sd/v1/pods",
    ] {
        let url = format!("{}{path}", herald.url());
        let bare = http.get(&url).send().await.expect("herald answers");
        assert_eq!(bare.status().as_u16(), 401, "{path} without a token");
        let wrong = http
            .get(&url)
            .bearer_auth("nope")
            .send()
            .await
            .expect("herald answers");
        assert_eq!(wrong.status().as_u16(), 403, "{path} with a wrong token");
        let ok = http
            .get(&url)
            .bearer_auth("collector-token")
            .send()
            .await
            .expect("herald answers");
        assert_eq!(ok.status().as_u16(), 200, "{path} with the token");
    }
    herald.stop().await;
}
