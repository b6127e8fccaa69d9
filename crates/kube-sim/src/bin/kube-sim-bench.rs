//! kube-sim's benchmark: generation time and peak memory for a preset, full LIST latency, and watch
//! fan-out latency to many watchers. Run by `bench/kube-sim.sh`; results are recorded in
//! `bench/RESULTS.md`.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_sim::generate::ClusterSpec;
use kube_sim::{Kind, Object, Sim, SimConfig, Write};

#[derive(Parser)]
struct Args {
    /// `small` or `k8s-limits`.
    #[arg(long, default_value = "k8s-limits")]
    preset: String,
    /// Full LIST repetitions.
    #[arg(long, default_value_t = 5)]
    lists: usize,
    /// Concurrent watchers for the fan-out measurement.
    #[arg(long, default_value_t = 1000)]
    watchers: usize,
    /// Writes whose delivery to every watcher is timed.
    #[arg(long, default_value_t = 50)]
    events: usize,
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let spec = match args.preset.as_str() {
        "small" => ClusterSpec::small(),
        "k8s-limits" => ClusterSpec::k8s_limits(),
        other => anyhow::bail!("unknown preset {other:?}: expected small or k8s-limits"),
    };
    println!("# kube-sim benchmark: preset {}", args.preset);

    let t = Instant::now();
    let sim = Sim::start(SimConfig {
        spec,
        ..SimConfig::default()
    })
    .await
    .context("starting kube-sim")?;
    let gen_time = t.elapsed();
    let stats = sim.stats();
    println!(
        "generate+load: {:.2} s, peak RSS {:.0} MiB, objects {}",
        gen_time.as_secs_f64(),
        peak_rss_mib(),
        stats["objects"]
    );

    let client = reqwest::Client::builder()
        .user_agent("kube-sim-bench")
        .build()?;
    let url = format!("{}/api/v1/pods", sim.url());
    let mut times = Vec::new();
    let mut bytes = 0;
    let mut items = 0;
    for _ in 0..args.lists {
        let t = Instant::now();
        let body = client.get(&url).send().await?.bytes().await?;
        times.push(t.elapsed());
        bytes = body.len();
        // Count items without building a 400 MB value tree in the benchmark's own process.
        #[derive(serde::Deserialize)]
        struct List {
            items: Vec<serde::de::IgnoredAny>,
        }
        items = serde_json::from_slice::<List>(&body)?.items.len();
    }
    times.sort();
    println!(
        "full LIST pods: {items} items, {:.1} MiB, median {:.0} ms (min {:.0}, max {:.0}) over {} runs; peak RSS {:.0} MiB",
        bytes as f64 / 1048576.0,
        pct(&times, 0.5).as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        args.lists,
        peak_rss_mib()
    );

    // Watch fan-out: N watchers on configmaps in one namespace; each write is timed until every watcher
    // has its event.
    let rv = sim.handle().resource_version();
    let wurl = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}",
        sim.url()
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let mut tasks = Vec::new();
    for _ in 0..args.watchers {
        let client = client.clone();
        let wurl = wurl.clone();
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let resp = client.get(&wurl).send().await.expect("watch");
            let mut s = resp.bytes_stream();
            let mut buf = Vec::new();
            let mut seen = 0usize;
            while let Some(Ok(chunk)) = s.next().await {
                buf.extend_from_slice(&chunk);
                while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                    buf.drain(..=pos);
                    let _ = tx.send((seen, Instant::now()));
                    seen += 1;
                }
            }
        }));
    }
    drop(tx);
    // Let every watch connect.
    for _ in 0..200 {
        if sim.stats()["by_resource"]["configmaps"]["watches_open"].as_u64()
            == Some(args.watchers as u64)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut latencies = Vec::new();
    let t_all = Instant::now();
    for i in 0..args.events {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(format!("bench-{i}"));
        c.metadata.namespace = Some("default".into());
        let sent = Instant::now();
        sim.handle().apply(vec![Write::Put(Object::ConfigMap(c))]);
        let mut got = 0;
        while got < args.watchers {
            let (_, at) = rx.recv().await.context("watchers ended early")?;
            latencies.push(at - sent);
            got += 1;
        }
    }
    let total = t_all.elapsed();
    latencies.sort();
    println!(
        "watch fan-out: {} watchers x {} events: delivery p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {:.0} events/s delivered; peak RSS {:.0} MiB",
        args.watchers,
        args.events,
        pct(&latencies, 0.5).as_secs_f64() * 1e3,
        pct(&latencies, 0.99).as_secs_f64() * 1e3,
        pct(&latencies, 1.0).as_secs_f64() * 1e3,
        (args.watchers * args.events) as f64 / total.as_secs_f64(),
        peak_rss_mib()
    );
    let _ = Kind::Pod;
    for t in tasks {
        t.abort();
    }
    sim.shutdown().await;
    Ok(())
}
