//! `herald audit` at scale, run as a person runs it: the built binary audits a generated dump of
//! over 20,000 objects with `--output json --fix DIR`, and its peak memory, read with
//! getrusage(RUSAGE_CHILDREN) once it is reaped, stays within a bound that the streaming design
//! meets and the previous design (the whole document as a value tree, copied, then every object
//! decoded into full k8s-openapi types) exceeds several times over.
//!
//! NB: `ru_maxrss` of a child counts the parent's resident set at the moment it execs (Linux
//! records the replaced address space's high-water mark), so this test writes the dump object by
//! object and keeps its own memory small; and it holds one test only, since RUSAGE_CHILDREN gives
//! the largest peak among every child this process has reaped.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use nix::sys::resource::{UsageWho, getrusage};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_herald");

/// Peak RSS allowed for the audit of the dump below, in KiB. Measured on this dump (25,041
/// objects, 54 MB), `herald audit --from dump.json --output json --fix DIR`, median of 3:
/// - before the streaming load (5f6b608, release build; debug builds allocate the same):
///   1,296,528 KiB;
/// - with it: 116,576 KiB (debug build, as this test runs it); release: 104,156 KiB.
///
/// The bound leaves the streaming design twice its need and fails the old one by 5×.
const PEAK_RSS_BOUND_KIB: i64 = 256 * 1024;

const NAMESPACES: usize = 20;
const SERVICES: usize = 1_200;
const PODS_PER_SERVICE: usize = 17;
const NODES: usize = 1_000;

fn ip(i: usize) -> String {
    format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

/// A pod as a kubelet reports it: containers with ports, env, probes and resources, an Istio
/// sidecar on every other Service's pods, status with conditions and container statuses.
fn pod(ns: &str, svc: &str, i: usize, p: usize, sidecar: bool) -> Value {
    let name = format!("{svc}-7d9f8b6c5-{p:05}");
    let mut containers = vec![json!({
        "name": "app", "image": format!("registry.example.com/{ns}/{svc}:1.4.{i}"),
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
        "env": [{"name": "SERVICE", "value": svc}, {"name": "NAMESPACE", "value": ns},
                {"name": "LOG_LEVEL", "value": "info"}, {"name": "GOMAXPROCS", "value": "2"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}})];
    if sidecar {
        containers.push(json!({
            "name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.22.3",
            "ports": [{"name": "http-envoy-prom", "containerPort": 15090, "protocol": "TCP"}],
            "env": [{"name": "ISTIO_META_WORKLOAD_NAME", "value": svc},
                    {"name": "ISTIO_PROMETHEUS_ANNOTATIONS",
                     "value": "{\"scrape\":\"true\",\"port\":\"9090\",\"path\":\"/metrics\"}"}]}));
    }
    let conditions: Vec<Value> = ["Initialized", "Ready", "ContainersReady", "PodScheduled"]
        .iter()
        .map(|t| json!({"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("00000000-0000-4000-8000-{p:012}"),
            "resourceVersion": (1000 + p).to_string(), "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": svc, "pod-template-hash": "7d9f8b6c5", "version": "v1"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{svc}-7d9f8b6c5"),
                "uid": "00000000-0000-4000-8000-00000000aaaa", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"nodeName": format!("node-{:04}", p % NODES), "containers": containers,
            "serviceAccountName": "default", "restartPolicy": "Always"},
        "status": {"phase": "Running", "podIP": ip(p), "podIPs": [{"ip": ip(p)}],
            "hostIP": ip(1_000_000 + p % NODES), "startTime": "2026-01-01T00:00:05Z",
            "conditions": conditions,
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0,
                "image": format!("registry.example.com/{ns}/{svc}:1.4.{i}"),
                "imageID": format!("registry.example.com/{ns}/{svc}@sha256:{:064x}", i),
                "containerID": format!("containerd://{p:064x}"),
                "state": {"running": {"startedAt": "2026-01-01T00:00:06Z"}}}]}})
}

