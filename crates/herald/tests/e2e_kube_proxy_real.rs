//! Real kube-proxy (k8s.io/kubernetes v1.37.2) through herald on the REAL control plane (etcd 3.7,
//! kube-apiserver and kube-controller-manager v1.37.2, all built by `peers/build`), against the
//! same kube-proxy reading that apiserver directly.
//!
//! The control plane and herald run in a hub network namespace, loaded with kube-sim's `small`
//! cluster through the API, its EndpointSlices made by the real controller. For each proxy mode
//! (iptables and nftables) two kube-proxies pretend to be the same Node, each in its own namespace
//! whose loopback is bridged to the hub: one reads herald's face (plain HTTP), the other the
//! apiserver (TLS, the admin token). Their rulesets, canonicalised, must be equal after the first
//! sync and after churn driven through the API (kube-sim's pod churn, and Services created,
//! deleted, relabelled, re-ported, turned NodePort and given session affinity), and their Service
//! chains must be the ones `herald simulate` generates for the apiserver's state.
//!
//! NB: kube-proxy only writes rules; nothing sends traffic through them. The cluster's addresses
//! are private-range data (the apiserver refuses loopback endpoint addresses) that nothing dials;
//! every socket is on a namespace's own loopback.

mod kube_proxy;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_server::{Herald, KubeApiOptions, KubeServeOptions, ServeOptions, job_specs};
use herald_simulate::netns::Netns;
use http::Method;
use kube_proxy::{KubeProxy, Launch, Mode, list, pod_cidr, simulated_service_chains};
use kube_sim::generate::{Cluster, ClusterSpec, generate};
use kube_sim::peers::controlplane::{ADMIN_TOKEN, ControlPlane, Options};
use serde_json::{Value, json};

const HERALD_UA: &str = "herald-e2e-kube-proxy-real";
const SEED: u64 = 7;
/// The Service port the churn gives one Service (unused by the generated cluster).
const PATCHED_PORT: u16 = 47123;
/// How long the rulesets get to agree.
const SETTLE: Duration = Duration::from_secs(90);
/// How long equal rulesets must stay unchanged to count as settled.
const QUIET: Duration = Duration::from_secs(3);

/// One proxy mode's two kube-proxies: through herald and direct, each in its own namespace.
struct Pair {
    mode: Mode,
    herald_ns: Arc<Netns>,
    direct_ns: Arc<Netns>,
    via_herald: KubeProxy,
    direct: KubeProxy,
}

async fn start_herald(cp: &ControlPlane) -> Herald {
    let (resources, _) = herald_server::kube_kinds(&[]).expect("defaults");
    let cfg = herald_core::parse_config("jobs: []\n").expect("jobs");
    let herald = Herald::start(
        job_specs(&cfg, None).expect("specs"),
        cp.kube_config(ADMIN_TOKEN).expect("kube config"),
        ServeOptions {
            user_agent: HERALD_UA.to_string(),
            kube: Some(KubeServeOptions::plain(
                "127.0.0.1:0".parse().expect("addr"),
                KubeApiOptions {
                    resources,
                    ..KubeApiOptions::default()
                },
            )),
            ..ServeOptions::default()
        },
    )
    .await
    .expect("herald starts");
    tokio::time::timeout(Duration::from_secs(60), herald.ready())
        .await
        .expect("herald syncs from kube-apiserver within 60 s");
    herald
}

fn addr_of(url: &str) -> SocketAddr {
    url.trim_start_matches("http://")
        .trim_start_matches("https://")
        .parse()
        .unwrap_or_else(|e| panic!("an address in {url}: {e}"))
}

