//! The rulesets of one node at one size: a full sync, and the sync after one endpoint changes
//! (a partial sync in both modes: an iptables partial restore since KEP-3453, an nftables
//! transaction of the changed Services' chains and the elements that differ).

use std::collections::BTreeSet;
use std::time::Instant;

use serde::Serialize;

use crate::input::{ProxyInput, categorize};
use crate::iptables::{self, Restore, Sync, TableCount};
use crate::names::{endpoint_chain, service_port_name};
use crate::nftables::{self, NftCount, NftSync, Transaction};

/// The address a changed endpoint moves to: outside every generated pod range.
const MOVED_TO: &str = "100.127.255.254";

/// Generated rulesets and their sizes at one size of the cluster.
pub struct Rulesets {
    pub services: usize,
    pub endpoints: usize,
    pub iptables_full: Restore,
    /// `None` when no Service has an endpoint to change.
    pub iptables_partial: Option<Restore>,
    pub nft_full: Transaction,
    pub nft_change: Option<Transaction>,
    /// Seconds taken to generate `iptables_full`, and `nft_full`.
    pub iptables_s: f64,
    pub nft_s: f64,
}

/// Counts only, for reports.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RulesetSizes {
    pub services: usize,
    pub endpoints: usize,
    pub iptables: Vec<TableCount>,
    pub iptables_bytes: usize,
    /// What a partial sync after one endpoint change writes.
    pub iptables_partial_written: Vec<TableCount>,
    pub iptables_partial_bytes: usize,
    pub nftables: NftCount,
    pub nftables_bytes: usize,
    /// Seconds taken to generate the full iptables restore input, and the nftables transaction.
    pub iptables_generate_s: f64,
    pub nftables_generate_s: f64,
}

impl Rulesets {
    /// Generates the four rulesets, two at a time on their own threads; records how long the full
    /// iptables and nftables ones took.
    pub fn of(input: &ProxyInput) -> Rulesets {
        let change = one_endpoint_change(input);
        let timed = |f: &dyn Fn() -> Restore| {
            let t = Instant::now();
            let r = f();
            (r, t.elapsed().as_secs_f64())
        };
        let timed_nft = |f: &dyn Fn() -> Transaction| {
            let t = Instant::now();
            let r = f();
            (r, t.elapsed().as_secs_f64())
        };
        let ((iptables_full, iptables_s), iptables_partial, (nft_full, nft_s), nft_change) =
            std::thread::scope(|scope| {
                let ipt = scope.spawn(|| {
                    let full = timed(&|| iptables::restore(input, &Sync::Full));
                    let partial = change.as_ref().map(|c| {
                        iptables::restore(
                            &c.input,
                            &Sync::Partial {
                                changed: &c.changed,
                                deleted: std::slice::from_ref(&c.old_iptables_chain),
                            },
                        )
                    });
                    (full, partial)
                });
                let full = timed_nft(&|| nftables::transaction(input, &NftSync::Full));
                let changed = change.as_ref().map(|c| {
                    nftables::transaction(
                        &c.input,
                        &NftSync::Partial {
                            before: input,
                            changed: &c.changed,
                        },
                    )
                });
                let (ipt_full, ipt_partial) =
                    ipt.join().expect("the iptables generator does not panic");
                (ipt_full, ipt_partial, full, changed)
            });
        Rulesets {
            services: input.services(),
            endpoints: input.endpoints(),
            iptables_full,
            iptables_partial,
            nft_full,
            nft_change,
            iptables_s,
            nft_s,
        }
    }

    pub fn sizes(&self) -> RulesetSizes {
        RulesetSizes {
            services: self.services,
            endpoints: self.endpoints,
            iptables: self.iptables_full.total.clone(),
            iptables_bytes: self.iptables_full.text.len(),
            iptables_partial_written: self
                .iptables_partial
                .as_ref()
                .map(|r| r.written.clone())
                .unwrap_or_default(),
            iptables_partial_bytes: self.iptables_partial.as_ref().map_or(0, |r| r.text.len()),
            nftables: self.nft_full.count,
            nftables_bytes: self.nft_full.text.len(),
            iptables_generate_s: self.iptables_s,
            nftables_generate_s: self.nft_s,
        }
    }
}

impl RulesetSizes {
    pub fn iptables_rules(&self) -> usize {
        self.iptables.iter().map(|t| t.rules).sum()
    }
    pub fn iptables_partial_rules(&self) -> usize {
        self.iptables_partial_written.iter().map(|t| t.rules).sum()
    }
}

/// One endpoint of one Service moved to another address: the typical change behind a partial sync.
pub struct Change {
    pub input: ProxyInput,
    pub changed: BTreeSet<(String, String)>,
    pub old_iptables_chain: String,
}

/// Moves the first reachable endpoint of the first Service that has one.
pub fn one_endpoint_change(input: &ProxyInput) -> Option<Change> {
    let (i, ip) = input
        .ports
        .iter()
        .enumerate()
        .find_map(|(i, p)| categorize(p).reachable.first().map(|e| (i, e.ip.clone())))?;
    let mut changed_input = input.clone();
    let sp = &mut changed_input.ports[i];
    let j = sp.endpoints.iter().position(|e| e.ip == ip)?;
    let old = sp.endpoints[j].clone();
    sp.endpoints[j].ip = MOVED_TO.to_string();
    let spn = service_port_name(&sp.namespace, &sp.name, &sp.port_name);
    let old_iptables_chain = endpoint_chain(&spn, &sp.protocol, &old.addr());
    let changed = BTreeSet::from([(sp.namespace.clone(), sp.name.clone())]);
    Some(Change {
        input: changed_input,
        changed,
        old_iptables_chain,
    })
}
