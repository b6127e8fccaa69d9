//! client-go shared informers as judges of herald's Kubernetes API face: `informer-judge`
//! (peers/cmd/informer-judge, k8s.io/client-go v0.37.2) asking for JSON and for protobuf, with
//! WatchList on and off, through one herald and through two tiers (kube-sim → herald → herald), keeps
//! stores equal to kube-sim's state — every key at kube-sim's resourceVersion, every object hashing
//! as the reference judge (JSON, LIST+WATCH, straight on kube-sim) sees it — after churn and each
//! fault kube-sim injects (dropped watches, compaction with 410s, restarts refusing and answering
//! 503, 429 bursts, slow watch delivery), and after herald itself restarts on the same port.
//!
//! WatchList judges must sync by WatchList (watches with sendInitialEvents=true and no LIST: a
//! server error would make client-go fall back to LIST+WATCH), the others by LIST+WATCH.
//!
//! NB: everything listens and dials on 127.0.0.1; the cluster's addresses are on 127.0.0.0/8 and
//! nothing dials them.

#[path = "peers/harness.rs"]
mod peers;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use herald_server::{Herald, KubeApiOptions, KubeServeOptions, ServeOptions};
use kube_sim::{Fault, Kind, Sim};
use peers::cluster::{s, start_sim};
use peers::golang::{self, ContentType, InformerJudge, JudgeOptions, Report};
use peers::process::free_loopback_port;

/// How long the judges get to converge after churn stopped and a fault cleared.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(90);

/// Churn while a fault is on: events per second.
const CHURN: f64 = 40.0;

/// What each judge watches, and kube-sim's kind for each.
const KINDS: [(&str, Kind); 6] = [
    ("pods", Kind::Pod),
    ("services", Kind::Service),
    ("endpoints", Kind::Endpoints),
    ("endpointslices", Kind::EndpointSlice),
    ("nodes", Kind::Node),
    ("namespaces", Kind::Namespace),
];

fn kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
    )
}

