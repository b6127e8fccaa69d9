//! The generated cluster's Services and everything around the workloads: prometheus-operator
//! objects (ServiceMonitors, PodMonitors, a Prometheus), the kube-proxy ConfigMap, Ingresses and a
//! selector-less Service with hand-made Endpoints.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    ConfigMap, DaemonEndpoint, EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Namespace,
    NamespaceSpec, NamespaceStatus, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeSpec, NodeStatus, NodeSystemInfo, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort, ServiceCIDR,
    ServiceCIDRSpec, ServiceCIDRStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::pods::{Target, VARIANTS};
use super::{ClusterSpec, Plan, REGION, random_suffix, random_uid};
use crate::kind::{Kind, Object};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn svc_port(name: Option<&str>, port: i32, target: IntOrString, protocol: &str) -> ServicePort {
    ServicePort {
        name: name.map(str::to_string),
        port,
        target_port: Some(target),
        protocol: Some(protocol.into()),
        ..Default::default()
    }
}

/// A Service the way the apiserver stores it: cluster IP (or `None` for headless) and the IP
/// family fields defaulted.
#[allow(clippy::too_many_arguments)]
fn service(
    ns: &str,
    name: &str,
    labels: BTreeMap<String, String>,
    annotations: Option<BTreeMap<String, String>>,
    selector: Option<BTreeMap<String, String>>,
    ports: Vec<ServicePort>,
    cluster_ip: Option<IpAddr>,
    headless: bool,
    family: &str,
) -> Service {
    let ip = if headless {
        Some("None".to_string())
    } else {
        cluster_ip.map(|i| i.to_string())
    };
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(labels),
            annotations,
            uid: None,
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector,
            ports: Some(ports),
            cluster_ip: ip.clone(),
            cluster_ips: ip.map(|i| vec![i]),
            type_: Some("ClusterIP".into()),
            ip_families: Some(vec![family.into()]),
            ip_family_policy: Some("SingleStack".into()),
            session_affinity: Some("None".into()),
            internal_traffic_policy: Some("Cluster".into()),
            ..Default::default()
        }),
        status: None,
    }
}

/// An application Deployment's Service: selects `app=<name>`, ports as the variant says.
pub(crate) fn app_service(
    ns: &str,
    name: &str,
    variant: usize,
    ip: Option<IpAddr>,
    headless: bool,
    family: &str,
) -> Service {
    let ports = VARIANTS[variant]
        .service_ports
        .iter()
        .map(|(n, p, t)| {
            let target = match t {
                Target::Number(n) => IntOrString::Int(*n),
                Target::Named(s) => IntOrString::String((*s).to_string()),
            };
            svc_port(*n, *p, target, "TCP")
        })
        .collect();
    service(
        ns,
        name,
        map(&[("app", name), ("app.kubernetes.io/name", name)]),
        None,
        Some(map(&[("app", name)])),
        ports,
        ip,
        headless,
        family,
    )
}

/// monitoring/node-exporter, headless as kube-prometheus ships it.
pub(crate) fn node_exporter_service(family: &str) -> Service {
    let labels = map(&[
        ("app.kubernetes.io/name", "node-exporter"),
        ("app.kubernetes.io/component", "exporter"),
        ("app.kubernetes.io/part-of", "kube-prometheus"),
    ]);
    service(
        "monitoring",
        "node-exporter",
        labels.clone(),
        None,
        Some(labels),
        vec![svc_port(
            Some("metrics"),
            9100,
            IntOrString::String("metrics".into()),
            "TCP",
        )],
        None,
        true,
        family,
    )
}

/// kube-system/kube-dns, as kubeadm creates it (with the prometheus.io annotations on the Service).
pub(crate) fn kube_dns_service(ip: Option<IpAddr>, family: &str) -> Service {
    service(
        "kube-system",
        "kube-dns",
        map(&[
            ("k8s-app", "kube-dns"),
            ("kubernetes.io/cluster-service", "true"),
            ("kubernetes.io/name", "CoreDNS"),
        ]),
        Some(map(&[
            ("prometheus.io/port", "9153"),
            ("prometheus.io/scrape", "true"),
        ])),
        Some(map(&[("k8s-app", "kube-dns")])),
        vec![
            svc_port(Some("dns"), 53, IntOrString::Int(53), "UDP"),
            svc_port(Some("dns-tcp"), 53, IntOrString::Int(53), "TCP"),
            svc_port(Some("metrics"), 9153, IntOrString::Int(9153), "TCP"),
        ],
        ip,
        false,
        family,
    )
}

