//! Encoded snapshots: one job (or one shard of it) at one generation, as HTTP SD JSON and gzip, with
//! its ETag. Encoded once and shared by every response until the job changes.

use std::collections::HashMap;
use std::hash::BuildHasher as _;
use std::io::Write as _;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use herald_core::istio::{APP_ANNOTATIONS_LABEL, IstioJob, Part, Policies, Served};
use herald_core::{JobRelabel, LabelSet, hashmod};
use md5::{Digest, Md5};

use crate::compact::{Group, write_labeled_entry};

/// Shard `index` of `count`, as Prometheus's `hashmod` on `__address__` with modulus `count` followed
/// by `keep` on `index` (the relabelling prometheus-operator injects for `spec.shards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Shard {
    pub fn holds(self, address: &str) -> bool {
        hashmod(address, self.count) == self.index
    }
}

/// One encoded response body.
#[derive(Debug)]
pub struct Encoded {
    pub generation: u64,
    pub targets: usize,
    pub json: Bytes,
    /// A strong ETag from the body's MD5, so equal content keeps its ETag across relists and restarts.
    pub etag: String,
    gzip: OnceLock<Bytes>,
    /// Where each group's entries are in `json` (the group held, so its address cannot be reused):
    /// the next generation's body copies the groups that did not change instead of encoding them.
    spans: Vec<(Arc<Group>, Range<usize>, usize)>,
    /// What besides the groups the body was built from (the PeerAuthentications' generation for an
    /// Istio-aware job; 0 otherwise): spans are copied only between bodies of the same salt.
    salt: u64,
}

/// How an Istio-aware job's body is built.
#[derive(Debug, Clone, Copy)]
pub struct IstioEncoding<'a> {
    pub job: &'a IstioJob,
    pub relabel: &'a JobRelabel,
    pub policies: &'a Policies,
    /// Which of the job's two bodies.
    pub part: Part,
    /// The policies' generation.
    pub salt: u64,
}

impl Encoded {
    /// Encodes the groups (in their stable order), keeping only the shard's entries.
    pub fn build(generation: u64, groups: &[Arc<Group>], shard: Option<Shard>) -> Encoded {
        Encoded::build_after(None, generation, groups, shard, None)
    }

    /// As `build`, copying the entries of every group that `prev` (an earlier body of the same job
    /// and shard) already holds (see `build_with`), and relabeling targets by `relabel` if given.
    pub fn build_after(
        prev: Option<&Encoded>,
        generation: u64,
        groups: &[Arc<Group>],
        shard: Option<Shard>,
        relabel: Option<&JobRelabel>,
    ) -> Encoded {
        let mut scratch = Vec::new();
        let mut address = String::new();
        let mut labels = LabelSet::new();
        // The group's relabeled entries written so far: hash of the entry's bytes → where it is.
        let mut written: HashMap<u64, Range<usize>, foldhash::fast::FixedState> =
            HashMap::default();
        Encoded::build_with(prev, generation, groups, 0, |group, json, targets| {
            if let Some(relabel) = relabel {
                // A shard is cut from the relabeled targets, by their final address.
                let may_keep = group.may_keep(relabel);
                written.clear();
                for target in group.iter().filter(|_| may_keep) {
                    let Some(final_address) = group.relabel(target, relabel, &mut labels) else {
                        continue;
                    };
                    if shard.is_some_and(|s| !s.holds(&final_address)) {
                        continue;
                    }
                    let mark = json.len();
                    if *targets > 0 {
                        json.push(b',');
                    }
                    let start = json.len();
                    write_labeled_entry(json, &final_address, &labels);
                    // Rules that rewrite the address often make a group's targets equal (the
                    // `prometheus.io/port` annotation on every container port of a pod). Prometheus
                    // and vmagent scrape equal targets once; herald writes them once, so bodies
                    // carry no copies. Equal entries are equal bytes (labels are sorted).
                    let hash = written.hasher().hash_one(&json[start..]);
                    match written.get(&hash) {
                        Some(r) if json[r.clone()] == json[start..] => {
                            json.truncate(mark);
                            continue;
                        }
                        Some(_) => {} // a 64-bit collision: written, not remembered
                        None => {
                            written.insert(hash, start..json.len());
                        }
                    }
                    *targets += 1;
                }
            } else {
                for target in group.iter() {
                    if shard.is_some_and(|s| !s.holds(target.address(&mut address))) {
                        continue;
                    }
                    if *targets > 0 {
                        json.push(b',');
                    }
                    group.write_entry(target, json, &mut scratch);
                    *targets += 1;
                }
            }
        })
    }

