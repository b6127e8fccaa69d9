//! `herald simulate --measure` killed mid-way leaves no network namespace: on SIGTERM its handler
//! deletes the namespace before exiting; after SIGKILL (which no handler sees) the namespace stays
//! until the next `herald simulate --measure` sweeps namespaces whose process is gone.
//! One test: the steps must not interleave with another run's sweep.

#[path = "simulate_support.rs"]
mod support;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A measurement long enough to be caught mid-way: 800 Services, 3 runs of every mode.
fn long_run() -> Child {
    support::herald()
        .args([
            "simulate",
            "--services",
            "800",
            "--factors",
            "1",
            "--measure",
            "--runs",
            "5",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("herald starts")
}

/// Waits until the child holds a namespace.
fn wait_for_namespace(child: &Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(n) = support::namespaces_of(child.id()).pop() {
            return n;
        }
        assert!(Instant::now() < deadline, "no namespace within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{sig}"), child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

#[test]
fn a_killed_measurement_leaves_no_network_namespace() {
    if !support::root_or_skip() || support::netfilter_tools().is_none() {
        return;
    }
    // SIGTERM: the handler deletes the namespace, then exits 143.
    let mut child = long_run();
    let ns = wait_for_namespace(&child);
    signal(&child, "TERM");
    let status = child.wait().expect("herald exits");
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert!(
        support::namespaces_of(child.id()).is_empty(),
        "{ns} left after SIGTERM"
    );

    // SIGKILL: nothing runs in the process; the namespace outlives it...
    let mut child = long_run();
    let ns = wait_for_namespace(&child);
    signal(&child, "KILL");
    child.wait().expect("herald is reaped");
    assert_eq!(
        support::namespaces_of(child.id()),
        std::slice::from_ref(&ns),
        "SIGKILL runs no handler"
    );
    // ...until the next measuring run sweeps it.
    let out = support::herald()
        .args([
            "simulate",
            "--services",
            "5",
            "--factors",
            "1",
            "--measure",
            "--runs",
            "1",
        ])
        .output()
        .expect("herald runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("deleted stale herald-sim-*"),
        "the sweep says what it did"
    );
    assert!(
        support::namespaces_of(child.id()).is_empty(),
        "{ns} not swept"
    );
}
