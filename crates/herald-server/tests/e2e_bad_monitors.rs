//! Bad prometheus-operator monitors beside good ones, on kube-sim: each bad one is reported by name
//! with the field, regex or port at fault — in `/sd/v1` (`monitor_error`, or the job's `warnings`),
//! on the status page and in `/scrape-configs` — while every good monitor's job serves exactly what
//! it served before the bad ones came, herald stays ready (and becomes ready when it starts among
//! them), `promtool` still accepts the scrape configs, and fixing a bad monitor in kube-sim makes it
//! served without a restart.
//!
//! What is bad, and what herald does with it:
//! - a field the operator's CRD does not have (a typo): served without it, reported;
//! - an invalid regex in relabelings or metricRelabelings, a scrape timeout over the interval: not
//!   served (the operator rejects such a monitor), reported;
//! - a port (`port`, `targetPort`, a PodMonitor's `port`) that matches no port of the Services or
//!   pods the monitor selects: served, empty, the job's `warnings` naming the port.

#[path = "peers/harness.rs"]
mod peers;

use std::collections::BTreeMap;
use std::time::Duration;

use herald_server::Herald;
use kube_sim::peers as installed;
use kube_sim::{Kind, Object, Write};
use peers::cluster::{
    AppService, app_service, get_json, get_text, loopback_spec, metric, start_herald, start_sim,
};
use serde_json::{Value, json};

const JOBS: &str = "jobs: []\nmonitors: {}\n";

fn monitor(kind: Kind, ns: &str, name: &str, spec: Value) -> Object {
    Object::Custom(
        kind,
        json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": kind.name(),
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }),
    )
}

/// The bad monitors, and (`fixed`) the same monitors as their authors meant them.
fn monitors(p: &AppService, fixed: bool) -> Vec<Object> {
    let (ns, app, port) = (p.namespace.as_str(), p.app.as_str(), p.port.as_str());
    let selector = json!({"matchLabels": {"app": app}});
    let pick = |bad: Value, good: Value| if fixed { good } else { bad };
    vec![
        monitor(
            Kind::ServiceMonitor,
            ns,
            "bad-typo",
            json!({
                "selector": selector,
                "endpoints": [pick(json!({"port": port, "interval": "30s", "prot": "web"}),
                                   json!({"port": port, "interval": "30s"}))],
            }),
        ),
        monitor(
            Kind::ServiceMonitor,
            ns,
            "bad-regex",
            json!({
                "selector": selector,
                "endpoints": [{"port": port, "relabelings": [{
                    "sourceLabels": ["__meta_kubernetes_pod_name"], "action": "keep",
                    "regex": pick(json!("web-(["), json!(".+")),
                }]}],
            }),
        ),
        monitor(
            Kind::PodMonitor,
            ns,
            "bad-metric-regex",
            json!({
                "selector": selector,
                "podMetricsEndpoints": [{"port": port, "metricRelabelings": [{
                    "sourceLabels": ["__name__"], "action": "drop",
                    "regex": pick(json!("go_(?P<x"), json!("go_.*")),
                }]}],
            }),
        ),
        monitor(
            Kind::ServiceMonitor,
            ns,
            "bad-timeout",
            json!({
                "selector": selector,
                "endpoints": [{"port": port, "interval": "15s",
                               "scrapeTimeout": pick(json!("1m"), json!("10s"))}],
            }),
        ),
        monitor(
            Kind::ServiceMonitor,
            ns,
            "bad-ports",
            json!({
                "selector": selector,
                "endpoints": [
                    {"port": pick(json!("metrcs-typo"), json!(port))},
                    pick(json!({"targetPort": "no-such-container-port"}), json!({"port": port})),
                ],
            }),
        ),
        monitor(
            Kind::PodMonitor,
            ns,
            "bad-pod-port",
            json!({
                "selector": selector,
                "podMetricsEndpoints": [{"port": pick(json!("no-such-pod-port"), json!(port))}],
            }),
        ),
    ]
}

/// Every monitor job's body (`/sd/v1/<job>`) and its `/sd/v1` entry.
async fn monitor_jobs(http: &reqwest::Client, herald: &Herald) -> BTreeMap<String, (Value, Value)> {
    let listed = get_json(http, &format!("{}/sd/v1", herald.url())).await;
    let mut out = BTreeMap::new();
    for entry in listed.as_array().expect("a list") {
        if entry["monitor"] != true {
            continue;
        }
        let name = entry["job"].as_str().expect("job").to_string();
        let body = get_json(http, &format!("{}/sd/v1/{name}", herald.url())).await;
        // What a job serves is compared by its body; `served_targets` tells whether a body was
        // built before this listing, which differs between two heralds.
        let mut entry = entry.clone();
        entry
            .as_object_mut()
            .expect("an entry")
            .remove("served_targets");
        out.insert(name, (entry, body));
    }
    out
}

