//! client-go shared informers (`informer-judge`, k8s.io/client-go v0.37.2) on a real control plane
//! (etcd 3.7, kube-apiserver and kube-controller-manager v1.37.2, `peers/build`): the reference judge
//! runs straight on kube-apiserver (JSON, LIST+WATCH); the others read herald's Kubernetes API face
//! asking for JSON and for protobuf, with WatchList on and off, through one herald and through two
//! tiers (kube-apiserver → herald → herald). Every judge must hold what kube-apiserver holds — every
//! key at its resourceVersion, every object hashing as the reference sees it — after the first sync,
//! after churn written through the API, and after each fault of the real thing:
//!
//! - kube-apiserver SIGKILLed and started again, churn written as soon as it is back;
//! - etcd compacted and kube-apiserver restarted, so that herald's watches resume from versions that
//!   are gone (410): herald relists. NB: with the watch cache, a restart alone already does it for
//!   every kind whose last version is older than etcd's revision (the new cache starts there), and
//!   compaction alone does nothing a watcher sees;
//! - herald's own user rejected by API Priority and Fairness (a FlowSchema sending it to a priority
//!   level with no seats, rejecting): after its connections are cut (a relay between herald and the
//!   apiserver), every list and watch herald makes gets 429; herald serves its last good state
//!   marked stale, shows the 429 on its status, and recovers once the FlowSchema is deleted. NB: a
//!   level with no seats still runs a request when nothing of it runs (`canAccommodateSeatsLocked`
//!   in k8s.io/apiserver's queueset), so a second user's watch that never finishes initializing
//!   (`Jail`) keeps the level busy;
//! - etcd stopped for 30 s, kube-apiserver killed and started again halfway: herald serves its last
//!   good state throughout and equals kube-apiserver again once etcd is back. NB: until the restart
//!   herald is not stale, rightly: kube-apiserver keeps its watches open from the watch cache and
//!   nothing herald asks fails (a new watch is served too); the restarted apiserver cannot reach etcd
//!   (it exits), and herald is marked stale.
//!
//! herald reads the apiserver as its own user, bound to a read-only ClusterRole made through the API.
//! The tests of this file run one at a time (each starts its own control plane).
//!
//! NB: everything listens and dials on 127.0.0.1; the cluster's addresses are data nothing dials.

#[path = "peers/harness.rs"]
mod peers;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herald_server::{Herald, KubeApiOptions, KubeServeOptions, ServeOptions};
use http::{Method, StatusCode};
use kube_sim::churn::Churn;
use kube_sim::generate::{ClusterSpec, generate};
use kube_sim::peers::controlplane::{ADMIN_TOKEN, ControlPlane, Options};
use peers::golang::{self, ContentType, InformerJudge, JudgeOptions, Report, Stores};
use serde_json::{Value, json};

/// How long the judges get to converge after churn stopped and a fault cleared.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(90);

/// How long herald gets to become ready, and to notice a fault.
const HERALD_TIMEOUT: Duration = Duration::from_secs(60);

/// What each judge watches, with the apiserver's collection path of each.
const KINDS: [(&str, &str); 6] = [
    ("pods", "/api/v1/pods"),
    ("services", "/api/v1/services"),
    ("endpoints", "/api/v1/endpoints"),
    ("endpointslices", "/apis/discovery.k8s.io/v1/endpointslices"),
    ("nodes", "/api/v1/nodes"),
    ("namespaces", "/api/v1/namespaces"),
];

/// herald's own user (a line of the token file).
const HERALD_TOKEN: &str = "herald-test-herald-token";
const HERALD_USER: &str = "herald-user";

/// A second user, whose one stuck watch keeps the priority level that rejects herald busy.
const JAILER_TOKEN: &str = "herald-test-jailer-token";
const JAILER_USER: &str = "herald-jailer";

/// The priority level and FlowSchema that reject herald's user.
const REJECT: &str = "herald-test-reject";
/// The FlowSchema sending the jailer to the same priority level.
const JAILER: &str = "herald-test-jailer";
/// The namespace of the jailer's ConfigMaps.
const JAIL_NS: &str = "herald-jail";