/// herald with no jobs and its face on `face` (the default kinds), upstream at `upstream`.
async fn start_herald(upstream: &str, face: SocketAddr) -> Herald {
    let (resources, _) = herald_server::kube_kinds(&[]).expect("default kinds");
    let herald = Herald::start(
        vec![],
        kube::Config::new(upstream.parse().expect("upstream url")),
        ServeOptions {
            kube: Some(KubeServeOptions::plain(
                face,
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
    tokio::time::timeout(Duration::from_secs(30), herald.ready())
        .await
        .expect("herald syncs within 30 s");
    herald
}

/// kube-sim's state: kind → key → resourceVersion.
fn sim_state(sim: &Sim) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (name, kind) in KINDS {
        let objs = sim
            .handle()
            .objects_json(kind)
            .into_iter()
            .map(|o| {
                let ns = s(&o, "/metadata/namespace");
                let n = s(&o, "/metadata/name");
                let key = if ns.is_empty() {
                    n.to_string()
                } else {
                    format!("{ns}/{n}")
                };
                (key, s(&o, "/metadata/resourceVersion").to_string())
            })
            .collect();
        out.insert(name.to_string(), objs);
    }
    out
}

struct Judged {
    judge: InformerJudge,
    opts: JudgeOptions,
}

/// Polls until every judge has synced and holds kube-sim's state (and the reference judge's hashes,
/// the reference being `judges[0]`); panics with what differs after [`CONVERGE_TIMEOUT`]. Returns
/// each judge's last report.
async fn converge(sim: &Sim, judges: &mut [Judged], after: &str) -> Vec<Report> {
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let want = sim_state(sim);
        let mut problems = Vec::new();
        let mut reports = Vec::new();
        for j in judges.iter_mut() {
            match j.judge.report().await {
                Ok(r) => reports.push(Some(r)),
                Err(e) => {
                    problems.push(e);
                    reports.push(None);
                }
            }
        }
        let reference = reports[0].as_ref().map(|r| r.kinds.clone());
        for (j, r) in judges.iter().zip(&reports) {
            let Some(r) = r else { continue };
            if !r.synced {
                problems.push(format!("{}: not synced", j.judge.name));
            }
            let before = problems.len();
            if r.watch_list != j.opts.watch_list {
                problems.push(format!(
                    "{}: client-go's WatchListClient is {}, wanted {}",
                    j.judge.name, r.watch_list, j.opts.watch_list
                ));
            }
            problems.extend(golang::store_problems(
                &j.judge.name,
                "kube-sim",
                &r.kinds,
                &want,
                reference.as_ref(),
            ));
            if problems.len() > before {
                problems.push(format!(
                    "{}: requests so far {:?}",
                    j.judge.name, r.requests
                ));
            }
        }
        if problems.is_empty() {
            return reports.into_iter().map(|r| r.expect("checked")).collect();
        }
        if tokio::time::Instant::now() >= deadline {
            for j in judges.iter() {
                eprintln!(
                    "--- {} log, last 30 lines ---\n{}",
                    j.judge.name,
                    golang::tail(&j.judge.log_text(), 30)
                );
            }
            panic!(
                "the informers did not converge on kube-sim's state within {CONVERGE_TIMEOUT:?} after {after}:\n{}",
                problems.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Each fault kube-sim injects, as (what, faults to inject, how long churn runs with it on before
/// it is cleared).
fn faults() -> Vec<(&'static str, Vec<Fault>)> {
    vec![
        ("dropped watches", vec![Fault::CloseWatches]),
        (
            "compaction (410 on resumption)",
            vec![Fault::Compact, Fault::CloseWatches],
        ),
        (
            "a restart refusing connections",
            vec![Fault::Restart {
                duration_ms: 2_000,
                refuse: true,
            }],
        ),
        (
            "a restart answering 503",
            vec![Fault::Restart {
                duration_ms: 2_000,
                refuse: false,
            }],
        ),
        (
            "a 429 burst",
            vec![
                Fault::Errors {
                    code: 429,
                    fraction: 0.5,
                    retry_after_seconds: 1,
                },
                Fault::CloseWatches,
            ],
        ),
        (
            "slow watch delivery",
            vec![Fault::WatchDelay { delay_ms: 400 }],
        ),
    ]
}

/// Runs churn with each fault on for a few seconds, then stops churn, clears the fault and waits for
/// convergence.
async fn through_every_fault(sim: &Sim, judges: &mut [Judged]) {
    for (what, faults) in faults() {
        sim.handle().set_churn(CHURN);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        for f in faults {
            sim.handle().fault(f).expect("a valid fault");
        }
        tokio::time::sleep(Duration::from_millis(3_000)).await;
        sim.handle().fault(Fault::Clear).expect("clear");
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        sim.handle().set_churn(0.0);
        eprintln!("converging after {what}");
        converge(sim, judges, &format!("churn and {what}")).await;
    }
}

fn opts(content: ContentType, watch_list: bool) -> JudgeOptions {
    JudgeOptions {
        content,
        watch_list,
        label_selector: String::new(),
        field_selector: String::new(),
        namespace: String::new(),
        kinds: KINDS.iter().map(|(k, _)| *k).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn informers_through_herald_tiers_keep_kube_sims_state_through_churn_and_faults() {
    let Some(bin) = golang::find("informer-judge") else {
        return;
    };
    let sim = start_sim(peers_spec(), 31).await;
    let face1: SocketAddr = format!("127.0.0.1:{}", free_loopback_port())
        .parse()
        .expect("addr");
    let herald1 = start_herald(&sim.url(), face1).await;
    let url1 = herald1.kube_url().expect("face on");
    let herald2 = start_herald(&url1, "127.0.0.1:0".parse().expect("addr")).await;
    let url2 = herald2.kube_url().expect("face on");

    // judges[0] is the reference: plain JSON LIST+WATCH on kube-sim itself.
    let mut plan = vec![
        (
            "kube-sim json list+watch",
            sim.url(),
            opts(ContentType::Json, false),
        ),
        (
            "kube-sim json watchlist",
            sim.url(),
            opts(ContentType::Json, true),
        ),
    ];
    for (tier, url) in [("herald", &url1), ("herald→herald", &url2)] {
        for content in [ContentType::Json, ContentType::Protobuf] {
            for wl in [false, true] {
                let name = format!(
                    "{tier} {} {}",
                    if content == ContentType::Json {
                        "json"
                    } else {
                        "protobuf"
                    },
                    if wl { "watchlist" } else { "list+watch" }
                );
                plan.push((
                    Box::leak(name.into_boxed_str()),
                    url.clone(),
                    opts(content, wl),
                ));
            }
        }
    }
    let mut judges = Vec::new();
    for (name, url, o) in plan {
        let judge = InformerJudge::start(&bin, name, &kubeconfig(&url), &o).await;
        judges.push(Judged { judge, opts: o });
    }
    let reports = converge(&sim, &mut judges, "the first sync").await;
    golang::assert_synced_as_configured(
        judges
            .iter()
            .map(|j| (j.judge.name.as_str(), j.opts.watch_list)),
        &reports,
        KINDS.len(),
    );

    through_every_fault(&sim, &mut judges).await;
    herald2.stop().await;
    herald1.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn informers_behind_a_restarted_herald_relist_and_converge() {
    let Some(bin) = golang::find("informer-judge") else {
        return;
    };
    let sim = start_sim(peers_spec(), 33).await;
    let face1: SocketAddr = format!("127.0.0.1:{}", free_loopback_port())
        .parse()
        .expect("addr");
    let herald1 = start_herald(&sim.url(), face1).await;
    let url1 = herald1.kube_url().expect("face on");
    let herald2 = start_herald(&url1, "127.0.0.1:0".parse().expect("addr")).await;
    let url2 = herald2.kube_url().expect("face on");
    let plan = [
        (
            "kube-sim json list+watch",
            sim.url(),
            opts(ContentType::Json, false),
        ),
        (
            "herald json list+watch",
            url1.clone(),
            opts(ContentType::Json, false),
        ),
        (
            "herald protobuf watchlist",
            url1.clone(),
            opts(ContentType::Protobuf, true),
        ),
        (
            "herald→herald json watchlist",
            url2.clone(),
            opts(ContentType::Json, true),
        ),
    ];
    let mut judges = Vec::new();
    for (name, url, o) in plan {
        let judge = InformerJudge::start(&bin, name, &kubeconfig(&url), &o).await;
        judges.push(Judged { judge, opts: o });
    }
    let before: Vec<u64> = converge(&sim, &mut judges, "the first sync")
        .await
        .iter()
        .map(|r| r.requests.values().sum())
        .collect();
    // herald restarts on the same port with churn going on: the judges behind it reconnect (and
    // relist when their version is gone) and converge; the tier behind it too.
    sim.handle().set_churn(CHURN);
    herald1.stop().await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let herald1 = start_herald(&sim.url(), face1).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    sim.handle().set_churn(0.0);
    let after = converge(&sim, &mut judges, "herald's restart").await;
    // The judges on the restarted herald had to reconnect; the one behind the second tier stays
    // connected (herald → herald relists upstream and passes the difference down as events).
    for ((j, r), b) in judges.iter().zip(&after).zip(&before) {
        if !j.judge.name.starts_with("herald ") {
            continue;
        }
        let now: u64 = r.requests.values().sum();
        assert!(
            now > *b,
            "{} made no new request after herald restarted: {:?}",
            j.judge.name,
            r.requests
        );
    }
    herald2.stop().await;
    herald1.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn selected_informers_through_herald_tiers_hold_what_they_hold_on_kube_sim() {
    let Some(bin) = golang::find("informer-judge") else {
        return;
    };
    let sim = start_sim(peers_spec(), 32).await;
    let pod = sim.handle().objects_json(Kind::Pod)[0].clone();
    let ns = s(&pod, "/metadata/namespace").to_string();
    let herald1 = start_herald(&sim.url(), "127.0.0.1:0".parse().expect("addr")).await;
    let url1 = herald1.kube_url().expect("face on");
    let herald2 = start_herald(&url1, "127.0.0.1:0".parse().expect("addr")).await;
    let url2 = herald2.kube_url().expect("face on");
    let selected = |content, watch_list| JudgeOptions {
        content,
        watch_list,
        label_selector: "app".into(),
        field_selector: format!("metadata.namespace={ns}"),
        namespace: String::new(),
        kinds: vec!["pods", "services", "endpoints", "endpointslices"],
    };
    // The namespaced path (/api/v1/namespaces/NS/pods), as Prometheus's `namespaces: names` reads.
    let namespaced = |content, watch_list| JudgeOptions {
        content,
        watch_list,
        label_selector: "app".into(),
        field_selector: String::new(),
        namespace: ns.clone(),
        kinds: vec!["pods", "services", "endpoints", "endpointslices"],
    };
    let plan = [
        (
            "kube-sim selected json list+watch",
            sim.url(),
            selected(ContentType::Json, false),
        ),
        (
            "herald selected protobuf watchlist",
            url1.clone(),
            selected(ContentType::Protobuf, true),
        ),
        (
            "herald→herald selected json watchlist",
            url2.clone(),
            selected(ContentType::Json, true),
        ),
        (
            "herald→herald selected protobuf list+watch",
            url2.clone(),
            selected(ContentType::Protobuf, false),
        ),
        (
            "herald namespaced json list+watch",
            url1.clone(),
            namespaced(ContentType::Json, false),
        ),
        (
            "herald→herald namespaced protobuf watchlist",
            url2.clone(),
            namespaced(ContentType::Protobuf, true),
        ),
        (
            "kube-sim namespaced json watchlist",
            sim.url(),
            namespaced(ContentType::Json, true),
        ),
    ];
    let mut judges = Vec::new();
    for (name, url, o) in plan {
        judges.push(Judged {
            judge: InformerJudge::start(&bin, name, &kubeconfig(&url), &o).await,
            opts: o,
        });
    }
    for round in [
        "the first sync",
        "churn",
        "churn again",
        "churn a third time",
    ] {
        if round != "the first sync" {
            sim.handle().set_churn(CHURN);
            sim.handle().fault(Fault::CloseWatches).expect("fault");
            tokio::time::sleep(Duration::from_millis(4_000)).await;
            sim.handle().set_churn(0.0);
        }
        converge_selected(&sim, &mut judges, &ns, round).await;
    }
    herald2.stop().await;
    herald1.stop().await;
}

/// Polls until every selected judge holds exactly what the reference (`judges[0]`, on kube-sim)
/// holds, each object at kube-sim's version, and the reference holds objects only from `ns`, some
/// of them.
async fn converge_selected(sim: &Sim, judges: &mut [Judged], ns: &str, after: &str) {
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let want = sim_state(sim);
        let mut problems = Vec::new();
        let mut reports = Vec::new();
        for j in judges.iter_mut() {
            match j.judge.report().await {
                Ok(r) => reports.push(r),
                Err(e) => problems.push(e),
            }
        }
        if problems.is_empty() {
            let reference = &reports[0].kinds;
            for (kind, objs) in reference {
                if objs.is_empty() {
                    problems.push(format!("the reference holds no {kind}"));
                }
                if objs.len() == want[kind].len() {
                    problems.push(format!("the selectors select every {kind}"));
                }
                for (k, o) in objs {
                    if !k.starts_with(&format!("{ns}/")) || want[kind].get(k) != Some(&o.rv) {
                        problems.push(format!(
                            "the reference holds {kind} {k} at {}, kube-sim {:?}",
                            o.rv,
                            want[kind].get(k)
                        ));
                    }
                }
            }
            for (j, r) in judges.iter().zip(&reports).skip(1) {
                if !r.synced {
                    problems.push(format!("{}: not synced", j.judge.name));
                }
                if r.kinds != *reference {
                    problems.push(format!(
                        "{} holds otherwise than the reference on kube-sim",
                        j.judge.name
                    ));
                }
            }
        }
        if problems.is_empty() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "the selected informers did not converge within {CONVERGE_TIMEOUT:?} after {after}:\n{}",
                problems.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A small cluster on loopback addresses.
fn peers_spec() -> kube_sim::generate::ClusterSpec {
    peers::cluster::loopback_spec()
}
