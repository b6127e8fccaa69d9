//! Target groups as herald keeps them between responses: interned strings in shared, hash-consed
//! label blocks, encoded to HTTP SD JSON only when a body is cut.
//!
//! Why: pre-encoded JSON per target (what herald kept before) costs ~1.5–5 KiB a target, because every
//! target repeats its pod's labels and annotations and every label name is ~40 bytes. Here a target
//! is its address and a few references to blocks; the blocks a pod contributes (its own labels, its
//! node's) are built once and shared by the pod job's group and every endpoint target that resolves to
//! that pod, and every string is held once. Memory: `bench/RESULTS.md`, "discovery cost".
//!
//! NB: blocks are split by label family (pod, node, the rest) so that the same pod or node yields
//! byte-equal blocks whichever role built them; equal blocks are then one allocation.

//!
//! The strings and blocks themselves are interned in `interner`.

use std::borrow::Cow;
use std::sync::Arc;

use herald_core::{JobRelabel, LabelSet, SharedGroup, TargetGroup};

use crate::interner::*;
pub use crate::interner::{Interner, Recent};

/// Pods' interned blocks by the address of their shared labels (`SharedTarget::pod`), kept across
/// the groups one build worker makes from a chunk of work: a pod's labels come once with the pod
/// role's group and once with each slice listing the pod, as the same `Arc` each time
/// (`Lookup::memo_pod_labels`), and are interned once. Each entry holds its labels, so an address is
/// not reused while it is here.
#[derive(Debug, Default)]
pub struct PodBlocks(std::collections::HashMap<usize, (Arc<LabelSet>, Families)>);

/// One target: its address and its own labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    address: Address,
    blocks: Box<[Block]>,
    /// The target's container id, when it has one of the packed shape (its label is then in no
    /// block).
    id: Option<Id>,
}

impl Target {
    /// `__address__`, written into `buf`.
    pub fn address<'b>(&self, buf: &'b mut String) -> &'b str {
        buf.clear();
        buf.push_str(&self.address.host);
        if let Some(port) = self.address.port {
            buf.push(':');
            buf.push_str(itoa::Buffer::new().format(port));
        }
        buf
    }
}

/// `__address__` as its host and port. NB: most addresses are a pod IP (interned anyway, as a label
/// value) and a port; the joined string would be one more interned string per target (~30 MB at
/// `k8s-limits`). Only a port in canonical decimal is split off, so the bytes written back are the
/// bytes given, whatever the address means (`fd00::1` is kept as host `fd00:` and port 1).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Address {
    host: Sym,
    port: Option<u16>,
}

impl Address {
    fn of(address: &str, interner: &Interner) -> Address {
        let split = address.rsplit_once(':').and_then(|(host, port)| {
            let canonical = !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (port == "0" || !port.starts_with('0'));
            canonical
                .then(|| port.parse::<u16>().ok())
                .flatten()
                .map(|port| (host, port))
        });
        match split {
            Some((host, port)) => Address {
                host: interner.sym(host),
                port: Some(port),
            },
            None => Address {
                host: interner.sym(address),
                port: None,
            },
        }
    }
}

/// One object's target group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Group {
    labels: Box<[Block]>,
    targets: Box<[Target]>,
}

impl Group {
    /// The compact form of `group`. Targets without `__address__` are left out, as Prometheus (and
    /// `herald_core::http_sd_entries`) leave them out.
    pub fn of(group: &TargetGroup, interner: &Interner) -> Group {
        Group::of_with(group, interner, &mut Recent::none())
    }

    /// `of`, with runs of labels met in earlier groups taken from `recent`.
    pub fn of_with(group: &TargetGroup, interner: &Interner, recent: &mut Recent) -> Group {
        let labels = interner.blocks(&group.labels, None, recent);
        let targets = group
            .targets
            .iter()
            .filter_map(|t| {
                let address = Address::of(t.get(ADDRESS)?, interner);
                let mut id = None;
                let blocks = interner.family_blocks(t, Some(ADDRESS), Some(&mut id), recent);
                Some(Target {
                    address,
                    blocks: blocks.into_iter().flatten().collect(),
                    id,
                })
            })
            .collect();
        Group { labels, targets }
    }