/// Writes the dump as one JSON List, object by object; returns its object count.
fn write_dump(path: &Path) -> usize {
    let mut out = BufWriter::new(std::fs::File::create(path).expect("create the dump"));
    let mut n = 0;
    let mut item = |out: &mut BufWriter<std::fs::File>, v: Value| {
        if n > 0 {
            out.write_all(b",\n").expect("write");
        }
        serde_json::to_writer(&mut *out, &v).expect("write");
        n += 1;
    };
    out.write_all(br#"{"apiVersion": "v1", "kind": "List", "items": ["#)
        .expect("write");
    item(
        &mut out,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "data": {"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n"}}),
    );
    for node in 0..NODES {
        item(
            &mut out,
            json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{node:04}"), "labels": {"kubernetes.io/os": "linux",
                "topology.kubernetes.io/zone": format!("zone-{}", node % 3)}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip(1_000_000 + node)}],
                "nodeInfo": {"kubeletVersion": "v1.31.4", "kubeProxyVersion": "", "kernelVersion": "6.1.0-28-amd64",
                    "osImage": "Debian GNU/Linux 12", "containerRuntimeVersion": "containerd://1.7.27",
                    "architecture": "amd64", "operatingSystem": "linux", "bootID": "", "machineID": "", "systemUUID": ""},
                "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}),
        );
    }
    for ns_i in 0..NAMESPACES {
        let ns = format!("team-{ns_i:02}");
        item(
            &mut out,
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}}),
        );
        item(
            &mut out,
            json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "apps", "namespace": ns},
            "spec": {"selector": {"matchLabels": {"monitored": "true"}}, "endpoints": [{"port": "metrics"}]}}),
        );
    }
    let mut p = 0;
    for i in 0..SERVICES {
        let ns = format!("team-{:02}", i % NAMESPACES);
        let svc = format!("svc-{i:04}");
        item(
            &mut out,
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": svc, "namespace": ns, "labels": {"app": svc, "monitored": "true"}},
            "spec": {"type": "ClusterIP", "clusterIP": ip(2_000_000 + i), "selector": {"app": svc},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                          {"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"}]}}),
        );
        let pods: Vec<usize> = (p..p + PODS_PER_SERVICE).collect();
        item(
            &mut out,
            json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": svc, "namespace": ns},
            "subsets": [{"addresses": pods.iter().map(|q| json!({"ip": ip(*q), "nodeName": format!("node-{:04}", q % NODES),
                "targetRef": {"kind": "Pod", "namespace": ns, "name": format!("{svc}-7d9f8b6c5-{q:05}")}})).collect::<Vec<_>>(),
                "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}]}]}),
        );
        item(
            &mut out,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{svc}-abcde"), "namespace": ns,
                "labels": {"kubernetes.io/service-name": svc, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4",
            "endpoints": pods.iter().map(|q| json!({"addresses": [ip(*q)], "conditions": {"ready": true},
                "nodeName": format!("node-{:04}", q % NODES),
                "targetRef": {"kind": "Pod", "namespace": ns, "name": format!("{svc}-7d9f8b6c5-{q:05}")}})).collect::<Vec<_>>(),
            "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}]}),
        );
        for q in pods {
            item(&mut out, pod(&ns, &svc, i, q, i % 2 == 0));
        }
        p += PODS_PER_SERVICE;
    }
    out.write_all(b"]}\n").expect("write");
    out.flush().expect("flush the dump");
    n
}

#[test]
fn auditing_a_20000_object_dump_stays_within_a_memory_bound() {
    let dir = std::env::temp_dir().join(format!("herald-audit-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let dump = dir.join("dump.json");
    let objects = write_dump(&dump);
    assert!(objects >= 20_000, "{objects} objects");

    let report = dir.join("report.json");
    let status = Command::new(BIN)
        .arg("audit")
        .arg("--from")
        .arg(&dump)
        .args(["--output", "json", "--fix"])
        .arg(dir.join("fix"))
        .stdout(std::fs::File::create(&report).expect("report file"))
        .stderr(Stdio::inherit())
        .status()
        .expect("herald runs");
    // 0: nothing critical; 1: a critical finding. 2 would be an audit that could not run.
    assert!(matches!(status.code(), Some(0 | 1)), "{status}");
    let peak_kib = getrusage(UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage")
        .max_rss();

    // The audit read everything: the inventory counts every object of the dump.
    let r: Value =
        serde_json::from_slice(&std::fs::read(&report).expect("read report")).expect("JSON");
    let counted: u64 = r["inventory"]["objects"]
        .as_object()
        .expect("objects")
        .values()
        .map(|n| n.as_u64().expect("a count"))
        .sum();
    assert_eq!(counted, objects as u64);
    let codes: Vec<&str> = r["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["code"].as_str().expect("code"))
        .collect();
    // Every Service carries traffic and is scraped (HA005); 1,200 Services put kube-proxy's
    // iptables mode past its first threshold (HA007); 1,000 nodes make the fan-out (HA010).
    for code in ["HA005", "HA007", "HA010"] {
        assert!(codes.contains(&code), "{code} missing: {codes:?}");
    }
    assert!(dir.join("fix/index.json").is_file());
    let _ = std::fs::remove_dir_all(&dir);

    assert!(
        peak_kib < PEAK_RSS_BOUND_KIB,
        "herald audit peaked at {} MiB for {objects} objects; the bound is {} MiB",
        peak_kib / 1024,
        PEAK_RSS_BOUND_KIB / 1024
    );
}
