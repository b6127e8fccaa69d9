//! `herald explain` as a user runs it: against a herald serving kube-sim's `small` cluster, a pod
//! prints the table of jobs (exit 0), `--output json` prints herald's answer, a missing pod exits 1
//! with herald's message naming it, a bad query exits 1 naming the parameter, and a server URL that
//! is not one is refused before anything is dialed.

use std::process::Command;
use std::time::Duration;

use herald_server::{Herald, ServeOptions, job_specs};
use kube_sim::{Kind, Sim, SimConfig};

const BIN: &str = env!("CARGO_BIN_EXE_herald");

const JOBS: &str = "jobs:\n- {name: pods, role: pod}\n- {name: elsewhere, role: pod, namespaces: {names: [nowhere]}}\n";

async fn explain(args: Vec<String>) -> (i32, String, String) {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .arg("explain")
            .args(&args)
            .output()
            .expect("herald runs")
    })
    .await
    .expect("joined");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herald_explain_prints_the_answer_and_exits_1_when_herald_refuses() {
    let sim = Sim::start(SimConfig::default())
        .await
        .expect("kube-sim starts on loopback");
    let cfg = herald_core::parse_config(JOBS).expect("valid jobs");
    let herald = Herald::start(
        job_specs(&cfg, None).expect("specs"),
        kube::Config::new(sim.url().parse().expect("url")),
        ServeOptions::default(),
    )
    .await
    .expect("herald starts");
    tokio::time::timeout(Duration::from_secs(20), herald.ready())
        .await
        .expect("herald syncs");
    let pod = sim
        .handle()
        .objects_json(Kind::Pod)
        .into_iter()
        .find(|p| p["status"]["podIP"].is_string())
        .expect("a pod with an IP");
    let object = format!(
        "{}/{}",
        pod["metadata"]["namespace"].as_str().expect("ns"),
        pod["metadata"]["name"].as_str().expect("name")
    );
    let server = herald.url();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();

    let (code, out, err) = explain(s(&["Pod", &object, "--server", &server])).await;
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some(format!("Pod {object}").as_str()),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("pods ") && !l.contains(" 0  ")),
        "the pod's targets are served by `pods`: {out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("elsewhere ")
            && l.contains("is not among the job's namespaces (nowhere)")),
        "{out}"
    );

    let (code, out, _) = explain(s(&[
        "Pod", &object, "--server", &server, "--output", "json", "--shards", "3",
    ]))
    .await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["shard_counts"], serde_json::json!([3]));

    let (code, out, err) = explain(s(&["Pod", "default/nobody", "--server", &server])).await;
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.contains("404") && err.contains("Pod default/nobody not found"),
        "{err}"
    );

    let (code, _, err) = explain(s(&["Node", "a/b", "--server", &server])).await;
    assert_eq!(code, 1);
    assert!(err.contains("400") && err.contains("namespace:"), "{err}");

    let (code, _, err) = explain(s(&["Pod", &object, "--server", "ftp://x"])).await;
    assert_eq!(code, 1);
    assert!(err.contains("not an http:// or https:// URL"), "{err}");
    let (code, _, err) = explain(s(&["Pod", &object, "--server", "https://127.0.0.1:1"])).await;
    assert_eq!(code, 1);
    assert!(err.contains("--ca-file"), "{err}");
    herald.stop().await;
}
