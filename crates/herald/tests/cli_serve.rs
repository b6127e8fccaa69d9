//! The `herald` binary end to end: config errors fail before serving; `serve` against an in-process
//! kube-sim; `demo` prints working SD URLs whose targets are all loopback addresses.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_herald");

/// A minimal HTTP/1.0 GET (no client library needed): status and body.
fn http_get(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("http url");
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let mut s = TcpStream::connect(host).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("http response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    (status, body.to_string())
}

fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("herald-test-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).expect("write temp file");
    path
}

/// Reads the child's stdout until a line starts with `prefix`; returns that line.
fn wait_for_line(out: &mut impl BufRead, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("read stdout");
        assert!(n > 0, "stdout ended before a line starting with {prefix:?}");
        if line.starts_with(prefix) {
            return line.trim_end().to_string();
        }
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn targets(body: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(body).expect("json");
    v.as_array()
        .expect("array")
        .iter()
        .map(|e| e["targets"][0].as_str().expect("target").to_string())
        .collect()
}

#[test]
fn a_config_error_exits_non_zero_naming_the_job_and_field_before_serving() {
    for (yaml, job, field) in [
        ("jobs:\n- name: web\n  role: pods\n", "web", "role"),
        (
            "jobs:\n- name: api\n  role: pod\n  selectors:\n  - role: pod\n    label: 'app in ('\n",
            "api",
            "selectors[0].label",
        ),
        (
            "jobs:\n- name: own\n  role: pod\n  namespaces:\n    own_namespace: true\n",
            "own",
            "own_namespace",
        ),
    ] {
        let config = temp_file(&format!("bad-{job}.yaml"), yaml);
        let started = Instant::now();
        let out = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .args([
                "--apiserver",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
            ])
            .env_remove("POD_NAMESPACE")
            .output()
            .expect("herald runs");
        let _ = std::fs::remove_file(&config);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{job}: exit status {:?}", out.status);
        assert!(
            stderr.contains(job) && stderr.contains(field),
            "{job}: {stderr}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "failed fast");
    }
}

#[test]
fn a_bad_target_allocator_flag_exits_non_zero_naming_it() {
    let config = temp_file("ta-flags.yaml", "jobs:\n- name: pods\n  role: pod\n");
    for (flags, needle) in [
        (
            &["--ta-strategy", "least-weighted", "--ta-collector", "a"][..],
            "least-weighted",
        ),
        (
            &["--ta-strategy", "per-node", "--ta-collector", "a"][..],
            "node",
        ),
        (
            &["--ta-collector-selector", "app=otel"][..],
            "collector_namespace",
        ),
    ] {
        let out = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .args([
                "--apiserver",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(flags)
            .output()
            .expect("herald runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?}");
        assert!(stderr.contains(needle), "{flags:?}: {stderr}");
    }
    let _ = std::fs::remove_file(&config);
}

#[test]
fn serve_discovers_kube_sim_pods_over_loopback() {
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
    let config = temp_file(
        "serve.yaml",
        "jobs:\n- name: pods\n  role: pod\n- name: slices\n  role: endpointslice\n",
    );
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--apiserver", &sim.url(), "--listen", "127.0.0.1:0"])
            .args(["--ta-collector", "c0", "--ta-collector", "c1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("herald starts"),
    );
    let mut out = BufReader::new(child.0.stdout.take().expect("stdout"));
    let line = wait_for_line(&mut out, "herald serving on ");
    let base = line.trim_start_matches("herald serving on ").to_string();

    let deadline = Instant::now() + Duration::from_secs(20);
    while http_get(&format!("{base}/readyz")).0 != 200 {
        assert!(Instant::now() < deadline, "herald became ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, body) = http_get(&format!("{base}/sd/v1/pods"));
    assert_eq!(status, 200);
    let pods = targets(&body);
    assert!(!pods.is_empty());
    assert!(pods.iter().all(|t| t.starts_with("127.")), "{pods:?}");
    let (status, _) = http_get(&format!("{base}/sd/v1/slices?shard=0&shards=2"));
    assert_eq!(status, 200);
    // --ta-collector: the target allocator's API over the same jobs, split between c0 and c1.
    let (status, body) = http_get(&format!("{base}/jobs/pods/targets"));
    assert_eq!(status, 200, "{body}");
    let shares: serde_json::Value = serde_json::from_str(&body).expect("json");
    let count = |groups: &serde_json::Value| -> usize {
        groups
            .as_array()
            .expect("groups")
            .iter()
            .map(|g| g["targets"].as_array().expect("targets").len())
            .sum()
    };
    let held: usize = ["c0", "c1"]
        .iter()
        .map(|c| count(&shares[c]["targets"]))
        .sum();
    let sd: serde_json::Value =
        serde_json::from_str(&http_get(&format!("{base}/sd/v1/pods")).1).expect("json");
    assert_eq!(
        held,
        count(&sd),
        "c0 and c1 hold the job's targets between them"
    );
    let _ = std::fs::remove_file(&config);
    drop(child);
    rt.block_on(sim.shutdown());
}

#[test]
fn demo_prints_working_sd_urls_whose_targets_are_all_loopback() {
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args(["demo", "--listen", "127.0.0.1:0", "--for", "20s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("herald demo starts"),
    );
    let mut out = BufReader::new(child.0.stdout.take().expect("stdout"));
    wait_for_line(&mut out, "HTTP SD URLs:");
    let mut urls = Vec::new();
    loop {
        let mut line = String::new();
        out.read_line(&mut line).expect("read stdout");
        let line = line.trim();
        if line.is_empty() {
            break;
        }
        urls.push(line.to_string());
    }
    assert_eq!(urls.len(), 4, "{urls:?}");
    wait_for_line(&mut out, "scrape_configs:");
    let api = wait_for_line(&mut out, "herald's Kubernetes API");
    let api = api
        .rsplit(' ')
        .next()
        .expect("an URL ends the line")
        .trim()
        .to_string();
    let kubeconfig = wait_for_line(&mut out, "Try: kubectl --kubeconfig");
    let path = kubeconfig
        .split_whitespace()
        .nth(3)
        .expect("a kubeconfig path");
    assert!(
        std::fs::read_to_string(path).is_ok_and(|k| k.contains(&api)),
        "the kubeconfig points at herald: {path}"
    );
    let status_page = wait_for_line(&mut out, "  status page:");
    let page_url = status_page
        .split_whitespace()
        .nth(2)
        .expect("the status page URL")
        .to_string();
    let (status, page) = http_get(&page_url);
    assert_eq!(status, 200, "the status page answers: {page_url}");
    assert!(page.contains("data-job=\"pods\""), "it lists the jobs");
    let cluster = wait_for_line(&mut out, "  the cluster:");
    let sim_config = cluster
        .split_whitespace()
        .nth(4)
        .expect("kube-sim's kubeconfig");
    assert!(
        std::fs::read_to_string(sim_config).is_ok_and(|k| k.contains("server: http://127.0.0.1:")),
        "the kube-sim kubeconfig is written: {sim_config}"
    );
    let (status, body) = http_get(&format!("{api}/api/v1/pods"));
    assert_eq!(status, 200, "herald's Kubernetes API lists pods");
    let list: serde_json::Value = serde_json::from_str(&body).expect("a PodList");
    assert!(!list["items"].as_array().expect("items").is_empty());
    for url in &urls {
        let (status, body) = http_get(url);
        assert_eq!(status, 200, "{url}");
        let ts = targets(&body);
        assert!(!ts.is_empty(), "{url} has targets");
        assert!(ts.iter().all(|t| t.starts_with("127.")), "{url}: {ts:?}");
    }
    // Summary lines printed before our requests say 0 served; wait for one that counts them.
    let served = |line: &str| -> u64 {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix("consumers-served="))
            .and_then(|n| n.parse().ok())
            .expect("consumers-served in the summary")
    };
    let summary = loop {
        let mut line = String::new();
        let n = out.read_line(&mut line).expect("read stdout");
        assert!(
            n > 0,
            "stdout ended before a summary line counting the requests"
        );
        if line.contains("consumers-served=") && served(&line) >= 4 {
            break line;
        }
    };
    assert!(
        summary.contains("upstream-watches=7 (kinds=7)"),
        "{summary}"
    );
    assert!(
        summary.contains("SD clients") && summary.contains("apiserver watches"),
        "the live line compares consumers with apiserver watches: {summary}"
    );
}

#[test]
fn demo_with_consumers_prints_a_saving_within_ten_seconds() {
    let started = Instant::now();
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args(["demo", "--listen", "127.0.0.1:0", "--for", "30s"])
            .args(["--consumers", "2", "--summary-every", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("herald demo starts"),
    );
    let mut out = BufReader::new(child.0.stdout.take().expect("stdout"));
    let attached = wait_for_line(&mut out, "Attached:");
    assert!(
        attached.contains("2 Prometheus shards") && attached.contains("2 informers"),
        "{attached}"
    );
    // The number in "(N saved)" of a live line.
    let saved = |line: &str| -> Option<u64> {
        let (head, _) = line.split_once(" saved)")?;
        head.rsplit('(').next()?.parse().ok()
    };
    let line = loop {
        let mut line = String::new();
        let n = out.read_line(&mut line).expect("read stdout");
        assert!(n > 0, "stdout ended before a live line with a saving");
        if saved(&line).is_some_and(|n| n > 0) {
            break line;
        }
    };
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(10),
        "the first saving came after {elapsed:?}: {line}"
    );
    // Two shards polling each of the four jobs.
    assert!(line.starts_with("8 SD clients + "), "{line}");
    // And two informers on the face: their watches open just after their initial lists.
    let mut line = line;
    while !line.starts_with("8 SD clients + 2 API watches served by herald over 7 upstream watches")
    {
        line.clear();
        let n = out.read_line(&mut line).expect("read stdout");
        assert!(
            n > 0,
            "stdout ended before a line with both informers watching"
        );
    }
}
