//! `herald simulate` against real kube-proxy (k8s.io/kubernetes v1.37.2, built by `peers/build`): for
//! kube-sim's cluster and one of its nodes, what simulate generates for a full sync and for a
//! one-endpoint change is what kube-proxy wrote. kube-proxy says what it wrote in its own log:
//! iptables mode logs each restore's chain and rule counts per table ("Reloading service iptables
//! data", -v=2), nftables mode each transaction in full ("Running nftables transaction", -v=9).
//!
//! NB: everything runs in a throwaway network namespace on its loopback; no traffic is sent.

mod kube_proxy;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_simulate::input::ProxyInput;
use herald_simulate::iptables::{Sync, TableCount};
use herald_simulate::names::{endpoint_chain, service_port_name};
use herald_simulate::nftables::NftSync;
use kube_proxy::{KubeProxy, Launch, Mode, POD_CIDR};
use kube_sim::{Kind, Object, Sim, Write};
use serde_json::Value;

/// kube-proxy runs a proxier per IP family; the cluster is IPv4, simulate models that one.
const IPV4: &str = "ipFamily=\"IPv4\"";
/// Where the moved endpoint goes: the top of the pod CIDR, which the generator never reaches.
const MOVED_TO: &str = "127.31.255.1";

/// klog's `key=value` pairs of a structured log line.
fn kv(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect()
}

/// What each iptables restore kube-proxy ran wrote, per table, in log order.
fn iptables_restores(log: &str) -> Vec<Vec<TableCount>> {
    log.lines()
        .filter(|l| l.contains("\"Reloading service iptables data\"") && l.contains(IPV4))
        .map(|l| {
            let m = kv(l);
            let n = |k: &str| m.get(k).and_then(|v| v.parse().ok()).expect("a count");
            vec![
                TableCount {
                    table: "filter",
                    chains: n("numFilterChains"),
                    rules: n("numFilterRules"),
                },
                TableCount {
                    table: "nat",
                    chains: n("numNATChains"),
                    rules: n("numNATRules"),
                },
            ]
        })
        .collect()
}

/// The multi-line values klog wrote after lines containing `marker`, in log order: klog writes
/// such a value as `key=<`, then one tab-indented line each, then ` >`.
fn blocks(log: &str, marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in log.lines() {
        if let Some(tx) = current.as_mut() {
            match line.strip_prefix('\t') {
                Some(stmt) => {
                    tx.push_str(stmt);
                    tx.push('\n');
                }
                None => out.push(current.take().expect("open")),
            }
        } else if line.contains(marker) {
            current = Some(String::new());
        }
    }
    out
}

/// Every IPv4 nftables transaction kube-proxy ran (-v=9), in log order. NB: klog writes this one
/// without the proxier's ipFamily, so the family is read from the statements.
fn nft_transactions(log: &str) -> Vec<String> {
    blocks(log, "\"Running nftables transaction\"")
        .into_iter()
        .filter(|tx| tx.contains(" ip kube-proxy"))
        .collect()
}

/// Every IPv4 iptables restore input kube-proxy ran (-v=9), in log order.
fn iptables_inputs(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("\"Restoring iptables\""))
        .zip(blocks(log, "\"Restoring iptables\""))
        .filter(|(l, _)| l.contains(IPV4))
        .map(|(_, b)| b)
        .collect()
}

/// Statements of an nftables transaction by their verb and object (`add rule`, `flush map`, …).
fn statements(tx: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for l in tx.lines().filter(|l| !l.trim().is_empty()) {
        let key: Vec<&str> = l.split_whitespace().take(2).collect();
        *counts.entry(key.join(" ")).or_default() += 1;
    }
    counts
}

