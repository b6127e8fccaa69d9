//! herald-bench: the benchmark suite of issue 9 (`herald-bench suite`, wrapped by `bench/run`) and the
//! static-bytes server it measures herald's serving against (`herald-bench static-server`).
//!
//! The suite starts kube-sim, herald, vmagent and its own clients as separate processes on loopback,
//! measures the four sections (discovery cost versus vmagent and its scaling curve, control-plane load
//! direct versus through herald, serving versus a static hyper server, propagation), and writes
//! `results.json`, the RESULTS.md section and `discovery-scaling.svg` into `--out`. Two more sections
//! run only when named: the fault soak, the steady state beside vmagent (`steady`) and a restart in
//! the steady state (`restart`). It measures and
//! reports; it asserts nothing about speed.

mod cluster;
mod control;
mod discovery;
mod load;
mod loadgen;
mod plot;
mod propagation;
mod realcp;
mod report;
mod restart;
mod serving;
mod soak;
mod static_server;
mod steady;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};

use cluster::{ClusterSpec, Env};

#[derive(Debug, Parser)]
#[command(name = "herald-bench", about = "herald's benchmark suite (issue 9)")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the suite and write results.json, RESULTS.md's suite section and the scaling SVG.
    Suite(Box<SuiteArgs>),
    /// Serve one herald body from memory (the serving section's limit).
    StaticServer(static_server::StaticArgs),
    /// The fault soak alone: churn, a fault every interval, consumers on every job; writes soak.json
    /// and soak.md into --out and fails when herald served a partial snapshot or ended wrong.
    Soak(SoakArgs),
}

#[derive(Debug, clap::Args)]
struct SoakArgs {
    #[command(flatten)]
    soak: SoakOpts,
    /// Where soak.json and soak.md go.
    #[arg(long, default_value = "bench/out/soak")]
    out: PathBuf,
    /// Directory holding the herald and kube-sim binaries [default: this binary's directory].
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where child logs go [default: a new directory under the temp dir, removed after a pass].
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// RUST_LOG for herald and kube-sim.
    #[arg(long, default_value = "warn")]
    child_log: String,
}

/// The soak's knobs, shared by `herald-bench soak` and `bench/run --only soak`.
#[derive(Debug, Clone, clap::Args)]
struct SoakOpts {
    /// How long churn and faults run, seconds [default: 600; 30 with the suite's --quick].
    #[arg(long)]
    soak_seconds: Option<f64>,
    /// Seconds between faults.
    #[arg(long, default_value_t = 10.0)]
    soak_fault_every: f64,
    /// Churn writes per second (creates, deletes, relabels).
    #[arg(long, default_value_t = 100.0)]
    soak_churn_rate: f64,
    /// Each consumer's pause between requests, milliseconds.
    #[arg(long, default_value_t = 100)]
    soak_poll_interval_ms: u64,
    /// How long herald gets to serve kube-sim's state once faults are cleared, seconds.
    #[arg(long, default_value_t = 120)]
    soak_converge_timeout: u64,
}

