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
//! NB: the kept targets are scraped by the two vmagents (once: the scrape interval is an hour) at
//! kube-sim's loopback pod IPs, where nothing listens; nothing else is dialed.

#[path = "peers/harness.rs"]
mod peers;

use std::collections::BTreeMap;
use std::time::Duration;

use kube_sim::peers as installed;
use kube_sim::peers::VmAgent;
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

fn vmagent_through_herald(herald: &str) -> String {
    let mut out = String::from("global:\n  scrape_interval: 1h\nscrape_configs:\n");
    for (job, _, _) in JOBS {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vmagent_relabeling_kube_sim_and_vmagent_reading_herald_s_relabeled_jobs_list_the_same_targets()
 {
    let Some(vm_bin) = installed::find("vmagent", installed::VMAGENT_INSTALL) else {
        return;
    };
    let sim = start_sim(loopback_spec(), 7).await;
    let herald = start_herald(&sim, &herald_jobs()).await;
    let mut direct = VmAgent::start(&vm_bin, &vmagent_direct(&sim.url())).await;
    // vmagent's http_sd refreshes every 60 s by default; its first fetch happens at start, after
    // herald's first sync, so one fetch sees the whole relabeled job.
    let mut through = VmAgent::start(&vm_bin, &vmagent_through_herald(&herald.url())).await;

    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut last = None;
    loop {
        let d = active(&mut direct, "vmagent on kube-sim").await;
        let t = active(&mut through, "vmagent on herald").await;
        let mut problems = Vec::new();
        for (job, _, _) in JOBS {
            let (dj, tj) = (
                d.get(job).map(Vec::as_slice).unwrap_or_default(),
                t.get(job).map(Vec::as_slice).unwrap_or_default(),
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
        let stable = last.as_ref() == Some(&d);
        if problems.is_empty() && stable {
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
                    ["svc_port", "namespace", "app", "tier", "job", "instance"]
                        .contains(&k.as_str())
                })));
            break;
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
    drop((direct, through));
    herald.stop().await;
    sim.shutdown().await;
}
