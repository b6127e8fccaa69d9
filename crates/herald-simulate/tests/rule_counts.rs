//! Rule counts of hand-written Services against counts derived by hand from kube-proxy's proxiers:
//! `syncProxyRules` and `writeServiceToEndpointRules` in kubernetes pkg/proxy/iptables/proxier.go
//! (aroradaman/kubernetes@4177b600d4b97a67b765a18ddeeb295ef757b212) and pkg/proxy/nftables/proxier.go
//! (kubernetes v1.37.2). Each case says which writes it counts.

mod support;

use herald_simulate::input::from_cluster;
use herald_simulate::iptables::{Sync, restore};
use herald_simulate::nftables::{NftCount, NftSync, transaction};
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
        &NftSync::Full,
    )
    .count;
    let one =
        from_cluster(&cluster(service("s", 1, spec, status, eps)), NODE, CIDR).expect("input");
    let c = transaction(&one, &NftSync::Full).count;
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
fn the_nftables_setup_holds_the_base_and_top_level_chains_and_dispatch_maps() {
    let mut input = from_cluster(&cluster(vec![]), NODE, CIDR).expect("empty");
    let t = transaction(&input, &NftSync::Full);
    // 8 base chains; nodeport-endpoints-check, service-endpoints-check, firewall-check, services,
    // masquerading, cluster-ips-check and reject-chain. Rules: 11 base-chain jumps, masquerading 2,
    // cluster-ips-check 1, reject-chain 1, the two endpoints checks 2, firewall-check 1,
    // services 3. Sets: hairpin-connections and cluster-ips; maps: no-endpoint-services,
    // no-endpoint-nodeports, firewall-ips, service-ips, service-nodeports.
    assert_eq!(
        t.count,
        NftCount {
            chains: 15,
            rules: 21,
            elements: 0,
            sets: 7
        }
    );
    // The first sync adds and deletes the base chains once, and what the configuration leaves out.
    assert_eq!(t.text.matches("\ndelete chain ").count(), 8 + 3);
    assert_eq!(t.text.matches("\ndelete counter ").count(), 3);
    assert!(!t.text.contains("flush map") && !t.text.contains("flush set"));
    // ServiceCIDRs add cluster-ips-check's drop of unallocated cluster IPs.
    input.service_cidrs = vec!["172.20.0.0/16".into(), "172.21.0.0/16".into()];
    let t = transaction(&input, &NftSync::Full);
    assert_eq!(t.count.rules, 22);
    assert!(t.text.contains(
        "add rule ip kube-proxy cluster-ips-check ip daddr { 172.20.0.0/16,172.21.0.0/16 } drop"
    ));
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
    // nftables: 1 cluster-ips element, 1 service-ips element; the service chain with one DNAT
    // through a numgen map (writeServiceToEndpointDNATs): no endpoint chains without affinity.
    let n = nft_delta(json!({}), json!({}), Eps::NoneLocal);
    assert_eq!((n.chains, n.rules, n.elements, n.sets), (1, 1, 2, 0));
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
    // nftables: endpoint chains only with affinity: one affinity set per endpoint, one
    // "ip saddr @affinity goto" per endpoint and the numgen vmap in the service chain
    // (writeServiceToEndpointJumps), "update @affinity" and the DNAT in each endpoint chain.
    let n = nft_delta(spec, json!({}), Eps::NoneLocal);
    assert_eq!((n.chains, n.rules, n.sets), (4, 10, 3));
}

#[test]
fn a_service_without_endpoints_gets_only_a_reject_rule() {
    // "No endpoints": one filter KUBE-SERVICES REJECT; no nat chain at all.
    assert_eq!(iptables_delta(json!({}), json!({}), Eps::Empty), (1, 0, 0));
    // A NodePort without endpoints also rejects on KUBE-EXTERNAL-SERVICES.
    let np =
        json!({"type": "NodePort", "ports": [{"name": "http", "port": 80, "nodePort": 30080}]});
    assert_eq!(iptables_delta(np.clone(), json!({}), Eps::Empty), (2, 0, 0));
    // nftables: the cluster IP and a no-endpoint-services "goto reject-chain"; the node port in
    // no-endpoint-nodeports. No chain, no rule.
    let n = nft_delta(json!({}), json!({}), Eps::Empty);
    assert_eq!((n.chains, n.rules, n.elements), (0, 0, 2));
    let n = nft_delta(np, json!({}), Eps::Empty);
    assert_eq!((n.chains, n.rules, n.elements), (0, 0, 3));
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
    assert_eq!(
        iptables_delta(np.clone(), json!({}), Eps::NoneLocal),
        (2, 15, 5)
    );
    // nftables, a local endpoint: cluster-ips, service-ips, service-nodeports and its
    // hairpin-connections element; the service chain (one numgen DNAT), the local chain (one
    // DNAT), the external chain (3 short-circuit rules and the goto to the local chain).
    let n = nft_delta(np.clone(), json!({}), Eps::OneLocal);
    assert_eq!((n.chains, n.rules, n.elements), (3, 6, 4));
    // None local: no local chain, no final goto; the node port drops in no-endpoint-nodeports.
    let n = nft_delta(np, json!({}), Eps::NoneLocal);
    assert_eq!((n.chains, n.rules, n.elements), (2, 4, 4));
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

/// Statements of an nftables transaction by their verb and object (`add rule`, `delete element`, …).
fn statements(text: &str) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for l in text.lines() {
        let key: Vec<&str> = l.split_whitespace().take(2).collect();
        *counts.entry(key.join(" ")).or_default() += 1;
    }
    counts
}

