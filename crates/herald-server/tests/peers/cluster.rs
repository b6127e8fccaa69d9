//! The cluster the peer tests judge: kube-sim's `small` preset on loopback addresses, with the edge
//! cases the generator leaves out planted on top, and a herald serving jobs over it.

use std::time::Duration;

use herald_server::{Herald, ServeOptions, job_specs};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, LoadBalancerIngress, LoadBalancerStatus, Pod, PodCondition, PodIP,
    PodSpec, PodStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube_sim::generate::ClusterSpec;
use kube_sim::{Kind, Object, Sim, SimConfig, Write};
use serde_json::Value;

use super::Labels;
use super::compare::discovery_only;

/// The `small` preset with every address a loopback one, and more not-ready and pending pods so that
/// notReadyAddresses, `ready=false` endpoints and IP-less pods all occur.
pub fn loopback_spec() -> ClusterSpec {
    ClusterSpec {
        pod_cidr: "127.16.0.0/12".parse().expect("cidr"),
        node_cidr: "127.8.0.0/16".parse().expect("cidr"),
        service_cidr: "127.4.0.0/16".parse().expect("cidr"),
        not_ready_fraction: 0.1,
        pending_fraction: 0.05,
        ..ClusterSpec::small()
    }
}

pub async fn start_sim(spec: ClusterSpec, seed: u64) -> Sim {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    Sim::start(SimConfig {
        spec,
        seed,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts on loopback")
}

/// Starts herald over `sim` with the jobs of `jobs_yaml` and waits for its first complete sync.
pub async fn start_herald(sim: &Sim, jobs_yaml: &str) -> Herald {
    let cfg = herald_core::parse_config(jobs_yaml).expect("valid jobs");
    let specs = job_specs(&cfg, None).expect("valid job specs");
    let herald = Herald::start(
        specs,
        kube::Config::new(sim.url().parse().expect("kube-sim's url")),
        ServeOptions {
            monitors: cfg.monitors.clone(),
            istio: cfg.istio.clone(),
            ..ServeOptions::default()
        },
    )
    .await
    .expect("herald starts");
    tokio::time::timeout(Duration::from_secs(20), herald.ready())
        .await
        .expect("herald syncs with kube-sim within 20s");
    herald
}

pub fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// The pods (namespace, name) that ready endpoints of selector Services point at, in a stable order.
fn pods_behind_services(sim: &Sim) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for slice in sim.handle().objects_json(Kind::EndpointSlice) {
        for ep in slice["endpoints"].as_array().into_iter().flatten() {
            if s(ep, "/targetRef/kind") == "Pod"
                && ep.pointer("/conditions/ready").and_then(Value::as_bool) == Some(true)
            {
                let key = (
                    s(ep, "/targetRef/namespace").to_string(),
                    s(ep, "/targetRef/name").to_string(),
                );
                if !out.contains(&key) {
                    out.push(key);
                }
            }
        }
    }
    out.sort();
    out
}

fn pod(sim: &Sim, ns: &str, name: &str) -> Pod {
    let v = sim
        .handle()
        .objects_json(Kind::Pod)
        .into_iter()
        .find(|p| s(p, "/metadata/namespace") == ns && s(p, "/metadata/name") == name)
        .unwrap_or_else(|| panic!("pod {ns}/{name} exists"));
    serde_json::from_value(v).expect("kube-sim's pods decode")
}

/// What [`plant_edge_cases`] added, for the tests to check the peers saw it.
pub struct Planted {
    /// A pod behind a Service, marked terminating (`deletionTimestamp` set): its slice endpoints turn
    /// `terminating=true, ready=false`.
    pub terminating_pod: (String, String),
    /// A pod behind a Service given a native sidecar: a restartable init container with a port.
    pub sidecar_pod: (String, String),
    pub sidecar_port: i32,
    /// `default/external-name`, an ExternalName Service.
    pub external_name_service: String,
    /// `default/lb`, a LoadBalancer Service whose status lists an IP and a hostname.
    pub load_balancer_service: String,
    pub load_balancer_ip: String,
    /// `default/ipv6-probe`, a pod with an IPv6 address (`::1`: never dialed, and loopback anyway).
    pub ipv6_pod: String,
}

/// Adds what the generator does not make: a terminating pod behind a Service, a native sidecar init
/// container with a port, an ExternalName and a LoadBalancer Service, and a pod with an IPv6 address. The generator already has multi-container
/// pods, containers without ports, init containers, not-ready pods, headless Services, a Service
/// without a selector (`default/external-db`, hand-made Endpoints and an address without targetRef),
/// and Ingresses.
pub fn plant_edge_cases(sim: &Sim) -> Planted {
    let behind = pods_behind_services(sim);
    assert!(
        behind.len() >= 2,
        "kube-sim's cluster has at least two pods behind Services"
    );
    let terminating_pod = behind[0].clone();
    let sidecar_pod = behind[behind.len() / 2].clone();
    let sidecar_port = 9901;

    let mut terminating = pod(sim, &terminating_pod.0, &terminating_pod.1);
    terminating.metadata.deletion_timestamp =
        Some(Time("2026-01-01T00:00:00Z".parse().expect("timestamp")));
    let mut sidecar = pod(sim, &sidecar_pod.0, &sidecar_pod.1);
    let spec = sidecar.spec.as_mut().expect("pods have a spec");
    spec.init_containers
        .get_or_insert_default()
        .push(Container {
            name: "metrics-sidecar".into(),
            image: Some("registry.example.com/metrics-sidecar:1.0".into()),
            restart_policy: Some("Always".into()),
            ports: Some(vec![ContainerPort {
                name: Some("sidecar-metrics".into()),
                container_port: sidecar_port,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
    let external_name = Service {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some("external-name".into()),
            uid: Some("5d0b5f0e-0000-4000-8000-00000000e4a1".into()),
            labels: Some([("app".to_string(), "external-name".to_string())].into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ExternalName".into()),
            external_name: Some("db.example.com".into()),
            ports: Some(vec![ServicePort {
                name: Some("sql".into()),
                port: 5432,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            session_affinity: Some("None".into()),
            ..Default::default()
        }),
        status: None,
    };
    let load_balancer_ip = "127.4.255.2".to_string();
    let load_balancer = Service {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some("lb".into()),
            uid: Some("5d0b5f0e-0000-4000-8000-0000000001b0".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            cluster_ip: Some("127.4.255.1".into()),
            cluster_ips: Some(vec!["127.4.255.1".into()]),
            ports: Some(vec![ServicePort {
                name: Some("https".into()),
                port: 443,
                node_port: Some(30443),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            session_affinity: Some("None".into()),
            ..Default::default()
        }),
        status: Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![
                    LoadBalancerIngress {
                        ip: Some(load_balancer_ip.clone()),
                        ..Default::default()
                    },
                    LoadBalancerIngress {
                        hostname: Some("lb.example.com".into()),
                        ..Default::default()
                    },
                ]),
            }),
            conditions: None,
        }),
    };
    let node = sim
        .handle()
        .objects_json(Kind::Node)
        .into_iter()
        .next()
        .expect("kube-sim has nodes");
    let ipv6_pod = ipv6_pod(s(&node, "/metadata/name"), &node);
    sim.handle().apply(vec![
        Write::Put(Object::Pod(terminating)),
        Write::Put(Object::Pod(sidecar)),
        Write::Put(Object::Pod(ipv6_pod)),
        Write::Put(Object::Service(external_name)),
        Write::Put(Object::Service(load_balancer)),
    ]);
    Planted {
        terminating_pod,
        sidecar_pod,
        sidecar_port,
        external_name_service: "external-name".into(),
        load_balancer_service: "lb".into(),
        load_balancer_ip,
        ipv6_pod: "ipv6-probe".into(),
    }
}

/// A running pod on `node_name` whose only address is the IPv6 loopback: one container with a port,
/// one without.
fn ipv6_pod(node_name: &str, node: &Value) -> Pod {
    let host_ip = node["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| s(a, "/type") == "InternalIP")
        .map(|a| s(a, "/address").to_string());
    Pod {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some("ipv6-probe".into()),
            uid: Some("5d0b5f0e-0000-4000-8000-0000000006a6".into()),
            labels: Some([("app".to_string(), "ipv6-probe".to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node_name.into()),
            containers: vec![
                Container {
                    name: "app".into(),
                    image: Some("registry.example.com/ipv6-probe:1.0".into()),
                    ports: Some(vec![ContainerPort {
                        name: Some("http".into()),
                        container_port: 8080,
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                Container {
                    name: "idle".into(),
                    image: Some("registry.example.com/idle:1.0".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("::1".into()),
            pod_ips: Some(vec![PodIP { ip: "::1".into() }]),
            host_ip,
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// What herald serves for `job`, each target with its group's labels merged in (group labels lose to
/// target labels, as in Prometheus's scrape/target.go `targetsFromGroup`).
pub async fn served(http: &reqwest::Client, herald: &Herald, job: &str) -> Vec<Labels> {
    let url = format!("{}/sd/v1/{job}", herald.url());
    let groups: Vec<serde_json::Value> = serde_json::from_value(get_json(http, &url).await)
        .unwrap_or_else(|e| panic!("GET {url}: not HTTP SD JSON: {e}"));
    let mut out = Vec::new();
    for g in groups {
        let labels: Labels = serde_json::from_value(g["labels"].clone()).unwrap_or_default();
        for addr in g["targets"].as_array().into_iter().flatten() {
            let mut t = labels.clone();
            t.insert(
                "__address__".into(),
                addr.as_str().expect("targets are strings").into(),
            );
            out.push(discovery_only(&t));
        }
    }
    out.sort();
    out
}

/// `GET url` as JSON; panics naming the URL on an error status or a body that is not JSON.
pub async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    http.get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
}

/// `GET url` as text; panics naming the URL on an error status.
pub async fn get_text(http: &reqwest::Client, url: &str) -> String {
    http.get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// A Service of kube-sim's cluster for hand-written monitors to select (an `app` selector and a
/// named first port, outside kube-system): its namespace, `app`, first port's name and target port.
pub struct AppService {
    pub namespace: String,
    pub app: String,
    pub port: String,
    pub target_port: Value,
}

pub fn app_service(sim: &Sim) -> AppService {
    let svc = sim
        .handle()
        .objects_json(Kind::Service)
        .into_iter()
        .find(|s| {
            s.pointer("/spec/selector/app").is_some()
                && s.pointer("/spec/ports/0/name").is_some()
                && s.pointer("/metadata/namespace") != Some(&serde_json::json!("kube-system"))
        })
        .expect("kube-sim has a named-port Service with an app selector");
    let text = |p: &str| svc.pointer(p).and_then(Value::as_str).expect(p).to_string();
    AppService {
        namespace: text("/metadata/namespace"),
        app: text("/spec/selector/app"),
        port: text("/spec/ports/0/name"),
        target_port: svc["spec"]["ports"][0]["targetPort"].clone(),
    }
}

/// A `monitoring.coreos.com/v1` monitor of `kind`, labelled `team: herald-test`.
pub fn monitor(kind: Kind, ns: &str, name: &str, spec: Value) -> Object {
    Object::Custom(
        kind,
        serde_json::json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": kind.name(),
            "metadata": {"name": name, "namespace": ns, "labels": {"team": "herald-test"}},
            "spec": spec,
        }),
    )
}

/// The value of `series` (a metric name with its labels as herald writes them) in a `/metrics` text;
/// 0 when absent.
pub fn series_value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// The value of `series` (a metric name with its labels as herald writes them, e.g.
/// `herald_monitor_problems{served="false"}`) on herald's `/metrics`; `None` when absent.
pub async fn metric(http: &reqwest::Client, herald: &Herald, series: &str) -> Option<f64> {
    let text = http
        .get(format!("{}/metrics", herald.url()))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().expect("a number"))
    })
}
