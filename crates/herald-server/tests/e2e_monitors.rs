//! prometheus-operator monitors served by herald, judged by a real peer: for kube-sim's generated
//! ServiceMonitors and PodMonitors and hand-written ones exercising the operator's fields, vmagent
//! running kubernetes_sd against kube-sim with the scrape config the operator would generate for each
//! monitor endpoint (herald-core `monitor`, written from prometheus-operator's promcfg.go and checked
//! against its golden files there) lists the same active targets with the same final labels as a
//! vmagent reading herald's monitor jobs over HTTP SD. Monitors changed at runtime are picked up
//! without a restart, and `/scrape-configs` describes every job (promtool and Prometheus judge it in
//! `e2e_peers_scrape_configs.rs`; bad monitors are in `e2e_bad_monitors.rs`).
//!
//! NB: kept targets are scraped once (the interval is an hour) at kube-sim's loopback pod IPs.

#[path = "peers/harness.rs"]
mod peers;

use std::time::Duration;

use herald_core::monitor::{MonitorContext, MonitorJob};
use herald_server::Herald;
use kube_sim::peers as installed;
use kube_sim::peers::VmAgent;
use kube_sim::{Kind, Object, Sim, Write};
use peers::Labels;
use peers::cluster::{loopback_spec, start_herald, start_sim};
use peers::compare::differences;
use serde_json::{Value, json};