/// istio-system/istiod.
pub(crate) fn istiod_service(ip: Option<IpAddr>, family: &str) -> Service {
    service(
        "istio-system",
        "istiod",
        map(&[
            ("app", "istiod"),
            ("istio", "pilot"),
            ("istio.io/rev", "default"),
        ]),
        None,
        Some(map(&[("app", "istiod"), ("istio", "pilot")])),
        vec![
            svc_port(Some("grpc-xds"), 15010, IntOrString::Int(15010), "TCP"),
            svc_port(Some("https-dns"), 15012, IntOrString::Int(15012), "TCP"),
            svc_port(Some("https-webhook"), 443, IntOrString::Int(15017), "TCP"),
            svc_port(
                Some("http-monitoring"),
                15014,
                IntOrString::Int(15014),
                "TCP",
            ),
        ],
        ip,
        false,
        family,
    )
}

fn custom(
    kind: Kind,
    ns: &str,
    name: &str,
    labels: serde_json::Value,
    spec: serde_json::Value,
) -> Object {
    Object::Custom(
        kind,
        json!({
            "apiVersion": kind.api_version(),
            "kind": kind.name(),
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": spec,
        }),
    )
}

/// ServiceMonitors and PodMonitors for a share of the application workloads, the system ones
/// (node-exporter, istiod, Istio's Envoy-stats PodMonitor), and the Prometheus that selects them.
pub(crate) fn monitoring_objects(
    rng: &mut ChaCha8Rng,
    spec: &ClusterSpec,
    plans: &[Plan],
    out: &mut Vec<Object>,
) {
    let release = json!({"release": "kube-prometheus-stack"});
    for plan in plans {
        let Some(variant) = plan.variant else {
            continue;
        };
        if !rng.random_bool(spec.monitored_fraction) {
            continue;
        }
        let v = &VARIANTS[variant];
        let selector = json!({"matchLabels": {"app": plan.name}});
        // A worker's metrics are scraped per pod half of the time, as teams often do.
        if v.portless_sidecar && rng.random_bool(0.5) {
            let endpoint = json!({"port": v.metrics.0.unwrap_or("metrics"), "path": "/metrics", "interval": "30s"});
            out.push(custom(
                Kind::PodMonitor,
                &plan.namespace,
                &plan.name,
                release.clone(),
                json!({"selector": selector, "podMetricsEndpoints": [endpoint]}),
            ));
            continue;
        }
        let endpoint = match v.metrics.0 {
            // A Service port named like the metrics container port.
            Some(name) => json!({"port": name, "path": "/metrics", "interval": "30s"}),
            None => json!({"targetPort": v.metrics.1, "path": "/metrics", "interval": "30s"}),
        };
        out.push(custom(
            Kind::ServiceMonitor,
            &plan.namespace,
            &plan.name,
            release.clone(),
            json!({"selector": selector, "endpoints": [endpoint]}),
        ));
    }
    out.push(custom(
        Kind::ServiceMonitor,
        "monitoring",
        "node-exporter",
        release.clone(),
        json!({
            "jobLabel": "app.kubernetes.io/name",
            "selector": {"matchLabels": {"app.kubernetes.io/name": "node-exporter"}},
            "endpoints": [{"port": "metrics", "interval": "15s", "relabelings": [
                {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"}
            ]}],
        }),
    ));
    out.push(custom(
        Kind::ServiceMonitor,
        "istio-system",
        "istio-component-monitor",
        json!({"monitoring": "istio-components", "release": "istio"}),
        json!({
            "jobLabel": "istio",
            "targetLabels": ["app"],
            "selector": {"matchExpressions": [{"key": "istio", "operator": "In", "values": ["pilot"]}]},
            "namespaceSelector": {"any": true},
            "endpoints": [{"port": "http-monitoring", "interval": "15s"}],
        }),
    ));
    // Istio's sample PodMonitor for Envoy stats: every pod with an istio-proxy container, its
    // address rewritten to the merged-metrics port from the prometheus.io/port annotation.
    out.push(custom(
        Kind::PodMonitor,
        "istio-system",
        "envoy-stats-monitor",
        json!({"monitoring": "istio-proxies", "release": "istio"}),
        json!({
            "selector": {"matchExpressions": [{"key": "istio-prometheus-ignore", "operator": "DoesNotExist"}]},
            "namespaceSelector": {"any": true},
            "jobLabel": "envoy-stats",
            "podMetricsEndpoints": [{
                "path": "/stats/prometheus",
                "interval": "15s",
                "relabelings": [
                    {"action": "keep", "sourceLabels": ["__meta_kubernetes_pod_container_name"], "regex": "istio-proxy"},
                    {"action": "keep", "sourceLabels": ["__meta_kubernetes_pod_annotationpresent_prometheus_io_scrape"]},
                    {"action": "replace", "regex": "([^:]+)(?::\\d+)?;(\\d+)", "replacement": "$1:$2",
                     "sourceLabels": ["__address__", "__meta_kubernetes_pod_annotation_prometheus_io_port"],
                     "targetLabel": "__address__"},
                ],
            }],
        }),
    ));
    // The operator's default role is Endpoints — the case an audit flags on clusters over 1000 nodes.
    out.push(custom(
        Kind::Prometheus,
        "monitoring",
        "k8s",
        json!({"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/part-of": "kube-prometheus"}),
        json!({
            "replicas": 2,
            "version": "v2.53.0",
            "serviceAccountName": "prometheus-k8s",
            "serviceDiscoveryRole": "Endpoints",
            "serviceMonitorSelector": {},
            "serviceMonitorNamespaceSelector": {},
            "podMonitorSelector": {},
            "podMonitorNamespaceSelector": {},
            "scrapeInterval": "30s",
        }),
    ));
}

/// kube-system/kube-proxy as kubeadm writes it; `mode` is "iptables" or "" (which also means
/// iptables on Linux).
pub(crate) fn kube_proxy_config_map(
    rng: &mut ChaCha8Rng,
    spec: &ClusterSpec,
    out: &mut Vec<Object>,
) {
    let mode = if rng.random_bool(0.5) { "iptables" } else { "" };
    let config = format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n\
         bindAddress: 0.0.0.0\n\
         clientConnection:\n  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\n\
         clusterCIDR: {cidr}\n\
         conntrack:\n  maxPerCore: null\n\
         iptables:\n  masqueradeAll: false\n  minSyncPeriod: 1s\n  syncPeriod: 30s\n\
         ipvs:\n  scheduler: \"\"\n\
         kind: KubeProxyConfiguration\n\
         metricsBindAddress: 0.0.0.0:10249\n\
         mode: \"{mode}\"\n",
        cidr = spec.pod_cidr,
    );
    let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt\n    server: https://control-plane.internal:6443\n  name: default\ncontexts:\n- context:\n    cluster: default\n    namespace: default\n    user: default\n  name: default\ncurrent-context: default\nusers:\n- name: default\n  user:\n    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n";
    out.push(Object::ConfigMap(ConfigMap {
        metadata: ObjectMeta {
            name: Some("kube-proxy".into()),
            namespace: Some("kube-system".into()),
            labels: Some(map(&[("app", "kube-proxy")])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("config.conf".to_string(), config),
            ("kubeconfig.conf".to_string(), kubeconfig.to_string()),
        ])),
        ..Default::default()
    }));
}

