//! A new user, from the README's first screen: herald serving a real apiserver, Prometheus on its
//! `http_sd` and kube-proxy on its Kubernetes API, by copying the blocks the README leads to.
//!
//! The blocks marked `one-machine` of README.md, docs/install.md, docs/recipes/prometheus.md and
//! docs/recipes/kube-proxy-coredns.md (the pages the README's "herald against a cluster" links, in
//! that order) run as written, one bash session, in an empty folder, with nothing substituted: the
//! only things the test provides are what a user has, a `~/.kube/config` (HOME is a scratch home
//! whose kubeconfig is the admin's of a real control plane: etcd, kube-apiserver and
//! kube-controller-manager v1.37.2 from `peers/build`, loaded with kube-sim's `small` cluster
//! through the API) and `PATH` (herald, Debian's Prometheus, kubectl and kube-proxy v1.37.2). A YAML
//! block that names its file (`# prometheus.yml`) is saved as that file, as the page says.
//!
//! "The machine" is a network namespace the test makes (and deletes): the control plane, herald,
//! Prometheus and kube-proxy all listen on its loopback, and kube-proxy's nftables rules are its
//! own. Once the blocks have run (and left herald, Prometheus and kube-proxy running), the test
//! checks that
//! - the README's block printed herald's targets and jobs;
//! - Prometheus's discovered targets (`/api/v1/targets`, active and dropped) of each recipe job are
//!   exactly herald's shard 0 of 2 for that job, read with the install page's CA and a token, and
//!   the pod targets are the apiserver's pods (the addresses are the cluster's data: Prometheus
//!   cannot reach them, and need not);
//! - kube-proxy wrote the Service chains `herald simulate` generates for the apiserver's Services
//!   and EndpointSlices, and its log holds no refused credential.
//!
//! Every process the blocks start is in one process group, killed at the end, also on failure.
//! Needs root (a network namespace), `ip`, `nft`, curl and openssl.

mod kube_proxy;
mod support;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_simulate::netns::Netns;
use kube_proxy::Mode;
use kube_sim::generate::{ClusterSpec, generate};
use kube_sim::peers as installed;
use kube_sim::peers::controlplane::{ADMIN_TOKEN, Binaries, ControlPlane, Options};
use support::Block;

const BIN: &str = env!("CARGO_BIN_EXE_herald");
const SEED: u64 = 7;
/// The pages of the walkthrough, in the order the README sends a reader through them.
const PAGES: &[(&str, usize)] = &[
    ("README.md", 1),
    ("docs/install.md", 2),
    ("docs/recipes/prometheus.md", 2),
    ("docs/recipes/kube-proxy-coredns.md", 2),
];
/// The links that lead from the README to each page's part of the walkthrough.
const README_LINKS: &[&str] = &[
    "docs/install.md#tls-and-tokens",
    "docs/install.md#herald-on-one-machine",
    "docs/recipes/prometheus.md#on-one-machine",
    "docs/recipes/kube-proxy-coredns.md#on-one-machine",
];
const READY: &str = "=== the walkthrough blocks have run";
/// How long the blocks get (the control plane is up before they start).
const BLOCKS_TIMEOUT: Duration = Duration::from_secs(150);
const SETTLE: Duration = Duration::from_secs(90);

/// The walkthrough's blocks, in order.
fn walkthrough() -> Vec<Block> {
    let readme = std::fs::read_to_string(support::root().join("README.md")).expect("README");
    for link in README_LINKS {
        assert!(readme.contains(link), "the README links {link}");
    }
    let mut out = Vec::new();
    for (page, n) in PAGES {
        let blocks: Vec<Block> = support::page_blocks(page)
            .into_iter()
            .filter(|b| b.marked("one-machine"))
            .collect();
        assert_eq!(
            blocks.len(),
            *n,
            "{page}: one-machine blocks: {:?}",
            blocks.iter().map(|b| b.line).collect::<Vec<_>>()
        );
        out.extend(blocks);
    }
    out
}

