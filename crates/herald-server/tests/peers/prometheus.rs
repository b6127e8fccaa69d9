//! A real Prometheus (Debian 2.42: http_sd, no kubernetes_sd) as a child process, read through its
//! HTTP API: `/api/v1/targets?state=any` and `/api/v1/query`.
//!
//! What 2.42 lists (prometheus/prometheus v2.42.0 web/api/v1/api.go `targets`): active targets with
//! `discoveredLabels`, `labels`, `scrapePool`, `health`; dropped targets with `discoveredLabels` only,
//! all of them (the `keep_dropped_targets` limit came with 2.47). `discoveredLabels` are the labels
//! before relabeling, with the scrape config's `job`, `__scheme__`, `__metrics_path__`,
//! `__scrape_interval__` and `__scrape_timeout__` already added (scrape/target.go `PopulateLabels`),
//! plus http_sd's own `__meta_url`.
//!
//! NB: in 2.42 the discovered labels of a target whose relabel rules changed labels are not
//! trustworthy: v2.42.0 model/relabel/relabel.go `relabel` returns `lb.Labels(lset)`, building each
//! rule's result in the storage of its input, which for the first rule is the slice `PopulateLabels`
//! keeps as the discovered labels (changed in v2.43 by 11d019ed5a, "relabel: keep intermediate
//! results in labels.Builder"). Observed here: after `hashmod` the discovered `job` reads
//! `__tmp_hash`, and after rewriting `__address__` the discovered address is the rewritten one. So
//! discovered labels are read only where the rules drop or keep without changing anything first;
//! otherwise the rules copy what is needed into target labels.
//!

use std::path::Path;

use serde_json::Value;

use super::Labels;
use super::process::Peer;

/// One target as Prometheus lists it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The scrape job: `scrapePool` for active targets, the `job` discovered label for dropped ones
    /// (which carry no `scrapePool`).
    pub job: String,
    pub discovered: Labels,
    /// Labels after relabeling; empty for dropped targets.
    pub labels: Labels,
    /// `up`, `down` or `unknown` for active targets; empty for dropped ones.
    pub health: String,
    pub last_error: String,
}

/// A running Prometheus; dropping it kills the process.
pub struct Prometheus {
    peer: Peer,
}

impl Prometheus {
    /// Starts `bin` with `config` (YAML) on a free loopback port and waits until it is ready.
    ///
    /// NB: Prometheus dials every target its relabeling keeps; the caller's config must keep only
    /// loopback addresses (or none).
    pub async fn start(bin: &Path, config: &str) -> Prometheus {
        let peer = Peer::start(
            "prometheus",
            bin,
            &[("prometheus.yml", config)],
            |dir, port| {
                vec![
                    format!("--config.file={}", dir.join("prometheus.yml").display()),
                    format!("--storage.tsdb.path={}", dir.join("data").display()),
                    format!("--web.listen-address=127.0.0.1:{port}"),
                    "--log.level=info".to_string(),
                ]
            },
            "/-/ready",
        )
        .await;
        Prometheus { peer }
    }

    pub fn check_alive(&mut self) -> Result<(), String> {
        self.peer.check_alive()
    }

    /// Every target, active and dropped (`/api/v1/targets?state=any`).
    pub async fn targets(&mut self) -> Result<Vec<Target>, String> {
        let data = self.peer.api("/api/v1/targets?state=any").await?;
        let mut out = Vec::new();
        for (list, active) in [("activeTargets", true), ("droppedTargets", false)] {
            let items = data[list]
                .as_array()
                .ok_or_else(|| format!("no data.{list} array in {data}"))?;
            for t in items {
                let discovered = labels(&t["discoveredLabels"])?;
                let job = t["scrapePool"]
                    .as_str()
                    .map(str::to_string)
                    .or_else(|| discovered.get("job").cloned())
                    .unwrap_or_default();
                out.push(Target {
                    job,
                    discovered,
                    labels: if active {
                        labels(&t["labels"])?
                    } else {
                        Labels::new()
                    },
                    health: t["health"].as_str().unwrap_or("").to_string(),
                    last_error: t["lastError"].as_str().unwrap_or("").to_string(),
                });
            }
        }
        Ok(out)
    }

    /// An instant query's result vector (`/api/v1/query?query=...`): each series' labels and value.
    pub async fn query(&mut self, promql: &str) -> Result<Vec<(Labels, String)>, String> {
        let q: String = url_escape(promql);
        let data = self.peer.api(&format!("/api/v1/query?query={q}")).await?;
        let result = data["result"]
            .as_array()
            .ok_or_else(|| format!("no data.result array in {data}"))?;
        result
            .iter()
            .map(|s| {
                let value = s["value"][1].as_str().unwrap_or("").to_string();
                Ok((labels(&s["metric"])?, value))
            })
            .collect()
    }

    /// Warnings and errors Prometheus logged (logfmt `level=warn|error`).
    pub fn problems(&self) -> Vec<String> {
        self.peer.log_lines_with(&["level=warn", "level=error"])
    }
}

/// `promtool check config` on `config` (written as `<name>.yml` in `dir`, beside any files it
/// names); panics with promtool's output when it refuses it.
pub fn promtool_check(promtool: &Path, dir: &Path, name: &str, config: &str) {
    let file = dir.join(format!("{name}.yml"));
    std::fs::write(&file, config).expect("write the config");
    let out = std::process::Command::new(promtool)
        .args(["check", "config"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", promtool.display()));
    assert!(
        out.status.success(),
        "promtool check config refused the {name} config:\n{}{}\n{config}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn labels(v: &Value) -> Result<Labels, String> {
    serde_json::from_value(v.clone()).map_err(|e| format!("not a string map: {e}: {v}"))
}

/// Percent-encodes a query parameter (RFC 3986 unreserved characters stay).
fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
