//! The CLI's conventions, on the built binary: `--version` names the commit and the compiler,
//! `herald completion` prints each shell's script, `serve --context` picks a kubeconfig context (of
//! `--kubeconfig`, or of the kubeconfig `KUBECONFIG` names),
//! a bad size names itself, and a fresh herald's `/metrics` already holds every series the shipped
//! alerts and dashboard read (at 0), with `herald_build_info` naming the same commit.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_herald");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).args(args).output().expect("herald runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The commit part of `herald --version`: `herald 0.1.0 (commit abc1234567, rustc 1.95.0)`.
fn version_commit(version: &str) -> String {
    version
        .split("(commit ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or_else(|| panic!("a commit in {version:?}"))
        .to_string()
}

#[test]
fn version_names_the_commit_it_was_built_from_and_the_compiler() {
    let (ok, out, err) = run(&["--version"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("herald 0."), "{out}");
    let commit = version_commit(&out);
    // NB: CI builds from a clone, so this is a commit; only outside a git checkout is it unknown.
    let in_git = Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .current_dir(root())
        .output()
        .is_ok_and(|o| o.status.success());
    if in_git {
        assert!(
            (7..=40).contains(&commit.len()) && commit.chars().all(|c| c.is_ascii_hexdigit()),
            "a commit id in {out:?}"
        );
    } else {
        assert_eq!(commit, "unknown", "{out}");
    }
    assert!(out.contains(", rustc 1."), "{out}");
}

#[test]
fn completion_prints_a_script_for_each_shell() {
    for (shell, marks) in [
        (
            "bash",
            &["complete -F _herald", "serve", "--body-budget-bytes"][..],
        ),
        ("zsh", &["#compdef herald", "serve", "--log-level"][..]),
        ("fish", &["complete -c herald", "serve", "kubeconfig"][..]),
    ] {
        let (ok, out, err) = run(&["completion", shell]);
        assert!(ok, "{shell}: {err}");
        for m in marks {
            assert!(out.contains(m), "{shell}: no {m:?} in the script");
        }
    }
    let (ok, _, err) = run(&["completion", "tcsh"]);
    assert!(
        !ok && err.contains("tcsh"),
        "an unknown shell is refused: {err}"
    );
}

#[test]
fn a_size_with_a_bad_unit_is_refused_naming_it() {
    let (ok, _, err) = run(&[
        "serve",
        "--config",
        "unused.yaml",
        "--body-budget-bytes",
        "512Mb",
    ]);
    assert!(!ok);
    assert!(
        err.contains("--body-budget-bytes") && err.contains("unknown unit \"Mb\""),
        "{err}"
    );
}

/// A minimal HTTP/1.0 GET: status and body.
fn http_get(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("http url");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut s = TcpStream::connect(host).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok());
    (status.expect("a status"), body.to_string())
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `herald_*` names an expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("herald_") {
        let before = &rest[..at];
        let word_start = before
            .chars()
            .last()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        if word_start {
            out.insert(name);
        }
    }
    out
}

/// Every metric the shipped alerts read, with the alert.
fn alert_metrics() -> Vec<(String, String)> {
    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("deploy/alerts/herald-rules.yaml")).expect("rules"),
    )
    .expect("YAML");
    let mut out = Vec::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let alert = rule["alert"].as_str().expect("an alert").to_string();
            for m in metric_names(rule["expr"].as_str().expect("expr")) {
                out.push((m, alert.clone()));
            }
        }
    }
    out
}

/// Every metric the dashboard's queries read.
fn dashboard_metrics() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("deploy/dashboards/herald.json"))
        .expect("the dashboard");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    fn walk(v: &serde_json::Value, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(e) = m.get("expr").and_then(|e| e.as_str()) {
                    out.extend(metric_names(e));
                }
                m.values().for_each(|c| walk(c, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|c| walk(c, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(&dash["panels"], &mut out);
    out
}

/// The series names of a metrics text (histograms by their base name too).
fn series_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix) {
                out.insert(base.to_string());
            }
        }
        out.insert(name);
    }
    out
}

