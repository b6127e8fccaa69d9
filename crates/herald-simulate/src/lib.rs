//! herald-simulate: what a cluster's Services cost every node's kube-proxy and what its watchers
//! cost the apiserver. `herald simulate` reads the cluster as `herald audit` does, generates the
//! rulesets kube-proxy's iptables and nftables proxiers would write ([`iptables`], [`nftables`]),
//! times them with the real tools in a throwaway network namespace ([`measure`], [`netns`]) or
//! models them from recorded measurements ([`model`]), and draws it all (`html`).

mod args;
mod curve;
mod error;
mod fanout;
mod html;
pub mod input;
pub mod iptables;
pub mod measure;
pub mod model;
pub mod names;
pub mod netns;
pub mod nftables;
mod plots;
mod report;
pub mod sync;
pub mod synth;

use std::io::Write;

use herald_audit::Cluster;

pub use args::{OutputFormat, SimulateArgs};
pub use curve::{Point, Source, Timer, Timing};
pub use error::SimulateError;
pub use fanout::{EgressPoint, Fanout, KindRow};
pub use report::{Report, SCHEMA, Skipped};

/// Reads the cluster the arguments name: a kubeconfig, dumps, or a generated one.
pub async fn load(args: &SimulateArgs) -> Result<(Cluster, String), SimulateError> {
    if let Some(path) = &args.kubeconfig {
        let c = herald_audit::live::load(path, args.context.as_deref()).await?;
        return Ok((c, format!("kubeconfig {}", path.display())));
    }
    if !args.from.is_empty() {
        let names: Vec<_> = args.from.iter().map(|p| p.display().to_string()).collect();
        let from = args.from.clone();
        let c = tokio::task::spawn_blocking(move || herald_audit::load::load_paths(&from))
            .await
            .map_err(|e| SimulateError::Input(format!("the loader stopped: {e}")))??;
        return Ok((c, names.join(", ")));
    }
    let Some(services) = args.services else {
        return Err(SimulateError::Input(
            "give --kubeconfig PATH, --from FILE_OR_DIR... or --services N".into(),
        ));
    };
    let spec = synth::Synthetic {
        services,
        endpoints_per_service: args.endpoints_per_service,
        nodes: args.nodes,
        nodeport_every: args.nodeport_every,
    };
    Ok((
        spec.cluster()?,
        format!(
            "generated: {services} Services × {} endpoints, {} nodes",
            args.endpoints_per_service, args.nodes
        ),
    ))
}

/// Builds the report of `cluster` (synchronous: generation and measurement are CPU and process
/// work). `progress` hears what is being measured.
pub fn simulate(
    cluster: &Cluster,
    source: String,
    args: &SimulateArgs,
    progress: &mut dyn FnMut(&str),
) -> Result<Report, SimulateError> {
    if let Some(f) = args.factors.iter().find(|f| !(**f > 0.0 && **f <= 16.0)) {
        return Err(SimulateError::Input(format!(
            "--factors {f} is not between 0 (excluded) and 16"
        )));
    }
    let node = args.node.clone().unwrap_or_else(|| {
        cluster
            .nodes
            .first()
            .and_then(|n| n.metadata.name.clone())
            .unwrap_or_else(|| synth::node_name(0))
    });
    let mut input = input::from_cluster(cluster, &node, &args.cluster_cidr)?;
    // One proxier per family: the IPv4 one reads the IPv4 ranges (`OnServiceCIDRsChanged`).
    input.service_cidrs = args
        .service_cidr
        .iter()
        .filter(|c| !c.contains(':'))
        .cloned()
        .collect();
    let metrics_only = herald_audit::rules::metrics_only_cluster_ips(cluster);
    let fanout = Fanout::of(cluster, args.churn_per_second, &args.factors);
    let root = netns::is_root();
    let timing = if !args.measure {
        "Times are modelled from recorded measurements (give --measure to time them here)."
            .to_string()
    } else if !root {
        "Not root: cannot create a network namespace, so times are modelled from recorded measurements.".to_string()
    } else {
        let missing: Vec<&str> = measure::Backend::MEASURABLE
            .iter()
            .filter(|b| !b.available())
            .filter_map(|b| b.tool())
            .collect();
        if !netns::sweep_stale()?.is_empty() {
            progress("deleted stale herald-sim-* network namespaces of processes that are gone");
        }
        format!(
            "Times measured in a throwaway network namespace, median of {} runs{}; IPVS is modelled (no ip_vs in this kernel).",
            args.runs,
            if missing.is_empty() {
                String::new()
            } else {
                format!("; not installed, so modelled: {}", missing.join(", "))
            }
        )
    };
    let timer = Timer {
        measure: args.measure && root,
        runs: args.runs,
        slow_after_s: args.slow_after,
        budget_s: args.budget,
        started: std::time::Instant::now(),
    };
    if let Some(dir) = &args.write_rules {
        write_rules(&input, dir)?;
    }
    let mut factors = args.factors.clone();
    if !factors.contains(&1.0) {
        factors.push(1.0);
    }
    let scaled: Vec<(String, input::ProxyInput)> = factors
        .iter()
        .map(|f| (format!("{f}×"), input.scaled(*f)))
        .collect();
    let curve = curve::points(scaled, &timer, progress)?;
    let mut what_ifs = Vec::new();
    if !metrics_only.is_empty() {
        what_ifs.push((
            format!("after HA004 fixes ({} headless)", metrics_only.len()),
            input.without(&metrics_only),
        ));
    }
    let what_ifs = curve::points(what_ifs, &timer, progress)?;
    Ok(Report {
        schema: SCHEMA,
        source,
        node,
        skipped: Skipped {
            no_cluster_ip: input.skipped_no_ip,
            service_proxy_name: input.skipped_proxy_name,
        },
        timing,
        curve,
        what_ifs,
        fanout,
    })
}

fn write_rules(input: &input::ProxyInput, dir: &std::path::Path) -> Result<(), SimulateError> {
    let sets = sync::Rulesets::of(input);
    let w = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|source| SimulateError::Write { path, source })
    };
    std::fs::create_dir_all(dir).map_err(|source| SimulateError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    w("iptables.rules", &sets.iptables_full.text)?;
    w("nftables.nft", &sets.nft_full.text)?;
    if let Some(p) = &sets.iptables_partial {
        w("iptables-partial.rules", &p.text)?;
    }
    if let Some(c) = &sets.nft_change {
        w("nftables-change.nft", &c.text)?;
    }
    Ok(())
}

/// Runs `herald simulate`: loads, simulates, writes the report to `out` and the HTML report.
pub async fn run(args: &SimulateArgs, out: &mut dyn Write) -> Result<(), SimulateError> {
    if args.measure {
        netns::install_signal_cleanup()?;
    }
    let (cluster, source) = load(args).await?;
    let a = args.clone();
    let report = tokio::task::spawn_blocking(move || {
        simulate(&cluster, source, &a, &mut |line| eprintln!("{line}"))
    })
    .await
    .map_err(|e| SimulateError::Input(format!("the simulation stopped: {e}")))??;
    if let Some(path) = &args.report {
        let html = html::render(&report)?;
        std::fs::write(path, html).map_err(|source| SimulateError::Write {
            path: path.clone(),
            source,
        })?;
    }
    match args.output {
        OutputFormat::Table => report.write_table(out),
        OutputFormat::Json => report.write_json(out),
    }
    .map_err(SimulateError::Output)
}
