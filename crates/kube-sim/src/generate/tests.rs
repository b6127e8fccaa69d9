//! Tests of the cluster generator: determinism, exact sizes, address hygiene and the features the
//! rest of herald's tests rely on.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::controllers::EndpointsControllers;
use crate::kind::{Kind, Write};

fn mid() -> ClusterSpec {
    ClusterSpec {
        nodes: 40,
        namespaces: 6,
        services: 60,
        pods: 900,
        pod_cidr: "10.20.0.0/16".parse().unwrap(),
        node_cidr: "192.168.5.0/24".parse().unwrap(),
        headless_fraction: 0.2,
        ..ClusterSpec::small()
    }
}

fn pods(c: &Cluster) -> Vec<&Pod> {
    c.objects
        .iter()
        .filter_map(|o| match o {
            Object::Pod(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn count(c: &Cluster, kind: Kind) -> usize {
    c.objects.iter().filter(|o| o.kind() == kind).count()
}

#[test]
fn the_same_seed_gives_the_same_cluster_and_another_seed_a_different_one() {
    for spec in [ClusterSpec::small(), mid()] {
        let a = generate(&spec, 7);
        let b = generate(&spec, 7);
        assert_eq!(a.objects, b.objects);
        assert_eq!(a.workloads, b.workloads);
        let c = generate(&spec, 8);
        assert_ne!(a.objects, c.objects);
    }
}

#[test]
fn requested_counts_are_exact_and_names_and_ips_unique_inside_their_cidrs() {
    for spec in [ClusterSpec::small(), mid()] {
        spec.validate().unwrap();
        let c = generate(&spec, 42);
        assert_eq!(count(&c, Kind::Node), spec.nodes);
        assert_eq!(count(&c, Kind::Pod), spec.pods);
        assert_eq!(count(&c, Kind::Namespace), spec.namespaces + 4);
        let app_deployments = c
            .workloads
            .iter()
            .filter(|w| {
                w.kind == WorkloadKind::Deployment
                    && !["kube-system", "istio-system", "monitoring", "default"]
                        .contains(&w.namespace.as_str())
            })
            .count();
        assert_eq!(app_deployments, spec.services);
        assert_eq!(
            c.workloads.iter().map(|w| w.pod_names.len()).sum::<usize>(),
            spec.pods
        );

        // Unique (kind, namespace, name).
        let mut keys = HashSet::new();
        for o in &c.objects {
            let j = o.to_json();
            let key = (
                o.kind(),
                j["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                j["metadata"]["name"].as_str().unwrap().to_string(),
            );
            assert!(keys.insert(key.clone()), "duplicate {key:?}");
            assert!(j["metadata"]["uid"].is_string(), "{key:?} has no uid");
        }

        let mut ips: HashSet<IpAddr> = HashSet::new();
        for p in pods(&c) {
            let status = p.status.as_ref().unwrap();
            if let Some(ip) = &status.pod_ip {
                let ip: IpAddr = ip.parse().unwrap();
                assert!(
                    spec.pod_cidr.contains(&ip),
                    "{ip} outside {}",
                    spec.pod_cidr
                );
                assert!(ips.insert(ip), "pod ip {ip} handed out twice");
                assert!(c.pod_ips.is_allocated(ip));
            } else {
                assert_eq!(status.phase.as_deref(), Some("Pending"));
            }
        }
        let mut node_ips = HashSet::new();
        for n in &c.nodes {
            assert!(spec.node_cidr.contains(&n.ip));
            assert!(node_ips.insert(n.ip));
        }
        // The controllers derive endpoints; only the selector-less Service has hand-made ones.
        assert_eq!(count(&c, Kind::Endpoints), 1);
        assert_eq!(count(&c, Kind::EndpointSlice), 1);
    }
}

#[test]
fn daemonsets_run_one_pod_per_node() {
    let c = generate(&mid(), 1);
    for ds in ["kube-proxy", "node-exporter"] {
        let w = c.workloads.iter().find(|w| w.name == ds).unwrap();
        assert_eq!(w.kind, WorkloadKind::DaemonSet);
        let nodes: HashSet<String> = pods(&c)
            .iter()
            .filter(|p| w.pod_names.contains(p.metadata.name.as_ref().unwrap()))
            .map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap())
            .collect();
        assert_eq!(nodes.len(), 40, "{ds}");
    }
}

#[test]
fn pods_mix_named_unnamed_and_portless_containers_init_containers_and_states() {
    let c = generate(&mid(), 3);
    let all = pods(&c);
    let containers = || {
        all.iter()
            .flat_map(|p| p.spec.as_ref().unwrap().containers.iter())
    };
    assert!(
        containers().any(|c| c.ports.is_none()),
        "a container without ports"
    );
    let ports = || containers().flat_map(|c| c.ports.iter().flatten());
    assert!(ports().any(|p| p.name.is_none()), "an unnamed port");
    assert!(ports().any(|p| p.name.is_some()), "a named port");
    assert!(
        all.iter()
            .any(|p| p.spec.as_ref().unwrap().init_containers.is_some())
    );
    assert!(
        all.iter()
            .any(|p| p.spec.as_ref().unwrap().containers.len() >= 3)
    );
    let ready = |p: &&&Pod| {
        p.status
            .as_ref()
            .unwrap()
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    };
    assert!(all.iter().filter(ready).count() > all.len() * 9 / 10);
    assert!(all.iter().any(|p| !ready(&p)));
    let annotated = all
        .iter()
        .filter(|p| {
            p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("prometheus.io/scrape"))
        })
        .count();
    assert!(annotated > 0);
}

#[test]
fn istio_injected_pods_look_like_the_injector_made_them() {
    let spec = ClusterSpec {
        annotated_fraction: 1.0,
        istio_fraction: 1.0,
        ..mid()
    };
    let c = generate(&spec, 5);
    let injected: Vec<&Pod> = pods(&c)
        .into_iter()
        .filter(|p| {
            p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("sidecar.istio.io/status"))
        })
        .collect();
    assert!(!injected.is_empty());
    for p in injected {
        let a = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(a["prometheus.io/port"], "15020");
        assert_eq!(a["prometheus.io/path"], "/stats/prometheus");
        assert_eq!(a["prometheus.io/scrape"], "true");
        let spec = p.spec.as_ref().unwrap();
        let proxy = spec
            .containers
            .iter()
            .find(|c| c.name == "istio-proxy")
            .unwrap();
        assert_eq!(
            proxy.image.as_deref(),
            Some("docker.io/istio/proxyv2:1.22.0")
        );
        let ports: Vec<(Option<&str>, i32)> = proxy
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.as_deref(), p.container_port))
            .collect();
        assert_eq!(ports, [(Some("http-envoy-prom"), 15090), (None, 15021)]);
        // Every app here was annotated, so the originals travel in the proxy's env.
        let env = proxy
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "ISTIO_PROMETHEUS_ANNOTATIONS")
            .unwrap();
        let orig: serde_json::Value = serde_json::from_str(env.value.as_deref().unwrap()).unwrap();
        assert_eq!(orig["scrape"], "true");
        assert_ne!(orig["port"], "15020");
        assert_eq!(spec.init_containers.as_ref().unwrap()[0].name, "istio-init");
        assert_eq!(
            p.metadata.labels.as_ref().unwrap()["security.istio.io/tlsMode"],
            "istio"
        );
    }
    let istiod = pods(&c)
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some("istio-system"))
        .count();
    assert_eq!(istiod, 2);
    assert!(c.objects.iter().any(|o| matches!(o, Object::Namespace(n)
        if n.metadata.labels.as_ref().unwrap().get("istio-injection").map(String::as_str) == Some("enabled"))));
}