impl SoakOpts {
    fn plan(&self, quick: bool) -> soak::Plan {
        soak::Plan {
            // Half the small preset: bodies of a few hundred targets, so a 2-core machine polls them
            // tens of times a second beside herald and kube-sim.
            spec: ClusterSpec {
                preset: "small",
                scale: 0.5,
                seed: 7,
                churn: 0.0,
            },
            shape: herald_bench::soak::Shape {
                rolling: 3,
                relabel: 2,
                replicas: 10,
            },
            seconds: self
                .soak_seconds
                .unwrap_or(if quick { 30.0 } else { 600.0 }),
            fault_every: self.soak_fault_every,
            churn_rate: self.soak_churn_rate,
            poll_interval: Duration::from_millis(self.soak_poll_interval_ms),
            converge_timeout: Duration::from_secs(self.soak_converge_timeout),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Section {
    Discovery,
    Control,
    Serving,
    Propagation,
    /// The fault soak: only when named (`--only soak`), never part of the default run.
    Soak,
    /// The steady state beside vmagent (issue 22): only when named (`--only steady`), 10 minutes.
    Steady,
    /// herald killed and restarted under 10,000 informers (issue 22): only when named
    /// (`--only restart`).
    Restart,
    /// The real control plane's cost, direct versus through herald: only when named
    /// (`--only realcp`); needs `peers/build`.
    Realcp,
}

impl Section {
    fn key(self) -> &'static str {
        match self {
            Section::Discovery => "discovery",
            Section::Control => "control",
            Section::Serving => "serving",
            Section::Propagation => "propagation",
            Section::Soak => "soak",
            Section::Steady => "steady",
            Section::Restart => "restart",
            Section::Realcp => "realcp",
        }
    }
}

#[derive(Debug, clap::Args)]
struct SuiteArgs {
    /// Small preset, one run, a second or two per measurement: a smoke run (CI runs it).
    #[arg(long)]
    quick: bool,
    /// Run only these sections (comma-separated); the others keep what results.json holds.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Section>,
    /// Where results.json, RESULTS.md and discovery-scaling.svg go [default: bench/, or
    /// bench/out/quick/ with --quick, so a quick run never overwrites the committed results].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Directory holding the herald and kube-sim binaries [default: this binary's directory]; the
    /// last one given wins.
    #[arg(long, overrides_with = "bin_dir")]
    bin_dir: Option<PathBuf>,
    /// vmagent binary [default: `vmagent` on PATH; its rows are skipped when missing].
    #[arg(long)]
    vmagent: Option<PathBuf>,
    /// Runs at 100 % of the preset in the discovery section (1 elsewhere).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Scales of k8s-limits in the discovery section.
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.3,1,3")]
    scales: Vec<f64>,
    /// Conditions to record with the figures (e.g. "measured while other builds ran").
    #[arg(long)]
    note: Option<String>,
    /// The command to record [default: this process's command line].
    #[arg(long, overrides_with = "command")]
    command: Option<String>,
    /// Where child logs go [default: a new directory under the temp dir].
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Measure nothing: rewrite RESULTS.md and the SVG from `--out`'s results.json.
    #[arg(long)]
    render_only: bool,
    /// RUST_LOG for herald and kube-sim.
    #[arg(long, default_value = "warn")]
    child_log: String,
    #[command(flatten)]
    soak: SoakOpts,
    /// The steady-state section's measured window, seconds [default: 600; 10 with --quick].
    #[arg(long)]
    steady_seconds: Option<f64>,
    /// The restart section's k8s-limits scale [default: 1; the small preset with --quick].
    #[arg(long)]
    restart_scale: Option<f64>,
    /// The restart section's informers [default: 10,000; 100 with --quick].
    #[arg(long)]
    restart_watchers: Option<usize>,
    /// The restart section's baseline before the kill, seconds [default: 10; 3 with --quick].
    #[arg(long)]
    restart_baseline_seconds: Option<f64>,
    /// The realcp section's clusters and consumer counts, `SCALE=N,N,...` of k8s-limits, `;`
    /// between clusters [default: `0.02=1,10,50,100;0.1=1,10`: at a tenth of k8s-limits 50
    /// Prometheus-shaped consumers did not fit in 24 GiB; the small preset, 1 and 3, with --quick].
    #[arg(long)]
    realcp: Option<String>,
}

fn sh(cmd: &str, args: &[&str]) -> Option<String> {
    let o = std::process::Command::new(cmd).args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown".into());
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib = herald_bench::procfs::parse_status_kib(&mem, "MemTotal:").unwrap_or(0);
    json!({
        "cpu_model": model,
        "cpus": cpus,
        "nproc": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "mem_total_gib": mem_kib as f64 / 1048576.0,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn version_of(bin: &Path, flag: &str) -> Option<String> {
    let out = std::process::Command::new(bin).arg(flag).output().ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.lines().next().map(|l| l.trim().to_string())
}

fn commit() -> String {
    let head = sh("git", &["rev-parse", "--short=10", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = sh("git", &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.is_empty());
    if dirty { format!("{head}+dirty") } else { head }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

async fn suite(args: SuiteArgs) -> anyhow::Result<()> {
    let this = std::env::current_exe()?;
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => this.parent().context("binary directory")?.to_path_buf(),
    };
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(if args.quick {
            "bench/out/quick"
        } else {
            "bench"
        })
    });
    std::fs::create_dir_all(&out)?;
    let work = match &args.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("herald-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work)?;
    let env = Env {
        kube_sim: bin_dir.join("kube-sim"),
        herald: bin_dir.join("herald"),
        vmagent: args.vmagent.clone().or_else(|| which("vmagent")),
        this,
        work: work.clone(),
        child_log: args.child_log.clone(),
        // No automatic gzip: the clients decide what they accept and count raw bytes.
        http: reqwest::Client::builder()
            .no_proxy()
            .no_gzip()
            .pool_max_idle_per_host(1024)
            .build()?,
    };
    for b in [&env.kube_sim, &env.herald] {
        anyhow::ensure!(
            b.exists(),
            "{} not found (build it, or pass --bin-dir)",
            b.display()
        );
    }
    if env.vmagent.is_none() {
        eprintln!(
            "vmagent not found: its rows are skipped (install: apt-get install victoria-metrics)"
        );
    }
    eprintln!("logs under {}", work.display());
    let herald_version = version_of(&env.herald, "--version");
    // Debian's vmagent prints nothing for -version: its package version then.
    let vmagent_version = env.vmagent.as_ref().and_then(|v| {
        version_of(v, "-version")
            .filter(|s| !s.is_empty())
            .or_else(|| {
                sh("dpkg-query", &["-W", "-f=${Version}", "victoria-metrics"])
                    .map(|v| format!("victoria-metrics {v} (Debian package)"))
            })
    });
    let command = args
        .command
        .clone()
        .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" "));
    let json_path = out.join("results.json");
    let mut doc: Value = std::fs::read(&json_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| json!({"sections": {}}));
    if args.render_only {
        return write_all(&doc, &out);
    }
    doc["machine"] = machine();
    let sections: Vec<Section> = if args.only.is_empty() {
        vec![
            Section::Discovery,
            Section::Control,
            Section::Serving,
            Section::Propagation,
        ]
    } else {
        args.only.clone()
    };
    let q = args.quick;
    let suite_start = Instant::now();
    for s in sections {
        let started = Instant::now();
        let meta_base = json!({
            "date_utc": sh("date", &["-u", "+%Y-%m-%d %H:%M"]).unwrap_or_default(),
            "command": command,
            "commit": commit(),
            "quick": q,
            "herald_version": herald_version,
            "vmagent_version": vmagent_version,
            "note": args.note,
            "loadavg_before": loadavg(),
        });
        let result = match s {
            Section::Discovery => {
                let plan = discovery::Plan {
                    preset: if q { "small" } else { "k8s-limits" },
                    seed: 11,
                    scales: if q {
                        vec![1.0, 2.0]
                    } else {
                        args.scales.clone()
                    },
                    main_scale: 1.0,
                    main_runs: if q { 1 } else { args.runs },
                    other_runs: 1,
                    sync_timeout: Duration::from_secs(if q { 60 } else { 900 }),
                };
                discovery::run(&env, &plan).await
            }
            Section::Control => {
                let plan = control::Plan {
                    spec: ClusterSpec {
                        preset: if q { "small" } else { "k8s-limits" },
                        scale: if q { 1.0 } else { 0.02 },
                        seed: 11,
                        churn: if q { 20.0 } else { 100.0 },
                    },
                    consumers: if q { vec![1, 3] } else { vec![1, 10, 100] },
                    max_vmagents: if q { 1 } else { 10 },
                    warmup: if q { 1.0 } else { 3.0 },
                    seconds: if q { 1.0 } else { 10.0 },
                    poll_interval: if q { 1.0 } else { 5.0 },
                };
                control::run(&env, &plan).await
            }
            Section::Serving => {
                let plan = serving::Plan {
                    spec: ClusterSpec {
                        preset: if q { "small" } else { "k8s-limits" },
                        scale: if q { 1.0 } else { 0.1 },
                        seed: 11,
                        churn: 0.0,
                    },
                    body_targets: 10_000,
                    concurrency: if q { vec![1, 8] } else { vec![1, 64, 512] },
                    seconds: if q { 1.0 } else { 5.0 },
                    warmup: if q { 0.2 } else { 1.0 },
                };
                serving::run(&env, &plan).await
            }
            Section::Propagation => {
                let plan = propagation::Plan {
                    spec: ClusterSpec {
                        preset: if q { "small" } else { "k8s-limits" },
                        scale: if q { 1.0 } else { 0.02 },
                        seed: 11,
                        churn: 0.0,
                    },
                    rates: if q {
                        vec![10.0, 100.0]
                    } else {
                        vec![10.0, 100.0, 1000.0]
                    },
                    seconds: if q { 1.5 } else { 15.0 },
                    pods: 20,
                };
                propagation::run(&env, &plan).await
            }
            Section::Soak => soak::run(&env, &args.soak.plan(q)).await,
            Section::Steady => {
                let plan = steady::Plan {
                    spec: ClusterSpec {
                        preset: if q { "small" } else { "k8s-limits" },
                        scale: 1.0,
                        seed: 11,
                        churn: 20.0,
                    },
                    seconds: args.steady_seconds.unwrap_or(if q { 10.0 } else { 600.0 }),
                    poll_interval: if q { 2.0 } else { 15.0 },
                    shards: 10,
                    gzip_consumers: 2,
                    watchers: if q { 10 } else { 100 },
                    markers: if q { 8 } else { 40 },
                    marker_interval: if q { 0.5 } else { 1.0 },
                    sync_timeout: Duration::from_secs(if q { 60 } else { 900 }),
                };
                steady::run(&env, &plan).await
            }
            Section::Restart => {
                let plan = restart::Plan {
                    spec: ClusterSpec {
                        preset: if q { "small" } else { "k8s-limits" },
                        scale: args.restart_scale.unwrap_or(1.0),
                        seed: 11,
                        churn: 20.0,
                    },
                    watchers: args
                        .restart_watchers
                        .unwrap_or(if q { 100 } else { 10_000 }),
                    poll_interval: if q { 2.0 } else { 15.0 },
                    shards: 10,
                    gzip_consumers: 2,
                    baseline: args
                        .restart_baseline_seconds
                        .unwrap_or(if q { 3.0 } else { 10.0 }),
                    attach_timeout: Duration::from_secs(if q { 60 } else { 900 }),
                    storm_timeout: Duration::from_secs(if q { 60 } else { 600 }),
                    sync_timeout: Duration::from_secs(if q { 60 } else { 900 }),
                    sample_every: Duration::from_millis(500),
                };
                restart::run(&env, &plan).await
            }
            Section::Realcp => {
                let runs = match (&args.realcp, q) {
                    (Some(text), _) => realcp::parse_runs(text),
                    (None, true) => Ok(vec![(1.0, vec![1, 3])]),
                    (None, false) => realcp::parse_runs("0.02=1,10,50,100;0.1=1,10"),
                };
                match runs {
                    Ok(runs) => {
                        let plans = runs
                            .into_iter()
                            .map(|(scale, consumers)| realcp::Plan {
                                preset: if q { "small" } else { "k8s-limits" },
                                scale,
                                seed: 11,
                                consumers,
                                churn_rate: 8.0,
                                churn_seconds: if q { 5.0 } else { 30.0 },
                            })
                            .collect::<Vec<_>>();
                        realcp::run_all(&env, &plans).await
                    }
                    Err(e) => Err(e),
                }
            }
        };
        let mut meta = meta_base;
        meta["seconds"] = json!(started.elapsed().as_secs_f64());
        meta["loadavg_after"] = json!(loadavg());
        let entry = match result {
            Ok(data) => json!({"meta": meta, "data": data}),
            Err(e) => {
                eprintln!("[{}] failed: {e:#}", s.key());
                json!({"meta": meta, "error": format!("{e:#}")})
            }
        };
        doc["sections"][s.key()] = entry;
        // Write after every section, so an interrupted run keeps what it measured.
        write_all(&doc, &out)?;
    }
    eprintln!(
        "suite done in {:.0} s; wrote {}",
        suite_start.elapsed().as_secs_f64(),
        out.display()
    );
    let failed: Vec<&str> = report::SECTIONS
        .iter()
        .filter(|(k, _)| doc["sections"][*k].get("error").is_some())
        .map(|(k, _)| *k)
        .collect();
    anyhow::ensure!(failed.is_empty(), "sections failed: {}", failed.join(", "));
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// `herald-bench soak`: the soak alone, into `--out`; an error when it found a fault in herald.
async fn soak_alone(args: SoakArgs) -> anyhow::Result<()> {
    let this = std::env::current_exe()?;
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => this.parent().context("binary directory")?.to_path_buf(),
    };
    let work = match &args.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("herald-soak-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work)?;
    std::fs::create_dir_all(&args.out)?;
    let env = Env {
        kube_sim: bin_dir.join("kube-sim"),
        herald: bin_dir.join("herald"),
        vmagent: None,
        this,
        work: work.clone(),
        child_log: args.child_log.clone(),
        http: reqwest::Client::builder().no_proxy().build()?,
    };
    for b in [&env.kube_sim, &env.herald] {
        anyhow::ensure!(
            b.exists(),
            "{} not found (build it, or pass --bin-dir)",
            b.display()
        );
    }
    eprintln!("logs under {}", work.display());
    let started = Instant::now();
    let data = soak::run(&env, &args.soak.plan(false)).await?;
    let doc = json!({
        "machine": machine(),
        "date_utc": sh("date", &["-u", "+%Y-%m-%d %H:%M"]).unwrap_or_default(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "commit": commit(),
        "herald_version": version_of(&env.herald, "--version"),
        "loadavg_after": loadavg(),
        "wall_seconds": started.elapsed().as_secs_f64(),
        "data": data,
    });
    std::fs::write(args.out.join("soak.json"), serde_json::to_vec_pretty(&doc)?)?;
    let md = soak::markdown(&doc["data"]);
    std::fs::write(args.out.join("soak.md"), &md)?;
    println!("{md}");
    if let Some(why) = soak::failure(&doc["data"]) {
        anyhow::bail!(
            "the soak found a fault in herald (logs kept under {}): {why}",
            work.display()
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

fn write_all(doc: &Value, out: &Path) -> anyhow::Result<()> {
    std::fs::write(out.join("results.json"), serde_json::to_vec_pretty(doc)?)?;
    report::splice(&out.join("RESULTS.md"), &report::markdown(doc))?;
    if let Some(d) = doc["sections"]["discovery"].get("data") {
        plot::scaling_svg(d, &out.join("discovery-scaling.svg"))?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Suite(a) => suite(*a).await,
        Cmd::StaticServer(a) => static_server::serve(a).await,
        Cmd::Soak(a) => soak_alone(a).await,
    }
}
