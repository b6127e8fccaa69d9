//! `bench/run --quick` runs the whole suite on the small preset into a temporary directory and writes
//! well-formed results: results.json with every section and no failed one, the RESULTS.md section
//! with every heading, the scaling SVG. It asserts nothing about any figure.
//!
//! vmagent is a real peer: under `CI=true` the test fails without it; elsewhere it runs without the
//! vmagent rows and says how to install it.

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

/// The directory holding herald and kube-sim: next to herald-bench when the workspace was built
/// (`cargo test --workspace` builds every package's binaries), else built into a target directory of
/// its own (a nested cargo on this test's own target directory could wait on the outer one's lock).
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

fn vmagent_installed() -> bool {
    Command::new("vmagent").arg("-version").output().is_ok()
}

#[test]
fn bench_run_quick_writes_every_section() {
    let has_vmagent = vmagent_installed();
    if !has_vmagent {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "vmagent is missing under CI=true (apt-get install victoria-metrics)"
        );
        eprintln!(
            "vmagent not found: the suite runs without its rows (install: apt-get install victoria-metrics)"
        );
    }
    let dir = bin_dir();
    let peers = peers_dir(&dir);
    let out = tempfile::tempdir().expect("temp dir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // bench/run with HERALD_BENCH_BIN_DIR runs this crate's herald-bench with herald and kube-sim
    // from --bin-dir (given after, it wins over the script's own).
    let status = Command::new(root.join("bench/run"))
        .args(["--quick", "--out"])
        .arg(out.path())
        .arg("--bin-dir")
        .arg(&peers)
        .env("HERALD_BENCH_BIN_DIR", &dir)
        .current_dir(&root)
        .status()
        .expect("bench/run starts");
    assert!(status.success(), "bench/run --quick failed: {status}");

    let doc: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.path().join("results.json")).expect("results.json written"),
    )
    .expect("results.json is JSON");
    assert!(doc["machine"]["nproc"].as_u64().is_some_and(|n| n > 0));
    for key in ["discovery", "control", "serving", "propagation"] {
        let s = &doc["sections"][key];
        assert!(s["error"].is_null(), "section {key} failed: {}", s["error"]);
        assert!(s["data"].is_object(), "section {key} has no data");
        assert_eq!(s["meta"]["quick"], true, "section {key}");
        assert!(s["meta"]["commit"].is_string(), "section {key}");
    }
    let points = doc["sections"]["discovery"]["data"]["points"]
        .as_array()
        .expect("discovery points");
    assert!(!points.is_empty());
    for p in points {
        assert!(p["herald"]["median"]["sync_seconds"].is_number(), "{p}");
        assert_eq!(
            p["vmagent"]["median"]["sync_seconds"].is_number(),
            has_vmagent,
            "{p}"
        );
    }
    // At the main scale herald also syncs by paged LISTs: the same targets as by streaming lists.
    let main = points
        .iter()
        .find(|p| p["herald_paged"]["median"]["sync_seconds"].is_number())
        .expect("a point with paged-LIST runs (the main scale)");
    assert!(
        main["herald"]["median"]["targets"].as_f64() > Some(0.0),
        "{main}"
    );
    assert_eq!(
        main["herald_paged"]["median"]["targets"], main["herald"]["median"]["targets"],
        "paged and streaming lists give the same targets: {main}"
    );
    for (key, rows) in [
        ("control", "rows"),
        ("serving", "rows"),
        ("serving", "ratios_herald_over_static"),
        ("propagation", "rows"),
    ] {
        assert!(
            doc["sections"][key]["data"][rows]
                .as_array()
                .is_some_and(|r| !r.is_empty()),
            "{key}.{rows} is empty"
        );
    }

    let md = std::fs::read_to_string(out.path().join("RESULTS.md")).expect("RESULTS.md written");
    for heading in [
        "### 1. Discovery cost versus a real peer",
        "### 2. Control-plane load, direct versus through herald",
        "### 3. Serving",
        "### 4. Propagation",
    ] {
        assert!(md.contains(heading), "RESULTS.md lacks {heading:?}:\n{md}");
    }
    assert!(md.contains("| herald, paged LIST |"), "{md}");
    assert!(!md.contains("Not run yet"), "{md}");
    let svg =
        std::fs::read_to_string(out.path().join("discovery-scaling.svg")).expect("SVG written");
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg:.200}"
    );
}

