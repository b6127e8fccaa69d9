//! Real vmagent (Debian `victoria-metrics` 1.79; its kubernetes_sd is an implementation independent of
//! Prometheus's, with Prometheus-compatible labels) pointed at kube-sim with kubernetes_sd_configs for
//! the roles node, pod, service, endpoints and endpointslice discovers exactly the targets kube-sim's
//! own state implies — including, past 1000 nodes, a DaemonSet's 1000 targets via `endpoints` (the
//! Endpoints object is truncated) and all of them via `endpointslice`.
//!
//! NB: vmagent dials what it discovers (pod IPs from 10.0.0.0/8, `<svc>.<ns>.svc` names). Every job
//! therefore drops every target with a relabel rule, so nothing is ever scraped or resolved, and the
//! comparison reads the discovered labels vmagent lists for dropped targets
//! (`/api/v1/targets?state=dropped`). The only addresses vmagent dials are kube-sim's and its own
//! (remote write to a closed loopback port, never used: there are no samples).

#[path = "vmagent/expect.rs"]
mod expect;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use expect::{Role, State};
use kube_sim::generate::ClusterSpec;
use kube_sim::peers::{Labels, VmAgent};
use kube_sim::{Kind, Sim, SimConfig, peers};
use serde_json::Value;

/// How long vmagent gets to discover a whole cluster and list it stably.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(40);

/// One job per role, each dropping every target before it could be scraped.
fn scrape_config(api_server: &str) -> String {
    let mut out = String::from("scrape_configs:\n");
    for role in Role::ALL {
        out.push_str(&format!(
            "- job_name: {job}\n  kubernetes_sd_configs:\n  - role: {role}\n    api_server: {api_server}\n  relabel_configs:\n  # Drop everything: `.*` also matches an empty address.\n  - source_labels: [__address__]\n    regex: '.*'\n    action: drop\n",
            job = role.job(),
            role = role.name(),
        ));
    }
    out
}

