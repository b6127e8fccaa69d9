//! A real peer as the judge of herald's server-side relabeling: vmagent 1.79 running kubernetes_sd
//! against kube-sim with a job's `relabel_configs`, and a second vmagent reading the same job from
//! herald (`http_sd_configs`, no relabeling of its own), list the same active targets with the same
//! final labels.
//!
//! The rules exercise replace (`$1`, `${1}`, multiple source labels, anchoring, a target label that
//! does not exist yet), keep, drop, keepequal, labelmap (with a replacement), labeldrop, labelkeep,
//! lowercase and uppercase. Two translations for vmagent 1.79, which lacks Prometheus's `keepequal`:
//! `keepequal` with source `[a]` and target `b` is its `keep_if_equal` on `[a, b]` (keep when all are
//! equal) — the same test. `hashmod` is not compared: VictoriaMetrics hashes with xxhash, Prometheus
//! with MD5; herald follows Prometheus, checked by the ported relabel tests and the shard tests.
//!
//! The `annotations: prometheus.io` preset is judged the same way: vmagent runs the prometheus-community
//! chart's own `kubernetes-pods` and `kubernetes-service-endpoints` rules (charts/prometheus/values.yaml
//! at cf408a290aec489277a94450bb3511432477a53a, copied below as the chart writes them) against
//! kube-sim, whose pods carry `prometheus.io/*` annotations and where the test annotates Services.
//!
//! NB: the kept targets are scraped by the two vmagents (once: the scrape interval is an hour) at
//! kube-sim's loopback pod IPs, where nothing listens; nothing else is dialed.

#[path = "peers/harness.rs"]
mod peers;

use std::collections::BTreeMap;
use std::time::Duration;

use kube_sim::peers as installed;
use kube_sim::peers::VmAgent;
use kube_sim::{Kind, Object, Sim, Write};
use peers::Labels;
use peers::cluster::{loopback_spec, start_herald, start_sim};
use peers::compare::{by_job, differences};

/// (job, role, relabel_configs): `KEEPEQUAL` stands for the one rule written differently for vmagent.
const JOBS: [(&str, &str, &str); 2] = [
    (
        "relabel-pods",
        "pod",
        r#"
  - {source_labels: [__meta_kubernetes_pod_phase], regex: Running, action: keep}
  - {source_labels: [__meta_kubernetes_pod_container_port_number], regex: '', action: drop}
  - source_labels: [__meta_kubernetes_pod_ip, __meta_kubernetes_pod_container_port_number]
    regex: '(.+);(.+)'
    target_label: __address__
    replacement: '${1}:$2'
  - {target_label: __tmp_ready, replacement: 'true'}
  KEEPEQUAL
  - {action: labelmap, regex: '__meta_kubernetes_pod_label_(.+)', replacement: 'pod_label_$1'}
  - {action: labeldrop, regex: 'pod_label_pod_template_.*'}
  - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
  - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
  - {source_labels: [__meta_kubernetes_pod_container_name], target_label: container, action: uppercase}
  - {source_labels: [__meta_kubernetes_pod_node_name], target_label: NODE_lower, action: lowercase}
  - source_labels: [__meta_kubernetes_pod_container_port_name, __meta_kubernetes_pod_container_port_protocol]
    regex: '([a-z]+)-?(.*);(.*)'
    target_label: 'port_${3}'
    replacement: '$2/$1'
  - {source_labels: [__meta_kubernetes_pod_name], regex: 'web', action: drop}
  - {source_labels: [namespace], regex: 'kube-.*', action: drop}
"#,
    ),
    (
        "relabel-endpointslices",
        "endpointslice",
        r#"
  - {source_labels: [__meta_kubernetes_endpointslice_port_name], regex: '.+', action: keep}
  - {source_labels: [__meta_kubernetes_pod_name], regex: '.+', action: keep}
  - {source_labels: [__meta_kubernetes_endpointslice_endpoint_conditions_ready], target_label: __tmp_ready, replacement: 'true'}
  KEEPEQUAL
  - {source_labels: [__meta_kubernetes_service_name, __meta_kubernetes_endpointslice_port_name], separator: '/', target_label: svc_port}
  - {action: labelmap, regex: '__meta_kubernetes_service_label_(.+)'}
  - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
  # `job` too: a Prometheus or vmagent job's own rules see the `job` label it sets before relabeling;
  # herald's do not (it does not know its consumers' job names), so a labelkeep must name it.
  - {action: labelkeep, regex: '__.*|job|svc_port|namespace|app|tier'}
"#,
    ),
];

