//! Problems the generator does not make, planted into a running kube-sim so that every fixable
//! finding appears at least once: Istio strict mTLS, a workload annotated for one of its metrics
//! ports, enough Services to pass kube-proxy's iptables threshold, and operator-managed kubelet
//! Endpoints.

#![allow(dead_code)]

use kube_sim::{Kind, Object, Sim, Write};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn typed<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

/// A namespace-wide STRICT PeerAuthentication in `namespace` (an Istio-injected one).
pub fn strict_mtls(sim: &Sim, namespace: &str) {
    sim.handle().apply(vec![Write::Put(Object::Custom(
        Kind::PeerAuthentication,
        json!({"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
            "metadata": {"name": "default", "namespace": namespace},
            "spec": {"mtls": {"mode": "STRICT"}}}),
    ))]);
}

/// Deployment `default/multi-exporter`: two pods whose app serves metrics on 9090 and whose exporter
/// sidecar serves them on 9100, annotated `prometheus.io/port: "9090"` only.
pub fn multi_port_pods(sim: &Sim) {
    let writes = (0..2)
        .map(|i| {
            Write::Put(Object::Pod(typed(json!({
                "metadata": {
                    "name": format!("multi-exporter-5d8f9c7b6-{i}x2kq"),
                    "namespace": "default",
                    "uid": format!("00000000-0000-4000-8000-00000000000{i}"),
                    "labels": {"app": "multi-exporter", "pod-template-hash": "5d8f9c7b6"},
                    "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": "multi-exporter-5d8f9c7b6", "uid": "00000000-0000-4000-8000-0000000000aa",
                        "controller": true}]
                },
                "spec": {"nodeName": "worker-a-00000", "containers": [
                    {"name": "app", "image": "registry.example.com/default/multi-exporter:1.0.0",
                     "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}]},
                    {"name": "exporter", "image": "quay.io/prometheus/statsd-exporter:v0.26.1",
                     "ports": [{"name": "prom", "containerPort": 9100}]}
                ]},
                "status": {"phase": "Running", "podIP": format!("10.250.0.{}", i + 1),
                    "podIPs": [{"ip": format!("10.250.0.{}", i + 1)}],
                    "conditions": [{"type": "Ready", "status": "True"}]}
            }))))
        })
        .collect();
    sim.handle().apply(writes);
}

/// `n` selector-less ClusterIP Services in namespace `bulk`, pushing the Service count past
/// kube-proxy's iptables thresholds.
pub fn bulk_services(sim: &Sim, n: usize) {
    let mut writes = vec![Write::Put(Object::Namespace(typed(
        json!({"metadata": {"name": "bulk", "labels": {"kubernetes.io/metadata.name": "bulk"}}}),
    )))];
    for i in 0..n {
        writes.push(Write::Put(Object::Service(typed(json!({
            "metadata": {"name": format!("svc-{i:04}"), "namespace": "bulk"},
            "spec": {"type": "ClusterIP", "clusterIP": format!("172.31.{}.{}", i / 250, i % 250 + 1),
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        })))));
    }
    sim.handle().apply(writes);
}

/// The prometheus-operator's `kube-system/kubelet` Service and Endpoints, listing every node's
/// kubelet (the operator writes the object itself, uncapped).
pub fn operator_kubelet_endpoints(sim: &Sim) {
    let labels = json!({"app.kubernetes.io/managed-by": "prometheus-operator",
        "app.kubernetes.io/name": "kubelet", "k8s-app": "kubelet"});
    let addresses: Vec<Value> = sim
        .handle()
        .objects_json(Kind::Node)
        .iter()
        .map(|n| {
            let ip = n["status"]["addresses"][0]["address"].clone();
            json!({"ip": ip, "targetRef": {"kind": "Node", "name": n["metadata"]["name"]}})
        })
        .collect();
    sim.handle().apply(vec![
        Write::Put(Object::Service(typed(json!({
            "metadata": {"name": "kubelet", "namespace": "kube-system", "labels": labels},
            "spec": {"clusterIP": "None", "type": "ClusterIP",
                     "ports": [{"name": "https-metrics", "port": 10250, "targetPort": 10250}]}
        })))),
        Write::Put(Object::Endpoints(typed(json!({
            "metadata": {"name": "kubelet", "namespace": "kube-system", "labels": labels},
            "subsets": [{"addresses": addresses,
                         "ports": [{"name": "https-metrics", "port": 10250, "protocol": "TCP"}]}]
        })))),
    ]);
}

/// A metrics-only ClusterIP Service `ledger-metrics` in `namespace` and the ServiceMonitor that
/// selects it: every port is a named, scraped metrics port.
pub fn metrics_only_service(sim: &Sim, namespace: &str) {
    sim.handle().apply(vec![
        Write::Put(Object::Service(typed(json!({
            "metadata": {"name": "ledger-metrics", "namespace": namespace,
                         "labels": {"app": "ledger", "component": "metrics"}},
            "spec": {"type": "ClusterIP", "clusterIP": "172.30.0.1", "clusterIPs": ["172.30.0.1"],
                     "selector": {"app": "ledger"},
                     "ports": [{"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"}]}
        })))),
        Write::Put(Object::Custom(
            Kind::ServiceMonitor,
            json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": {"name": "ledger", "namespace": namespace,
                             "labels": {"release": "kube-prometheus-stack"}},
                "spec": {"selector": {"matchLabels": {"component": "metrics", "app": "ledger"}},
                         "endpoints": [{"port": "metrics", "interval": "30s"}]}}),
        )),
    ]);
}
