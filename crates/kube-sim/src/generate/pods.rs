//! Pod templates (application variants, system DaemonSets and Deployments, Istio sidecar injection)
//! and the one function that turns a template into a concrete pod, shared by the generator and churn.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerStatus, EnvVar, HostIP, Pod, PodCondition, PodIP, PodSpec,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::{ISTIO_VERSION, NodeRef, Workload, WorkloadKind, random_suffix};

/// Where a Service port sends traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Number(i32),
    Named(&'static str),
}

/// A shape of application workload: its main container's ports and its Service's ports.
pub(crate) struct Variant {
    /// (name, containerPort) of the main container; `None` is an unnamed port.
    pub container_ports: &'static [(Option<&'static str>, i32)],
    /// (name, port, targetPort) of the Service.
    pub service_ports: &'static [(Option<&'static str>, i32, Target)],
    /// The port serving /metrics: (port name if any, number).
    pub metrics: (Option<&'static str>, i32),
    /// Whether the pod also runs a log-shipping sidecar that exposes no port.
    pub portless_sidecar: bool,
}

pub(crate) const VARIANTS: &[Variant] = &[
    // A web app with a separate metrics port; the Service targets one port by name, one by number.
    Variant {
        container_ports: &[(Some("http"), 8080), (Some("metrics"), 9090)],
        service_ports: &[
            (Some("http"), 80, Target::Named("http")),
            (Some("metrics"), 9090, Target::Number(9090)),
        ],
        metrics: (Some("metrics"), 9090),
        portless_sidecar: false,
    },
    // One unnamed port, one unnamed Service port.
    Variant {
        container_ports: &[(None, 8080)],
        service_ports: &[(None, 80, Target::Number(8080))],
        metrics: (None, 8080),
        portless_sidecar: false,
    },
    // gRPC with an HTTP metrics port, both targeted by name.
    Variant {
        container_ports: &[(Some("grpc"), 9000), (Some("http-metrics"), 8081)],
        service_ports: &[
            (Some("grpc"), 9000, Target::Named("grpc")),
            (Some("http-metrics"), 8081, Target::Named("http-metrics")),
        ],
        metrics: (Some("http-metrics"), 8081),
        portless_sidecar: false,
    },
    // A queue worker: only a metrics port, plus a sidecar without ports.
    Variant {
        container_ports: &[(Some("metrics"), 9102)],
        service_ports: &[(Some("metrics"), 9102, Target::Named("metrics"))],
        metrics: (Some("metrics"), 9102),
        portless_sidecar: true,
    },
];

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn port(name: Option<&str>, number: i32, protocol: &str) -> ContainerPort {
    ContainerPort {
        name: name.map(str::to_string),
        container_port: number,
        protocol: Some(protocol.into()),
        ..Default::default()
    }
}

fn container(name: &str, image: &str, ports: Vec<ContainerPort>) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        ports: (!ports.is_empty()).then_some(ports),
        termination_message_path: Some("/dev/termination-log".into()),
        termination_message_policy: Some("File".into()),
        ..Default::default()
    }
}

fn pod_spec(containers: Vec<Container>, init: Vec<Container>) -> PodSpec {
    PodSpec {
        containers,
        init_containers: (!init.is_empty()).then_some(init),
        restart_policy: Some("Always".into()),
        dns_policy: Some("ClusterFirst".into()),
        scheduler_name: Some("default-scheduler".into()),
        service_account_name: Some("default".into()),
        termination_grace_period_seconds: Some(30),
        ..Default::default()
    }
}