/// `bench/run --quick --only SECTION` into a temporary directory: results.json's section, which must
/// not have failed, and RESULTS.md.
fn run_quick_section(section: &str) -> (serde_json::Value, String) {
    let dir = bin_dir();
    let peers = peers_dir(&dir);
    let out = tempfile::tempdir().expect("temp dir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = Command::new(root.join("bench/run"))
        .args(["--quick", "--only", section, "--out"])
        .arg(out.path())
        .arg("--bin-dir")
        .arg(&peers)
        .env("HERALD_BENCH_BIN_DIR", &dir)
        .current_dir(&root)
        .status()
        .expect("bench/run starts");
    assert!(
        status.success(),
        "bench/run --quick --only {section} failed: {status}"
    );
    let doc: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.path().join("results.json")).expect("results.json written"),
    )
    .expect("results.json is JSON");
    let s = doc["sections"][section].clone();
    assert!(s["error"].is_null(), "the section failed: {}", s["error"]);
    let md = std::fs::read_to_string(out.path().join("RESULTS.md")).expect("RESULTS.md written");
    (s, md)
}

/// `bench/run --quick --only steady`: the steady-state section (issue 22) on the small preset, a few
/// seconds: consumers, watchers, markers and both processes measured; the figures are not judged.
#[test]
fn bench_run_quick_steady_state_writes_its_section() {
    let (s, md) = run_quick_section("steady");
    let d = &s["data"];
    assert!(
        d["yardstick"]["seconds"].as_f64().is_some_and(|t| t > 0.0),
        "{d}"
    );
    assert!(d["herald"]["after_sync"]["sync_seconds"].is_number(), "{d}");
    assert!(d["herald"]["steady"]["peak_rss_mib"].is_number(), "{d}");
    assert!(d["herald"]["steady"]["mean_cores"].is_number(), "{d}");
    let c = &d["consumers"];
    assert!(c["requests"].as_u64().is_some_and(|n| n > 0), "{c}");
    assert_eq!(c["failed"], 0, "{c}");
    assert!(c["identity_bytes"].as_u64().is_some_and(|n| n > 0), "{c}");
    assert!(c["gzip_bytes"].as_u64().is_some_and(|n| n > 0), "{c}");
    // Every marker write in the window reached a consumer's body.
    let st = &d["staleness"];
    assert!(st["writes"].as_u64().is_some_and(|n| n > 0), "{st}");
    assert_eq!(st["unseen"], 0, "{st}");
    assert!(
        d["herald"]["metrics"]["body_builds"]
            .as_f64()
            .is_some_and(|n| n > 0.0),
        "{d}"
    );
    assert!(
        d["kube_watchers"]["attached"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{d}"
    );
    assert!(md.contains("### 6. Steady state beside vmagent"), "{md}");
}

/// `bench/run --quick --only restart`: herald killed and restarted under 100 informers on the small
/// preset. Judged: every informer receives again, none gives up and herald syncs each kind once (a
/// restart that strands a client or relists is a fault, not a slow figure); the timings are not
/// judged.
#[test]
fn bench_run_quick_restart_resyncs_every_informer() {
    let (s, md) = run_quick_section("restart");
    let d = &s["data"];
    let st = &d["storm"];
    assert_eq!(st["resynced"], d["watchers"], "{st}");
    assert_eq!(st["gave_up"], 0, "{st}");
    assert!(st["ready_seconds"].is_number(), "{st}");
    assert!(st["herald"]["peak_rss_mib"].is_number(), "{st}");
    // The restarted herald synced every kind once (a streaming list or a LIST), no relist.
    assert_eq!(d["goal"]["one_list_per_kind"], true, "{st}");
    assert!(md.contains("### 7. A restart in the steady state"), "{md}");
}
