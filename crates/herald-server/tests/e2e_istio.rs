//! Istio-aware jobs (`istio: merged` / `separate`) judged by a real Prometheus: pods in and out of
//! the mesh, merged by the injector or not, under PeerAuthentications at mesh, namespace, workload
//! and port level with STRICT, PERMISSIVE, DISABLE and UNSET. Each pod's "ports" are real listeners
//! on its loopback pod IP: plaintext HTTP, or — where the policy makes the port STRICT — TLS that
//! demands a client certificate, as a sidecar under STRICT does. Prometheus runs herald's own
//! `/scrape-configs` (the companion job with Istio's certificate settings pointing at a throw-away
//! PKI) and must find exactly the documented targets, each up. A PodMonitor's job, with
//! `monitors.istio`, is placed by the same policies. A policy changed at runtime moves targets
//! between a job and its companion without a restart.

#[path = "peers/harness.rs"]
mod peers;
#[path = "support/pki.rs"]
mod pki;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube_sim::peers as installed;
use kube_sim::{Kind, Object, Write};
use peers::cluster::{loopback_spec, start_herald, start_sim};
use peers::prometheus::Prometheus;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The injector's saved annotations for an application on `port` at /metrics.
fn saved(port: u16) -> String {
    json!({"scrape": "true", "path": "/metrics", "port": port.to_string()}).to_string()
}