#[test]
fn operator_objects_config_map_and_ingresses_are_present() {
    let c = generate(&mid(), 9);
    let prom = c
        .objects
        .iter()
        .find_map(|o| match o {
            Object::Custom(Kind::Prometheus, v) => Some(v),
            _ => None,
        })
        .unwrap();
    assert_eq!(prom["metadata"]["namespace"], "monitoring");
    assert_eq!(prom["spec"]["serviceDiscoveryRole"], "Endpoints");
    assert!(count(&c, Kind::ServiceMonitor) > 3);
    assert!(count(&c, Kind::PodMonitor) >= 1);
    assert!(count(&c, Kind::Ingress) >= 1);
    let cm = c
        .objects
        .iter()
        .find_map(|o| match o {
            Object::ConfigMap(cm) if cm.metadata.name.as_deref() == Some("kube-proxy") => Some(cm),
            _ => None,
        })
        .unwrap();
    let conf = &cm.data.as_ref().unwrap()["config.conf"];
    let parsed: serde_yaml::Value = serde_yaml::from_str(conf).unwrap();
    assert_eq!(parsed["kind"], "KubeProxyConfiguration");
    assert!(["iptables", ""].contains(&parsed["mode"].as_str().unwrap()));
    let headless = c
        .objects
        .iter()
        .filter(|o| matches!(o, Object::Service(s) if s.spec.as_ref().unwrap().cluster_ip.as_deref() == Some("None")))
        .count();
    assert!(
        headless >= 2,
        "node-exporter plus some application Services"
    );
    let selectorless = c
        .objects
        .iter()
        .filter(|o| matches!(o, Object::Service(s) if s.spec.as_ref().unwrap().selector.is_none()))
        .count();
    assert_eq!(selectorless, 1);
}

