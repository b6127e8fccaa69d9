//! `herald simulate`: runs herald-simulate; exit code 0 on success, 2 when it could not run.

use std::io::Write as _;

pub async fn run(args: herald_simulate::SimulateArgs) -> anyhow::Result<()> {
    let mut report = Vec::new();
    let result = herald_simulate::run(&args, &mut report).await;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&report).and_then(|()| stdout.flush()) {
        // A reader that stopped early (`| head`) is not an error of the simulation.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other?,
    }
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    Ok(())
}
