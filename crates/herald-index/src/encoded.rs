//! Encoded snapshots: one job (or one shard of it) at one generation, as HTTP SD JSON held in zstd
//! blocks (and gzip on ask), with its ETag. Encoded once and shared by every response while
//! `body_store::BodyStore` keeps it; the next generation takes over its unchanged blocks.

use std::collections::HashMap;
use std::hash::BuildHasher as _;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use herald_core::istio::{APP_ANNOTATIONS_LABEL, IstioJob, Part, Policies, Served};
use herald_core::{JobRelabel, LabelSet, hashmod};
use md5::{Digest, Md5};

use crate::groups::{Group, write_labeled_entry};

mod blocks;

pub use blocks::{BLOCK_BYTES, Block, Dict, Expanded, GzipForm};

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

/// A job's groups at one generation, in order: one vector shared by every shard's body built from
/// it (`index::Index::cut` hands out the same one until the job changes). NB: each body held its
/// own copy before, one pointer per group of the whole job (a pod job's shard sees every pod): 12
/// MB for ten shards of 150,000 pods, twice over while two generations are held.
pub type Groups = Arc<[Arc<Group>]>;

/// What a body is built from: a job's shared cut, kept as it is, or any other run of groups, copied
/// once into a `Groups` of its own (tests, and views over some namespaces).
pub trait IntoGroups {
    fn into_groups(self) -> Groups;
}

impl IntoGroups for &Groups {
    fn into_groups(self) -> Groups {
        self.clone()
    }
}

impl IntoGroups for &[Arc<Group>] {
    fn into_groups(self) -> Groups {
        self.into()
    }
}

impl IntoGroups for &Vec<Arc<Group>> {
    fn into_groups(self) -> Groups {
        self.as_slice().into()
    }
}

impl<const N: usize> IntoGroups for &[Arc<Group>; N] {
    fn into_groups(self) -> Groups {
        self.as_slice().into()
    }
}

/// One encoded response body, held as zstd blocks of whole groups (`blocks`).
#[derive(Debug)]
pub struct Encoded {
    pub generation: u64,
    pub targets: usize,
    /// A strong ETag from the MD5 of the groups' entries' digests (each the MD5 of a group's entries,
    /// made when they are written), so equal content keeps its ETag across relists and restarts
    /// without hashing every byte of every generation.
    pub etag: String,
    /// The identity body's length.
    len: usize,
    blocks: Vec<Arc<Block>>,
    /// Each block's first group (an index into `groups`).
    block_first: Vec<u32>,
    /// Every group the body was built from, in order (held, so their addresses cannot be reused):
    /// the next generation copies the groups and blocks that did not change instead of encoding them.
    groups: Groups,
    /// Where the entries of each group that has some are, in group order.
    spans: Vec<Span>,
    /// What besides the groups the body was built from (the PeerAuthentications' generation for an
    /// Istio-aware job; 0 otherwise): groups are copied only between bodies of the same salt.
    salt: u64,
    gzip: OnceLock<Arc<GzipForm>>,
    /// Blocks taken over from the previous generation (the others were compressed for this one).
    blocks_taken: usize,
    /// The zstd dictionary of this (job, shard)'s bodies (`blocks::Dict`), passed on to the next.
    dict: Option<Arc<Dict>>,
}

/// Where one group's entries are: in block `block`, `len` bytes from `start` (the comma before
/// them excluded). NB: 28 bytes, not 40 (offsets as `u32`, the digest as two halves so nothing is
/// 8-aligned): a body holds one per group with entries in it, ~1 million across the bodies of the
/// steady-state benchmark.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
    digest: [u32; 2],
    group: u32,
    block: u32,
    targets: u32,
}

impl Span {
    fn range(&self) -> Range<usize> {
        self.start as usize..(self.start + self.len) as usize
    }

    fn digest(&self) -> u64 {
        u64::from(self.digest[0]) | (u64::from(self.digest[1]) << 32)
    }
}

/// What a held group and span cost besides the blocks.
const GROUP_BYTES: usize = std::mem::size_of::<Arc<Group>>();
const SPAN_BYTES: usize = std::mem::size_of::<Span>();

/// The first 8 bytes of the MD5 of a group's entries.
fn digest(entries: &[u8]) -> u64 {
    let d = Md5::digest(entries);
    u64::from_le_bytes(d[..8].try_into().expect("an MD5 digest has 16 bytes"))
}