/// Ingresses in front of a share of the HTTP-serving application Services.
pub(crate) fn ingresses(
    rng: &mut ChaCha8Rng,
    spec: &ClusterSpec,
    plans: &[Plan],
    out: &mut Vec<Object>,
) {
    for plan in plans {
        let port = match plan.variant {
            Some(0) => ServiceBackendPort {
                name: Some("http".into()),
                number: None,
            },
            Some(1) => ServiceBackendPort {
                name: None,
                number: Some(80),
            },
            _ => continue,
        };
        if !rng.random_bool(spec.ingress_fraction) {
            continue;
        }
        let host = format!("{}.{}.example.com", plan.name, plan.namespace);
        let tls = rng.random_bool(0.5).then(|| {
            vec![IngressTLS {
                hosts: Some(vec![host.clone()]),
                secret_name: Some(format!("{}-tls", plan.name)),
            }]
        });
        out.push(Object::Ingress(Ingress {
            metadata: ObjectMeta {
                name: Some(plan.name.clone()),
                namespace: Some(plan.namespace.clone()),
                labels: Some(map(&[("app", &plan.name)])),
                ..Default::default()
            },
            spec: Some(IngressSpec {
                ingress_class_name: Some("nginx".into()),
                rules: Some(vec![IngressRule {
                    host: Some(host),
                    http: Some(HTTPIngressRuleValue {
                        paths: vec![HTTPIngressPath {
                            path: Some("/".into()),
                            path_type: "Prefix".into(),
                            backend: IngressBackend {
                                service: Some(IngressServiceBackend {
                                    name: plan.name.clone(),
                                    port: Some(port),
                                }),
                                resource: None,
                            },
                        }],
                    }),
                }]),
                tls,
                default_backend: None,
            }),
            status: None,
        }));
    }
}

