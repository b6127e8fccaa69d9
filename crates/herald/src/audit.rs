//! `herald audit`: runs herald-audit and maps its result to the process exit code (0: nothing at or
//! above `--fail-on`, 1: a finding reached it, 2: the audit could not run).

use std::io::Write as _;

pub async fn run(args: herald_audit::AuditArgs) -> anyhow::Result<()> {
    // The report is buffered rather than written through a stdout lock held across the await.
    let mut report = Vec::new();
    let result = herald_audit::run(&args, &mut report).await;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&report).and_then(|()| stdout.flush()) {
        // A reader that stopped early (`| head`) is not an error of the audit.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other?,
    }
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    };
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}
