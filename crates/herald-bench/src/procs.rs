//! Child processes the benchmarks start (kube-sim, herald, peers), read from `/proc` and stop.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use crate::procfs;

/// How long a started process gets to print the lines [`Proc::start`] waits for.
const START_TIMEOUT_S: u64 = 900;

pub struct Proc {
    pub name: &'static str,
    pub child: Child,
    pub pid: u32,
}

impl Proc {
    /// Starts `bin args…` with stderr to `dir/NAME.log`, and returns it with the stdout lines the caller
    /// waits for (each the first line that starts with one of `wanted`, rest of line returned).
    pub async fn start(
        name: &'static str,
        bin: &Path,
        args: &[String],
        dir: &Path,
        log: &str,
        wanted: &[&str],
    ) -> anyhow::Result<(Proc, Vec<String>)> {
        let stderr = std::fs::File::create(dir.join(format!("{name}.log")))?;
        let mut child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("child pid")?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let mut found = vec![None; wanted.len()];
        // Generous: kube-sim generates a large cluster before it prints its address (minutes at
        // twice k8s-limits on a busy 2-core machine).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(START_TIMEOUT_S);
        while found.iter().any(Option::is_none) {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .with_context(|| {
                    format!("{name} did not print its address within {START_TIMEOUT_S} s")
                })??
                .with_context(|| {
                    format!(
                        "{name} exited before printing its address (see {})",
                        dir.join(format!("{name}.log")).display()
                    )
                })?;
            for (i, w) in wanted.iter().enumerate() {
                if found[i].is_none()
                    && let Some(rest) = line.strip_prefix(w)
                {
                    found[i] = Some(rest.trim().to_string());
                }
            }
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok((
            Proc { name, child, pid },
            found.into_iter().map(Option::unwrap_or_default).collect(),
        ))
    }

    /// Starts `bin args…` with stdout and stderr to `dir/LOG.log`, waiting for nothing.
    pub fn spawn_plain(
        name: &'static str,
        bin: &Path,
        args: &[String],
        dir: &Path,
        log: &str,
    ) -> anyhow::Result<Proc> {
        let out = std::fs::File::create(dir.join(format!("{log}.log")))?;
        let child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("child pid")?;
        Ok(Proc { name, child, pid })
    }

    pub fn cpu(&self) -> f64 {
        procfs::cpu_seconds(&self.pid.to_string()).unwrap_or(f64::NAN)
    }

    pub fn rss(&self) -> f64 {
        procfs::rss_bytes(&self.pid.to_string()).map_or(f64::NAN, |b| b as f64)
    }

    /// Peak resident set size in bytes (`VmHWM`).
    pub fn peak_rss(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .ok()
            .and_then(|s| procfs::parse_status_kib(&s, "VmHWM:"))
            .map_or(f64::NAN, |k| k as f64 * 1024.0)
    }

    pub async fn stop(mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            eprintln!("  note: {} had already exited: {status}", self.name);
            return;
        }
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

pub fn default_bin(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("release").join(name);
    }
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from("target/release").join(name))
}
