//! A real vmagent (Debian `victoria-metrics` 1.79, whose kubernetes_sd is an implementation
//! independent of Prometheus's) as a child process, read through its `/api/v1/targets`.
//!
//! What 1.79 serves (VictoriaMetrics v1.79.x lib/promscrape/targetstatus.go `WriteAPIV1Targets`):
//! dropped targets carry only `discoveredLabels`, which include the job's `job` label. They are kept
//! in one process-wide map keyed by a hash of all discovered labels, at most
//! `-promscrape.maxDroppedTargets` of them.

use std::path::Path;

use super::Labels;
use super::process::Peer;

/// Far more than any test cluster here produces.
const MAX_DROPPED_TARGETS: usize = 1_000_000;

/// A running vmagent; dropping it kills the process.
pub struct VmAgent {
    peer: Peer,
}

impl VmAgent {
    /// Starts `bin` with `scrape_config` (YAML) on a free loopback port and waits until it answers.
    ///
    /// NB: 1.79 refuses to start without `-remoteWrite.url`; it gets a closed loopback port, never
    /// used when every target is dropped. The scrape config is the caller's to keep loopback-only.
    pub async fn start(bin: &Path, scrape_config: &str) -> VmAgent {
        let peer = Peer::start(
            "vmagent",
            bin,
            &[("scrape.yml", scrape_config)],
            |dir, port| {
                vec![
                    format!("-httpListenAddr=127.0.0.1:{port}"),
                    format!("-promscrape.config={}", dir.join("scrape.yml").display()),
                    format!("-promscrape.maxDroppedTargets={MAX_DROPPED_TARGETS}"),
                    "-promscrape.kubernetesSDCheckInterval=1s".to_string(),
                    "-remoteWrite.url=http://127.0.0.1:1/api/v1/write".to_string(),
                    format!(
                        "-remoteWrite.tmpDataPath={}",
                        dir.join("remotewrite").display()
                    ),
                    "-loggerLevel=INFO".to_string(),
                ]
            },
            "/health",
        )
        .await;
        VmAgent { peer }
    }

    pub fn check_alive(&mut self) -> Result<(), String> {
        self.peer.check_alive()
    }

    /// The discovered labels of every dropped target (`/api/v1/targets?state=dropped`).
    pub async fn dropped_targets(&mut self) -> Result<Vec<Labels>, String> {
        self.targets("dropped", "droppedTargets", "discoveredLabels")
            .await
    }

    /// The final labels (after relabeling, `__` labels removed, `job` and `instance` set) of every
    /// active target (`/api/v1/targets?state=active`).
    pub async fn active_targets(&mut self) -> Result<Vec<Labels>, String> {
        self.targets("active", "activeTargets", "labels").await
    }

    /// `labels` of each target in `/api/v1/targets?state=STATE`'s `data.LIST`.
    async fn targets(
        &mut self,
        state: &str,
        list: &str,
        labels: &str,
    ) -> Result<Vec<Labels>, String> {
        let data = self
            .peer
            .api(&format!("/api/v1/targets?state={state}"))
            .await?;
        data[list]
            .as_array()
            .ok_or_else(|| format!("no data.{list} array in {data}"))?
            .iter()
            .map(|t| {
                serde_json::from_value::<Labels>(t[labels].clone())
                    .map_err(|e| format!("{labels} is not a string map: {e}: {t}"))
            })
            .collect()
    }

    /// Lines vmagent logged at error level (failed lists and watches, undecodable objects).
    pub fn errors(&self) -> Vec<String> {
        self.peer.log_lines_with(&["\terror\t", "\tfatal\t"])
    }

    /// Lines vmagent logged at `level` (`info`, `warn`, `error`, ...).
    pub fn log_lines(&self, level: &str) -> Vec<String> {
        self.peer.log_lines_with(&[&format!("\t{level}\t")])
    }
}
