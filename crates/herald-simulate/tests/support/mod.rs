//! Hand-written Services for the tests: one of each type, traffic policy and affinity, with
//! endpoints on the simulated node (`node-0`), elsewhere, or none; and the peers' finders.

#![allow(dead_code)] // each test binary uses a different subset

use herald_audit::Cluster;
use serde_json::{Value, json};

pub const NODE: &str = "node-0";
pub const CIDR: &str = "10.0.0.0/8";

/// Where a Service's three endpoints are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eps {
    /// Three ready endpoints, one of them on `node-0`.
    OneLocal,
    /// Three ready endpoints, none on `node-0`.
    NoneLocal,
    /// No endpoint.
    Empty,
}

/// A Service and its EndpointSlice; `spec` is merged into a ClusterIP spec on port 80/TCP.
pub fn service(name: &str, n: usize, spec: Value, status: Value, eps: Eps) -> Vec<Value> {
    let mut s = json!({"clusterIP": format!("172.20.0.{}", n + 10),
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]});
    for (k, v) in spec.as_object().expect("spec is an object") {
        s[k] = v.clone();
    }
    let endpoints: Vec<Value> = match eps {
        Eps::Empty => vec![],
        Eps::OneLocal | Eps::NoneLocal => (0..3)
            .map(|i| {
                let node = if eps == Eps::OneLocal && i == 0 { NODE.to_string() } else { format!("node-{}", i + 1) };
                json!({"addresses": [format!("10.1.{n}.{}", i + 1)], "conditions": {"ready": true}, "nodeName": node})
            })
            .collect(),
    };
    vec![
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "hand"},
               "spec": s, "status": status}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("{name}-x"), "namespace": "hand",
                            "labels": {"kubernetes.io/service-name": name}},
               "addressType": "IPv4", "endpoints": endpoints,
               "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}),
    ]
}

/// Every combination of type (ClusterIP, NodePort, LoadBalancer with and without source ranges,
/// ClusterIP with an external IP), internal and external traffic policy, session affinity and
/// endpoint placement, plus a headless Service and one another proxy owns.
pub fn every_combination() -> Cluster {
    let mut objects = Vec::new();
    let mut n = 0;
    let types: [(&str, Value, Value); 5] = [
        ("cip", json!({"type": "ClusterIP"}), json!({})),
        ("np", json!({"type": "NodePort"}), json!({})),
        (
            "lb",
            json!({"type": "LoadBalancer"}),
            json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}),
        ),
        (
            "lbfw",
            json!({"type": "LoadBalancer", "loadBalancerSourceRanges": ["198.51.100.0/24", "203.0.113.0/24"]}),
            json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.11"}]}}),
        ),
        (
            "eip",
            json!({"type": "ClusterIP", "externalIPs": ["192.0.2.20"]}),
            json!({}),
        ),
    ];
    for (ty, spec, status) in &types {
        for etp in ["Cluster", "Local"] {
            for itp in ["Cluster", "Local"] {
                for affinity in ["None", "ClientIP"] {
                    for eps in [Eps::OneLocal, Eps::NoneLocal, Eps::Empty] {
                        n += 1;
                        let mut s = spec.clone();
                        s["internalTrafficPolicy"] = json!(itp);
                        s["sessionAffinity"] = json!(affinity);
                        if *ty != "cip" {
                            s["externalTrafficPolicy"] = json!(etp);
                        }
                        if *ty == "np" || ty.starts_with("lb") {
                            s["ports"] = json!([{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30000 + n}]);
                            if etp == "Local" {
                                s["healthCheckNodePort"] = json!(31000 + n);
                            }
                        }
                        // Load-balancer and external IPs are unique, as a cloud and the
                        // apiserver's admission make them.
                        let mut status = status.clone();
                        if ty.starts_with("lb") {
                            status = json!({"loadBalancer": {"ingress": [{"ip": format!("192.0.2.{n}")}]}});
                        }
                        if *ty == "eip" {
                            s["externalIPs"] = json!([format!("198.18.0.{n}")]);
                        }
                        let name = format!(
                            "{ty}-{}-{}-{}-{eps:?}",
                            etp.to_lowercase(),
                            itp.to_lowercase(),
                            affinity.to_lowercase()
                        )
                        .to_lowercase();
                        objects.extend(service(&name, n, s, status, eps));
                    }
                }
            }
        }
    }
    objects.extend(service(
        "headless",
        250,
        json!({"clusterIP": "None"}),
        json!({}),
        Eps::OneLocal,
    ));
    let mut owned = service("other-proxy", 251, json!({}), json!({}), Eps::OneLocal);
    owned[0]["metadata"]["labels"] = json!({"service.kubernetes.io/service-proxy-name": "cilium"});
    objects.extend(owned);
    cluster(objects)
}

pub fn cluster(objects: Vec<Value>) -> Cluster {
    let mut c = Cluster::default();
    for o in objects {
        c.add(o).expect("a valid object");
    }
    c
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

/// The real tools, or `None` after saying how to install them (a failure under `CI=true`).
pub fn tools() -> Option<()> {
    use kube_sim::peers::find;
    const IPTABLES: &str = "apt-get install iptables";
    const NFT: &str = "apt-get install nftables";
    find("iptables-legacy-restore", IPTABLES)?;
    find("iptables-nft-restore", IPTABLES)?;
    find("nft", NFT)?;
    find("ip", "apt-get install iproute2")?;
    Some(())
}
