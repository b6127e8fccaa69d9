//! The `nft -f` transaction kube-proxy's nftables proxier runs for one node, reproduced from
//! `setupNFTables`, `syncProxyRules` and `writeServiceToEndpointRules` in kubernetes
//! pkg/proxy/nftables/proxier.go (read at aroradaman/kubernetes@15ac54fe678ac9d414daf5c2bba486fbbd889d42,
//! a fork tracking master), in the command form knftables writes (`add`, `flush`, `delete`), with
//! kube-proxy's defaults: IPv4 table `ip kube-proxy`, masquerade bit 14, detect-local-mode
//! ClusterCIDR, NodePorts on every local address, no ServiceCIDR objects.
//!
//! Every sync is one transaction that re-adds every chain, rule and map element (the maps are
//! flushed and refilled: "We currently fully-rebuild our sets and maps on each resync"); there is no
//! partial sync as in iptables mode. A chain that went stale is flushed in the same transaction and
//! deleted a second later.

use std::fmt::Write as _;

use serde::Serialize;

use crate::input::{Endpoint, ProxyInput, ServicePort, categorize};
use crate::names::{nft_endpoint_base, nft_service_base, service_port_name};

const T: &str = "ip kube-proxy";
const MASQ_MARK: &str = "0x4000";

/// What one transaction holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NftCount {
    pub chains: usize,
    pub rules: usize,
    /// Set and map elements.
    pub elements: usize,
    pub sets: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub text: String,
    pub count: NftCount,
}

struct Tx {
    text: String,
    count: NftCount,
    created: std::collections::HashSet<String>,
}

impl Tx {
    fn line(&mut self, l: std::fmt::Arguments<'_>) {
        let _ = self.text.write_fmt(l);
        self.text.push('\n');
    }
    /// `ensureChain`: add and flush, once per transaction.
    fn ensure_chain(&mut self, name: &str) {
        if self.created.insert(name.to_string()) {
            self.line(format_args!("add chain {T} {name}"));
            self.line(format_args!("flush chain {T} {name}"));
            self.count.chains += 1;
        }
    }
    fn rule(&mut self, chain: &str, rule: std::fmt::Arguments<'_>) {
        let _ = write!(self.text, "add rule {T} {chain} ");
        let _ = self.text.write_fmt(rule);
        self.text.push('\n');
        self.count.rules += 1;
    }
    fn element(&mut self, map: &str, elem: std::fmt::Arguments<'_>) {
        let _ = write!(self.text, "add element {T} {map} {{ ");
        let _ = self.text.write_fmt(elem);
        self.text.push_str(" }\n");
        self.count.elements += 1;
    }
}

/// kube-proxy's base chains: (name, type, hook, priority) (`nftablesBaseChains`: `dstnat - 10`,
/// `dstnat`, `srcnat`, ...), with the named priorities as numbers (dstnat -100, srcnat 100): nft
/// accepts `dstnat` only on the prerouting hook.
const BASE_CHAINS: [(&str, &str, &str, &str); 8] = [
    ("filter-prerouting", "filter", "prerouting", "-110"),
    ("filter-input", "filter", "input", "-110"),
    ("filter-forward", "filter", "forward", "-110"),
    ("filter-output", "filter", "output", "-110"),
    ("filter-output-post-dnat", "filter", "output", "-90"),
    ("nat-prerouting", "nat", "prerouting", "-100"),
    ("nat-output", "nat", "output", "-100"),
    ("nat-postrouting", "nat", "postrouting", "100"),
];

/// (destination, source, extra match) of `nftablesJumpChains`.
const JUMP_CHAINS: [(&str, &str, &str); 11] = [
    ("nodeport-endpoints-check", "filter-input", "ct state new "),
    ("service-endpoints-check", "filter-input", "ct state new "),
    ("service-endpoints-check", "filter-forward", "ct state new "),
    ("service-endpoints-check", "filter-output", "ct state new "),
    ("firewall-check", "filter-prerouting", "ct state new "),
    ("firewall-check", "filter-output", "ct state new "),
    ("services", "nat-output", ""),
    ("services", "nat-prerouting", ""),
    ("masquerading", "nat-postrouting", ""),
    ("cluster-ips-check", "filter-forward", "ct state new "),
    (
        "cluster-ips-check",
        "filter-output-post-dnat",
        "ct state new ",
    ),
];

