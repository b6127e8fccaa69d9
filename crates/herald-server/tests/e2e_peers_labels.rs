//! Real peers as judges of herald's labels: for every role (node, pod, service, endpoints,
//! endpointslice, ingress, and the pod and endpoints roles again with `attach_metadata: {node:
//! true}`), vmagent 1.79 with kubernetes_sd pointed at kube-sim and a real Prometheus (Debian 2.42,
//! http_sd only) pointed at herald's `/sd/v1/<job>` discover the same targets with the same labels —
//! except the differences listed in `peers/known.rs`, where vmagent 1.79 and current Prometheus
//! disagree and herald follows Prometheus. The cluster is kube-sim's `small` preset plus planted
//! edge cases (`peers/cluster.rs`), and the test first checks every edge case is really there.
//!
//! NB: both peers dial what they keep. Every job here drops every target with a relabel rule, so
//! nothing is scraped or resolved; the comparison reads the discovered labels listed for dropped
//! targets (`/api/v1/targets`). The only addresses dialed are kube-sim's and herald's (loopback), and
//! vmagent's remote write to a closed loopback port (never used: there are no samples).

#[path = "peers/harness.rs"]
mod peers;

use std::collections::BTreeMap;
use std::time::Duration;

use herald_server::Herald;
use kube_sim::peers as installed;
use kube_sim::peers::VmAgent;
use peers::Labels;
use peers::cluster::{Planted, loopback_spec, plant_edge_cases, served, start_herald, start_sim};
use peers::compare::{by_job, differences};
use peers::known::{KNOWN, Kind, reconcile};
use peers::prometheus::Prometheus;

/// The jobs compared, as (job name, role, extra kubernetes_sd_configs YAML): every role, and the
/// roles that read nodes once more with `attach_metadata: {node: true}`.
const JOBS: [(&str, &str, &str); 9] = [
    ("sd-node", "node", ""),
    ("sd-pod", "pod", ""),
    ("sd-service", "service", ""),
    ("sd-endpoints", "endpoints", ""),
    ("sd-endpointslice", "endpointslice", ""),
    ("sd-ingress", "ingress", ""),
    ("sd-pod-node", "pod", "attach_metadata: {node: true}"),
    (
        "sd-endpoints-node",
        "endpoints",
        "attach_metadata: {node: true}",
    ),
    (
        "sd-endpointslice-node",
        "endpointslice",
        "attach_metadata: {node: true}",
    ),
];

/// How long both peers get to discover the whole cluster and list it stably.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(45);

const M: &str = "__meta_kubernetes_";

/// The plain job of `role`.
fn job(role: &str) -> String {
    format!("sd-{role}")
}

/// Drops every target before it could be scraped: `.*` also matches an empty address.
const DROP_ALL: &str =
    "  relabel_configs:\n  - source_labels: [__address__]\n    regex: '.*'\n    action: drop\n";

fn herald_jobs() -> String {
    let mut out = String::from("jobs:\n");
    for (job, role, extra) in JOBS {
        out.push_str(&format!("- name: {job}\n  role: {role}\n"));
        if !extra.is_empty() {
            out.push_str(&format!("  {extra}\n"));
        }
    }
    out
}

fn vmagent_config(api_server: &str) -> String {
    let mut out = String::from("scrape_configs:\n");
    for (job, role, extra) in JOBS {
        out.push_str(&format!(
            "- job_name: {job}\n  kubernetes_sd_configs:\n  - role: {role}\n    api_server: {api_server}\n"
        ));
        if !extra.is_empty() {
            out.push_str(&format!("    {extra}\n"));
        }
        out.push_str(DROP_ALL);
    }
    out
}

fn prometheus_config(herald: &str) -> String {
    let mut out = String::from("global:\n  scrape_interval: 1m\nscrape_configs:\n");
    for (j, _, _) in JOBS {
        out.push_str(&format!(
            "- job_name: {j}\n  http_sd_configs:\n  - url: {herald}/sd/v1/{j}\n    refresh_interval: 1s\n{DROP_ALL}"
        ));
    }
    out
}

