//! The `iptables-restore` input kube-proxy's iptables proxier writes for one node, reproduced from
//! `syncProxyRules` and `writeServiceToEndpointRules` in kubernetes pkg/proxy/iptables/proxier.go
//! (read at aroradaman/kubernetes@4177b600d4b97a67b765a18ddeeb295ef757b212, a fork tracking master),
//! with kube-proxy's defaults: IPv4, masquerade bit 14 (`0x4000`), detect-local-mode ClusterCIDR,
//! `localhostNodePorts` on, `nodePortAddresses` empty (all local addresses), no nfacct counters,
//! `conntrackTCPLiberal` off, `--random-fully` supported.
//!
//! A full sync writes every chain. A partial sync (KEP-3453 `MinimizeIPTablesRestore`, default from
//! 1.27) writes the top-level chains whole but the KUBE-SVC/SVL/EXT/FW/SEP chains only of the
//! Services that changed: `if !doFullSync && !serviceUpdateResult.UpdatedServices.Has(..) &&
//! !endpointUpdateResult.UpdatedServices.Has(..) { natChains = skippedNatChains; natRules =
//! skippedNatRules }`. Past 1,000 endpoints (`largeClusterEndpointsThreshold`) the per-endpoint
//! comments are left out (`appendServiceCommentLocked`) and stale chains are deleted at most once
//! per `syncPeriod`, not in the sync that made them stale.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::Serialize;

use crate::input::{ProxyInput, ServicePort, categorize};
use crate::names::{endpoint_chain, port_proto_hash, service_port_name};

/// `largeClusterEndpointsThreshold` in proxier.go.
pub const LARGE_CLUSTER_ENDPOINTS: usize = 1000;
const MASQ_MARK: &str = "0x4000";

/// Chains and rules of one table in one restore input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TableCount {
    pub table: &'static str,
    pub chains: usize,
    pub rules: usize,
}

/// One restore input and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    pub text: String,
    /// What this input writes, per table.
    pub written: Vec<TableCount>,
    /// What the kernel holds after it (a partial sync leaves unchanged Services' chains in place).
    pub total: Vec<TableCount>,
}

/// Lines of one table: chain declarations and rules, kept apart as kube-proxy's buffers are.
#[derive(Default)]
struct Table {
    chains: String,
    rules: String,
    n_chains: usize,
    n_rules: usize,
}

impl Table {
    fn chain(&mut self, name: &str) {
        let _ = writeln!(self.chains, ":{name} - [0:0]");
        self.n_chains += 1;
    }
    fn rule(&mut self, line: std::fmt::Arguments<'_>) {
        let _ = self.rules.write_fmt(line);
        self.rules.push('\n');
        self.n_rules += 1;
    }
}

/// What a sync writes.
pub enum Sync<'a> {
    Full,
    /// Only these Services' own chains; `deleted` are stale chains to remove.
    Partial {
        changed: &'a BTreeSet<(String, String)>,
        deleted: &'a [String],
    },
}

struct Writer<'a> {
    filter: Table,
    nat: Table,
    /// Own chains of unchanged Services in a partial sync: counted, not written.
    skipped: Table,
    cidr: &'a str,
    comments: bool,
}

/// The restore input for `input` under `sync`.
pub fn restore(input: &ProxyInput, sync: &Sync<'_>) -> Restore {
    let large = input.endpoints() > LARGE_CLUSTER_ENDPOINTS;
    let mut w = Writer {
        filter: Table::default(),
        nat: Table::default(),
        skipped: Table::default(),
        cidr: &input.cluster_cidr,
        comments: !large,
    };
    for c in [
        "KUBE-SERVICES",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FORWARD",
        "KUBE-NODEPORTS",
        "KUBE-PROXY-FIREWALL",
    ] {
        w.filter.chain(c);
    }
    for c in [
        "KUBE-SERVICES",
        "KUBE-NODEPORTS",
        "KUBE-POSTROUTING",
        "KUBE-MARK-MASQ",
    ] {
        w.nat.chain(c);
    }
    w.nat.rule(format_args!(
        "-A KUBE-POSTROUTING -m mark ! --mark {MASQ_MARK}/{MASQ_MARK} -j RETURN"
    ));
    w.nat.rule(format_args!(
        "-A KUBE-POSTROUTING -j MARK --xor-mark {MASQ_MARK}"
    ));
    w.nat.rule(format_args!("-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully"));
    w.nat.rule(format_args!(
        "-A KUBE-MARK-MASQ -j MARK --or-mark {MASQ_MARK}"
    ));
    // The localhost NodePort mitigation (kubernetes#90259), kubeletFirewallChain.
    w.filter.chain("KUBE-FIREWALL");
    w.filter.rule(format_args!("-A KUBE-FIREWALL -m comment --comment \"block incoming localnet connections\" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"));
    for sp in &input.ports {
        let own = match sync {
            Sync::Full => true,
            Sync::Partial { changed, .. } => {
                changed.contains(&(sp.namespace.clone(), sp.name.clone()))
            }
        };
        w.port(sp, own);
    }
    if let Sync::Partial { deleted, .. } = sync
        && !large
    {
        for chain in deleted.iter() {
            w.nat.chain(chain);
            w.nat.rule(format_args!("-X {chain}"));
        }
    }
    w.nat.rule(format_args!("-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"));
    w.filter.rule(format_args!(
        "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP"
    ));
    w.filter.rule(format_args!("-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {MASQ_MARK}/{MASQ_MARK} -j ACCEPT"));
    w.filter.rule(format_args!("-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"));
    w.finish()
}