/// The tests of this file one at a time: each runs a whole control plane on the two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// kind → `namespace/name` → resourceVersion.
type State = BTreeMap<String, BTreeMap<String, String>>;

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A control plane loaded with `small` (`seed`), the controllers settled, herald's user (and the
/// jailer) bound to a read-only ClusterRole; and churn for it. `None` when the peers are not built.
async fn setup(seed: u64) -> Option<(ControlPlane, Churn, PathBuf)> {
    init_tracing();
    let bin = golang::find("informer-judge")?;
    let spec = ClusterSpec::small();
    let cp = ControlPlane::start(Options {
        service_cidr: spec.service_cidr.to_string(),
        tokens: vec![
            format!("{HERALD_TOKEN},{HERALD_USER},{HERALD_USER}-uid,\"herald-group\""),
            format!("{JAILER_TOKEN},{JAILER_USER},{JAILER_USER}-uid,\"herald-group\""),
        ],
        ..Options::default()
    })
    .await?
    .expect("the control plane starts");
    let cluster = generate(&spec, seed);
    let started = Instant::now();
    let n = cp.load(&cluster).await.expect("the cluster loads");
    eprintln!("loaded {n} objects in {:?}", started.elapsed());
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the EndpointSlice controller settles");
    create(
        &cp,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "herald-read"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
        }),
    )
    .await;
    create(
        &cp,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "herald-read"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "herald-read"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": HERALD_USER},
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": JAILER_USER},
            ],
        }),
    )
    .await;
    Some((cp, Churn::new(seed, &cluster), bin))
}

/// POSTs `object` to `collection` as the admin.
async fn create(cp: &ControlPlane, collection: &str, object: Value) {
    let (code, body) = cp
        .request(
            Method::POST,
            collection,
            Some(("application/json", object.to_string().into_bytes())),
        )
        .await
        .expect("POST");
    assert!(
        code.is_success(),
        "POST {collection}: {code}: {}",
        String::from_utf8_lossy(&body)
    );
}

/// DELETEs `path` as the admin.
async fn delete(cp: &ControlPlane, path: &str) {
    let (code, body) = cp
        .request(Method::DELETE, path, None)
        .await
        .expect("DELETE");
    assert!(
        code.is_success(),
        "DELETE {path}: {code}: {}",
        String::from_utf8_lossy(&body)
    );
}

/// `n` churn events written through the API.
async fn churn(cp: &ControlPlane, churn: &mut Churn, n: usize) {
    let started = Instant::now();
    cp.apply(churn.next_events(n)).await.expect("churn applies");
    eprintln!(
        "{n} churn events through the API in {:?}",
        started.elapsed()
    );
}

