//! Throwaway network namespaces, `herald-sim-<pid>-<random>`: created with `ip netns add`, deleted
//! by a guard when it drops, by the signal handler on SIGINT/SIGTERM, and — for a process killed
//! outright — by the sweep at the next start, which deletes every `herald-sim-*` namespace whose
//! pid no longer runs. Nothing here touches the host's own namespace: every command runs under
//! `ip netns exec <ns>`.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use crate::error::SimulateError;

pub const PREFIX: &str = "herald-sim-";

/// Namespaces this process holds, for the signal handler.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn ip(args: &[&str]) -> Result<Output, SimulateError> {
    Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| SimulateError::Tool {
            tool: "ip".into(),
            what: args.join(" "),
            reason: e.to_string(),
        })
}

/// Names of the existing network namespaces.
pub fn list() -> Result<Vec<String>, SimulateError> {
    let out = ip(&["netns", "list"])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

fn delete(name: &str) {
    let _ = ip(&["netns", "delete", name]);
}

/// Deletes `herald-sim-<pid>-*` namespaces whose process is gone; returns their names.
pub fn sweep_stale() -> Result<Vec<String>, SimulateError> {
    let mut swept = Vec::new();
    for name in list()? {
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or_default();
        let alive = !pid.is_empty() && Path::new("/proc").join(pid).exists();
        if !alive {
            delete(&name);
            swept.push(name);
        }
    }
    Ok(swept)
}

/// Deletes every namespace this process holds: for the signal handler, before it exits.
pub fn delete_all_live() {
    let names = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|p| p.into_inner()));
    for n in names {
        delete(&n);
    }
}

/// Installs SIGINT/SIGTERM handling on the current tokio runtime: delete the live namespaces,
/// then exit with 128 + the signal number.
pub fn install_signal_cleanup() -> Result<(), SimulateError> {
    use tokio::signal::unix::{SignalKind, signal};
    let err = |e: std::io::Error| SimulateError::Netns {
        name: "(signal handler)".into(),
        reason: e.to_string(),
    };
    let mut int = signal(SignalKind::interrupt()).map_err(err)?;
    let mut term = signal(SignalKind::terminate()).map_err(err)?;
    tokio::spawn(async move {
        let code = tokio::select! {
            _ = int.recv() => 130,
            _ = term.recv() => 143,
        };
        delete_all_live();
        std::process::exit(code);
    });
    Ok(())
}

/// A network namespace that is deleted when this drops.
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `herald-sim-<pid>-<random>` (root only).
    pub fn create() -> Result<Netns, SimulateError> {
        let name = format!(
            "{PREFIX}{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        // Registered first: a signal between add and registration would leak it.
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(name.clone());
        let out = ip(&["netns", "add", &name])?;
        if !out.status.success() {
            LIVE.lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|n| n != &name);
            return Err(SimulateError::Netns {
                name,
                reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(Netns { name })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `program args` inside the namespace with `input` on stdin; fails on a non-zero exit.
    pub fn run(&self, program: &str, args: &[&str], input: &[u8]) -> Result<(), SimulateError> {
        use std::io::Write as _;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SimulateError::Tool {
                tool: program.into(),
                what: format!("netns {}", self.name),
                reason: e.to_string(),
            })?;
        let mut stdin = child.stdin.take().expect("stdin was piped");
        let written = stdin.write_all(input);
        drop(stdin);
        let out = child.wait_with_output().map_err(|e| SimulateError::Tool {
            tool: program.into(),
            what: format!("netns {}", self.name),
            reason: e.to_string(),
        })?;
        if !out.status.success() || written.is_err() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(SimulateError::Tool {
                tool: program.into(),
                what: format!("{} bytes of input in netns {}", input.len(), self.name),
                reason: stderr.lines().take(5).collect::<Vec<_>>().join(" | "),
            });
        }
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        delete(&self.name);
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|n| n != &self.name);
    }
}

/// Whether this process may create namespaces (root).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Where `name` is on PATH.
pub fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}