/// The transaction of one sync of `input`; `stale` are chains flushed because they went stale.
pub fn transaction(input: &ProxyInput, stale: &[String]) -> Transaction {
    let mut tx = Tx {
        text: String::new(),
        count: NftCount::default(),
        created: Default::default(),
    };
    setup(&mut tx);
    tx.line(format_args!("flush set {T} cluster-ips"));
    for m in [
        "firewall-ips",
        "no-endpoint-services",
        "no-endpoint-nodeports",
        "service-ips",
        "service-nodeports",
    ] {
        tx.line(format_args!("flush map {T} {m}"));
    }
    for sp in &input.ports {
        port(&mut tx, sp, &input.cluster_cidr);
    }
    for chain in stale {
        tx.line(format_args!("flush chain {T} {chain}"));
    }
    Transaction {
        text: tx.text,
        count: tx.count,
    }
}

fn setup(tx: &mut Tx) {
    tx.line(format_args!(
        "add table {T} {{ comment \"rules for kube-proxy\" ; }}"
    ));
    for (name, ty, hook, prio) in BASE_CHAINS {
        tx.line(format_args!(
            "add chain {T} {name} {{ type {ty} hook {hook} priority {prio} ; }}"
        ));
        tx.line(format_args!("flush chain {T} {name}"));
        tx.created.insert(name.to_string());
        tx.count.chains += 1;
    }
    for (dst, src, extra) in JUMP_CHAINS {
        tx.ensure_chain(dst);
        tx.rule(src, format_args!("{extra}jump {dst}"));
    }
    for c in [
        "services",
        "cluster-ips-check",
        "masquerading",
        "mark-for-masquerade",
    ] {
        tx.ensure_chain(c);
    }
    tx.rule(
        "mark-for-masquerade",
        format_args!("mark set mark or {MASQ_MARK}"),
    );
    tx.rule(
        "masquerading",
        format_args!("mark and {MASQ_MARK} == 0 return"),
    );
    tx.rule(
        "masquerading",
        format_args!("mark set mark xor {MASQ_MARK}"),
    );
    tx.rule("masquerading", format_args!("masquerade fully-random"));
    tx.line(format_args!(
        "add set {T} cluster-ips {{ type ipv4_addr ; comment \"Active ClusterIPs\" ; }}"
    ));
    tx.count.sets += 1;
    tx.rule(
        "cluster-ips-check",
        format_args!(
            "ip daddr @cluster-ips reject comment \"Reject traffic to invalid ports of ClusterIPs\""
        ),
    );
    // NodePorts on every local address: the nodeport-ips set is added and deleted.
    tx.line(format_args!("add set {T} nodeport-ips {{ type ipv4_addr ; comment \"IPs that accept NodePort traffic\" ; }}"));
    tx.line(format_args!("delete set {T} nodeport-ips"));
    let verdict_map = |tx: &mut Tx, name: &str, key: &str, comment: &str| {
        tx.line(format_args!(
            "add map {T} {name} {{ type {key} : verdict ; comment \"{comment}\" ; }}"
        ));
        tx.count.sets += 1;
    };
    let ipk = "ipv4_addr . inet_proto . inet_service";
    verdict_map(
        tx,
        "no-endpoint-services",
        ipk,
        "vmap to drop or reject packets to services with no endpoints",
    );
    verdict_map(
        tx,
        "no-endpoint-nodeports",
        "inet_proto . inet_service",
        "vmap to drop or reject packets to service nodeports with no endpoints",
    );
    tx.line(format_args!("add chain {T} reject-chain {{ comment \"helper for @no-endpoint-services / @no-endpoint-nodeports\" ; }}"));
    tx.line(format_args!("flush chain {T} reject-chain"));
    tx.count.chains += 1;
    tx.rule("reject-chain", format_args!("reject"));
    tx.rule(
        "service-endpoints-check",
        format_args!("ip daddr . meta l4proto . th dport vmap @no-endpoint-services"),
    );
    tx.rule(
        "nodeport-endpoints-check",
        format_args!("ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports"),
    );
    verdict_map(
        tx,
        "firewall-ips",
        ipk,
        "destinations that are subject to LoadBalancerSourceRanges",
    );
    tx.ensure_chain("firewall-check");
    tx.rule(
        "firewall-check",
        format_args!("ip daddr . meta l4proto . th dport vmap @firewall-ips"),
    );
    verdict_map(
        tx,
        "service-ips",
        ipk,
        "ClusterIP, ExternalIP and LoadBalancer IP traffic",
    );
    verdict_map(
        tx,
        "service-nodeports",
        "inet_proto . inet_service",
        "NodePort traffic",
    );
    tx.rule(
        "services",
        format_args!("ip daddr . meta l4proto . th dport vmap @service-ips"),
    );
    tx.rule("services", format_args!("fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"));
}