struct Discovered {
    /// Herald's targets as Prometheus lists them, by job.
    prometheus: BTreeMap<String, Vec<Labels>>,
    vmagent: BTreeMap<String, Vec<Labels>>,
}

/// Polls until Prometheus lists, for every job, exactly what herald serves, and vmagent lists a
/// non-empty set per job that did not change since the previous poll a second earlier.
async fn discover(herald: &Herald, prom: &mut Prometheus, vm: &mut VmAgent) -> Discovered {
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + DISCOVERY_TIMEOUT;
    let mut last_vm: Option<BTreeMap<String, Vec<Labels>>> = None;
    loop {
        let mut problems = Vec::new();
        let mut herald_out = BTreeMap::new();
        for (j, _, _) in JOBS {
            herald_out.insert(j.to_string(), served(&http, herald, j).await);
        }
        let p = match prom.targets().await {
            Ok(t) => by_job(t.into_iter().map(|t| t.discovered)),
            Err(e) => {
                if let Err(dead) = prom.check_alive() {
                    panic!("{dead}: {e}");
                }
                problems.push(format!("prometheus: {e}"));
                BTreeMap::new()
            }
        };
        let v = match vm.dropped_targets().await {
            Ok(t) => by_job(t),
            Err(e) => {
                if let Err(dead) = vm.check_alive() {
                    panic!("{dead}: {e}");
                }
                problems.push(format!("vmagent: {e}"));
                BTreeMap::new()
            }
        };
        for (j, _, _) in JOBS {
            let j = j.to_string();
            let h = &herald_out[&j];
            if h.is_empty() {
                problems.push(format!("herald serves no targets for {j}"));
            }
            let got = p.get(&j).map(Vec::as_slice).unwrap_or_default();
            if got != h.as_slice() {
                problems.push(format!(
                    "{j}: Prometheus's http_sd does not list what herald serves:\n{}",
                    differences("prometheus", got, "herald", h)
                        .into_iter()
                        .take(10)
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
            if v.get(&j).is_none_or(Vec::is_empty) {
                problems.push(format!("vmagent lists no targets for {j}"));
            }
        }
        let stable = last_vm.as_ref() == Some(&v);
        if !stable {
            problems.push("vmagent's list changed since the last poll".into());
        }
        if problems.is_empty() {
            return Discovered {
                prometheus: p,
                vmagent: v,
            };
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "the peers did not settle within {DISCOVERY_TIMEOUT:?}:\n{}",
                problems.join("\n")
            );
        }
        last_vm = Some(v);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn get<'a>(t: &'a Labels, name: &str) -> &'a str {
    t.get(&format!("{M}{name}"))
        .map(String::as_str)
        .unwrap_or("")
}

/// The cluster must show every edge case the comparison is meant to cover, or agreeing on it would
/// prove nothing.
fn assert_edge_cases_present(found: &Discovered, planted: &Planted) {
    let of = |role: &str| found.prometheus[&job(role)].as_slice();
    let any = |role: &str, what: &str, f: &dyn Fn(&Labels) -> bool| {
        assert!(of(role).iter().any(f), "no {role} target with {what}");
    };
    any("pod", "an init container", &|t| {
        get(t, "pod_container_init") == "true"
    });
    any("pod", "a container without ports", &|t| {
        get(t, "pod_container_port_number").is_empty()
    });
    any("pod", "a second container", &|t| {
        get(t, "pod_container_name") == "istio-proxy"
    });
    any("pod", "a not-ready pod", &|t| {
        get(t, "pod_ready") == "false"
    });
    any("endpoints", "a not-ready address", &|t| {
        get(t, "endpoint_ready") == "false"
    });
    any("endpoints", "an address without targetRef", &|t| {
        !get(t, "endpoint_ready").is_empty() && get(t, "endpoint_address_target_kind").is_empty()
    });
    any("endpointslice", "a not-ready endpoint", &|t| {
        get(t, "endpointslice_endpoint_conditions_ready") == "false"
    });
    any("endpointslice", "the planted terminating pod", &|t| {
        get(t, "endpointslice_endpoint_conditions_terminating") == "true"
            && get(t, "pod_name") == planted.terminating_pod.1
    });
    any(
        "endpointslice",
        "the planted sidecar's uncovered port",
        &|t| {
            get(t, "pod_name") == planted.sidecar_pod.1
                && get(t, "pod_container_port_number") == planted.sidecar_port.to_string()
        },
    );
    any("service", "a headless Service", &|t| {
        get(t, "service_cluster_ip") == "None"
    });
    any("service", "a Service without selector", &|t| {
        get(t, "service_name") == "external-db"
    });
    any("service", "the planted ExternalName Service", &|t| {
        get(t, "service_name") == planted.external_name_service
            && get(t, "service_external_name") == "db.example.com"
    });
    any("ingress", "an ingress", &|t| {
        !get(t, "ingress_name").is_empty()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vmagent_on_kube_sim_and_prometheus_on_herald_discover_the_same_targets_and_labels_for_every_role()
 {
    let Some(vm_bin) = installed::find("vmagent", installed::VMAGENT_INSTALL) else {
        return;
    };
    let Some(prom_bin) = installed::find("prometheus", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let sim = start_sim(loopback_spec(), 7).await;
    let planted = plant_edge_cases(&sim);
    let herald = start_herald(&sim, &herald_jobs()).await;
    let mut vm = VmAgent::start(&vm_bin, &vmagent_config(&sim.url())).await;
    let mut prom = Prometheus::start(&prom_bin, &prometheus_config(&herald.url())).await;

    let found = discover(&herald, &mut prom, &mut vm).await;
    assert_edge_cases_present(&found, &planted);

    let mut failures = Vec::new();
    let mut seen_known: Vec<Option<usize>> = vec![None; KNOWN.len()];
    for (j, role, _) in JOBS {
        let (h, v, seen) = reconcile(role, &found.prometheus[j], &found.vmagent[j]);
        for (slot, n) in seen_known.iter_mut().zip(seen) {
            if let Some(n) = n {
                *slot = Some(slot.unwrap_or(0) + n);
            }
        }
        let d = differences("herald via prometheus", &h, "vmagent", &v);
        if !d.is_empty() {
            failures.push(format!(
                "job {j} (role {role}):\n{}",
                d.into_iter().take(20).collect::<Vec<_>>().join("\n")
            ));
        }
        eprintln!(
            "{j}: {} targets from herald via Prometheus http_sd, {} from vmagent kubernetes_sd",
            found.prometheus[j].len(),
            found.vmagent[j].len()
        );
    }
    for (k, n) in KNOWN.iter().zip(&seen_known) {
        if *n == Some(0) {
            let what = match k.kind {
                Kind::PrometheusOnly(l, _) | Kind::VmagentOnly(l, _) | Kind::Value(l) => l,
                Kind::PrometheusTargets(what, _) => what,
            };
            failures.push(format!(
                "known difference never observed (role {}, {what}; {}): the cluster lost its case or \
                 the difference is gone",
                k.role, k.source
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "herald (as Prometheus's http_sd lists it) and vmagent's kubernetes_sd disagree beyond the \
         known differences:\n{}",
        failures.join("\n")
    );
    let errors = vm.errors();
    assert!(
        errors.is_empty(),
        "vmagent logged errors talking to kube-sim:\n{}",
        errors.join("\n")
    );
    let problems = prom.problems();
    assert!(
        problems.is_empty(),
        "Prometheus logged warnings or errors reading herald:\n{}",
        problems.join("\n")
    );
}