    /// Both bodies of an Istio-aware job: `istio.part`'s, then the other part's, in one pass over
    /// the targets (each target relabeled and placed by `herald_core::istio::IstioJob::targets`,
    /// equal targets of one group written once: Prometheus would scrape them once). `prev` and
    /// `prev_other` are earlier bodies of each part to copy unchanged groups from; bodies built
    /// under other policies (`istio.salt`) share nothing.
    pub fn build_istio_pair(
        prev: Option<&Encoded>,
        prev_other: Option<&Encoded>,
        generation: u64,
        groups: &[Arc<Group>],
        shard: Option<Shard>,
        istio: &IstioEncoding<'_>,
    ) -> (Encoded, Encoded) {
        let other = istio.part.other();
        let mut labels = LabelSet::new();
        let mut served: Vec<Served> = Vec::new();
        // The other part's entries of each group placed while building the first body.
        let mut stash: Vec<u8> = Vec::new();
        let mut stashed: HashMap<*const Group, (Range<usize>, usize), foldhash::fast::RandomState> =
            HashMap::default();
        let own = Encoded::build_with(
            prev,
            generation,
            groups,
            istio.salt,
            |group, json, targets| {
                place_group(group, istio, shard, &mut labels, &mut served);
                write_part(&served, istio.part, json, targets);
                let start = stash.len();
                let mut n = 0;
                write_part(&served, other, &mut stash, &mut n);
                stashed.insert(std::ptr::from_ref(group), (start..stash.len(), n));
            },
        );
        let theirs = Encoded::build_with(
            prev_other,
            generation,
            groups,
            istio.salt,
            |group, json, targets| match stashed.get(&std::ptr::from_ref(group)) {
                Some((range, n)) => {
                    if *n > 0 {
                        if *targets > 0 {
                            json.push(b',');
                        }
                        json.extend_from_slice(&stash[range.clone()]);
                        *targets += n;
                    }
                }
                // The first body copied this group from its previous body: place it now.
                None => {
                    place_group(group, istio, shard, &mut labels, &mut served);
                    write_part(&served, other, json, targets);
                }
            },
        );
        (own, theirs)
    }