    /// The compact form of a group whose targets share their pod's labels: each pod's blocks are
    /// interned once, not once per target (a pod behind a slice is a target per port, and one per
    /// container port the slice does not list). Equal to `Group::of(&group.flatten())`.
    pub fn of_shared(group: &SharedGroup, interner: &Interner) -> Group {
        Group::of_shared_with(
            group,
            interner,
            &mut PodBlocks::default(),
            &mut Recent::none(),
        )
    }

    /// `of_shared`, with the blocks of pods met in earlier groups taken from `pods`, and runs of
    /// labels met in earlier groups from `recent`.
    pub fn of_shared_with(
        group: &SharedGroup,
        interner: &Interner,
        pods: &mut PodBlocks,
        recent: &mut Recent,
    ) -> Group {
        let labels = interner.blocks(&group.labels, None, recent);
        let targets = group
            .targets
            .iter()
            .filter_map(|t| {
                let address = Address::of(t.own.get(ADDRESS)?, interner);
                let mut id = None;
                let mut families =
                    interner.family_blocks(&t.own, Some(ADDRESS), Some(&mut id), recent);
                if let Some(pod) = &t.pod {
                    // The pod's labels win over the target's own (`merge`), a container id too.
                    if id.is_some() && pod.contains_key(CONTAINER_ID) {
                        id = None;
                    }
                    let blocks = pods
                        .0
                        .entry(Arc::as_ptr(pod) as usize)
                        .or_insert_with(|| {
                            (
                                pod.clone(),
                                interner.family_blocks(pod, Some(ADDRESS), None, recent),
                            )
                        })
                        .1
                        .clone();
                    for (mine, theirs) in families.iter_mut().zip(blocks) {
                        *mine = match (mine.take(), theirs) {
                            (Some(a), Some(b)) => Some(interner.merge(&a, &b)),
                            (a, b) => a.or(b),
                        };
                    }
                }
                Some(Target {
                    address,
                    blocks: families.into_iter().flatten().collect(),
                    id,
                })
            })
            .collect();
        Group { labels, targets }
    }

    pub fn targets(&self) -> usize {
        self.targets.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Target> {
        self.targets.iter()
    }

    /// Writes `{"targets":["ADDRESS"],"labels":{...}}` for `target` of this group: the group's labels
    /// overlaid by the target's (the target wins), names in byte order — byte for byte what
    /// `herald_core::encode_http_sd` writes. `scratch` is reused between calls.
    pub fn write_entry<'a>(
        &'a self,
        target: &'a Target,
        out: &mut Vec<u8>,
        scratch: &mut Vec<(&'a str, Value<'a>, bool)>,
    ) {
        scratch.clear();
        for b in self.labels.iter() {
            scratch.extend(b.pairs().iter().map(|(k, v)| (&**k, Value::Text(v), false)));
        }
        for b in target.blocks.iter() {
            scratch.extend(b.pairs().iter().map(|(k, v)| (&**k, Value::Text(v), true)));
        }
        if let Some(id) = &target.id {
            scratch.push((CONTAINER_ID, Value::Id(id), true));
        }
        // A target's label sorts after the group's of the same name, and the last of equal names is
        // the one written.
        scratch.sort_unstable_by(|a, b| a.0.cmp(b.0).then(a.2.cmp(&b.2)));
        out.extend_from_slice(br#"{"targets":["#);
        write_address(out, &target.address);
        out.extend_from_slice(br#"],"labels":{"#);
        let mut first = true;
        for (i, (k, v, _)) in scratch.iter().enumerate() {
            if scratch.get(i + 1).is_some_and(|next| next.0 == *k) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            write_str(out, k);
            out.push(b':');
            match v {
                Value::Text(v) => write_str(out, v),
                Value::Id(id) => id.write_json(out),
            }
        }
        out.extend_from_slice(b"}}");
    }
}

/// A label's value as `Group::write_entry` gathers it: text, or a packed container id written out
/// as its text.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Text(&'a str),
    Id(&'a PackedId),
}

impl Group {
    /// `target` of this group after the job's relabeling (see `herald_core::JobRelabel`): its final
    /// address, and its served labels left in `labels` (cleared first); `None` when it is dropped.
    /// The labels are the same group-then-target overlay `write_entry` writes, so a job's relabeled
    /// body is what herald-core's reference path gives for the same objects.
    pub fn relabel(
        &self,
        target: &Target,
        relabel: &JobRelabel,
        labels: &mut LabelSet,
    ) -> Option<String> {
        self.discovered(target, labels);
        relabel.apply(labels)
    }

    /// `target`'s discovered labels with its `__address__`, left in `labels` (cleared first): the
    /// same group-then-target overlay `write_entry` writes.
    pub fn discovered(&self, target: &Target, labels: &mut LabelSet) {
        labels.clear();
        for b in self.labels.iter().chain(target.blocks.iter()) {
            labels.extend(
                b.pairs()
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string())),
            );
        }
        if let Some(id) = &target.id {
            labels.insert(CONTAINER_ID.to_string(), id.to_string());
        }
        let mut address = String::new();
        target.address(&mut address);
        labels.insert(herald_core::labels::ADDRESS.to_string(), address);
    }

