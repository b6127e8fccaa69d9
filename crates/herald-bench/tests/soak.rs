//! The 60-second fault soak (issue 11): `herald-bench soak` against kube-sim and herald as processes,
//! churn at 100 writes/s and every fault of the rotation once (a fault every 8 s, so all seven fit in
//! 60 s), consumers on every job. Fails if herald ever served a partial snapshot or a malformed body,
//! or if, faults cleared, any job or shard it serves differs from herald-core over kube-sim's objects.
//! Nothing here asserts a duration or a rate.
//!
//! The checker it relies on is itself tested on truncated bodies
//! (`herald_bench::soak::tests::a_truncated_response_is_caught_as_partial_or_malformed`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`: where cargo put this crate's binaries, and herald's and kube-sim's when the
/// workspace was built.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_herald-bench"))
        .parent()
        .expect("binary directory")
        .to_path_buf()
}

/// The directory holding herald and kube-sim: next to herald-bench when the workspace was built, else
/// built into a target directory of its own (as `bench_quick.rs` does, and for the same reason: a
/// nested cargo on this test's own target directory could wait on the outer one's lock).
fn peers_dir(dir: &Path) -> PathBuf {
    if dir.join("herald").is_file() && dir.join("kube-sim").is_file() {
        return dir.to_path_buf();
    }
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    let target = dir.parent().expect("target directory").join("bench-quick");
    let status = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "herald", "-p", "kube-sim"])
        .args(if profile == "release" {
            &["--release"][..]
        } else {
            &[][..]
        })
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building herald and kube-sim");
    target.join(profile)
}

#[test]
fn sixty_second_soak_serves_no_partial_snapshot_and_ends_equal_to_kube_sim() {
    let dir = bin_dir();
    let peers = peers_dir(&dir);
    let out = tempfile::tempdir().expect("temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_herald-bench"))
        .args([
            "soak",
            "--soak-seconds",
            "60",
            "--soak-fault-every",
            "8",
            "--out",
        ])
        .arg(out.path())
        .arg("--bin-dir")
        .arg(&peers)
        .output()
        .expect("herald-bench soak starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let doc: serde_json::Value = match std::fs::read(out.path().join("soak.json")) {
        Ok(b) => serde_json::from_slice(&b).expect("soak.json is JSON"),
        Err(e) => panic!("the soak wrote no soak.json ({e}); it said:\n{stderr}"),
    };
    let d = &doc["data"];
    let r = &d["responses"];
    // The soak did what it is for: bodies were served and checked, churn was applied, every fault of
    // the rotation was injected, and compaction made herald relist.
    assert!(r["ok_200"].as_u64().is_some_and(|n| n > 0), "{r}");
    assert!(
        d["churn"]["applied"].as_u64().is_some_and(|n| n > 0),
        "{}",
        d["churn"]
    );
    for kind in [
        "close_watches",
        "compact (410)",
        "restart (503)",
        "restart (refused)",
        "429 burst",
        "500 burst",
        "slow watches",
    ] {
        assert!(
            d["faults_by_kind"][kind].as_u64().is_some_and(|n| n > 0),
            "fault {kind} never ran: {}",
            d["faults_by_kind"]
        );
    }
    assert!(
        d["faults"]
            .as_array()
            .is_some_and(|f| f.iter().all(|f| f["error"].is_null())),
        "a fault could not be injected: {}",
        d["faults"]
    );
    assert!(
        d["herald"]["upstream_relists"]
            .as_f64()
            .is_some_and(|n| n > 0.0),
        "{}",
        d["herald"]
    );
    // What the soak is there to find.
    assert_eq!(
        r["partial_snapshots"], 0,
        "herald served partial snapshots: {}",
        r["examples"]
    );
    assert_eq!(r["malformed"], 0, "malformed bodies: {}", r["examples"]);
    assert_eq!(
        d["final"]["equal"], true,
        "the final state differs from kube-sim's: {}",
        d["final"]
    );
    assert!(
        output.status.success(),
        "herald-bench soak failed: {}\n{stderr}",
        output.status
    );
}