impl Writer<'_> {
    fn finish(self) -> Restore {
        let mut text = String::with_capacity(
            self.filter.chains.len()
                + self.filter.rules.len()
                + self.nat.chains.len()
                + self.nat.rules.len()
                + 32,
        );
        text.push_str("*filter\n");
        text.push_str(&self.filter.chains);
        text.push_str(&self.filter.rules);
        text.push_str("COMMIT\n*nat\n");
        text.push_str(&self.nat.chains);
        text.push_str(&self.nat.rules);
        text.push_str("COMMIT\n");
        let count = |table, t: &Table| TableCount {
            table,
            chains: t.n_chains,
            rules: t.n_rules,
        };
        let filter = count("filter", &self.filter);
        let nat = count("nat", &self.nat);
        Restore {
            text,
            written: vec![filter, nat],
            total: vec![
                filter,
                TableCount {
                    table: "nat",
                    chains: nat.chains + self.skipped.n_chains,
                    rules: nat.rules + self.skipped.n_rules,
                },
            ],
        }
    }

    /// One service port: the body of the loop over `proxier.svcPortMap` in `syncProxyRules`.
    fn port(&mut self, sp: &ServicePort, own: bool) {
        let spn = service_port_name(&sp.namespace, &sp.name, &sp.port_name);
        let proto = sp.protocol.as_str();
        let hash = port_proto_hash(&spn, proto);
        let svc = format!("KUBE-SVC-{hash}");
        let svl = format!("KUBE-SVL-{hash}");
        let ext = format!("KUBE-EXT-{hash}");
        let fw = format!("KUBE-FW-{hash}");
        let cat = categorize(sp);
        let has_endpoints = cat.has_endpoints;
        let uses_cluster_chain = !cat.cluster.is_empty() && sp.uses_cluster_endpoints();
        let uses_local_chain = !cat.local.is_empty() && sp.uses_local_endpoints();
        let (internal_chain, has_internal) = if sp.internal_local {
            (&svl, has_endpoints && !cat.local.is_empty())
        } else {
            (&svc, has_endpoints)
        };
        let (external_policy_chain, has_external) = if sp.external_local {
            (&svl, has_endpoints && !cat.local.is_empty())
        } else {
            (&svc, has_endpoints)
        };
        let uses_ext_chain = has_endpoints && sp.externally_accessible();
        let uses_fw =
            has_endpoints && !sp.load_balancer_ips.is_empty() && !sp.source_ranges.is_empty();
        let lb_chain = if uses_fw { &fw } else { &ext };
        let (int_target, int_comment, ext_target, ext_comment) = if !has_endpoints {
            let c = format!("\"{spn} has no endpoints\"");
            ("REJECT", c.clone(), "REJECT", c)
        } else {
            let c = format!("\"{spn} has no local endpoints\"");
            ("DROP", c.clone(), "DROP", c)
        };
        let (cip, port) = (&sp.cluster_ip, sp.port);
        // Capture the clusterIP.
        if has_internal {
            self.nat.rule(format_args!("-A KUBE-SERVICES -m comment --comment \"{spn} cluster IP\" -m {proto} -p {proto} -d {cip} --dport {port} -j {internal_chain}"));
        } else {
            self.filter.rule(format_args!("-A KUBE-SERVICES -m comment --comment {int_comment} -m {proto} -p {proto} -d {cip} --dport {port} -j {int_target}"));
        }
        // Capture externalIPs.
        for ip in &sp.external_ips {
            if has_endpoints {
                self.nat.rule(format_args!("-A KUBE-SERVICES -m comment --comment \"{spn} external IP\" -m {proto} -p {proto} -d {ip} --dport {port} -j {ext}"));
            }
            if !has_external {
                self.filter.rule(format_args!("-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} -m {proto} -p {proto} -d {ip} --dport {port} -j {ext_target}"));
            }
        }
        // Capture load-balancer ingress.
        for ip in &sp.load_balancer_ips {
            if has_endpoints {
                self.nat.rule(format_args!("-A KUBE-SERVICES -m comment --comment \"{spn} loadbalancer IP\" -m {proto} -p {proto} -d {ip} --dport {port} -j {lb_chain}"));
            }
            if uses_fw {
                self.filter.rule(format_args!("-A KUBE-PROXY-FIREWALL -m comment --comment \"{spn} traffic not accepted by {fw}\" -m {proto} -p {proto} -d {ip} --dport {port} -j DROP"));
            }
        }
        if !has_external {
            for ip in &sp.load_balancer_ips {
                self.filter.rule(format_args!("-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} -m {proto} -p {proto} -d {ip} --dport {port} -j {ext_target}"));
            }
        }
        // Capture nodeports.
        if sp.node_port != 0 {
            let np = sp.node_port;
            if has_endpoints {
                self.nat.rule(format_args!("-A KUBE-NODEPORTS -m comment --comment {spn} -m {proto} -p {proto} --dport {np} -j {ext}"));
            }
            if !has_external {
                self.filter.rule(format_args!("-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} -m addrtype --dst-type LOCAL -m {proto} -p {proto} --dport {np} -j {ext_target}"));
            }
        }
        if sp.health_check_node_port != 0 {
            let hc = sp.health_check_node_port;
            self.filter.rule(format_args!("-A KUBE-NODEPORTS -m comment --comment \"{spn} health check node port\" -m tcp -p tcp --dport {hc} -j ACCEPT"));
        }
        // The Service's own chains: written only when it changed, in a partial sync.
        let cidr = self.cidr;
        let comments = self.comments;
        let t = if own {
            &mut self.nat
        } else {
            &mut self.skipped
        };
        if has_internal {
            t.rule(format_args!("-A {internal_chain} -m comment --comment \"{spn} cluster IP\" -m {proto} -p {proto} -d {cip} --dport {port} ! -s {cidr} -j KUBE-MARK-MASQ"));
        }
        if uses_ext_chain {
            t.chain(&ext);
            if !sp.external_local {
                t.rule(format_args!("-A {ext} -m comment --comment \"masquerade traffic for {spn} external destinations\" -j KUBE-MARK-MASQ"));
            } else {
                t.rule(format_args!("-A {ext} -m comment --comment \"pod traffic for {spn} external destinations\" -s {cidr} -j {svc}"));
                t.rule(format_args!("-A {ext} -m comment --comment \"masquerade LOCAL traffic for {spn} external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"));
                t.rule(format_args!("-A {ext} -m comment --comment \"route LOCAL traffic for {spn} external destinations\" -m addrtype --src-type LOCAL -j {svc}"));
            }
            if has_external {
                t.rule(format_args!("-A {ext} -j {external_policy_chain}"));
            }
        }
        if uses_fw {
            t.chain(&fw);
            // The node's own address is not in the input: no "allowFromNode" rules.
            for range in &sp.source_ranges {
                t.rule(format_args!(
                    "-A {fw} -m comment --comment \"{spn} loadbalancer IP\" -s {range} -j {ext}"
                ));
            }
            t.rule(format_args!("-A {fw} -m comment --comment \"other traffic to {spn} will be dropped by KUBE-PROXY-FIREWALL\""));
        }
        // Each endpoint's chain name, hashed once (keyed by the endpoint's address in memory).
        let seps: std::collections::HashMap<*const crate::input::Endpoint, String> = cat
            .reachable
            .iter()
            .map(|e| (*e as *const _, endpoint_chain(&spn, proto, &e.addr())))
            .collect();
        let sep = |e: &crate::input::Endpoint| seps[&(e as *const _)].clone();
        for (uses, chain, eps) in [
            (uses_cluster_chain, &svc, &cat.cluster),
            (uses_local_chain, &svl, &cat.local),
        ] {
            if !uses {
                continue;
            }
            t.chain(chain);
            // writeServiceToEndpointRules: affinity checks first, then the random spread.
            let comment = |e: &crate::input::Endpoint| {
                if comments {
                    format!(" -m comment --comment \"{spn} -> {}\"", e.addr())
                } else {
                    String::new()
                }
            };
            if let Some(seconds) = sp.affinity_seconds {
                for e in eps.iter() {
                    let c = sep(e);
                    t.rule(format_args!("-A {chain}{} -m recent --name {c} --rcheck --seconds {seconds} --reap -j {c}", comment(e)));
                }
            }
            let n = eps.len();
            for (i, e) in eps.iter().enumerate() {
                let c = sep(e);
                if i + 1 < n {
                    let p = 1.0 / (n - i) as f64;
                    t.rule(format_args!(
                        "-A {chain}{} -m statistic --mode random --probability {p:.10} -j {c}",
                        comment(e)
                    ));
                } else {
                    t.rule(format_args!("-A {chain}{} -j {c}", comment(e)));
                }
            }
        }
        for e in &cat.reachable {
            let c = sep(e);
            t.chain(&c);
            let comment = if comments {
                format!(" -m comment --comment {spn}")
            } else {
                String::new()
            };
            let ip = &e.ip;
            t.rule(format_args!("-A {c}{comment} -s {ip} -j KUBE-MARK-MASQ"));
            let affinity = if sp.affinity_seconds.is_some() {
                format!(" -m recent --name {c} --set")
            } else {
                String::new()
            };
            let addr = e.addr();
            t.rule(format_args!(
                "-A {c}{comment}{affinity} -m {proto} -p {proto} -j DNAT --to-destination {addr}"
            ));
        }
    }
}