/// An application Deployment's pod template.
pub(crate) fn app_template(
    rng: &mut ChaCha8Rng,
    ns: &str,
    name: &str,
    variant: usize,
    annotated: bool,
) -> Pod {
    let v = &VARIANTS[variant];
    let image = format!(
        "registry.example.com/{ns}/{name}:1.{}.{}",
        rng.random_range(0..40u32),
        rng.random_range(0..10u32)
    );
    let ports = v
        .container_ports
        .iter()
        .map(|(n, p)| port(*n, *p, "TCP"))
        .collect();
    let mut containers = vec![container(name, &image, ports)];
    if v.portless_sidecar {
        containers.push(container(
            "log-shipper",
            "cr.fluentbit.io/fluent/fluent-bit:3.0.7",
            vec![],
        ));
    }
    if rng.random_bool(0.15) {
        containers.push(container(
            "config-reloader",
            "ghcr.io/jimmidyson/configmap-reload:v0.13.1",
            vec![port(Some("reloader-web"), 9533, "TCP")],
        ));
    }
    let mut init = Vec::new();
    if rng.random_bool(0.3) {
        init.push(container(
            "init-config",
            "docker.io/library/busybox:1.36",
            vec![],
        ));
    }
    let mut annotations = BTreeMap::new();
    if annotated {
        annotations.insert("prometheus.io/scrape".to_string(), "true".to_string());
        annotations.insert("prometheus.io/port".to_string(), v.metrics.1.to_string());
        if rng.random_bool(0.8) {
            annotations.insert("prometheus.io/path".to_string(), "/metrics".to_string());
        }
        let roll: f64 = rng.random();
        if roll < 0.05 {
            annotations.insert("prometheus.io/scheme".to_string(), "https".to_string());
        } else if roll < 0.35 {
            annotations.insert("prometheus.io/scheme".to_string(), "http".to_string());
        }
    }
    Pod {
        metadata: ObjectMeta {
            labels: Some(labels(&[("app", name), ("app.kubernetes.io/name", name)])),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        },
        spec: Some(pod_spec(containers, init)),
        status: None,
    }
}

/// The proxy image Istio injects.
fn proxy_image() -> String {
    format!("docker.io/istio/proxyv2:{ISTIO_VERSION}")
}

/// The `sidecar.istio.io/status` annotation Istio's injector writes.
const SIDECAR_STATUS: &str = r#"{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["workload-socket","credential-socket","workload-certs","istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert"],"imagePullSecrets":null,"revision":"default"}"#;

/// Inject the Istio sidecar the way istio/istio pkg/kube/inject does: an `istio-init` init
/// container, an `istio-proxy` container (Envoy stats on 15090 `http-envoy-prom`, health on 15021),
/// mesh labels and annotations, and metrics merging (`applyPrometheusMerge`): the pod's
/// prometheus.io scrape/path/port move into the proxy's `ISTIO_PROMETHEUS_ANNOTATIONS` env var and
/// are replaced by port 15020 and path /stats/prometheus, unless scraping is explicitly off.
pub(crate) fn inject_istio(template: &mut Pod, app: &str) {
    let annotations = template.metadata.annotations.get_or_insert_default();
    let mut env = vec![
        EnvVar {
            name: "ISTIO_META_WORKLOAD_NAME".into(),
            value: Some(app.into()),
            ..Default::default()
        },
        EnvVar {
            name: "ISTIO_META_CLUSTER_ID".into(),
            value: Some("Kubernetes".into()),
            ..Default::default()
        },
    ];
    let scrape_off = annotations
        .get("prometheus.io/scrape")
        .is_some_and(|v| v.eq_ignore_ascii_case("false"));
    if !scrape_off {
        let get = |k: &str| annotations.get(k).cloned().unwrap_or_default();
        let (scrape, path, port) = (
            get("prometheus.io/scrape"),
            get("prometheus.io/path"),
            get("prometheus.io/port"),
        );
        if !(scrape.is_empty() && path.is_empty() && port.is_empty()) {
            // Field order and names of pilot-agent's PrometheusScrapeConfiguration.
            let json = serde_json::json!({"scrape": scrape, "path": path, "port": port});
            env.push(EnvVar {
                name: "ISTIO_PROMETHEUS_ANNOTATIONS".into(),
                value: Some(json.to_string()),
                ..Default::default()
            });
        }
        annotations.insert("prometheus.io/port".into(), "15020".into());
        annotations.insert("prometheus.io/path".into(), "/stats/prometheus".into());
        annotations.insert("prometheus.io/scrape".into(), "true".into());
    }
    annotations.insert("sidecar.istio.io/status".into(), SIDECAR_STATUS.into());
    annotations.insert("istio.io/rev".into(), "default".into());
    let spec = template.spec.get_or_insert_default();
    let first = spec
        .containers
        .first()
        .map(|c| c.name.clone())
        .unwrap_or_default();
    annotations.insert(
        "kubectl.kubernetes.io/default-container".into(),
        first.clone(),
    );
    annotations.insert("kubectl.kubernetes.io/default-logs-container".into(), first);
    let labels = template.metadata.labels.get_or_insert_default();
    labels.insert("security.istio.io/tlsMode".into(), "istio".into());
    labels.insert("service.istio.io/canonical-name".into(), app.into());
    labels.insert(
        "service.istio.io/canonical-revision".into(),
        "latest".into(),
    );

    let mut proxy = container(
        "istio-proxy",
        &proxy_image(),
        vec![
            port(Some("http-envoy-prom"), 15090, "TCP"),
            port(None, 15021, "TCP"),
        ],
    );
    proxy.args = Some(
        [
            "proxy",
            "sidecar",
            "--domain",
            "$(POD_NAMESPACE).svc.cluster.local",
        ]
        .map(String::from)
        .to_vec(),
    );
    proxy.env = Some(env);
    spec.containers.push(proxy);
    let mut init = container("istio-init", &proxy_image(), vec![]);
    init.args = Some(
        ["istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337"]
            .map(String::from)
            .to_vec(),
    );
    spec.init_containers.get_or_insert_default().insert(0, init);
}

