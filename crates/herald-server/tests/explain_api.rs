//! `GET /explain` on planted cases: objects written through kube-sim's REST API, one for each
//! reason a job serves nothing for an object, each explained with the job, rule or requirement at
//! fault; the answers for served targets (address, labels, shard), for monitors (selected, nearly
//! selected, per-endpoint counts, warnings), bad queries (400 naming the parameter), missing
//! objects (404 naming them), the `herald explain` table (`explain::client` + `render::table`,
//! what the binary prints) as a snapshot, and authentication (401/403, a token file).

#[path = "peers/harness.rs"]
mod peers;

use std::time::Duration;

use herald_server::explain::client::{Ask, ClientError, fetch};
use herald_server::explain::render::table;
use herald_server::{Herald, Security, ServeOptions, job_specs};
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

const JOBS: &str = "\
istio: {root_namespace: istio-system}
jobs:
- {name: pods-elsewhere, role: pod, namespaces: {names: [elsewhere]}}
- name: pods-web
  role: pod
  selectors: [{role: pod, label: \"tier=web\"}]
- name: pods-tier-rule
  role: pod
  relabel_configs:
  - {source_labels: [__meta_kubernetes_pod_label_tier], regex: web, action: keep}
  - {action: labelmap, regex: __meta_kubernetes_pod_label_(.+)}
- {name: mesh, role: pod, annotations: prometheus.io, istio: merged}
- {name: eps, role: endpoints}
monitors: {istio: true}
";

const NS: &str = "explain";

async fn start_sim() -> Sim {
    Sim::start(SimConfig {
        populate: false,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts on loopback")
}

/// Creates `obj` through kube-sim's REST API (POST to its collection).
async fn create(http: &reqwest::Client, sim: &Sim, obj: Value) {
    let kind = obj["kind"].as_str().expect("kind").to_string();
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    let path = match kind.as_str() {
        "Namespace" => "/api/v1/namespaces".to_string(),
        "Pod" => format!("/api/v1/namespaces/{ns}/pods"),
        "Service" => format!("/api/v1/namespaces/{ns}/services"),
        "Endpoints" => format!("/api/v1/namespaces/{ns}/endpoints"),
        "ServiceMonitor" => {
            format!("/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors")
        }
        "PodMonitor" => format!("/apis/monitoring.coreos.com/v1/namespaces/{ns}/podmonitors"),
        "PeerAuthentication" => {
            format!("/apis/security.istio.io/v1/namespaces/{ns}/peerauthentications")
        }
        other => panic!("no path for {other}"),
    };
    let res = http
        .post(format!("{}{path}", sim.url()))
        .json(&obj)
        .send()
        .await
        .expect("kube-sim answers");
    let status = res.status();
    let body = res.text().await.unwrap_or_default();
    assert!(status.is_success(), "POST {path}: {status} {body}");
}

fn pod(name: &str, ip: &str, labels: Value, annotations: Value, phase: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": NS, "name": name, "labels": labels, "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": format!("{}-rs", name.split('-').next().unwrap_or(name)),
                                          "uid": format!("uid-{name}"), "controller": true}]},
        "spec": {"nodeName": "node-a", "containers": [{"name": "app",
                 "ports": [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]}]},
        "status": {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}],
                   "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

fn monitor(kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "monitoring.coreos.com/v1", "kind": kind,
           "metadata": {"namespace": NS, "name": name}, "spec": spec})
}

