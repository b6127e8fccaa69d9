//! herald's `consistent-hashing` placement against the OpenTelemetry target allocator's own ring
//! library: `peers/ringjudge` builds `github.com/buraksezer/consistent` v1.0.0 with the allocator's
//! config and XXH64 (open-telemetry/opentelemetry-operator
//! `cmd/otel-allocator/internal/allocation/consistent_hashing.go` at
//! be8944414a876f17fcdeb5a59b86b8866fb5c88e); for collector sets of 1 to 12 members (names as the
//! operator's StatefulSet and Deployment give them), every address lands on the same collector.

#[path = "peers/harness.rs"]
mod peers;

use std::io::Write as _;
use std::process::{Command, Stdio};

use herald_core::allocation::{Collector, Placement, Strategy};
use peers::golang;

/// Addresses as kubernetes_sd gives them: pod IPs with ports, IPv6, node names with ports.
fn addresses() -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..3000u32 {
        out.push(format!(
            "10.{}.{}.{}:{}",
            i % 7,
            (i / 256) % 256,
            i % 256,
            8000 + i % 5
        ));
    }
    for i in 0..200u32 {
        out.push(format!("[fd00::{i:x}]:9100"));
        out.push(format!("worker-{i}:10250"));
    }
    out
}

fn member_sets() -> Vec<Vec<String>> {
    let mut sets = Vec::new();
    for n in 1..=12 {
        sets.push((0..n).map(|i| format!("otel-collector-{i}")).collect());
    }
    // A Deployment's pod names (ReplicaSet hash + random suffix).
    sets.push(
        [
            "otel-collector-7d9f8b6c5-x2k4p",
            "otel-collector-7d9f8b6c5-9qzrt",
            "otel-collector-7d9f8b6c5-mm8vn",
        ]
        .map(String::from)
        .to_vec(),
    );
    sets
}

#[test]
fn consistent_hashing_places_every_address_where_the_allocators_ring_does() {
    let Some(bin) = golang::find("ringjudge") else {
        return;
    };
    let keys = addresses();
    for members in member_sets() {
        let input = serde_json::json!({ "members": members, "keys": keys });
        let mut child = Command::new(&bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("ringjudge runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.to_string().as_bytes())
            .expect("write the input");
        let out = child.wait_with_output().expect("ringjudge ends");
        assert!(out.status.success(), "ringjudge for {members:?}");
        let theirs: Vec<String> = String::from_utf8(out.stdout)
            .expect("utf-8")
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(theirs.len(), keys.len());
        let placement = Placement::new(
            members
                .iter()
                .map(|name| Collector {
                    name: name.clone(),
                    node: None,
                })
                .collect(),
            Strategy::ConsistentHashing,
            None,
        );
        for (key, want) in keys.iter().zip(&theirs) {
            let ours = placement
                .place(key, None)
                .map(|i| placement.collectors()[i].name.as_str());
            assert_eq!(ours, Some(want.as_str()), "{key} among {members:?}");
        }
    }
}
