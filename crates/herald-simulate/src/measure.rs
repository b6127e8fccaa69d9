//! Timing real syncs inside a throwaway network namespace: the generated iptables input through
//! `iptables-legacy-restore` and `iptables-nft-restore` (with kube-proxy's flags, `--noflush
//! --counters`), the nftables transaction through `nft -f`. A full sync is timed on a namespace that
//! already holds the ruleset (kube-proxy's steady state); the change sync after restoring the full
//! ruleset again, untimed. Each figure is the median of `runs`.

use std::time::Instant;

use serde::Serialize;

use crate::error::SimulateError;
use crate::netns::{Netns, which};
use crate::sync::Rulesets;

/// A way of loading rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// kube-proxy iptables mode, legacy (x_tables) backend.
    IptablesLegacy,
    /// kube-proxy iptables mode, nf_tables backend of iptables.
    IptablesNft,
    /// kube-proxy nftables mode.
    Nftables,
    /// kube-proxy IPVS mode: never measured (no ip_vs in this kernel), always modelled.
    Ipvs,
}

impl Backend {
    pub const MEASURABLE: [Backend; 3] = [
        Backend::IptablesLegacy,
        Backend::IptablesNft,
        Backend::Nftables,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Backend::IptablesLegacy => "iptables (legacy)",
            Backend::IptablesNft => "iptables (nft backend)",
            Backend::Nftables => "nftables",
            Backend::Ipvs => "IPVS",
        }
    }

    /// The program that loads this backend's rules.
    pub fn tool(self) -> Option<&'static str> {
        match self {
            Backend::IptablesLegacy => Some("iptables-legacy-restore"),
            Backend::IptablesNft => Some("iptables-nft-restore"),
            Backend::Nftables => Some("nft"),
            Backend::Ipvs => None,
        }
    }

    /// Whether the tool is installed.
    pub fn available(self) -> bool {
        self.tool().is_some_and(|t| which(t).is_some())
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Backend::Nftables => &["-f", "-"],
            _ => &["--noflush", "--counters"],
        }
    }
}

/// Measured seconds of one backend at one size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Measured {
    /// The first load into an empty namespace (kube-proxy's start).
    pub first_s: f64,
    pub full_s: f64,
    /// After one endpoint change; `None` when nothing could change.
    pub change_s: Option<f64>,
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn timed(ns: &Netns, backend: Backend, input: &[u8]) -> Result<f64, SimulateError> {
    let tool = backend.tool().expect("only measurable backends are timed");
    let start = Instant::now();
    ns.run(tool, backend.args(), input)?;
    Ok(start.elapsed().as_secs_f64())
}

/// Times one backend on `sets` in a fresh namespace, deleted afterwards whatever happens.
pub fn measure(sets: &Rulesets, backend: Backend, runs: usize) -> Result<Measured, SimulateError> {
    let ns = Netns::create()?;
    let (full, change): (&[u8], Option<&[u8]>) = match backend {
        Backend::Nftables => (
            sets.nft_full.text.as_bytes(),
            sets.nft_change.as_ref().map(|t| t.text.as_bytes()),
        ),
        _ => (
            sets.iptables_full.text.as_bytes(),
            sets.iptables_partial.as_ref().map(|r| r.text.as_bytes()),
        ),
    };
    let first_s = timed(&ns, backend, full)?;
    let runs = runs.max(1);
    let mut fulls = Vec::with_capacity(runs);
    for _ in 0..runs {
        fulls.push(timed(&ns, backend, full)?);
    }
    let change_s = match change {
        Some(change) => {
            let mut v = Vec::with_capacity(runs);
            for _ in 0..runs {
                v.push(timed(&ns, backend, change)?);
                // Back to the full ruleset (the change deleted or flushed a chain), untimed.
                timed(&ns, backend, full)?;
            }
            Some(median(v))
        }
        None => None,
    };
    drop(ns);
    Ok(Measured {
        first_s,
        full_s: median(fulls),
        change_s,
    })
}

/// Checks that a backend accepts the rulesets (`--test` / `-c`), in a fresh namespace.
pub fn check(sets: &Rulesets, backend: Backend) -> Result<(), SimulateError> {
    let ns = Netns::create()?;
    let tool = backend
        .tool()
        .expect("only measurable backends are checked");
    match backend {
        Backend::Nftables => {
            ns.run(tool, &["-c", "-f", "-"], sets.nft_full.text.as_bytes())?;
            // The change transaction flushes a chain the full one created: load, then check.
            if let Some(change) = &sets.nft_change {
                ns.run(tool, &["-f", "-"], sets.nft_full.text.as_bytes())?;
                ns.run(tool, &["-c", "-f", "-"], change.text.as_bytes())?;
            }
        }
        _ => {
            ns.run(tool, &["--test"], sets.iptables_full.text.as_bytes())?;
            if let Some(partial) = &sets.iptables_partial {
                ns.run(tool, &["--noflush"], sets.iptables_full.text.as_bytes())?;
                ns.run(tool, &["--noflush", "--test"], partial.text.as_bytes())?;
            }
        }
    }
    Ok(())
}
