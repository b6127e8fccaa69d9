//! Starting the processes every section measures: kube-sim on a scaled preset, herald with a job
//! file, and vmagent with a scrape config; plus the HTTP helpers and meters the sections share.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
pub use herald_bench::cluster::ClusterSpec;
use herald_bench::procs::Proc;
use herald_bench::{metric_sum, procfs};
use serde_json::{Value, json};

/// User-Agent of the suite's own setup and probe requests (left out of kube-sim's reader totals).
pub const SETUP_UA: &str = "bench-setup";
/// User-Agent of the suite's writers.
pub const WRITER_UA: &str = "bench-writer";
/// herald's upstream User-Agent prefix (`herald/VERSION`).
pub const HERALD_UA: &str = "herald";
/// vmagent's kubernetes_sd User-Agent prefix (Go's default client).
pub const VMAGENT_UA: &str = "Go-http-client";

/// Binaries and shared settings of a suite run.
#[derive(Debug, Clone)]
pub struct Env {
    pub kube_sim: PathBuf,
    pub herald: PathBuf,
    /// `None` when vmagent is not installed.
    pub vmagent: Option<PathBuf>,
    /// This binary (the static server runs as `herald-bench static-server`).
    pub this: PathBuf,
    pub work: PathBuf,
    pub child_log: String,
    pub http: reqwest::Client,
}

/// A running kube-sim.
pub struct Sim {
    pub proc: Proc,
    pub url: String,
    pub generate_seconds: f64,
}

impl Env {
    pub async fn get(&self, url: &str) -> anyhow::Result<reqwest::Response> {
        Ok(self
            .http
            .get(url)
            .header(reqwest::header::USER_AGENT, SETUP_UA)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?
            .error_for_status()?)
    }

    pub async fn get_json(&self, url: &str) -> anyhow::Result<Value> {
        Ok(self.get(url).await?.json().await?)
    }

    pub async fn get_text(&self, url: &str) -> anyhow::Result<String> {
        Ok(self.get(url).await?.text().await?)
    }

    /// Polls `url` until it answers 2xx.
    pub async fn wait_ok(&self, url: &str, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(r) = self
                .http
                .get(url)
                .header(reqwest::header::USER_AGENT, SETUP_UA)
                .send()
                .await
                && r.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{url} not ready within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let d = self.work.join(name);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }

    pub async fn start_sim(&self, spec: &ClusterSpec, dir: &Path) -> anyhow::Result<Sim> {
        let t = Instant::now();
        let (proc, found) = Proc::start(
            "kube-sim",
            &self.kube_sim,
            &spec.args(),
            dir,
            &self.child_log,
            &["http://"],
        )
        .await?;
        let url = format!("http://{}", found[0]);
        self.wait_ok(&format!("{url}/healthz"), Duration::from_secs(600))
            .await?;
        Ok(Sim {
            proc,
            url,
            generate_seconds: t.elapsed().as_secs_f64(),
        })
    }

    /// herald with `jobs_yaml` (and the Kubernetes API face when `kube_api`); returns it, its URL and
    /// its Kubernetes API URL. Does not wait for readiness.
    pub async fn start_herald(
        &self,
        sim_url: &str,
        jobs_yaml: &str,
        kube_api: bool,
        dir: &Path,
    ) -> anyhow::Result<(Proc, String, Option<String>)> {
        let kube_listen = kube_api.then_some("127.0.0.1:0");
        self.start_herald_at(sim_url, jobs_yaml, "127.0.0.1:0", kube_listen, &[], dir)
            .await
    }

    /// herald with `jobs_yaml` serving on `listen` (and the Kubernetes API on `kube_listen`), with
    /// `extra` arguments to `herald serve`; as [`Env::start_herald`].
    pub async fn start_herald_at(
        &self,
        sim_url: &str,
        jobs_yaml: &str,
        listen: &str,
        kube_listen: Option<&str>,
        extra: &[&str],
        dir: &Path,
    ) -> anyhow::Result<(Proc, String, Option<String>)> {
        let config = dir.join("herald.yaml");
        std::fs::write(&config, jobs_yaml)?;
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            "--apiserver".into(),
            sim_url.into(),
            "--listen".into(),
            listen.into(),
        ];
        let mut wanted = vec!["herald serving on"];
        if let Some(kube_listen) = kube_listen {
            args.extend([
                "--kube-listen".into(),
                kube_listen.into(),
                "--kube-insecure".into(),
            ]);
            wanted.push("kubernetes API on");
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        let (p, found) =
            Proc::start("herald", &self.herald, &args, dir, &self.child_log, &wanted).await?;
        Ok((p, found[0].clone(), found.get(1).cloned()))
    }

