//! Prometheus's own kubernetes_sd as the reference for herald's labels: `promsd` (peers/cmd/promsd,
//! `github.com/prometheus/prometheus/discovery/kubernetes` v0.316.0 run as a library) discovers
//! kube-sim's cluster for every role — with and without `attach_metadata` (node, namespace), with
//! namespaces and label and field selectors — and herald's `/sd/v1` body for the same
//! kubernetes_sd_configs entry holds exactly its targets, label for label. A second promsd pointed at
//! herald's Kubernetes API face discovers exactly what the one pointed at kube-sim does.
//!
//! client-go's WatchListClient alternates by case: the promsd on kube-sim runs with it off and the one
//! on herald with it on, then the other way round, so both servers are read both ways.
//!
//! NB: nothing dials a non-loopback address: the cluster's CIDRs are on 127.0.0.0/8 and promsd only
//! discovers (it scrapes nothing).

#[path = "peers/harness.rs"]
mod peers;

use std::collections::BTreeMap;
use std::time::Duration;

use herald_server::{Herald, KubeApiOptions, KubeServeOptions, ServeOptions, job_specs};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_sim::{Kind, Sim};
use peers::Labels;
use peers::cluster::{loopback_spec, plant_edge_cases, s, served, start_sim};
use peers::compare::differences;
use peers::golang::{self, Promsd};

/// How long every promsd gets to list what herald serves.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the peers get after each touch that follows churn, and how many touches.
const TOUCH_TIMEOUT: Duration = Duration::from_secs(20);
const TOUCHES: u32 = 4;

/// promsd's quiet period before it answers: no new target group for this long.
const QUIET_MS: u64 = 300;

/// One kubernetes_sd_configs entry, served by herald as job `name` and run by promsd as it is.
struct Case {
    name: &'static str,
    sd: String,
}

/// Every role plain, every role with the attach_metadata it takes, and namespaces and selectors
/// (label and field, on the role's own objects and on the Services and pods it reads) for the roles
/// that take them. `ns` is a namespace with Services and pods, `app` an `app` label value in it.
fn cases(ns: &str, app: &str, node: &str) -> Vec<Case> {
    let both = "attach_metadata: {node: true, namespace: true}";
    let c = |name, sd: String| Case { name, sd };
    vec![
        c("node", "role: node".into()),
        c(
            "node-selected",
            format!("role: node\nselectors:\n- {{role: node, field: metadata.name={node}}}"),
        ),
        c("pod", "role: pod".into()),
        c("pod-meta", format!("role: pod\n{both}")),
        c(
            "pod-selected",
            format!(
                "role: pod\nnamespaces: {{names: [{ns}, kube-system]}}\nselectors:\n- {{role: pod, label: app, field: status.phase=Running}}"
            ),
        ),
        c("service", "role: service".into()),
        c(
            "service-meta",
            "role: service\nattach_metadata: {namespace: true}".into(),
        ),
        c(
            "service-selected",
            format!(
                "role: service\nnamespaces: {{names: [{ns}]}}\nselectors:\n- {{role: service, label: 'app={app}'}}"
            ),
        ),
        c("endpoints", "role: endpoints".into()),
        c("endpoints-meta", format!("role: endpoints\n{both}")),
        c(
            "endpoints-selected",
            format!(
                "role: endpoints\nnamespaces: {{names: [{ns}]}}\nselectors:\n- {{role: service, label: 'app={app}'}}\n- {{role: pod, field: status.phase=Running}}"
            ),
        ),
        c("endpointslice", "role: endpointslice".into()),
        c("endpointslice-meta", format!("role: endpointslice\n{both}")),
        c(
            "endpointslice-selected",
            format!(
                "role: endpointslice\nnamespaces: {{names: [{ns}]}}\nselectors:\n- {{role: endpointslice, label: 'kubernetes.io/service-name'}}\n- {{role: service, label: 'app={app}'}}"
            ),
        ),
        c("ingress", "role: ingress".into()),
        c(
            "ingress-meta",
            "role: ingress\nattach_metadata: {namespace: true}".into(),
        ),
    ]
}

/// herald's job file for `cases`: each entry under its name, indented as a list item.
fn herald_jobs(cases: &[Case]) -> String {
    let mut out = String::from("jobs:\n");
    for c in cases {
        out.push_str(&format!("- name: {}\n", c.name));
        for line in c.sd.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

fn kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
    )
}