    /// The body of `groups`, each written by `write` (which appends entries, separated by commas,
    /// and counts them) or copied from `prev` when `prev` holds it and was built with the same
    /// `salt`. NB: encoding a group means sorting and escaping every label of every target; copying
    /// its bytes is a memcpy. Under churn most groups of a large job are unchanged between
    /// generations, so a new body costs about its size in copies plus the changed groups.
    fn build_with<'g>(
        prev: Option<&Encoded>,
        generation: u64,
        groups: &'g [Arc<Group>],
        salt: u64,
        mut write: impl FnMut(&'g Group, &mut Vec<u8>, &mut usize),
    ) -> Encoded {
        let prev = prev.filter(|p| p.salt == salt);
        let reuse: HashMap<*const Group, (Range<usize>, usize), foldhash::fast::RandomState> = prev
            .map(|p| {
                p.spans
                    .iter()
                    .map(|(g, r, n)| (Arc::as_ptr(g), (r.clone(), *n)))
                    .collect()
            })
            .unwrap_or_default();
        let prev_json = prev.map(|p| &p.json[..]).unwrap_or_default();
        let mut json = Vec::with_capacity((prev_json.len() + prev_json.len() / 16).max(64 * 1024));
        json.push(b'[');
        let mut targets = 0;
        let mut spans = Vec::with_capacity(groups.len());
        for group in groups {
            let before = targets;
            let start = json.len() + usize::from(targets > 0);
            if let Some((r, n)) = reuse.get(&Arc::as_ptr(group)) {
                if *n > 0 {
                    if targets > 0 {
                        json.push(b',');
                    }
                    json.extend_from_slice(&prev_json[r.clone()]);
                    targets += n;
                }
            } else {
                write(group, &mut json, &mut targets);
            }
            let range = if targets > before {
                start..json.len()
            } else {
                start..start
            };
            spans.push((group.clone(), range, targets - before));
        }
        json.push(b']');
        // A grown buffer can hold twice its length; bodies of large jobs are hundreds of MB.
        if json.capacity() > json.len() + json.len() / 8 {
            json.shrink_to_fit();
        }
        let json = Bytes::from(json);
        let digest = Md5::digest(&json);
        let etag = format!(
            "\"{}\"",
            digest
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        Encoded {
            generation,
            targets,
            json,
            etag,
            gzip: OnceLock::new(),
            spans,
            salt,
        }
    }

    /// The gzip body, compressed on first use and kept.
    pub fn gzip(&self) -> Bytes {
        self.gzip
            .get_or_init(|| {
                let mut enc =
                    GzEncoder::new(Vec::with_capacity(self.json.len() / 4), Compression::fast());
                enc.write_all(&self.json)
                    .expect("writing to an in-memory gzip encoder cannot fail");
                Bytes::from(
                    enc.finish()
                        .expect("finishing an in-memory gzip encoder cannot fail"),
                )
            })
            .clone()
    }
}

/// Every target `group` serves in either body of an Istio-aware job, in `served` (cleared first):
/// placed by the job, cut to `shard` by final address, sorted, equal ones once.
fn place_group(
    group: &Group,
    istio: &IstioEncoding<'_>,
    shard: Option<Shard>,
    labels: &mut LabelSet,
    served: &mut Vec<Served>,
) {
    served.clear();
    // A group whose own labels drop every target is skipped, unless the application's recovered
    // annotations could keep what the merged ones drop.
    if !group.may_keep(istio.relabel) && group.label(APP_ANNOTATIONS_LABEL).is_none() {
        return;
    }
    for target in group.iter() {
        group.discovered(target, labels);
        istio.job.targets(
            std::mem::take(labels),
            istio.relabel,
            istio.policies,
            served,
        );
    }
    served.retain(|(_, address, _)| shard.is_none_or(|s| s.holds(address)));
    served.sort_unstable();
    served.dedup();
}

/// The entries of `served` in body `part`, appended to `json` (comma-separated after `targets`
/// entries), counted in `targets`.
fn write_part(served: &[Served], part: Part, json: &mut Vec<u8>, targets: &mut usize) {
    for (_, address, labels) in served.iter().filter(|(p, _, _)| *p == part) {
        if *targets > 0 {
            json.push(b',');
        }
        write_labeled_entry(json, address, labels);
        *targets += 1;
    }
}

/// At most this many (job, shard) bodies are kept; beyond it the cache starts over. Bounds memory
/// when clients ask for many different shard counts.
const MAX_ENTRIES: usize = 4096;

type Slot = Arc<OnceLock<Arc<Encoded>>>;

/// A body is cached per job and shard (`None`: the whole job).
type SlotKey = (usize, Option<Shard>);

/// The latest encoded body per (job, shard), keyed with the generation it was requested at.
#[derive(Debug, Default)]
pub struct EncodedCache {
    slots: Mutex<HashMap<SlotKey, (u64, Slot)>>,
}

impl EncodedCache {
    /// The body built for `job`/`shard` last, whatever its generation.
    pub fn latest(&self, job: usize, shard: Option<Shard>) -> Option<Arc<Encoded>> {
        let slots = self.slots.lock().expect("encoded cache lock poisoned");
        slots.get(&(job, shard)).and_then(|(_, s)| s.get().cloned())
    }

