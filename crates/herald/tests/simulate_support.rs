//! Shared by the `herald simulate` tests: the binary, root and the real tools.

#![allow(dead_code)] // each test binary uses a different subset

use std::process::Command;

pub const BIN: &str = env!("CARGO_BIN_EXE_herald");

pub fn herald() -> Command {
    Command::new(BIN)
}

/// Whether this process is root; under `CI=true` it must be.
pub fn root_or_skip() -> bool {
    if herald_simulate::netns::is_root() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("these tests need root (network namespaces) under CI=true: run .ci/run as root");
    }
    eprintln!("SKIPPED: not root; network namespaces need root (CI runs .ci/run as root)");
    false
}

/// iptables (both backends) and nft, or `None` after saying how to install them.
pub fn netfilter_tools() -> Option<()> {
    use kube_sim::peers::find;
    find("iptables-legacy-restore", "apt-get install iptables")?;
    find("iptables-nft-restore", "apt-get install iptables")?;
    find("nft", "apt-get install nftables")?;
    Some(())
}

/// `herald-sim-<pid>-*` namespaces that exist now.
pub fn namespaces_of(pid: u32) -> Vec<String> {
    herald_simulate::netns::list()
        .expect("ip netns list")
        .into_iter()
        .filter(|n| n.starts_with(&format!("herald-sim-{pid}-")))
        .collect()
}