const HERALD_KEEPEQUAL: &str = "- {source_labels: [__meta_kubernetes_pod_ready], target_label: __tmp_ready, action: keepequal}";
const VMAGENT_KEEPEQUAL: &str =
    "- {source_labels: [__meta_kubernetes_pod_ready, __tmp_ready], action: keep_if_equal}";

fn rules(rules: &str, keepequal: &str) -> String {
    rules.replace("KEEPEQUAL", keepequal)
}

fn herald_jobs() -> String {
    let mut out = String::from("jobs:\n");
    for (job, role, r) in JOBS {
        out.push_str(&format!(
            "- name: {job}\n  role: {role}\n  relabel_configs:{}",
            rules(r, HERALD_KEEPEQUAL)
        ));
    }
    out
}

fn vmagent_direct(api_server: &str) -> String {
    let mut out = String::from("global:\n  scrape_interval: 1h\nscrape_configs:\n");
    for (job, role, r) in JOBS {
        out.push_str(&format!(
            "- job_name: {job}\n  kubernetes_sd_configs:\n  - role: {role}\n    api_server: {api_server}\n  relabel_configs:{}",
            rules(r, VMAGENT_KEEPEQUAL)
        ));
    }
    out
}

fn vmagent_through_herald(herald: &str, jobs: &[&str]) -> String {
    let mut out = String::from("global:\n  scrape_interval: 1h\nscrape_configs:\n");
    for job in jobs {
        out.push_str(&format!(
            "- job_name: {job}\n  http_sd_configs:\n  - url: {herald}/sd/v1/{job}\n"
        ));
    }
    out
}

const SETTLE: Duration = Duration::from_secs(60);

async fn active(vm: &mut VmAgent, who: &str) -> BTreeMap<String, Vec<Labels>> {
    match vm.active_targets().await {
        Ok(t) => by_job(t),
        Err(e) => {
            if let Err(dead) = vm.check_alive() {
                panic!("{who}: {dead}: {e}");
            }
            BTreeMap::new()
        }
    }
}