    /// Keeps `body` as `job`/`shard`'s at `generation`, built alongside another body, unless a
    /// body of that generation (or a later one) is there or being built.
    pub fn offer(&self, job: usize, shard: Option<Shard>, generation: u64, body: Arc<Encoded>) {
        let mut slots = self.slots.lock().expect("encoded cache lock poisoned");
        match slots.get(&(job, shard)) {
            // NB: never `OnceLock::set` a slot of this generation: `set` waits for a build under
            // way, and that build (the sibling's request, at once) may be waiting to offer this
            // thread's job its body: a deadlock, with the map lock held. It finishes by itself.
            Some((g, _)) if *g >= generation => {}
            _ => {
                if slots.len() >= MAX_ENTRIES {
                    slots.clear();
                }
                let slot: Slot = Arc::new(OnceLock::from(body));
                slots.insert((job, shard), (generation, slot));
            }
        }
    }

    /// The body of `job`/`shard` at `generation` if one is built (never builds, never waits).
    pub fn built(&self, job: usize, shard: Option<Shard>, generation: u64) -> Option<Arc<Encoded>> {
        let slots = self.slots.lock().expect("encoded cache lock poisoned");
        match slots.get(&(job, shard)) {
            Some((g, slot)) if *g == generation => slot.get().cloned(),
            _ => None,
        }
    }