/// A list's items by `namespace/name`, with their resourceVersions.
fn keys_and_versions(list: &Value) -> BTreeMap<String, String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let m = &o["metadata"];
            let name = m["name"].as_str().unwrap_or_default();
            let key = match m["namespace"].as_str() {
                Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
                _ => name.to_string(),
            };
            (
                key,
                m["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// What kube-apiserver holds (a consistent list of each kind, as the admin).
async fn apiserver_state(cp: &ControlPlane) -> Result<State, String> {
    let mut out = State::new();
    for (kind, path) in KINDS {
        let list = cp.get_json(path).await.map_err(|e| format!("{e:#}"))?;
        out.insert(kind.to_string(), keys_and_versions(&list));
    }
    Ok(out)
}

/// What herald's face at `url` serves.
async fn face_state(http: &reqwest::Client, url: &str) -> Result<State, String> {
    let mut out = State::new();
    for (kind, path) in KINDS {
        let resp = http
            .get(format!("{url}{path}"))
            .send()
            .await
            .map_err(|e| format!("GET {url}{path}: {e}"))?;
        if resp.status() != StatusCode::OK {
            return Err(format!("GET {url}{path}: {}", resp.status()));
        }
        let list: Value = resp
            .json()
            .await
            .map_err(|e| format!("GET {url}{path}: {e}"))?;
        out.insert(kind.to_string(), keys_and_versions(&list));
    }
    Ok(out)
}

/// herald with no jobs and its face on a free loopback port (the default kinds).
async fn start_herald(upstream: kube::Config) -> Herald {
    let (resources, _) = herald_server::kube_kinds(&[]).expect("default kinds");
    let herald = Herald::start(
        vec![],
        upstream,
        ServeOptions {
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
    tokio::time::timeout(HERALD_TIMEOUT, herald.ready())
        .await
        .expect("herald syncs against its upstream");
    herald
}

/// herald on kube-apiserver as its own user, and a second tier on the first's face.
async fn start_tiers(cp: &ControlPlane) -> (Herald, Herald) {
    let started = Instant::now();
    let herald1 = start_herald(cp.kube_config(HERALD_TOKEN).expect("kube config")).await;
    let url1 = herald1.kube_url().expect("face on");
    let herald2 = start_herald(kube::Config::new(url1.parse().expect("url"))).await;
    eprintln!("both heralds ready in {:?}", started.elapsed());
    (herald1, herald2)
}

/// A kubeconfig for a server without credentials (herald's plain-http face).
fn face_kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
    )
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

struct Judged {
    judge: InformerJudge,
    opts: JudgeOptions,
    /// Reads herald's face (else kube-apiserver).
    on_herald: bool,
}

/// Starts the judges: the reference (`[0]`: JSON, LIST+WATCH, on kube-apiserver as the admin), then
/// each of `on_herald` as (tier name, face URL, content, WatchList).
async fn start_judges(
    bin: &Path,
    cp: &ControlPlane,
    direct: &[(ContentType, bool)],
    on_herald: &[(&str, &str, ContentType, bool)],
) -> Vec<Judged> {
    let name = |tier: &str, content: ContentType, wl: bool| {
        format!(
            "{tier} {} {}",
            if content == ContentType::Json {
                "json"
            } else {
                "protobuf"
            },
            if wl { "watchlist" } else { "list+watch" }
        )
    };
    let admin = cp.kubeconfig_yaml(ADMIN_TOKEN);
    let mut judges = Vec::new();
    for (content, wl) in std::iter::once(&(ContentType::Json, false)).chain(direct) {
        let o = opts(*content, *wl);
        let judge =
            InformerJudge::start(bin, &name("kube-apiserver", *content, *wl), &admin, &o).await;
        judges.push(Judged {
            judge,
            opts: o,
            on_herald: false,
        });
    }
    for (tier, url, content, wl) in on_herald {
        let o = opts(*content, *wl);
        let judge =
            InformerJudge::start(bin, &name(tier, *content, *wl), &face_kubeconfig(url), &o).await;
        judges.push(Judged {
            judge,
            opts: o,
            on_herald: true,
        });
    }
    judges
}

/// Every combination through one herald (`url1`) and through two (`url2`).
fn every_combination<'a>(
    url1: &'a str,
    url2: &'a str,
) -> Vec<(&'a str, &'a str, ContentType, bool)> {
    let mut out = Vec::new();
    for (tier, url) in [("herald", url1), ("herald→herald", url2)] {
        for content in [ContentType::Json, ContentType::Protobuf] {
            for wl in [false, true] {
                out.push((tier, url, content, wl));
            }
        }
    }
    out
}

/// The keys and versions of a judge's stores.
fn versions(stores: &Stores) -> State {
    stores
        .iter()
        .map(|(kind, objs)| {
            (
                kind.clone(),
                objs.iter()
                    .map(|(k, o)| (k.clone(), o.rv.clone()))
                    .collect(),
            )
        })
        .collect()
}

/// Polls until every judge has synced and holds kube-apiserver's state (and the reference judge's
/// hashes), and every herald's face serves that state; panics with what differs after
/// [`CONVERGE_TIMEOUT`]. Returns each judge's last report.
async fn converge(
    cp: &ControlPlane,
    heralds: &[&Herald],
    judges: &mut [Judged],
    after: &str,
) -> Vec<Report> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("http client");
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let mut problems = Vec::new();
        let want = match apiserver_state(cp).await {
            Ok(w) => w,
            Err(e) => {
                problems.push(format!("kube-apiserver: {e}"));
                State::new()
            }
        };
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
        if problems.is_empty() {
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
                    "kube-apiserver",
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
            for (i, h) in heralds.iter().enumerate() {
                let url = h.kube_url().expect("face on");
                match face_state(&http, &url).await {
                    Ok(s) if s == want => {}
                    Ok(_) => problems.push(format!("herald {i}'s face serves another state")),
                    Err(e) => problems.push(format!("herald {i}'s face: {e}")),
                }
            }
        }
        if problems.is_empty() {
            let counts: BTreeMap<_, _> = want.iter().map(|(k, v)| (k.as_str(), v.len())).collect();
            eprintln!(
                "converged after {after} in {:?}: {counts:?}",
                started.elapsed()
            );
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
            for (i, h) in heralds.iter().enumerate() {
                eprintln!("--- herald {i}: {}", upstream_summary(h));
            }
            panic!(
                "the informers did not converge on kube-apiserver's state within {CONVERGE_TIMEOUT:?} after {after}:\n{}",
                problems.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// herald's metrics, as `/metrics` shows them.
fn metrics_text(herald: &Herald) -> String {
    let mut s = String::new();
    prometheus_client::encoding::text::encode(&mut s, herald.shared().registry())
        .expect("encode herald's metrics");
    s
}

/// The sum of every series of `name` (any labels) in `metrics`.
fn sum_of(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// The kinds herald's status shows as stale (failing upstream; the last good state served).
fn stale_kinds(herald: &Herald) -> Vec<String> {
    herald_server::status::Status::collect(herald.shared())
        .upstream
        .into_iter()
        .filter(|u| u.health == "stale")
        .map(|u| u.kind)
        .collect()
}

/// Each kind's last upstream failure, as herald's status shows it.
fn last_errors(herald: &Herald) -> Vec<Option<String>> {
    herald_server::status::Status::collect(herald.shared())
        .upstream
        .into_iter()
        .map(|u| u.last_error)
        .collect()
}

/// Each kind's health, relists and errors, for messages.
fn upstream_summary(herald: &Herald) -> String {
    herald_server::status::Status::collect(herald.shared())
        .upstream
        .iter()
        .map(|u| {
            format!(
                "{} {} (relists {}, errors {}, watches {})",
                u.kind, u.health, u.relists, u.errors, u.watches_started
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Polls `check` every 200 ms until it holds; panics with `what` after `timeout`.
async fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// GET `path` as herald's user: the status code.
async fn as_herald(cp: &ControlPlane, path: &str) -> Option<StatusCode> {
    use http_body_util::BodyExt as _;
    let mut config = cp.kube_config(HERALD_TOKEN).ok()?;
    // A 429 is the answer wanted here, not something to retry.
    config.default_retry = false;
    let client = kube::Client::try_from(config).ok()?;
    let req = http::Request::get(path)
        .body(kube::client::Body::empty())
        .ok()?;
    let res = client.send(req).await.ok()?;
    let code = res.status();
    let _ = res.into_body().collect().await;
    Some(code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn informers_through_herald_tiers_equal_informers_on_kube_apiserver_through_churn_restarts_and_compaction()
 {
    let _serial = SERIAL.lock().await;
    let test_started = Instant::now();
    let Some((mut cp, mut ch, bin)) = setup(41).await else {
        return;
    };
    let (herald1, herald2) = start_tiers(&cp).await;
    let (url1, url2) = (
        herald1.kube_url().expect("face on"),
        herald2.kube_url().expect("face on"),
    );
    let mut judges = start_judges(
        &bin,
        &cp,
        &[(ContentType::Json, true)],
        &every_combination(&url1, &url2),
    )
    .await;
    let heralds = [&herald1, &herald2];
    let reports = converge(&cp, &heralds, &mut judges, "the first sync").await;
    golang::assert_synced_as_configured(
        judges
            .iter()
            .map(|j| (j.judge.name.as_str(), j.opts.watch_list)),
        &reports,
        KINDS.len(),
    );

    churn(&cp, &mut ch, 80).await;
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle after churn");
    converge(&cp, &heralds, &mut judges, "churn").await;

    // (a) kube-apiserver SIGKILLed and started again; churn as soon as it is back.
    churn(&cp, &mut ch, 20).await;
    let relists = sum_of(&metrics_text(&herald1), "herald_upstream_relists_total");
    cp.restart_apiserver()
        .await
        .expect("kube-apiserver restarts");
    churn(&cp, &mut ch, 60).await;
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle after the restart");
    converge(&cp, &heralds, &mut judges, "a kube-apiserver restart").await;
    eprintln!(
        "after the restart, herald relisted {} kinds: {}",
        sum_of(&metrics_text(&herald1), "herald_upstream_relists_total") - relists,
        upstream_summary(&herald1)
    );

    // (b) etcd compacted, then kube-apiserver restarted: herald's watches resume from versions
    // compacted away, get 410 and relist.
    churn(&cp, &mut ch, 40).await;
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle");
    let relists = sum_of(&metrics_text(&herald1), "herald_upstream_relists_total");
    let rev = cp.compact().await.expect("etcd compacts");
    eprintln!("etcd compacted at revision {rev}");
    cp.restart_apiserver()
        .await
        .expect("kube-apiserver restarts");
    churn(&cp, &mut ch, 40).await;
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle after the restart");
    converge(&cp, &heralds, &mut judges, "compaction and a restart").await;
    let relisted = sum_of(&metrics_text(&herald1), "herald_upstream_relists_total") - relists;
    eprintln!(
        "after compaction, herald relisted {relisted} kinds: {}",
        upstream_summary(&herald1)
    );
    assert!(
        relisted >= 1.0,
        "herald resumed from compacted versions without relisting: {}",
        upstream_summary(&herald1)
    );
    herald2.stop().await;
    herald1.stop().await;
    eprintln!("test done in {:?}", test_started.elapsed());
}

/// A TCP relay in front of kube-apiserver that can cut every connection through it, as a load
/// balancer or a conntrack flush does: the TLS session is herald's with the apiserver's.
struct Relay {
    url: String,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// A relay to `upstream` (`https://HOST:PORT`) on a free loopback port.
    async fn start(upstream: &str) -> Relay {
        let to = upstream
            .strip_prefix("https://")
            .expect("an https URL")
            .to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the relay");
        let url = format!("https://{}", listener.local_addr().expect("addr"));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let held = conns.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let to = to.clone();
                let relayed = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                let mut held = held.lock().expect("relay lock");
                held.retain(|h| !h.is_finished());
                held.push(relayed.abort_handle());
            }
        });
        Relay { url, conns, accept }
    }

    /// Drops every connection through the relay; returns how many were open.
    fn cut(&self) -> usize {
        let mut held = self.conns.lock().expect("relay lock");
        let open = held.iter().filter(|h| !h.is_finished()).count();
        for h in held.drain(..) {
            h.abort();
        }
        open
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// A watch of the jailer's ConfigMaps from resourceVersion 0 whose body is never read: its initial
/// events (megabytes) fill the socket, so the watch never finishes initializing, and API Priority
/// and Fairness counts it as executing in its priority level until it is dropped. With no seats in
/// the level, every other request of the level is then rejected (a level with no seats still admits
/// a request when nothing of it executes: `canAccommodateSeatsLocked` in k8s.io/apiserver's queueset).
struct Jail {
    _client: kube::Client,
    _watch: http::Response<kube::client::Body>,
}

impl Jail {
    /// `None` when the jailer's watch is refused (a jailer's watch from before still holds the level).
    async fn start(cp: &ControlPlane) -> Option<Jail> {
        let mut config = cp.kube_config(JAILER_TOKEN).expect("kube config");
        // Uncompressed, so the events fill the socket; a refusal returned, not retried.
        config.disable_compression = true;
        config.default_retry = false;
        let client = kube::Client::try_from(config).expect("client");
        let req = http::Request::get(format!(
            "/api/v1/namespaces/{JAIL_NS}/configmaps?watch=true&resourceVersion=0&timeoutSeconds=900"
        ))
        .body(kube::client::Body::empty())
        .expect("request");
        let watch = client.send(req).await.expect("the jailer's watch");
        if watch.status() == StatusCode::TOO_MANY_REQUESTS {
            return None;
        }
        assert_eq!(watch.status(), StatusCode::OK, "the jailer's watch");
        Some(Jail {
            _client: client,
            _watch: watch,
        })
    }
}

/// The ConfigMaps the jailer watches: more events, and more bytes, than the apiserver's watch
/// channel and the socket's buffers hold.
async fn fill_jail(cp: &ControlPlane) {
    create(
        cp,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": JAIL_NS}}),
    )
    .await;
    let filler = "x".repeat(512 * 1024);
    for i in 0..48 {
        create(
            cp,
            &format!("/api/v1/namespaces/{JAIL_NS}/configmaps"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("ballast-{i}")},
                   "data": {"ballast": filler}}),
        )
        .await;
    }
}

/// A priority level with no seats of its own and none to borrow, rejecting what it cannot run, and
/// FlowSchemas sending herald's user and the jailer to it.
async fn reject_herald(cp: &ControlPlane) {
    create(
        cp,
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": REJECT},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"}}},
        }),
    )
    .await;
    for (name, user, precedence) in [(REJECT, HERALD_USER, 50), (JAILER, JAILER_USER, 51)] {
        create(
            cp,
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
            json!({
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                "metadata": {"name": name},
                "spec": {
                    "priorityLevelConfiguration": {"name": REJECT},
                    "matchingPrecedence": precedence,
                    "distinguisherMethod": {"type": "ByUser"},
                    "rules": [{
                        "subjects": [{"kind": "User", "user": {"name": user}}],
                        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                           "clusterScope": true, "namespaces": ["*"]}],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }],
                },
            }),
        )
        .await;
    }
}

/// Deletes what [`reject_herald`] made.
async fn stop_rejecting(cp: &ControlPlane) {
    for name in [REJECT, JAILER] {
        delete(
            cp,
            &format!("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{name}"),
        )
        .await;
    }
    delete(
        cp,
        &format!("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/{REJECT}"),
    )
    .await;
}

/// Requests of herald's FlowSchema kube-apiserver rejected.
async fn rejected(cp: &ControlPlane) -> f64 {
    let metrics = cp.metrics().await.expect("kube-apiserver metrics");
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_flowcontrol_rejected_requests_total{")
                && l.contains(&format!("flow_schema=\"{REJECT}\""))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn herald_refused_by_priority_and_fairness_or_without_etcd_serves_its_last_state_and_recovers()
 {
    let _serial = SERIAL.lock().await;
    let test_started = Instant::now();
    let Some((mut cp, mut ch, bin)) = setup(43).await else {
        return;
    };
    // herald reaches the apiserver through a relay that can cut its connections.
    let relay = Relay::start(&cp.url).await;
    let mut upstream = cp.kube_config(HERALD_TOKEN).expect("kube config");
    upstream.cluster_url = relay.url.parse().expect("relay url");
    let herald1 = start_herald(upstream).await;
    let url1 = herald1.kube_url().expect("face on");
    let herald2 = start_herald(kube::Config::new(url1.parse().expect("url"))).await;
    let url2 = herald2.kube_url().expect("face on");
    let mut judges = start_judges(
        &bin,
        &cp,
        &[],
        &[
            ("herald", &url1, ContentType::Json, true),
            ("herald", &url1, ContentType::Protobuf, false),
            ("herald→herald", &url2, ContentType::Protobuf, true),
            ("herald→herald", &url2, ContentType::Json, false),
        ],
    )
    .await;
    let heralds = [&herald1, &herald2];
    let reports = converge(&cp, &heralds, &mut judges, "the first sync").await;
    golang::assert_synced_as_configured(
        judges
            .iter()
            .map(|j| (j.judge.name.as_str(), j.opts.watch_list)),
        &reports,
        KINDS.len(),
    );
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("http client");
    let kinds = herald1.shared().cache.ids().count();

    // (c) API Priority and Fairness rejects every request of herald's user.
    let started = Instant::now();
    fill_jail(&cp).await;
    reject_herald(&cp).await;
    eprintln!(
        "jail filled and FlowSchemas made in {:?}",
        started.elapsed()
    );
    let deadline = Instant::now() + HERALD_TIMEOUT;
    let jail = loop {
        // Until the apiserver has digested the new configuration, the jailer's watch may land in
        // another priority level: then herald's user is not rejected, and the jailer tries again.
        let jail = Jail::start(&cp).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let code = as_herald(&cp, "/api/v1/namespaces?limit=1").await;
        match jail {
            Some(jail) if code == Some(StatusCode::TOO_MANY_REQUESTS) => break jail,
            jail => drop(jail),
        }
        assert!(
            Instant::now() < deadline,
            "API Priority and Fairness never rejected herald's user: {code:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!("herald's user rejected after {:?}", started.elapsed());
    let rejected_before = rejected(&cp).await;
    let errors = sum_of(&metrics_text(&herald1), "herald_upstream_errors_total");
    // herald's watches are open, and APF judges a request when it starts: cutting herald's
    // connections makes it ask again.
    let cut = relay.cut();
    eprintln!("cut {cut} connections of herald's");
    wait_for("every kind of herald marked stale", HERALD_TIMEOUT, || {
        stale_kinds(&herald1).len() == kinds
    })
    .await;
    let last_good = face_state(&http, &url1).await.expect("herald's face");
    churn(&cp, &mut ch, 40).await;
    let deadline = Instant::now() + HERALD_TIMEOUT;
    loop {
        // Every kind's last failure, as the status page shows it, is kube-apiserver's 429, and each
        // was refused again after herald backed off.
        let refused = herald_server::status::Status::collect(herald1.shared())
            .upstream
            .iter()
            .filter(|u| {
                u.errors >= 3
                    && u.last_error
                        .as_deref()
                        .is_some_and(|e| e.contains(": 429 TooManyRequests: "))
            })
            .count();
        let now = rejected(&cp).await;
        if refused == kinds && now > rejected_before {
            eprintln!(
                "kube-apiserver rejected {} requests of herald's; herald: {}",
                now - rejected_before,
                upstream_summary(&herald1)
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "herald's kinds were not all refused with 429 (rejected by kube-apiserver: {}): {:?}",
            now - rejected_before,
            last_errors(&herald1)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let m = metrics_text(&herald1);
    assert_eq!(
        sum_of(&m, "herald_upstream_stale"),
        kinds as f64,
        "herald_upstream_stale is 1 for every kind"
    );
    assert!(sum_of(&m, "herald_upstream_errors_total") > errors);
    assert_eq!(
        stale_kinds(&herald1).len(),
        kinds,
        "herald stays stale while it is rejected: {}",
        upstream_summary(&herald1)
    );
    // Meanwhile herald serves what it held, though the apiserver moved on, and so does the second
    // tier, and so do the informers reading them.
    assert_ne!(
        apiserver_state(&cp).await.expect("kube-apiserver state"),
        last_good,
        "churn changed nothing"
    );
    for url in [&url1, &url2] {
        assert_eq!(
            face_state(&http, url).await.expect("herald's face"),
            last_good,
            "{url} serves herald's last good state"
        );
    }
    for j in judges.iter_mut().filter(|j| j.on_herald) {
        let r = j.judge.report().await.expect("a report");
        assert_eq!(
            versions(&r.kinds),
            last_good,
            "{} holds herald's last good state",
            j.judge.name
        );
    }
    drop(jail);
    stop_rejecting(&cp).await;
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle");
    converge(
        &cp,
        &heralds,
        &mut judges,
        "429s from API Priority and Fairness",
    )
    .await;
    wait_for("herald no longer stale", HERALD_TIMEOUT, || {
        stale_kinds(&herald1).is_empty()
    })
    .await;

    // (d) etcd stopped for 30 s; kube-apiserver restarted halfway through.
    let last_good = face_state(&http, &url1).await.expect("herald's face");
    cp.stop_etcd();
    let stopped = Instant::now();
    let mut stale_seen: Vec<(bool, String)> = Vec::new();
    let mut restarted = false;
    while stopped.elapsed() < Duration::from_secs(30) {
        if !restarted && stopped.elapsed() >= Duration::from_secs(15) {
            cp.apiserver.kill();
            cp.apiserver.start().expect("kube-apiserver starts");
            restarted = true;
        }
        for k in stale_kinds(&herald1) {
            if !stale_seen.contains(&(restarted, k.clone())) {
                stale_seen.push((restarted, k));
            }
        }
        assert_eq!(
            face_state(&http, &url1).await.expect("herald's face"),
            last_good,
            "herald's face serves its last good state without etcd"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let before: Vec<&String> = stale_seen.iter().filter(|s| !s.0).map(|s| &s.1).collect();
    let after: Vec<&String> = stale_seen.iter().filter(|s| s.0).map(|s| &s.1).collect();
    eprintln!(
        "without etcd, stale kinds: {before:?} before kube-apiserver restarted, {after:?} after; {}",
        upstream_summary(&herald1)
    );
    assert_eq!(
        after.len(),
        kinds,
        "herald was not marked stale while kube-apiserver ran without etcd"
    );
    cp.start_etcd().await.expect("etcd starts again");
    if let Err(e) = cp.wait_ready().await {
        eprintln!("kube-apiserver did not outlive etcd's absence ({e:#}); starting it again");
        cp.restart_apiserver()
            .await
            .expect("kube-apiserver restarts");
    }
    churn(&cp, &mut ch, 40).await;
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle");
    converge(&cp, &heralds, &mut judges, "etcd stopped for 30 s").await;
    wait_for("herald no longer stale", HERALD_TIMEOUT, || {
        stale_kinds(&herald1).is_empty()
    })
    .await;
    herald2.stop().await;
    herald1.stop().await;
    eprintln!("test done in {:?}", test_started.elapsed());
}