/// A tool the blocks use, found on PATH; `None` (skip) outside CI, a panic under `CI=true`.
fn tool(name: &str, install: &str) -> Option<PathBuf> {
    if let Some(p) = herald_simulate::netns::which(name) {
        return Some(p);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{name} is required under CI=true: {install}");
    }
    eprintln!("SKIPPED: {name} not found: {install}");
    None
}

/// The bash session running the blocks, in its own process group; dropping it kills the group
/// (herald, Prometheus and kube-proxy the blocks left running in the background).
struct Session {
    child: Child,
    out: PathBuf,
    err: PathBuf,
    /// The folder the blocks run in: the logs they write are shown on failure.
    work: PathBuf,
}

impl Session {
    fn output(&self) -> (String, String) {
        (
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default(),
        )
    }

    /// Waits for the end of the blocks; panics with the session's output if it exits first or
    /// takes longer than [`BLOCKS_TIMEOUT`].
    fn wait_ready(&mut self) -> String {
        let start = Instant::now();
        loop {
            let (out, err) = self.output();
            if out.contains(READY) {
                eprintln!("the walkthrough's blocks ran in {:?}", start.elapsed());
                return out;
            }
            let exited = self.child.try_wait().expect("try_wait");
            assert!(
                exited.is_none() && start.elapsed() < BLOCKS_TIMEOUT,
                "the walkthrough's blocks did not run ({exited:?}, after {:?}); the last `>>>` \
                 names the block:\n--- stdout\n{out}\n--- stderr\n{err}",
                start.elapsed()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let (out, err) = self.output();
            eprintln!("--- the walkthrough's stdout\n{out}\n--- its stderr\n{err}");
            for log in ["prometheus.log", "kube-proxy.log"] {
                let text = std::fs::read_to_string(self.work.join(log)).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!(
                    "--- {log}, last 20 lines\n{}",
                    lines[lines.len().saturating_sub(20)..].join("\n")
                );
            }
        }
    }
}

/// Runs `body` on a runtime whose threads are in namespace `ns`, made and driven on the
/// namespace's thread (the control plane's futures are not `Send`).
fn run_in<F: Future<Output = ()> + 'static>(ns: &str, body: impl FnOnce() -> F + Send + 'static) {
    kube_proxy::in_netns(ns, move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(body())
    });
}

/// `curl -sf` (within 5 s) as JSON, or null.
fn curl_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5"])
        .args(args)
        .output()
        .expect("curl runs");
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// The `__address__` of each target of an HTTP SD body.
fn sd_addresses(body: &serde_json::Value) -> BTreeSet<String> {
    body.as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t.as_str().map(str::to_string))
        .collect()
}

/// Prometheus's discovered targets of `job`, active and dropped, by `__address__`.
fn discovered(targets: &serde_json::Value, job: &str) -> BTreeSet<String> {
    ["activeTargets", "droppedTargets"]
        .iter()
        .flat_map(|key| targets["data"][key].as_array().into_iter().flatten())
        .filter(|t| t["scrapePool"] == job || t["discoveredLabels"]["job"] == job)
        .filter_map(|t| t["discoveredLabels"]["__address__"].as_str())
        .map(str::to_string)
        .collect()
}

/// The recipe's jobs as Prometheus runs them: (job name, http_sd URL path and query).
fn prometheus_jobs(work: &Path) -> Vec<(String, String)> {
    let cfg: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(work.join("prometheus-local.yml")).expect("prometheus-local.yml"),
    )
    .expect("YAML");
    cfg["scrape_configs"]
        .as_sequence()
        .expect("scrape_configs")
        .iter()
        .map(|j| {
            let url = j["http_sd_configs"][0]["url"].as_str().expect("url");
            let path = url
                .strip_prefix("https://127.0.0.1:9095")
                .unwrap_or_else(|| panic!("{url}: herald's address on this machine"));
            (
                j["job_name"].as_str().expect("job").to_string(),
                path.into(),
            )
        })
        .collect()
}