/// One service port: the body of the loop over `proxier.svcPortMap` in `syncProxyRules`.
fn port(tx: &mut Tx, sp: &ServicePort, cidr: &str) {
    let spn = service_port_name(&sp.namespace, &sp.name, &sp.port_name);
    let proto = sp.protocol.as_str();
    let base = nft_service_base(&sp.namespace, &sp.name, proto, &sp.port_name);
    let svc = format!("service-{base}");
    let local = format!("local-{base}");
    let ext = format!("external-{base}");
    let fw = format!("firewall-{base}");
    // Each endpoint's name base, hashed once (keyed by the endpoint's address in memory).
    let bases: std::collections::HashMap<*const Endpoint, String> = sp
        .endpoints
        .iter()
        .map(|e| {
            let b = nft_endpoint_base(&sp.namespace, &sp.name, proto, &sp.port_name, &e.ip, e.port);
            (e as *const Endpoint, b)
        })
        .collect();
    let ep_base = |e: &Endpoint| bases[&(e as *const Endpoint)].as_str();
    let cat = categorize(sp);
    for e in &cat.reachable {
        tx.ensure_chain(&format!("endpoint-{}", ep_base(e)));
    }
    let uses_cluster_chain = !cat.cluster.is_empty() && sp.uses_cluster_endpoints();
    if uses_cluster_chain {
        tx.ensure_chain(&svc);
    }
    let uses_local_chain = !cat.local.is_empty() && sp.uses_local_endpoints();
    if uses_local_chain {
        tx.ensure_chain(&local);
    }
    let has_endpoints = cat.has_endpoints;
    let (internal_chain, has_internal) = if sp.internal_local {
        (&local, has_endpoints && !cat.local.is_empty())
    } else {
        (&svc, has_endpoints)
    };
    let (external_policy_chain, has_external) = if sp.external_local {
        (&local, has_endpoints && !cat.local.is_empty())
    } else {
        (&svc, has_endpoints)
    };
    let uses_ext_chain = has_endpoints && sp.externally_accessible();
    if uses_ext_chain {
        tx.ensure_chain(&ext);
    }
    let (int_verdict, ext_verdict) = if !has_endpoints {
        ("goto reject-chain", "goto reject-chain")
    } else {
        ("drop", "drop")
    };
    let (cip, port) = (&sp.cluster_ip, sp.port);
    tx.element("cluster-ips", format_args!("{cip}"));
    if has_internal {
        tx.element(
            "service-ips",
            format_args!("{cip} . {proto} . {port} : goto {internal_chain}"),
        );
    } else {
        tx.element(
            "no-endpoint-services",
            format_args!("{cip} . {proto} . {port} comment \"{spn}\" : {int_verdict}"),
        );
    }
    for ip in &sp.external_ips {
        if has_endpoints {
            tx.element(
                "service-ips",
                format_args!("{ip} . {proto} . {port} : goto {ext}"),
            );
        }
        if !has_external {
            tx.element(
                "no-endpoint-services",
                format_args!("{ip} . {proto} . {port} comment \"{spn}\" : {ext_verdict}"),
            );
        }
    }
    let uses_fw = !sp.load_balancer_ips.is_empty() && !sp.source_ranges.is_empty();
    if uses_fw {
        tx.ensure_chain(&fw);
        let sources = sp.source_ranges.join(", ");
        tx.rule(&fw, format_args!("ip saddr != {{ {sources} }} drop"));
    }
    for ip in &sp.load_balancer_ips {
        if has_endpoints {
            tx.element(
                "service-ips",
                format_args!("{ip} . {proto} . {port} : goto {ext}"),
            );
        }
        if uses_fw {
            tx.element(
                "firewall-ips",
                format_args!("{ip} . {proto} . {port} : goto {fw}"),
            );
        }
    }
    if !has_external {
        for ip in &sp.load_balancer_ips {
            tx.element(
                "no-endpoint-services",
                format_args!("{ip} . {proto} . {port} comment \"{spn}\" : {ext_verdict}"),
            );
        }
    }
    if sp.node_port != 0 {
        let np = sp.node_port;
        if has_endpoints {
            tx.element(
                "service-nodeports",
                format_args!("{proto} . {np} : goto {ext}"),
            );
        }
        if !has_external {
            tx.element(
                "no-endpoint-nodeports",
                format_args!("{proto} . {np} comment \"{spn}\" : {ext_verdict}"),
            );
        }
    }
    if has_internal {
        tx.rule(
            internal_chain,
            format_args!(
                "ip daddr {cip} {proto} dport {port} ip saddr != {cidr} jump mark-for-masquerade"
            ),
        );
    }
    if uses_ext_chain {
        if !sp.external_local {
            tx.rule(&ext, format_args!("jump mark-for-masquerade"));
        } else {
            tx.rule(
                &ext,
                format_args!("ip saddr {cidr} goto {svc} comment \"short-circuit pod traffic\""),
            );
            tx.rule(
                &ext,
                format_args!("fib saddr type local jump mark-for-masquerade comment \"masquerade local traffic\""),
            );
            tx.rule(
                &ext,
                format_args!(
                    "fib saddr type local goto {svc} comment \"short-circuit local traffic\""
                ),
            );
        }
        if has_external {
            tx.rule(&ext, format_args!("goto {external_policy_chain}"));
        }
    }
    if let Some(seconds) = sp.affinity_seconds {
        for e in &cat.reachable {
            let b = ep_base(e);
            tx.line(format_args!("add set {T} affinity-{b} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {seconds}s ; }}"));
            tx.count.sets += 1;
        }
    }
    for (uses, chain, eps) in [
        (uses_cluster_chain, &svc, &cat.cluster),
        (uses_local_chain, &local, &cat.local),
    ] {
        if !uses {
            continue;
        }
        if sp.affinity_seconds.is_some() {
            for e in eps.iter() {
                let b = ep_base(e);
                tx.rule(
                    chain,
                    format_args!("ip saddr @affinity-{b} goto endpoint-{b}"),
                );
            }
        }
        let vmap: Vec<String> = eps
            .iter()
            .enumerate()
            .map(|(i, e)| format!("{i} : goto endpoint-{}", ep_base(e)))
            .collect();
        tx.rule(
            chain,
            format_args!(
                "numgen random mod {} vmap {{ {} }}",
                eps.len(),
                vmap.join(" , ")
            ),
        );
    }
    for e in &cat.reachable {
        let b = ep_base(e);
        let chain = format!("endpoint-{b}");
        let ip = &e.ip;
        tx.rule(
            &chain,
            format_args!("ip saddr {ip} jump mark-for-masquerade"),
        );
        if sp.affinity_seconds.is_some() {
            tx.rule(&chain, format_args!("update @affinity-{b} {{ ip saddr }}"));
        }
        let addr = e.addr();
        tx.rule(&chain, format_args!("meta l4proto {proto} dnat to {addr}"));
    }
}
