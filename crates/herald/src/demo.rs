//! `herald demo`: kube-sim in-process (preset `small`, churning, every pod and node address on
//! loopback) and herald against it over loopback HTTP, with its Kubernetes API face on a free loopback
//! port; prints the SD URLs, a Prometheus `scrape_configs` snippet, a kubeconfig for kubectl against
//! herald, and — last, so start-up logs cannot bury it — what to open next (the status page, kubectl
//! against herald and against kube-sim) and a live line: consumers served against upstream watches,
//! and what the same consumers would cost the apiserver directly. `--consumers N` attaches simulated
//! consumers (`consumers`) before the first line, so it shows the saving from the start; on a
//! terminal the line is rewritten in place.

mod consumers;

use std::io::{IsTerminal as _, Write as _};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use herald_server::{
    Herald, KubeApiOptions, KubeServeOptions, ServeOptions, USER_AGENT, job_specs, kube_kinds,
};
use kube_sim::generate::ClusterSpec;
use kube_sim::{Sim, SimConfig};

use crate::cli::DemoArgs;

/// Only roles whose targets are IP addresses: the service and ingress roles yield DNS names
/// (`svc.ns.svc`, ingress hosts) that a Prometheus would try to resolve, and nothing in the demo
/// may reach beyond the machine.
const DEMO_JOBS: &str = "\
jobs:
- name: pods
  role: pod
- name: endpointslices
  role: endpointslice
- name: endpoints
  role: endpoints
- name: nodes
  role: node
  selectors:
  - role: node
    label: kubernetes.io/os=linux
";

/// The demo cluster: `small`, with pods, nodes and Services on loopback ranges
/// (127.0.0.0/8; kube-sim never hands out 127.0.0.0 or 127.0.0.1).
fn demo_cluster() -> ClusterSpec {
    ClusterSpec {
        pod_cidr: "127.16.0.0/12".parse().expect("valid literal cidr"),
        node_cidr: "127.8.0.0/16".parse().expect("valid literal cidr"),
        service_cidr: "127.4.0.0/16".parse().expect("valid literal cidr"),
        ..ClusterSpec::small()
    }
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.listen.ip().is_loopback(),
        "--listen {} is not a loopback address: the demo stays on this machine",
        args.listen
    );
    let sim = Sim::start(SimConfig {
        spec: demo_cluster(),
        seed: args.seed,
        churn_per_sec: args.churn,
        ..SimConfig::default()
    })
    .await
    .context("starting kube-sim")?;

    let config = herald_core::parse_config(DEMO_JOBS).context("the demo job file")?;
    let specs = job_specs(&config, None)?;
    let herald = Herald::start(
        specs,
        kube::Config::new(sim.url().parse().context("kube-sim URL")?),
        ServeOptions {
            listen: args.listen,
            user_agent: USER_AGENT.to_string(),
            kube: Some(KubeServeOptions {
                listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
                api: KubeApiOptions {
                    resources: kube_kinds(&[])?.0,
                    ..KubeApiOptions::default()
                },
                custom: vec![],
                token_file: None,
                insecure: false,
                tls: None,
            }),
            ..ServeOptions::default()
        },
    )
    .await
    .context("starting herald")?;
    tokio::time::timeout(Duration::from_secs(30), herald.ready())
        .await
        .context("herald did not sync with kube-sim within 30s")?;

    let jobs: Vec<String> = config.jobs.iter().map(|j| j.name.clone()).collect();
    let attached = consumers::attach(
        args.consumers,
        &herald.url(),
        &jobs,
        herald.kube_url().as_deref(),
        Duration::from_secs(5),
    )
    .await
    .context("attaching the simulated consumers")?;
    print_intro(&sim, &herald, &config);
    if args.consumers > 0 {
        println!(
            "Attached: {} Prometheus shards polling /sd/v1 (?shard=i&shards={}) and {} informers \
             watching herald's Kubernetes API (--consumers 0 for none)",
            attached.sd_shards, attached.sd_shards, attached.informers
        );
    }
    let live = LiveLine::new(std::io::stdout().is_terminal());
    let summary = async {
        let mut tick = tokio::time::interval(Duration::from_secs(args.summary_every.max(1)));
        loop {
            tick.tick().await;
            live.show(&summary_line(&sim, &herald));
        }
    };
    let stop = async {
        match args.run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => crate::serve::shutdown_signal().await,
        }
    };
    tokio::select! {
        () = summary => {},
        () = stop => {},
    }
    live.last(&summary_line(&sim, &herald));
    drop(attached);
    herald.stop().await;
    sim.shutdown().await;
    Ok(())
}

