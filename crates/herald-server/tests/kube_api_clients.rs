//! Real kube-rs clients attached to herald's Kubernetes API instead of the apiserver: reflectors
//! shaped exactly like kube-proxy's informers (cmd/kube-proxy/app/server.go: Services and
//! EndpointSlices with `!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless`,
//! its own Node by `metadata.name`) and a plain pod reflector stay in sync with kube-sim through
//! upstream faults — compaction (410), a restart, dropped watches, 429s — without relisting from
//! herald, while kube-sim serves herald one watch per kind.

#[path = "support/kube.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Resource, ResourceExt};
use kube_sim::{Fault, Kind, Sim, SimConfig};
use serde_json::Value;

const PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
const HEADLESS: &str = "service.kubernetes.io/headless";
const KUBE_PROXY_SELECTOR: &str =
    "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";

/// `ns/name → resourceVersion` of the objects a selector admits.
type Versions = BTreeMap<String, String>;

fn sim_versions(sim: &Sim, kind: Kind, admit: impl Fn(&Value) -> bool) -> Versions {
    sim.handle()
        .objects_json(kind)
        .iter()
        .filter(|o| admit(o))
        .map(|o| {
            let m = &o["metadata"];
            (
                format!(
                    "{}/{}",
                    m["namespace"].as_str().unwrap_or(""),
                    m["name"].as_str().unwrap_or("")
                ),
                m["resourceVersion"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn kube_proxy_admits(o: &Value) -> bool {
    let labels = &o["metadata"]["labels"];
    labels.get(PROXY_NAME).is_none() && labels.get(HEADLESS).is_none()
}

fn reflected<K: Resource<DynamicType = ()> + Clone>(store: &reflector::Store<K>) -> Versions {
    store
        .state()
        .iter()
        .map(|o| {
            (
                format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()),
                o.resource_version().unwrap_or_default(),
            )
        })
        .collect()
}

/// Runs a reflector for `api` with `config` in the background; returns its store.
fn reflect<K>(api: Api<K>, config: watcher::Config) -> reflector::Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, config).default_backoff());
    tokio::spawn(stream.for_each(|_| async {}));
    reader
}

struct Clients {
    services: reflector::Store<Service>,
    slices: reflector::Store<EndpointSlice>,
    node: reflector::Store<Node>,
    pods: reflector::Store<Pod>,
    node_name: String,
}

impl Clients {
    /// What the stores hold next to what kube-sim holds, or None when they agree.
    fn difference(&self, sim: &Sim) -> Option<String> {
        let node_name = self.node_name.clone();
        let checks = [
            (
                "services",
                reflected(&self.services),
                sim_versions(sim, Kind::Service, kube_proxy_admits),
            ),
            (
                "endpointslices",
                reflected(&self.slices),
                sim_versions(sim, Kind::EndpointSlice, kube_proxy_admits),
            ),
            (
                "node",
                reflected(&self.node),
                sim_versions(sim, Kind::Node, |o| {
                    o["metadata"]["name"] == node_name.as_str()
                }),
            ),
            (
                "pods",
                reflected(&self.pods),
                sim_versions(sim, Kind::Pod, |_| true),
            ),
        ];
        let diffs: Vec<String> = checks
            .into_iter()
            .filter(|(_, got, want)| got != want)
            .map(|(what, got, want)| {
                let missing: Vec<_> = want.iter().filter(|(k, v)| got.get(*k) != Some(v)).take(3).collect();
                let extra: Vec<_> = got.iter().filter(|(k, v)| want.get(*k) != Some(v)).take(3).collect();
                format!("{what}: {} reflected, {} in kube-sim; missing/stale {missing:?}; extra/stale {extra:?}", got.len(), want.len())
            })
            .collect();
        (!diffs.is_empty()).then(|| diffs.join("\n"))
    }

    async fn converge(&self, sim: &Sim, after: &str) {
        let mut last = None;
        for _ in 0..300 {
            match self.difference(sim) {
                None => return,
                Some(d) => last = Some(d),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "clients did not converge after {after}:\n{}",
            last.unwrap_or_default()
        );
    }
}

/// Moves a few Services in and out of kube-proxy's selection by toggling the proxy-name label.
fn toggle_proxy_names(sim: &Sim, round: usize) {
    let services = sim.handle().objects_json(Kind::Service);
    let writes: Vec<kube_sim::Write> = services
        .iter()
        .skip(round % 3)
        .step_by(4)
        .take(3)
        .map(|o| {
            let mut svc: Service = serde_json::from_value(o.clone()).expect("service decodes");
            let labels = svc.metadata.labels.get_or_insert_with(Default::default);
            if labels.remove(PROXY_NAME).is_none() {
                labels.insert(PROXY_NAME.into(), "other-proxy".into());
            }
            kube_sim::Write::Put(kube_sim::Object::Service(svc))
        })
        .collect();
    sim.handle().apply(writes);
}

fn downstream_lists(herald: &herald_server::Herald) -> u64 {
    let text = herald_metrics(herald);
    text.lines()
        .filter(|l| l.starts_with("herald_kube_requests_total{") && l.contains("verb=\"LIST\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn herald_metrics(herald: &herald_server::Herald) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, herald.shared().registry())
        .expect("encode");
    out
}

#[tokio::test]
async fn kube_proxy_shaped_and_plain_reflectors_stay_in_sync_through_upstream_faults() {
    let sim = Sim::start(SimConfig {
        spec: support::loopback_cluster(),
        seed: 3,
        history_window: 200,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    let herald = support::start_herald(
        &sim.url(),
        "jobs: []\n",
        support::kube_options(&[]),
        "herald/test",
    )
    .await;
    let client = support::client_for(&herald.kube_url().expect("face on"));
    let node_name = sim.handle().objects_json(Kind::Node)[0]["metadata"]["name"]
        .as_str()
        .expect("a node")
        .to_string();
    let kube_proxy = watcher::Config::default().labels(KUBE_PROXY_SELECTOR);
    let clients = Clients {
        services: reflect(Api::<Service>::all(client.clone()), kube_proxy.clone()),
        slices: reflect(Api::<EndpointSlice>::all(client.clone()), kube_proxy),
        node: reflect(
            Api::<Node>::all(client.clone()),
            watcher::Config::default().fields(&format!("metadata.name={node_name}")),
        ),
        pods: reflect(Api::<Pod>::all(client.clone()), watcher::Config::default()),
        node_name,
    };
    toggle_proxy_names(&sim, 0);
    clients.converge(&sim, "the initial sync").await;
    assert!(
        !reflected(&clients.slices).is_empty(),
        "kube-proxy sees slices"
    );
    let lists_after_sync = downstream_lists(&herald);
    assert!(
        lists_after_sync >= 4,
        "each reflector listed once: {lists_after_sync}"
    );

    let h = sim.handle();
    let faults = [
        ("dropped watches", Fault::CloseWatches),
        ("compaction (410 upstream)", Fault::Compact),
        (
            "a restart refusing connections",
            Fault::Restart {
                duration_ms: 1500,
                refuse: true,
            },
        ),
        (
            "a restart answering 503",
            Fault::Restart {
                duration_ms: 1500,
                refuse: false,
            },
        ),
        (
            "429s on half the requests",
            Fault::Errors {
                code: 429,
                fraction: 0.5,
                retry_after_seconds: 1,
            },
        ),
    ];
    for (round, (what, fault)) in faults.into_iter().enumerate() {
        h.set_churn(40.0);
        h.fault(fault).expect("fault");
        toggle_proxy_names(&sim, round + 1);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Past the history window: herald's next upstream watch from its version gets 410.
        h.fault(Fault::Compact).expect("compact");
        tokio::time::sleep(Duration::from_millis(500)).await;
        h.set_churn(0.0);
        h.fault(Fault::Clear).expect("clear");
        clients.converge(&sim, what).await;
    }
    assert_eq!(
        downstream_lists(&herald),
        lists_after_sync,
        "upstream faults and relists never made a downstream client relist"
    );
    let metrics = herald_metrics(&herald);
    let relists: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("herald_upstream_relists_total{kind=\"pods\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        relists >= 2.0,
        "herald itself relisted upstream after the 410s: {relists}"
    );

    // One upstream watch per kind, whatever the number of downstream clients (once herald has
    // re-opened the watches the faults closed: on a loaded machine that can lag the check).
    let kinds = [
        "pods",
        "services",
        "endpointslices",
        "nodes",
        "namespaces",
        "endpoints",
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let stats = sim.stats();
        let off: Vec<String> = kinds
            .iter()
            .filter(|k| stats["by_resource"][**k]["watches_open"] != 1)
            .map(|k| format!("{k}: {}", stats["by_resource"][*k]))
            .collect();
        if off.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not one upstream watch per kind: {off:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_reconnect_storm_past_the_admission_rate_gets_429_and_still_syncs() {
    let sim = Sim::start(SimConfig {
        spec: support::loopback_cluster(),
        seed: 4,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    let mut api = support::kube_options(&[]);
    api.admission_rate = 5.0;
    api.admission_burst = 3;
    let herald = support::start_herald(&sim.url(), "jobs: []\n", api, "herald/test").await;
    let base = herald.kube_url().expect("face on");
    let http = reqwest::Client::new();
    let mut codes = Vec::new();
    for _ in 0..8 {
        let r = http
            .get(format!("{base}/api/v1/pods?limit=1"))
            .send()
            .await
            .expect("list");
        if r.status() == 429 {
            let retry = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            // Five a second: the five refusals are promised the slots of the next second.
            assert_eq!(retry.as_deref(), Some("1"), "429 says when to come back");
            let status: Value = r.json().await.expect("Status");
            assert_eq!(status["reason"], "TooManyRequests");
            codes.push(429);
        } else {
            codes.push(r.status().as_u16());
        }
    }
    assert_eq!(
        &codes[..3],
        &[200, 200, 200],
        "the burst is admitted: {codes:?}"
    );
    assert!(codes.contains(&429), "past the burst: {codes:?}");
    // A client that backs off as client-go does gets through.
    let client = support::client_for(&base);
    let pods = reflect(Api::<Pod>::all(client), watcher::Config::default());
    let want = sim_versions(&sim, Kind::Pod, |_| true);
    for _ in 0..200 {
        if reflected(&pods) == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(reflected(&pods), want);
    assert!(
        herald_metrics(&herald)
            .contains("herald_kube_admission_refused_total{verb=\"LIST\",reason=\"rate\"}")
    );
}

#[tokio::test]
async fn herald_refuses_to_serve_the_api_off_loopback_without_tokens_and_names_why() {
    let mut api = support::kube_options(&[]);
    api.history_window = 10;
    let err = herald_server::Herald::start(
        vec![],
        kube::Config::new("http://127.0.0.1:1".parse().expect("url")),
        herald_server::ServeOptions {
            kube: Some(herald_server::KubeServeOptions {
                // Refused before anything binds.
                listen: "0.0.0.0:0".parse().expect("addr"),
                api,
                custom: vec![],
                token_file: None,
                insecure: false,
                tls: None,
            }),
            ..herald_server::ServeOptions::default()
        },
    )
    .await
    .expect_err("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("0.0.0.0:0") && msg.contains("--kube-insecure") && msg.contains("token"),
        "{msg}"
    );
}

#[tokio::test]
async fn custom_resources_are_resolved_from_upstream_discovery_and_served_raw() {
    let sim = Sim::start(SimConfig {
        spec: support::loopback_cluster(),
        seed: 8,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    let start = |custom: Vec<(String, String, String)>| {
        let url = sim.url();
        async move {
            herald_server::Herald::start(
                vec![],
                kube::Config::new(url.parse().expect("url")),
                herald_server::ServeOptions {
                    kube: Some(herald_server::KubeServeOptions {
                        listen: "127.0.0.1:0".parse().expect("addr"),
                        api: support::kube_options(&[]),
                        custom,
                        token_file: None,
                        insecure: false,
                        tls: None,
                    }),
                    ..herald_server::ServeOptions::default()
                },
            )
            .await
        }
    };
    let unknown = start(vec![("example.com".into(), "v1".into(), "widgets".into())])
        .await
        .expect_err("no such resource upstream");
    assert!(
        unknown.to_string().contains("widgets") && unknown.to_string().contains("example.com/v1"),
        "{unknown}"
    );

    let herald = start(vec![(
        "monitoring.coreos.com".into(),
        "v1".into(),
        "servicemonitors".into(),
    )])
    .await
    .expect("herald starts");
    herald.ready().await;
    let base = herald.kube_url().expect("face on");
    let http = reqwest::Client::new();
    // Discovery names the custom kind with its scope, as read from the upstream.
    let doc: Value = http
        .get(format!("{base}/apis/monitoring.coreos.com/v1"))
        .send()
        .await
        .expect("discovery")
        .json()
        .await
        .expect("json");
    assert_eq!(doc["resources"][0]["kind"], "ServiceMonitor");
    assert_eq!(doc["resources"][0]["namespaced"], true);
    assert_eq!(
        doc["resources"][0]["verbs"],
        serde_json::json!(["get", "list", "watch"])
    );
    // Objects pass through as kube-sim serves them; a protobuf client gets JSON, labelled as JSON.
    let r = http
        .get(format!(
            "{base}/apis/monitoring.coreos.com/v1/servicemonitors"
        ))
        .header(
            "accept",
            "application/vnd.kubernetes.protobuf,application/json",
        )
        .send()
        .await
        .expect("list");
    assert_eq!(r.headers()["content-type"], "application/json");
    let list: Value = r.json().await.expect("json");
    let want = sim.handle().objects_json(Kind::ServiceMonitor);
    assert!(!want.is_empty());
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), want.len());
    let mut got: Vec<&Value> = items.iter().collect();
    let mut want: Vec<&Value> = want.iter().collect();
    let key = |v: &&Value| {
        (
            v["metadata"]["namespace"].to_string(),
            v["metadata"]["name"].to_string(),
        )
    };
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(got, want, "served unchanged");
    // Read-only.
    let r = http
        .delete(format!(
            "{base}/apis/monitoring.coreos.com/v1/namespaces/default/servicemonitors/x"
        ))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), 405);
    let status: Value = r.json().await.expect("Status");
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("MethodNotAllowed"))
    );
}
