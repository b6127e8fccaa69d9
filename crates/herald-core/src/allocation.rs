//! Where the OpenTelemetry target allocator puts a target: which collector of a set scrapes it, under
//! its two strategies that herald serves, `consistent-hashing` (the default) and `per-node`.
//!
//! Reproduced from open-telemetry/opentelemetry-operator at commit
//! be8944414a876f17fcdeb5a59b86b8866fb5c88e (`cmd/otel-allocator/internal/allocation/
//! consistent_hashing.go`, `per_node.go`, `internal/target/target.go`), read, not copied:
//! - consistent-hashing places a target by its `__address__` (`Item.TargetURL`) on a
//!   `github.com/buraksezer/consistent` v1.0.0 ring (the version the operator's go.mod pins) with
//!   1061 partitions, 5 replicas per member, load factor 1.1, hashed with XXH64 (`cespare/xxhash`,
//!   seed 0), members named by the collector's name (its pod name);
//! - per-node places a target on the collector running on the target's node, read from
//!   `__meta_kubernetes_pod_node_name`, `__meta_kubernetes_node_name`,
//!   `__meta_kubernetes_endpoint_node_name`, else the EndpointSlice target name when its kind is
//!   `Node`; a target without a node goes to the fallback strategy when one is set, else nowhere.
//!
//! The ring (`Ring`) is the library's algorithm step for step, so a herald and an allocator given the
//! same collectors place every address on the same collector (checked against the Go library by
//! herald-server's `e2e_ta_ring` test, through `peers/ringjudge`).

use std::collections::HashMap;

/// Partitions of the ring (`consistent.Config.PartitionCount` in the allocator).
pub const PARTITION_COUNT: u64 = 1061;
/// Points per member on the ring (`ReplicationFactor`).
pub const REPLICATION_FACTOR: usize = 5;
/// How far above the average a member's partition count may go (`Load`).
pub const LOAD: f64 = 1.1;

/// The node labels the allocator reads, in its order (`nodeLabels` in `target.go`).
pub const NODE_LABELS: [&str; 3] = [
    "__meta_kubernetes_pod_node_name",
    "__meta_kubernetes_node_name",
    "__meta_kubernetes_endpoint_node_name",
];
const SLICE_TARGET_KIND: &str = "__meta_kubernetes_endpointslice_address_target_kind";
const SLICE_TARGET_NAME: &str = "__meta_kubernetes_endpointslice_address_target_name";

/// The allocator's hash: XXH64 with seed 0, as `cespare/xxhash.Sum64`.
pub fn xxhash64(bytes: &[u8]) -> u64 {
    twox_hash::XxHash64::oneshot(0, bytes)
}

/// An allocation strategy, by the allocator's names (and herald's own `rendezvous-hashing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// `consistent-hashing`: the allocator's ring, placement for placement. NB: its bounded load
    /// (no collector above 1.1 × the average partitions) cascades when membership changes: measured
    /// with the Go library, one collector joining 6, 7 or 8 moves 22–24 % of the targets, not 1/N.
    #[default]
    ConsistentHashing,
    /// `rendezvous-hashing` (herald's, not the allocator's): each target on the collector with the
    /// highest XXH64 of (collector, address) — a collector joining takes only the targets it now
    /// wins (1/N on average) and one leaving gives up only its own.
    RendezvousHashing,
    /// `per-node`: each target on the collector of its node (a DaemonSet of collectors).
    PerNode,
}

impl Strategy {
    /// The strategy named `name` (`consistent-hashing`, `per-node`).
    pub fn parse(name: &str) -> Option<Strategy> {
        match name {
            "consistent-hashing" => Some(Strategy::ConsistentHashing),
            "rendezvous-hashing" => Some(Strategy::RendezvousHashing),
            "per-node" => Some(Strategy::PerNode),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::ConsistentHashing => "consistent-hashing",
            Strategy::RendezvousHashing => "rendezvous-hashing",
            Strategy::PerNode => "per-node",
        }
    }
}

/// One collector: its name (the `collector_id` it asks with; under the allocator, its pod name) and
/// the node it runs on, which only `per-node` reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Collector {
    pub name: String,
    pub node: Option<String>,
}