/// A pod with a ready endpoint in a Service that has at least two, and that Service's
/// (namespace, name).
fn endpoint_to_move(sim: &Sim, input: &ProxyInput) -> (Value, (String, String)) {
    let pods = sim.handle().objects_json(Kind::Pod);
    for sp in &input.ports {
        if sp.endpoints.iter().filter(|e| e.ready).count() < 2 || sp.cluster_ip.is_empty() {
            continue;
        }
        let ip = &sp.endpoints.iter().find(|e| e.ready).expect("ready").ip;
        if let Some(pod) = pods.iter().find(|p| p["status"]["podIP"] == ip.as_str()) {
            return (pod.clone(), (sp.namespace.clone(), sp.name.clone()));
        }
    }
    panic!("no Service with two ready endpoints");
}

/// What simulate needs to say what the sync after `before` → `after` writes: the changed Services
/// and (iptables) the stale endpoint chains.
fn simulated_change(
    before: &ProxyInput,
    after: &ProxyInput,
) -> (BTreeSet<(String, String)>, Vec<String>) {
    let ports = |i: &ProxyInput| {
        i.ports
            .iter()
            .map(|p| {
                (
                    (p.namespace.clone(), p.name.clone(), p.port_name.clone()),
                    p.clone(),
                )
            })
            .collect::<BTreeMap<_, _>>()
    };
    let (b, a) = (ports(before), ports(after));
    let mut changed = BTreeSet::new();
    let mut stale_ipt = Vec::new();
    for (k, old) in &b {
        if a.get(k) == Some(old) {
            continue;
        }
        changed.insert((k.0.clone(), k.1.clone()));
        let spn = service_port_name(&old.namespace, &old.name, &old.port_name);
        for e in &old.endpoints {
            let still = a
                .get(k)
                .is_some_and(|n| n.endpoints.iter().any(|x| x.ip == e.ip && x.port == e.port));
            if !still {
                stale_ipt.push(endpoint_chain(&spn, &old.protocol, &e.addr()));
            }
        }
    }
    (changed, stale_ipt)
}

