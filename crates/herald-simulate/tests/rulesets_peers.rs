//! Every generated ruleset is accepted by the real tools in a fresh network namespace:
//! `iptables-legacy-restore --test`, `iptables-nft-restore --test` and `nft -c -f`, for the full sync
//! and for the sync after one endpoint change — for kube-sim's `small` preset, a 1,100-node
//! cluster, and hand-written Services of every type, policy and affinity.

mod support;

use herald_audit::Cluster;
use herald_simulate::input::from_cluster;
use herald_simulate::measure::{Backend, check};
use herald_simulate::sync::Rulesets;
use kube_sim::generate::ClusterSpec;
use kube_sim::{Sim, SimConfig};

async fn kube_sim_cluster(spec: ClusterSpec) -> (Cluster, String) {
    let sim = Sim::start(SimConfig {
        spec,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    let dump = sim.handle().dump();
    let mut c = Cluster::default();
    for item in dump["items"].as_array().expect("a List") {
        c.add(item.clone()).expect("kube-sim objects are valid");
    }
    let node = c.nodes[0].metadata.name.clone().expect("named node");
    (c, node)
}

/// `service_cidr`: the cluster's ServiceCIDR (cluster-ips-check's drop of unallocated cluster IPs).
fn accepted_everywhere(c: &Cluster, node: &str, cidr: &str, service_cidr: &str) {
    let mut input = from_cluster(c, node, cidr).expect("input");
    input.service_cidrs = vec![service_cidr.to_string()];
    assert!(
        !input.ports.is_empty(),
        "the cluster has Services with a cluster IP"
    );
    let sets = Rulesets::of(&input);
    assert!(
        sets.iptables_partial.is_some(),
        "some Service has an endpoint to move"
    );
    for backend in Backend::MEASURABLE {
        if let Err(e) = check(&sets, backend) {
            panic!("{} rejects the ruleset: {e}", backend.label());
        }
    }
    let left: Vec<String> = herald_simulate::netns::list()
        .expect("ip netns list")
        .into_iter()
        .filter(|n| n.starts_with(&format!("herald-sim-{}-", std::process::id())))
        .collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

#[test]
fn hand_written_services_of_every_type_policy_and_affinity_are_accepted() {
    if !support::root_or_skip() || support::tools().is_none() {
        return;
    }
    accepted_everywhere(
        &support::every_combination(),
        support::NODE,
        support::CIDR,
        "172.20.0.0/16",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_sims_small_preset_is_accepted() {
    if !support::root_or_skip() || support::tools().is_none() {
        return;
    }
    let (c, node) = kube_sim_cluster(ClusterSpec::small()).await;
    let cidr = ClusterSpec::small().pod_cidr.to_string();
    let service_cidr = ClusterSpec::small().service_cidr.to_string();
    tokio::task::spawn_blocking(move || accepted_everywhere(&c, &node, &cidr, &service_cidr))
        .await
        .expect("check");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1100_node_cluster_is_accepted() {
    if !support::root_or_skip() || support::tools().is_none() {
        return;
    }
    // As herald-audit's over-1000-nodes test: node-exporter on every node behind one Service.
    let spec = ClusterSpec {
        nodes: 1100,
        namespaces: 1,
        services: 3,
        pods: 2216,
        ..ClusterSpec::small()
    };
    let cidr = spec.pod_cidr.to_string();
    let service_cidr = spec.service_cidr.to_string();
    let (c, node) = kube_sim_cluster(spec).await;
    tokio::task::spawn_blocking(move || accepted_everywhere(&c, &node, &cidr, &service_cidr))
        .await
        .expect("check");
}