#[test]
fn a_fresh_herald_exports_every_series_its_alerts_and_dashboard_read() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let sim = rt
        .block_on(kube_sim::Sim::start(kube_sim::SimConfig {
            spec: kube_sim::generate::ClusterSpec {
                pod_cidr: "127.16.0.0/12".parse().expect("cidr"),
                node_cidr: "127.8.0.0/16".parse().expect("cidr"),
                service_cidr: "127.4.0.0/16".parse().expect("cidr"),
                ..kube_sim::generate::ClusterSpec::small()
            },
            ..Default::default()
        }))
        .expect("kube-sim starts");
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("jobs.yaml");
    std::fs::write(
        &config,
        "jobs:\n- name: pods\n  role: pod\n- name: slices\n  role: endpointslice\n",
    )
    .expect("write");
    // Two contexts, the current one leading nowhere: herald syncs only if --context is used.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n\
             - name: sim\n  cluster: {{server: \"{}\"}}\n\
             - name: nowhere\n  cluster: {{server: \"http://127.0.0.1:1\"}}\n\
             users:\n- name: anon\n  user: {{}}\n\
             contexts:\n\
             - name: sim\n  context: {{cluster: sim, user: anon}}\n\
             - name: nowhere\n  context: {{cluster: nowhere, user: anon}}\n\
             current-context: nowhere\n",
            sim.url()
        ),
    )
    .expect("write");
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--context", "sim", "--listen", "127.0.0.1:0"])
            .args(["--kube-listen", "127.0.0.1:0", "-q"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("herald starts"),
    );
    let mut out = BufReader::new(child.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.starts_with("herald serving on ") {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("stdout") > 0,
            "herald exited"
        );
    }
    let base = line
        .trim_start_matches("herald serving on ")
        .trim()
        .to_string();

    // At once: before any consumer, watch or refusal.
    let (status, text) = http_get(&format!("{base}/metrics"));
    assert_eq!(status, 200);
    let exported = series_names(&text);
    let missing: Vec<String> = alert_metrics()
        .into_iter()
        .filter(|(m, _)| !exported.contains(m))
        .map(|(m, alert)| format!("{m} (alert {alert})"))
        .collect();
    assert!(
        missing.is_empty(),
        "not on a fresh herald's /metrics: {missing:?}\n{text}"
    );
    // NB: series keyed by a response's status code have no known label values before the first
    // response, and the age of the last upstream event none before the first event (0 would claim
    // one just arrived).
    let unknowable = [
        "herald_sd_requests_total",
        "herald_kube_requests_total",
        "herald_upstream_last_event_age_seconds",
    ];
    let dash_missing: Vec<String> = dashboard_metrics()
        .into_iter()
        .filter(|m| !exported.contains(m) && !unknowable.contains(&m.as_str()))
        .collect();
    assert!(
        dash_missing.is_empty(),
        "dashboard metrics not on a fresh herald's /metrics: {dash_missing:?}\n{text}"
    );
    for series in [
        "herald_kube_admission_refused_total{verb=\"LIST\",reason=\"rate\"} 0",
        "herald_kube_watchers_closed_slow_total{kind=\"pods\"} 0",
        "herald_sd_bytes_served_total{encoding=\"gzip\"} 0",
        "herald_upstream_events_total{kind=\"endpointslices\",event=\"delete\"} 0",
    ] {
        assert!(text.contains(series), "{series} on a fresh herald:\n{text}");
    }
    let (_, version, _) = run(&["--version"]);
    let commit = version_commit(&version);
    let build = text
        .lines()
        .find(|l| l.starts_with("herald_build_info{"))
        .unwrap_or_else(|| panic!("herald_build_info:\n{text}"));
    assert!(
        build.contains(&format!("commit=\"{commit}\"")) && build.ends_with(" 1"),
        "{build}"
    );

    // --context took the context that leads somewhere: herald syncs.
    wait_ready(&base, "--kubeconfig with --context sim");

    // --context alone: the kubeconfig kubectl would read (KUBECONFIG here), at that context.
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--context", "sim", "--listen", "127.0.0.1:0", "-q"])
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("herald starts"),
    );
    let mut out = BufReader::new(child.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.starts_with("herald serving on ") {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("stdout") > 0,
            "herald exited"
        );
    }
    let base = line
        .trim_start_matches("herald serving on ")
        .trim()
        .to_string();
    wait_ready(&base, "KUBECONFIG with --context sim");
}

fn wait_ready(base: &str, how: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while http_get(&format!("{base}/readyz")).0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "herald synced through {how}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
