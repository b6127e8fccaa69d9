//! herald's alerts (`deploy/alerts/herald-rules.yaml`) and Grafana dashboard
//! (`deploy/dashboards/herald.json`), judged by Prometheus's promtool (Debian `prometheus`): the
//! alerts' unit tests (`herald-rules.test.yaml`) pass, with a firing and a silent case for every
//! alert, and each alert links to its runbook in docs/runbooks.md; every dashboard query, its Grafana
//! variables replaced, is valid PromQL (`promtool check rules` on them as recording rules); and every
//! metric either uses is one a running herald (in-process, over kube-sim, with SD jobs, the
//! Kubernetes API face and consumers of both) exports at `/metrics`. The dashboard also decodes
//! strictly into Grafana's own dashboard schema (`peers/dashjudge`: grafana-foundation-sdk's types).

#[path = "support/kube.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use herald_server::KubeApiOptions;
use kube_sim::peers as installed;
use kube_sim::{Sim, SimConfig};
use serde_json::Value;

/// Grafana's variables in the dashboard's queries and a concrete value for each.
const VARIABLES: &[(&str, &str)] = &[
    ("$__rate_interval", "2m"),
    ("$__interval", "30s"),
    ("$__range", "1h"),
    ("$job", "herald"),
    ("$instance", "10.0.0.1:9095"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn promtool(bin: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(bin)
        .args(args)
        .current_dir(root())
        .output()
        .expect("promtool runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The alerting rules of the rule file: (alert, rule).
fn alerts() -> Vec<(String, Value)> {
    let rules: Value =
        serde_yaml::from_str(&read("deploy/alerts/herald-rules.yaml")).expect("YAML");
    rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .map(|r| {
            (
                r["alert"].as_str().expect("an alerting rule").to_string(),
                r,
            )
        })
        .collect()
}

/// Every `expr` of the dashboard's panels (rows' nested panels included), with its panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    fn walk(v: &Value, title: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                let title = m.get("title").and_then(Value::as_str).unwrap_or(title);
                if let Some(e) = m.get("expr").and_then(Value::as_str) {
                    out.push((title.to_string(), e.to_string()));
                }
                for (k, child) in m {
                    // The variables' queries are Grafana's label_values(), not PromQL.
                    if k != "templating" {
                        walk(child, title, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|c| walk(c, title, out)),
            _ => {}
        }
    }
    let dash: Value =
        serde_json::from_str(&read("deploy/dashboards/herald.json")).expect("dashboard JSON");
    let mut out = Vec::new();
    walk(&dash["panels"], "", &mut out);
    out
}

fn substitute(expr: &str) -> String {
    let mut e = expr.to_string();
    for (var, value) in VARIABLES {
        e = e.replace(var, value);
    }
    e
}

/// The `herald_*` metric names an expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("herald_") {
        let start = i + at;
        let word_start =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = expr[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(expr.len(), |n| start + n);
        if word_start {
            out.insert(expr[start..end].to_string());
        }
        i = end;
    }
    out
}

#[test]
fn every_alert_fires_and_stays_silent_in_its_promtool_unit_tests_and_has_a_runbook() {
    let Some(bin) = installed::find("promtool", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let (ok, report) = promtool(&bin, &["check", "rules", "deploy/alerts/herald-rules.yaml"]);
    assert!(ok, "promtool check rules:\n{report}");
    let (ok, report) = promtool(
        &bin,
        &["test", "rules", "deploy/alerts/herald-rules.test.yaml"],
    );
    assert!(ok, "promtool test rules:\n{report}");

    // Each alert has a case where it fires and one where it must not.
    let tests: Value =
        serde_yaml::from_str(&read("deploy/alerts/herald-rules.test.yaml")).expect("YAML");
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for t in tests["tests"].as_array().expect("tests") {
        for case in t["alert_rule_test"].as_array().expect("alert_rule_test") {
            let name = case["alertname"].as_str().expect("alertname").to_string();
            let fired = case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
            let e = cases.entry(name).or_default();
            if fired {
                e.0 += 1;
            } else {
                e.1 += 1;
            }
        }
    }
    let runbooks = read("docs/runbooks.md");
    let anchors: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| {
            // GitHub's heading anchors: lower case, spaces to '-', punctuation dropped.
            h.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let alerts = alerts();
    assert!(alerts.len() >= 8, "the alerts docs/runbooks.md promises");
    for (name, rule) in &alerts {
        assert!(
            matches!(cases.get(name), Some((f, s)) if *f > 0 && *s > 0),
            "{name}: a firing and a silent case in herald-rules.test.yaml (found {:?})",
            cases.get(name)
        );
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: a runbook_url"));
        let anchor = url
            .strip_prefix("https://github.com/herald/herald/blob/main/docs/runbooks.md#")
            .unwrap_or_else(|| panic!("{name}: {url} is an anchor of docs/runbooks.md"));
        assert_eq!(anchor, name.to_lowercase(), "{name}: its own runbook");
        assert!(
            anchors.contains(anchor),
            "{name}: docs/runbooks.md has no heading for #{anchor}"
        );
        for key in ["summary", "description"] {
            assert!(rule["annotations"][key].is_string(), "{name}: {key}");
        }
    }
}

#[test]
fn every_dashboard_query_is_promql_promtool_accepts() {
    let Some(bin) = installed::find("promtool", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let queries = dashboard_queries();
    assert!(
        queries.len() >= 20,
        "the dashboard's queries: {}",
        queries.len()
    );
    let dash: Value = serde_json::from_str(&read("deploy/dashboards/herald.json")).expect("JSON");
    let rows: Vec<&str> = dash["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|p| p["type"] == "row")
        .filter_map(|p| p["title"].as_str())
        .collect();
    assert_eq!(
        rows,
        [
            "Upstream health",
            "Objects and targets",
            "Consumers served versus apiserver watches saved",
            "Bytes in and out",
            "Delivery latency",
            "Refusals"
        ]
    );

    let dir = tempfile::tempdir().expect("tmp");
    let rules = |exprs: &[String]| -> String {
        let rules: Vec<Value> = exprs
            .iter()
            .enumerate()
            .map(|(i, e)| serde_json::json!({"record": format!("herald:dashboard_query_{i}"), "expr": e}))
            .collect();
        serde_yaml::to_string(
            &serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]}),
        )
        .expect("YAML")
    };
    let mut exprs = Vec::new();
    for (title, q) in &queries {
        let e = substitute(q);
        assert!(!e.contains('$'), "{title}: a Grafana variable left in {e}");
        assert!(
            !metric_names(&e).is_empty(),
            "{title}: reads no herald metric: {e}"
        );
        exprs.push(e);
    }
    let file = dir.path().join("dashboard-rules.yaml");
    std::fs::write(&file, rules(&exprs)).expect("write");
    let (ok, report) = promtool(&bin, &["check", "rules", file.to_str().expect("UTF-8")]);
    assert!(
        ok,
        "promtool check rules on the dashboard's queries:\n{report}"
    );
    assert!(
        report.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{report}"
    );

    // The judge refuses what is not PromQL (a query broken as a typo would break it).
    let broken = file.with_file_name("broken.yaml");
    std::fs::write(&broken, rules(&[exprs[0].replacen('(', "((", 1)])).expect("write");
    let (ok, report) = promtool(&bin, &["check", "rules", broken.to_str().expect("UTF-8")]);
    assert!(!ok, "promtool accepted a broken query:\n{report}");
}

#[test]
fn the_dashboard_decodes_strictly_into_grafanas_dashboard_schema() {
    let Some(bin) = installed::find("dashjudge", installed::GO_PEERS_INSTALL) else {
        return;
    };
    let run = |file: &Path| {
        let out = Command::new(&bin)
            .arg(file)
            .output()
            .expect("dashjudge runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, report) = run(&root().join("deploy/dashboards/herald.json"));
    assert!(ok, "Grafana's schema refuses the dashboard:\n{report}");

    // The judge refuses a field Grafana does not know, in a panel and in a query.
    let mut dash: Value =
        serde_json::from_str(&read("deploy/dashboards/herald.json")).expect("JSON");
    dash["panels"][1]["targets"][0]["exp"] = "herald_ready".into();
    let dir = tempfile::tempdir().expect("tmp");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, dash.to_string()).expect("write");
    let (ok, report) = run(&bad);
    assert!(
        !ok && report.contains("unexpected field 'exp'"),
        "dashjudge accepted an unknown field:\n{report}"
    );
}

/// The metric names herald's `/metrics` text declares (counters with `_total`, histograms with
/// `_bucket`, `_sum`, `_count`), and those it has samples for.
fn exported(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut declared = BTreeSet::new();
    let mut sampled = BTreeSet::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let mut parts = t.split_whitespace();
            let (name, ty) = (parts.next().expect("name"), parts.next().expect("type"));
            match ty {
                "counter" => {
                    declared.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for s in ["_bucket", "_sum", "_count"] {
                        declared.insert(format!("{name}{s}"));
                    }
                }
                _ => {
                    declared.insert(name.to_string());
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).expect("a sample line");
            sampled.insert(line[..end].to_string());
        }
    }
    (declared, sampled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_alerts_and_dashboard_read_is_on_a_running_heralds_metrics() {
    let sim = Sim::start(SimConfig {
        spec: support::loopback_cluster(),
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts");
    // The face admits three lists or watches, then refuses with 429 (herald_kube_admission_refused).
    let herald = support::start_herald(
        &sim.url(),
        "jobs:\n- {name: pods, role: pod}\n- {name: endpointslices, role: endpointslice}\n- {name: nodes, role: node}\n",
        KubeApiOptions {
            admission_rate: 0.001,
            admission_burst: 3,
            ..support::kube_options(&[])
        },
        "herald-monitoring-test",
    )
    .await;
    let http = reqwest::Client::new();
    let base = herald.url();
    let kube = herald.kube_url().expect("the face is on");

    // SD consumers: a Prometheus-like fetch, a gzip one, a conditional one and a sharded one.
    let res = http
        .get(format!("{base}/sd/v1/pods"))
        .send()
        .await
        .expect("GET");
    assert_eq!(res.status(), 200);
    let etag = res.headers()["etag"].to_str().expect("etag").to_string();
    res.bytes().await.expect("body");
    for (path, header) in [
        ("/sd/v1/endpointslices", ("accept-encoding", "gzip")),
        ("/sd/v1/pods", ("if-none-match", etag.as_str())),
        (
            "/sd/v1/nodes?shard=0&shards=2",
            ("accept", "application/json"),
        ),
    ] {
        let res = http
            .get(format!("{base}{path}"))
            .header(header.0, header.1)
            .send()
            .await
            .expect("GET");
        assert!(
            res.status().is_success() || res.status() == 304,
            "{path}: {}",
            res.status()
        );
        res.bytes().await.expect("body");
    }
    // Kubernetes API consumers: a list, a watch that receives its first events, then a list past
    // the admission burst.
    let list: Value = http
        .get(format!("{kube}/api/v1/pods?limit=5"))
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("JSON");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let mut watch = http
        .get(format!(
            "{kube}/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
        ))
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    let mut refused = None;
    for _ in 0..3 {
        let s = http
            .get(format!("{kube}/api/v1/nodes"))
            .send()
            .await
            .expect("list")
            .status();
        if s == 429 {
            refused = Some(s);
            break;
        }
    }
    assert!(
        refused.is_some(),
        "the admission bucket refuses past its burst"
    );
    // Let some churn reach the open watch.
    let _ = tokio::time::timeout(Duration::from_secs(3), watch.chunk()).await;

    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("text");
    drop(watch);
    let (declared, sampled) = exported(&text);

    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, rule) in alerts() {
        for m in metric_names(rule["expr"].as_str().expect("expr")) {
            used.entry(m).or_default().push(format!("alert {name}"));
        }
    }
    for (title, q) in dashboard_queries() {
        for m in metric_names(&q) {
            used.entry(m).or_default().push(format!("panel {title}"));
        }
    }
    let dash: Value = serde_json::from_str(&read("deploy/dashboards/herald.json")).expect("JSON");
    for var in dash["templating"]["list"].as_array().expect("variables") {
        if let Some(q) = var["definition"].as_str() {
            for m in metric_names(q) {
                used.entry(m)
                    .or_default()
                    .push(format!("variable {}", var["name"]));
            }
        }
    }
    assert!(used.len() >= 25, "metrics used: {:?}", used.keys());
    for (m, by) in &used {
        assert!(
            declared.contains(m),
            "{m} (read by {by:?}) is not on herald's /metrics:\n{text}"
        );
        assert!(
            sampled.contains(m),
            "{m} (read by {by:?}) has no sample after the consumers' requests:\n{text}"
        );
    }
    // The scrape-time gauges tell what the consumers did: SD consumers seen, watches saved.
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{series} on /metrics:\n{text}"))
    };
    assert_eq!(value("herald_ready"), 1.0);
    assert_eq!(
        value("herald_sd_consumers"),
        3.0,
        "pods, endpointslices, nodes shard 0/2 from one address"
    );
    assert!(value("herald_apiserver_watches_direct") >= 4.0);
    assert!(value("herald_kube_admission_refused_total{verb=\"LIST\",reason=\"rate\"}") >= 1.0);
    herald.stop().await;
}