/// Polls until, for every job of `jobs`, the vmagent on kube-sim lists active targets and the vmagent
/// on herald lists the same ones with the same final labels, twice in a row; returns them by job.
async fn agree(
    direct: &mut VmAgent,
    through: &mut VmAgent,
    jobs: &[&str],
) -> BTreeMap<String, Vec<Labels>> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut last = None;
    loop {
        let d = active(direct, "vmagent on kube-sim").await;
        let t = active(through, "vmagent on herald").await;
        let mut problems = Vec::new();
        for job in jobs {
            let (dj, tj) = (
                d.get(*job).map(Vec::as_slice).unwrap_or_default(),
                t.get(*job).map(Vec::as_slice).unwrap_or_default(),
            );
            if dj.is_empty() {
                problems.push(format!(
                    "vmagent on kube-sim lists no active target for {job}"
                ));
            }
            if dj != tj {
                problems.push(format!(
                    "{job}:\n{}",
                    differences("kube-sim + relabel_configs", dj, "herald", tj)
                        .into_iter()
                        .take(10)
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
        }
        if problems.is_empty() && last.as_ref() == Some(&d) {
            return d;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "the two vmagents did not agree within {SETTLE:?}:\n{}",
                problems.join("\n")
            );
        }
        last = Some(d);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vmagent_relabeling_kube_sim_and_vmagent_reading_herald_s_relabeled_jobs_list_the_same_targets()
 {
    let Some(vm_bin) = installed::find("vmagent", installed::VMAGENT_INSTALL) else {
        return;
    };
    let sim = start_sim(loopback_spec(), 7).await;
    let herald = start_herald(&sim, &herald_jobs()).await;
    let names: Vec<&str> = JOBS.iter().map(|(j, _, _)| *j).collect();
    let mut direct = VmAgent::start(&vm_bin, &vmagent_direct(&sim.url())).await;
    // vmagent's http_sd refreshes every 60 s by default; its first fetch happens at start, after
    // herald's first sync, so one fetch sees the whole relabeled job.
    let mut through = VmAgent::start(&vm_bin, &vmagent_through_herald(&herald.url(), &names)).await;
    let d = agree(&mut direct, &mut through, &names).await;
    // The rules must really have done something: every label is one the rules made.
    let pods = &d["relabel-pods"];
    assert!(pods.iter().all(|l| l.contains_key("pod")
        && l["container"] == l["container"].to_uppercase()
        && l.keys().all(|k| !k.starts_with("pod_label_pod_template_"))));
    assert!(
        pods.iter()
            .any(|l| l.keys().any(|k| k.starts_with("port_")))
    );
    let eps = &d["relabel-endpointslices"];
    assert!(eps.iter().all(|l| l["svc_port"].contains('/')
        && l.keys().all(|k| {
            ["svc_port", "namespace", "app", "tier", "job", "instance"].contains(&k.as_str())
        })));
    drop((direct, through));
    herald.stop().await;
    sim.shutdown().await;
}

/// The chart's `kubernetes-pods` relabel_configs, as charts/prometheus/values.yaml writes them.
const CHART_PODS: &str = r#"
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
    action: keep
    regex: true
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape_slow]
    action: drop
    regex: true
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scheme]
    action: replace
    regex: (https?)
    target_label: __scheme__
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
    action: replace
    target_label: __metrics_path__
    regex: (.+)
  - source_labels:
    - __meta_kubernetes_pod_annotation_prometheus_io_port
    - __meta_kubernetes_pod_ip
    action: replace
    regex: (\d+);(([A-Fa-f0-9]{1,4}::?){1,7}[A-Fa-f0-9]{1,4})
    replacement: '[$2]:$1'
    target_label: __address__
  - source_labels:
    - __meta_kubernetes_pod_annotation_prometheus_io_port
    - __meta_kubernetes_pod_ip
    action: replace
    regex: (\d+);((([0-9]+?)(\.|$)){4})
    replacement: $2:$1
    target_label: __address__
  - action: labelmap
    regex: __meta_kubernetes_pod_annotation_prometheus_io_param_(.+)
    replacement: __param_$1
  - action: labelmap
    regex: __meta_kubernetes_pod_label_(.+)
  - source_labels: [__meta_kubernetes_namespace]
    action: replace
    target_label: namespace
  - source_labels: [__meta_kubernetes_pod_name]
    action: replace
    target_label: pod
  - source_labels: [__meta_kubernetes_pod_phase]
    regex: Pending|Succeeded|Failed|Completed
    action: drop
  - source_labels: [__meta_kubernetes_pod_node_name]
    action: replace
    target_label: node
"#;

/// The chart's `kubernetes-service-endpoints` relabel_configs (its role is endpointslice).
const CHART_SERVICE_ENDPOINTS: &str = r#"
  - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scrape]
    action: keep
    regex: true
  - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scrape_slow]
    action: drop
    regex: true
  - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scheme]
    action: replace
    target_label: __scheme__
    regex: (https?)
  - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_path]
    action: replace
    target_label: __metrics_path__
    regex: (.+)
  - source_labels:
    - __address__
    - __meta_kubernetes_service_annotation_prometheus_io_port
    action: replace
    target_label: __address__
    regex: (.+?)(?::\d+)?;(\d+)
    replacement: $1:$2
  - action: labelmap
    regex: __meta_kubernetes_service_annotation_prometheus_io_param_(.+)
    replacement: __param_$1
  - action: labelmap
    regex: __meta_kubernetes_service_label_(.+)
  - source_labels: [__meta_kubernetes_namespace]
    action: replace
    target_label: namespace
  - source_labels: [__meta_kubernetes_service_name]
    action: replace
    target_label: service
  - source_labels: [__meta_kubernetes_pod_node_name]
    action: replace
    target_label: node