/// Waits until the pair's namespaces hold equal rulesets, unchanged for [`QUIET`], whose Service
/// chains are simulate's for the apiserver's state and which pass `check`; panics with the
/// difference after [`SETTLE`].
async fn wait_equal(
    cp: &ControlPlane,
    pair: &mut Pair,
    node: &str,
    what: &str,
    check: impl Fn(&[String]) -> Result<(), String>,
) -> Vec<String> {
    let mode = pair.mode;
    let start = Instant::now();
    let mut stable: Option<(Vec<String>, Instant)> = None;
    loop {
        pair.via_herald.check_alive();
        pair.direct.check_alive();
        let (ra, rb) = (
            kube_proxy::ruleset(&pair.herald_ns, mode),
            kube_proxy::ruleset(&pair.direct_ns, mode),
        );
        let chains = kube_proxy::service_chains(&ra, mode);
        let want = simulated_service_chains(cp, node, mode).await;
        let checked = check(&ra);
        if ra == rb && !chains.is_empty() && chains == want && checked.is_ok() {
            match &stable {
                Some((last, since)) if *last == ra => {
                    if since.elapsed() >= QUIET {
                        eprintln!(
                            "{}: {what}: equal after {:?}: {} canonical lines, {} Service chains",
                            mode.flag(),
                            start.elapsed(),
                            ra.len(),
                            chains.len()
                        );
                        return ra;
                    }
                }
                _ => stable = Some((ra, Instant::now())),
            }
        } else {
            stable = None;
            if start.elapsed() > SETTLE {
                panic!(
                    "{}: {what}: after {SETTLE:?}: through herald vs direct: {}\nService chains through herald vs simulate: {}\ncheck: {checked:?}\nherald's kube-proxy log tail:\n{}\ndirect kube-proxy log tail:\n{}",
                    mode.flag(),
                    kube_proxy::diff("herald", &ra, "direct", &rb, 20),
                    kube_proxy::diff("herald", &chains, "simulate", &want, 20),
                    pair.via_herald.log_tail(15),
                    pair.direct.log_tail(15),
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Application Services with a cluster IP and a selector, as (namespace, name), sorted.
async fn proxied_services(cp: &ControlPlane) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = list(cp, "/api/v1/services", "Service", "v1")
        .await
        .iter()
        .filter(|s| {
            s["spec"]["selector"]
                .as_object()
                .is_some_and(|m| !m.is_empty())
                && s["spec"]["clusterIP"]
                    .as_str()
                    .is_some_and(|ip| ip != "None")
                && s["metadata"]["namespace"] != "kube-system"
                && s["metadata"]["namespace"] != "default"
        })
        .map(|s| {
            (
                s["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                s["metadata"]["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn service_path((ns, name): &(String, String)) -> String {
    format!("/api/v1/namespaces/{ns}/services/{name}")
}

async fn send(cp: &ControlPlane, method: Method, path: &str, body: Option<(&str, Value)>) {
    let (code, out) = cp
        .request(
            method.clone(),
            path,
            body.map(|(ct, v)| (ct, v.to_string().into_bytes())),
        )
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"));
    assert!(
        code.is_success(),
        "{method} {path}: {code}: {}",
        String::from_utf8_lossy(&out)
    );
}

async fn patch(cp: &ControlPlane, svc: &(String, String), patch: Value) {
    send(
        cp,
        Method::PATCH,
        &service_path(svc),
        Some(("application/merge-patch+json", patch)),
    )
    .await;
}

/// Creates `ns/new_name` with `from`'s labels, selector and ports; the apiserver allocates its IP.
async fn copy_service(cp: &ControlPlane, from: &(String, String), new_name: &str) {
    let s = cp
        .get_json(&service_path(from))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let ports: Vec<Value> = s["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let mut p = p.clone();
            if let Some(m) = p.as_object_mut() {
                m.remove("nodePort");
            }
            p
        })
        .collect();
    let new = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": new_name, "namespace": from.0, "labels": s["metadata"]["labels"]},
        "spec": {"selector": s["spec"]["selector"], "ports": ports},
    });
    send(
        cp,
        Method::POST,
        &format!("/api/v1/namespaces/{}/services", from.0),
        Some(("application/json", new)),
    )
    .await;
}

/// kube-proxy starts syncing once its Services and EndpointSlices are in, whether or not its
/// ServiceCIDR informer has synced, and a ServiceCIDR arriving later does not trigger a sync (see
/// e2e_kube_proxy.rs): once every kube-proxy has its ServiceCIDRs, a new Service makes each sync
/// with them. Returns the new Service.
async fn settle_service_cidrs(cp: &ControlPlane, pairs: &mut [Pair]) -> (String, String) {
    let start = Instant::now();
    let proxies: Vec<&mut KubeProxy> = pairs
        .iter_mut()
        .flat_map(|p| [&mut p.via_herald, &mut p.direct])
        .collect();
    for p in proxies {
        while !p
            .log_text()
            .contains(r#""Caches are synced" controller="serviceCIDR config""#)
        {
            p.check_alive();
            assert!(
                start.elapsed() < SETTLE,
                "kube-proxy's ServiceCIDR informer did not sync:\n{}",
                p.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let svcs = proxied_services(cp).await;
    let from = svcs.last().expect("a proxied Service");
    let name = format!("{}-settle", from.1);
    copy_service(cp, from, &name).await;
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle");
    (from.0.clone(), name)
}

/// Whether any line of the ruleset names Service `ns/name`: kube-proxy's comments say
/// `"ns/name"` or `"ns/name:port"` (iptables) and its nftables chain names and comments
/// `ns/name/protocol/port`.
fn mentions(lines: &[String], (ns, name): &(String, String)) -> bool {
    let needle = format!("{ns}/{name}");
    lines.iter().any(|l| {
        l.match_indices(&needle).any(|(i, _)| {
            let before = l[..i].chars().next_back();
            let after = l[i + needle.len()..].chars().next();
            matches!(before, Some('"' | ' ' | '-'))
                && matches!(after, None | Some('"' | ':' | '/' | ' ' | '\\'))
        })
    })
}

/// Whether the ruleset sends TCP `port` of some cluster IP anywhere: `--dport PORT` of a
/// KUBE-SERVICES rule (iptables), an element of the `service-ips` map (nftables).
fn serves_port(lines: &[String], mode: Mode, port: u16) -> bool {
    match mode {
        Mode::Iptables => lines.iter().any(|l| {
            l.starts_with("nat -A KUBE-SERVICES ") && l.contains(&format!("--dport {port} "))
        }),
        Mode::Nftables => lines.iter().any(|l| {
            l.contains(r#""name":"service-ips""#) && l.contains(&format!(r#""tcp",{port}]"#))
        }),
    }
}

/// Churn through the API: kube-sim's pod churn, and Services changed. Returns (what, Service,
/// named in the rules before, named after) for each Service changed.
async fn churn(
    cp: &ControlPlane,
    cluster: &Cluster,
) -> Vec<(&'static str, (String, String), bool, bool)> {
    let svcs = proxied_services(cp).await;
    assert!(svcs.len() >= 7, "the cluster has enough Services to churn");
    let started = Instant::now();
    let mut churn = kube_sim::churn::Churn::new(SEED, cluster);
    cp.apply(churn.next_events(100))
        .await
        .expect("churn applies");

    // One Service port moved, so its cluster IP rule and map element change.
    let ported = svcs[0].clone();
    let s = cp
        .get_json(&service_path(&ported))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut ports = s["spec"]["ports"].clone();
    ports[0]["port"] = PATCHED_PORT.into();
    patch(cp, &ported, json!({"spec": {"ports": ports}})).await;

    let deleted = svcs[1].clone();
    send(cp, Method::DELETE, &service_path(&deleted), None).await;

    let labelled = svcs[2].clone();
    patch(
        cp,
        &labelled,
        json!({"metadata": {"labels": {"service.kubernetes.io/service-proxy-name": "other-proxy"}}}),
    )
    .await;

    let node_port = svcs[3].clone();
    patch(cp, &node_port, json!({"spec": {"type": "NodePort"}})).await;

    let affinity = svcs[4].clone();
    patch(
        cp,
        &affinity,
        json!({"spec": {"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}}}}),
    )
    .await;

    let created = (svcs[5].0.clone(), format!("{}-copy", svcs[5].1));
    copy_service(cp, &svcs[5], &created.1).await;

    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle after churn");
    // kube-proxy's nftables proxier flushes a stale Service chain at once and deletes it only at a
    // sync at least a second later (pkg/proxy/nftables/proxier.go staleChains): one more Service,
    // well after the churn's syncs, makes both proxies of each mode sync again and delete theirs,
    // however their syncs of the churn were batched.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let late = (svcs[6].0.clone(), format!("{}-late", svcs[6].1));
    copy_service(cp, &svcs[6], &late.1).await;
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle after the late Service");
    eprintln!(
        "churn through the API applied and settled in {:?}",
        started.elapsed()
    );
    vec![
        ("re-ported", ported, true, true),
        ("deleted", deleted, true, false),
        ("labelled for another proxy", labelled, true, false),
        ("turned NodePort", node_port, true, true),
        ("given session affinity", affinity, true, true),
        ("created", created, false, true),
        ("created late", late, false, true),
    ]
}

/// [`kube_proxy::run_in`] for a body whose future is not `Send` (`ControlPlane::load`'s is not
/// provably so): the future is made and driven on the namespace's thread.
fn run_in<F: Future<Output = ()> + 'static>(ns: &str, body: impl FnOnce() -> F + Send + 'static) {
    kube_proxy::in_netns(ns, move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(body())
    });
}

#[test]
fn kube_proxy_through_herald_on_kube_apiserver_writes_what_it_writes_direct() {
    let Some(bin) = kube_proxy::kube_proxy_bin() else {
        return;
    };
    let modes = [Mode::Iptables, Mode::Nftables];
    if !modes.iter().all(|m| kube_proxy::can_run(m.tools())) {
        return;
    }
    let hub = kube_proxy::netns();
    // Per mode: herald's kube-proxy's namespace and the direct one's.
    let spaces: Vec<(Arc<Netns>, Arc<Netns>)> = modes
        .iter()
        .map(|_| (Arc::new(kube_proxy::netns()), Arc::new(kube_proxy::netns())))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_path = dir.path().to_path_buf();
    let spaces2 = spaces.clone();
    run_in(hub.name(), move || async move {
        let (spaces, dir) = (spaces2, dir_path);
        let started = Instant::now();
        let spec = ClusterSpec::small();
        let Some(cp) = ControlPlane::start(Options {
            service_cidr: spec.service_cidr.to_string(),
            ..Options::default()
        })
        .await
        else {
            return;
        };
        let cp = cp.expect("the control plane starts");
        let cluster = generate(&spec, SEED);
        let n = cp.load(&cluster).await.expect("the cluster loads");
        cp.wait_endpointslices(Duration::from_secs(60))
            .await
            .expect("the EndpointSlice controller settles");
        eprintln!(
            "control plane up, {n} objects loaded and sliced in {:?}",
            started.elapsed()
        );
        let herald = start_herald(&cp).await;
        let face = addr_of(&herald.kube_url().expect("the face is on"));
        let apiserver = addr_of(&cp.url);
        let node = cluster.nodes[0].name.clone();

        let cidr = pod_cidr();
        let mut pairs = Vec::new();
        for (mode, (herald_ns, direct_ns)) in modes.into_iter().zip(spaces.iter()) {
            let face_port = kube_proxy::bridge(herald_ns.name(), face).await;
            let api_port = kube_proxy::bridge(direct_ns.name(), apiserver).await;
            let kc_herald =
                kube_proxy::kubeconfig(&dir, &format!("herald-{}", mode.flag()), face_port);
            let kc_direct = dir.join(format!("direct-{}.kubeconfig", mode.flag()));
            std::fs::write(
                &kc_direct,
                cp.kubeconfig_yaml(ADMIN_TOKEN)
                    .replace(&cp.url, &format!("https://127.0.0.1:{api_port}")),
            )
            .expect("write kubeconfig");
            let launch = |kubeconfig| Launch {
                bin: &bin,
                kubeconfig,
                node: &node,
                mode,
                cluster_cidr: &cidr,
                verbosity: 2,
                dir: &dir,
            };
            let via_herald = launch(&kc_herald).start(herald_ns.name());
            let direct = launch(&kc_direct).start(direct_ns.name());
            pairs.push(Pair {
                mode,
                herald_ns: herald_ns.clone(),
                direct_ns: direct_ns.clone(),
                via_herald,
                direct,
            });
        }
        let settle = settle_service_cidrs(&cp, &mut pairs).await;

        let mut firsts = Vec::new();
        for pair in &mut pairs {
            let first = wait_equal(&cp, pair, &node, "the first sync", |r| {
                mentions(r, &settle)
                    .then_some(())
                    .ok_or_else(|| format!("{settle:?} not in the rules yet"))
            })
            .await;
            firsts.push(first);
        }

        let changed = churn(&cp, &cluster).await;
        for (pair, first) in pairs.iter_mut().zip(&firsts) {
            let mode = pair.mode;
            let after = wait_equal(&cp, pair, &node, "churn", |r| {
                for (what, svc, _, later) in &changed {
                    if mentions(r, svc) != *later {
                        return Err(format!("{svc:?} {what}: named in the rules: {}", !later));
                    }
                }
                serves_port(r, mode, PATCHED_PORT)
                    .then_some(())
                    .ok_or_else(|| format!("port {PATCHED_PORT} not in the rules yet"))
            })
            .await;
            for (what, svc, before, later) in &changed {
                assert_eq!(
                    (mentions(first, svc), mentions(&after, svc)),
                    (*before, *later),
                    "{}: {svc:?} {what}: named in the rules before and after the churn",
                    mode.flag()
                );
            }
            assert!(
                !serves_port(first, mode, PATCHED_PORT),
                "port {PATCHED_PORT} is new"
            );
            assert_ne!(first, &after, "the churn changed the rules");
        }

        // herald's kube-proxies asked for protobuf (their default content type), and got it.
        let mut metrics = String::new();
        prometheus_client::encoding::text::encode(&mut metrics, herald.shared().registry())
            .expect("encode herald's metrics");
        let protobuf_events = metrics
            .lines()
            .find(|l| {
                l.starts_with(
                    "herald_kube_content_events_total{content_type=\"application/vnd.kubernetes.protobuf;stream=watch\"}",
                )
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(
            protobuf_events > 0.0,
            "kube-proxy's watches through herald carried no protobuf events"
        );
        drop(pairs);
        herald.stop().await;
        drop(cp);
        eprintln!("done in {:?}", started.elapsed());
    });
    drop(spaces);
}

#[test]
fn serves_port_finds_a_cluster_ip_port() {
    let l = |s: &str| vec![s.to_string()];
    assert!(serves_port(
        &l(
            "nat -A KUBE-SERVICES -d 172.20.0.9/32 -p tcp -m comment --comment \"a/b:http cluster IP\" -m tcp --dport 47123 -j KUBE-SVC-X"
        ),
        Mode::Iptables,
        47123
    ));
    assert!(!serves_port(
        &l("nat -A KUBE-SERVICES -d 172.20.0.9/32 -p tcp -m tcp --dport 471234 -j X"),
        Mode::Iptables,
        47123
    ));
    assert!(serves_port(
        &l(
            r#"{"map":{"elem":[[{"concat":["172.20.0.9","tcp",47123]},{"goto":{"target":"service-X"}}]],"name":"service-ips"}}"#
        ),
        Mode::Nftables,
        47123
    ));
}
