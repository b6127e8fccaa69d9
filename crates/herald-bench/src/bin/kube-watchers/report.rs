//! kube-watchers' report: medians over runs, direct/herald ratios, markdown tables.

use herald_bench::{fmt as f, median};
use serde_json::{Value, json};

pub fn get(v: &Value, path: &str) -> Option<f64> {
    path.split('.')
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
}

/// Medians of every numeric leaf over `runs` (non-numeric leaves from the first run).
pub fn median_doc(runs: &[&Value]) -> Value {
    fn go(runs: &[&Value]) -> Value {
        match runs[0] {
            Value::Object(o) => Value::Object(
                o.keys()
                    .map(|k| {
                        let sub: Vec<&Value> = runs.iter().map(|r| &r[k]).collect();
                        (k.clone(), go(&sub))
                    })
                    .collect(),
            ),
            Value::Number(_) => {
                let xs: Vec<f64> = runs.iter().filter_map(|r| r.as_f64()).collect();
                median(&xs).map_or(Value::Null, |m| json!(m))
            }
            other => other.clone(),
        }
    }
    go(runs)
}

pub fn markdown(meds: &[Value], ratios: &[Value], runs: usize) -> String {
    let mut out = String::new();
    if let Some(m) = meds.first() {
        out.push_str(&format!(
            "Watching {} ({}).\n\n",
            m["kind"].as_str().unwrap_or("configmaps"),
            m["content_type"].as_str().unwrap_or("json")
        ));
    }
    out.push_str(&format!(
        "Medians over {runs} run(s) per row. After the window the writer stops and watchers get up to the drain timeout to receive every write; what is still missing then is the last column. Latency = receipt by the watcher − send time of the PUT to kube-sim (write, kube-sim, [herald], client). \"server\" is the process the watchers are attached to (herald, or kube-sim for `direct`). CPU is utime+stime from /proc over the window; \"rest of the machine\" is the machine's busy time (/proc/stat) minus herald's, kube-sim's and the client's: other processes, and kernel time (loopback TCP softirq) not charged to any of them.\n\n"
    ));
    out.push_str("| watchers | via | streaming | delivered events/s (expected) | writes/s → herald ingested/s (herald's RV behind kube-sim's at the end) | p50 ms | p99 ms | max ms | server CPU cores | server CPU µs / delivered event | server RSS KiB / watcher | kube-sim CPU cores | client CPU cores | rest of the machine, cores | closed as slow / 429 / stream ends / events undelivered when the drain ended |\n");
    out.push_str("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for m in meds {
        let herald = m["via"] == "herald";
        let slow = if herald {
            f(get(m, "herald.watchers_closed_slow_total"), 0)
        } else {
            "n/a".into()
        };
        let ingest = if herald {
            format!(
                "{} → {} ({})",
                f(get(m, "writes_per_s"), 1),
                f(get(m, "herald.upstream_events_per_s"), 1),
                f(
                    get(m, "herald.cache_rv_lag_at_window_end").map(|l| l.max(0.0)),
                    0
                )
            )
        } else {
            format!("{} → n/a", f(get(m, "writes_per_s"), 1))
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} / {} |\n",
            f(get(m, "watchers"), 0),
            m["via"].as_str().unwrap_or("?"),
            f(get(m, "attached"), 0),
            f(get(m, "delivered_per_s"), 0),
            f(get(m, "expected_per_s"), 0),
            ingest,
            f(get(m, "latency_ms.p50"), 1),
            f(get(m, "latency_ms.p99"), 1),
            f(get(m, "latency_ms.max"), 1),
            f(get(m, "server.cpu_cores"), 2),
            f(get(m, "server.cpu_us_per_delivered_event"), 2),
            f(get(m, "server.kib_per_watcher_end"), 1),
            f(get(m, "kube_sim.cpu_cores"), 2),
            f(get(m, "client.cpu_cores"), 2),
            f(get(m, "rest_of_machine_cores"), 2),
            slow,
            f(get(m, "client.refused_429"), 0),
            f(get(m, "client.server_ended_streams"), 0),
            f(get(m, "completeness.missing_events"), 0),
        ));
    }
    if !ratios.is_empty() {
        out.push_str("\nkube-sim's load, same watchers direct versus through herald (kube-sim's `/sim/stats`, readers other than the benchmark's writer; bytes over the measured window; ratio within one run, median over runs):\n\n");
        out.push_str("| watchers | kube-sim bytes/s direct | via herald | ratio | kube-sim open watches direct | via herald | ratio |\n");
        out.push_str("|---:|---:|---:|---:|---:|---:|---:|\n");
        for r in ratios {
            out.push_str(&format!(
                "| {} | {} | {} | **{}×** | {} | {} | **{}×** |\n",
                f(get(r, "watchers"), 0),
                f(get(r, "direct_bytes_per_s"), 0),
                f(get(r, "herald_bytes_per_s"), 0),
                f(get(r, "bytes_ratio"), 0),
                f(get(r, "direct_watches"), 0),
                f(get(r, "herald_watches"), 0),
                f(get(r, "watches_ratio"), 0),
            ));
        }
    }
    out
}