async fn start_sim(spec: ClusterSpec, seed: u64) -> Sim {
    Sim::start(SimConfig {
        spec,
        seed,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts on loopback")
}

fn state_of(sim: &Sim) -> State {
    let h = sim.handle();
    State {
        nodes: h.objects_json(Kind::Node),
        pods: h.objects_json(Kind::Pod),
        services: h.objects_json(Kind::Service),
        endpoints: h.objects_json(Kind::Endpoints),
        slices: h.objects_json(Kind::EndpointSlice),
    }
}

fn show(t: &Labels) -> String {
    let body: Vec<String> = t
        .iter()
        .map(|(k, v)| format!("{}={v:?}", k.trim_start_matches("__meta_kubernetes_")))
        .collect();
    format!("{{{}}}", body.join(", "))
}

/// What one role's discovered targets look like next to the expectation; `None` when they agree.
fn mismatch(role: Role, expected: &BTreeSet<Labels>, listed: &[Labels]) -> Option<String> {
    let found: BTreeSet<Labels> = listed.iter().cloned().collect();
    if &found == expected && found.len() == listed.len() {
        return None;
    }
    let missing: Vec<String> = expected.difference(&found).take(8).map(show).collect();
    let extra: Vec<String> = found.difference(expected).take(8).map(show).collect();
    Some(format!(
        "role {}: vmagent lists {} targets ({} distinct on the compared labels; more means stale or \
         duplicate entries), kube-sim's state implies {}; missing {}, unexpected {}\n  missing (first 8):\n    {}\n  unexpected (first 8):\n    {}",
        role.name(),
        listed.len(),
        found.len(),
        expected.len(),
        expected.difference(&found).count(),
        found.difference(expected).count(),
        missing.join("\n    "),
        extra.join("\n    "),
    ))
}

/// Polls vmagent until every role lists exactly the expected targets on two polls a second apart,
/// then returns them by role. Panics with the differences (and, via the guard, vmagent's log) when
/// that does not happen within [`DISCOVERY_TIMEOUT`].
async fn discover(agent: &mut VmAgent, state: &State) -> BTreeMap<Role, Vec<Labels>> {
    let expected: BTreeMap<Role, BTreeSet<Labels>> = Role::ALL
        .into_iter()
        .map(|role| {
            let list = state.expected(role);
            let set: BTreeSet<Labels> = list.iter().cloned().collect();
            assert_eq!(
                set.len(),
                list.len(),
                "the compared labels must tell every expected {} target apart",
                role.name()
            );
            assert!(
                !set.is_empty(),
                "kube-sim's cluster implies no {} targets",
                role.name()
            );
            (role, set)
        })
        .collect();
    let deadline = tokio::time::Instant::now() + DISCOVERY_TIMEOUT;
    let mut matched_once = false;
    let mut report;
    loop {
        match agent.dropped_targets().await {
            Ok(listed) => {
                let mut by_role: BTreeMap<Role, Vec<Labels>> = BTreeMap::new();
                let mut unknown_jobs = BTreeSet::new();
                for t in listed {
                    let job = t.get("job").cloned().unwrap_or_default();
                    match Role::ALL.into_iter().find(|r| r.job() == job) {
                        Some(role) => by_role.entry(role).or_default().push(role.project(&t)),
                        None => {
                            unknown_jobs.insert(job);
                        }
                    }
                }
                let problems: Vec<String> = Role::ALL
                    .into_iter()
                    .filter_map(|role| {
                        let listed = by_role.get(&role).map(Vec::as_slice).unwrap_or(&[]);
                        mismatch(role, &expected[&role], listed)
                    })
                    .chain(
                        (!unknown_jobs.is_empty())
                            .then(|| format!("targets of unknown jobs {unknown_jobs:?}")),
                    )
                    .collect();
                if problems.is_empty() {
                    if matched_once {
                        return by_role;
                    }
                    matched_once = true;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                matched_once = false;
                report = problems.join("\n");
            }
            Err(e) => {
                if let Err(dead) = agent.check_alive() {
                    panic!("{dead}: {e}");
                }
                report = format!("vmagent's target list is not readable yet: {e}");
            }
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "vmagent did not discover what kube-sim's state implies within {DISCOVERY_TIMEOUT:?}:\n{report}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// vmagent logs failed lists and watches (and undecodable objects) at error level.
fn assert_no_errors(agent: &VmAgent) {
    let errors = agent.log_lines("error");
    assert!(
        errors.is_empty(),
        "vmagent logged errors talking to kube-sim:\n{}",
        errors.join("\n")
    );
}

fn get<'a>(t: &'a Labels, name: &str) -> &'a str {
    t.get(&format!("__meta_kubernetes_{name}"))
        .map(String::as_str)
        .unwrap_or("")
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn arr<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Fields a real apiserver always fills in (defaulting, or the controllers), and which kubernetes_sd
/// turns into labels: if kube-sim left them out, vmagent and the expectation would agree on empty
/// labels and the comparison would prove nothing about them.
fn assert_apiserver_shaped(state: &State) {
    let mut faults = Vec::new();
    for svc in &state.services {
        let id = format!(
            "service {}/{}",
            s(svc, "/metadata/namespace"),
            s(svc, "/metadata/name")
        );
        if s(svc, "/spec/type").is_empty() {
            faults.push(format!("{id}: spec.type unset"));
        }
        if arr(svc, "/spec/ports")
            .iter()
            .any(|p| s(p, "/protocol").is_empty())
        {
            faults.push(format!("{id}: a port without protocol"));
        }
    }
    for pod in &state.pods {
        let id = format!(
            "pod {}/{}",
            s(pod, "/metadata/namespace"),
            s(pod, "/metadata/name")
        );
        let ports = arr(pod, "/spec/containers")
            .iter()
            .chain(arr(pod, "/spec/initContainers"))
            .flat_map(|c| arr(c, "/ports"));
        if ports.into_iter().any(|p| s(p, "/protocol").is_empty()) {
            faults.push(format!("{id}: a container port without protocol"));
        }
        if s(pod, "/status/phase").is_empty() || s(pod, "/status/hostIP").is_empty() {
            faults.push(format!("{id}: status.phase or status.hostIP unset"));
        }
    }
    for eps in &state.endpoints {
        let id = format!(
            "endpoints {}/{}",
            s(eps, "/metadata/namespace"),
            s(eps, "/metadata/name")
        );
        for subset in arr(eps, "/subsets") {
            if arr(subset, "/ports")
                .iter()
                .any(|p| s(p, "/protocol").is_empty())
            {
                faults.push(format!("{id}: a port without protocol"));
            }
            for a in arr(subset, "/addresses")
                .iter()
                .chain(arr(subset, "/notReadyAddresses"))
            {
                if s(a, "/targetRef/kind") == "Pod" && s(a, "/targetRef/namespace").is_empty() {
                    faults.push(format!("{id}: a Pod targetRef without namespace"));
                }
            }
        }
    }
    for slice in &state.slices {
        let id = format!(
            "endpointslice {}/{}",
            s(slice, "/metadata/namespace"),
            s(slice, "/metadata/name")
        );
        if arr(slice, "/ports")
            .iter()
            .any(|p| s(p, "/protocol").is_empty())
        {
            faults.push(format!("{id}: a port without protocol"));
        }
        for ep in arr(slice, "/endpoints") {
            if ep
                .pointer("/conditions/ready")
                .and_then(Value::as_bool)
                .is_none()
            {
                faults.push(format!("{id}: an endpoint without conditions.ready"));
            }
            if s(ep, "/targetRef/kind") == "Pod" && s(ep, "/targetRef/namespace").is_empty() {
                faults.push(format!("{id}: a Pod targetRef without namespace"));
            }
        }
    }
    faults.dedup();
    assert!(
        faults.is_empty(),
        "kube-sim's objects lack what an apiserver fills in ({} problems), first: {:#?}",
        faults.len(),
        &faults[..faults.len().min(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vmagent_discovers_exactly_the_targets_kube_sim_implies_for_every_role() {
    let Some(bin) = peers::find("vmagent", peers::VMAGENT_INSTALL) else {
        return;
    };
    // More not-ready and pending pods than the preset, so notReadyAddresses, ready=false slices and
    // pods without an IP are all there to be compared.
    let spec = ClusterSpec {
        not_ready_fraction: 0.1,
        pending_fraction: 0.05,
        ..ClusterSpec::small()
    };
    let sim = start_sim(spec, 7).await;
    let state = state_of(&sim);
    assert_apiserver_shaped(&state);

    // The cluster must exercise every rule the comparison covers.
    let pods = state.expected(Role::Pod);
    assert!(
        pods.iter().any(|t| get(t, "pod_container_init") == "true"),
        "no init containers"
    );
    assert!(
        pods.iter()
            .any(|t| get(t, "pod_container_port_number").is_empty()),
        "no container without ports"
    );
    assert!(
        state.pods.iter().any(|p| s(p, "/status/podIP").is_empty()),
        "no pod without an IP"
    );
    let eps = state.expected(Role::Endpoints);
    assert!(
        eps.iter().any(|t| get(t, "endpoint_ready") == "false"),
        "no notReadyAddresses"
    );
    assert!(
        eps.iter().any(|t| get(t, "endpoint_ready").is_empty()),
        "no pod ports outside the Service"
    );
    assert!(
        eps.iter().any(|t| !get(t, "endpoint_ready").is_empty()
            && get(t, "endpoint_address_target_kind").is_empty()),
        "no address without targetRef"
    );
    let slices = state.expected(Role::EndpointSlice);
    assert!(
        slices
            .iter()
            .any(|t| get(t, "endpointslice_endpoint_conditions_ready") == "false"),
        "no unready slice endpoint"
    );
    let services = state.expected(Role::Service);
    assert!(
        services
            .iter()
            .any(|t| get(t, "service_cluster_ip") == "None"),
        "no headless Service"
    );

    let mut agent = VmAgent::start(&bin, &scrape_config(&sim.url())).await;
    let found = discover(&mut agent, &state).await;
    assert_no_errors(&agent);
    for role in Role::ALL {
        eprintln!(
            "vmagent {}: {} targets, as kube-sim implies",
            role.name(),
            found[&role].len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_1000_nodes_vmagent_sees_1000_daemonset_targets_via_endpoints_and_all_via_endpointslice()
 {
    let Some(bin) = peers::find("vmagent", peers::VMAGENT_INSTALL) else {
        return;
    };
    const NODES: usize = 1100;
    // Two DaemonSets (kube-proxy, node-exporter) fill every node; few application pods besides.
    let spec = ClusterSpec {
        nodes: NODES,
        namespaces: 1,
        services: 3,
        pods: 2 * NODES + 4 + 12,
        ..ClusterSpec::small()
    };
    let sim = start_sim(spec, 11).await;
    let state = state_of(&sim);
    assert_apiserver_shaped(&state);

    // kube-sim's own state: 1100 node-exporter pods with IPs; the Endpoints object cut at 1000 and
    // annotated (kubernetes/kubernetes pkg/controller/endpoint/endpoints_controller.go
    // `maxCapacity`); the slices complete.
    let exporter_addrs: BTreeSet<String> = state
        .pods
        .iter()
        .filter(|p| {
            s(p, "/metadata/namespace") == "monitoring"
                && s(p, "/metadata/labels/app.kubernetes.io~1name") == "node-exporter"
        })
        .map(|p| expect::join_host_port(s(p, "/status/podIP"), 9100))
        .collect();
    assert_eq!(
        exporter_addrs.len(),
        NODES,
        "one node-exporter pod with its own IP per node"
    );
    let eps = state
        .endpoints
        .iter()
        .find(|e| {
            s(e, "/metadata/namespace") == "monitoring" && s(e, "/metadata/name") == "node-exporter"
        })
        .expect("kube-sim keeps an Endpoints object for monitoring/node-exporter");
    assert_eq!(
        s(
            eps,
            "/metadata/annotations/endpoints.kubernetes.io~1over-capacity"
        ),
        "truncated",
        "the over-capacity annotation on monitoring/node-exporter"
    );
    let kept: usize = arr(eps, "/subsets")
        .iter()
        .map(|ss| arr(ss, "/addresses").len() + arr(ss, "/notReadyAddresses").len())
        .sum();
    assert_eq!(kept, 1000, "addresses kept in the truncated Endpoints");

    let mut agent = VmAgent::start(&bin, &scrape_config(&sim.url())).await;
    let found = discover(&mut agent, &state).await;
    assert_no_errors(&agent);
    // vmagent reads the annotation and warns (endpoints.go `getTargetLabels`).
    assert!(
        agent
            .log_lines("warn")
            .iter()
            .any(|l| l.contains("monitoring/node-exporter") && l.contains("has been truncated")),
        "vmagent warns that monitoring/node-exporter's Endpoints are truncated"
    );

    let via_endpoints: Vec<&str> = found[&Role::Endpoints]
        .iter()
        .filter(|t| {
            get(t, "namespace") == "monitoring" && get(t, "endpoints_name") == "node-exporter"
        })
        .map(|t| t["__address__"].as_str())
        .collect();
    let distinct: BTreeSet<&str> = via_endpoints.iter().copied().collect();
    assert_eq!(
        via_endpoints.len(),
        1000,
        "node-exporter targets vmagent finds via endpoints"
    );
    assert_eq!(
        distinct.len(),
        1000,
        "distinct node-exporter addresses via endpoints"
    );
    assert!(
        distinct.iter().all(|a| exporter_addrs.contains(*a)),
        "every endpoints target is a node-exporter pod's metrics port"
    );

    let via_slices: BTreeSet<&str> = found[&Role::EndpointSlice]
        .iter()
        .filter(|t| {
            get(t, "namespace") == "monitoring"
                && get(t, "endpointslice_label_kubernetes_io_service_name") == "node-exporter"
        })
        .map(|t| t["__address__"].as_str())
        .collect();
    let want: BTreeSet<&str> = exporter_addrs.iter().map(String::as_str).collect();
    assert_eq!(
        via_slices.len(),
        NODES,
        "node-exporter targets vmagent finds via endpointslice"
    );
    assert_eq!(
        via_slices, want,
        "via endpointslice vmagent finds every node-exporter pod"
    );

    assert_eq!(found[&Role::Node].len(), NODES, "one node target per node");
}