/// herald serving `jobs_yaml` on /sd/v1 and its Kubernetes API face (the default kinds and ingresses)
/// on a free loopback port, synced with `sim`.
async fn start_herald(sim: &Sim, jobs_yaml: &str) -> Herald {
    let cfg = herald_core::parse_config(jobs_yaml).expect("valid jobs");
    let (mut resources, _) = herald_server::kube_kinds(&[]).expect("default kinds");
    resources.push(kube_face::Resource::builtin("ingresses").expect("built-in"));
    let herald = Herald::start(
        job_specs(&cfg, None).expect("valid job specs"),
        kube::Config::new(sim.url().parse().expect("kube-sim's url")),
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
    tokio::time::timeout(Duration::from_secs(30), herald.ready())
        .await
        .expect("herald syncs with kube-sim within 30 s");
    herald
}

/// A namespace (not kube-system) holding a Service with an `app` selector, that `app`, and a node.
fn targets_of_interest(sim: &Sim) -> (String, String, String) {
    let svc = sim
        .handle()
        .objects_json(Kind::Service)
        .into_iter()
        .find(|v| {
            s(v, "/metadata/namespace") != "kube-system" && !s(v, "/spec/selector/app").is_empty()
        })
        .expect("kube-sim has a Service with an app selector outside kube-system");
    let node = sim.handle().objects_json(Kind::Node)[0].clone();
    (
        s(&svc, "/metadata/namespace").to_string(),
        s(&svc, "/spec/selector/app").to_string(),
        s(&node, "/metadata/name").to_string(),
    )
}

/// `default/promsd-edge`, an Ingress with a TLS host, a plain host, a rule without host and two paths
/// (one without a path): every case must have targets, and the generated cluster may have no
/// Ingress (promsd only answers after the Discoverer sent something).
fn plant_ingress(sim: &Sim) {
    use k8s_openapi::api::networking::v1::{
        HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
        IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let backend = IngressBackend {
        service: Some(IngressServiceBackend {
            name: "web".into(),
            port: Some(ServiceBackendPort {
                name: Some("http".into()),
                number: None,
            }),
        }),
        resource: None,
    };
    let paths = |ps: &[Option<&str>]| HTTPIngressRuleValue {
        paths: ps
            .iter()
            .map(|p| HTTPIngressPath {
                path: p.map(str::to_string),
                path_type: "ImplementationSpecific".into(),
                backend: backend.clone(),
            })
            .collect(),
    };
    let ingress = Ingress {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some("promsd-edge".into()),
            labels: Some([("app".to_string(), "promsd-edge".to_string())].into()),
            annotations: Some([("team".to_string(), "herald".to_string())].into()),
            ..Default::default()
        },
        spec: Some(IngressSpec {
            rules: Some(vec![
                IngressRule {
                    host: Some("secure.example.com".into()),
                    http: Some(paths(&[Some("/api"), None])),
                },
                IngressRule {
                    host: Some("plain.example.com".into()),
                    http: Some(paths(&[Some("/")])),
                },
                IngressRule {
                    host: None,
                    http: Some(paths(&[Some("/any")])),
                },
            ]),
            tls: Some(vec![IngressTLS {
                hosts: Some(vec!["secure.example.com".into()]),
                secret_name: Some("secure-tls".into()),
            }]),
            ..Default::default()
        }),
        status: None,
    };
    sim.handle()
        .apply(vec![kube_sim::Write::Put(kube_sim::Object::Ingress(
            ingress,
        ))]);
}

/// One case's three views: herald's body, promsd on kube-sim, promsd on herald's face.
struct Views {
    herald: Vec<Labels>,
    on_sim: Result<Vec<Labels>, String>,
    on_face: Result<Vec<Labels>, String>,
}

fn problems_of(name: &str, v: &Views) -> Vec<String> {
    let mut out = Vec::new();
    let limit = |d: Vec<String>| d.into_iter().take(12).collect::<Vec<_>>().join("\n");
    match &v.on_sim {
        Err(e) => out.push(format!("{name}: promsd on kube-sim: {e}")),
        Ok(sim) => {
            if sim.is_empty() {
                out.push(format!("{name}: promsd on kube-sim discovers no targets"));
            }
            let d = differences("prometheus(kube-sim)", sim, "herald /sd/v1", &v.herald);
            if !d.is_empty() {
                out.push(format!("{name}:\n{}", limit(d)));
            }
            match &v.on_face {
                Err(e) => out.push(format!("{name}: promsd on herald's face: {e}")),
                Ok(face) => {
                    let d = differences("prometheus(kube-sim)", sim, "prometheus(herald)", face);
                    if !d.is_empty() {
                        out.push(format!("{name}:\n{}", limit(d)));
                    }
                }
            }
        }
    }
    out
}

/// kube-sim with the planted edge cases, herald over it with every case as a job and its face on, and
/// two promsd per case (on kube-sim, on herald's face); `None` when promsd is not built.
async fn setup(seed: u64) -> Option<(Sim, Herald, Peers)> {
    let bin = golang::find("promsd")?;
    let sim = start_sim(loopback_spec(), seed).await;
    let _planted = plant_edge_cases(&sim);
    plant_ingress(&sim);
    let (ns, app, node) = targets_of_interest(&sim);
    let cases = cases(&ns, &app, &node);
    let herald = start_herald(&sim, &herald_jobs(&cases)).await;
    let face = herald.kube_url().expect("face on");
    let mut peers = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let sim_wl = i % 2 == 1;
        let on_sim = Promsd::start(&bin, &c.sd, &kubeconfig(&sim.url()), sim_wl).await;
        let on_face = Promsd::start(&bin, &c.sd, &kubeconfig(&face), !sim_wl).await;
        peers.push((c.name, on_sim, on_face));
    }
    Some((sim, herald, peers))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_kubernetes_sd_lists_what_herald_serves_for_every_role_and_option() {
    let Some((_sim, herald, mut peers)) = setup(20).await else {
        return;
    };
    let first = agree(&herald, &mut peers, "the first sync").await;
    assert_metadata_attached(&first);
    assert_protobuf_served(&herald);
    herald.stop().await;
}

/// Prometheus's kubernetes_sd asks for protobuf (discovery/kubernetes sets the client's content
/// type), and herald's face answered its lists and watches in protobuf: its per-content-type
/// metrics say so.
fn assert_protobuf_served(herald: &Herald) {
    let mut metrics = String::new();
    prometheus_client::encoding::text::encode(&mut metrics, herald.shared().registry())
        .expect("encode herald's metrics");
    let value = |series: &str| peers::cluster::series_value(&metrics, series);
    let watch = "herald_kube_content_events_total{content_type=\"application/vnd.kubernetes.protobuf;stream=watch\"}";
    let lists =
        "herald_kube_content_bytes_total{content_type=\"application/vnd.kubernetes.protobuf\"}";
    assert!(
        value(watch) > 0.0 && value(lists) > 0.0,
        "herald served Prometheus's kubernetes_sd no protobuf:\n{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("herald_kube_content"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(value("herald_kube_objects_encoded_total{format=\"protobuf\"}") > 0.0);
}

/// NB: before the touch loop below, 4 of 9 runs failed here on a loaded machine: one promsd of a
/// case held endpoint groups built from pods older than kube-sim's and herald's (pod_ready flipped
/// back, a replaced pod missing), three times the promsd on herald's face (once all six endpoint
/// cases alike), once the one on kube-sim, while herald's /sd/v1 matched the other. Prometheus
/// builds those groups from the pods its informer holds when the slice or Service changes and never
/// again on a pod change, so a pod event delivered after the one touch left them stale for good.
/// Since the loop, 4 of 4 runs passed at the first touch: whether the earlier failures were only
/// late delivery is not proven; a lost event would still fail every touch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_kubernetes_sd_agrees_with_herald_after_churn() {
    let Some((sim, herald, mut peers)) = setup(20).await else {
        return;
    };
    let first = agree(&herald, &mut peers, "the first sync").await;
    // Churn (pods come and go, readiness flips, endpoints follow), then agreement again.
    sim.handle().set_churn(40.0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    sim.handle().set_churn(0.0);
    // A touch rebuilds Prometheus's endpoint groups from the pods its informers hold then (see
    // touch_endpoint_objects); a pod event delivered after the touch (a loaded machine) leaves a
    // group stale until the next touch. So touch until they agree, a few times: a pod store that
    // never catches up (a lost event) still fails.
    let mut attempt = 0;
    let after = loop {
        attempt += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
        touch_endpoint_objects(&sim, attempt);
        match agree_within(&herald, &mut peers, "churn", TOUCH_TIMEOUT).await {
            Ok(found) => break found,
            Err(e) if attempt < TOUCHES => eprintln!("touch {attempt} of {TOUCHES}: {e}"),
            Err(e) => panic!("after {TOUCHES} touches: {e}"),
        }
    };
    assert_ne!(first, after, "churn changed no target");
    herald.stop().await;
}

fn touched<T: serde::de::DeserializeOwned + k8s_openapi::Metadata<Ty = ObjectMeta>>(
    v: serde_json::Value,
    n: u32,
) -> T {
    let mut o: T = serde_json::from_value(v).expect("kube-sim's objects decode");
    o.metadata_mut()
        .annotations
        .get_or_insert_default()
        .insert("herald-test/touched".into(), n.to_string());
    o
}

/// Annotates every Service, Endpoints and EndpointSlice, so that Prometheus rebuilds every target
/// group of the endpoints roles from the objects it holds now.
///
/// NB: Prometheus's endpointslice role has no pod event handler, and its endpoints role re-reads a
/// pod only when its phase changes (prometheus/prometheus discovery/kubernetes endpointslice.go and
/// endpoints.go, v0.316.0; prometheus#11305). A pod turning ready while its slice does not change
/// (or whose change arrives after the slice's) leaves Prometheus's group stale until the slice or
/// its Service changes; which groups go stale depends on the order the watches deliver in, so two
/// Prometheus instances (and herald, which rebuilds on every pod change) differ after churn. An
/// update of the slice (or of its Service, when the Service passes the job's selectors) is
/// Prometheus's own trigger to rebuild the group: after it, every group reflects the current
/// objects, which is what herald serves.
fn touch_endpoint_objects(sim: &Sim, n: u32) {
    use kube_sim::{Object, Write};
    let h = sim.handle();
    let mut writes = Vec::new();
    for v in h.objects_json(Kind::Service) {
        writes.push(Write::Put(Object::Service(touched(v, n))));
    }
    for v in h.objects_json(Kind::Endpoints) {
        writes.push(Write::Put(Object::Endpoints(touched(v, n))));
    }
    for v in h.objects_json(Kind::EndpointSlice) {
        writes.push(Write::Put(Object::EndpointSlice(touched(v, n))));
    }
    h.apply(writes);
}

type Peers = Vec<(&'static str, Promsd, Promsd)>;

/// Polls until, for every case, promsd on kube-sim lists exactly herald's body and promsd on herald's
/// face exactly what promsd on kube-sim lists; panics with the differences after
/// [`SETTLE_TIMEOUT`]. Returns herald's targets per case.
async fn agree(
    herald: &Herald,
    peers: &mut Peers,
    after: &str,
) -> BTreeMap<&'static str, Vec<Labels>> {
    agree_within(herald, peers, after, SETTLE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`agree`] within `timeout`, saying what differs when they do not agree.
async fn agree_within(
    herald: &Herald,
    peers: &mut Peers,
    after: &str,
    timeout: Duration,
) -> Result<BTreeMap<&'static str, Vec<Labels>>, String> {
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut done: BTreeMap<&'static str, Vec<Labels>> = BTreeMap::new();
    loop {
        let mut problems = Vec::new();
        for (name, on_sim, on_face) in peers.iter_mut() {
            if done.contains_key(name) {
                continue;
            }
            let views = Views {
                herald: served(&http, herald, name).await,
                on_sim: on_sim.targets(QUIET_MS).await,
                on_face: on_face.targets(QUIET_MS).await,
            };
            let p = problems_of(name, &views);
            if p.is_empty() {
                done.insert(name, views.herald);
            }
            problems.extend(p);
        }
        if problems.is_empty() {
            let counts: BTreeMap<_, _> = done.iter().map(|(k, v)| (*k, v.len())).collect();
            eprintln!("after {after}, targets per case: {counts:?}");
            return Ok(done);
        }
        if tokio::time::Instant::now() >= deadline {
            for (name, on_sim, _) in peers.iter() {
                if !done.contains_key(name) {
                    eprintln!(
                        "--- promsd on kube-sim for {name}, last 20 lines ---\n{}",
                        tail(&on_sim.log_text(), 20)
                    );
                }
            }
            let mut metrics = String::new();
            prometheus_client::encoding::text::encode(&mut metrics, herald.shared().registry())
                .expect("encode herald's metrics");
            let face: Vec<&str> = metrics
                .lines()
                .filter(|l| l.starts_with("herald_kube_watchers_closed_slow_total"))
                .collect();
            return Err(format!(
                "Prometheus's kubernetes_sd and herald did not agree within {timeout:?} after {after} \
                 (herald's face: {face:?}):\n{}",
                problems.join("\n")
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The `-meta` cases really carry namespace metadata (and node metadata for the roles that take
/// it), and the plain ones do not: agreeing on them would prove nothing otherwise.
fn assert_metadata_attached(found: &BTreeMap<&'static str, Vec<Labels>>) {
    let has = |case: &str, prefix: &str| {
        found[case]
            .iter()
            .any(|t| t.keys().any(|k| k.starts_with(prefix)))
    };
    for (case, node) in [
        ("pod-meta", true),
        ("service-meta", false),
        ("endpoints-meta", true),
        ("endpointslice-meta", true),
        ("ingress-meta", false),
    ] {
        let plain = case.trim_end_matches("-meta");
        assert!(
            has(case, "__meta_kubernetes_namespace_label"),
            "{case}: no namespace labels attached"
        );
        assert!(
            !has(plain, "__meta_kubernetes_namespace_label"),
            "{plain}: namespace labels without attach_metadata"
        );
        if node {
            assert!(
                has(case, "__meta_kubernetes_node_label"),
                "{case}: no node labels attached"
            );
            assert!(
                !has(plain, "__meta_kubernetes_node_label"),
                "{plain}: node labels without attach_metadata"
            );
        }
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