fn index_u32(i: usize) -> u32 {
    u32::try_from(i).expect("a body has fewer than 2^32 groups, blocks and targets per group")
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
    pub fn build(generation: u64, groups: impl IntoGroups, shard: Option<Shard>) -> Encoded {
        Encoded::build_after(None, generation, groups, shard, None)
    }

    /// As `build`, copying the entries of every group that `prev` (an earlier body of the same job
    /// and shard) already holds (see `build_with`), and relabeling targets by `relabel` if given.
    pub fn build_after(
        prev: Option<&Encoded>,
        generation: u64,
        groups: impl IntoGroups,
        shard: Option<Shard>,
        relabel: Option<&JobRelabel>,
    ) -> Encoded {
        let groups = groups.into_groups();
        let mut scratch = Vec::new();
        let mut address = String::new();
        let mut labels = LabelSet::new();
        // The group's relabeled entries written so far: hash of the entry's bytes → where it is.
        let mut written: HashMap<u64, Range<usize>, foldhash::fast::FixedState> =
            HashMap::default();
        Encoded::build_with(prev, generation, &groups, 0, |group, json, targets| {
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
        groups: impl IntoGroups,
        shard: Option<Shard>,
        istio: &IstioEncoding<'_>,
    ) -> (Encoded, Encoded) {
        let groups = groups.into_groups();
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
            &groups,
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
            &groups,
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
    /// its bytes is a memcpy, and taking over a block of `prev` whose groups are all unchanged costs
    /// nothing at all. Under churn most groups of a large job are unchanged between generations, so
    /// a new body costs the blocks holding changed groups: expanded, rewritten, compressed again.
    fn build_with<'g>(
        prev: Option<&Encoded>,
        generation: u64,
        groups: &'g Groups,
        salt: u64,
        mut write: impl FnMut(&'g Group, &mut Vec<u8>, &mut usize),
    ) -> Encoded {
        let prev = prev.filter(|p| p.salt == salt);
        let mut b = Builder::new(groups.len(), prev);
        let mut targets = 0;
        let mut i = 0;
        while i < groups.len() {
            if let Some(taken) = b.take_block(&groups[i..], targets) {
                targets += taken;
                i += b.taken_groups;
                continue;
            }
            let group = &groups[i];
            let before = targets;
            let start = b.pending.len() + usize::from(targets > 0);
            match b.reuse.get(&Arc::as_ptr(group)) {
                Some(&Some(s)) => {
                    let span = prev.expect("reused spans come from prev").spans[s as usize];
                    if targets > 0 {
                        b.pending.push(b',');
                    }
                    b.copy_span(span);
                    targets += span.targets as usize;
                    b.push_span(span.digest(), start, span.targets as usize);
                }
                Some(None) => {} // no entries before, none now: the group did not change
                None => {
                    write(group, &mut b.pending, &mut targets);
                    if targets > before {
                        let d = digest(&b.pending[start..]);
                        b.push_span(d, start, targets - before);
                    }
                }
            }
            b.group_done();
            i += 1;
        }
        b.finish(generation, groups, targets, salt)
    }

    /// The identity body's length.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn blocks(&self) -> &[Arc<Block>] {
        &self.blocks
    }

    /// Blocks taken over unchanged from the body it was built after.
    pub fn blocks_taken(&self) -> usize {
        self.blocks_taken
    }

    /// The whole identity body (tests and tools; responses are sent block by block).
    pub fn identity(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        let mut buf = Vec::new();
        out.push(b'[');
        for b in &self.blocks {
            b.expand_into(&mut buf);
            out.extend_from_slice(&buf);
        }
        out.push(b']');
        out
    }

    /// Bytes this body keeps: its blocks (zstd, and deflated once the gzip form is made), their
    /// bookkeeping, its groups' spans and the pointers to its groups (shared with the other shards
    /// of its generation but counted in each: an upper bound).
    pub fn held_bytes(&self) -> usize {
        std::mem::size_of::<Encoded>()
            + self.blocks.iter().map(|b| b.held_bytes()).sum::<usize>()
            + self.block_first.len() * 4
            + self.groups.len() * GROUP_BYTES
            + self.spans.len() * SPAN_BYTES
            + self.gzip.get().map_or(0, |g| g.held_bytes())
            + self.dict.as_ref().map_or(0, |d| d.held_bytes())
    }

    /// The gzip form, made on first use from the blocks' deflated forms (deflating those not yet
    /// deflated), and whether this call made it (its bytes are then newly held).
    pub fn gzip(&self) -> (Arc<GzipForm>, bool) {
        if let Some(g) = self.gzip.get() {
            return (g.clone(), false);
        }
        let made = Arc::new(GzipForm::make(&self.blocks));
        match self.gzip.set(made.clone()) {
            Ok(()) => (made, true),
            Err(_) => (
                self.gzip.get().expect("set by another request").clone(),
                false,
            ),
        }
    }

    /// The whole gzip body, as sent (tests).
    #[cfg(test)]
    pub fn gzip_bytes(self: &Arc<Self>) -> Vec<u8> {
        let (g, _) = self.gzip();
        crate::sending::drain(crate::sending::Sending::gzip(self.clone(), g))
    }
}

/// A body under construction: the blocks closed so far and the entries of the one being written.
struct Builder<'p> {
    prev: Option<&'p Encoded>,
    /// Group of `prev` → its span there (`None`: it had no entries).
    reuse: HashMap<*const Group, Option<u32>, foldhash::fast::RandomState>,
    /// First group of each block of `prev` → the block.
    block_at: HashMap<*const Group, u32, foldhash::fast::RandomState>,
    /// The block of `prev` expanded last (copying groups one by one), and its bytes.
    expanded: Option<u32>,
    expanded_buf: Vec<u8>,
    pending: Vec<u8>,
    /// The body's dictionary: `prev`'s, else made from the first block.
    dict: Option<Arc<Dict>>,
    /// Groups seen so far; the first one of the pending block.
    group_count: usize,
    pending_first: usize,
    blocks: Vec<Arc<Block>>,
    block_first: Vec<u32>,
    spans: Vec<Span>,
    len: usize,
    /// Groups the last `take_block` took.
    taken_groups: usize,
    taken_blocks: usize,
}

impl<'p> Builder<'p> {
    fn new(groups: usize, prev: Option<&'p Encoded>) -> Builder<'p> {
        let mut reuse = HashMap::default();
        let mut block_at = HashMap::default();
        if let Some(p) = prev {
            reuse.reserve(p.groups.len());
            let mut spans = p.spans.iter().enumerate().peekable();
            for (g, group) in p.groups.iter().enumerate() {
                let span = spans
                    .next_if(|(_, s)| s.group as usize == g)
                    .map(|(i, _)| index_u32(i));
                reuse.insert(Arc::as_ptr(group), span);
            }
            for (b, first) in p.block_first.iter().enumerate() {
                block_at.insert(Arc::as_ptr(&p.groups[*first as usize]), index_u32(b));
            }
        }
        Builder {
            prev,
            reuse,
            block_at,
            expanded: None,
            expanded_buf: Vec::new(),
            pending: Vec::with_capacity(BLOCK_BYTES + BLOCK_BYTES / 4),
            dict: prev.and_then(|p| p.dict.clone()),
            group_count: 0,
            pending_first: 0,
            blocks: Vec::with_capacity(prev.map_or(0, |p| p.blocks.len() + 8)),
            block_first: Vec::with_capacity(prev.map_or(0, |p| p.blocks.len() + 8)),
            spans: Vec::with_capacity(prev.map_or(groups / 8, |p| p.spans.len() + 64)),
            len: 1,
            taken_groups: 0,
            taken_blocks: 0,
        }
    }

    /// Takes over the block of `prev` that starts with `groups[0]` if its groups are the next ones
    /// and it fits after `targets` entries; returns the targets it holds. NB: a small pending block
    /// is not closed to take one over (it would stay small in every later generation): its next
    /// groups are copied into it instead.
    fn take_block(&mut self, groups: &[Arc<Group>], targets: usize) -> Option<usize> {
        let prev = self.prev?;
        let &b = self.block_at.get(&Arc::as_ptr(&groups[0]))?;
        if self.group_count > self.pending_first && self.pending.len() < BLOCK_BYTES / 4 {
            return None;
        }
        let first = prev.block_first[b as usize] as usize;
        let end = prev
            .block_first
            .get(b as usize + 1)
            .map_or(prev.groups.len(), |f| *f as usize);
        let block = &prev.blocks[b as usize];
        let n = end - first;
        if groups.len() < n
            || !block.fits_after(targets)
            || !prev.groups[first..end]
                .iter()
                .zip(&groups[..n])
                .all(|(a, b)| Arc::ptr_eq(a, b))
        {
            return None;
        }
        self.close_block();
        let here = index_u32(self.blocks.len());
        let shift = self.group_count as i64 - first as i64;
        let from = prev.spans.partition_point(|s| (s.group as usize) < first);
        for s in prev.spans[from..]
            .iter()
            .take_while(|s| (s.group as usize) < end)
        {
            let mut s = *s;
            s.block = here;
            s.group = index_u32((s.group as i64 + shift) as usize);
            self.spans.push(s);
        }
        self.block_first.push(index_u32(self.group_count));
        self.blocks.push(block.clone());
        self.len += block.raw_len();
        self.group_count += n;
        self.pending_first = self.group_count;
        self.taken_groups = n;
        self.taken_blocks += 1;
        Some(block.targets())
    }

    /// Appends the entries of `span` (of `prev`) to the pending block.
    fn copy_span(&mut self, span: Span) {
        let prev = self.prev.expect("spans are copied from prev");
        if self.expanded != Some(span.block) {
            prev.blocks[span.block as usize].expand_into(&mut self.expanded_buf);
            self.expanded = Some(span.block);
        }
        self.pending
            .extend_from_slice(&self.expanded_buf[span.range()]);
    }

    /// Records the current group's entries, from `start` in the pending block to its end.
    fn push_span(&mut self, digest: u64, start: usize, targets: usize) {
        self.spans.push(Span {
            start: index_u32(start),
            len: index_u32(self.pending.len() - start),
            // The digest's two halves (see `Span`).
            digest: [digest as u32, (digest >> 32) as u32],
            group: index_u32(self.group_count),
            block: index_u32(self.blocks.len()),
            targets: index_u32(targets),
        });
    }

    /// The current group is written.
    fn group_done(&mut self) {
        self.group_count += 1;
        if self.pending.len() >= BLOCK_BYTES {
            self.close_block();
        }
    }

    /// Compresses the pending block (if it holds any group) and starts another.
    fn close_block(&mut self) {
        if self.group_count == self.pending_first {
            return;
        }
        let first_targets = self
            .spans
            .iter()
            .rev()
            .take_while(|s| s.block as usize == self.blocks.len())
            .map(|s| s.targets as usize)
            .sum::<usize>();
        let leading_comma = self.pending.first() == Some(&b',');
        if self.dict.is_none() && self.blocks.is_empty() {
            self.dict = Dict::of(&self.pending);
        }
        self.blocks.push(Arc::new(Block::compress(
            &self.pending,
            first_targets,
            leading_comma,
            self.dict.as_ref(),
        )));
        self.block_first.push(index_u32(self.pending_first));
        self.len += self.pending.len();
        self.pending.clear();
        self.pending_first = self.group_count;
    }

    fn finish(mut self, generation: u64, groups: &Groups, targets: usize, salt: u64) -> Encoded {
        self.close_block();
        // The first body of a (job, shard) grew its spans by doubling; later ones reserve what the
        // previous one held.
        self.spans.shrink_to_fit();
        let mut md5 = Md5::new();
        for s in &self.spans {
            md5.update(s.digest().to_le_bytes());
        }
        let etag = format!(
            "\"{}\"",
            md5.finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        Encoded {
            generation,
            targets,
            etag,
            len: self.len + 1,
            blocks: self.blocks,
            block_first: self.block_first,
            groups: groups.clone(),
            spans: self.spans,
            salt,
            gzip: OnceLock::new(),
            blocks_taken: self.taken_blocks,
            dict: self.dict,
        }
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

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use herald_core::{LabelSet, TargetGroup, encode_http_sd, http_sd_entries};

    use super::*;
    use crate::groups::Interner;

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
        assert_eq!(e.identity(), encode_http_sd(&entries));
        assert_eq!(e.targets, 3);
        let empty = Encoded::build(1, &[], Some(Shard { index: 0, count: 2 }));
        assert_eq!(&empty.identity()[..], b"[]");
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
        let v: serde_json::Value = serde_json::from_slice(&e.identity()).expect("json");
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
        assert_eq!(e.targets, 5, "{}", String::from_utf8_lossy(&e.identity()));
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
        assert_eq!(
            (plain.identity(), mtls.identity()),
            (plain2.identity(), mtls2.identity())
        );
        let addresses = |e: &Encoded| -> Vec<String> {
            let v: serde_json::Value = serde_json::from_slice(&e.identity()).expect("json");
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
        assert_eq!(
            (p3.identity(), m3.identity()),
            (fresh.0.identity(), fresh.1.identity())
        );
        let (m4, p4) =
            Encoded::build_istio_pair(Some(&mtls), None, 2, &groups, None, &how(Part::Mtls));
        assert_eq!(
            (p4.identity(), m4.identity()),
            (fresh.0.identity(), fresh.1.identity())
        );
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
            let v: serde_json::Value = serde_json::from_slice(&e.identity()).expect("json");
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
            assert_eq!(next.identity(), fresh.identity(), "{shard:?}");
            assert_eq!(next.targets, fresh.targets);
            assert_eq!(next.etag, fresh.etag);
            let again = Encoded::build_after(Some(&next), 3, &groups, shard, None);
            assert_eq!(
                again.identity(),
                fresh.identity(),
                "copied whole: {shard:?}"
            );
        }
    }

    #[test]
    fn gzip_body_inflates_to_the_json_body() {
        let e = Arc::new(Encoded::build(
            1,
            &[mk_group("a", &["1.1.1.1:80", "1.1.1.2:80"])],
            None,
        ));
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&e.gzip_bytes()[..])
            .read_to_end(&mut out)
            .expect("valid gzip");
        assert_eq!(out, e.identity());
        assert_eq!(e.gzip_bytes().len(), e.gzip().0.len());
    }

    /// Groups large enough that a body has many blocks: `n` groups of `width` targets each, with
    /// long labels, the group `g` at version `v[g]`.
    fn mk_versions(versions: &[u32], width: usize) -> Vec<Arc<Group>> {
        let interner = Interner::default();
        versions
            .iter()
            .enumerate()
            .map(|(g, v)| {
                Arc::new(Group::of(
                    &TargetGroup {
                        source: format!("g{g}"),
                        targets: (0..(width + *v as usize % 3)
                            * usize::from(g % 5 != 0 || *v % 2 == 1))
                            .map(|t| {
                                LabelSet::from([
                                    ("__address__".to_string(), format!("127.1.{g}.{t}:80")),
                                    ("version".to_string(), format!("{v}-{}", "x".repeat(1500))),
                                ])
                            })
                            .collect(),
                        labels: LabelSet::from([("g".to_string(), g.to_string())]),
                    },
                    &interner,
                ))
            })
            .collect()
    }

    #[test]
    fn bodies_built_generation_after_generation_equal_fresh_builds_and_take_over_unchanged_blocks()
    {
        let mut versions = vec![0u32; 600];
        for (shard, width) in [
            (None, 6),
            (Some(Shard { index: 1, count: 3 }), 6),
            (Some(Shard { index: 0, count: 2 }), 3),
        ] {
            let mut groups = mk_versions(&versions, width);
            let mut prev = Arc::new(Encoded::build(1, &groups, shard));
            assert!(prev.blocks().len() > 3, "{} blocks", prev.blocks().len());
            // Its blocks are compressed against a dictionary made from its first one, which every
            // later generation keeps: blocks taken over expand with the dictionary they were made
            // with, and new ones are made with it too.
            let dict = prev
                .dict
                .clone()
                .expect("a body of several blocks has a dictionary");
            // A fixed pseudo-random walk: groups change, vanish and appear, including the first.
            let mut x: u64 = 11;
            for generation in 2..24 {
                for _ in 0..3 {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    let g = (x >> 33) as usize % versions.len();
                    versions[g] += 1;
                    // A changed group is a new `Arc`; unchanged ones keep theirs, as in the index.
                    groups[g] = mk_versions(&versions[g..=g], width).remove(0);
                }
                if generation % 7 == 0 {
                    versions.remove(generation as usize);
                    groups.remove(generation as usize);
                    versions.insert(0, generation as u32);
                    groups.insert(0, mk_versions(&[generation as u32], 2).remove(0));
                }
                // Deletions and insertions anywhere, as pods come and go.
                for _ in 0..2 {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    let at = (x >> 33) as usize % versions.len();
                    if x & 1 == 0 {
                        versions.remove(at);
                        groups.remove(at);
                    } else {
                        versions.insert(at, generation as u32 + 1);
                        groups.insert(at, mk_versions(&[generation as u32 + 1], width).remove(0));
                    }
                }
                let next = Encoded::build_after(Some(&prev), generation, &groups, shard, None);
                let want = Encoded::build(generation, &groups, shard);
                assert_eq!(next.identity(), want.identity(), "generation {generation}");
                assert_eq!(next.etag, want.etag, "generation {generation}");
                assert_eq!(next.targets, want.targets);
                assert_eq!(next.len(), want.identity().len());
                let v: serde_json::Value =
                    serde_json::from_slice(&next.identity()).expect("valid json");
                assert_eq!(v.as_array().expect("array").len(), next.targets);
                assert!(Arc::ptr_eq(next.dict.as_ref().expect("kept"), &dict));
                prev = Arc::new(next);
            }
            assert!(prev.blocks_taken() > 0, "unchanged blocks are taken over");
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&prev.gzip_bytes()[..])
                .read_to_end(&mut out)
                .expect("valid gzip");
            assert_eq!(out, prev.identity());
        }
    }
}