    /// vmagent with `config` (scrape config YAML), listening on a free loopback port; every target
    /// it discovers must be dropped by the config's relabelling. Returns it and its URL.
    pub async fn start_vmagent(
        &self,
        name: &str,
        config: &str,
        extra: &[String],
        dir: &Path,
    ) -> anyhow::Result<(Proc, String)> {
        let bin = self.vmagent.as_ref().context("vmagent is not installed")?;
        let port = free_port()?;
        let cfg = dir.join(format!("{name}.yaml"));
        std::fs::write(&cfg, config)?;
        let mut args = vec![
            format!("-httpListenAddr=127.0.0.1:{port}"),
            format!("-promscrape.config={}", cfg.display()),
            "-promscrape.maxDroppedTargets=2000000".into(),
            // Nothing listens on port 1: remote write fails and buffers, nothing leaves the machine.
            "-remoteWrite.url=http://127.0.0.1:1/api/v1/write".into(),
            format!(
                "-remoteWrite.tmpDataPath={}",
                dir.join(format!("{name}-rw")).display()
            ),
            "-loggerLevel=ERROR".into(),
        ];
        args.extend(extra.iter().cloned());
        let p = Proc::spawn_plain("vmagent", bin, &args, dir, name)?;
        let url = format!("http://127.0.0.1:{port}");
        self.wait_ok(&format!("{url}/health"), Duration::from_secs(60))
            .await?;
        Ok((p, url))
    }

    /// The sum of a metric in `url`/metrics (0 when absent; NaN when unreadable).
    pub async fn metric(&self, url: &str, name: &str) -> f64 {
        match self.get_text(&format!("{url}/metrics")).await {
            Ok(t) => metric_sum(&t, name).unwrap_or(0.0),
            Err(_) => f64::NAN,
        }
    }
}

/// A free loopback TCP port (bound, then released).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// vmagent's kubernetes_sd config for jobs `pod` and `endpointslice` on `api_server`, every target
/// dropped so it never dials anything.
pub fn vmagent_kubernetes_sd(api_server: &str) -> String {
    let mut s = String::from("scrape_configs:\n");
    for role in ["pod", "endpointslice"] {
        s.push_str(&format!(
            "- job_name: {role}\n  kubernetes_sd_configs: [{{role: {role}, api_server: \"{api_server}\"}}]\n  relabel_configs: [{{source_labels: [__address__], regex: '.*', action: drop}}]\n"
        ));
    }
    s
}

/// herald's job file for jobs `pod` and `endpointslice`, plus `extra` YAML appended.
pub fn herald_jobs(extra: &str) -> String {
    format!(
        "jobs:\n- name: pod\n  role: pod\n- name: endpointslice\n  role: endpointslice\n{extra}"
    )
}

/// Counters of kube-sim's meter summed over the User-Agents `pick` accepts.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimLoad {
    pub bytes: f64,
    pub watch_events: f64,
    pub lists: f64,
    pub watches_open: f64,
    pub watches_total: f64,
}

impl SimLoad {
    pub fn of(stats: &Value, pick: impl Fn(&str) -> bool) -> SimLoad {
        let mut l = SimLoad::default();
        if let Some(uas) = stats["by_user_agent"].as_object() {
            for (ua, c) in uas {
                if !pick(ua) {
                    continue;
                }
                let g = |k: &str| c[k].as_f64().unwrap_or(0.0);
                l.bytes += g("bytes_sent");
                l.watch_events += g("watch_events");
                l.lists += g("lists");
                l.watches_open += g("watches_open");
                l.watches_total += g("watches_total");
            }
        }
        l
    }

    /// Readers only: every User-Agent but the suite's setup and writer requests.
    pub fn readers(stats: &Value) -> SimLoad {
        SimLoad::of(stats, |ua| ua != SETUP_UA && ua != WRITER_UA)
    }

    pub fn minus(&self, before: &SimLoad) -> SimLoad {
        SimLoad {
            bytes: self.bytes - before.bytes,
            watch_events: self.watch_events - before.watch_events,
            lists: self.lists - before.lists,
            watches_open: self.watches_open,
            watches_total: self.watches_total - before.watches_total,
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "bytes": self.bytes, "watch_events": self.watch_events, "lists": self.lists,
            "watches_open": self.watches_open, "watches_started": self.watches_total,
        })
    }
}

/// Available memory (`MemAvailable`), bytes.
pub fn mem_available() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    procfs::parse_status_kib(&m, "MemAvailable:").map(|k| k * 1024)
}
