//! Rule counts of hand-written Services against counts derived by hand from kube-proxy's proxiers:
//! `syncProxyRules` and `writeServiceToEndpointRules` in kubernetes pkg/proxy/iptables/proxier.go
//! (aroradaman/kubernetes@4177b600d4b97a67b765a18ddeeb295ef757b212) and pkg/proxy/nftables/proxier.go
//! (@15ac54fe678ac9d414daf5c2bba486fbbd889d42). Each case says which writes it counts.

mod support;

use herald_simulate::input::from_cluster;
use herald_simulate::iptables::{Sync, restore};
use herald_simulate::nftables::{NftCount, transaction};
use serde_json::{Value, json};
use support::{CIDR, Eps, NODE, cluster, service};

/// (filter rules, nat rules, nat chains) one Service adds to the iptables restore input.
fn iptables_delta(spec: Value, status: Value, eps: Eps) -> (usize, usize, usize) {
    let base = restore(
        &from_cluster(&cluster(vec![]), NODE, CIDR).expect("empty"),
        &Sync::Full,
    );
    let one =
        from_cluster(&cluster(service("s", 1, spec, status, eps)), NODE, CIDR).expect("input");
    let r = restore(&one, &Sync::Full);
    let (f0, n0) = (base.total[0], base.total[1]);
    let (f1, n1) = (r.total[0], r.total[1]);
    assert_eq!(f1.chains, f0.chains, "the filter chains are fixed");
    (
        f1.rules - f0.rules,
        n1.rules - n0.rules,
        n1.chains - n0.chains,
    )
}

fn nft_delta(spec: Value, status: Value, eps: Eps) -> NftCount {
    let base = transaction(
        &from_cluster(&cluster(vec![]), NODE, CIDR).expect("empty"),
        &[],
    )
    .count;
    let one =
        from_cluster(&cluster(service("s", 1, spec, status, eps)), NODE, CIDR).expect("input");
    let c = transaction(&one, &[]).count;
    NftCount {
        chains: c.chains - base.chains,
        rules: c.rules - base.rules,
        elements: c.elements - base.elements,
        sets: c.sets - base.sets,
    }
}

#[test]
fn the_fixed_chains_hold_what_the_proxier_writes_before_and_after_its_service_loop() {
    let r = restore(
        &from_cluster(&cluster(vec![]), NODE, CIDR).expect("empty"),
        &Sync::Full,
    );
    // filter: KUBE-SERVICES, KUBE-EXTERNAL-SERVICES, KUBE-FORWARD, KUBE-NODEPORTS,
    // KUBE-PROXY-FIREWALL and kubeletFirewallChain; its DROP rule and KUBE-FORWARD's three.
    assert_eq!((r.total[0].chains, r.total[0].rules), (6, 4));
    // nat: KUBE-SERVICES, KUBE-NODEPORTS, KUBE-POSTROUTING (3 rules), KUBE-MARK-MASQ (1) and the
    // final KUBE-SERVICES -> KUBE-NODEPORTS jump.
    assert_eq!((r.total[1].chains, r.total[1].rules), (4, 5));
}

#[test]
fn a_cluster_ip_with_three_endpoints_costs_eleven_nat_rules() {
    // KUBE-SERVICES jump (1, "Capture the clusterIP"), KUBE-SVC masquerade for off-cluster sources
    // (1, "Set up internal traffic handling"), 3 statistic jumps (writeServiceToEndpointRules),
    // 3 KUBE-SEP chains of 2 rules (hairpin mark, DNAT): 11 rules in 4 chains.
    assert_eq!(
        iptables_delta(json!({}), json!({}), Eps::NoneLocal),
        (0, 11, 4)
    );
    // nftables: 1 cluster-ips element, 1 service-ips element; the internal masquerade rule, one
    // numgen vmap rule, 2 rules per endpoint chain; the service chain and 3 endpoint chains.
    let n = nft_delta(json!({}), json!({}), Eps::NoneLocal);
    assert_eq!((n.chains, n.rules, n.elements, n.sets), (4, 8, 2, 0));
}

#[test]
fn client_ip_affinity_adds_a_recent_check_per_endpoint() {
    // writeServiceToEndpointRules: "First write session affinity rules" (one -m recent --rcheck per
    // endpoint); the DNAT rule gains "-m recent --set" but stays one rule.
    let spec = json!({"sessionAffinity": "ClientIP"});
    assert_eq!(
        iptables_delta(spec.clone(), json!({}), Eps::NoneLocal),
        (0, 14, 4)
    );
    // nftables: one affinity set per endpoint, one "ip saddr @affinity goto" per endpoint in the
    // service chain, one "update @affinity" per endpoint chain.
    let n = nft_delta(spec, json!({}), Eps::NoneLocal);
    assert_eq!((n.chains, n.rules, n.sets), (4, 14, 3));
}

#[test]
fn a_service_without_endpoints_gets_only_a_reject_rule() {
    // "No endpoints": one filter KUBE-SERVICES REJECT; no nat chain at all.
    assert_eq!(iptables_delta(json!({}), json!({}), Eps::Empty), (1, 0, 0));
    // A NodePort without endpoints also rejects on KUBE-EXTERNAL-SERVICES.
    let np =
        json!({"type": "NodePort", "ports": [{"name": "http", "port": 80, "nodePort": 30080}]});
    assert_eq!(iptables_delta(np, json!({}), Eps::Empty), (2, 0, 0));
}