/// Medians per (N, path) in first-seen order, and the direct/herald ratios of kube-sim's load per N
/// (within each run, then the median over runs). Fills `rest_of_machine_cores` in runs recorded
/// before it existed.
pub fn summarise(all: &mut [Value]) -> (Vec<Value>, Vec<Value>) {
    for r in all.iter_mut() {
        if r.get("rest_of_machine_cores").is_none() {
            let sim = if r["via"] == "herald" {
                get(r, "kube_sim.cpu_cores").unwrap_or(0.0)
            } else {
                0.0
            };
            let ours = get(r, "server.cpu_cores").unwrap_or(f64::NAN)
                + sim
                + get(r, "client.cpu_cores").unwrap_or(f64::NAN);
            r["rest_of_machine_cores"] =
                json!(get(r, "machine_busy_cores").unwrap_or(f64::NAN) - ours);
        }
    }
    let mut keys: Vec<(u64, String)> = Vec::new();
    for r in all.iter() {
        let k = (
            r["watchers"].as_u64().unwrap_or(0),
            r["via"].as_str().unwrap_or("").to_string(),
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut meds = Vec::new();
    for (n, via) in &keys {
        let runs: Vec<&Value> = all
            .iter()
            .filter(|v| v["watchers"] == *n && v["via"] == via.as_str())
            .collect();
        meds.push(median_doc(&runs));
    }
    let mut ns: Vec<u64> = keys.iter().map(|k| k.0).collect();
    ns.dedup();
    let mut ratios = Vec::new();
    for n in ns {
        let mut per_run = Vec::new();
        let mut run_ids: Vec<u64> = all
            .iter()
            .filter(|v| v["watchers"] == n)
            .filter_map(|v| v["run"].as_u64())
            .collect();
        run_ids.sort_unstable();
        run_ids.dedup();
        for run in run_ids {
            let pick = |via: &str| {
                all.iter()
                    .find(|v| v["watchers"] == n && v["via"] == via && v["run"] == run)
            };
            if let (Some(d), Some(h)) = (pick("direct"), pick("herald")) {
                let db = get(d, "kube_sim.reader_bytes_per_s").unwrap_or(f64::NAN);
                let hb = get(h, "kube_sim.reader_bytes_per_s").unwrap_or(f64::NAN);
                let dw = get(d, "kube_sim.reader_watches_open").unwrap_or(f64::NAN);
                let hw = get(h, "kube_sim.reader_watches_open").unwrap_or(f64::NAN);
                per_run.push(json!({
                    "watchers": n, "run": run,
                    "direct_bytes_per_s": db, "herald_bytes_per_s": hb, "bytes_ratio": db / hb,
                    "direct_watches": dw, "herald_watches": hw, "watches_ratio": dw / hw,
                }));
            }
        }
        if !per_run.is_empty() {
            let refs: Vec<&Value> = per_run.iter().collect();
            let mut med = median_doc(&refs);
            med["per_run"] = json!(per_run);
            ratios.push(med);
        }
    }
    (meds, ratios)
}
