//! `herald simulate --measure` as a person runs it: at sizes 4× apart, every measured proxy mode's
//! full sync takes longer at the larger size (medians of 3), and no network namespace is left.

#[path = "simulate_support.rs"]
mod support;

use serde_json::Value;

#[test]
fn measured_sync_times_grow_with_the_services_and_no_namespace_is_left_behind() {
    if !support::root_or_skip() || support::netfilter_tools().is_none() {
        return;
    }
    let out = support::herald()
        .args([
            "simulate",
            "--services",
            "50",
            "--factors",
            "1,4,16",
            "--measure",
            "--runs",
            "3",
        ])
        // Every size measured: no mode left to the model for time.
        .args([
            "--budget",
            "1000",
            "--slow-after",
            "100",
            "--output",
            "json",
        ])
        .output()
        .expect("herald runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let mut curve: Vec<&Value> = report["curve"].as_array().expect("curve").iter().collect();
    curve.sort_by_key(|p| p["sizes"]["services"].as_u64());
    let services: Vec<u64> = curve
        .iter()
        .map(|p| p["sizes"]["services"].as_u64().expect("n"))
        .collect();
    assert_eq!(services, [50, 200, 800]);
    for backend in ["iptables-legacy", "iptables-nft", "nftables"] {
        let times: Vec<f64> = curve
            .iter()
            .map(|p| {
                let t = p["timings"]
                    .as_array()
                    .expect("timings")
                    .iter()
                    .find(|t| t["backend"] == backend)
                    .expect("every mode at every size");
                assert_eq!(t["source"], "measured", "{backend} at {}", p["label"]);
                t["full_s"].as_f64().expect("seconds")
            })
            .collect();
        assert!(
            times.windows(2).all(|w| w[0] < w[1]),
            "{backend}: full sync times {times:?} at {services:?} Services"
        );
    }
    assert!(
        report["timing"]
            .as_str()
            .expect("timing")
            .contains("measured")
    );
    // Every namespace of the run is gone (the child's pid is not known here: none of any herald
    // that has exited may remain, and the sweep would report them).
    let left: Vec<String> = herald_simulate::netns::list()
        .expect("ip netns list")
        .into_iter()
        .filter(|n| n.starts_with("herald-sim-"))
        .filter(|n| {
            let pid = n
                .trim_start_matches("herald-sim-")
                .split('-')
                .next()
                .unwrap_or_default();
            !std::path::Path::new("/proc").join(pid).exists()
        })
        .collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}