    /// The value of the group's own label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .flat_map(|b| b.pairs().iter())
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| &**v)
    }
}

impl Group {
    /// Whether some target of this group can survive `relabel` (see `JobRelabel::group_may_keep`):
    /// false only when the group's own labels already decide that every target is dropped.
    pub fn may_keep(&self, relabel: &JobRelabel) -> bool {
        // A label's value on one target: the last of its own blocks that has it, else the group's
        // (the overlay `write_entry` writes).
        fn find<'b>(blocks: &'b [Block], name: &str) -> Option<Cow<'b, str>> {
            let mut found = None;
            for b in blocks {
                if let Some((_, v)) = b.pairs().iter().rev().find(|(k, _)| &**k == name) {
                    found = Some(Cow::Borrowed(&**v));
                }
            }
            found
        }
        // A target's own label: its packed container id, else the last of its blocks that has it.
        fn own<'b>(t: &'b Target, name: &str) -> Option<Cow<'b, str>> {
            match &t.id {
                Some(id) if name == CONTAINER_ID => Some(Cow::Owned(id.to_string())),
                _ => find(&t.blocks, name),
            }
        }
        relabel.group_may_keep(|name| {
            let group = find(&self.labels, name);
            let mut values = self.iter().map(|t| own(t, name).or_else(|| group.clone()));
            let first = values.next().unwrap_or_else(|| group.clone());
            if values.all(|v| v == first) {
                Ok(first.map(Cow::into_owned))
            } else {
                Err(())
            }
        })
    }
}

/// `{"targets":["ADDRESS"],"labels":{...}}` with the labels in name order: the entry
/// `herald_core::encode_http_sd` writes for them.
pub fn write_labeled_entry(out: &mut Vec<u8>, address: &str, labels: &LabelSet) {
    out.extend_from_slice(br#"{"targets":["#);
    write_str(out, address);
    out.extend_from_slice(br#"],"labels":{"#);
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, k);
        out.push(b':');
        write_str(out, v);
    }
    out.extend_from_slice(b"}}");
}

/// An address as a JSON string: its host, escaped as any string, and its port.
fn write_address(out: &mut Vec<u8>, address: &Address) {
    let Some(port) = address.port else {
        return write_str(out, &address.host);
    };
    write_str(out, &address.host);
    out.pop(); // the closing quote: the port goes inside the string
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(port).as_bytes());
    out.push(b'"');
}