fn print_intro(sim: &Sim, herald: &Herald, config: &herald_core::Config) {
    let base = herald.url();
    println!("kube-sim (simulated apiserver): {}", sim.url());
    println!("herald:                         {base}   (/sd/v1, /metrics, /readyz)");
    println!();
    println!("HTTP SD URLs:");
    for job in &config.jobs {
        println!("  {base}/sd/v1/{}", job.name);
    }
    println!();
    println!("Prometheus scrape_configs (every discovered address is on 127.0.0.0/8):");
    println!("scrape_configs:");
    for job in &config.jobs {
        println!("  - job_name: herald-{}", job.name);
        println!("    http_sd_configs:");
        println!("      - url: {base}/sd/v1/{}", job.name);
        println!("        refresh_interval: 15s");
    }
    println!();
    println!(
        "Try: curl -s {base}/sd/v1 ; curl -s '{base}/sd/v1/pods?shard=0&shards=2' | head -c 400"
    );
    println!();
    if let Some(kube) = herald.kube_url() {
        println!("herald's Kubernetes API (list/watch from its cache): {kube}");
        match write_kubeconfig("herald", &kube) {
            Ok(path) => println!(
                "Try: kubectl --kubeconfig {} get pods -A -w    (kube-sim serves herald one watch per kind)",
                path.display()
            ),
            Err(e) => println!("(could not write a kubeconfig: {e})"),
        }
        println!();
    }
    let rule = "-".repeat(100);
    println!("{rule}");
    println!("Next:");
    println!("  status page:  {base}/    (what herald is doing; {base}/status.json for scripts)");
    match write_kubeconfig("kube-sim", &sim.url()) {
        Ok(path) => println!(
            "  the cluster:  kubectl --kubeconfig {} get nodes    (kube-sim, the simulated apiserver itself)",
            path.display()
        ),
        Err(e) => println!("  (could not write kube-sim's kubeconfig: {e})"),
    }
    println!(
        "  live line:    consumers herald serves vs the watches it holds upstream, and what the same"
    );
    println!(
        "                consumers would hold on the apiserver directly (Prometheus kubernetes_sd, informers)"
    );
    println!("{rule}");
}

/// The live line: rewritten in place on a terminal (`\r`, then erase the line), one line per
/// summary otherwise (a pipe, a log file, a test reading stdout).
struct LiveLine {
    in_place: bool,
}

impl LiveLine {
    fn new(in_place: bool) -> LiveLine {
        LiveLine { in_place }
    }

    fn show(&self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = if self.in_place {
            // The headline only: a line wider than the terminal wraps, and `\r` would then rewrite
            // only its last row.
            let headline = line.split(" | ").next().unwrap_or(line);
            write!(out, "\r\x1b[2K{headline}")
        } else {
            writeln!(out, "{line}")
        };
        let _ = out.flush();
    }

    /// The final line, ended with a newline either way.
    fn last(&self, line: &str) {
        self.show(line);
        if self.in_place {
            println!();
        }
    }
}

/// A kubeconfig for `server` in the temp directory, named after `who`.
fn write_kubeconfig(who: &str, server: &str) -> std::io::Result<std::path::PathBuf> {
    let path = std::env::temp_dir().join(format!(
        "herald-demo-{}-{who}.kubeconfig",
        std::process::id()
    ));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: herald\n  cluster:\n    server: {server}\ncontexts:\n- name: herald\n  context:\n    cluster: herald\n    user: demo\ncurrent-context: herald\nusers:\n- name: demo\n  user: {{}}\n"
        ),
    )?;
    Ok(path)
}

/// `objects=… targets=… consumers-served=… upstream-watches=…`: upstream watches as kube-sim's meter
/// counts them for herald's User-Agent — one per kind, however many consumers.
fn summary_line(sim: &Sim, herald: &Herald) -> String {
    let shared = herald.shared();
    let objects: usize = shared.object_counts().values().sum();
    let targets: usize = (0..shared.jobs().len())
        .map(|j| shared.job_counts(j).1)
        .sum();
    let served = shared.served.load(Ordering::Relaxed);
    let stats = sim.stats();
    let watches = stats["by_user_agent"][USER_AGENT]["watches_open"]
        .as_u64()
        .map_or_else(|| "?".to_string(), |n| n.to_string());
    let kinds = shared.cache.ids().count();
    let api_watchers: i64 = shared
        .cache
        .ids()
        .map(|r| {
            shared
                .metrics
                .kube_watches_open
                .get_or_create(&herald_server::metrics::Metrics::kind(
                    &shared.cache.get(r).resource.plural,
                ))
                .get()
        })
        .sum();
    let c = herald_server::status::Status::collect(shared).consumers;
    format!(
        "{} SD clients + {} API watches served by herald over {watches} upstream watches; directly they would hold {} apiserver watches ({} saved) | objects={objects} targets={targets} consumers-served={served} api-watchers={api_watchers} upstream-watches={watches} (kinds={kinds}) rv={}",
        c.sd_clients,
        c.kube_watches_open,
        c.direct_watches,
        c.watches_saved,
        stats["resource_version"]
    )
}
