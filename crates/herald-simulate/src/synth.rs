//! A generated cluster for `--services N --endpoints-per-service M`: Services, their
//! EndpointSlices, Nodes and kube-proxy's ConfigMap, as JSON objects added to a herald-audit
//! inventory, so that a generated cluster takes the same path as a dump or a live one.

use std::net::Ipv4Addr;

use herald_audit::Cluster;
use serde_json::{Value, json};

use crate::error::SimulateError;

/// The shape of a generated cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthetic {
    pub services: usize,
    pub endpoints_per_service: usize,
    pub nodes: usize,
    /// Every `nodeport_every`-th Service is a NodePort (0: none).
    pub nodeport_every: usize,
}

/// The pod CIDR of generated clusters (`--cluster-cidr` default).
pub const POD_CIDR: &str = "10.0.0.0/8";

fn ip(base: [u8; 4], n: usize) -> String {
    Ipv4Addr::from(u32::from(Ipv4Addr::from(base)) + n as u32).to_string()
}

impl Synthetic {
    /// The inventory of the generated cluster.
    pub fn cluster(&self) -> Result<Cluster, SimulateError> {
        if self.services == 0 || self.nodes == 0 {
            return Err(SimulateError::Input(
                "--services and --nodes must be at least 1".into(),
            ));
        }
        if self.services > 60_000 || self.services * self.endpoints_per_service > 4_000_000 {
            return Err(SimulateError::Input(format!(
                "--services {} with --endpoints-per-service {} is past what is simulated (60,000 Services, 4,000,000 endpoints)",
                self.services, self.endpoints_per_service
            )));
        }
        let mut c = Cluster::default();
        let mut add = |v: Value| c.add(v).map_err(|r| SimulateError::Input(r.reason));
        for n in 0..self.nodes {
            add(
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(n)},
                "status": {"nodeInfo": {"kubeletVersion": "v1.33.0", "kernelVersion": "6.1.0"}}}),
            )?;
        }
        add(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
            "data": {"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n"}}))?;
        let mut pod = 0usize;
        for s in 0..self.services {
            let ns = format!("ns-{}", s % 100);
            let name = format!("svc-{s}");
            // NodePorts are unique, in the default range 30000-32767: past 2,768, ClusterIP.
            let node_port = self.nodeport_every > 0
                && s % self.nodeport_every == 0
                && s / self.nodeport_every < 2768;
            let mut port =
                json!({"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080});
            if node_port {
                port["nodePort"] = json!(30000 + s / self.nodeport_every);
            }
            add(json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"type": if node_port {"NodePort"} else {"ClusterIP"},
                         "clusterIP": ip([172, 20, 0, 0], s + 1), "ports": [port]}}))?;
            let endpoints: Vec<Value> = (0..self.endpoints_per_service)
                .map(|_| {
                    pod += 1;
                    json!({"addresses": [ip([10, 0, 0, 0], pod)], "conditions": {"ready": true},
                           "nodeName": node_name(pod % self.nodes)})
                })
                .collect();
            add(
                json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{name}-abcde"), "namespace": ns,
                             "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4", "endpoints": endpoints,
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}),
            )?;
        }
        Ok(c)
    }
}

pub fn node_name(n: usize) -> String {
    format!("node-{n}")
}