/// `buraksezer/consistent` v1.0.0's ring over a set of members, its partitions distributed once:
/// `partitions[p]` is the member owning partition `p`.
#[derive(Debug, Clone)]
pub struct Ring {
    partitions: Vec<usize>,
}

impl Ring {
    /// The ring of `members` (their order does not matter; names are unique), or `None` without
    /// members (the library then owns no partition and the allocator assigns nothing).
    pub fn new(members: &[&str]) -> Option<Ring> {
        if members.is_empty() {
            return None;
        }
        // `add`: REPLICATION_FACTOR points per member, keyed "{i}:{name}" (`replicaKey`).
        let mut points: Vec<(u64, usize)> = Vec::with_capacity(members.len() * REPLICATION_FACTOR);
        for (m, name) in members.iter().enumerate() {
            for i in 0..REPLICATION_FACTOR {
                points.push((xxhash64(format!("{i}:{name}").as_bytes()), m));
            }
        }
        // NB: the library keeps duplicate hashes in its sorted set and lets the last member added win
        // the point; two 64-bit hashes colliding is not worth reproducing that order.
        points.sort_unstable();
        // `averageLoad`: ceil(partitions / members * load), in float64 as Go computes it.
        let average = (PARTITION_COUNT as f64 / members.len() as f64 * LOAD).ceil();
        let mut loads = vec![0f64; members.len()];
        let mut partitions = Vec::with_capacity(PARTITION_COUNT as usize);
        // `distributePartitions`: partition p starts at the first point >= hash(p as 8 bytes LE) and
        // walks on while the member there is full (`distributeWithLoad`).
        for p in 0..PARTITION_COUNT {
            let key = xxhash64(&p.to_le_bytes());
            let mut idx = points.partition_point(|&(h, _)| h < key);
            if idx >= points.len() {
                idx = 0;
            }
            // The members' capacity (members × ceil(average)) exceeds the partitions, so a full turn
            // always finds room: the library's "not enough room" panic cannot happen here.
            let owner = loop {
                let m = points[idx].1;
                if loads[m] + 1.0 <= average {
                    break m;
                }
                idx = (idx + 1) % points.len();
            };
            loads[owner] += 1.0;
            partitions.push(owner);
        }
        Some(Ring { partitions })
    }

    /// The index (into the members given to `new`) of the member owning `key` (`LocateKey`).
    pub fn locate(&self, key: &[u8]) -> usize {
        self.partitions[(xxhash64(key) % PARTITION_COUNT) as usize]
    }
}

/// The node a target runs on, as the allocator reads it from the target's labels
/// (`Item.GetNodeName`); `None` when it names none.
pub fn node_of<'a>(label: impl Fn(&str) -> Option<&'a str>) -> Option<&'a str> {
    for name in NODE_LABELS {
        if let Some(v) = label(name).filter(|v| !v.is_empty()) {
            return Some(v);
        }
    }
    if label(SLICE_TARGET_KIND) != Some("Node") {
        return None;
    }
    label(SLICE_TARGET_NAME).filter(|v| !v.is_empty())
}

/// A set of collectors ready to place targets: sorted by name, with the ring and the node index
/// built once per membership.
#[derive(Debug, Clone)]
pub struct Placement {
    collectors: Vec<Collector>,
    strategy: Strategy,
    fallback: Option<Strategy>,
    ring: Option<Ring>,
    by_node: HashMap<String, usize>,
}

impl Placement {
    /// `collectors` (duplicates by name dropped, the first kept) under `strategy`; `fallback` places
    /// the targets `per-node` finds no node for (the allocator's `allocation_fallback_strategy`).
    pub fn new(
        mut collectors: Vec<Collector>,
        strategy: Strategy,
        fallback: Option<Strategy>,
    ) -> Placement {
        collectors.sort();
        collectors.dedup_by(|a, b| a.name == b.name);
        let names: Vec<&str> = collectors.iter().map(|c| c.name.as_str()).collect();
        let ring = Ring::new(&names);
        let mut by_node = HashMap::new();
        // NB: two collectors on one node: the allocator keeps whichever its map iteration visits
        // last; here the first by name, so the choice is stable.
        for (i, c) in collectors.iter().enumerate() {
            if let Some(node) = c.node.as_deref().filter(|n| !n.is_empty()) {
                by_node.entry(node.to_string()).or_insert(i);
            }
        }
        Placement {
            collectors,
            strategy,
            fallback,
            ring,
            by_node,
        }
    }

