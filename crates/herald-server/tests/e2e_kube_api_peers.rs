//! Real peers attached to herald's Kubernetes API instead of the apiserver: kubectl (get, label and
//! field selectors, get -w, a refused write, bearer-token auth), vmagent's kubernetes_sd (the same
//! label sets as from kube-sim directly, for the pod, endpointslice and node roles), and a tier of
//! heralds (kube-sim → herald → herald → kubectl -w and 100 watchers), where kube-sim still serves one
//! watch per kind.
//!
//! NB: nothing dials a non-loopback address: the cluster's pod, node and service CIDRs are on
//! 127.0.0.0/8, and vmagent drops every target before it could scrape it.

#[path = "support/kube.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use kube_sim::peers::{self, Kubectl, Labels, VmAgent};
use kube_sim::{Kind, Sim, SimConfig};
use serde_json::Value;

async fn start_sim(seed: u64) -> Sim {
    Sim::start(SimConfig {
        spec: support::loopback_cluster(),
        seed,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts")
}

fn kubectl(
    bin: PathBuf,
    dir: &std::path::Path,
    name: &str,
    url: &str,
    token: Option<&str>,
    ca: Option<&str>,
) -> Kubectl {
    Kubectl::with_config(bin, dir, name, &support::kubeconfig(url, token, ca))
}

/// `kubectl get pod NAME -w` printing one label per line, until stopped.
fn watch_label(k: &Kubectl, ns: &str, pod: &str, label: &str) -> std::process::Child {
    k.cmd(&[
        "get",
        "pod",
        pod,
        "-n",
        ns,
        "-w",
        "-o",
        &format!("jsonpath={{.metadata.labels.{label}}}{{\"\\n\"}}"),
        "--request-timeout=0",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("kubectl get -w")
}

async fn stop(child: std::process::Child) -> (String, String) {
    let mut child = child;
    child.kill().expect("stop kubectl");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().expect("output"))
        .await
        .expect("join");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sets `label=value` on a pod in kube-sim (a write the upstream sees, as a controller's would be).
fn label_pod(sim: &Sim, ns: &str, name: &str, label: &str, value: &str) {
    let pod = sim
        .handle()
        .objects_json(Kind::Pod)
        .into_iter()
        .find(|p| p["metadata"]["namespace"] == ns && p["metadata"]["name"] == name)
        .expect("pod exists");
    let mut pod: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(pod).expect("pod decodes");
    pod.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(label.into(), value.into());
    sim.handle()
        .apply(vec![kube_sim::Write::Put(kube_sim::Object::Pod(pod))]);
}

fn first_pod(sim: &Sim) -> (String, String, String) {
    let p = &sim.handle().objects_json(Kind::Pod)[0];
    (
        p["metadata"]["namespace"].as_str().expect("ns").to_string(),
        p["metadata"]["name"].as_str().expect("name").to_string(),
        p["spec"]["nodeName"].as_str().expect("node").to_string(),
    )
}

async fn expect_watch_lines(child: std::process::Child, want: &[&str]) {
    let (out, err) = stop(child).await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.starts_with(want),
        "kubectl -w saw {lines:?}, wanted {want:?}; stderr: {err}"
    );
}

#[tokio::test]
async fn kubectl_gets_selects_and_watches_through_herald_with_a_bearer_token() {
    let Some(bin) = peers::find("kubectl", peers::KUBECTL_INSTALL) else {
        return;
    };
    let sim = start_sim(5).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("tokens");
    std::fs::write(&token_file, "kubectl-token-1\n").expect("tokens");
    // client-go sends bearer tokens only over TLS.
    let (cert, key, ca) = support::self_signed(dir.path());
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let herald = herald_server::Herald::start(
        vec![],
        kube::Config::new(sim.url().parse().expect("url")),
        herald_server::ServeOptions {
            kube: Some(herald_server::KubeServeOptions {
                listen: "127.0.0.1:0".parse().expect("addr"),
                api: support::kube_options(&[]),
                custom: vec![],
                token_file: Some(token_file.clone()),
                insecure: false,
                tls: Some(herald_server::tls::TlsFiles::new(cert, key)),
            }),
            ..herald_server::ServeOptions::default()
        },
    )
    .await
    .expect("herald starts");
    herald.ready().await;
    let url = herald.kube_url().expect("face on");
    assert!(url.starts_with("https://"), "{url}");
    let k = kubectl(
        bin.clone(),
        dir.path(),
        "kubeconfig",
        &url,
        Some("kubectl-token-1"),
        Some(&ca),
    );

    let table = k.ok(&["get", "pods", "-A"]).await;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{table}"
    );
    let all: Value = serde_json::from_str(
        &k.ok(&["get", "pods", "-A", "-o", "json", "--chunk-size=7"])
            .await,
    )
    .expect("json");
    let want = sim.handle().objects_json(Kind::Pod);
    assert_eq!(
        all["items"].as_array().expect("items").len(),
        want.len(),
        "paged list"
    );
    // Objects and versions pass through unchanged.
    assert_eq!(
        all["items"][0]["metadata"]["resourceVersion"],
        want[0]["metadata"]["resourceVersion"]
    );

    let names = |s: &str| s.lines().map(str::to_string).collect::<BTreeSet<_>>();
    let with_app: BTreeSet<String> = want
        .iter()
        .filter(|p| p["metadata"]["labels"]["app"].is_string())
        .map(|p| format!("pod/{}", p["metadata"]["name"].as_str().unwrap_or("")))
        .collect();
    assert!(!with_app.is_empty());
    assert_eq!(
        names(
            &k.ok(&["get", "pods", "-A", "-l", "app", "-o", "name"])
                .await
        ),
        with_app
    );
    let (ns, pod, node) = first_pod(&sim);
    let on_node: BTreeSet<String> = want
        .iter()
        .filter(|p| p["spec"]["nodeName"] == node.as_str())
        .map(|p| format!("pod/{}", p["metadata"]["name"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        names(
            &k.ok(&[
                "get",
                "pods",
                "-A",
                "--field-selector",
                &format!("spec.nodeName={node}"),
                "-o",
                "name"
            ])
            .await
        ),
        on_node
    );
    let running = k
        .ok(&[
            "get",
            "pods",
            "-A",
            "--field-selector",
            "status.phase=Running",
            "-o",
            "name",
        ])
        .await;
    assert!(!running.trim().is_empty());
    for kind in [
        "nodes",
        "services",
        "endpoints",
        "endpointslices",
        "namespaces",
    ] {
        k.ok(&["get", kind, "-A"]).await;
    }

    label_pod(&sim, &ns, &pod, "herald-test", "zero");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let watch = watch_label(&k, &ns, &pod, "herald-test");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    label_pod(&sim, &ns, &pod, "herald-test", "one");
    tokio::time::sleep(Duration::from_millis(700)).await;
    label_pod(&sim, &ns, &pod, "herald-test", "two");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    expect_watch_lines(watch, &["zero", "one", "two"]).await;

    // Read-only: a write is refused with a Status.
    let (ok, _, err) = k.run(&["delete", "pod", &pod, "-n", &ns]).await;
    assert!(!ok && err.contains("MethodNotAllowed"), "{err}");
    // A wrong token is refused (kubectl without any credentials would prompt for a password).
    let wrong = kubectl(
        bin.clone(),
        dir.path(),
        "wrong",
        &url,
        Some("nope"),
        Some(&ca),
    );
    let (ok, _, err) = wrong.run(&["get", "pods", "-A"]).await;
    assert!(
        !ok && (err.contains("Unauthorized") || err.contains("logged in")),
        "{err}"
    );
    // No credentials at all: 401 with a Status (a kube-rs client, which trusts the same CA).
    let kc = kube::config::Kubeconfig::from_yaml(&support::kubeconfig(&url, None, Some(&ca)))
        .expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    let anon = kube::Client::try_from(cfg).expect("client");
    let req = http::Request::get("/api/v1/pods")
        .body(Vec::new())
        .expect("request");
    match anon.request_text(req).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (401, "Unauthorized"));
        }
        other => panic!("anonymous request was not refused: {other:?}"),
    }
    // A rotated token file is picked up without a restart.
    std::fs::write(&token_file, "kubectl-token-2\n").expect("rotate");
    let later = std::time::SystemTime::now() + Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&token_file)
        .and_then(|f| f.set_modified(later))
        .expect("mtime");
    let k2 = kubectl(
        bin,
        dir.path(),
        "rotated",
        &url,
        Some("kubectl-token-2"),
        Some(&ca),
    );
    let mut accepted = false;
    for _ in 0..50 {
        if k2.run(&["get", "nodes"]).await.0 {
            accepted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(accepted, "the rotated token is accepted");
    assert!(!k.run(&["get", "nodes"]).await.0, "the old token is not");
}

/// One job per role (pod, endpointslice, node), each dropping every target before it could be scraped.
fn scrape_config(api_server: &str) -> String {
    let mut out = String::from("scrape_configs:\n");
    for role in ["pod", "endpointslice", "node"] {
        out.push_str(&format!(
            "- job_name: {role}\n  kubernetes_sd_configs:\n  - role: {role}\n    api_server: {api_server}\n  relabel_configs:\n  - source_labels: [__address__]\n    regex: '.*'\n    action: drop\n"
        ));
    }
    out
}

async fn labels_of(agent: &mut VmAgent) -> Option<BTreeSet<Labels>> {
    agent
        .dropped_targets()
        .await
        .ok()
        .map(|t| t.into_iter().collect())
}

#[tokio::test]
async fn vmagent_discovers_the_same_targets_through_herald_as_from_kube_sim() {
    let Some(bin) = peers::find("vmagent", peers::VMAGENT_INSTALL) else {
        return;
    };
    let sim = start_sim(6).await;
    // herald's own jobs read ingresses only: the kinds vmagent lists are cached for the API alone.
    let herald = support::start_herald(
        &sim.url(),
        "jobs:\n- name: ingresses\n  role: ingress\n",
        support::kube_options(&[]),
        "herald/test",
    )
    .await;
    let mut direct = VmAgent::start(&bin, &scrape_config(&sim.url())).await;
    let mut via = VmAgent::start(&bin, &scrape_config(&herald.kube_url().expect("face on"))).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut agreed = 0;
    let mut last = String::new();
    while agreed < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "vmagent through herald never agreed with vmagent direct:\n{last}"
        );
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let (Some(a), Some(b)) = (labels_of(&mut direct).await, labels_of(&mut via).await) else {
            continue;
        };
        let jobs = |s: &BTreeSet<Labels>| {
            s.iter()
                .filter_map(|l| l.get("job").cloned())
                .collect::<BTreeSet<_>>()
        };
        if a == b && jobs(&a).len() == 3 {
            agreed += 1;
        } else {
            agreed = 0;
            let only_a: Vec<_> = a.difference(&b).take(2).collect();
            let only_b: Vec<_> = b.difference(&a).take(2).collect();
            last = format!(
                "direct {} targets, via herald {}; only direct: {only_a:?}; only via: {only_b:?}",
                a.len(),
                b.len()
            );
        }
    }
    for (name, agent) in [("direct", &direct), ("via herald", &via)] {
        assert!(
            agent.errors().is_empty(),
            "vmagent {name} logged errors: {:?}",
            agent.errors()
        );
    }
    let stats = sim.stats();
    assert_eq!(
        stats["by_user_agent"]["herald/test"]["watches_open"], 8,
        "herald watches pods, services, endpoints, endpointslices, nodes, namespaces, servicecidrs and ingresses once each: {}",
        stats["by_user_agent"]
    );
}

#[tokio::test]
async fn a_tier_of_heralds_carries_watchers_on_one_upstream_watch_per_kind() {
    let sim = start_sim(7).await;
    let root = support::start_herald(
        &sim.url(),
        "jobs: []\n",
        support::kube_options(&[]),
        "herald-root/test",
    )
    .await;
    let root_url = root.kube_url().expect("face on");
    let leaf = support::start_herald(
        &root_url,
        "jobs: []\n",
        support::kube_options(&[]),
        "herald-leaf/test",
    )
    .await;
    let leaf_url = leaf.kube_url().expect("face on");
    let (ns, pod, _) = first_pod(&sim);

    // 100 watchers at the leaf, each waiting for the label change.
    let pods_rv = {
        let r: Value = reqwest::get(format!("{leaf_url}/api/v1/namespaces/{ns}/pods?limit=1"))
            .await
            .expect("list")
            .json()
            .await
            .expect("json");
        r["metadata"]["resourceVersion"]
            .as_str()
            .expect("rv")
            .to_string()
    };
    let watchers: Vec<_> = (0..100)
        .map(|_| {
            let url = format!("{leaf_url}/api/v1/namespaces/{ns}/pods?watch=true&resourceVersion={pods_rv}&fieldSelector=metadata.name%3D{pod}");
            tokio::spawn(async move {
                let r = reqwest::get(&url).await.expect("watch");
                assert_eq!(r.status(), 200);
                let mut s = r.bytes_stream();
                let mut buf = Vec::new();
                loop {
                    let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(20), s.next()).await else {
                        return false;
                    };
                    buf.extend_from_slice(&chunk);
                    if String::from_utf8_lossy(&buf).contains("\"herald-tier\":\"one\"") {
                        return true;
                    }
                }
            })
        })
        .collect();
    let kubectl = match peers::find("kubectl", peers::KUBECTL_INSTALL) {
        Some(bin) => {
            let dir = tempfile::tempdir().expect("tempdir");
            let k = kubectl(bin, dir.path(), "leaf", &leaf_url, None, None);
            label_pod(&sim, &ns, &pod, "herald-tier", "zero");
            tokio::time::sleep(Duration::from_millis(500)).await;
            let w = watch_label(&k, &ns, &pod, "herald-tier");
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Some((dir, w))
        }
        None => None,
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    label_pod(&sim, &ns, &pod, "herald-tier", "one");
    tokio::time::sleep(Duration::from_millis(700)).await;
    label_pod(&sim, &ns, &pod, "herald-tier", "two");
    for w in watchers {
        assert!(
            w.await.expect("watcher"),
            "every leaf watcher saw the change"
        );
    }
    if let Some((_dir, w)) = kubectl {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        expect_watch_lines(w, &["zero", "one", "two"]).await;
    }
    // kube-sim sees the root only, one watch per kind; the root sees the leaf once per kind.
    let stats = sim.stats();
    assert_eq!(
        stats["by_user_agent"]["herald-root/test"]["watches_open"], 7,
        "{}",
        stats["by_user_agent"]
    );
    assert!(stats["by_user_agent"].get("herald-leaf/test").is_none());
    for kind in [
        "pods",
        "services",
        "endpointslices",
        "nodes",
        "namespaces",
        "endpoints",
    ] {
        assert_eq!(stats["by_resource"][kind]["watches_open"], 1, "{kind}");
    }
    let root_metrics = {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, root.shared().registry())
            .expect("encode");
        out
    };
    assert!(
        root_metrics.contains("herald_kube_watches_open{kind=\"pods\"} 1\n"),
        "{root_metrics}"
    );
}
