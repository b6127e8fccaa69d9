//! The `nft -f` transaction kube-proxy's nftables proxier runs for one node, reproduced from
//! `setupNFTables`, `syncProxyRules`, `writeServiceToEndpointDNATs` and
//! `writeServiceToEndpointJumps` in kubernetes pkg/proxy/nftables/proxier.go at v1.37.2, in the
//! command form sigs.k8s.io/knftables v0.0.22 writes (`add`, `flush`, `delete`), with kube-proxy's
//! defaults: IPv4 table `ip kube-proxy`, masquerade bit 14, detect-local-mode ClusterCIDR,
//! NodePorts on every local address, the KubeProxyNFTablesLocalhostNodePorts gate off.
//!
//! What a sync writes depends on what the previous one left, because kube-proxy keeps the sets'
//! and maps' elements (`nftElementStorage`) and writes only the difference: `add element` for a new
//! key, `delete` + `add` for a changed value, `delete element` for a key nothing wants any more.
//! [`NftSync::Full`] is kube-proxy's first sync on a node without its table (every element new);
//! [`NftSync::Partial`] the sync after some Services changed: no `setupNFTables`, chains of
//! unchanged Services left alone, stale service chains flushed (deleted by a later, separate
//! transaction a second on) and stale affinity sets deleted.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;

use serde::Serialize;

use crate::input::{Endpoint, ProxyInput, ServicePort, categorize};
use crate::names::{nft_endpoint_base, nft_service_base, service_port_name};

const T: &str = "ip kube-proxy";
/// `proxier.masqueradeRule`: `fmt.Sprintf("mark set mark or %s", "%#08x" of 1 << 14)`.
const MASQUERADE: &str = "mark set mark or 0x00004000";
const MASQ_MARK: &str = "0x00004000";
/// knftables.CommentLengthMax (`truncateNFTablesComment`).
const COMMENT_MAX: usize = 128;

/// The sets and maps whose elements kube-proxy tracks, in the order it cleans up their leftovers.
const STORES: [&str; 7] = [
    "cluster-ips",
    "service-ips",
    "firewall-ips",
    "no-endpoint-services",
    "no-endpoint-nodeports",
    "service-nodeports",
    "hairpin-connections",
];

/// What one transaction holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NftCount {
    /// Chains added (and flushed) to be filled: base, top-level, service and endpoint chains.
    pub chains: usize,
    pub rules: usize,
    /// Set and map elements added.
    pub elements: usize,
    /// Sets and maps added to be kept (not the ones added only to be deleted).
    pub sets: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub text: String,
    pub count: NftCount,
}

/// Which sync kube-proxy runs.
#[derive(Debug, Clone, Copy)]
pub enum NftSync<'a> {
    /// Its first sync after starting, on a node without its table: `setupNFTables` with the
    /// one-time add+delete of the base chains, every chain, rule and element.
    Full,
    /// A partial sync (`doFullSync` false) after the full sync of `before`: only `changed`
    /// Services' (namespace, name) chains are rewritten, elements written as they differ from
    /// `before`'s.
    Partial {
        before: &'a ProxyInput,
        changed: &'a BTreeSet<(String, String)>,
    },
}

/// The transaction of one sync of `input`.
pub fn transaction(input: &ProxyInput, sync: &NftSync<'_>) -> Transaction {
    match sync {
        NftSync::Full => run(input, None, &Kernel::default()).0,
        NftSync::Partial { before, changed } => {
            let (_, kernel) = run(before, None, &Kernel::default());
            run(input, Some(changed), &kernel).0
        }
    }
}

/// What a sync leaves that the next one reads: the elements of the tracked sets and maps
/// (`nftElementStorage.elements`), and the service chains and affinity sets that exist
/// (`nftables.List("chain")`, `List("sets")`).
#[derive(Debug, Default)]
struct Kernel {
    elements: BTreeMap<&'static str, BTreeMap<String, String>>,
    chains: BTreeSet<String>,
    affinity_sets: BTreeSet<String>,
}

/// One `nftElementStorage`: the elements, and the keys not yet ensured in this sync.
#[derive(Default)]
struct Store {
    elements: BTreeMap<String, String>,
    leftover: BTreeSet<String>,
}

struct Tx {
    text: String,
    count: NftCount,
    /// `createdChains` of `setupNFTables` and `activeChains` of the service loop (their names
    /// never overlap: service chain names hold a `/`).
    chains: HashSet<String>,
    affinity_sets: BTreeSet<String>,
    stores: BTreeMap<&'static str, Store>,
}