/// A JSON string. NB: most label names and values need no escaping, so they are copied as they are;
/// the rest go through serde_json, which escapes as `encode_http_sd` does.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, s).expect("writing a string to a Vec cannot fail");
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, Hash};

    use herald_core::{encode_http_sd, http_sd_entries};

    use super::*;

    fn hash_of<T: Hash>(t: &T) -> u64 {
        foldhash::fast::FixedState::default().hash_one(t)
    }

    fn ls(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn encode(group: &Group) -> Vec<u8> {
        let mut out = vec![b'['];
        let mut scratch = Vec::new();
        for (i, t) in group.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            group.write_entry(t, &mut out, &mut scratch);
        }
        out.push(b']');
        out
    }

    #[test]
    fn entries_are_byte_equal_to_herald_core_s_encoding() {
        let group = TargetGroup {
            source: "x".into(),
            targets: vec![
                ls(&[
                    ("__address__", "127.0.0.2:80"),
                    ("b", "target"),
                    ("d", "only \"t\""),
                    ("__meta_kubernetes_pod_name", "p"),
                ]),
                ls(&[("__address__", "[::1]:80"), ("a", "t-a"), ("z", "\u{e9}\n")]),
                ls(&[("no", "address")]),
                ls(&[("__address__", "127.0.0.3:80")]),
            ],
            labels: ls(&[
                ("a", "g-a"),
                ("b", "g-b"),
                ("c", "g\\c"),
                ("__meta_kubernetes_node_name", "n"),
                ("__meta_kubernetes_pod_name", "group"),
            ]),
        };
        let interner = Interner::default();
        let compact = Group::of(&group, &interner);
        assert_eq!(compact.targets(), 3);
        assert_eq!(encode(&compact), encode_http_sd(&http_sd_entries(&group)));
    }

    fn pod(name: &str, ip: &str) -> [(&'static str, String); 4] {
        [
            ("__meta_kubernetes_pod_name", name.to_string()),
            ("__meta_kubernetes_pod_ip", ip.to_string()),
            ("__meta_kubernetes_pod_label_app", "web".to_string()),
            (
                "__meta_kubernetes_pod_container_id",
                format!("containerd://{name}"),
            ),
        ]
    }

    fn pod_group(name: &str, ip: &str, interner: &Interner) -> Group {
        let mut labels: LabelSet = pod(name, ip)[..3]
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        labels.insert("__meta_kubernetes_namespace".into(), "default".into());
        let mut target: LabelSet = pod(name, ip)[3..]
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        target.insert("__address__".into(), format!("{ip}:80"));
        target.insert("__meta_kubernetes_pod_container_name".into(), "main".into());
        Group::of(
            &TargetGroup {
                source: "pod".into(),
                targets: vec![target],
                labels,
            },
            interner,
        )
    }

    fn block_with<'a>(blocks: &'a [Block], key: &str) -> &'a Block {
        blocks
            .iter()
            .find(|b| b.pairs().iter().any(|(k, _)| &**k == key))
            .expect("a block holds the label")
    }

    #[test]
    fn a_pod_s_labels_are_one_block_whichever_group_carries_them() {
        let interner = Interner::default();
        let a = pod_group("web-1", "127.16.0.1", &interner);
        let mut as_target: LabelSet = pod("web-1", "127.16.0.1")[..3]
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        as_target.insert("__address__".into(), "127.16.0.1:80".into());
        as_target.insert("__meta_kubernetes_endpointslice_port".into(), "80".into());
        let b = Group::of(
            &TargetGroup {
                source: "slice".into(),
                targets: vec![as_target],
                labels: LabelSet::new(),
            },
            &interner,
        );
        for key in [
            "__meta_kubernetes_pod_name",
            "__meta_kubernetes_pod_label_app",
        ] {
            let in_pod_job = block_with(&a.labels, key);
            let in_slice = block_with(&b.targets[0].blocks, key);
            assert!(in_pod_job.ptr_eq(in_slice), "{key}");
            assert_eq!(hash_of(in_pod_job), hash_of(in_slice));
        }
        assert!(Sym::ptr_eq(
            &a.targets[0].address.host,
            &b.targets[0].address.host
        ));
    }

    #[test]
    fn addresses_are_written_back_byte_for_byte_whatever_their_shape() {
        let interner = Interner::default();
        for address in [
            "127.16.0.1:8080",
            "[fd00::1]:9090",
            "fd00::1",
            "127.16.0.1",
            "web.example:0",
            "host:080",
            "host:",
            "host:65536",
            "host:12a",
            ":9",
            "we\"ird:1",
            "",
        ] {
            let a = Address::of(address, &interner);
            let mut out = Vec::new();
            write_address(&mut out, &a);
            assert_eq!(
                out,
                serde_json::to_vec(address).expect("json"),
                "{address:?}"
            );
            let t = Target {
                address: a,
                blocks: Box::new([]),
                id: None,
            };
            assert_eq!(t.address(&mut String::new()), address);
        }
        let a = Address::of("127.16.0.1:8080", &interner);
        assert_eq!(a.port, Some(8080));
        assert!(
            Sym::ptr_eq(&a.host, &interner.sym("127.16.0.1")),
            "the host is the interned IP"
        );
    }

    #[test]
    fn replicas_share_every_block_but_the_labels_unique_to_each_pod_and_target() {
        let interner = Interner::default();
        let a = pod_group("web-1", "127.16.0.1", &interner);
        let b = pod_group("web-2", "127.16.0.2", &interner);
        let shared = |key: &str, blocks: fn(&Group) -> &[Block]| {
            block_with(blocks(&a), key).ptr_eq(block_with(blocks(&b), key))
        };
        let group_blocks: fn(&Group) -> &[Block] = |g| &g.labels;
        let target_blocks: fn(&Group) -> &[Block] = |g| &g.targets[0].blocks;
        assert!(shared("__meta_kubernetes_pod_label_app", group_blocks));
        assert!(shared("__meta_kubernetes_namespace", group_blocks));
        assert!(shared(
            "__meta_kubernetes_pod_container_name",
            target_blocks
        ));
        assert!(!shared("__meta_kubernetes_pod_name", group_blocks));
        assert!(!shared("__meta_kubernetes_pod_container_id", target_blocks));
    }

    #[test]
    fn a_group_sharing_pod_labels_compacts_as_its_flattened_form_with_each_pod_interned_once() {
        use herald_core::{SharedGroup, SharedTarget};
        let web1 = Arc::new(ls(&[
            ("__meta_kubernetes_pod_name", "web-1"),
            ("__meta_kubernetes_pod_label_app", "web"),
        ]));
        let own = |addr: &str, port: &str| {
            ls(&[
                ("__address__", addr),
                ("__meta_kubernetes_endpointslice_port", port),
                ("__meta_kubernetes_pod_container_name", "main"),
            ])
        };
        let group = SharedGroup {
            source: "endpointslice/default/web".into(),
            targets: vec![
                SharedTarget {
                    own: own("127.16.0.1:80", "80"),
                    pod: Some(web1.clone()),
                },
                SharedTarget {
                    own: own("127.16.0.1:81", "81"),
                    pod: Some(web1),
                },
                SharedTarget {
                    own: own("127.16.0.9:80", "80"),
                    pod: None,
                },
            ],
            labels: ls(&[("__meta_kubernetes_namespace", "default")]),
        };
        let interner = Interner::default();
        let shared = Group::of_shared(&group, &interner);
        let flat = Group::of(&group.clone().flatten(), &interner);
        assert_eq!(shared, flat);
        assert_eq!(encode(&shared), encode(&flat));
        let pod_block =
            |t: &Target| block_with(&t.blocks, "__meta_kubernetes_pod_label_app").clone();
        assert!(pod_block(&shared.targets[0]).ptr_eq(&pod_block(&shared.targets[1])));
    }

    /// Groups built through a worker's recent blocks are the groups built without them, block for
    /// block the same allocations, also when the table is small enough for runs to collide and evict
    /// each other; and a replica's shared runs come from the table.
    #[test]
    fn recent_blocks_give_the_blocks_interning_gives() {
        let interner = Interner::default();
        let group = |i: usize| {
            let app = format!("app-{}", i % 7);
            TargetGroup {
                source: format!("pod/{i}"),
                targets: vec![
                    ls(&[
                        (
                            "__address__",
                            &format!("127.16.{}.{}:80", i / 200, i % 200 + 1),
                        ),
                        ("__meta_kubernetes_pod_container_name", "main"),
                        ("__meta_kubernetes_pod_container_port_number", "80"),
                        ("__meta_kubernetes_pod_container_id", &format!("cri://{i}")),
                    ]),
                    ls(&[
                        (
                            "__address__",
                            &format!("127.16.{}.{}:9090", i / 200, i % 200 + 1),
                        ),
                        ("__meta_kubernetes_pod_container_name", "metrics"),
                        (
                            "__meta_kubernetes_pod_container_port_number",
                            &(9090 + i % 3).to_string(),
                        ),
                    ]),
                ],
                labels: ls(&[
                    ("__meta_kubernetes_namespace", "default"),
                    ("__meta_kubernetes_pod_name", &format!("{app}-{i}")),
                    ("__meta_kubernetes_pod_label_app", &app),
                    ("__meta_kubernetes_pod_annotation_a", "x"),
                    ("__meta_kubernetes_node_name", &format!("n{}", i % 3)),
                ]),
            }
        };
        for slots in [16, Recent::SLOTS] {
            let mut recent = Recent::with_slots(slots);
            for i in 0..500 {
                let g = group(i);
                let with = Group::of_with(&g, &interner, &mut recent);
                let without = Group::of(&g, &interner);
                assert_eq!(with, without, "group {i}, {slots} slots");
                let blocks = |g: &Group| -> Vec<Block> {
                    g.labels
                        .iter()
                        .chain(g.targets.iter().flat_map(|t| t.blocks.iter()))
                        .cloned()
                        .collect()
                };
                for (a, b) in blocks(&with).iter().zip(blocks(&without).iter()) {
                    assert!(a.ptr_eq(b), "group {i}, {slots} slots: {:?}", a.pairs());
                }
                for (a, b) in with.targets.iter().zip(without.targets.iter()) {
                    assert!(Sym::ptr_eq(&a.address.host, &b.address.host));
                }
            }
        }
        // A replica's pod-wide labels (app, annotation) are found, not interned again.
        let mut recent = Recent::with_slots(Recent::SLOTS);
        let a = Group::of_with(&group(0), &interner, &mut recent);
        let run = [
            ("__meta_kubernetes_pod_annotation_a", "x"),
            ("__meta_kubernetes_pod_label_app", "app-0"),
        ];
        let found = recent.get(recent.hash(&run), &run).expect("in the table");
        assert!(found.ptr_eq(block_with(&a.labels, "__meta_kubernetes_pod_label_app")));
        // Text that differs only in where a label's name ends is another run.
        let other = [
            ("__meta_kubernetes_pod_annotation_ax", ""),
            ("__meta_kubernetes_pod_label_app", "app-0"),
        ];
        assert!(recent.get(recent.hash(&other), &other).is_none());
    }

    const HEX64: &str = "35b475c771e15651b7d0a9afeb04569ae30ba41f2c35017d7b7f2dfb4ecb4c64";

    /// Container ids of the runtimes' shape are held packed and out of every block; every other
    /// shape stays a label; and either way the entries are herald-core's bytes and the discovered
    /// labels the ones given.
    #[test]
    fn container_ids_are_packed_only_in_the_runtimes_shape_and_written_back_as_given() {
        let packed = [
            format!("containerd://{HEX64}"),
            format!("docker://{HEX64}"),
            format!("cri-o://{HEX64}"),
            format!("containerd://{}", "0".repeat(64)),
        ];
        let kept = [
            format!("containerd://{}", HEX64.to_uppercase()),
            format!("containerd://{}", &HEX64[1..]),
            format!("containerd://{HEX64}0"),
            format!("containerd://{}g", &HEX64[1..]),
            format!("cri://{HEX64}"),
            format!("containerd:/{HEX64}"),
            format!("containerd://{}\"u{{e9}}", &HEX64[2..]),
            String::new(),
            "containerd://".to_string(),
        ];
        let interner = Interner::default();
        for (ids, packs) in [(&packed[..], true), (&kept[..], false)] {
            let targets: Vec<LabelSet> = ids
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    ls(&[
                        ("__address__", &format!("127.16.0.{}:80", i + 1)),
                        (CONTAINER_ID, id),
                        ("__meta_kubernetes_pod_container_name", "main"),
                        ("__meta_kubernetes_pod_container_port_number", "80"),
                    ])
                })
                .collect();
            let group = TargetGroup {
                source: "pod/x".into(),
                targets: targets.clone(),
                labels: ls(&[("__meta_kubernetes_namespace", "default")]),
            };
            let compact = Group::of(&group, &interner);
            assert_eq!(
                String::from_utf8(encode(&compact)).expect("utf-8"),
                String::from_utf8(encode_http_sd(&http_sd_entries(&group))).expect("utf-8")
            );
            for ((t, given), id) in compact.targets.iter().zip(&targets).zip(ids) {
                assert_eq!(t.id.is_some(), packs, "{id:?}");
                let in_blocks = t
                    .blocks
                    .iter()
                    .any(|b| b.pairs().iter().any(|(k, _)| &**k == CONTAINER_ID));
                assert_eq!(in_blocks, !packs, "{id:?}");
                let mut labels = LabelSet::new();
                compact.discovered(t, &mut labels);
                let mut want = group.labels.clone();
                want.extend(given.clone());
                assert_eq!(labels, want, "{id:?}");
            }
        }
    }

    /// A group's targets are judged by relabeling on their container id as written, packed or not.
    #[test]
    fn relabeling_sees_a_packed_container_id_as_its_text() {
        let interner = Interner::default();
        let id = format!("containerd://{HEX64}");
        let group = Group::of(
            &TargetGroup {
                source: "pod/x".into(),
                targets: vec![ls(&[("__address__", "127.16.0.1:80"), (CONTAINER_ID, &id)])],
                labels: LabelSet::new(),
            },
            &interner,
        );
        assert!(group.targets[0].id.is_some());
        let keep = |regex: &str| {
            let rules: Vec<herald_core::RelabelConfig> = serde_yaml::from_str(&format!(
                "- {{source_labels: [{CONTAINER_ID}], regex: '{regex}', action: keep}}\n"
            ))
            .expect("rules");
            JobRelabel::new(rules, false).expect("valid")
        };
        let kept = keep("containerd://35b4.*");
        assert!(group.may_keep(&kept));
        let mut labels = LabelSet::new();
        assert!(
            group
                .relabel(&group.targets[0], &kept, &mut labels)
                .is_some()
        );
        let dropped = keep("docker://.*");
        assert!(!group.may_keep(&dropped));
        assert!(
            group
                .relabel(&group.targets[0], &dropped, &mut labels)
                .is_none()
        );
    }

    /// The targets of one container (a target per port, in the pod job and in its slice's) hold one
    /// packed id; a pod's shared labels win over a target's own id, as `merge` has them win; and a
    /// sweep drops the ids nothing holds.
    #[test]
    fn a_container_s_targets_share_one_packed_id_and_sweeping_drops_unused_ones() {
        use herald_core::{SharedGroup, SharedTarget};
        let mut interner = Interner::default();
        let id = format!("containerd://{HEX64}");
        let target = |port: &str| {
            ls(&[
                ("__address__", &format!("127.16.0.1:{port}")),
                (CONTAINER_ID, &id),
                ("__meta_kubernetes_pod_container_port_number", port),
            ])
        };
        let pod_job = Group::of(
            &TargetGroup {
                source: "pod/x".into(),
                targets: vec![target("80"), target("81")],
                labels: LabelSet::new(),
            },
            &interner,
        );
        let shared = |pod: LabelSet| SharedGroup {
            source: "endpointslice/default/web".into(),
            targets: vec![SharedTarget {
                own: target("80"),
                pod: Some(Arc::new(pod)),
            }],
            labels: LabelSet::new(),
        };
        let plain = shared(ls(&[("__meta_kubernetes_pod_name", "web-1")]));
        let slice = Group::of_shared(&plain, &interner);
        let ids: Vec<Id> = pod_job
            .targets
            .iter()
            .chain(&slice.targets)
            .map(|t| t.id.clone().expect("packed"))
            .collect();
        assert!(ids.iter().all(|i| Id::ptr_eq(i, &ids[0])));
        assert_eq!(
            encode(&slice),
            encode(&Group::of(&plain.flatten(), &interner))
        );
        // The pod's labels carrying a container id of their own: theirs is written.
        let other = format!("docker://{HEX64}");
        let overridden = shared(ls(&[
            ("__meta_kubernetes_pod_name", "web-1"),
            (CONTAINER_ID, &other),
        ]));
        let g = Group::of_shared(&overridden, &interner);
        assert!(g.targets[0].id.is_none());
        assert_eq!(
            encode(&g),
            encode(&Group::of(&overridden.flatten(), &interner))
        );
        assert!(
            String::from_utf8(encode(&g))
                .expect("utf-8")
                .contains(&other)
        );

        let (before, _) = interner.len();
        drop((pod_job, slice, ids, g));
        for i in 0..10_000 {
            interner.sym(&i.to_string());
        }
        interner.maybe_sweep();
        let (after, _) = interner.len();
        assert!(after < before, "{before} → {after}");
        let ids_left: usize = interner
            .ids
            .iter()
            .map(|s| s.lock().expect("lock").len())
            .sum();
        assert_eq!(ids_left, 0);
    }

    #[test]
    fn sweeping_drops_what_no_group_holds() {
        let mut interner = Interner::default();
        let mut groups = Vec::new();
        for i in 0..5000 {
            groups.push(Group::of(
                &TargetGroup {
                    source: String::new(),
                    targets: vec![ls(&[(
                        "__address__",
                        &format!("127.0.{}.{}:80", i / 250, i % 250),
                    )])],
                    labels: ls(&[("__meta_kubernetes_pod_name", &format!("p{i}"))]),
                },
                &interner,
            ));
        }
        let (syms, _) = interner.len();
        assert!(syms >= 10_000);
        groups.truncate(10);
        for _ in 0..4000 {
            interner.sym("x");
        }
        interner.maybe_sweep();
        let (syms, blocks) = interner.len();
        assert!(syms <= 21, "{syms} strings left");
        assert_eq!(blocks, 10);
    }
}
