//! A real vmagent (Debian `victoria-metrics` 1.79) as a child process of a test: started on a loopback
//! port with a scrape config, read through its Prometheus-compatible `/api/v1/targets`, killed on drop,
//! and its log printed when the test fails.
//!
//! What 1.79 serves (VictoriaMetrics v1.79.5 lib/promscrape/targetstatus.go `WriteAPIV1Targets`):
//! `{"status":"success","data":{"activeTargets":[...],"droppedTargets":[{"discoveredLabels":{..}}]}}`.
//! Dropped targets carry only `discoveredLabels` (no `scrapePool` as newer Prometheus has), so the
//! job is told by the `job` label, which vmagent puts among the discovered labels (config.go
//! `mergeLabels`). They are kept in one process-wide map keyed by a hash of all discovered labels, at
//! most `-promscrape.maxDroppedTargets` of them, each forgotten 10 minutes after it was last
//! produced: a target whose labels changed stays listed with its old labels for that long.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

/// Discovered labels of one target, as vmagent lists them.
pub type Labels = BTreeMap<String, String>;

/// Enough for every target of a 1,100-node cluster in all five roles, with room to spare.
const MAX_DROPPED_TARGETS: usize = 1_000_000;

/// How long vmagent gets to answer on its HTTP port after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A running vmagent; dropping it kills the process.
pub struct VmAgent {
    child: Child,
    port: u16,
    log: PathBuf,
    http: reqwest::Client,
    _dir: TempDir,
}

impl VmAgent {
    /// Starts `bin` with `scrape_config` (YAML) on a free loopback port and waits until it answers.
    ///
    /// NB: nothing here may make vmagent dial a non-loopback address: it listens on 127.0.0.1, writes
    /// to a closed loopback port (1.79 refuses to start without `-remoteWrite.url`; with every target
    /// dropped it never has a sample to send), and the scrape config is the caller's to keep safe.
    pub async fn start(bin: &Path, scrape_config: &str) -> VmAgent {
        let dir = tempfile::tempdir().expect("a temp dir for vmagent");
        let config = dir.path().join("scrape.yml");
        std::fs::write(&config, scrape_config).expect("write vmagent's scrape config");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .expect("http client");
        let mut last_log = String::new();
        // The free port is found by binding and releasing it; another process may take it in between,
        // so a start that fails on the port is retried with a new one.
        for attempt in 1..=3 {
            let port = free_loopback_port();
            let log = dir.path().join(format!("vmagent-{attempt}.log"));
            let out = File::create(&log).expect("create vmagent's log file");
            let err = out.try_clone().expect("share vmagent's log file");
            let mut child = Command::new(bin)
                .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
                .arg(format!("-promscrape.config={}", config.display()))
                .arg(format!(
                    "-promscrape.maxDroppedTargets={MAX_DROPPED_TARGETS}"
                ))
                .arg("-promscrape.kubernetesSDCheckInterval=1s")
                .arg("-remoteWrite.url=http://127.0.0.1:1/api/v1/write")
                .arg(format!(
                    "-remoteWrite.tmpDataPath={}",
                    dir.path().join("remotewrite").display()
                ))
                .arg("-loggerLevel=INFO")
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("vmagent starts");
            match wait_ready(&mut child, &http, port).await {
                Ok(()) => {
                    return VmAgent {
                        child,
                        port,
                        log,
                        http,
                        _dir: dir,
                    };
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    let port_taken = text.contains("address already in use");
                    last_log = format!("{e}\n{text}");
                    if !port_taken {
                        break;
                    }
                }
            }
        }
        panic!("vmagent did not start:\n{last_log}");
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Fails when the process has exited: nothing it serves can be trusted after that.
    pub fn check_alive(&mut self) -> Result<(), String> {
        check_alive(&mut self.child)
    }

    /// The discovered labels of every dropped target (`/api/v1/targets?state=dropped`).
    pub async fn dropped_targets(&mut self) -> Result<Vec<Labels>, String> {
        self.check_alive()?;
        let url = format!("{}/api/v1/targets?state=dropped", self.base());
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("GET {url}: {}", resp.status()));
        }
        let body: Value = resp
            .json()
            .await
            .map_err(|e| format!("GET {url}: the body is not JSON: {e}"))?;
        if body["status"] != "success" {
            return Err(format!(
                "GET {url}: status is not success: {}",
                body["status"]
            ));
        }
        let dropped = body["data"]["droppedTargets"]
            .as_array()
            .ok_or_else(|| format!("GET {url}: no data.droppedTargets array"))?;
        dropped
            .iter()
            .map(|t| {
                serde_json::from_value::<Labels>(t["discoveredLabels"].clone()).map_err(|e| {
                    format!("GET {url}: discoveredLabels is not a string map: {e}: {t}")
                })
            })
            .collect()
    }

    /// Lines of vmagent's log at `level` (`info`, `warn`, `error`, ...).
    pub fn log_lines(&self, level: &str) -> Vec<String> {
        let tag = format!("\t{level}\t");
        self.log_text()
            .lines()
            .filter(|l| l.contains(&tag))
            .map(str::to_string)
            .collect()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(no vmagent log: {e})"))
    }

    /// vmagent's warnings and errors (capped), then the last lines of its log.
    pub fn log_digest(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        let problems: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| {
                l.contains("\twarn\t")
                    || l.contains("\terror\t")
                    || l.contains("\tfatal\t")
                    || l.contains("panic")
            })
            .take(40)
            .collect();
        let tail = &lines[lines.len().saturating_sub(40)..];
        format!(
            "--- vmagent warnings and errors (first 40) ---\n{}\n--- vmagent log, last 40 lines ---\n{}",
            problems.join("\n"),
            tail.join("\n")
        )
    }
}

impl Drop for VmAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("{}", self.log_digest());
        }
    }
}

fn check_alive(child: &mut Child) -> Result<(), String> {
    match child.try_wait() {
        Ok(None) => Ok(()),
        Ok(Some(status)) => Err(format!("vmagent exited early with {status}")),
        Err(e) => Err(format!("cannot check on vmagent: {e}")),
    }
}

async fn wait_ready(child: &mut Child, http: &reqwest::Client, port: u16) -> Result<(), String> {
    let url = format!("http://127.0.0.1:{port}/health");
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        check_alive(child)?;
        if http
            .get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "vmagent did not answer on {url} within {START_TIMEOUT:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn free_loopback_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free loopback port");
    l.local_addr().expect("local addr").port()
}