fn check_prometheus(work: &Path, pod_ips: &BTreeSet<String>) {
    let jobs = prometheus_jobs(work);
    assert_eq!(jobs.len(), 2, "the recipe's jobs: {jobs:?}");
    let ca = work.join("ca.crt").display().to_string();
    let token = std::fs::read_to_string(work.join("consumer-token")).expect("consumer-token");
    let auth = format!("Authorization: Bearer {}", token.trim());
    let deadline = Instant::now() + SETTLE;
    loop {
        let herald: Vec<BTreeSet<String>> = jobs
            .iter()
            .map(|(_, path)| {
                sd_addresses(&curl_json(&[
                    "--cacert",
                    &ca,
                    "--resolve",
                    "herald.herald.svc:9095:127.0.0.1",
                    "-H",
                    &auth,
                    &format!("https://herald.herald.svc:9095{path}"),
                ]))
            })
            .collect();
        let targets = curl_json(&["http://127.0.0.1:9090/api/v1/targets?state=any"]);
        let found: Vec<BTreeSet<String>> =
            jobs.iter().map(|(j, _)| discovered(&targets, j)).collect();
        if !herald.iter().any(BTreeSet::is_empty) && found == herald {
            let pods = &herald[0];
            let not_pods: Vec<&String> = pods
                .iter()
                .filter(|a| !pod_ips.contains(a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h)))
                .collect();
            assert!(
                not_pods.is_empty(),
                "{}: targets that are no pod of the apiserver: {not_pods:?}",
                jobs[0].0
            );
            eprintln!(
                "Prometheus discovered herald's shard 0 of 2: {:?} targets",
                found.iter().map(BTreeSet::len).collect::<Vec<_>>()
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus's discovered targets ({:?}) are herald's shard ({:?}); targets API: \
             {targets}\nPrometheus's log:\n{}",
            found.iter().map(BTreeSet::len).collect::<Vec<_>>(),
            herald.iter().map(BTreeSet::len).collect::<Vec<_>>(),
            std::fs::read_to_string(work.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// herald on TLS with tokens writes `/scrape-configs` for consumers that read it so, by path.
fn check_scrape_configs(work: &Path) {
    let token = std::fs::read_to_string(work.join("consumer-token")).expect("consumer-token");
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5", "--cacert"])
        .arg(work.join("ca.crt"))
        .args(["--resolve", "herald.herald.svc:9095:127.0.0.1", "-H"])
        .arg(format!("Authorization: Bearer {}", token.trim()))
        .arg("https://herald.herald.svc:9095/scrape-configs")
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "# http_sd_configs read herald with the consumer's token in \
             /etc/prometheus/secrets/herald-consumer/token and herald's CA in \
             /etc/prometheus/secrets/herald-consumer/ca.crt"
        ),
        "/scrape-configs says how consumers read herald:\n{text}"
    );
    assert!(!text.contains(token.trim()), "no token in /scrape-configs");
}

async fn check_kube_proxy(cp: &ControlPlane, ns: &Netns, work: &Path) {
    // The Node the block made kube-proxy be: the same command, through herald.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(work.join("node-herald/kubeconfig"))
        .args(["get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"])
        .output()
        .expect("kubectl runs");
    let node = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !node.is_empty(),
        "a Node: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = || std::fs::read_to_string(work.join("kube-proxy.log")).unwrap_or_default();
    let deadline = Instant::now() + SETTLE;
    loop {
        let got =
            kube_proxy::service_chains(&kube_proxy::ruleset(ns, Mode::Nftables), Mode::Nftables);
        let want = kube_proxy::simulated_service_chains(cp, &node, Mode::Nftables).await;
        assert!(want.len() > 5, "the apiserver has Services with endpoints");
        if got == want {
            eprintln!(
                "kube-proxy through herald wrote the {} Service chains of the apiserver's Services",
                got.len()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kube-proxy through herald: Service chains {}\nkube-proxy's log ends:\n{}",
            kube_proxy::diff("kube-proxy", &got, "simulate", &want, 20),
            log().lines().rev().take(30).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = log();
    for refused in ["Unauthorized", "x509", "Forbidden"] {
        assert!(
            !log.contains(refused),
            "kube-proxy's log names {refused:?}:\n{log}"
        );
    }
}

#[test]
fn a_new_user_wires_prometheus_and_kube_proxy_to_herald_on_a_real_apiserver_by_copying_blocks() {
    let blocks = walkthrough();
    let Some(prometheus) = installed::find("prometheus", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let Some(kubectl) = installed::find("kubectl", installed::KUBECTL_INSTALL) else {
        return;
    };
    let Some(kube_proxy_bin) = kube_proxy::kube_proxy_bin() else {
        return;
    };
    if !kube_proxy::can_run(Mode::Nftables.tools()) {
        return;
    }
    let (Some(_), Some(_)) = (
        tool("curl", "apt-get install curl"),
        tool("openssl", "apt-get install openssl"),
    ) else {
        return;
    };
    let Some(bins) = Binaries::find() else {
        return;
    };

    let dir = tempfile::tempdir().expect("tmp");
    let (work, home, bin) = (
        dir.path().join("work"),
        dir.path().join("home"),
        dir.path().join("bin"),
    );
    for d in [&work, &home.join(".kube"), &bin] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    for (name, path) in [
        ("herald", Path::new(BIN)),
        ("prometheus", &prometheus),
        ("kubectl", &kubectl),
        ("kube-proxy", &kube_proxy_bin),
    ] {
        std::os::unix::fs::symlink(path, bin.join(name)).expect("link");
    }
    let script = format!("{}echo '{READY}'\nwait\n", support::copy_script(&blocks));
    let machine = Arc::new(kube_proxy::netns());
    let ns = machine.clone();
    run_in(machine.name(), move || async move {
        let started = Instant::now();
        let spec = ClusterSpec::small();
        let cp = ControlPlane::start_with(
            &bins,
            Options {
                service_cidr: spec.service_cidr.to_string(),
                ..Options::default()
            },
        )
        .await
        .expect("the control plane starts");
        let n = cp
            .load(&generate(&spec, SEED))
            .await
            .expect("the cluster loads");
        cp.wait_endpointslices(Duration::from_secs(60))
            .await
            .expect("the EndpointSlice controller settles");
        eprintln!(
            "control plane up, {n} objects loaded and sliced in {:?}",
            started.elapsed()
        );
        std::fs::write(home.join(".kube/config"), cp.kubeconfig_yaml(ADMIN_TOKEN))
            .expect("kubeconfig");

        // The blocks, as a user in a shell on this machine runs them.
        use std::os::unix::process::CommandExt as _;
        let (out, err) = (
            dir.path().join("session.out"),
            dir.path().join("session.err"),
        );
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "bash", "-eu", "-c", &script])
            .current_dir(&work)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &home)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("out"))
            .stderr(std::fs::File::create(&err).expect("err"))
            .process_group(0)
            .spawn()
            .expect("bash runs");
        let mut session = Session {
            child,
            out,
            err,
            work: work.clone(),
        };
        let printed = session.wait_ready();

        // The README's block: herald served the cluster's targets and its jobs.
        assert!(
            printed.contains("\"targets\":[\"") && printed.contains("\"labels\":{"),
            "the README's block printed pod targets:\n{printed}"
        );
        assert!(
            printed.contains("\"pods\"") && printed.contains("\"endpointslices\""),
            "the README's block listed the jobs:\n{printed}"
        );

        let pod_ips: BTreeSet<String> = kube_proxy::list(&cp, "/api/v1/pods", "Pod", "v1")
            .await
            .iter()
            .filter_map(|p| p["status"]["podIP"].as_str().map(str::to_string))
            .collect();
        assert!(!pod_ips.is_empty(), "the apiserver's pods have IPs");
        check_prometheus(&work, &pod_ips);
        check_scrape_configs(&work);
        check_kube_proxy(&cp, &ns, &work).await;

        drop(session);
        drop(cp);
        eprintln!("done in {:?}", started.elapsed());
        drop(dir);
    });
    drop(machine);
}