/// default/external-db: a Service without a selector, its hand-made Endpoints, and the slice
/// the EndpointSlice mirroring controller derives from them (kubernetes/kubernetes
/// pkg/controller/endpointslicemirroring).
pub(crate) fn external_service(
    rng: &mut ChaCha8Rng,
    endpoint_ip: Option<IpAddr>,
    cluster_ip: Option<IpAddr>,
    family: &str,
    out: &mut Vec<Object>,
) {
    let labels = map(&[("app", "external-db")]);
    let mut svc = service(
        "default",
        "external-db",
        labels.clone(),
        None,
        None,
        vec![svc_port(
            Some("postgres"),
            5432,
            IntOrString::Int(5432),
            "TCP",
        )],
        cluster_ip,
        false,
        family,
    );
    svc.metadata.uid = Some(random_uid(rng));
    out.push(Object::Service(svc));
    let Some(ip) = endpoint_ip else {
        return;
    };
    out.push(Object::Endpoints(Endpoints {
        metadata: ObjectMeta {
            name: Some("external-db".into()),
            namespace: Some("default".into()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: ip.to_string(),
                ..Default::default()
            }]),
            not_ready_addresses: None,
            ports: Some(vec![EndpointPort {
                name: Some("postgres".into()),
                port: 5432,
                protocol: Some("TCP".into()),
                app_protocol: None,
            }]),
        }]),
    }));
    let mut slice_labels = labels;
    slice_labels.insert("kubernetes.io/service-name".into(), "external-db".into());
    slice_labels.insert(
        "endpointslice.kubernetes.io/managed-by".into(),
        "endpointslicemirroring-controller.k8s.io".into(),
    );
    out.push(Object::EndpointSlice(EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("external-db-{}", random_suffix(rng, 5))),
            generate_name: Some("external-db-".into()),
            namespace: Some("default".into()),
            labels: Some(slice_labels),
            ..Default::default()
        },
        address_type: if ip.is_ipv6() { "IPv6" } else { "IPv4" }.into(),
        endpoints: vec![Endpoint {
            addresses: vec![ip.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: None,
                terminating: None,
            }),
            ..Default::default()
        }],
        ports: Some(vec![SlicePort {
            name: Some("postgres".into()),
            port: Some(5432),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
    }));
}

/// A Namespace, labelled as the apiserver labels it (and for Istio injection when asked).
pub(crate) fn namespace(name: &str, istio: bool) -> Object {
    let mut labels = std::collections::BTreeMap::from([(
        "kubernetes.io/metadata.name".to_string(),
        name.to_string(),
    )]);
    if istio {
        labels.insert("istio-injection".into(), "enabled".into());
    }
    Object::Namespace(Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(NamespaceSpec {
            finalizers: Some(vec!["kubernetes".into()]),
        }),
        status: Some(NamespaceStatus {
            phase: Some("Active".into()),
            ..Default::default()
        }),
    })
}

/// A Ready node with its zone labels, addresses and kubelet port.
pub(crate) fn node(name: &str, zone: &str, ip: IpAddr, boot_id: &str) -> Node {
    let labels = [
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("node.kubernetes.io/instance-type", "m6i.2xlarge"),
        ("topology.kubernetes.io/zone", zone),
        ("topology.kubernetes.io/region", REGION),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let resources = |pods: &str| {
        Some(
            [("cpu", "8"), ("memory", "32386524Ki"), ("pods", pods)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        )
    };
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("aws:///{zone}/i-{}", &boot_id[..8])),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.to_string(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: name.into(),
                },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
            }),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                message: Some("kubelet is posting ready status".into()),
                ..Default::default()
            }]),
            capacity: resources("110"),
            allocatable: resources("110"),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".into(),
                boot_id: boot_id.into(),
                container_runtime_version: "containerd://1.7.27".into(),
                kernel_version: "6.1.0-28-cloud-amd64".into(),
                kube_proxy_version: String::new(),
                kubelet_version: "v1.33.1".into(),
                machine_id: boot_id.replace('-', ""),
                operating_system: "linux".into(),
                os_image: "Debian GNU/Linux 12 (bookworm)".into(),
                system_uuid: boot_id.into(),
                swap: None,
            }),
            ..Default::default()
        }),
    }
}

/// The default ServiceCIDR `kubernetes` the apiserver creates from its `--service-cluster-ip-range`
/// and marks Ready (kubernetes pkg/controlplane/controller/defaultservicecidr, v1.37.2), with the
/// finalizer the ServiceCIDR controller adds.
pub(crate) fn service_cidr(cidr: ipnet::IpNet) -> Object {
    Object::ServiceCidr(ServiceCIDR {
        metadata: ObjectMeta {
            name: Some("kubernetes".into()),
            finalizers: Some(vec!["networking.k8s.io/service-cidr-finalizer".into()]),
            ..Default::default()
        },
        spec: Some(ServiceCIDRSpec {
            cidrs: Some(vec![cidr.to_string()]),
        }),
        status: Some(ServiceCIDRStatus {
            conditions: Some(vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: String::new(),
                message: "Kubernetes default Service CIDR is ready".into(),
                last_transition_time: Time(
                    k8s_openapi::jiff::Timestamp::from_second(1_767_225_600)
                        .expect("a valid timestamp"),
                ),
                observed_generation: None,
            }]),
        }),
    })
}