fn stmts(pairs: &[(&str, usize)]) -> std::collections::BTreeMap<String, usize> {
    pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// The nftables sync after `before` became `after`, with Service `hand/s` changed.
fn nft_partial(before: Vec<Value>, after: Vec<Value>) -> String {
    let before = from_cluster(&cluster(before), NODE, CIDR).expect("input");
    let after = from_cluster(&cluster(after), NODE, CIDR).expect("input");
    let changed = std::collections::BTreeSet::from([("hand".to_string(), "s".to_string())]);
    transaction(
        &after,
        &NftSync::Partial {
            before: &before,
            changed: &changed,
        },
    )
    .text
}

#[test]
fn an_nftables_partial_sync_rewrites_the_changed_service_and_the_elements_that_differ() {
    // Moving the local endpoint of `hand/s` (and leaving `hand/t` alone): no setupNFTables; the
    // service chain again with its new DNAT map; the hairpin element of the old address deleted,
    // the new one added; `hand/t`'s chain and elements untouched.
    let c = cluster(
        [
            service("s", 1, json!({}), json!({}), Eps::OneLocal),
            service("t", 2, json!({}), json!({}), Eps::OneLocal),
        ]
        .concat(),
    );
    let input = from_cluster(&c, NODE, CIDR).expect("input");
    let change = herald_simulate::sync::one_endpoint_change(&input).expect("an endpoint moves");
    assert_eq!(
        change.changed,
        std::collections::BTreeSet::from([("hand".to_string(), "s".to_string())])
    );
    let text = transaction(
        &change.input,
        &NftSync::Partial {
            before: &input,
            changed: &change.changed,
        },
    )
    .text;
    assert_eq!(
        statements(&text),
        stmts(&[
            ("add chain", 1),
            ("flush chain", 1),
            ("add rule", 1),
            ("delete element", 1),
            ("add element", 1),
        ]),
        "{text}"
    );
    assert!(
        text.contains(
            "delete element ip kube-proxy hairpin-connections { 10.1.1.1 . 10.1.1.1 . tcp . 8080 }"
        ),
        "{text}"
    );
    assert!(!text.contains("/t/"), "{text}");
    // Nothing changed: nothing written.
    let same = std::collections::BTreeSet::new();
    let nothing = transaction(
        &input,
        &NftSync::Partial {
            before: &input,
            changed: &same,
        },
    );
    assert_eq!(nothing.text, "");
}

#[test]
fn a_service_losing_its_endpoints_flushes_its_chain_and_moves_to_no_endpoint_services() {
    let text = nft_partial(
        service("s", 1, json!({}), json!({}), Eps::NoneLocal),
        service("s", 1, json!({}), json!({}), Eps::Empty),
    );
    // The stale service chain is flushed (deleted by a later transaction); service-ips loses the
    // cluster IP's element, no-endpoint-services gains its reject.
    assert_eq!(
        statements(&text),
        stmts(&[
            ("flush chain", 1),
            ("add element", 1),
            ("delete element", 1)
        ]),
        "{text}"
    );
    assert!(text.contains("delete element ip kube-proxy service-ips { 172.20.0.11 . tcp . 80 }"));
    assert!(text.contains(
        "add element ip kube-proxy no-endpoint-services { 172.20.0.11 . tcp . 80 comment \"hand/s:http\" : goto reject-chain }"
    ));
}

#[test]
fn an_affinity_service_changing_an_endpoint_deletes_its_affinity_set_and_flushes_its_chain() {
    let spec = json!({"sessionAffinity": "ClientIP"});
    let before = service("s", 1, spec.clone(), json!({}), Eps::NoneLocal);
    let mut after = before.clone();
    after[1]["endpoints"][0]["addresses"] = json!(["10.1.1.9"]);
    let text = nft_partial(before, after);
    // The service chain and three endpoint chains (one new) written again, the old endpoint
    // chain flushed; three affinity sets added, the old one deleted; 3 affinity checks + the
    // vmap + 2 rules per endpoint chain.
    assert_eq!(
        statements(&text),
        stmts(&[
            ("add chain", 4),
            ("flush chain", 5),
            ("add set", 3),
            ("delete set", 1),
            ("add rule", 10),
        ]),
        "{text}"
    );
}