"#;

/// Annotates three of kube-sim's Services with selectors: one with scrape, port, path, scheme and a
/// param, one with scrape alone, one with scrape_slow (kept by neither normal job).
fn annotate_services(sim: &Sim) {
    let services: Vec<serde_json::Value> = sim
        .handle()
        .objects_json(Kind::Service)
        .into_iter()
        .filter(|s| {
            s.pointer("/spec/selector")
                .is_some_and(|v| v.as_object().is_some_and(|o| !o.is_empty()))
        })
        .take(3)
        .collect();
    assert_eq!(services.len(), 3, "kube-sim has Services with selectors");
    let annotations: [&[(&str, &str)]; 3] = [
        &[
            ("prometheus.io/scrape", "true"),
            ("prometheus.io/port", "9300"),
            ("prometheus.io/path", "/custom"),
            ("prometheus.io/scheme", "https"),
            ("prometheus.io/param_module", "http_2xx"),
        ],
        &[("prometheus.io/scrape", "true")],
        &[
            ("prometheus.io/scrape", "true"),
            ("prometheus.io/scrape_slow", "true"),
        ],
    ];
    let writes = services
        .into_iter()
        .zip(annotations)
        .map(|(v, a)| {
            let mut svc: k8s_openapi::api::core::v1::Service =
                serde_json::from_value(v).expect("kube-sim's Services decode");
            let map = svc.metadata.annotations.get_or_insert_default();
            for (k, v) in a {
                map.insert(k.to_string(), v.to_string());
            }
            Write::Put(Object::Service(svc))
        })
        .collect();
    sim.handle().apply(writes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prometheus_io_preset_serves_what_vmagent_running_the_chart_s_rules_keeps() {
    let Some(vm_bin) = installed::find("vmagent", installed::VMAGENT_INSTALL) else {
        return;
    };
    let sim = start_sim(loopback_spec(), 7).await;
    annotate_services(&sim);
    let herald = start_herald(
        &sim,
        "jobs:\n\
         - {name: kubernetes-pods, role: pod, annotations: prometheus.io}\n\
         - {name: kubernetes-service-endpoints, role: endpointslice, annotations: prometheus.io}\n",
    )
    .await;
    let api = sim.url();
    let direct_cfg = format!(
        "global:\n  scrape_interval: 1h\nscrape_configs:\n\
         - job_name: kubernetes-pods\n  honor_labels: true\n  kubernetes_sd_configs:\n  - role: pod\n    api_server: {api}\n  relabel_configs:{CHART_PODS}\
         - job_name: kubernetes-service-endpoints\n  honor_labels: true\n  kubernetes_sd_configs:\n  - role: endpointslice\n    api_server: {api}\n  relabel_configs:{CHART_SERVICE_ENDPOINTS}"
    );
    let names = ["kubernetes-pods", "kubernetes-service-endpoints"];
    let mut direct = VmAgent::start(&vm_bin, &direct_cfg).await;
    let mut through = VmAgent::start(&vm_bin, &vmagent_through_herald(&herald.url(), &names)).await;
    let d = agree(&mut direct, &mut through, &names).await;
    // Both kinds of annotation were exercised: pods on their annotated port, and the annotated
    // Service's endpoints moved to port 9300 with its param.
    assert!(
        d["kubernetes-pods"]
            .iter()
            .all(|l| l.contains_key("pod") && l.contains_key("namespace"))
    );
    let svc = &d["kubernetes-service-endpoints"];
    assert!(
        svc.iter().any(|l| l["instance"].ends_with(":9300")),
        "{svc:?}"
    );
    drop((direct, through));
    herald.stop().await;
    sim.shutdown().await;
}