    /// The collectors, sorted by name; `place` answers indexes into this.
    pub fn collectors(&self) -> &[Collector] {
        &self.collectors
    }

    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The collector index of `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.collectors
            .binary_search_by(|c| c.name.as_str().cmp(name))
            .ok()
    }

    /// The collector scraping the target at `address` on `node`, or `None` when none may (no
    /// collectors; `per-node` without a collector on that node and no fallback).
    pub fn place(&self, address: &str, node: Option<&str>) -> Option<usize> {
        self.place_with(self.strategy, address, node)
    }

    /// Highest random weight: the collector whose XXH64(name, 0xff, address) is largest (ties: the
    /// first by name). O(collectors) per target, paid once per snapshot generation.
    fn rendezvous(&self, address: &str) -> Option<usize> {
        let mut key = Vec::with_capacity(64);
        let mut best: Option<(u64, usize)> = None;
        for (i, c) in self.collectors.iter().enumerate() {
            key.clear();
            key.extend_from_slice(c.name.as_bytes());
            key.push(0xff);
            key.extend_from_slice(address.as_bytes());
            let w = xxhash64(&key);
            if best.is_none_or(|(b, _)| w > b) {
                best = Some((w, i));
            }
        }
        best.map(|(_, i)| i)
    }

    fn place_with(&self, strategy: Strategy, address: &str, node: Option<&str>) -> Option<usize> {
        match strategy {
            Strategy::ConsistentHashing => Some(self.ring.as_ref()?.locate(address.as_bytes())),
            Strategy::RendezvousHashing => self.rendezvous(address),
            Strategy::PerNode => match node.filter(|n| !n.is_empty()) {
                Some(n) => self.by_node.get(n).copied(),
                None => match self.fallback {
                    // per-node as its own fallback would place nothing either.
                    Some(s @ (Strategy::ConsistentHashing | Strategy::RendezvousHashing)) => {
                        self.place_with(s, address, None)
                    }
                    Some(Strategy::PerNode) | None => None,
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("collector-{i}")).collect()
    }

    fn mk_placement(n: usize) -> Placement {
        mk_with(n, Strategy::ConsistentHashing)
    }

    fn mk_with(n: usize, strategy: Strategy) -> Placement {
        let collectors = names(n)
            .into_iter()
            .map(|name| Collector { name, node: None })
            .collect();
        Placement::new(collectors, strategy, None)
    }

    /// The share of `targets` on a different collector (by name) under `a` and `b`.
    fn moved(a: &Placement, b: &Placement, targets: &[String]) -> f64 {
        let name =
            |p: &Placement, t: &str| p.place(t, None).map(|i| p.collectors()[i].name.clone());
        let n = targets.iter().filter(|t| name(a, t) != name(b, t)).count();
        n as f64 / targets.len() as f64
    }

    fn addresses(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("10.{}.{}.{}:8080", i / 65536, (i / 256) % 256, i % 256))
            .collect()
    }

    #[test]
    fn xxhash64_matches_the_reference_vectors() {
        // XXH64 seed 0 of "" and "a", from the xxHash reference (Cyan4973/xxHash, tests).
        assert_eq!(xxhash64(b""), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxhash64(b"a"), 0xD24E_C4F1_A98C_6E5B);
    }

    #[test]
    fn no_member_owns_more_partitions_than_the_load_bound() {
        for n in 1..12 {
            let ns = names(n);
            let refs: Vec<&str> = ns.iter().map(String::as_str).collect();
            let ring = Ring::new(&refs).expect("members");
            let mut loads = vec![0usize; n];
            for &p in &ring.partitions {
                loads[p] += 1;
            }
            let bound = (PARTITION_COUNT as f64 / n as f64 * LOAD).ceil() as usize;
            assert_eq!(loads.iter().sum::<usize>(), PARTITION_COUNT as usize);
            assert!(loads.iter().all(|&l| l <= bound), "{n} members: {loads:?}");
        }
    }

    #[test]
    fn rendezvous_moves_at_most_one_nth_plus_five_percent_when_a_collector_joins_or_leaves() {
        let targets = addresses(4000);
        for n in 1..=12usize {
            let (small, large) = (
                mk_with(n, Strategy::RendezvousHashing),
                mk_with(n + 1, Strategy::RendezvousHashing),
            );
            // Joining (n → n+1) and leaving (n+1 → n) move the same targets; N is the larger set.
            let share = moved(&small, &large, &targets);
            let bound = 1.0 / (n + 1) as f64 + 0.05;
            assert!(
                share <= bound,
                "{n}↔{} moved {share:.3} > {bound:.3}",
                n + 1
            );
            assert!(share > 0.0);
        }
    }

    #[test]
    fn the_allocator_ring_moves_what_the_go_library_moves() {
        // The allocator's own ring (buraksezer/consistent v1.0.0 with its config) over these
        // addresses, collectors "collector-0".."collector-{n-1}" → one more: how many of the 20000
        // targets the Go library moves (`LocateKey` before and after, go run over the same inputs,
        // 2026-11-26). The bounded load makes some exceed 1/N + 5 % (6→7: 22.6 %, 7→8: 22.5 %,
        // 8→9: 24.1 %): the allocator's behaviour, reproduced. Placement by placement the ring is
        // also compared with the Go library in herald-server's `e2e_ta_ring` test.
        let expected = [
            8838, 8483, 6374, 5713, 3977, 4523, 4490, 4825, 3255, 3532, 3694,
        ];
        let targets = addresses(20000);
        for (i, want) in expected.iter().enumerate() {
            let n = i + 1;
            let share = moved(&mk_placement(n), &mk_placement(n + 1), &targets);
            let count = (share * targets.len() as f64).round() as usize;
            assert_eq!(count, *want, "{n}→{} collectors", n + 1);
        }
    }

    #[test]
    fn membership_order_does_not_change_placement() {
        let a = mk_placement(4);
        let mut reversed: Vec<Collector> = a.collectors().to_vec();
        reversed.reverse();
        let b = Placement::new(reversed, Strategy::ConsistentHashing, None);
        for t in addresses(500) {
            assert_eq!(a.place(&t, None), b.place(&t, None));
        }
    }

    #[test]
    fn per_node_places_on_the_node_collector_and_falls_back_only_when_asked() {
        let collectors = vec![
            Collector {
                name: "b".into(),
                node: Some("n2".into()),
            },
            Collector {
                name: "a".into(),
                node: Some("n1".into()),
            },
        ];
        let p = Placement::new(collectors.clone(), Strategy::PerNode, None);
        assert_eq!(p.place("x:1", Some("n1")), p.index_of("a"));
        assert_eq!(p.place("x:1", Some("n2")), p.index_of("b"));
        assert_eq!(p.place("x:1", Some("n3")), None);
        assert_eq!(p.place("x:1", None), None);
        let f = Placement::new(
            collectors,
            Strategy::PerNode,
            Some(Strategy::ConsistentHashing),
        );
        assert!(f.place("x:1", None).is_some());
        assert_eq!(f.place("x:1", Some("n3")), None);
    }

    #[test]
    fn the_node_comes_from_the_first_node_label_then_a_node_slice_target() {
        let labels = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
        };
        assert_eq!(
            node_of(labels(&[
                ("__meta_kubernetes_endpoint_node_name", "e"),
                ("__meta_kubernetes_pod_node_name", "p"),
            ])),
            Some("p")
        );
        assert_eq!(
            node_of(labels(&[
                (SLICE_TARGET_KIND, "Node"),
                (SLICE_TARGET_NAME, "n7")
            ])),
            Some("n7")
        );
        assert_eq!(
            node_of(labels(&[
                (SLICE_TARGET_KIND, "Pod"),
                (SLICE_TARGET_NAME, "p")
            ])),
            None
        );
        assert_eq!(node_of(labels(&[])), None);
    }

    #[test]
    fn strategies_parse_by_the_allocator_names() {
        for s in [
            Strategy::ConsistentHashing,
            Strategy::RendezvousHashing,
            Strategy::PerNode,
        ] {
            assert_eq!(Strategy::parse(s.as_str()), Some(s));
        }
        assert_eq!(Strategy::parse("least-weighted"), None);
    }
}