/// Hand-written monitors: targetPort by number, namespaceSelector matchNames and any, targetLabels,
/// podTargetLabels, jobLabel, the monitor's own relabelings, a secret reference (reported, not
/// served silently), a ServiceMonitor with its own `serviceDiscoveryRole`, a PodMonitor by port name,
/// and `selectorMechanism: RoleSelector` on each role.
fn hand_written(sim: &Sim) -> Vec<Object> {
    // A Service with a selector, its namespace and labels, from kube-sim's own cluster.
    let svc = peers::cluster::app_service(sim);
    let (ns, app, port_name) = (svc.namespace.as_str(), svc.app.as_str(), svc.port.as_str());
    let target_port = svc.target_port.clone();
    let monitor = peers::cluster::monitor;
    // Node metadata: asked for through a scrape class, by the monitor itself, and not at all
    // (herald's base jobs attach it for the first two; the third must not see it).
    let node_metadata = ["class", "own", "none"].map(|how| {
        let mut spec = json!({
            "selector": {"matchLabels": {"app": app}},
            "podMetricsEndpoints": [{"port": port_name, "relabelings": [
                {"sourceLabels": ["__meta_kubernetes_node_label_topology_kubernetes_io_zone"],
                 "targetLabel": "zone"},
                {"targetLabel": "node_metadata", "replacement": how},
            ]}],
        });
        match how {
            "class" => spec["scrapeClass"] = "zoned".into(),
            "own" => spec["attachMetadata"] = json!({"node": true}),
            _ => {}
        }
        monitor(Kind::PodMonitor, ns, &format!("hand-node-{how}"), spec)
    });
    // selectorMechanism RoleSelector on each ServiceMonitor role, its targets marked `selected_by`.
    let role_selector = |name: &str, role: &str, selector: Value, selected_by: &str| {
        let spec = json!({
            "selectorMechanism": "RoleSelector",
            "serviceDiscoveryRole": role,
            "selector": selector,
            "targetLabels": ["app"],
            "endpoints": [{"port": port_name, "relabelings": [
                {"targetLabel": "selected_by", "replacement": selected_by},
            ]}],
        });
        monitor(Kind::ServiceMonitor, ns, name, spec)
    };
    let role_selectors = [
        role_selector(
            "hand-role-selector",
            "Endpoints",
            json!({"matchLabels": {"app": app}}),
            "endpoints",
        ),
        role_selector(
            "hand-role-selector-slices",
            "EndpointSlice",
            json!({"matchExpressions": [
                {"key": "app", "operator": "In", "values": [app, "no-such-app"]},
                {"key": "no-such-label", "operator": "DoesNotExist"},
            ]}),
            "endpointslice",
        ),
        // Its Service lacks the managed-by label and would match; its EndpointSlices carry it, so
        // the role selector lists none of them: no targets (selection by the Service's labels
        // would keep them all).
        role_selector(
            "hand-role-selector-managed",
            "EndpointSlice",
            json!({"matchLabels": {"app": app}, "matchExpressions": [
                {"key": "endpointslice.kubernetes.io/managed-by", "operator": "DoesNotExist"},
            ]}),
            "unmanaged endpointslice",
        ),
    ];
    let mut out = vec![
        monitor(
            Kind::ServiceMonitor,
            "monitoring",
            "hand-any-namespace",
            json!({
                "scrapeClass": "mesh",
                "jobLabel": "app",
                "targetLabels": ["app"],
                "podTargetLabels": ["app", "pod-template-hash"],
                "selector": {"matchLabels": {"app": app}},
                "namespaceSelector": {"matchNames": [ns]},
                "endpoints": [
                    {"port": port_name, "interval": "15s", "path": "/metrics",
                     "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]},
                    {"targetPort": target_port, "scheme": "https",
                     "tlsConfig": {"insecureSkipVerify": true, "caFile": "/etc/prom/ca.crt"},
                     "bearerTokenSecret": {"name": "scrape-token", "key": "token"}},
                ],
            }),
        ),
        monitor(
            Kind::ServiceMonitor,
            ns,
            "hand-own-namespace",
            json!({
                "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]},
                "endpoints": [{"port": port_name, "params": {"format": ["prometheus"]}}],
            }),
        ),
        monitor(
            Kind::ServiceMonitor,
            ns,
            "hand-endpointslice",
            json!({
                "serviceDiscoveryRole": "EndpointSlice",
                "selector": {"matchLabels": {"app": app}},
                "targetLabels": ["app"],
                "endpoints": [{"port": port_name, "relabelings": [
                    {"sourceLabels": ["__meta_kubernetes_endpointslice_name"], "targetLabel": "slice"},
                ]}],
            }),
        ),
        // selectorMechanism RoleSelector: the selector goes to the discovery's list+watch, which
        // vmagent sends to kube-sim as a labelSelector; herald keeps by the objects' own labels.
        monitor(
            Kind::PodMonitor,
            ns,
            "hand-role-selector-pods",
            json!({
                "selectorMechanism": "RoleSelector",
                "selector": {"matchLabels": {"app": app}},
                "podMetricsEndpoints": [{"port": port_name, "relabelings": [
                    {"targetLabel": "selected_by", "replacement": "pod"},
                ]}],
            }),
        ),
        monitor(
            Kind::PodMonitor,
            ns,
            "hand-pods",
            json!({
                "selector": {"matchLabels": {"app": app}},
                "podTargetLabels": ["app"],
                "podMetricsEndpoints": [{"port": port_name, "path": "/stats"}],
            }),
        ),
    ];
    out.extend(role_selectors);
    out.extend(node_metadata);
    out
}

/// herald's monitors section for the vmagent test: both ServiceMonitor roles, node metadata in the
/// base jobs, and scrape classes: `zoned` attaching node metadata, a default one adding a label to
/// every monitor that names none, and `mesh` (named by `hand-any-namespace`) with a relabeling and
/// Istio's certificate files.
const MONITORS_WITH_CLASSES: &str = r#"jobs: []
monitors:
  service_discovery_roles: [Endpoints, EndpointSlice]
  attach_node_metadata: true
  scrape_classes:
  - name: zoned
    attachMetadata: {node: true}
  - name: plain
    default: true
    relabelings: [{targetLabel: scrape_class, replacement: plain}]
  - name: mesh
    relabelings: [{sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: class_node}]
    tlsConfig:
      caFile: /etc/prom-certs/root-cert.pem
      certFile: /etc/prom-certs/cert-chain.pem
      keyFile: /etc/prom-certs/key.pem
      insecureSkipVerify: true
"#;

/// What the operator would generate for `obj` with [`MONITORS_WITH_CLASSES`]'s scrape classes: the
/// monitor jobs herald-core derives.
fn jobs_of(obj: &Value) -> Vec<MonitorJob> {
    let config = herald_core::parse_config(MONITORS_WITH_CLASSES).expect("valid config");
    let monitors = config.monitors.expect("monitors");
    let ctx = MonitorContext {
        scrape_classes: monitors.scrape_classes(),
        node_metadata_attached: monitors.attach_node_metadata,
        ..MonitorContext::default()
    };
    let r = match obj["kind"].as_str() {
        Some("ServiceMonitor") => herald_core::monitor::service_monitor_jobs(obj, &ctx),
        Some("PodMonitor") => herald_core::monitor::pod_monitor_jobs(obj, &ctx),
        other => panic!("not a monitor: {other:?}"),
    };
    r.expect("kube-sim's and the test's monitors translate")
}

/// Every monitor in kube-sim, as JSON.
fn monitors(sim: &Sim) -> Vec<Value> {
    let mut out = sim.handle().objects_json(Kind::ServiceMonitor);
    out.extend(sim.handle().objects_json(Kind::PodMonitor));
    out
}

/// vmagent's config: for every monitor job, kubernetes_sd against kube-sim with the operator's
/// generated relabeling.
fn direct_config(api: &str, jobs: &[MonitorJob]) -> String {
    let mut out = String::from("global:\n  scrape_interval: 1h\nscrape_configs:\n");
    for j in jobs {
        out.push_str(&direct_job(j, api));
    }
    out
}

/// One job of the operator's config, as the operator would write it for a Prometheus with
/// kubernetes_sd: the discovery (role, namespaces, attach_metadata) and the generated relabeling.
fn direct_job(j: &MonitorJob, api: &str) -> String {
    use serde_yaml::{Mapping, Value as Y};
    let mut sd = Mapping::new();
    sd.insert("role".into(), j.role.as_str().into());
    sd.insert("api_server".into(), api.into());
    if !j.namespaces.is_empty() {
        let mut names = Mapping::new();
        names.insert(
            "names".into(),
            Y::Sequence(j.namespaces.iter().map(|n| Y::from(n.as_str())).collect()),
        );
        sd.insert("namespaces".into(), Y::Mapping(names));
    }
    if let Some(a) = j.attach_metadata {
        let mut attach = Mapping::new();
        attach.insert("node".into(), a.node.into());
        sd.insert("attach_metadata".into(), Y::Mapping(attach));
    }
    // With RoleSelector, the operator's selectors; herald's rules applying them are not written.
    let mut rules = &j.relabel_configs[..];
    if let Some(rs) = &j.role_selectors {
        let selectors = rs.roles.iter().map(|role| {
            let mut s = Mapping::new();
            s.insert("role".into(), (*role).into());
            s.insert("label".into(), rs.label.as_str().into());
            Y::Mapping(s)
        });
        sd.insert("selectors".into(), Y::Sequence(selectors.collect()));
        rules = &rules[rs.rules..];
    }
    let mut job = Mapping::new();
    job.insert("job_name".into(), j.name.as_str().into());
    job.insert("honor_labels".into(), j.scrape.honor_labels.into());
    job.insert(
        "kubernetes_sd_configs".into(),
        Y::Sequence(vec![Y::Mapping(sd)]),
    );
    job.insert(
        "relabel_configs".into(),
        Y::Sequence(rules.iter().map(|r| r.to_yaml()).collect()),
    );
    serde_yaml::to_string(&Y::Sequence(vec![Y::Mapping(job)])).expect("YAML")
}

fn through_config(herald: &str, names: &[String]) -> String {
    let mut out = String::from("global:\n  scrape_interval: 1h\nscrape_configs:\n");
    for n in names {
        out.push_str(&format!(
            "- job_name: '{n}'\n  http_sd_configs:\n  - url: '{herald}/sd/v1/{n}'\n"
        ));
    }
    out
}

/// Every active target's final labels, sorted. NB: not grouped by scrape job: vmagent 1.79 names a
/// target's pool by its final `job` label, which the operator's rules set (to the Service's name, the
/// `jobLabel` value, `<namespace>/<name>` for PodMonitors), so the jobs are compared as one multiset.
async fn active(vm: &mut VmAgent) -> Vec<Labels> {
    match vm.active_targets().await {
        Ok(mut t) => {
            t.sort();
            t
        }
        Err(e) => {
            if let Err(dead) = vm.check_alive() {
                panic!("{dead}: {e}");
            }
            Vec::new()
        }
    }
}

async fn sd_jobs(http: &reqwest::Client, herald: &Herald) -> Vec<Value> {
    let list = peers::cluster::get_json(http, &format!("{}/sd/v1", herald.url())).await;
    serde_json::from_value(list).expect("a list")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_jobs_equal_vmagent_running_the_operator_s_generated_config_and_follow_changes() {
    let Some(vm_bin) = installed::find("vmagent", installed::VMAGENT_INSTALL) else {
        return;
    };
    let sim = start_sim(loopback_spec(), 7).await;
    let planted = hand_written(&sim);
    sim.handle()
        .apply(planted.into_iter().map(Write::Put).collect());
    let herald = start_herald(&sim, MONITORS_WITH_CLASSES).await;
    let http = reqwest::Client::new();

    let jobs: Vec<MonitorJob> = monitors(&sim).iter().flat_map(jobs_of).collect();
    assert!(
        jobs.iter()
            .any(|j| j.name.contains("/hand-endpointslice/") && j.role.as_str() == "endpointslice"),
        "the monitor's own serviceDiscoveryRole is the job's role"
    );
    let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    assert!(
        names.len() > 5,
        "kube-sim and the test give several monitor jobs: {names:?}"
    );
    for want in [
        "serviceMonitor/monitoring/hand-any-namespace/0",
        "serviceMonitor/monitoring/hand-any-namespace/1",
        "podMonitor/",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(want)),
            "{want} in {names:?}"
        );
    }
    // herald lists exactly these jobs, and names the unsupported secret reference.
    let listed = sd_jobs(&http, &herald).await;
    let served: Vec<&str> = listed
        .iter()
        .filter(|j| j["monitor"] == true)
        .filter_map(|j| j["job"].as_str())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        served,
        sorted.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let status: Value =
        peers::cluster::get_json(&http, &format!("{}/status.json", herald.url())).await;
    assert_eq!(
        status["monitors"]["jobs"],
        names.len(),
        "{}",
        status["monitors"]
    );
    assert_eq!(status["monitors"]["ready"], true);
    let secret = listed
        .iter()
        .find(|j| j["job"] == "serviceMonitor/monitoring/hand-any-namespace/1")
        .expect("listed");
    assert!(
        secret["unsupported"]
            .to_string()
            .contains("bearerTokenSecret"),
        "{secret}"
    );

    let mut direct = VmAgent::start(&vm_bin, &direct_config(&sim.url(), &jobs)).await;
    let mut through = VmAgent::start(&vm_bin, &through_config(&herald.url(), &names)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut last = None;
    let agreed = loop {
        let d = active(&mut direct).await;
        let t = active(&mut through).await;
        let mut problems = Vec::new();
        if d != t {
            problems.push(
                differences("operator config on kube-sim", &d, "herald", &t)
                    .into_iter()
                    .take(12)
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
        }
        // Most monitor jobs have targets (one job label each, at least).
        let jobs_seen: std::collections::BTreeSet<&str> = d
            .iter()
            .filter_map(|l| l.get("job").map(String::as_str))
            .collect();
        if jobs_seen.len() * 2 < names.len() {
            problems.push(format!(
                "targets of only {} job labels: {jobs_seen:?}",
                jobs_seen.len()
            ));
        }
        if problems.is_empty() && last.as_ref() == Some(&d) {
            break d;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "herald's monitor jobs and the operator's config disagree:\n{}",
                problems.join("\n")
            );
        }
        last = Some(d);
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    // The RoleSelector monitors have targets, each role's selector listing what it selects.
    for role in ["endpoints", "endpointslice", "pod"] {
        assert!(
            agreed
                .iter()
                .any(|l| l.get("selected_by").map(String::as_str) == Some(role)),
            "the RoleSelector monitor on {role} has active targets"
        );
    }
    assert!(
        !agreed
            .iter()
            .any(|l| l.get("selected_by").map(String::as_str) == Some("unmanaged endpointslice")),
        "no EndpointSlice lacks the managed-by label"
    );
    // Node labels reach the monitors that attach node metadata, and only those.
    for (how, zoned) in [("class", true), ("own", true), ("none", false)] {
        let targets: Vec<&Labels> = agreed
            .iter()
            .filter(|l| l.get("node_metadata").map(String::as_str) == Some(how))
            .collect();
        assert!(!targets.is_empty(), "node metadata {how}: targets");
        assert!(
            targets.iter().all(|l| l.contains_key("zone") == zoned),
            "node metadata {how}: zone label {zoned}: {targets:?}"
        );
    }
    // The hand-written monitor's labels really came from the monitor: targetLabels, podTargetLabels,
    // its relabeling, the endpoint.
    // Only that endpoint's relabeling sets `node`.
    let hand: Vec<&Labels> = agreed.iter().filter(|l| l.contains_key("node")).collect();
    assert!(
        !hand.is_empty(),
        "the hand-written monitor's targets are active"
    );
    assert!(
        hand.iter().all(|l| l.contains_key("app")
            && l.contains_key("endpoint")
            && l.contains_key("service")),
        "{hand:?}"
    );
    // Scrape classes: the named class's relabeling on its monitor's targets, the default class's on
    // every other monitor's (but those naming `zoned`).
    assert!(
        hand.iter()
            .all(|l| l.contains_key("class_node") && !l.contains_key("scrape_class")),
        "{hand:?}"
    );
    let zoned = |l: &Labels| l.get("node_metadata").map(String::as_str) == Some("class");
    let others: Vec<&Labels> = agreed
        .iter()
        .filter(|l| !l.contains_key("class_node") && !zoned(l))
        .collect();
    assert!(!others.is_empty());
    assert!(
        others
            .iter()
            .all(|l| l.get("scrape_class").map(String::as_str) == Some("plain")),
        "{others:?}"
    );
    // The ServiceMonitor with its own serviceDiscoveryRole discovered through EndpointSlices.
    assert!(
        agreed
            .iter()
            .any(|l| l.get("slice").is_some_and(|s| !s.is_empty())),
        "the EndpointSlice monitor's targets are active, labelled with their slice"
    );
    drop((direct, through));

    // A monitor deleted and another changed at runtime: herald follows without a restart, and a
    // monitor that did not change keeps its job (and the bodies cached for it).
    let untouched = "serviceMonitor/monitoring/hand-any-namespace/0";
    let before = herald.shared().monitors.view(untouched).expect("served");
    let mut changed = sim
        .handle()
        .objects_json(Kind::ServiceMonitor)
        .into_iter()
        .find(|m| m["metadata"]["name"] == "hand-own-namespace")
        .expect("planted");
    changed["spec"]["endpoints"][0]["relabelings"] =
        json!([{"targetLabel": "changed", "replacement": "yes"}]);
    let gone = sim
        .handle()
        .objects_json(Kind::PodMonitor)
        .into_iter()
        .find(|m| m["metadata"]["name"] == "hand-pods")
        .expect("planted");
    sim.handle().apply(vec![
        Write::Put(Object::Custom(Kind::ServiceMonitor, changed.clone())),
        Write::Delete {
            kind: Kind::PodMonitor,
            namespace: gone["metadata"]["namespace"].as_str().map(str::to_string),
            name: "hand-pods".into(),
        },
    ]);
    let name = format!(
        "serviceMonitor/{}/hand-own-namespace/0",
        changed["metadata"]["namespace"].as_str().expect("ns")
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let listed = sd_jobs(&http, &herald).await;
        let pods_gone = !listed
            .iter()
            .any(|j| j["job"].as_str().is_some_and(|n| n.contains("/hand-pods/")));
        let body: Vec<Value> = http
            .get(format!("{}/sd/v1/{name}", herald.url()))
            .send()
            .await
            .expect("answers")
            .json()
            .await
            .unwrap_or_default();
        let relabeled = !body.is_empty() && body.iter().all(|e| e["labels"]["changed"] == "yes");
        if pods_gone && relabeled {
            let after = herald
                .shared()
                .monitors
                .view(untouched)
                .expect("still served");
            assert!(
                std::sync::Arc::ptr_eq(&before, &after),
                "the unchanged monitor's job was kept"
            );
            let changed_view = herald.shared().monitors.view(&name).expect("served");
            assert!(
                changed_view
                    .job
                    .relabel_configs
                    .iter()
                    .any(|r| r.target_label == "changed")
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "herald did not follow the monitor changes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // /scrape-configs: one job per monitor endpoint reading herald, sharded on request, the secret
    // reference written as a comment.
    let url = format!(
        "{}/scrape-configs?shard=1&shards=3&base=http://herald.monitoring:9095",
        herald.url()
    );
    let yaml = peers::cluster::get_text(&http, &url).await;
    let parsed: serde_yaml::Value = serde_yaml::from_str(&yaml).expect("valid YAML");
    let configs = parsed["scrape_configs"]
        .as_sequence()
        .expect("scrape_configs");
    let listed = sd_jobs(&http, &herald).await;
    assert_eq!(
        configs.len(),
        listed.iter().filter(|j| j["monitor"] == true).count()
    );
    let own = configs
        .iter()
        .find(|c| c["job_name"].as_str() == Some(name.as_str()))
        .expect("the changed monitor's job");
    assert_eq!(
        own["http_sd_configs"][0]["url"].as_str(),
        Some(format!("http://herald.monitoring:9095/sd/v1/{name}?shard=1&shards=3").as_str())
    );
    assert!(yaml.contains("bearerTokenSecret"), "{yaml}");
    // The `mesh` class's TLS files: the whole of it where the endpoint has no tlsConfig, the
    // certificate and key beside the endpoint's own CA file where it has one.
    let tls_of = |job: &str| {
        let c = configs
            .iter()
            .find(|c| c["job_name"].as_str() == Some(job))
            .unwrap_or_else(|| panic!("{job} in {yaml}"));
        let t = &c["tls_config"];
        ["ca_file", "cert_file", "key_file", "insecure_skip_verify"].map(|k| match &t[k] {
            serde_yaml::Value::String(s) => s.clone(),
            serde_yaml::Value::Bool(b) => b.to_string(),
            _ => String::new(),
        })
    };
    assert_eq!(
        tls_of("serviceMonitor/monitoring/hand-any-namespace/0"),
        [
            "/etc/prom-certs/root-cert.pem",
            "/etc/prom-certs/cert-chain.pem",
            "/etc/prom-certs/key.pem",
            "true"
        ]
    );
    assert_eq!(
        tls_of("serviceMonitor/monitoring/hand-any-namespace/1"),
        [
            "/etc/prom/ca.crt",
            "/etc/prom-certs/cert-chain.pem",
            "/etc/prom-certs/key.pem",
            "true"
        ]
    );
    herald.stop().await;
    sim.shutdown().await;
}

/// The monitor jobs herald lists, sorted.
async fn listed_monitor_jobs(http: &reqwest::Client, herald: &Herald) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = sd_jobs(http, herald)
        .await
        .iter()
        .filter(|j| j["monitor"] == true)
        .map(|j| {
            (
                j["job"].as_str().expect("name").to_string(),
                j["role"].as_str().expect("role").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitors_are_taken_from_a_prometheus_object_as_the_operator_selects_them_and_follow_it() {
    let sim = start_sim(loopback_spec(), 7).await;
    // ServiceMonitors labelled release=kube-prometheus-stack in namespaces with Istio injection, no
    // PodMonitor (a null selector), discovered through EndpointSlices.
    let mut prometheus = json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "mesh", "namespace": "monitoring"},
        "spec": {
            "serviceDiscoveryRole": "EndpointSlice",
            "serviceMonitorSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
            "serviceMonitorNamespaceSelector": {"matchLabels": {"istio-injection": "enabled"}},
            "podMonitorSelector": null,
        },
    });
    sim.handle().apply(vec![Write::Put(Object::Custom(
        Kind::Prometheus,
        prometheus.clone(),
    ))]);
    let herald = start_herald(
        &sim,
        "jobs: []\nmonitors: {prometheus: monitoring/mesh, service_discovery_role: EndpointSlice}\n",
    )
    .await;
    let http = reqwest::Client::new();

    let injected: Vec<String> = sim
        .handle()
        .objects_json(Kind::Namespace)
        .iter()
        .filter(|n| n["metadata"]["labels"]["istio-injection"] == "enabled")
        .map(|n| n["metadata"]["name"].as_str().expect("name").to_string())
        .collect();
    let ctx = MonitorContext {
        service_discovery_role: herald_core::Role::EndpointSlice,
        ..MonitorContext::default()
    };
    let expected = |with_pods: bool| {
        let mut out: Vec<(String, String)> = Vec::new();
        for m in sim.handle().objects_json(Kind::ServiceMonitor) {
            let ns = m["metadata"]["namespace"].as_str().expect("ns");
            if m["metadata"]["labels"]["release"] == "kube-prometheus-stack"
                && injected.iter().any(|n| n == ns)
            {
                for j in herald_core::monitor::service_monitor_jobs(&m, &ctx).expect("translates") {
                    out.push((j.name, j.role.as_str().to_string()));
                }
            }
        }
        if with_pods {
            for m in sim.handle().objects_json(Kind::PodMonitor) {
                for j in herald_core::monitor::pod_monitor_jobs(&m, &ctx).expect("translates") {
                    out.push((j.name, j.role.as_str().to_string()));
                }
            }
        }
        out.sort();
        out
    };
    let want = expected(false);
    assert!(!want.is_empty(), "some ServiceMonitors are selected");
    assert!(
        want.len() < sim.handle().objects_json(Kind::ServiceMonitor).len(),
        "and some are not"
    );
    assert!(want.iter().all(|(_, role)| role == "endpointslice"));
    assert_eq!(listed_monitor_jobs(&http, &herald).await, want);

    // The Prometheus object now selects every PodMonitor in every namespace: herald follows.
    prometheus["spec"]["podMonitorSelector"] = json!({});
    prometheus["spec"]["podMonitorNamespaceSelector"] = json!({});
    sim.handle().apply(vec![Write::Put(Object::Custom(
        Kind::Prometheus,
        prometheus.clone(),
    ))]);
    let want = expected(true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = listed_monitor_jobs(&http, &herald).await;
        if got == want {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "herald did not follow the Prometheus object: {got:?} != {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The Prometheus object switches to Endpoints, a role this herald keeps no base job for: its
    // ServiceMonitor jobs are reported by name with the fix, not served; its PodMonitor jobs stay.
    // A herald keeping both roles follows the switch.
    let both = start_herald(
        &sim,
        "jobs: []\nmonitors: {prometheus: monitoring/mesh, service_discovery_role: EndpointSlice, \
         service_discovery_roles: [EndpointSlice, Endpoints]}\n",
    )
    .await;
    assert_eq!(listed_monitor_jobs(&http, &both).await, want);
    prometheus["spec"]["serviceDiscoveryRole"] = json!("Endpoints");
    sim.handle().apply(vec![Write::Put(Object::Custom(
        Kind::Prometheus,
        prometheus.clone(),
    ))]);
    let switched: Vec<(String, String)> = want
        .iter()
        .map(|(name, role)| {
            let role = if role == "endpointslice" {
                "endpoints"
            } else {
                role
            };
            (name.clone(), role.to_string())
        })
        .collect();
    assert!(switched.iter().any(|(_, r)| r == "endpoints"));
    let pod_jobs: Vec<(String, String)> = want
        .iter()
        .filter(|(_, role)| role == "pod")
        .cloned()
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got_both = listed_monitor_jobs(&http, &both).await;
        let got_one = listed_monitor_jobs(&http, &herald).await;
        let errors: Vec<String> = sd_jobs(&http, &herald)
            .await
            .iter()
            .filter_map(|e| e["monitor_error"].as_str().map(str::to_string))
            .collect();
        let reported = switched
            .iter()
            .filter(|(_, r)| r == "endpoints")
            .all(|(name, _)| {
                errors.iter().any(|e| {
                    e.starts_with(&format!("{name}: discovers with role endpoints"))
                        && e.contains("add Endpoints to monitors.service_discovery_roles")
                })
            });
        if got_both == switched && got_one == pod_jobs && reported {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "after the switch to Endpoints: both roles {got_both:?} != {switched:?}, or one role \
             {got_one:?} != {pod_jobs:?}, or not reported: {errors:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Scrape classes from the Prometheus object: a default class's relabeling reaches every job; a
    // class the operator would refuse (invalid regex) is reported by name, and the jobs stay as
    // they were; fixed, it takes effect.
    let some_job = switched
        .iter()
        .find(|(_, r)| r == "endpoints")
        .map(|(n, _)| n.clone())
        .expect("a ServiceMonitor job");
    let has_class_rule = |h: &Herald, value: &str| {
        h.shared().monitors.view(&some_job).is_some_and(|v| {
            v.job
                .relabel_configs
                .iter()
                .any(|r| r.target_label == "tier" && r.replacement == value)
        })
    };
    let mut set_class = |regex: &str, value: &str| {
        prometheus["spec"]["scrapeClasses"] = json!([{"name": "cluster", "default": true,
            "relabelings": [{"sourceLabels": ["__address__"], "regex": regex,
                "targetLabel": "tier", "replacement": value}]}]);
        sim.handle().apply(vec![Write::Put(Object::Custom(
            Kind::Prometheus,
            prometheus.clone(),
        ))]);
    };
    set_class("(.*)", "one");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !has_class_rule(&both, "one") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the default scrape class did not reach {some_job}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    set_class("(", "two");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let errors: Vec<String> = sd_jobs(&http, &both)
            .await
            .iter()
            .filter_map(|e| e["monitor_error"].as_str().map(str::to_string))
            .collect();
        if errors.iter().any(|e| {
            e.contains(
                "Prometheus monitoring/mesh: spec.scrapeClasses: \"cluster\": relabelings[0]",
            ) && e.contains("last valid state")
        }) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bad scrape class is not reported: {errors:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(listed_monitor_jobs(&http, &both).await, switched);
    assert!(has_class_rule(&both, "one"), "the last valid jobs are kept");
    set_class("(.*)", "three");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !has_class_rule(&both, "three") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fixed scrape class did not take effect"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    both.stop().await;
    herald.stop().await;
    sim.shutdown().await;
}