/// A running pod at `127.77.0.<n>`: in the mesh (`saved`: merged, with the application's own
/// annotations in istio-proxy's environment; `None` with `sidecar`: merging off, annotations
/// as written), or outside it.
fn pod(
    ns: &str,
    name: &str,
    n: u8,
    app: &str,
    sidecar: bool,
    merged: Option<u16>,
    port: u16,
) -> Object {
    let ip = format!("127.77.0.{n}");
    let mut labels = json!({"app": app});
    let mut annotations = json!({"prometheus.io/scrape": "true", "prometheus.io/port": port.to_string(),
        "prometheus.io/path": "/metrics"});
    let mut containers = vec![json!({"name": "app", "image": "registry.example.com/app:1",
        "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]})];
    if sidecar {
        labels["security.istio.io/tlsMode"] = json!("istio");
        let mut env = vec![json!({"name": "ISTIO_META_WORKLOAD_NAME", "value": app})];
        if let Some(app_port) = merged {
            annotations = json!({"prometheus.io/scrape": "true", "prometheus.io/port": "15020",
                "prometheus.io/path": "/stats/prometheus"});
            env.push(json!({"name": "ISTIO_PROMETHEUS_ANNOTATIONS", "value": saved(app_port)}));
        }
        containers.push(
            json!({"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.22.3",
            "env": env,
            "ports": [{"name": "http-envoy-prom", "containerPort": 15090, "protocol": "TCP"},
                      {"containerPort": 15021, "protocol": "TCP"}]}),
        );
    }
    let value = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "uid": format!("77000000-0000-4000-8000-0000000000{n:02}"),
                     "labels": labels, "annotations": annotations},
        "spec": {"containers": containers},
        "status": {"phase": "Running", "podIP": ip, "hostIP": "127.8.0.1",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    });
    Object::Pod(serde_json::from_value(value).expect("a valid pod"))
}

fn peer_authentication(ns: &str, name: &str, created: &str, spec: Value) -> Object {
    Object::Custom(
        Kind::PeerAuthentication,
        json!({"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
               "metadata": {"namespace": ns, "name": name, "creationTimestamp": created},
               "spec": spec}),
    )
}

const T0: &str = "2026-01-01T00:00:00Z";

fn policies(mesh_a: &str) -> Vec<Object> {
    vec![
        peer_authentication(
            "istio-system",
            "default",
            T0,
            json!({"mtls": {"mode": "STRICT"}}),
        ),
        peer_authentication("mesh-a", "default", T0, json!({"mtls": {"mode": mesh_a}})),
        peer_authentication(
            "mesh-a",
            "secure-port",
            T0,
            json!({"selector": {"matchLabels": {"app": "secure"}},
            "portLevelMtls": {"18443": {"mode": "STRICT"}}}),
        ),
        peer_authentication(
            "mesh-b",
            "web",
            T0,
            json!({"selector": {"matchLabels": {"app": "web"}},
            "mtls": {"mode": "DISABLE"}}),
        ),
        peer_authentication(
            "mesh-b",
            "db-port",
            T0,
            json!({"selector": {"matchLabels": {"app": "db"}},
            "mtls": {"mode": "UNSET"}, "portLevelMtls": {"19100": {"mode": "PERMISSIVE"}}}),
        ),
    ]
}

fn pods() -> Vec<Object> {
    vec![
        pod("mesh-a", "merged-1", 1, "merged", true, Some(18080), 18080),
        pod("mesh-a", "unmerged-1", 2, "unmerged", true, None, 18080),
        pod("outside", "plain-1", 3, "plain", false, None, 18080),
        pod("mesh-b", "web-1", 4, "web", true, Some(18080), 18080),
        pod("mesh-b", "db-1", 5, "db", true, Some(19100), 19100),
        pod("mesh-b", "api-1", 6, "api", true, Some(18080), 18080),
        pod("mesh-b", "legacy-1", 7, "legacy", true, None, 18080),
        pod("mesh-a", "secure-1", 8, "secure", true, Some(18443), 18443),
    ]
}

/// (address, is TLS) of every listener the pods need: what the documented targets dial.
const LISTENERS: &[(&str, bool)] = &[
    ("127.77.0.1:18080", false),
    ("127.77.0.1:15020", false),
    ("127.77.0.1:15090", false),
    ("127.77.0.2:18080", false),
    ("127.77.0.2:15090", false),
    ("127.77.0.3:18080", false),
    ("127.77.0.4:18080", false),
    ("127.77.0.4:15020", false),
    ("127.77.0.4:15090", false),
    ("127.77.0.5:19100", false),
    ("127.77.0.5:15020", false),
    ("127.77.0.5:15090", false),
    ("127.77.0.6:18080", true),
    ("127.77.0.6:15020", false),
    ("127.77.0.6:15090", false),
    ("127.77.0.7:18080", true),
    ("127.77.0.7:15090", false),
    ("127.77.0.8:18443", true),
    ("127.77.0.8:15020", false),
    ("127.77.0.8:15090", false),
];

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// What each job serves, as `address path scheme` (the documented outcome of each case).
fn expected() -> Vec<(&'static str, BTreeSet<String>)> {
    vec![
        (
            "separate",
            set(&[
                "127.77.0.1:15090 /stats/prometheus http", // merged: Envoy...
                "127.77.0.1:18080 /metrics -",             // ...and the app (namespace PERMISSIVE)
                "127.77.0.2:15090 /stats/prometheus http", // not merged: Envoy beside the app
                "127.77.0.2:18080 /metrics -",
                "127.77.0.3:18080 /metrics -", // outside the mesh: untouched
                "127.77.0.4:15090 /stats/prometheus http",
                "127.77.0.4:18080 /metrics -", // workload DISABLE under mesh STRICT
                "127.77.0.5:15090 /stats/prometheus http",
                "127.77.0.5:19100 /metrics -", // port PERMISSIVE under an UNSET workload policy
                "127.77.0.6:15090 /stats/prometheus http",
                "127.77.0.7:15090 /stats/prometheus http",
                "127.77.0.8:15090 /stats/prometheus http",
            ]),
        ),
        (
            "separate/istio-mtls",
            set(&[
                "127.77.0.6:18080 /metrics https", // mesh-wide STRICT
                "127.77.0.7:18080 /metrics https", // not merged, mesh-wide STRICT
                "127.77.0.8:18443 /metrics https", // port-level STRICT under namespace PERMISSIVE
            ]),
        ),
        (
            "merged",
            set(&[
                "127.77.0.1:15020 /stats/prometheus http",
                "127.77.0.2:18080 /metrics -",
                "127.77.0.3:18080 /metrics -",
                "127.77.0.4:15020 /stats/prometheus http",
                "127.77.0.5:15020 /stats/prometheus http",
                "127.77.0.6:15020 /stats/prometheus http",
                "127.77.0.8:15020 /stats/prometheus http",
            ]),
        ),
        (
            "merged/istio-mtls",
            set(&["127.77.0.7:18080 /metrics https"]),
        ),
        // A PodMonitor on every pod's `metrics` port (`monitors.istio`): the same policies place
        // its targets; nothing is rewritten (the monitor names its port).
        (
            APPS_MONITOR,
            set(&[
                "127.77.0.1:18080 - -", // namespace PERMISSIVE
                "127.77.0.2:18080 - -",
                "127.77.0.3:18080 - -", // outside the mesh
                "127.77.0.4:18080 - -", // workload DISABLE
                "127.77.0.5:19100 - -", // port PERMISSIVE
            ]),
        ),
        (
            "podMonitor/mesh-a/apps/0/istio-mtls",
            set(&[
                "127.77.0.6:18080 - https", // mesh-wide STRICT
                "127.77.0.7:18080 - https",
                "127.77.0.8:18443 - https", // port-level STRICT
            ]),
        ),
    ]
}

/// The PodMonitor's job.
const APPS_MONITOR: &str = "podMonitor/mesh-a/apps/0";

/// A PodMonitor in mesh-a on the `metrics` port of every pod of the test's namespaces.
fn apps_monitor() -> Object {
    Object::Custom(
        Kind::PodMonitor,
        json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
               "metadata": {"namespace": "mesh-a", "name": "apps", "labels": {"team": "mesh-test"}},
               "spec": {"selector": {}, "namespaceSelector": {"matchNames": ["mesh-a", "mesh-b", "outside"]},
                        "podMetricsEndpoints": [{"port": "metrics"}]}}),
    )
}

