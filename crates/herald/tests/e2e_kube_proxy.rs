//! Real kube-proxy (k8s.io/kubernetes v1.37.2, built by `peers/build`) against herald's Kubernetes
//! API face, in throwaway network namespaces. kube-sim and herald run in-process on a runtime inside
//! namespace A; a kube-proxy reading herald runs in A too, and the same kube-proxy reading kube-sim
//! directly runs in namespace B, whose loopback is bridged to kube-sim's. Both write their rules
//! into their own namespace; the test reads them back (`iptables-save`, `nft -j list ruleset`),
//! canonicalised, and requires them equal — after the first sync and after churn — and equal, Service
//! chain for Service chain, to what `herald simulate` generates for kube-sim's state.
//!
//! NB: kube-proxy only writes rules; nothing sends traffic through them. Every process binds the
//! loopback of its own namespace; the cluster's addresses are all in 127.0.0.0/8.

mod kube_proxy;

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_server::{Herald, KubeApiOptions, KubeServeOptions, ServeOptions, job_specs};
use kube_proxy::{KubeProxy, Launch, Mode, POD_CIDR};
use kube_sim::{Kind, Object, Sim, Write};
use serde_json::Value;

const HERALD_UA: &str = "herald-e2e-kube-proxy";

/// herald with no SD jobs and the face on the namespace's loopback, serving its default kinds.
async fn start_herald(upstream: &str) -> Herald {
    let (resources, _) = herald_server::kube_kinds(&[]).expect("defaults");
    let cfg = herald_core::parse_config("jobs: []\n").expect("jobs");
    let herald = Herald::start(
        job_specs(&cfg, None).expect("specs"),
        kube::Config::new(upstream.parse().expect("url")),
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
        .expect("herald syncs within 60 s");
    herald
}

/// herald's Kubernetes API face's address.
fn face_addr(herald: &Herald) -> std::net::SocketAddr {
    herald
        .kube_url()
        .expect("the face is on")
        .trim_start_matches("http://")
        .parse()
        .expect("the face's address")
}

/// What `herald simulate` generates for kube-sim's current state on `node`: the Service chains of
/// its full iptables restore and nftables transaction.
fn simulated_service_chains(sim: &Sim, node: &str, mode: Mode) -> Vec<String> {
    let input = kube_proxy::proxy_input(sim, node);
    kube_proxy::simulated_chains(&herald_simulate::sync::Rulesets::of(&input), mode)
}

/// Waits until the two namespaces hold equal rulesets whose Service chains are `want()`'s (read
/// anew each round, as the cluster may still be settling); panics with the difference after
/// `limit`.
async fn wait_equal(
    a: (&herald_simulate::netns::Netns, &mut KubeProxy),
    b: (&herald_simulate::netns::Netns, &mut KubeProxy),
    mode: Mode,
    want: impl Fn() -> Vec<String>,
    limit: Duration,
) -> Vec<String> {
    let start = Instant::now();
    loop {
        a.1.check_alive();
        b.1.check_alive();
        let (ra, rb) = (
            kube_proxy::ruleset(a.0, mode),
            kube_proxy::ruleset(b.0, mode),
        );
        let want = want();
        let chains = kube_proxy::service_chains(&ra, mode);
        if ra == rb && chains == want && !want.is_empty() {
            return ra;
        }
        if start.elapsed() > limit {
            panic!(
                "after {limit:?}: through herald vs direct: {}\nService chains through herald vs simulate: {}\nherald's kube-proxy log tail:\n{}\ndirect kube-proxy log tail:\n{}",
                kube_proxy::diff("herald", &ra, "direct", &rb, 20),
                kube_proxy::diff("herald", &chains, "simulate", &want, 20),
                a.1.log_tail(15),
                b.1.log_tail(15),
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn service_json(sim: &Sim, ns: &str, name: &str) -> Value {
    sim.handle()
        .objects_json(Kind::Service)
        .into_iter()
        .find(|s| s["metadata"]["namespace"] == ns && s["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("service {ns}/{name}"))
}

/// kube-proxy starts syncing once its Services and EndpointSlices are in, whether or not its
/// ServiceCIDR informer has synced, and a ServiceCIDR arriving later does not trigger a sync
/// (pkg/proxy/nftables `OnServiceCIDRsChanged` only records the CIDRs): so whether the first ruleset
/// holds the `cluster-ips-check` rule depends on which informer synced first, through herald or not.
/// Once both proxies have their ServiceCIDRs, a new Service makes both sync with them.
async fn settle_service_cidrs(sim: &Sim, proxies: [&mut KubeProxy; 2]) {
    let start = Instant::now();
    for p in proxies {
        while !p
            .log_text()
            .contains(r#""Caches are synced" controller="serviceCIDR config""#)
        {
            p.check_alive();
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "kube-proxy's ServiceCIDR informer did not sync:\n{}",
                p.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let svcs = proxied_services(sim);
    let (ns, name) = svcs.last().expect("a proxied Service");
    let mut new = service_json(sim, ns, name);
    new["metadata"]["name"] = format!("{name}-settle").into();
    if let Some(m) = new["metadata"].as_object_mut() {
        m.remove("uid");
        m.remove("resourceVersion");
    }
    new["spec"]["clusterIP"] = "127.4.255.249".into();
    new["spec"]["clusterIPs"] = serde_json::json!(["127.4.255.249"]);
    put_service(sim, new);
}

fn put_service(sim: &Sim, v: Value) {
    let svc = serde_json::from_value(v).expect("a Service");
    sim.handle().apply(vec![Write::Put(Object::Service(svc))]);
}

/// Application Services with a cluster IP and a selector, as (namespace, name), sorted.
fn proxied_services(sim: &Sim) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = sim
        .handle()
        .objects_json(Kind::Service)
        .iter()
        .filter(|s| {
            s["spec"]["selector"].is_object()
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

/// The churn the issue names: a Service created, one deleted, one turned headless, one labelled
/// for another proxy, and pods scaled by kube-sim's own churn. Returns the Services changed.
async fn churn(sim: &Sim) -> Vec<(String, String)> {
    let svcs = proxied_services(sim);
    assert!(svcs.len() >= 4, "the cluster has enough Services to churn");
    let (created_from, deleted, headless, labelled) = (&svcs[0], &svcs[1], &svcs[2], &svcs[3]);

    let mut new = service_json(sim, &created_from.0, &created_from.1);
    let new_name = format!("{}-copy", created_from.1);
    new["metadata"]["name"] = new_name.clone().into();
    if let Some(m) = new["metadata"].as_object_mut() {
        m.remove("uid");
        m.remove("resourceVersion");
    }
    new["spec"]["clusterIP"] = "127.4.255.250".into();
    new["spec"]["clusterIPs"] = serde_json::json!(["127.4.255.250"]);
    put_service(sim, new);

    sim.handle().apply(vec![Write::Delete {
        kind: Kind::Service,
        namespace: Some(deleted.0.clone()),
        name: deleted.1.clone(),
    }]);

    // spec.clusterIP is immutable (the apiserver refuses the update): a Service turns headless by
    // being deleted and created again without a cluster IP.
    let mut h = service_json(sim, &headless.0, &headless.1);
    sim.handle().apply(vec![Write::Delete {
        kind: Kind::Service,
        namespace: Some(headless.0.clone()),
        name: headless.1.clone(),
    }]);
    if let Some(m) = h["metadata"].as_object_mut() {
        m.remove("uid");
        m.remove("resourceVersion");
    }
    h["spec"]["clusterIP"] = "None".into();
    h["spec"]["clusterIPs"] = serde_json::json!(["None"]);
    put_service(sim, h);

    let mut l = service_json(sim, &labelled.0, &labelled.1);
    l["metadata"]["labels"]["service.kubernetes.io/service-proxy-name"] = "other-proxy".into();
    put_service(sim, l);

    sim.handle().set_churn(20.0);
    tokio::time::sleep(Duration::from_secs(5)).await;
    sim.handle().set_churn(0.0);
    vec![
        (created_from.0.clone(), new_name),
        deleted.clone(),
        headless.clone(),
        labelled.clone(),
    ]
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

fn through_herald_equals_direct(mode: Mode) {
    let Some(bin) = kube_proxy::kube_proxy_bin() else {
        return;
    };
    if !kube_proxy::can_run(mode.tools()) {
        return;
    }
    let a = Arc::new(kube_proxy::netns());
    let b = Arc::new(kube_proxy::netns());
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_path = dir.path().to_path_buf();
    let (a2, b2) = (a.clone(), b.clone());
    kube_proxy::run_in(a.name(), move || async move {
        let (a, b, dir) = (a2, b2, dir_path);
        let sim = kube_proxy::start_sim(0).await;
        let herald = start_herald(&sim.url()).await;
        let face = face_addr(&herald);
        let node = kube_proxy::nodes(&sim, 1).remove(0);
        let direct_port = kube_proxy::bridge(b.name(), sim.addr()).await;
        let kc_herald = kube_proxy::kubeconfig(&dir, "herald", face.port());
        let kc_direct = kube_proxy::kubeconfig(&dir, "direct", direct_port);
        let launch = |kubeconfig| Launch {
            bin: &bin,
            kubeconfig,
            node: &node,
            mode,
            cluster_cidr: POD_CIDR,
            verbosity: 2,
            dir: &dir,
        };
        let mut via_herald = launch(&kc_herald).start(a.name());
        let mut direct = launch(&kc_direct).start(b.name());
        settle_service_cidrs(&sim, [&mut via_herald, &mut direct]).await;

        let first = wait_equal(
            (&a, &mut via_herald),
            (&b, &mut direct),
            mode,
            || simulated_service_chains(&sim, &node, mode),
            Duration::from_secs(90),
        )
        .await;
        eprintln!(
            "{}: first sync equal: {} canonical lines, {} Service chains",
            mode.flag(),
            first.len(),
            kube_proxy::service_chains(&first, mode).len()
        );

        let [created, deleted, headless, labelled]: [(String, String); 4] =
            churn(&sim).await.try_into().expect("four Services");
        let after = wait_equal(
            (&a, &mut via_herald),
            (&b, &mut direct),
            mode,
            || simulated_service_chains(&sim, &node, mode),
            Duration::from_secs(90),
        )
        .await;
        for (what, svc, before, later) in [
            ("deleted", &deleted, true, false),
            ("turned headless", &headless, true, false),
            ("labelled for another proxy", &labelled, true, false),
            ("created", &created, false, true),
        ] {
            assert_eq!(
                (mentions(&first, svc), mentions(&after, svc)),
                (before, later),
                "{svc:?} {what}: in the rules before and after the churn; lines naming it after: {:#?}",
                after
                    .iter()
                    .filter(|l| mentions(std::slice::from_ref(l), svc))
                    .collect::<Vec<_>>()
            );
        }
        assert_ne!(first, after, "the churn changed the rules");

        // kube-proxy posted its Events ("Starting", StartKubeProxy) to herald, which is read-only:
        // client-go's event broadcaster drops an Event the server refuses with a Status, and
        // kube-proxy runs on (it wrote every rule above).
        assert!(
            via_herald
                .log_text()
                .contains("Server rejected event (will not retry!)"),
            "kube-proxy's Event was refused with a Status and dropped:\n{}",
            via_herald.log_tail(20)
        );
        via_herald.check_alive();

        // kube-proxy asks for protobuf (its default content type), and got it from herald.
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

        // The upstream still serves herald one watch per kind: the direct kube-proxy gone, every
        // open watch on kube-sim is herald's.
        drop(direct);
        let kinds = herald_server::DEFAULT_KUBE_KINDS.len();
        let start = Instant::now();
        loop {
            let open = kube_proxy::open_watches(&sim.handle().stats());
            let herald_open = sim.handle().stats()["by_user_agent"][HERALD_UA]["watches_open"]
                .as_i64()
                .unwrap_or(0);
            if open.values().all(|n| *n == 1) && open.len() == kinds && herald_open == kinds as i64
            {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "kube-sim's open watches: {open:?} (herald's: {herald_open}); want one per kind ({kinds})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(via_herald);
        herald.stop().await;
        sim.shutdown().await;
    });
}

#[test]
fn kube_proxy_iptables_through_herald_writes_what_it_writes_against_the_apiserver() {
    through_herald_equals_direct(Mode::Iptables);
}

#[test]
fn kube_proxy_nftables_through_herald_writes_what_it_writes_against_the_apiserver() {
    through_herald_equals_direct(Mode::Nftables);
}

#[test]
fn twenty_kube_proxies_through_one_herald_cost_the_apiserver_one_watch_per_kind() {
    const PROXIES: usize = 20;
    let mode = Mode::Iptables;
    let Some(bin) = kube_proxy::kube_proxy_bin() else {
        return;
    };
    if !kube_proxy::can_run(mode.tools()) {
        return;
    }
    let a = Arc::new(kube_proxy::netns());
    let others: Arc<Vec<_>> = Arc::new((0..PROXIES).map(|_| kube_proxy::netns()).collect());
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_path = dir.path().to_path_buf();
    let others2 = others.clone();
    kube_proxy::run_in(a.name(), move || async move {
        let (others, dir) = (others2, dir_path);
        let sim = kube_proxy::start_sim(PROXIES).await;
        let herald = start_herald(&sim.url()).await;
        let face = face_addr(&herald);
        let nodes = kube_proxy::nodes(&sim, PROXIES);
        assert_eq!(
            nodes.len(),
            PROXIES,
            "kube-sim has a node for every kube-proxy"
        );
        let mut proxies = Vec::new();
        for (i, ns) in others.iter().enumerate() {
            let port = kube_proxy::bridge(ns.name(), face).await;
            let kc = kube_proxy::kubeconfig(&dir, &format!("p{i}"), port);
            proxies.push(
                Launch {
                    bin: &bin,
                    kubeconfig: &kc,
                    node: &nodes[i],
                    mode,
                    cluster_cidr: POD_CIDR,
                    verbosity: 2,
                    dir: &dir,
                }
                .start(ns.name()),
            );
        }
        // Each kube-proxy writes the Service chains herald simulate gives for its own node.
        let want: Vec<Vec<String>> = nodes
            .iter()
            .map(|n| simulated_service_chains(&sim, n, mode))
            .collect();
        assert!(
            want.iter().all(|w| !w.is_empty()),
            "Services with endpoints exist"
        );
        let start = Instant::now();
        let mut synced = [false; PROXIES];
        while !synced.iter().all(|s| *s) {
            for (i, (ns, p)) in others.iter().zip(proxies.iter_mut()).enumerate() {
                if synced[i] {
                    continue;
                }
                p.check_alive();
                let chains = kube_proxy::service_chains(&kube_proxy::ruleset(ns, mode), mode);
                synced[i] = chains == want[i];
                if !synced[i] && start.elapsed() > Duration::from_secs(180) {
                    panic!(
                        "kube-proxy {i} ({}) after 180 s: {}\nlog tail:\n{}",
                        nodes[i],
                        kube_proxy::diff("kube-proxy", &chains, "simulate", &want[i], 10),
                        p.log_tail(15)
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // kube-sim sees herald's one watch per kind and nothing of the twenty kube-proxies.
        let stats = sim.handle().stats();
        let open = kube_proxy::open_watches(&stats);
        let kinds = herald_server::DEFAULT_KUBE_KINDS.len();
        assert_eq!(
            open.len(),
            kinds,
            "kube-sim's open watches by resource: {open:?}"
        );
        assert!(
            open.values().all(|n| *n == 1),
            "one watch per kind: {open:?}"
        );
        let by_ua = stats["by_user_agent"].as_object().expect("by user agent");
        let watching: Vec<&String> = by_ua
            .iter()
            .filter(|(_, c)| c["watches_open"].as_i64().unwrap_or(0) > 0)
            .map(|(ua, _)| ua)
            .collect();
        assert_eq!(watching, vec![HERALD_UA], "only herald watches kube-sim");
        // herald serves the twenty: Services, EndpointSlices, their Node and ServiceCIDRs each.
        let metrics = {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, herald.shared().registry())
                .expect("metrics");
            out
        };
        eprintln!(
            "{PROXIES} kube-proxies synced through herald in {:?}; herald's downstream watches:\n{}",
            start.elapsed(),
            metrics
                .lines()
                .filter(|l| l.starts_with("herald_kube_watches_open"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        drop(proxies);
        herald.stop().await;
        sim.shutdown().await;
    });
    drop(others);
}

#[test]
fn mentions_finds_a_service_by_its_comment() {
    let svc = ("checkout".to_string(), "frontend".to_string());
    let line = |s: &str| vec![s.to_string()];
    assert!(mentions(
        &line(r#"nat -A KUBE-SEP-X -p tcp -m comment --comment "checkout/frontend" -j DNAT"#),
        &svc
    ));
    assert!(mentions(
        &line(
            r#"nat -A KUBE-SERVICES -m comment --comment "checkout/frontend:http cluster IP" -j X"#
        ),
        &svc
    ));
    assert!(!mentions(
        &line(r#"nat -A KUBE-SEP-X -m comment --comment "checkout/frontend-2" -j X"#),
        &svc
    ));
    assert!(!mentions(
        &line(r#"nat -A KUBE-SEP-X -m comment --comment "xcheckout/frontend" -j X"#),
        &svc
    ));
}
