//! Micro-benchmark of the protobuf transcoder (`proto::Schema::encode`) on real objects: reads a
//! Kubernetes list as a server sent it (e.g. `curl -s $SERVER/api/v1/pods > pods.json`), then
//! encodes every item, as stored, `rounds` times and prints the time per object and the JSON and
//! protobuf throughput: wall time, and the thread's CPU time (`/proc/thread-self/schedstat`), which
//! other processes on a shared machine inflate less. Used for issue 21's before/after figures and
//! as a `perf record` target.
//!
//! Usage: proto_encode LIST.json [ROUNDS]   (cargo run --release -p kube-face --example proto_encode)

use std::time::Instant;

use kube_face::proto::schema;
use serde_json::value::RawValue;

#[derive(serde::Deserialize)]
struct List<'a> {
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct Type<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'a str,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: proto_encode LIST.json [ROUNDS]");
    let rounds: usize = args
        .next()
        .map_or(5, |r| r.parse().expect("ROUNDS is a number"));
    let text = std::fs::read_to_string(&path).expect("the list file reads");
    let list: List<'_> = serde_json::from_str(&text).expect("a Kubernetes list");
    let items: Vec<&[u8]> = list.items.iter().map(|i| i.get().as_bytes()).collect();
    let first: Type<'_> = serde_json::from_str(list.items.first().expect("items").get())
        .expect("items carry apiVersion and kind");
    let msg = schema()
        .kind(first.api_version, first.kind)
        .expect("a built-in kind");
    let json_bytes: usize = items.iter().map(|i| i.len()).sum();
    let mut proto_bytes = 0;
    let mut wall = Vec::with_capacity(rounds);
    let mut cpu = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let (t, c) = (Instant::now(), cpu_seconds());
        proto_bytes = 0;
        for item in &items {
            proto_bytes += std::hint::black_box(schema().encode(msg, item)).len();
        }
        wall.push(t.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - c);
    }
    let (wall, cpu) = (median(wall), median(cpu));
    println!(
        "{} {}: {} items, JSON {:.1} MB, protobuf {:.1} MB; medians of {rounds}: wall {:.1} ms, CPU {:.1} ms, {:.2} µs CPU/object, {:.0} MB/s of JSON per CPU second",
        first.api_version,
        first.kind,
        items.len(),
        json_bytes as f64 / 1e6,
        proto_bytes as f64 / 1e6,
        wall * 1e3,
        cpu * 1e3,
        cpu * 1e6 / items.len() as f64,
        json_bytes as f64 / cpu / 1e6,
    );
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// This thread's time on a CPU so far (the first field of schedstat, in nanoseconds).
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat reads");
    let ns: u64 = s
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("schedstat starts with nanoseconds on CPU");
    ns as f64 / 1e9
}