/// kube-system/kube-proxy (kubeadm's DaemonSet): one container, no declared ports.
pub(crate) fn kube_proxy_template() -> Pod {
    let mut c = container("kube-proxy", "registry.k8s.io/kube-proxy:v1.33.1", vec![]);
    c.command = Some(
        [
            "/usr/local/bin/kube-proxy",
            "--config=/var/lib/kube-proxy/config.conf",
            "--hostname-override=$(NODE_NAME)",
        ]
        .map(String::from)
        .to_vec(),
    );
    let mut spec = pod_spec(vec![c], vec![]);
    spec.priority_class_name = Some("system-node-critical".into());
    spec.service_account_name = Some("kube-proxy".into());
    Pod {
        metadata: ObjectMeta {
            labels: Some(labels(&[("k8s-app", "kube-proxy")])),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// monitoring/node-exporter: one per node, metrics on 9100.
///
/// NB: the real one runs with `hostNetwork: true` (pod IP = node IP); here its pods get pod-CIDR
/// addresses like every other pod, so pod IPs stay unique and a loopback pod CIDR covers them.
pub(crate) fn node_exporter_template() -> Pod {
    let c = container(
        "node-exporter",
        "quay.io/prometheus/node-exporter:v1.8.1",
        vec![port(Some("metrics"), 9100, "TCP")],
    );
    let mut spec = pod_spec(vec![c], vec![]);
    spec.service_account_name = Some("node-exporter".into());
    Pod {
        metadata: ObjectMeta {
            labels: Some(labels(&[
                ("app.kubernetes.io/name", "node-exporter"),
                ("app.kubernetes.io/component", "exporter"),
                ("app.kubernetes.io/part-of", "kube-prometheus"),
            ])),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// kube-system/coredns: DNS on 53 UDP and TCP, metrics on 9153.
pub(crate) fn coredns_template() -> Pod {
    let c = container(
        "coredns",
        "registry.k8s.io/coredns/coredns:v1.11.3",
        vec![
            port(Some("dns"), 53, "UDP"),
            port(Some("dns-tcp"), 53, "TCP"),
            port(Some("metrics"), 9153, "TCP"),
        ],
    );
    let mut spec = pod_spec(vec![c], vec![]);
    spec.dns_policy = Some("Default".into());
    spec.priority_class_name = Some("system-cluster-critical".into());
    spec.service_account_name = Some("coredns".into());
    Pod {
        metadata: ObjectMeta {
            labels: Some(labels(&[("k8s-app", "kube-dns")])),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// istio-system/istiod (the Deployment itself is not a kind kube-sim serves; its pods are).
pub(crate) fn istiod_template() -> Pod {
    let c = container(
        "discovery",
        &format!("docker.io/istio/pilot:{ISTIO_VERSION}"),
        vec![
            port(Some("http-debug"), 8080, "TCP"),
            port(Some("grpc-xds"), 15010, "TCP"),
            port(Some("tls-xds"), 15012, "TCP"),
            port(Some("https-webhooks"), 15017, "TCP"),
            port(Some("http-monitoring"), 15014, "TCP"),
        ],
    );
    let mut spec = pod_spec(vec![c], vec![]);
    spec.service_account_name = Some("istiod".into());
    Pod {
        metadata: ObjectMeta {
            labels: Some(labels(&[
                ("app", "istiod"),
                ("istio", "pilot"),
                ("istio.io/rev", "default"),
            ])),
            annotations: Some(labels(&[
                ("prometheus.io/port", "15014"),
                ("prometheus.io/scrape", "true"),
                ("sidecar.istio.io/inject", "false"),
            ])),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// A fresh pod name: `<deployment>-<template hash>-<5>` or `<daemonset>-<5>`.
pub(crate) fn pod_name(w: &Workload, rng: &mut ChaCha8Rng) -> String {
    match w.kind {
        WorkloadKind::Deployment => {
            format!("{}-{}-{}", w.name, w.template_hash, random_suffix(rng, 5))
        }
        WorkloadKind::DaemonSet => format!("{}-{}", w.name, random_suffix(rng, 5)),
    }
}

/// How far along a pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodState {
    /// Running, all containers ready.
    Ready,
    /// Running with an IP, but failing its readiness probe.
    NotReady,
    /// Scheduled, containers not started, no IP yet.
    Pending,
}

fn condition(type_: &str, ok: bool) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        ..Default::default()
    }
}

/// A stable fake hex digest for container and image IDs.
fn digest(parts: &[&str]) -> String {
    let mut out = String::with_capacity(64);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        h = (h ^ 0xff).wrapping_mul(0x0100_0000_01b3);
    }
    for _ in 0..4 {
        h ^= h >> 29;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        out.push_str(&format!("{h:016x}"));
    }
    out
}

fn statuses(
    containers: &[Container],
    uid: &str,
    ready: bool,
    started: bool,
    has_id: bool,
) -> Vec<ContainerStatus> {
    containers
        .iter()
        .map(|c| {
            let image = c.image.clone().unwrap_or_default();
            let repo = image.split(':').next().unwrap_or_default().to_string();
            ContainerStatus {
                name: c.name.clone(),
                image_id: format!("{repo}@sha256:{}", digest(&[&image])),
                image,
                ready,
                restart_count: 0,
                started: Some(started),
                container_id: has_id.then(|| format!("containerd://{}", digest(&[uid, &c.name]))),
                ..Default::default()
            }
        })
        .collect()
}

/// A concrete pod of workload `w`: the template with name, UID, owner, node, IP and a status
/// matching `state`.
pub fn build_pod(
    w: &Workload,
    name: &str,
    uid: &str,
    node: &NodeRef,
    ip: Option<IpAddr>,
    state: PodState,
) -> Pod {
    let mut pod = w.template.clone();
    pod.metadata.name = Some(name.into());
    pod.metadata.namespace = Some(w.namespace.clone());
    pod.metadata.uid = Some(uid.into());
    pod.metadata.generate_name = Some(match w.kind {
        WorkloadKind::Deployment => format!("{}-{}-", w.name, w.template_hash),
        WorkloadKind::DaemonSet => format!("{}-", w.name),
    });
    pod.metadata.owner_references = Some(vec![w.owner.clone()]);
    let spec = pod.spec.get_or_insert_default();
    spec.node_name = Some(node.name.clone());
    let running = state != PodState::Pending && ip.is_some();
    let ready = running && state == PodState::Ready;
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let ip_str = ip.map(|i| i.to_string());
    pod.status = Some(PodStatus {
        phase: Some(if running { "Running" } else { "Pending" }.into()),
        host_ip: Some(node.ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: node.ip.to_string(),
        }]),
        pod_ip: ip_str.clone(),
        pod_ips: ip_str.map(|ip| vec![PodIP { ip }]),
        conditions: Some(vec![
            condition("PodReadyToStartContainers", running),
            condition("Initialized", running),
            condition("Ready", ready),
            condition("ContainersReady", ready),
            condition("PodScheduled", true),
        ]),
        container_statuses: Some(statuses(&spec.containers, uid, ready, running, running)),
        // Init containers have run to completion once the pod runs: ready, not started, with an ID.
        init_container_statuses: (!init.is_empty())
            .then(|| statuses(init, uid, running, false, running)),
        qos_class: Some("BestEffort".into()),
        ..Default::default()
    });
    pod
}
