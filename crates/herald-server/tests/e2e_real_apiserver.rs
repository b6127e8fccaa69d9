//! herald on a real control plane: etcd 3.7, kube-apiserver and kube-controller-manager v1.37.2
//! (`peers/build`), loaded with kube-sim's `small` cluster through the API, the EndpointSlices and
//! Endpoints made by the real controllers.
//!
//! herald with its defaults (a streaming list, no compression asked) and herald asking for gzip
//! (kube-apiserver 1.37 then sends a streaming list as several gzip members) both become ready, and
//! for every role `/sd/v1` holds exactly what Prometheus's own kubernetes_sd (promsd) discovers run
//! directly on the same apiserver; promsd on herald's Kubernetes API face discovers the same again;
//! before and after churn driven through the API.

#[path = "peers/harness.rs"]
mod peers;

use std::collections::BTreeMap;
use std::time::Duration;

use herald_server::{
    Herald, KubeApiOptions, KubeServeOptions, ServeOptions, UpstreamCompression, job_specs,
};
use kube_sim::generate::{ClusterSpec, generate};
use kube_sim::peers::controlplane::{ADMIN_TOKEN, ControlPlane, Options};
use peers::Labels;
use peers::cluster::served;
use peers::compare::differences;
use peers::golang::{self, Promsd};

/// How long herald gets to become ready against the real apiserver.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the views get to agree.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(90);
/// promsd's quiet period before it answers.
const QUIET_MS: u64 = 300;

fn cases() -> Vec<(&'static str, &'static str)> {
    vec![
        ("node", "role: node"),
        ("pod", "role: pod"),
        (
            "pod-meta",
            "role: pod\nattach_metadata: {node: true, namespace: true}",
        ),
        ("service", "role: service"),
        ("endpoints", "role: endpoints"),
        (
            "endpoints-meta",
            "role: endpoints\nattach_metadata: {node: true, namespace: true}",
        ),
        ("endpointslice", "role: endpointslice"),
        (
            "endpointslice-meta",
            "role: endpointslice\nattach_metadata: {node: true, namespace: true}",
        ),
        ("ingress", "role: ingress"),
    ]
}

fn jobs_yaml() -> String {
    let mut out = String::from("jobs:\n");
    for (name, sd) in cases() {
        out.push_str(&format!("- name: {name}\n"));
        for line in sd.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

async fn start_herald(cp: &ControlPlane, compression: UpstreamCompression, face: bool) -> Herald {
    let cfg = herald_core::parse_config(&jobs_yaml()).expect("valid jobs");
    let kube = face.then(|| {
        let (mut resources, _) = herald_server::kube_kinds(&[]).expect("default kinds");
        resources.push(kube_face::Resource::builtin("ingresses").expect("built-in"));
        KubeServeOptions::plain(
            "127.0.0.1:0".parse().expect("addr"),
            KubeApiOptions {
                resources,
                ..KubeApiOptions::default()
            },
        )
    });
    let herald = Herald::start(
        job_specs(&cfg, None).expect("valid job specs"),
        cp.kube_config(ADMIN_TOKEN).expect("kube config"),
        ServeOptions {
            kube,
            upstream_compression: compression,
            ..ServeOptions::default()
        },
    )
    .await
    .expect("herald starts");
    tokio::time::timeout(READY_TIMEOUT, herald.ready())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "herald ({compression:?}) did not become ready against kube-apiserver within {READY_TIMEOUT:?}"
            )
        });
    herald
}

/// Starts the control plane and loads `small` (seed 7); `None` when the peers are not built.
async fn setup() -> Option<(ControlPlane, kube_sim::generate::Cluster)> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    golang::find("promsd")?;
    let spec = ClusterSpec::small();
    let cp = ControlPlane::start(Options {
        service_cidr: spec.service_cidr.to_string(),
        ..Options::default()
    })
    .await?
    .expect("the control plane starts");
    let cluster = generate(&spec, 7);
    let started = std::time::Instant::now();
    let n = cp.load(&cluster).await.expect("the cluster loads");
    eprintln!("loaded {n} objects in {:?}", started.elapsed());
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the EndpointSlice controller settles");
    Some((cp, cluster))
}

struct Judge {
    name: &'static str,
    direct: Promsd,
    on_face: Promsd,
}