/// The entries herald serves for `job`.
async fn sd_body(http: &reqwest::Client, base: &str, job: &str) -> Vec<Value> {
    http.get(format!("{base}/sd/v1/{job}"))
        .send()
        .await
        .expect("herald answers")
        .json()
        .await
        .expect("HTTP SD JSON")
}

async fn served(http: &reqwest::Client, base: &str, job: &str) -> BTreeSet<String> {
    let body = sd_body(http, base, job).await;
    body.iter()
        .map(|e| {
            let l = &e["labels"];
            assert!(
                l.get("__herald_istio_prometheus_annotations").is_none(),
                "internal labels are never served: {e}"
            );
            let scheme = l["__scheme__"].as_str().unwrap_or("-");
            format!(
                "{} {} {scheme}",
                e["targets"][0].as_str().expect("address"),
                l["__metrics_path__"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

/// A metrics endpoint: HTTP/1.1, one response per connection, over TLS when `tls` is given.
async fn listen(addr: &str, tls: Option<tokio_rustls::TlsAcceptor>) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("listen on {addr}: {e}"));
    let addr = addr.to_string();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (tls, addr) = (tls.clone(), addr.clone());
            tokio::spawn(async move {
                let body = format!("herald_istio_test_up{{listener=\"{addr}\"}} 1\n");
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                match tls {
                    Some(acceptor) => {
                        // A client without a certificate the CA signed fails the handshake here.
                        if let Ok(mut s) = acceptor.accept(tcp).await {
                            let mut buf = [0u8; 4096];
                            let _ = s.read(&mut buf).await;
                            let _ = s.write_all(response.as_bytes()).await;
                            let _ = s.shutdown().await;
                        }
                    }
                    None => {
                        let mut s = tcp;
                        let mut buf = [0u8; 4096];
                        let _ = s.read(&mut buf).await;
                        let _ = s.write_all(response.as_bytes()).await;
                        let _ = s.shutdown().await;
                    }
                }
            });
        }
    })
}