fn simulate_matches_kube_proxy(mode: Mode) {
    let Some(bin) = kube_proxy::kube_proxy_bin() else {
        return;
    };
    if !kube_proxy::can_run(mode.tools()) {
        return;
    }
    let ns = Arc::new(kube_proxy::netns());
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_path = dir.path().to_path_buf();
    let ns2 = ns.clone();
    kube_proxy::run_in(ns.name(), move || async move {
        let (ns, dir) = (ns2, dir_path);
        let sim = kube_proxy::start_sim(0).await;
        let node = kube_proxy::nodes(&sim, 1).remove(0);
        let kc = kube_proxy::kubeconfig(&dir, "direct", sim.addr().port());
        let verbosity = 9;
        let mut kp = Launch {
            bin: &bin,
            kubeconfig: &kc,
            node: &node,
            mode,
            cluster_cidr: POD_CIDR,
            verbosity,
            dir: &dir,
        }
        .start(ns.name());

        let before = kube_proxy::proxy_input(&sim, &node);
        let syncs = |kp: &KubeProxy| match mode {
            Mode::Iptables => iptables_restores(&kp.log_text()).len(),
            Mode::Nftables => nft_transactions(&kp.log_text()).len(),
        };
        let start = Instant::now();
        while syncs(&kp) == 0 {
            kp.check_alive();
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "kube-proxy never synced:\n{}",
                kp.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // Let it settle: later syncs (its Node, the ServiceCIDRs) must not change the rules.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let sets = herald_simulate::sync::Rulesets::of(&before);
        if let Some(d) = std::env::var_os("HERALD_TEST_KEEP") {
            let _ = std::fs::copy(
                &kp.log,
                std::path::Path::new(&d).join(format!("kube-proxy-{}.log", mode.flag())),
            );
            let _ = std::fs::write(
                std::path::Path::new(&d).join(format!("simulate-{}.txt", mode.flag())),
                match mode {
                    Mode::Iptables => &sets.iptables_full.text,
                    Mode::Nftables => &sets.nft_full.text,
                },
            );
        }
        match mode {
            Mode::Iptables => {
                let first = &iptables_restores(&kp.log_text())[0];
                assert_eq!(
                    &sets.iptables_full.written,
                    first,
                    "a full sync: simulate's restore (left) vs kube-proxy's (right):\n{}\n---- kube-proxy's:\n{}",
                    sets.iptables_full.text.split("*nat").next().unwrap_or(""),
                    iptables_inputs(&kp.log_text())[0]
                        .split("*nat")
                        .next()
                        .unwrap_or("")
                );
                eprintln!("iptables full sync: {first:?}");
            }
            Mode::Nftables => {
                let first = &nft_transactions(&kp.log_text())[0];
                assert_eq!(
                    statements(&sets.nft_full.text),
                    statements(first),
                    "a full sync: simulate's transaction (left) vs kube-proxy's (right)"
                );
                eprintln!("nftables full sync: {:?}", statements(first));
            }
        }

        // One endpoint moves: its pod gets another IP, kube-sim's EndpointSlice controller follows.
        let (mut pod, service) = endpoint_to_move(&sim, &before);
        let seen = syncs(&kp);
        pod["status"]["podIP"] = MOVED_TO.into();
        pod["status"]["podIPs"] = serde_json::json!([{ "ip": MOVED_TO }]);
        sim.handle().apply(vec![Write::Put(Object::Pod(
            serde_json::from_value(pod).expect("a Pod"),
        ))]);
        let start = Instant::now();
        let mut after = kube_proxy::proxy_input(&sim, &node);
        loop {
            kp.check_alive();
            let moved = after
                .ports
                .iter()
                .any(|p| p.endpoints.iter().any(|e| e.ip == MOVED_TO));
            if moved && syncs(&kp) > seen {
                tokio::time::sleep(Duration::from_secs(2)).await;
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no sync after the change:\n{}",
                kp.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
            after = kube_proxy::proxy_input(&sim, &node);
        }
        let (changed, stale_ipt) = simulated_change(&before, &after);
        assert_eq!(
            changed,
            BTreeSet::from([service.clone()]),
            "one Service changed"
        );
        match mode {
            Mode::Iptables => {
                let restores = iptables_restores(&kp.log_text());
                assert_eq!(restores.len(), seen + 1, "one sync for one change");
                let partial = herald_simulate::iptables::restore(
                    &after,
                    &Sync::Partial {
                        changed: &changed,
                        deleted: &stale_ipt,
                    },
                );
                assert_eq!(
                    partial.written, restores[seen],
                    "the partial sync after moving an endpoint of {service:?}: simulate (left) vs kube-proxy (right)"
                );
                eprintln!("iptables partial sync: {:?}", restores[seen]);
            }
            Mode::Nftables => {
                let txs = nft_transactions(&kp.log_text());
                assert_eq!(txs.len(), seen + 1, "one sync for one change");
                let tx = herald_simulate::nftables::transaction(
                    &after,
                    &NftSync::Partial {
                        before: &before,
                        changed: &changed,
                    },
                );
                assert_eq!(
                    statements(&tx.text),
                    statements(&txs[seen]),
                    "the sync after moving an endpoint of {service:?}: simulate (left) vs kube-proxy (right)"
                );
                if let Some(d) = std::env::var_os("HERALD_TEST_KEEP") {
                    let _ = std::fs::write(
                        std::path::Path::new(&d).join("simulate-nftables-change.txt"),
                        &tx.text,
                    );
                }
                eprintln!("nftables change: {:?}", statements(&txs[seen]));
            }
        }
        if let Some(d) = std::env::var_os("HERALD_TEST_KEEP") {
            // Again, now with the sync after the change.
            let _ = std::fs::copy(
                &kp.log,
                std::path::Path::new(&d).join(format!("kube-proxy-{}.log", mode.flag())),
            );
        }
        drop(kp);
        sim.shutdown().await;
    });
}

#[test]
fn simulate_writes_what_kube_proxy_iptables_writes() {
    simulate_matches_kube_proxy(Mode::Iptables);
}

#[test]
fn simulate_writes_what_kube_proxy_nftables_writes() {
    simulate_matches_kube_proxy(Mode::Nftables);
}