/// Polls until, for every case, promsd direct equals each herald's `/sd/v1` and promsd on the
/// face; panics with the differences after [`SETTLE_TIMEOUT`].
async fn agree(
    heralds: &[(&str, &Herald)],
    judges: &mut [Judge],
    after: &str,
) -> BTreeMap<&'static str, Vec<Labels>> {
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
    let mut done = BTreeMap::new();
    loop {
        let mut problems = Vec::new();
        for j in judges.iter_mut() {
            if done.contains_key(j.name) {
                continue;
            }
            let direct = match j.direct.targets(QUIET_MS).await {
                Ok(t) => t,
                Err(e) => {
                    problems.push(format!("{}: promsd direct: {e}", j.name));
                    continue;
                }
            };
            let mut p = Vec::new();
            if direct.is_empty() {
                p.push(format!("{}: promsd direct discovers no targets", j.name));
            }
            for (which, h) in heralds {
                let d = differences(
                    "prometheus(apiserver)",
                    &direct,
                    which,
                    &served(&http, h, j.name).await,
                );
                p.extend(d.into_iter().take(8).map(|l| format!("{}: {l}", j.name)));
            }
            match j.on_face.targets(QUIET_MS).await {
                Ok(face) => {
                    let d = differences(
                        "prometheus(apiserver)",
                        &direct,
                        "prometheus(herald)",
                        &face,
                    );
                    p.extend(d.into_iter().take(8).map(|l| format!("{}: {l}", j.name)));
                }
                Err(e) => p.push(format!("{}: promsd on herald's face: {e}", j.name)),
            }
            if p.is_empty() {
                done.insert(j.name, direct);
            }
            problems.extend(p);
        }
        if problems.is_empty() {
            let counts: BTreeMap<_, _> = done.iter().map(|(k, v)| (*k, v.len())).collect();
            eprintln!("after {after}, targets per case: {counts:?}");
            return done;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "herald and Prometheus's kubernetes_sd on kube-apiserver did not agree within {SETTLE_TIMEOUT:?} after {after}:\n{}",
                problems.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Annotates every Service, so that Prometheus rebuilds the endpoints roles' groups from the pods
/// it holds now (see e2e_promsd_labels' `touch_endpoint_objects`: its endpointslice role has no pod
/// handler). The controllers then update the Endpoints and slices of the touched Services too.
async fn touch_services(cp: &ControlPlane, n: u32) {
    let list = cp.get_json("/api/v1/services").await.expect("services");
    for s in list["items"].as_array().into_iter().flatten() {
        let (ns, name) = (
            s["metadata"]["namespace"].as_str().unwrap_or_default(),
            s["metadata"]["name"].as_str().unwrap_or_default(),
        );
        let patch = serde_json::json!({"metadata": {"annotations": {"herald-test/touched": n.to_string()}}});
        let path = format!("/api/v1/namespaces/{ns}/services/{name}");
        let (code, body) = cp
            .request(
                http::Method::PATCH,
                &path,
                Some((
                    "application/merge-patch+json",
                    patch.to_string().into_bytes(),
                )),
            )
            .await
            .expect("patch");
        assert!(
            code.is_success(),
            "PATCH {path}: {code}: {}",
            String::from_utf8_lossy(&body)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn herald_on_kube_apiserver_serves_what_prometheus_discovers_directly_before_and_after_churn()
{
    let Some((cp, cluster)) = setup().await else {
        return;
    };
    let bin = golang::find("promsd").expect("checked in setup");
    let started = std::time::Instant::now();
    let plain = start_herald(&cp, UpstreamCompression::Identity, true).await;
    eprintln!("herald (defaults) ready in {:?}", started.elapsed());
    let started = std::time::Instant::now();
    let gzip = start_herald(&cp, UpstreamCompression::Gzip, false).await;
    eprintln!("herald (gzip) ready in {:?}", started.elapsed());

    let direct_kubeconfig = cp.kubeconfig_yaml(ADMIN_TOKEN);
    let face = plain.kube_url().expect("face on");
    let face_kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {face}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
    );
    let mut judges = Vec::new();
    for (i, (name, sd)) in cases().into_iter().enumerate() {
        // client-go's WatchListClient on for one and off for the other, alternating by case.
        let wl = i % 2 == 0;
        judges.push(Judge {
            name,
            direct: Promsd::start(&bin, sd, &direct_kubeconfig, wl).await,
            on_face: Promsd::start(&bin, sd, &face_kubeconfig, !wl).await,
        });
    }
    let heralds = [("herald /sd/v1", &plain), ("herald(gzip) /sd/v1", &gzip)];
    let first = agree(&heralds, &mut judges, "the first sync").await;
    assert!(
        first["endpointslice"].len() > 100,
        "the real controller's slices hold the loaded pods: {} targets",
        first["endpointslice"].len()
    );

    // Churn through the API: pods created, deleted and flapping readiness, Services changed.
    let mut churn = kube_sim::churn::Churn::new(7, &cluster);
    let started = std::time::Instant::now();
    cp.apply(churn.next_events(150))
        .await
        .expect("churn applies");
    eprintln!(
        "150 churn events through the API in {:?}",
        started.elapsed()
    );
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle after churn");
    touch_services(&cp, 1).await;
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the controllers settle after the touch");
    let after = agree(&heralds, &mut judges, "churn").await;
    assert_ne!(first, after, "churn changed no target");
    plain.stop().await;
    gzip.stop().await;
}