impl Tx {
    fn line(&mut self, l: std::fmt::Arguments<'_>) {
        let _ = self.text.write_fmt(l);
        self.text.push('\n');
    }

    /// `ensureChain`: add and flush once per transaction; with `skip` only note it as active.
    fn ensure_chain(&mut self, name: &str, skip: bool) {
        if self.chains.insert(name.to_string()) && !skip {
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

    fn add_set(&mut self, name: &str, spec: std::fmt::Arguments<'_>) {
        let _ = write!(self.text, "add set {T} {name} {{ ");
        let _ = self.text.write_fmt(spec);
        self.text.push_str(" }\n");
        self.count.sets += 1;
    }

    fn add_map(&mut self, name: &str, key: &str, comment: &str) {
        self.line(format_args!(
            "add map {T} {name} {{ type {key} : verdict ; comment \"{comment}\" ; }}"
        ));
        self.count.sets += 1;
    }

    /// `nftElementStorage.ensureElem`: written only when the key is new or its value changed.
    /// `value` is empty for a set element.
    fn element(&mut self, store: &'static str, key: String, value: String, comment: Option<&str>) {
        let s = self.stores.entry(store).or_default();
        let write = match s.elements.get(&key) {
            Some(old) if *old == value => false,
            Some(_) => {
                let _ = writeln!(self.text, "delete element {T} {store} {{ {key} }}");
                true
            }
            None => true,
        };
        s.leftover.remove(&key);
        if !write {
            return;
        }
        let _ = write!(self.text, "add element {T} {store} {{ {key}");
        if let Some(c) = comment {
            let _ = write!(self.text, " comment \"{c}\"");
        }
        if !value.is_empty() {
            let _ = write!(self.text, " : {value}");
        }
        self.text.push_str(" }\n");
        self.count.elements += 1;
        s.elements.insert(key, value);
    }

    /// `nftElementStorage.cleanupLeftoverKeys`.
    fn cleanup_leftovers(&mut self) {
        for store in STORES {
            let Some(s) = self.stores.get_mut(store) else {
                continue;
            };
            for key in std::mem::take(&mut s.leftover) {
                s.elements.remove(&key);
                let _ = writeln!(self.text, "delete element {T} {store} {{ {key} }}");
            }
        }
    }
}

/// One sync of `input` over `kernel`; `changed` is `None` for a full sync. Returns the
/// transaction and what the kernel holds after it.
fn run(
    input: &ProxyInput,
    changed: Option<&BTreeSet<(String, String)>>,
    kernel: &Kernel,
) -> (Transaction, Kernel) {
    let mut tx = Tx {
        text: String::new(),
        count: NftCount::default(),
        chains: HashSet::new(),
        affinity_sets: BTreeSet::new(),
        stores: kernel
            .elements
            .iter()
            .map(|(k, e)| {
                let store = Store {
                    elements: e.clone(),
                    leftover: e.keys().cloned().collect(),
                };
                (*k, store)
            })
            .collect(),
    };
    if changed.is_none() {
        setup(&mut tx, input);
        // setupNFTables' createdChains is its own; the service loop starts a fresh activeChains.
        tx.chains.clear();
    }
    for sp in &input.ports {
        let skip = changed.is_some_and(|c| !c.contains(&(sp.namespace.clone(), sp.name.clone())));
        port(&mut tx, sp, &input.cluster_cidr, skip);
    }
    // Service chains the kernel holds that nothing uses any more: flushed now, deleted a second
    // later (NB: a map element pointing at a chain may keep it busy for a while before 6.2).
    for chain in &kernel.chains {
        if !tx.chains.contains(chain) {
            tx.line(format_args!("flush chain {T} {chain}"));
        }
    }
    for set in &kernel.affinity_sets {
        if !tx.affinity_sets.contains(set) {
            tx.line(format_args!("delete set {T} {set}"));
        }
    }
    tx.cleanup_leftovers();
    let after = Kernel {
        elements: tx
            .stores
            .iter()
            .map(|(k, s)| (*k, s.elements.clone()))
            .collect(),
        chains: tx
            .chains
            .iter()
            .filter(|c| c.contains('/'))
            .cloned()
            .collect(),
        affinity_sets: tx.affinity_sets.clone(),
    };
    (
        Transaction {
            text: tx.text,
            count: tx.count,
        },
        after,
    )
}

/// `nftablesBaseChains`: (name, type, hook, priority), with knftables' named priorities as the
/// numbers it writes (`dstnat` -100, `dstnat-10` -110, `filter` 0, `srcnat` 100).
const BASE_CHAINS: [(&str, &str, &str, &str); 8] = [
    ("filter-prerouting-pre-dnat", "filter", "prerouting", "-110"),
    ("filter-output-pre-dnat", "filter", "output", "-110"),
    ("filter-input", "filter", "input", "0"),
    ("filter-forward", "filter", "forward", "0"),
    ("filter-output", "filter", "output", "0"),
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
    (
        "firewall-check",
        "filter-prerouting-pre-dnat",
        "ct state new ",
    ),
    ("firewall-check", "filter-output-pre-dnat", "ct state new "),
    ("services", "nat-output", ""),
    ("services", "nat-prerouting", ""),
    ("masquerading", "nat-postrouting", ""),
    ("cluster-ips-check", "filter-forward", "ct state new "),
    ("cluster-ips-check", "filter-output", "ct state new "),
];

/// `metrics.LocalhostNodePortRejectableProtocols`: their reject chains and counters are added and
/// deleted while the localhost-NodePort gate is off.
const REJECTABLE: [&str; 3] = ["tcp", "udp", "sctp"];

/// `setupNFTables` of kube-proxy's first sync.
fn setup(tx: &mut Tx, input: &ProxyInput) {
    tx.line(format_args!(
        "add table {T} {{ comment \"rules for kube-proxy\" ; }}"
    ));
    // `!proxier.flushed`: add+delete once so base chains come back with current properties.
    for (name, ..) in BASE_CHAINS {
        tx.line(format_args!("add chain {T} {name}"));
        tx.line(format_args!("delete chain {T} {name}"));
    }
    for (name, ty, hook, prio) in BASE_CHAINS {
        tx.line(format_args!(
            "add chain {T} {name} {{ type {ty} hook {hook} priority {prio} ; }}"
        ));
        tx.line(format_args!("flush chain {T} {name}"));
        tx.count.chains += 1;
    }
    for (dst, src, extra) in JUMP_CHAINS {
        tx.ensure_chain(dst, false);
        tx.rule(src, format_args!("{extra}jump {dst}"));
    }
    for c in ["services", "cluster-ips-check", "masquerading"] {
        tx.ensure_chain(c, false);
    }
    tx.add_set(
        "hairpin-connections",
        format_args!("type ipv4_addr . ipv4_addr . inet_proto . inet_service ; comment \"service hairpin connections\" ;"),
    );
    tx.rule(
        "masquerading",
        format_args!(
            "mark and {MASQ_MARK} != 0 mark set mark xor {MASQ_MARK} masquerade fully-random"
        ),
    );
    tx.rule(
        "masquerading",
        format_args!("ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random"),
    );
    tx.add_set(
        "cluster-ips",
        format_args!("type ipv4_addr ; comment \"Active ClusterIPs\" ;"),
    );
    tx.rule(
        "cluster-ips-check",
        format_args!(
            "ip daddr @cluster-ips reject comment \"Reject traffic to invalid ports of ClusterIPs\""
        ),
    );
    if !input.service_cidrs.is_empty() {
        let cidrs = input.service_cidrs.join(",");
        tx.rule(
            "cluster-ips-check",
            format_args!(
                "ip daddr {{ {cidrs} }} drop comment \"Drop traffic to unallocated ClusterIPs\""
            ),
        );
    }
    // NodePorts on every local address: the nodeport-ips set is added and deleted.
    tx.line(format_args!("add set {T} nodeport-ips {{ type ipv4_addr ; comment \"IPs that accept NodePort traffic\" ; }}"));
    tx.line(format_args!("delete set {T} nodeport-ips"));
    let ipk = "ipv4_addr . inet_proto . inet_service";
    let pk = "inet_proto . inet_service";
    tx.add_map(
        "no-endpoint-services",
        ipk,
        "vmap to drop or reject packets to services with no endpoints",
    );
    tx.add_map(
        "no-endpoint-nodeports",
        pk,
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
    // The localhost-NodePort gate is off: its map, chains and counters are added and deleted.
    tx.line(format_args!("add map {T} localhost-nodeport-reject-ports {{ type {pk} : verdict ; comment \"localhost NodePorts rejected by kube-proxy\" ; }}"));
    tx.line(format_args!(
        "delete map {T} localhost-nodeport-reject-ports"
    ));
    for proto in REJECTABLE {
        tx.line(format_args!(
            "add chain {T} localhost-nodeport-reject-{proto}"
        ));
        tx.line(format_args!(
            "delete chain {T} localhost-nodeport-reject-{proto}"
        ));
        tx.line(format_args!(
            "add counter {T} localhost-nodeport-rejected-{proto}"
        ));
        tx.line(format_args!(
            "delete counter {T} localhost-nodeport-rejected-{proto}"
        ));
    }
    tx.add_map(
        "firewall-ips",
        ipk,
        "destinations that are subject to LoadBalancerSourceRanges",
    );
    tx.ensure_chain("firewall-check", false);
    tx.rule(
        "firewall-check",
        format_args!("ip daddr . meta l4proto . th dport vmap @firewall-ips"),
    );
    tx.add_map(
        "service-ips",
        ipk,
        "ClusterIP, ExternalIP and LoadBalancer IP traffic",
    );
    tx.add_map("service-nodeports", pk, "NodePort traffic");
    let cidr = &input.cluster_cidr;
    if !cidr.is_empty() {
        tx.rule(
            "services",
            format_args!("ip daddr @cluster-ips ip saddr != {cidr} {MASQUERADE} comment \"masquerade clusterIP traffic from outside cluster\""),
        );
    }
    tx.rule(
        "services",
        format_args!("ip daddr . meta l4proto . th dport vmap @service-ips"),
    );
    tx.rule("services", format_args!("fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"));
}

/// One service port: the body of the loop over `proxier.svcPortMap` in `syncProxyRules`. `skip`
/// is `skipServiceUpdate`: a partial sync and neither the Service nor its endpoints changed.
fn port(tx: &mut Tx, sp: &ServicePort, cidr: &str, skip: bool) {
    let spn = service_port_name(&sp.namespace, &sp.name, &sp.port_name);
    let comment: String = spn.chars().take(COMMENT_MAX).collect();
    let comment = Some(comment.as_str());
    let proto = sp.protocol.as_str();
    let base = nft_service_base(&sp.namespace, &sp.name, proto, &sp.port_name);
    let svc = format!("service-{base}");
    let local = format!("local-{base}");
    let ext = format!("external-{base}");
    let fw = format!("firewall-{base}");
    let ep_base = |e: &Endpoint| {
        nft_endpoint_base(&sp.namespace, &sp.name, proto, &sp.port_name, &e.ip, e.port)
    };
    let cat = categorize(sp);
    let affinity = sp.affinity_seconds.is_some();
    for e in &cat.reachable {
        if affinity {
            let b = ep_base(e);
            tx.ensure_chain(&format!("endpoint-{b}"), skip);
            tx.affinity_sets.insert(format!("affinity-{b}"));
        }
        if e.local {
            let (ip, p) = (&e.ip, e.port);
            tx.element(
                "hairpin-connections",
                format!("{ip} . {ip} . {proto} . {p}"),
                String::new(),
                None,
            );
        }
    }
    let uses_cluster_chain = !cat.cluster.is_empty() && sp.uses_cluster_endpoints();
    if uses_cluster_chain {
        tx.ensure_chain(&svc, skip);
    }
    let uses_local_chain = !cat.local.is_empty() && sp.uses_local_endpoints();
    if uses_local_chain {
        tx.ensure_chain(&local, skip);
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
        tx.ensure_chain(&ext, skip);
    }
    let (int_verdict, ext_verdict) = if has_endpoints {
        ("drop", "drop")
    } else {
        ("goto reject-chain", "goto reject-chain")
    };
    let (cip, port) = (&sp.cluster_ip, sp.port);
    let key = |ip: &str| format!("{ip} . {proto} . {port}");
    tx.element("cluster-ips", cip.clone(), String::new(), None);
    if has_internal {
        tx.element(
            "service-ips",
            key(cip),
            format!("goto {internal_chain}"),
            None,
        );
    } else {
        tx.element(
            "no-endpoint-services",
            key(cip),
            int_verdict.into(),
            comment,
        );
    }
    for ip in &sp.external_ips {
        if has_endpoints {
            tx.element("service-ips", key(ip), format!("goto {ext}"), None);
        }
        if !has_external {
            tx.element("no-endpoint-services", key(ip), ext_verdict.into(), comment);
        }
    }
    let uses_fw = !sp.load_balancer_ips.is_empty() && !sp.source_ranges.is_empty();
    if uses_fw {
        tx.ensure_chain(&fw, skip);
    }
    for ip in &sp.load_balancer_ips {
        if has_endpoints {
            tx.element("service-ips", key(ip), format!("goto {ext}"), None);
        }
        if uses_fw {
            tx.element("firewall-ips", key(ip), format!("goto {fw}"), None);
        }
    }
    if !has_external {
        for ip in &sp.load_balancer_ips {
            tx.element("no-endpoint-services", key(ip), ext_verdict.into(), comment);
        }
    }
    if sp.node_port != 0 {
        let np = sp.node_port;
        if has_endpoints {
            tx.element(
                "service-nodeports",
                format!("{proto} . {np}"),
                format!("goto {ext}"),
                None,
            );
        }
        if !has_external {
            tx.element(
                "no-endpoint-nodeports",
                format!("{proto} . {np}"),
                ext_verdict.into(),
                comment,
            );
        }
    }
    if skip {
        return;
    }
    if uses_ext_chain {
        if !sp.external_local {
            tx.rule(&ext, format_args!("{MASQUERADE} comment \"masquerade\""));
        } else {
            if !cidr.is_empty() {
                tx.rule(
                    &ext,
                    format_args!(
                        "ip saddr {cidr} goto {svc} comment \"short-circuit pod traffic\""
                    ),
                );
            }
            tx.rule(
                &ext,
                format_args!(
                    "fib saddr type local {MASQUERADE} comment \"masquerade local traffic\""
                ),
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
    if uses_fw {
        // NB: `allowFromNode` (a source range holding the node's IP adds the LB IPs) is not
        // modelled: simulate does not know the node's IP.
        let sources = sp.source_ranges.join(" , ");
        tx.rule(&fw, format_args!("ip saddr != {{ {sources} }} drop"));
    }
    if let Some(seconds) = sp.affinity_seconds {
        for e in &cat.reachable {
            let b = ep_base(e);
            tx.add_set(
                &format!("affinity-{b}"),
                format_args!("type ipv4_addr ; flags dynamic,timeout ; timeout {seconds}s ;"),
            );
        }
    }
    for (uses, chain, eps) in [
        (uses_cluster_chain, &svc, &cat.cluster),
        (uses_local_chain, &local, &cat.local),
    ] {
        if !uses {
            continue;
        }
        if affinity {
            endpoint_jumps(tx, chain, eps, &ep_base);
        } else {
            endpoint_dnats(tx, chain, proto, eps);
        }
    }
    if affinity {
        for e in &cat.reachable {
            let b = ep_base(e);
            let chain = format!("endpoint-{b}");
            tx.rule(&chain, format_args!("update @affinity-{b} {{ ip saddr }}"));
            let addr = e.addr();
            tx.rule(&chain, format_args!("meta l4proto {proto} dnat to {addr}"));
        }
    }
}

/// `writeServiceToEndpointDNATs`: one DNAT rule, through a numgen map past one endpoint.
fn endpoint_dnats(tx: &mut Tx, chain: &str, proto: &str, eps: &[&Endpoint]) {
    if let [e] = eps {
        let addr = e.addr();
        tx.rule(chain, format_args!("meta l4proto {proto} dnat to {addr}"));
        return;
    }
    let map: Vec<String> = eps
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{i} : {} . {}", e.ip, e.port))
        .collect();
    tx.rule(
        chain,
        format_args!(
            "meta l4proto {proto} dnat ip addr . port to numgen random mod {} map {{ {} }}",
            eps.len(),
            map.join(" , ")
        ),
    );
}

/// `writeServiceToEndpointJumps`: an affinity check per endpoint, then a numgen vmap.
fn endpoint_jumps(
    tx: &mut Tx,
    chain: &str,
    eps: &[&Endpoint],
    ep_base: &dyn Fn(&Endpoint) -> String,
) {
    let mut vmap = Vec::with_capacity(eps.len());
    for (i, e) in eps.iter().enumerate() {
        let b = ep_base(e);
        tx.rule(
            chain,
            format_args!("ip saddr @affinity-{b} goto endpoint-{b}"),
        );
        vmap.push(format!("{i} : goto endpoint-{b}"));
    }
    tx.rule(
        chain,
        format_args!(
            "numgen random mod {} vmap {{ {} }}",
            eps.len(),
            vmap.join(" , ")
        ),
    );
}
