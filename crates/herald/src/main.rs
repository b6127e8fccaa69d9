//! herald: one Kubernetes discovery for every Prometheus. `herald serve` runs it against a cluster,
//! `herald demo` against an in-process kube-sim; `herald audit` reviews a cluster's discovery setup;
//! `herald simulate` measures what its Services cost kube-proxy and its watchers the apiserver.
//! `herald explain` asks a running herald why an object's targets are (not) served;
//! `herald completion` prints a shell completion script.
//! This file only parses arguments and dispatches.

mod audit;
mod cli;
mod demo;
mod explain;
mod serve;
mod simulate;
mod size;

use clap::{CommandFactory as _, Parser};

// mimalloc, for herald's many small short-lived allocations (see herald-alloc); the system's with
// the `system-alloc` feature, for heap profiles.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: herald_alloc::MiMalloc = herald_alloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    herald_alloc::disable_transparent_huge_pages();
    let cli = cli::Cli::parse();
    herald_server::heap::set_release(herald_alloc::release_free_memory);
    // The demo's start-up output is what a newcomer reads: its logs default to warnings only.
    let default_level = match cli.command {
        cli::Command::Demo(_) => cli::LogLevel::Warn,
        _ => cli::LogLevel::Info,
    };
    cli::init_tracing(cli.log_format, cli.log_level(default_level));
    match cli.command {
        cli::Command::Completion(args) => {
            clap_complete::generate(
                args.shell,
                &mut cli::Cli::command(),
                "herald",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        cli::Command::Serve(args) => serve::run(*args).await,
        cli::Command::Demo(args) => demo::run(args).await,
        cli::Command::Audit(args) => audit::run(args).await,
        cli::Command::Simulate(args) => simulate::run(args).await,
        cli::Command::Explain(args) => explain::run(args).await,
    }
}