#[test]
fn loopback_cidrs_share_one_allocator_and_skip_127_0_0_1() {
    let spec = ClusterSpec {
        pod_cidr: "127.0.0.0/8".parse().unwrap(),
        node_cidr: "127.0.0.0/8".parse().unwrap(),
        ..ClusterSpec::small()
    };
    spec.validate().unwrap();
    let c = generate(&spec, 1);
    let mut seen = HashSet::new();
    for n in &c.nodes {
        assert!(seen.insert(n.ip));
    }
    for p in pods(&c) {
        if let Some(ip) = &p.status.as_ref().unwrap().pod_ip {
            assert!(
                seen.insert(ip.parse().unwrap()),
                "{ip} shared by a node and a pod"
            );
        }
    }
    assert!(!seen.contains(&"127.0.0.1".parse::<IpAddr>().unwrap()));
    assert!(!seen.contains(&"127.0.0.0".parse::<IpAddr>().unwrap()));
}

#[test]
fn replicas_are_skewed_but_sum_exactly() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let parts = skewed_split(&mut rng, 1000, 14_000);
    assert_eq!(parts.iter().sum::<usize>(), 14_000);
    assert!(parts.iter().all(|&p| p >= 1));
    let max = *parts.iter().max().unwrap();
    let mut sorted = parts.clone();
    sorted.sort();
    let median = sorted[500];
    assert!(max > 10 * median, "max {max} median {median}");
    assert_eq!(skewed_split(&mut rng, 5, 5), vec![1; 5]);
}

#[test]
fn invalid_specs_are_refused_by_validate() {
    let too_few = ClusterSpec {
        pods: 10,
        ..ClusterSpec::small()
    };
    assert!(matches!(
        too_few.validate(),
        Err(SpecError::TooFewPods { .. })
    ));
    let tiny = ClusterSpec {
        pod_cidr: "10.0.0.0/28".parse().unwrap(),
        ..ClusterSpec::small()
    };
    assert!(matches!(
        tiny.validate(),
        Err(SpecError::CidrTooSmall {
            field: "pod_cidr",
            ..
        })
    ));
    // Generation still succeeds: pods past the end of the cidr stay Pending.
    let c = generate(&tiny, 1);
    assert_eq!(count(&c, Kind::Pod), 200);
    assert!(
        pods(&c)
            .iter()
            .filter(|p| p.status.as_ref().unwrap().pod_ip.is_some())
            .count()
            <= 14
    );
    assert!(ClusterSpec::k8s_limits().validate().is_ok());
}