    /// The body of `job`/`shard` at `generation`, built by `build` if this is the first request for
    /// it; `build` is handed the body of the generation before, when one was built, to copy from.
    /// Concurrent first requests wait for one build instead of each encoding.
    pub fn get_or_build(
        &self,
        job: usize,
        shard: Option<Shard>,
        generation: u64,
        build: impl FnOnce(Option<&Encoded>) -> Encoded,
    ) -> Arc<Encoded> {
        let (slot, prev) = {
            let mut slots = self.slots.lock().expect("encoded cache lock poisoned");
            match slots.get(&(job, shard)) {
                Some((g, slot)) if *g == generation => (slot.clone(), None),
                old => {
                    let prev = old.and_then(|(_, slot)| slot.get().cloned());
                    if slots.len() >= MAX_ENTRIES {
                        slots.clear();
                    }
                    let slot: Slot = Arc::default();
                    slots.insert((job, shard), (generation, slot.clone()));
                    (slot, prev)
                }
            }
        };
        // Outside the map lock: other keys stay available while this one encodes.
        slot.get_or_init(|| Arc::new(build(prev.as_deref())))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use herald_core::{LabelSet, TargetGroup, encode_http_sd, http_sd_entries};

    use super::*;
    use crate::compact::Interner;

    fn mk_group(source: &str, addrs: &[&str]) -> Arc<Group> {
        Arc::new(Group::of(
            &TargetGroup {
                source: source.into(),
                targets: addrs
                    .iter()
                    .map(|a| LabelSet::from([("__address__".to_string(), a.to_string())]))
                    .collect(),
                labels: LabelSet::from([("job_label".to_string(), source.to_string())]),
            },
            &Interner::default(),
        ))
    }

    #[test]
    fn a_body_equals_herald_core_s_encoding_of_all_groups() {
        let groups = [
            TargetGroup {
                source: "a".into(),
                targets: vec![LabelSet::from([(
                    "__address__".into(),
                    "127.0.0.2:1".into(),
                )])],
                labels: LabelSet::from([("x".into(), "1".into())]),
            },
            TargetGroup::default(),
            TargetGroup {
                source: "c".into(),
                targets: vec![
                    LabelSet::from([("__address__".into(), "127.0.0.3:1".into())]),
                    LabelSet::from([("__address__".into(), "127.0.0.4:1".into())]),
                ],
                labels: LabelSet::new(),
            },
        ];
        let interner = Interner::default();
        let fragments: Vec<Arc<Group>> = groups
            .iter()
            .map(|g| Arc::new(Group::of(g, &interner)))
            .collect();
        let entries: Vec<_> = groups.iter().flat_map(http_sd_entries).collect();
        let e = Encoded::build(1, &fragments, None);
        assert_eq!(e.json.to_vec(), encode_http_sd(&entries));
        assert_eq!(e.targets, 3);
        let empty = Encoded::build(1, &[], Some(Shard { index: 0, count: 2 }));
        assert_eq!(&empty.json[..], b"[]");
    }

    #[test]
    fn relabeled_targets_made_equal_are_written_once_per_group() {
        // Every port of a pod rewritten to one address (the `prometheus.io/port` rule): Prometheus
        // scrapes one target, and herald writes one.
        let groups = vec![
            mk_group("pod-a", &["127.0.0.1:80", "127.0.0.1:81", "127.0.0.1:82"]),
            mk_group("pod-b", &["127.0.0.2:80", "127.0.0.2:81"]),
        ];
        let rules: Vec<herald_core::RelabelConfig> = serde_yaml::from_str(
            "- {source_labels: [__address__], regex: '([^:]+):.*', replacement: '$1:9100', target_label: __address__}\n",
        )
        .expect("rules");
        let relabel = JobRelabel::new(rules, false).expect("valid");
        let e = Encoded::build_after(None, 1, &groups, None, Some(&relabel));
        let v: serde_json::Value = serde_json::from_slice(&e.json).expect("json");
        let addresses: Vec<&str> = v
            .as_array()
            .expect("array")
            .iter()
            .map(|entry| entry["targets"][0].as_str().expect("target"))
            .collect();
        assert_eq!(addresses, ["127.0.0.1:9100", "127.0.0.2:9100"]);
        assert_eq!(e.targets, 2);
        // Targets the rules leave different are all written.
        let keep_port: Vec<herald_core::RelabelConfig> = serde_yaml::from_str(
            "- {source_labels: [__address__], regex: '.*:(8.)', replacement: '127.0.0.9:$1', target_label: __address__}\n",
        )
        .expect("rules");
        let relabel = JobRelabel::new(keep_port, false).expect("valid");
        let e = Encoded::build_after(None, 1, &groups, None, Some(&relabel));
        assert_eq!(e.targets, 5, "{}", String::from_utf8_lossy(&e.json));
    }

    /// A pod group in `ns` with the sidecar (or not), its targets on `ports`.
    fn pod_group(ns: &str, ip: &str, sidecar: bool, ports: &[u16]) -> Arc<Group> {
        let mut labels =
            LabelSet::from([("__meta_kubernetes_namespace".to_string(), ns.to_string())]);
        if sidecar {
            labels.insert(
                herald_core::istio::TLS_MODE_LABEL.to_string(),
                "istio".to_string(),
            );
        }
        Arc::new(Group::of(
            &TargetGroup {
                source: format!("pod/{ns}/{ip}"),
                targets: ports
                    .iter()
                    .map(|p| LabelSet::from([("__address__".to_string(), format!("{ip}:{p}"))]))
                    .collect(),
                labels,
            },
            &Interner::default(),
        ))
    }

    #[test]
    fn both_istio_bodies_come_from_one_pass_equal_whichever_is_asked_first_and_after_changes() {
        let policies = herald_core::istio::Policies::new(
            "istio-system",
            vec![
                herald_core::istio::PeerAuthentication::from_value(&serde_json::json!({
                    "metadata": {"namespace": "strict", "name": "default",
                                 "creationTimestamp": "2026-01-01T00:00:00Z"},
                    "spec": {"mtls": {"mode": "STRICT"}},
                }))
                .expect("a policy"),
            ],
        );
        let job = IstioJob {
            mode: herald_core::istio::IstioMode::Merged,
            job: "j".into(),
        };
        let rules: Vec<herald_core::RelabelConfig> =
            serde_yaml::from_str("- {source_labels: [__address__], regex: '.*', action: keep}\n")
                .expect("rules");
        let relabel = JobRelabel::new(rules, false).expect("valid");
        let how = |part| IstioEncoding {
            job: &job,
            relabel: &relabel,
            policies: &policies,
            part,
            salt: 1,
        };
        let mut groups = vec![
            pod_group("strict", "127.0.0.1", true, &[8080, 15090, 8080]),
            pod_group("strict", "127.0.0.2", false, &[8080]),
            pod_group("open", "127.0.0.3", true, &[8080]),
        ];
        let (plain, mtls) =
            Encoded::build_istio_pair(None, None, 1, &groups, None, &how(Part::Plain));
        let (mtls2, plain2) =
            Encoded::build_istio_pair(None, None, 1, &groups, None, &how(Part::Mtls));
        assert_eq!((&plain.json, &mtls.json), (&plain2.json, &mtls2.json));
        let addresses = |e: &Encoded| -> Vec<String> {
            let v: serde_json::Value = serde_json::from_slice(&e.json).expect("json");
            v.as_array()
                .expect("array")
                .iter()
                .map(|x| x["targets"][0].as_str().expect("address").to_string())
                .collect()
        };
        // STRICT application port of the sidecar pod (once) in the companion; Envoy, the pod
        // without sidecar and the PERMISSIVE namespace plain.
        assert_eq!(addresses(&mtls), ["127.0.0.1:8080"]);
        assert_eq!(
            addresses(&plain),
            ["127.0.0.1:15090", "127.0.0.2:8080", "127.0.0.3:8080"]
        );
        // One group changes: the next pair, copying the unchanged groups from the previous bodies
        // (whichever body is asked first), equals a fresh build.
        groups[2] = pod_group("open", "127.0.0.3", true, &[8080, 9090]);
        let fresh = Encoded::build_istio_pair(None, None, 2, &groups, None, &how(Part::Plain));
        let (p3, m3) = Encoded::build_istio_pair(
            Some(&plain),
            Some(&mtls),
            2,
            &groups,
            None,
            &how(Part::Plain),
        );
        assert_eq!((&p3.json, &m3.json), (&fresh.0.json, &fresh.1.json));
        let (m4, p4) =
            Encoded::build_istio_pair(Some(&mtls), None, 2, &groups, None, &how(Part::Mtls));
        assert_eq!((&p4.json, &m4.json), (&fresh.0.json, &fresh.1.json));
        assert_eq!(p4.targets, 4);
    }

    #[test]
    fn equal_content_gets_equal_etags_whatever_the_generation() {
        let groups = vec![mk_group("a", &["1.1.1.1:80"])];
        let a = Encoded::build(1, &groups, None);
        let b = Encoded::build(7, &groups, None);
        assert_eq!(a.etag, b.etag);
        let c = Encoded::build(8, &[mk_group("a", &["1.1.1.2:80"])], None);
        assert_ne!(a.etag, c.etag);
    }

    #[test]
    fn shards_partition_the_targets_by_prometheus_hashmod() {
        let addrs: Vec<String> = (0..50).map(|i| format!("127.0.0.{i}:9100")).collect();
        let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
        let groups = vec![mk_group("g", &refs)];
        let mut seen = Vec::new();
        for index in 0..3 {
            let e = Encoded::build(1, &groups, Some(Shard { index, count: 3 }));
            let v: serde_json::Value = serde_json::from_slice(&e.json).expect("json");
            for entry in v.as_array().expect("array") {
                let t = entry["targets"][0].as_str().expect("target").to_string();
                assert_eq!(hashmod(&t, 3), index);
                seen.push(t);
            }
        }
        seen.sort();
        let mut all = addrs.clone();
        all.sort();
        assert_eq!(seen, all);
    }

    #[test]
    fn a_body_built_after_an_earlier_one_equals_a_fresh_build_for_every_shard() {
        let a = mk_group("a", &["127.0.0.1:80", "127.0.0.2:80", "127.0.0.3:80"]);
        let b = mk_group("b", &["127.0.0.4:80"]);
        let c = mk_group("c", &["127.0.0.5:80", "127.0.0.6:80"]);
        let empty = mk_group("e", &[]);
        for shard in [
            None,
            Some(Shard { index: 0, count: 2 }),
            Some(Shard { index: 1, count: 2 }),
        ] {
            let first = Encoded::build(1, &[a.clone(), b.clone(), empty.clone()], shard);
            // b changed (a new group), c appeared, the empty group went; a is copied.
            let b2 = mk_group("b", &["127.0.0.7:80"]);
            let groups = [a.clone(), b2, c.clone()];
            let next = Encoded::build_after(Some(&first), 2, &groups, shard, None);
            let fresh = Encoded::build(2, &groups, shard);
            assert_eq!(next.json, fresh.json, "{shard:?}");
            assert_eq!(next.targets, fresh.targets);
            assert_eq!(next.etag, fresh.etag);
            let again = Encoded::build_after(Some(&next), 3, &groups, shard, None);
            assert_eq!(again.json, fresh.json, "copied whole: {shard:?}");
        }
    }

    #[test]
    fn gzip_body_inflates_to_the_json_body() {
        let e = Encoded::build(1, &[mk_group("a", &["1.1.1.1:80", "1.1.1.2:80"])], None);
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&e.gzip()[..])
            .read_to_end(&mut out)
            .expect("valid gzip");
        assert_eq!(out, e.json.to_vec());
    }