/// TLS that requires a client certificate signed by `ca`: a sidecar under STRICT.
fn strict_acceptor(ca: &pki::Ca) -> tokio_rustls::TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.pem().as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA certificate");
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .expect("client verifier");
    let server = ca.server();
    let chain = CertificateDer::pem_slice_iter(server.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("server cert PEM");
    let key = PrivateKeyDer::from_pem_slice(server.key.as_bytes()).expect("server key PEM");
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .expect("server identity");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_jobs_serve_the_documented_targets_and_schemes_and_prometheus_scrapes_each() {
    let Some(prom_bin) = installed::find("prometheus", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let sim = start_sim(loopback_spec(), 5).await;
    let mut writes: Vec<Write> = pods().into_iter().map(Write::Put).collect();
    writes.extend(policies("PERMISSIVE").into_iter().map(Write::Put));
    writes.push(Write::Put(apps_monitor()));
    sim.handle().apply(writes);

    // Istio's certificate files as a Prometheus pod would mount them: the CA, a client identity.
    let certs = tempfile::tempdir().expect("temp dir");
    let ca = pki::Ca::new("istio-ca");
    let client = ca.client("spiffe://cluster.local/ns/monitoring/sa/prometheus");
    std::fs::write(certs.path().join("root-cert.pem"), ca.pem()).expect("write CA");
    std::fs::write(certs.path().join("cert-chain.pem"), &client.cert).expect("write cert");
    std::fs::write(certs.path().join("key.pem"), &client.key).expect("write key");

    let jobs = format!(
        "istio: {{certs_dir: {:?}}}\nmonitors: {{selector: team=mesh-test, istio: true}}\njobs:\n\
         - {{name: separate, role: pod, annotations: prometheus.io, istio: separate, namespaces: {{names: [mesh-a, mesh-b, outside]}}}}\n\
         - {{name: merged, role: pod, annotations: prometheus.io, istio: merged, namespaces: {{names: [mesh-a, mesh-b, outside]}}}}\n",
        certs.path().display().to_string()
    );
    let herald = start_herald(&sim, &jobs).await;
    let http = reqwest::Client::new();
    let base = herald.url().trim_end_matches('/').to_string();

    // herald serves the documented targets, each with its scheme, each job and companion.
    for (job, want) in expected() {
        assert_eq!(served(&http, &base, job).await, want, "job {job}");
    }
    let listed: Value = peers::cluster::get_json(&http, &format!("{base}/sd/v1")).await;
    let companion = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|j| j["job"] == "separate/istio-mtls")
        .expect("the companion is listed");
    assert_eq!(companion["istio"]["body"], "mtls", "{companion}");
    assert_eq!(
        peers::cluster::metric(&http, &herald, "herald_istio_policies").await,
        Some(5.0),
        "the five PeerAuthentications are read"
    );
    assert_eq!(
        peers::cluster::metric(&http, &herald, "herald_istio_policy_problems").await,
        Some(0.0)
    );
    let monitor_companion = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|j| j["job"] == format!("{APPS_MONITOR}/istio-mtls"))
        .expect("the monitor job's companion is listed");
    assert_eq!(monitor_companion["monitor"], true, "{monitor_companion}");
    assert_eq!(
        monitor_companion["istio"]["body"], "mtls",
        "{monitor_companion}"
    );

    // Every listener the documented targets dial; STRICT ports demand a client certificate.
    let acceptor = strict_acceptor(&ca);
    let mut tasks = Vec::new();
    for (addr, tls) in LISTENERS {
        tasks.push(listen(addr, tls.then(|| acceptor.clone())).await);
    }

    // Real Prometheus runs herald's generated scrape configs.
    let scrape_configs = peers::cluster::get_text(&http, &format!("{base}/scrape-configs")).await;
    for want in [
        "job_name: \"separate/istio-mtls\"",
        "job_name: podMonitor/mesh-a/apps/0/istio-mtls",
        "insecure_skip_verify: true",
        "cert-chain.pem",
    ] {
        assert!(scrape_configs.contains(want), "{want} in {scrape_configs}");
    }
    let config =
        format!("global: {{scrape_interval: 1s, scrape_timeout: 900ms}}\n{scrape_configs}");
    peers::prometheus::promtool_check(
        &prom_bin.with_file_name("promtool"),
        certs.path(),
        "istio",
        &config,
    );
    let mut prom = Prometheus::start(&prom_bin, &config).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let want: BTreeSet<String> = expected()
        .into_iter()
        .flat_map(|(job, targets)| targets.into_iter().map(move |t| format!("{job} {t}")))
        .map(|t| {
            // Prometheus lists the path and scheme it used: its defaults where herald set none.
            let f: Vec<&str> = t.split(' ').collect();
            let or = |v: &str, default: &str| {
                if v == "-" {
                    default.to_string()
                } else {
                    v.to_string()
                }
            };
            format!(
                "{} {} {} {}",
                f[0],
                f[1],
                or(f[2], "/metrics"),
                or(f[3], "http")
            )
        })
        .collect();
    let mut last = String::new();
    loop {
        let targets = prom.targets().await.expect("Prometheus lists targets");
        let up: BTreeSet<String> = targets
            .iter()
            .filter(|t| t.health == "up")
            .map(|t| {
                format!(
                    "{} {} {} {}",
                    t.job,
                    t.discovered.get("__address__").cloned().unwrap_or_default(),
                    t.discovered
                        .get("__metrics_path__")
                        .cloned()
                        .unwrap_or_default(),
                    t.discovered.get("__scheme__").cloned().unwrap_or_default()
                )
            })
            .collect();
        if up == want {
            break;
        }
        last = format!(
            "up: {up:#?}\nnot up: {:#?}",
            targets
                .iter()
                .filter(|t| t.health != "up")
                .map(|t| format!(
                    "{} {:?} {}",
                    t.job,
                    t.discovered.get("__address__"),
                    t.last_error
                ))
                .collect::<Vec<_>>()
        );
        prom.check_alive().expect("Prometheus runs");
        assert!(
            tokio::time::Instant::now() < deadline,
            "Prometheus did not scrape exactly the documented targets: want {want:#?}\n{last}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // A namespace turned STRICT at runtime: its application ports move to the companion. A
    // long-poll on the monitor job's companion, waiting on its body, wakes with the new one (were it
    // not woken, herald would answer 304 when the wait ends).
    let companion_url = format!("{base}/sd/v1/{APPS_MONITOR}/istio-mtls");
    let etag = http
        .get(&companion_url)
        .send()
        .await
        .expect("answers")
        .headers()
        .get("etag")
        .expect("an ETag")
        .to_str()
        .expect("ASCII")
        .to_string();
    let poll = tokio::spawn({
        let http = http.clone();
        let url = format!("{companion_url}?wait=120s");
        async move {
            let res = http
                .get(url)
                .header("if-none-match", etag)
                .send()
                .await
                .expect("answers");
            (res.status().as_u16(), res.text().await.expect("body"))
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.handle()
        .apply(policies("STRICT").into_iter().map(Write::Put).collect());
    let (status, body) = poll.await.expect("the long-poll returns");
    assert_eq!(status, 200, "the long-poll woke with a new body: {body}");
    assert!(body.contains("127.77.0.1:18080"), "{body}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mtls = served(&http, &base, "separate/istio-mtls").await;
        let plain = served(&http, &base, "separate").await;
        let monitor_mtls = served(&http, &base, &format!("{APPS_MONITOR}/istio-mtls")).await;
        let monitor_plain = served(&http, &base, APPS_MONITOR).await;
        if mtls.contains("127.77.0.1:18080 /metrics https")
            && mtls.contains("127.77.0.2:18080 /metrics https")
            && !plain.contains("127.77.0.1:18080 /metrics -")
            && monitor_mtls.contains("127.77.0.1:18080 - https")
            && monitor_mtls.contains("127.77.0.2:18080 - https")
            && !monitor_plain.contains("127.77.0.1:18080 - -")
        {
            assert!(
                plain.contains("127.77.0.1:15090 /stats/prometheus http"),
                "Envoy stays plain"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the STRICT namespace was not followed: plain {plain:#?} mtls {mtls:#?} monitor \
             {monitor_plain:#?} {monitor_mtls:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for t in tasks {
        t.abort();
    }
    let _ = last;
}

/// kube-sim's own mesh with the PeerAuthentications it generates at every level
/// (`kube_sim::generate::peer_authentications`): each target of an `istio: separate` job is in the
/// companion exactly when the level that applies to it says STRICT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_sim_s_generated_mesh_policies_place_each_target_by_the_level_that_applies() {
    let spec = kube_sim::generate::ClusterSpec {
        namespaces: 6,
        istio_fraction: 0.67,
        annotated_fraction: 1.0,
        ..loopback_spec()
    };
    let sim = start_sim(spec, 9).await;
    let h = sim.handle();
    let generated = kube_sim::generate::peer_authentications(
        &h.objects_json(Kind::Namespace),
        &h.objects_json(Kind::Pod),
    );
    assert_eq!(
        generated.len(),
        5,
        "mesh + one per level in four namespaces"
    );
    let policy = |i: usize| match &generated[i] {
        Object::Custom(_, v) => v.clone(),
        other => panic!("a PeerAuthentication, not {other:?}"),
    };
    let ns = |i: usize| {
        policy(i)["metadata"]["namespace"]
            .as_str()
            .expect("ns")
            .to_string()
    };
    let (permissive_ns, disabled_ns, port_ns) = (ns(1), ns(2), ns(3));
    let disabled_app = policy(2)["spec"]["selector"]["matchLabels"]["app"]
        .as_str()
        .expect("app")
        .to_string();
    let port_app = policy(3)["spec"]["selector"]["matchLabels"]["app"]
        .as_str()
        .expect("app")
        .to_string();
    let open_port: String = policy(3)["spec"]["portLevelMtls"]
        .as_object()
        .expect("port-level")
        .keys()
        .next()
        .expect("a port")
        .clone();
    h.apply(generated.into_iter().map(Write::Put).collect());

    let herald = start_herald(
        &sim,
        "jobs:\n- {name: mesh, role: pod, annotations: prometheus.io, istio: separate}\n",
    )
    .await;
    let http = reqwest::Client::new();
    let base = herald.url().trim_end_matches('/').to_string();
    let (mut strict, mut excepted, mut plain_app) = (0, 0, 0);
    for (job, in_companion) in [("mesh", false), ("mesh/istio-mtls", true)] {
        for e in &sd_body(&http, &base, job).await {
            let l = &e["labels"];
            let address = e["targets"][0].as_str().expect("address");
            let port = address.rsplit_once(':').expect("host:port").1;
            let sidecar = l["security_istio_io_tlsMode"] == "istio";
            let (ns, app) = (
                l["namespace"].as_str().unwrap_or(""),
                l["app"].as_str().unwrap_or(""),
            );
            let istio_port = port == "15020" || port == "15090";
            let exception = ns == permissive_ns
                || (ns == disabled_ns && app == disabled_app)
                || (ns == port_ns && app == port_app && port == open_port);
            let want = sidecar && !istio_port && !exception;
            assert_eq!(in_companion, want, "{job}: {e}");
            strict += usize::from(want);
            excepted += usize::from(sidecar && !istio_port && exception);
            plain_app += usize::from(!sidecar);
        }
    }
    assert!(
        strict > 0 && excepted > 0 && plain_app > 0,
        "every case occurs: {strict} {excepted} {plain_app}"
    );
}