/// The `monitor_error` entries of `/sd/v1`, as (message, served).
async fn monitor_errors(http: &reqwest::Client, herald: &Herald) -> Vec<(String, bool)> {
    let listed = get_json(http, &format!("{}/sd/v1", herald.url())).await;
    listed
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|e| {
            let message = e["monitor_error"].as_str()?.to_string();
            Some((message, e["served"].as_bool().expect("served flag")))
        })
        .collect()
}

async fn is_ready(http: &reqwest::Client, herald: &Herald) -> bool {
    let res = http
        .get(format!("{}/readyz", herald.url()))
        .send()
        .await
        .expect("herald answers");
    res.status() == 200
}

/// Polls `check` until it returns `Ok`, for at most 10 s (monitor changes take effect within 1 s).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match check().await {
            Ok(()) => return,
            Err(e) if tokio::time::Instant::now() >= deadline => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The `warnings` of a listed job.
fn warnings(entry: &Value) -> Vec<String> {
    entry["warnings"]
        .as_array()
        .expect("a monitor job lists its warnings")
        .iter()
        .map(|w| w.as_str().expect("a string").to_string())
        .collect()
}

fn has(items: &[String], needles: &[&str]) -> bool {
    items.iter().any(|i| needles.iter().all(|n| i.contains(n)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_monitors_are_reported_by_name_and_never_stop_the_good_ones() {
    let sim = start_sim(loopback_spec(), 7).await;
    let picked = app_service(&sim);
    let ns = picked.namespace.clone();
    let http = reqwest::Client::new();

    // Before: kube-sim's own (good) monitors, every job without a problem.
    let herald = start_herald(&sim, JOBS).await;
    let before = monitor_jobs(&http, &herald).await;
    assert!(before.len() > 5, "kube-sim's monitors give several jobs");
    assert!(
        before
            .values()
            .filter(|(_, body)| body != &json!([]))
            .count()
            * 2
            > before.len(),
        "most good jobs have targets"
    );
    for (name, (entry, _)) in &before {
        assert_eq!(warnings(entry), Vec::<String>::new(), "{name}");
    }
    assert_eq!(monitor_errors(&http, &herald).await, []);

    // The bad monitors arrive at runtime.
    sim.handle().apply(
        monitors(&picked, false)
            .into_iter()
            .map(Write::Put)
            .collect(),
    );
    let typo = format!("serviceMonitor/{ns}/bad-typo/0");
    let no_port = format!("serviceMonitor/{ns}/bad-ports/0");
    let no_target_port = format!("serviceMonitor/{ns}/bad-ports/1");
    let no_pod_port = format!("podMonitor/{ns}/bad-pod-port/0");
    let reported = |errors: &[(String, bool)]| -> Result<(), String> {
        let not_served: Vec<String> = errors
            .iter()
            .filter(|(_, served)| !served)
            .map(|(m, _)| m.clone())
            .collect();
        let served: Vec<String> = errors
            .iter()
            .filter(|(_, served)| *served)
            .map(|(m, _)| m.clone())
            .collect();
        let want_not_served: [&[&str]; 3] = [
            &[
                &format!("ServiceMonitor {ns}/bad-regex"),
                "spec.endpoints[0].relabelings[0]",
                "web-([",
            ],
            &[
                &format!("PodMonitor {ns}/bad-metric-regex"),
                "spec.podMetricsEndpoints[0].metricRelabelings[0]",
                "go_(?P<x",
            ],
            &[
                &format!("ServiceMonitor {ns}/bad-timeout"),
                "spec.endpoints[0].scrapeTimeout",
                "\"1m\" is greater than interval \"15s\"",
            ],
        ];
        for want in want_not_served {
            if !has(&not_served, want) {
                return Err(format!("{want:?} not among {not_served:#?}"));
            }
        }
        let unknown = [
            &format!("ServiceMonitor {ns}/bad-typo"),
            "unknown field spec.endpoints[0].prot",
        ];
        if !has(&served, &unknown) {
            return Err(format!("{unknown:?} not among {served:#?}"));
        }
        if errors.len() != 4 {
            return Err(format!("exactly these four: {errors:#?}"));
        }
        Ok(())
    };
    eventually("herald reports the bad monitors", || async {
        reported(&monitor_errors(&http, &herald).await)
    })
    .await;
    assert!(is_ready(&http, &herald).await, "herald stays ready");
    // And counts them for alerting: three not served, one served without its unknown field.
    let problem_count = |served: &'static str| {
        let (http, herald) = (&http, &herald);
        async move {
            metric(
                http,
                herald,
                &format!("herald_monitor_problems{{served=\"{served}\"}}"),
            )
            .await
        }
    };
    assert_eq!(problem_count("false").await, Some(3.0));
    assert_eq!(problem_count("true").await, Some(1.0));

    // The good jobs serve what they served; the served bad ones say what is wrong with them.
    let during = monitor_jobs(&http, &herald).await;
    for (name, (_, body)) in &before {
        let (entry, now) = during
            .get(name)
            .unwrap_or_else(|| panic!("{name} is still served"));
        assert_eq!(now, body, "{name} serves what it served");
        assert_eq!(warnings(entry), Vec::<String>::new(), "{name}");
    }
    // Each body fetched above is built: the listing now says how many targets it serves (a port
    // that matches nothing: 0, beside the job's warning).
    let listed = get_json(&http, &format!("{}/sd/v1", herald.url())).await;
    for entry in listed.as_array().expect("a list") {
        let Some((_, body)) = entry["job"].as_str().and_then(|n| during.get(n)) else {
            continue;
        };
        let served: usize = body
            .as_array()
            .expect("groups")
            .iter()
            .map(|g| g["targets"].as_array().expect("targets").len())
            .sum();
        assert_eq!(entry["served_targets"], served, "{entry}");
    }
    let bad: BTreeMap<&String, &(Value, Value)> = during
        .iter()
        .filter(|(name, _)| !before.contains_key(*name))
        .collect();
    assert_eq!(
        bad.keys().map(|n| n.as_str()).collect::<Vec<_>>(),
        {
            let mut v = [&no_pod_port, &no_port, &no_target_port, &typo]
                .map(String::as_str)
                .to_vec();
            v.sort();
            v
        },
        "of the bad monitors, the typo'd and the port ones are served"
    );
    let (typo_entry, typo_body) = &during[&typo];
    assert_eq!(
        warnings(typo_entry),
        ["unknown field spec.endpoints[0].prot (not in the operator's CRD: ignored)"]
    );
    assert_ne!(
        typo_body,
        &json!([]),
        "the typo'd monitor serves its targets"
    );
    for (job, field, port, among) in [
        (
            &no_port,
            "spec.endpoints[0].port",
            "metrcs-typo",
            "the ports of the selected Services",
        ),
        (
            &no_target_port,
            "spec.endpoints[1].targetPort",
            "no-such-container-port",
            "the container ports of the selected Services' pods",
        ),
        (
            &no_pod_port,
            "spec.podMetricsEndpoints[0].port",
            "no-such-pod-port",
            "the container ports of the selected pods",
        ),
    ] {
        let (entry, body) = &during[job];
        assert_eq!(body, &json!([]), "{job} has no targets");
        let w = warnings(entry);
        assert!(
            has(
                &w,
                &[
                    &format!("{field} \"{port}\" matches none of {among} (they have "),
                    "\"",
                    ": the job has no targets"
                ]
            ),
            "{job}: {w:?}"
        );
    }
    // The port the Service does have is listed.
    assert!(
        warnings(&during[&no_port].0)[0].contains(&format!("\"{}\"", picked.port)),
        "{:?}",
        warnings(&during[&no_port].0)
    );

    // The status page and status.json list them; /scrape-configs has the problems as comments and
    // promtool still accepts it.
    let status = get_json(&http, &format!("{}/status.json", herald.url())).await;
    let problems: Vec<String> =
        serde_json::from_value(status["monitors"]["problems"].clone()).expect("problems");
    let status_warnings: Vec<String> =
        serde_json::from_value(status["monitors"]["warnings"].clone()).expect("warnings");
    assert!(
        has(&problems, &[&format!("{ns}/bad-regex"), "web-(["]),
        "{problems:?}"
    );
    assert!(
        has(
            &status_warnings,
            &[&format!("{ns}/bad-typo"), "spec.endpoints[0].prot"]
        ),
        "{status_warnings:?}"
    );
    assert_eq!(status["monitors"]["ready"], true);
    let page = get_text(&http, &format!("{}/", herald.url())).await;
    for name in ["bad-regex", "bad-metric-regex", "bad-timeout", "bad-typo"] {
        assert!(
            page.contains(&format!("{ns}/{name}")),
            "the status page names {name}"
        );
    }
    let yaml = get_text(&http, &format!("{}/scrape-configs", herald.url())).await;
    assert!(
        yaml.contains(&format!(
            "# warning: unknown field spec.endpoints[0].prot (not in the operator's CRD: ignored)\n- job_name: {typo}\n"
        )),
        "{yaml}"
    );
    for name in ["bad-regex", "bad-metric-regex", "bad-timeout"] {
        assert!(
            yaml.lines()
                .any(|l| l.starts_with("# not served: ") && l.contains(&format!("{ns}/{name}"))),
            "{name}: {yaml}"
        );
        assert!(!yaml.contains(&format!("job_name: serviceMonitor/{ns}/{name}/")));
        assert!(!yaml.contains(&format!("job_name: podMonitor/{ns}/{name}/")));
    }
    if let Some(promtool) = installed::find("promtool", installed::PROMETHEUS_INSTALL) {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = format!("global: {{scrape_interval: 30s}}\n{yaml}");
        peers::prometheus::promtool_check(&promtool, dir.path(), "bad-monitors", &config);
    }

    // A herald started among the bad monitors becomes ready, reports the same and serves the same.
    let second = start_herald(&sim, JOBS).await;
    let mut first_errors = monitor_errors(&http, &herald).await;
    let mut second_errors = monitor_errors(&http, &second).await;
    first_errors.sort();
    second_errors.sort();
    assert_eq!(second_errors, first_errors);
    assert_eq!(monitor_jobs(&http, &second).await, during);
    second.stop().await;

    // Fixed in kube-sim: served, without a restart, with targets and nothing to report.
    sim.handle().apply(
        monitors(&picked, true)
            .into_iter()
            .map(Write::Put)
            .collect(),
    );
    eventually("herald serves the fixed monitors", || async {
        let errors = monitor_errors(&http, &herald).await;
        if !errors.is_empty() {
            return Err(format!("still reported: {errors:#?}"));
        }
        let jobs = monitor_jobs(&http, &herald).await;
        for name in [
            "bad-typo",
            "bad-regex",
            "bad-timeout",
            "bad-ports",
            "bad-pod-port",
            "bad-metric-regex",
        ] {
            let served: Vec<(&String, &(Value, Value))> = jobs
                .iter()
                .filter(|(n, _)| n.contains(&format!("/{ns}/{name}/")))
                .collect();
            if served.is_empty() {
                return Err(format!("{name} is not served"));
            }
            for (job, (entry, body)) in served {
                if body == &json!([]) || !warnings(entry).is_empty() {
                    return Err(format!("{job}: {entry} {body}"));
                }
            }
        }
        for (name, (_, body)) in &before {
            if jobs.get(name).map(|(_, b)| b) != Some(body) {
                return Err(format!("{name} changed"));
            }
        }
        Ok(())
    })
    .await;
    assert!(is_ready(&http, &herald).await);
    assert_eq!(problem_count("false").await, Some(0.0));
    assert_eq!(problem_count("true").await, Some(0.0));
    assert_eq!(
        metric(&http, &herald, "herald_monitor_jobs").await,
        Some(monitor_jobs(&http, &herald).await.len() as f64)
    );
    herald.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_asking_for_node_metadata_herald_does_not_attach_is_served_and_warned_about() {
    let sim = start_sim(loopback_spec(), 7).await;
    let picked = app_service(&sim);
    let (ns, app, port) = (&picked.namespace, &picked.app, &picked.port);
    sim.handle().apply(vec![Write::Put(monitor(
        Kind::PodMonitor,
        ns,
        "wants-nodes",
        json!({
            "attachMetadata": {"node": true},
            "selector": {"matchLabels": {"app": app}},
            "podMetricsEndpoints": [{"port": port}],
        }),
    ))]);
    let http = reqwest::Client::new();
    let herald = start_herald(&sim, JOBS).await;
    let job = format!("podMonitor/{ns}/wants-nodes/0");
    let jobs = monitor_jobs(&http, &herald).await;
    let (entry, body) = jobs.get(&job).expect("served");
    assert_ne!(body, &json!([]), "served, with its targets");
    let w = warnings(entry);
    assert!(
        has(
            &w,
            &["attachMetadata.node", "monitors.attach_node_metadata"]
        ),
        "{w:?}"
    );
    assert!(
        monitor_errors(&http, &herald)
            .await
            .iter()
            .any(|(m, served)| *served && m.contains(&job) && m.contains("attachMetadata")),
        "listed among the monitors served with a problem"
    );
    let url = format!("{}/scrape-configs", herald.url());
    assert!(
        get_text(&http, &url)
            .await
            .contains("# warning: attachMetadata.node"),
        "written before its job in /scrape-configs"
    );
    herald.stop().await;

    // With node metadata in the base jobs, nothing to report.
    let herald = start_herald(&sim, "jobs: []\nmonitors: {attach_node_metadata: true}\n").await;
    let jobs = monitor_jobs(&http, &herald).await;
    let (entry, _) = jobs.get(&job).expect("served");
    assert_eq!(warnings(entry), Vec::<String>::new());
    herald.stop().await;
}