#[test]
fn a_node_port_adds_its_nodeports_jump_and_an_external_chain() {
    // KUBE-NODEPORTS jump (1, "Capture nodeports"); KUBE-EXT with its masquerade mark and the
    // jump to KUBE-SVC (2, "Set up external traffic handling"): 11 + 3 rules, 4 + 1 chains.
    let np =
        json!({"type": "NodePort", "ports": [{"name": "http", "port": 80, "nodePort": 30080}]});
    assert_eq!(iptables_delta(np, json!({}), Eps::NoneLocal), (0, 14, 5));
}

#[test]
fn external_traffic_policy_local_short_circuits_and_uses_a_local_chain() {
    let np = json!({"type": "NodePort", "externalTrafficPolicy": "Local", "healthCheckNodePort": 31080,
                    "ports": [{"name": "http", "port": 80, "nodePort": 30080}]});
    // With a local endpoint: KUBE-SERVICES 1, KUBE-NODEPORTS 1, KUBE-SVC 1 + 3, KUBE-SVL 1 (its one
    // local endpoint), KUBE-EXT 3 short-circuit rules + 1 jump to KUBE-SVL, 3 KUBE-SEP × 2; the
    // health check node port ACCEPT in filter.
    assert_eq!(
        iptables_delta(np.clone(), json!({}), Eps::OneLocal),
        (1, 17, 6)
    );
    // With no local endpoint: no KUBE-SVL, no final EXT jump, and a DROP on
    // KUBE-EXTERNAL-SERVICES for the node port ("has no local endpoints").
    assert_eq!(iptables_delta(np, json!({}), Eps::NoneLocal), (2, 15, 5));
}

#[test]
fn internal_traffic_policy_local_routes_the_cluster_ip_to_local_endpoints_only() {
    let spec = json!({"internalTrafficPolicy": "Local"});
    // UsesClusterEndpoints is false: KUBE-SERVICES -> KUBE-SVL (1), its masquerade rule and one jump
    // (2), one KUBE-SEP (2).
    assert_eq!(
        iptables_delta(spec.clone(), json!({}), Eps::OneLocal),
        (0, 5, 2)
    );
    // No local endpoint: the cluster IP is dropped in filter, nothing in nat.
    assert_eq!(iptables_delta(spec, json!({}), Eps::NoneLocal), (1, 0, 0));
}

#[test]
fn a_load_balancer_ip_jumps_to_the_external_chain_or_through_a_firewall_chain() {
    let lb =
        json!({"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "nodePort": 30080}]});
    let ingress = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}});
    // The node port's 14 and the load-balancer IP's KUBE-SERVICES jump.
    assert_eq!(
        iptables_delta(lb, ingress.clone(), Eps::NoneLocal),
        (0, 15, 5)
    );
    // loadBalancerSourceRanges: KUBE-FW with one rule per range and the final no-target rule (3),
    // a KUBE-PROXY-FIREWALL DROP per load-balancer IP in filter.
    let fw = json!({"type": "LoadBalancer", "loadBalancerSourceRanges": ["198.51.100.0/24", "203.0.113.0/24"],
                    "ports": [{"name": "http", "port": 80, "nodePort": 30080}]});
    assert_eq!(iptables_delta(fw, ingress, Eps::NoneLocal), (1, 18, 6));
}

#[test]
fn an_external_ip_makes_a_cluster_ip_service_externally_accessible() {
    // "Capture externalIPs": one KUBE-SERVICES jump to KUBE-EXT, and the KUBE-EXT chain (2).
    let spec = json!({"externalIPs": ["192.0.2.20"]});
    assert_eq!(iptables_delta(spec, json!({}), Eps::NoneLocal), (0, 14, 5));
}

#[test]
fn headless_services_and_services_of_another_proxy_get_no_rules() {
    let c = support::every_combination();
    let input = from_cluster(&c, NODE, CIDR).expect("input");
    assert_eq!(input.skipped_no_ip, 1);
    assert_eq!(input.skipped_proxy_name, 1);
    assert!(
        input
            .ports
            .iter()
            .all(|p| p.name != "headless" && p.name != "other-proxy")
    );
}

#[test]
fn a_partial_sync_writes_the_top_level_chains_and_only_the_changed_service() {
    let c = support::every_combination();
    let input = from_cluster(&c, NODE, CIDR).expect("input");
    let sets = herald_simulate::sync::Rulesets::of(&input);
    let partial = sets
        .iptables_partial
        .as_ref()
        .expect("a Service has endpoints");
    let full = &sets.iptables_full;
    // The filter table is written whole either way.
    assert_eq!(partial.written[0], full.written[0]);
    // The nat table keeps every top-level rule but few Service chains.
    assert!(
        partial.written[1].rules < full.written[1].rules / 5,
        "{partial:?}"
    );
    // The moved endpoint's old chain is deleted in the same sync (below the large-cluster threshold).
    assert_eq!(partial.text.matches("\n-X KUBE-SEP-").count(), 1);
}