#[test]
fn over_a_thousand_nodes_truncate_node_exporter_endpoints_but_not_its_slices() {
    let spec = ClusterSpec {
        nodes: 1100,
        namespaces: 2,
        services: 4,
        pods: 2 * 1100 + 4 + 40,
        ..ClusterSpec::small()
    };
    let c = generate(&spec, 11);
    let mut ctl = EndpointsControllers::new();
    let writes = ctl.on_puts(c.objects.iter());
    let mut slices = 0;
    let mut slice_endpoints = 0;
    let mut endpoints = None;
    for w in &writes {
        if let Write::Put(o) = w {
            match o {
                Object::EndpointSlice(s)
                    if s.metadata.labels.as_ref().unwrap()["kubernetes.io/service-name"]
                        == "node-exporter" =>
                {
                    slices += 1;
                    slice_endpoints += s.endpoints.len();
                }
                Object::Endpoints(e) if e.metadata.name.as_deref() == Some("node-exporter") => {
                    endpoints = Some(e.clone())
                }
                _ => {}
            }
        }
    }
    assert_eq!(slices, 11);
    assert_eq!(slice_endpoints, 1100);
    let e = endpoints.unwrap();
    let addrs: usize = e
        .subsets
        .iter()
        .flatten()
        .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
        .sum();
    assert_eq!(addrs, 1000);
    assert_eq!(
        e.metadata.annotations.unwrap(),
        BTreeMap::from([(
            "endpoints.kubernetes.io/over-capacity".to_string(),
            "truncated".to_string()
        )])
    );
}

#[test]
fn degenerate_specs_generate_without_panicking() {
    let spec = ClusterSpec {
        nodes: 0,
        namespaces: 0,
        services: 0,
        pods: 0,
        zones: 0,
        istio_fraction: f64::NAN,
        annotated_fraction: 7.0,
        node_cidr: "192.168.0.0/30".parse().unwrap(),
        pod_cidr: "127.0.0.0/31".parse().unwrap(),
        ..ClusterSpec::small()
    };
    assert!(spec.validate().is_err());
    let c = generate(&spec, 1);
    assert_eq!(count(&c, Kind::Node), 1);
    assert!(
        pods(&c)
            .iter()
            .all(|p| p.status.as_ref().unwrap().pod_ip.is_none())
    );
    let mut churn = crate::churn::Churn::new(1, &c);
    assert!(!churn.next_events(20).is_empty());
}

#[test]
fn an_ipv6_pod_cidr_gives_ipv6_services_and_slices() {
    let spec = ClusterSpec {
        pod_cidr: "fd00:1::/64".parse().unwrap(),
        node_cidr: "fd00:2::/112".parse().unwrap(),
        ..ClusterSpec::small()
    };
    let c = generate(&spec, 2);
    let mut ctl = EndpointsControllers::new();
    let writes = ctl.on_puts(c.objects.iter());
    let mut v6_endpoints = 0;
    for w in &writes {
        if let Write::Put(Object::EndpointSlice(s)) = w {
            assert_eq!(s.address_type, "IPv6");
            v6_endpoints += s.endpoints.len();
        }
    }
    assert!(v6_endpoints > 150, "{v6_endpoints}");
    for o in &c.objects {
        if let Object::Service(s) = o {
            let spec = s.spec.as_ref().unwrap();
            assert_eq!(spec.ip_families.as_deref(), Some(&["IPv6".to_string()][..]));
            if let Some(ip) = spec.cluster_ip.as_deref().filter(|ip| *ip != "None") {
                assert!(ip.parse::<std::net::Ipv6Addr>().is_ok(), "{ip}");
            }
        }
    }
}

#[test]
fn more_nodes_or_services_on_a_preset_scale_its_pods_instead_of_failing() {
    let big = ClusterSpec::small().resized(Some(1200), None, None);
    assert_eq!(big.nodes, 1200);
    big.validate()
        .expect("1,200 nodes on the small preset generate");
    assert!(big.pods >= 2 * 1200 + 20, "{} pods", big.pods);
    let many = ClusterSpec::small().resized(None, Some(500), None);
    many.validate()
        .expect("500 Services on the small preset generate");
    assert!(
        many.pods > 500 * 8,
        "application pods per Service are kept: {}",
        many.pods
    );
    let same = ClusterSpec::small().resized(None, None, None);
    assert_eq!(same.pods, ClusterSpec::small().pods);
    let asked = ClusterSpec::small().resized(Some(1200), None, Some(200));
    assert_eq!(asked.pods, 200, "an explicit pod count is kept");
    assert!(asked.validate().is_err());
}
