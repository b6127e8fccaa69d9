//! The Prometheus recipe (docs/recipes/prometheus.md) run by a real Prometheus (Debian
//! `prometheus`) against herald served as the install page sets it up (docs/install.md: its
//! openssl certificate and tokens file, TLS and bearer tokens on herald's port), over kube-sim.
//! The recipe's `scrape_configs` block is the one Prometheus loads, with only what ties it to a
//! cluster replaced: herald's Service address by the test's loopback one (the recipe's
//! `server_name` keeps the certificate checked for herald.herald.svc),
//! the token and CA paths by the files the install page made. Each job's discovered targets, kept
//! and dropped, are then exactly the targets of herald's shard 0 of 2 for that job.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_sim::peers as installed;

mod support;
use support::{KillOnDrop, block_after, free_port, root};

const BIN: &str = env!("CARGO_BIN_EXE_herald");

/// The `__address__` of each target of an HTTP SD body.
fn sd_addresses(body: &serde_json::Value) -> BTreeSet<String> {
    body.as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["targets"].as_array().expect("targets").iter())
        .map(|t| t.as_str().expect("an address").to_string())
        .collect()
}

#[test]
fn prometheus_discovers_heralds_shard_with_the_recipes_scrape_configs() {
    let Some(prometheus) = installed::find("prometheus", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let sim = rt
        .block_on(kube_sim::Sim::start(kube_sim::SimConfig {
            spec: kube_sim::generate::ClusterSpec {
                pod_cidr: "127.16.0.0/12".parse().expect("cidr"),
                node_cidr: "127.8.0.0/16".parse().expect("cidr"),
                service_cidr: "127.4.0.0/16".parse().expect("cidr"),
                ..kube_sim::generate::ClusterSpec::small()
            },
            ..Default::default()
        }))
        .expect("kube-sim starts");
    let dir = tempfile::tempdir().expect("tmp");
    let work = dir.path();

    // The install page's certificate and tokens, made by its own block.
    let tls = block_after("docs/install.md", "With openssl, a CA of your own");
    let out = Command::new("bash")
        .args(["-eu", "-c", &tls])
        .current_dir(work)
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "the openssl block: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tokens = std::fs::read_to_string(work.join("tokens")).expect("tokens");
    let consumer = tokens.lines().nth(1).expect("a consumer's token");
    std::fs::write(work.join("token"), consumer).expect("token");

    // herald as the shipped job file has it, on its TLS port with tokens.
    std::fs::copy(
        root().join("deploy/base/jobs.yaml"),
        work.join("shipped.yaml"),
    )
    .expect("jobs");
    let shipped: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(work.join("shipped.yaml")).expect("jobs"))
            .expect("YAML");
    let jobs = format!(
        "jobs: {}",
        serde_json::to_string(&shipped["jobs"]).expect("JSON")
    );
    std::fs::write(work.join("jobs.yaml"), jobs).expect("jobs");
    let port = free_port();
    let mut herald = KillOnDrop(
        Command::new(BIN)
            .args(["serve", "--config", "jobs.yaml", "--apiserver", &sim.url()])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--tls-cert", "tls.crt", "--tls-key", "tls.key"])
            .args(["--token-file", "tokens", "-q"])
            .current_dir(work)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("herald starts"),
    );
    let mut line = String::new();
    BufReader::new(herald.0.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("herald's first line");
    assert!(line.starts_with("herald serving on https://"), "{line}");

    // The recipe's block, tied to this machine instead of a cluster.
    let recipe = block_after("docs/recipes/prometheus.md", "Shard 0 of 2");
    let config = recipe
        .replace(
            "https://herald.herald.svc:9095/",
            &format!("https://127.0.0.1:{port}/"),
        )
        .replace(
            "/etc/prometheus/herald/ca.crt",
            &work.join("ca.crt").display().to_string(),
        )
        .replace(
            "/etc/prometheus/herald/token",
            &work.join("token").display().to_string(),
        );
    assert!(
        !config.contains("herald.herald.svc:9095") && !config.contains("/etc/prometheus"),
        "every cluster tie replaced:\n{config}"
    );
    std::fs::write(work.join("prometheus.yml"), &config).expect("write");
    let web = free_port();
    let _prom = KillOnDrop(
        Command::new(&prometheus)
            .arg(format!(
                "--config.file={}",
                work.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                work.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{web}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(work.join("prometheus.log")).expect("log"))
            .spawn()
            .expect("prometheus starts"),
    );

    // curl, as the README's blocks use it; herald checked against the install page's CA for the
    // name the recipe dials.
    let curl = |args: &[&str]| -> serde_json::Value {
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "5"])
            .args(args)
            .output()
            .expect("curl runs");
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    };
    let ca = work.join("ca.crt").display().to_string();
    let resolve = format!("herald.herald.svc:{port}:127.0.0.1");
    let auth = format!("Authorization: Bearer {consumer}");
    let cfg: serde_yaml::Value = serde_yaml::from_str(&recipe).expect("YAML");
    let jobs: Vec<(String, String)> = cfg["scrape_configs"]
        .as_sequence()
        .expect("scrape_configs")
        .iter()
        .map(|j| {
            let url = j["http_sd_configs"][0]["url"].as_str().expect("url");
            let path = url
                .split_once(":9095")
                .expect("herald's port")
                .1
                .to_string();
            (j["job_name"].as_str().expect("job_name").to_string(), path)
        })
        .collect();
    assert_eq!(jobs.len(), 2, "the recipe's jobs: {jobs:?}");

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let herald_says: Vec<BTreeSet<String>> = jobs
            .iter()
            .map(|(_, path)| {
                let body = curl(&[
                    "--cacert",
                    &ca,
                    "--resolve",
                    &resolve,
                    "-H",
                    &auth,
                    &format!("https://herald.herald.svc:{port}{path}"),
                ]);
                if body.is_array() {
                    sd_addresses(&body)
                } else {
                    BTreeSet::new()
                }
            })
            .collect();
        let targets = curl(&[&format!("http://127.0.0.1:{web}/api/v1/targets?state=any")]);
        let discovered = |job: &str| -> BTreeSet<String> {
            let of = |key: &str, labels: &str| -> Vec<String> {
                targets["data"][key]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|t| t[labels]["job"] == job || t["scrapePool"] == job)
                    .map(|t| {
                        t["discoveredLabels"]["__address__"]
                            .as_str()
                            .unwrap_or("")
                            .to_string()
                    })
                    .collect()
            };
            of("activeTargets", "labels")
                .into_iter()
                .chain(of("droppedTargets", "discoveredLabels"))
                .collect()
        };
        let found: Vec<BTreeSet<String>> = jobs.iter().map(|(j, _)| discovered(j)).collect();
        if !herald_says.iter().any(BTreeSet::is_empty) && found == herald_says {
            eprintln!(
                "Prometheus discovered herald's shard: {:?} targets",
                found.iter().map(BTreeSet::len).collect::<Vec<_>>()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus's discovered targets ({:?}) equal herald's shard ({:?}); targets API: \
             {targets}\nPrometheus's log:\n{}",
            found.iter().map(BTreeSet::len).collect::<Vec<_>>(),
            herald_says.iter().map(BTreeSet::len).collect::<Vec<_>>(),
            std::fs::read_to_string(work.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