    #[test]
    fn the_cache_builds_once_per_generation() {
        let cache = EncodedCache::default();
        let groups = vec![mk_group("a", &["1.1.1.1:80"])];
        let mut builds = 0;
        for _ in 0..3 {
            cache.get_or_build(0, None, 1, |_| {
                builds += 1;
                Encoded::build(1, &groups, None)
            });
        }
        assert_eq!(builds, 1);
        cache.get_or_build(0, None, 2, |_| {
            builds += 1;
            Encoded::build(2, &groups, None)
        });
        assert_eq!(builds, 2);
    }

    /// As `Shared::encoded` does for an Istio-aware job (0) and its companion (1) asked for at the
    /// same generation at once: each build offers the other its body while the other's is under way.
    #[test]
    fn a_job_and_its_companion_built_at_once_both_answer() {
        use std::sync::Barrier;
        use std::time::Duration;

        let cache = Arc::new(EncodedCache::default());
        let barrier = Arc::new(Barrier::new(2));
        let (tx, rx) = std::sync::mpsc::channel();
        for (own, sibling) in [(0usize, 1usize), (1, 0)] {
            let (cache, barrier, tx) = (cache.clone(), barrier.clone(), tx.clone());
            std::thread::spawn(move || {
                let body = cache.get_or_build(own, None, 1, |_| {
                    barrier.wait(); // both builds under way
                    cache.offer(sibling, None, 1, Arc::new(Encoded::build(1, &[], None)));
                    Encoded::build(1, &[], None)
                });
                tx.send(body.generation).expect("the test waits");
            });
        }
        for _ in 0..2 {
            let answered = rx.recv_timeout(Duration::from_secs(10));
            assert_eq!(answered, Ok(1), "both requests are answered (no deadlock)");
        }
        // A later generation offered by a sibling is kept for its first request.
        cache.offer(0, None, 2, Arc::new(Encoded::build(2, &[], None)));
        assert_eq!(cache.built(0, None, 2).map(|b| b.generation), Some(2));
    }
}