/// Plants every case.
async fn plant(sim: &Sim) {
    let http = reqwest::Client::new();
    let c = |obj| create(&http, sim, obj);
    c(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
    let none = json!({});
    let scrape = json!({"prometheus.io/scrape": "true", "prometheus.io/port": "8080"});
    c(pod(
        "web-1",
        "127.20.0.1",
        json!({"app": "planted", "tier": "web"}),
        scrape.clone(),
        "Running",
    ))
    .await;
    c(pod(
        "done-1",
        "127.20.0.2",
        json!({"app": "planted"}),
        none.clone(),
        "Succeeded",
    ))
    .await;
    c(pod(
        "mesh-1",
        "127.20.0.3",
        json!({"app": "meshy", "security.istio.io/tlsMode": "istio"}),
        scrape.clone(),
        "Running",
    ))
    .await;
    for (i, ip) in ["127.20.1.0", "127.20.1.1", "127.20.1.2"]
        .iter()
        .enumerate()
    {
        c(pod(
            &format!("big-{i}"),
            ip,
            json!({"app": "big"}),
            none.clone(),
            "Running",
        ))
        .await;
    }
    c(json!({"apiVersion": "v1", "kind": "Service",
             "metadata": {"namespace": NS, "name": "planted", "labels": {"app": "planted"}},
             "spec": {"selector": {"app": "planted"}, "clusterIP": "127.4.0.10",
                      "ports": [{"name": "metrics", "port": 8080, "targetPort": 8080}]}}))
    .await;
    // A Service without a selector and its Endpoints as the controller leaves an object past 1000
    // addresses: annotated truncated, listing two of the three pods of its workload.
    c(json!({"apiVersion": "v1", "kind": "Service",
             "metadata": {"namespace": NS, "name": "big", "labels": {"app": "big"}},
             "spec": {"clusterIP": "127.4.0.11",
                      "ports": [{"name": "metrics", "port": 8080, "targetPort": 8080}]}}))
    .await;
    let address = |i: usize| {
        json!({"ip": format!("127.20.1.{i}"), "nodeName": "node-a",
               "targetRef": {"kind": "Pod", "namespace": NS, "name": format!("big-{i}"),
                             "uid": format!("uid-big-{i}")}})
    };
    c(json!({"apiVersion": "v1", "kind": "Endpoints",
             "metadata": {"namespace": NS, "name": "big", "labels": {"app": "big"},
                          "annotations": {"endpoints.kubernetes.io/over-capacity": "truncated"}},
             "subsets": [{"addresses": [address(0), address(1)],
                          "ports": [{"name": "metrics", "port": 8080, "protocol": "TCP"}]}]}))
    .await;
    let planted = json!({"matchLabels": {"app": "planted"}});
    c(monitor(
        "ServiceMonitor",
        "sm-other",
        json!({"selector": {"matchLabels": {"app": "other"}}, "endpoints": [{"port": "metrics"}]}),
    ))
    .await;
    c(monitor(
        "ServiceMonitor",
        "sm-port",
        json!({"selector": planted, "endpoints": [{"port": "nope"}]}),
    ))
    .await;
    c(monitor(
        "ServiceMonitor",
        "sm-ns",
        json!({"selector": planted, "namespaceSelector": {"matchNames": ["elsewhere"]},
               "endpoints": [{"port": "metrics"}]}),
    ))
    .await;
    c(monitor(
        "ServiceMonitor",
        "sm-good",
        json!({"selector": planted, "endpoints": [{"port": "metrics"}]}),
    ))
    .await;
    c(monitor(
        "PodMonitor",
        "pm-run",
        json!({"selector": planted, "podMetricsEndpoints": [{"port": "metrics"}]}),
    ))
    .await;
    c(
        json!({"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
             "metadata": {"namespace": NS, "name": "strict",
                          "creationTimestamp": "2026-01-01T00:00:00Z"},
             "spec": {"mtls": {"mode": "STRICT"}}}),
    )
    .await;
}

async fn start_herald(sim: &Sim, security: Security) -> Herald {
    let cfg = herald_core::parse_config(JOBS).expect("valid jobs");
    let herald = Herald::start(
        job_specs(&cfg, None).expect("valid job specs"),
        kube::Config::new(sim.url().parse().expect("kube-sim's url")),
        ServeOptions {
            monitors: cfg.monitors.clone(),
            istio: cfg.istio.clone(),
            security,
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

async fn explain(http: &reqwest::Client, herald: &Herald, query: &str) -> (u16, Value) {
    let res = http
        .get(format!("{}/explain?{query}", herald.url()))
        .send()
        .await
        .expect("herald answers");
    let status = res.status().as_u16();
    (status, res.json().await.expect("a JSON answer"))
}

/// Polls until `query` answers 200 and `ok` holds (herald takes the planted objects within a
/// second or so of its sync; monitors are rebuilt within a second).
async fn settled(
    http: &reqwest::Client,
    herald: &Herald,
    query: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (status, v) = explain(http, herald, query).await;
        if status == 200 && ok(&v) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{query}: never settled: {status} {v:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn job<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["job"] == name)
        .unwrap_or_else(|| panic!("job {name} in {v:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reason_is_explained_with_the_job_rule_or_requirement_at_fault() {
    let sim = start_sim().await;
    plant(&sim).await;
    let herald = start_herald(&sim, Security::default()).await;
    let http = reqwest::Client::new();
    let views_in = |v: &Value| v["jobs"].as_array().is_some_and(|j| j.len() >= 8);

    // A pod that ran to completion: outside a job's namespaces, filtered by a job's selector,
    // dropped by a relabel rule, and not Running under a PodMonitor's filterRunning.
    let done = settled(
        &http,
        &herald,
        "kind=Pod&namespace=explain&name=done-1",
        views_in,
    )
    .await;
    assert_eq!(
        job(&done, "pods-elsewhere")["reason"],
        json!({"reason": "outside_namespaces", "namespace": "explain",
               "namespaces": ["elsewhere"], "by": "the job's namespaces"})
    );
    assert_eq!(
        job(&done, "pods-web")["reason"],
        json!({"reason": "filtered_by_selector", "selector": "tier=web", "failed": "tier=web"})
    );
    let rule = &job(&done, "pods-tier-rule")["reason"];
    assert_eq!(rule["reason"], "dropped_by_rule", "{rule:#}");
    assert_eq!(rule["rule"], 0);
    assert_eq!(
        rule["saw"],
        json!({"__meta_kubernetes_pod_label_tier": ""}),
        "{rule:#}"
    );
    assert!(
        rule["text"].as_str().expect("text").contains("\"keep\""),
        "{rule:#}"
    );
    let not_running = &job(&done, "podMonitor/explain/pm-run/0")["reason"];
    assert_eq!(not_running["reason"], "not_running", "{not_running:#}");
    assert_eq!(not_running["phase"], "Succeeded");

    // The pod that is served: address, final labels, and its shard for the counts asked.
    let web = explain(
        &http,
        &herald,
        "kind=Pod&namespace=explain&name=web-1&shards=2,3",
    )
    .await
    .1;
    let served = job(&web, "pods-tier-rule");
    assert_eq!(served["served"], 1, "{served:#}");
    let t = &served["targets"][0];
    assert_eq!(t["address"], "127.20.0.1:8080");
    assert_eq!(t["labels"]["tier"], "web", "labelmap ran: {t:#}");
    assert!(
        t["labels"].get("__meta_kubernetes_pod_name").is_none(),
        "meta labels are removed after relabeling: {t:#}"
    );
    let sd: Value = http
        .get(format!(
            "{}/sd/v1/pods-tier-rule?shard={}&shards=2",
            herald.url(),
            t["shards"]["2"]
        ))
        .send()
        .await
        .expect("sd")
        .json()
        .await
        .expect("sd json");
    assert!(
        sd.as_array()
            .expect("entries")
            .iter()
            .any(|e| e["targets"][0] == t["address"] && e["labels"] == t["labels"]),
        "the shard explain names holds the target with its labels: {sd:#}"
    );
    assert_eq!(job(&web, "pods-web")["served"], 1);

    // The Service, through each ServiceMonitor: a selector requirement that fails, a port that
    // matches no port (naming the ports there are), a namespace outside the namespaceSelector.
    let svc = settled(
        &http,
        &herald,
        "kind=Service&namespace=explain&name=planted",
        |v| {
            v["jobs"].as_array().is_some_and(|j| {
                j.iter()
                    .any(|j| j["job"] == "serviceMonitor/explain/sm-good/0" && j["served"] == 1)
            })
        },
    )
    .await;
    let sel = &job(&svc, "serviceMonitor/explain/sm-other/0")["reason"];
    assert_eq!(sel["reason"], "monitor_selector", "{sel:#}");
    assert_eq!(sel["field"], "spec.selector");
    assert_eq!(sel["requirement"], "matchLabels: app=other");
    assert_eq!(
        sel["labels"]["__meta_kubernetes_service_label_app"],
        "planted"
    );
    let port = &job(&svc, "serviceMonitor/explain/sm-port/0")["reason"];
    assert_eq!(
        *port,
        json!({"reason": "port_matches_nothing", "field": "spec.endpoints[0].port",
               "port": "nope", "rule": port["rule"], "ports": ["metrics"]}),
    );
    let ns = &job(&svc, "serviceMonitor/explain/sm-ns/0")["reason"];
    assert_eq!(ns["reason"], "outside_namespaces", "{ns:#}");
    assert_eq!(ns["by"], "the monitor's namespaceSelector");

    // A pod past the 1000th address of its truncated Endpoints; the object itself says so too.
    let big = explain(&http, &herald, "kind=Pod&namespace=explain&name=big-2")
        .await
        .1;
    let truncated = &job(&big, "eps")["reason"];
    assert_eq!(truncated["reason"], "endpoints_truncated", "{truncated:#}");
    assert_eq!(truncated["endpoints"], "explain/big");
    assert!(
        truncated["fix"]
            .as_str()
            .expect("fix")
            .contains("endpointslice")
    );
    assert_eq!(job(&big, "eps")["served"], 0);
    let listed = explain(&http, &herald, "kind=Pod&namespace=explain&name=big-0")
        .await
        .1;
    assert_eq!(job(&listed, "eps")["served"], 1, "{listed:#}");
    let eps = explain(&http, &herald, "kind=Endpoints&namespace=explain&name=big")
        .await
        .1;
    assert!(
        eps["notes"][0]
            .as_str()
            .expect("a note")
            .contains("truncated"),
        "{eps:#}"
    );

    // A sidecar pod under a namespace-wide STRICT PeerAuthentication: moved to the companion.
    let mesh = settled(
        &http,
        &herald,
        "kind=Pod&namespace=explain&name=mesh-1",
        |v| job(v, "mesh/istio-mtls")["served"] == 1,
    )
    .await;
    assert_eq!(
        job(&mesh, "mesh")["reason"],
        json!({"reason": "moved_to_istio_mtls", "companion": "mesh/istio-mtls",
               "by": "explain/strict (namespace)"})
    );
    assert_eq!(
        job(&mesh, "mesh/istio-mtls")["targets"][0]["labels"]["__scheme__"],
        "https"
    );

    // Monitors: what they select, what they nearly select, their endpoints and warnings.
    let other = explain(
        &http,
        &herald,
        "kind=ServiceMonitor&namespace=explain&name=sm-other",
    )
    .await
    .1;
    let m = &other["monitor"];
    assert_eq!(m["selected"], json!([]), "{other:#}");
    assert!(
        m["nearly"]
            .as_array()
            .expect("nearly")
            .iter()
            .any(|n| n["object"] == "explain/planted"
                && n["requirement"] == "matchLabels: app=other"),
        "{other:#}"
    );
    let bad_port = explain(
        &http,
        &herald,
        "kind=ServiceMonitor&namespace=explain&name=sm-port",
    )
    .await
    .1;
    let m = &bad_port["monitor"];
    assert_eq!(m["selected"], json!(["explain/planted"]), "{bad_port:#}");
    assert_eq!(m["endpoints"][0]["targets"], 0);
    assert_eq!(m["endpoints"][0]["port"], "nope");
    assert!(
        m["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("\"nope\""))),
        "{bad_port:#}"
    );
    let good = explain(
        &http,
        &herald,
        "kind=ServiceMonitor&namespace=explain&name=sm-good",
    )
    .await
    .1;
    assert_eq!(good["monitor"]["endpoints"][0]["targets"], 1, "{good:#}");

    // Bad queries name the parameter; missing objects are named.
    for (query, status, needle) in [
        ("kind=Foo&namespace=a&name=b", 400, "kind:"),
        ("namespace=a&name=b", 400, "kind:"),
        ("kind=Pod&name=b", 400, "namespace:"),
        ("kind=Node&namespace=a&name=b", 400, "namespace:"),
        ("kind=Pod&namespace=a", 400, "name:"),
        ("kind=Pod&namespace=a&name=b&shards=0", 400, "shards:"),
        ("kind=Pod&namespace=a&name=b&bogus=1", 400, "bogus"),
        (
            "kind=Pod&namespace=explain&name=nobody",
            404,
            "Pod explain/nobody not found",
        ),
        (
            "kind=ServiceMonitor&namespace=explain&name=nobody",
            404,
            "ServiceMonitor explain/nobody",
        ),
        ("kind=Ingress&namespace=explain&name=x", 404, "ingresses"),
    ] {
        let (got, v) = explain(&http, &herald, query).await;
        assert_eq!(got, status, "{query}: {v:#}");
        let msg = v["error"].as_str().expect("an error message");
        assert!(msg.contains(needle), "{query}: {msg}");
    }

    // What `herald explain Pod explain/done-1` prints.
    let ask = Ask {
        kind: "Pod",
        object: "explain/done-1",
        shards: None,
    };
    let answer = fetch(&herald.url(), &ask, None, None)
        .await
        .expect("an answer");
    let printed = mask_uids(&table(&answer));
    let want = r#"Pod explain/done-1
shard counts: 2

JOB                                           TARGETS  ANSWER
pods-elsewhere                                      0  namespace "explain" is not among the job's namespaces (elsewhere)
pods-web                                            0  filtered by the job's selector "tier=web": fails "tier=web"
pods-tier-rule                                      0  dropped by relabel rule 0 {"source_labels":["__meta_kubernetes_pod_label_tier"],"regex":"web","action":"keep"} (saw {__meta_kubernetes_pod_label_tier=""})
mesh                                                0  dropped by relabel rule 0 {"source_labels":["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],"regex":"true","action":"keep"} (saw {__meta_kubernetes_pod_annotation_prometheus_io_scrape=""})
mesh/istio-mtls                                     0  dropped by relabel rule 0 {"source_labels":["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],"regex":"true","action":"keep"} (saw {__meta_kubernetes_pod_annotation_prometheus_io_scrape=""})
eps                                                 0  no Endpoints object of this job lists it
monitor-base-endpoints                              0  no Endpoints object of this job lists it
monitor-base-pod                                    1  served
                                                       127.20.0.2:8080 shard 1/2 {__meta_kubernetes_namespace="explain", __meta_kubernetes_pod_container_id="", __meta_kubernetes_pod_container_image="", __meta_kubernetes_pod_container_init="false", __meta_kubernetes_pod_container_name="app", __meta_kubernetes_pod_container_port_name="metrics", __meta_kubernetes_pod_container_port_number="8080", __meta_kubernetes_pod_container_port_protocol="TCP", __meta_kubernetes_pod_controller_kind="ReplicaSet", __meta_kubernetes_pod_controller_name="done-rs", __meta_kubernetes_pod_host_ip="", __meta_kubernetes_pod_ip="127.20.0.2", __meta_kubernetes_pod_label_app="planted", __meta_kubernetes_pod_labelpresent_app="true", __meta_kubernetes_pod_name="done-1", __meta_kubernetes_pod_node_name="node-a", __meta_kubernetes_pod_phase="Succeeded", __meta_kubernetes_pod_ready="true", __meta_kubernetes_pod_uid="UID"}
podMonitor/explain/pm-run/0                         0  pod phase "Succeeded" is not Running (filterRunning)
podMonitor/explain/pm-run/0/istio-mtls              0  pod phase "Succeeded" is not Running (filterRunning)
serviceMonitor/explain/sm-good/0                    0  no Endpoints object of this job lists it
serviceMonitor/explain/sm-good/0/istio-mtls         0  no Endpoints object of this job lists it
serviceMonitor/explain/sm-ns/0                      0  namespace "explain" is not among the monitor's namespaceSelector (elsewhere)
serviceMonitor/explain/sm-ns/0/istio-mtls           0  namespace "explain" is not among the monitor's namespaceSelector (elsewhere)
serviceMonitor/explain/sm-other/0                   0  no Endpoints object of this job lists it
serviceMonitor/explain/sm-other/0/istio-mtls        0  no Endpoints object of this job lists it
serviceMonitor/explain/sm-port/0                    0  no Endpoints object of this job lists it
serviceMonitor/explain/sm-port/0/istio-mtls         0  no Endpoints object of this job lists it
"#;
    assert_eq!(printed, want, "printed:\n{printed}");
    // And a monitor, as a table.
    let ask = Ask {
        kind: "ServiceMonitor",
        object: "explain/sm-other",
        shards: None,
    };
    let printed = table(
        &fetch(&herald.url(), &ask, None, None)
            .await
            .expect("an answer"),
    );
    let want = r#"ServiceMonitor explain/sm-other
shard counts: 2

ENDPOINT JOB  PORT  TARGETS
serviceMonitor/explain/sm-other/0  metrics  0 (+0 in /istio-mtls)

selects: nothing
nearly: explain/big fails matchLabels: app=other (labels {__meta_kubernetes_service_label_app="big"})
nearly: explain/planted fails matchLabels: app=other (labels {__meta_kubernetes_service_label_app="planted"})
"#;
    assert_eq!(printed, want, "printed:\n{printed}");
    let missing = Ask {
        kind: "Pod",
        object: "explain/nobody",
        shards: None,
    };
    match fetch(&herald.url(), &missing, None, None).await {
        Err(ClientError::Refused { status, message }) => {
            assert_eq!(status, 404);
            assert!(message.contains("explain/nobody"), "{message}");
        }
        other => panic!("a missing pod is refused with 404, not {other:?}"),
    }
    drop(herald);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_needs_the_same_credential_as_service_discovery() {
    let sim = start_sim().await;
    plant(&sim).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "# explainers\nsecret-token\n").expect("tokens");
    let herald = start_herald(
        &sim,
        Security {
            token_file: Some(tokens.clone()),
            ..Security::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let url = format!(
        "{}/explain?kind=Pod&namespace=explain&name=web-1",
        herald.url()
    );
    let status = |b: reqwest::RequestBuilder| async move {
        b.send().await.expect("herald answers").status().as_u16()
    };
    assert_eq!(status(http.get(&url)).await, 401);
    assert_eq!(status(http.get(&url).bearer_auth("wrong")).await, 403);
    assert_eq!(
        status(http.get(&url).bearer_auth("secret-token")).await,
        200
    );
    let html = format!(
        "{}/explain.html?kind=Pod&namespace=explain&name=web-1",
        herald.url()
    );
    assert_eq!(status(http.get(&html)).await, 401);

    let ask = Ask {
        kind: "Pod",
        object: "explain/web-1",
        shards: Some("2"),
    };
    let answer = fetch(&herald.url(), &ask, Some(&tokens), None)
        .await
        .expect("the token file's token is accepted");
    assert_eq!(answer["shard_counts"], json!([2]));
    match fetch(&herald.url(), &ask, None, None).await {
        Err(ClientError::Refused { status: 401, .. }) => {}
        other => panic!("no token: 401, not {other:?}"),
    }
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "nope\n").expect("wrong token");
    match fetch(&herald.url(), &ask, Some(&wrong), None).await {
        Err(ClientError::Refused { status: 403, .. }) => {}
        other => panic!("a wrong token: 403, not {other:?}"),
    }
    drop(herald);
}

/// `table` output with every pod uid (kube-sim's, not part of what is explained) replaced by `UID`.
fn mask_uids(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("pod_uid=\"") {
        let (head, tail) = rest.split_at(at + "pod_uid=\"".len());
        out.push_str(head);
        out.push_str("UID");
        rest = tail.find('"').map_or("", |end| &tail[end..]);
    }
    out.push_str(rest);
    out
}
