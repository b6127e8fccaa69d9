//! Interning for target groups: every label string held once (`Sym`), container ids packed
//! (`PackedId`), and label runs hash-consed into shared blocks (`Block`) by the `Interner` the
//! index's build workers share, with each worker's `Recent` blocks in front of it.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::HashTable;

use herald_core::LabelSet;

/// An interned string. NB: `ArcStr` is one word (`Arc<str>` is two): a target refers to ~10 strings
/// through its blocks and its address, and 766,130 targets at `k8s-limits` made the handles alone
/// ~50 MB (DESIGN-NOTES section 2).
pub type Sym = arcstr::ArcStr;

/// Prometheus's address label.
pub(crate) const ADDRESS: &str = "__address__";

/// The label carrying a target's container id.
pub(crate) const CONTAINER_ID: &str = "__meta_kubernetes_pod_container_id";

/// Container runtimes whose ids are packed (`PackedId`), by the prefix they give them.
const RUNTIMES: [&str; 3] = ["containerd", "docker", "cri-o"];

/// A container id of the shape container runtimes report, `<runtime>://<64 lowercase hex digits>`,
/// held as its runtime and the 32 bytes the digits spell. NB: every container has one and it is
/// unique to it; as an interned string (93 bytes allocated for 77 of text) with a block of its own
/// it cost ~140 bytes a container, ~45 MB for the 327,883 containers of `k8s-limits`; packed and
/// interned apart it costs ~57 (DESIGN-NOTES section 11). An id of any other shape (another runtime,
/// upper-case digits, another length) stays a label like any other, so what is written back is
/// always the text given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PackedId {
    runtime: u8,
    digest: [u8; 32],
}

/// An interned container id: one allocation per container, shared by every target of it.
pub(crate) type Id = triomphe::Arc<PackedId>;

impl PackedId {
    /// `text` packed, when it has the shape; `None` otherwise.
    fn pack(text: &str) -> Option<PackedId> {
        fn nibble(b: u8) -> Option<u8> {
            match b {
                b'0'..=b'9' => Some(b - b'0'),
                b'a'..=b'f' => Some(b - b'a' + 10),
                _ => None,
            }
        }
        let (runtime, hex) = text.split_once("://")?;
        let runtime = RUNTIMES.iter().position(|r| *r == runtime)? as u8;
        let hex = hex.as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let mut digest = [0u8; 32];
        for (d, pair) in digest.iter_mut().zip(hex.chunks_exact(2)) {
            *d = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Some(PackedId { runtime, digest })
    }

    /// The id's text, JSON-quoted (it needs no escaping), appended to `out`.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'"');
        self.write_text(out);
        out.push(b'"');
    }

    /// The id's text appended to `out`.
    fn write_text(&self, out: &mut Vec<u8>) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.extend_from_slice(RUNTIMES[self.runtime as usize].as_bytes());
        out.extend_from_slice(b"://");
        for b in self.digest {
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        }
    }
}

impl std::fmt::Display for PackedId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://", RUNTIMES[self.runtime as usize])?;
        self.digest.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// A sorted run of labels with unique names, interned: equal blocks share one allocation. NB: a
/// `ThinArc` is one word (`Arc<[T]>` is two), and a target holds three to five blocks.
#[derive(Debug, Clone)]
pub struct Block(triomphe::ThinArc<(), (Sym, Sym)>);

impl PartialEq for Block {
    fn eq(&self, other: &Block) -> bool {
        self.ptr_eq(other) || self.pairs() == other.pairs()
    }
}

impl Eq for Block {}

impl Hash for Block {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.pairs().hash(state);
    }
}

impl Block {
    fn new(pairs: &[(Sym, Sym)]) -> Block {
        Block(triomphe::ThinArc::from_header_and_iter(
            (),
            pairs.iter().cloned(),
        ))
    }

    pub fn pairs(&self) -> &[(Sym, Sym)] {
        &self.0.slice
    }

    /// Whether `self` and `other` are one allocation.
    pub fn ptr_eq(&self, other: &Block) -> bool {
        std::ptr::eq(self.0.heap_ptr(), other.0.heap_ptr())
    }

    /// Whether nothing but the interner holds this block.
    fn unused(&self) -> bool {
        triomphe::ThinArc::strong_count(&self.0) <= 1
    }
}

/// The families a label set is split into. A block holds one family of one label set.
const FAMILIES: usize = 5;

/// Labels whose value is (nearly) unique to one target: kept in a block of their own, so that the rest
/// of a target's labels (container, port and endpoint labels) form a block that the targets of every
/// replica and every endpoint on the same port share. NB: one container id, target pod name or node
/// name in the block would make each of those blocks unique, ~500 bytes a target at `k8s-limits`.
const PER_TARGET: [&str; 7] = [
    "__meta_kubernetes_pod_container_id",
    "__meta_kubernetes_endpointslice_address_target_name",
    "__meta_kubernetes_endpointslice_endpoint_hostname",
    "__meta_kubernetes_endpointslice_endpoint_node_name",
    "__meta_kubernetes_endpoint_address_target_name",
    "__meta_kubernetes_endpoint_hostname",
    "__meta_kubernetes_endpoint_node_name",
];

/// A pod's own labels, unique to it: kept apart from its labels, annotations and controller, which
/// every replica of a workload shares (~1.2 KiB a pod held once per workload instead of once per pod).
const PER_POD: [&str; 5] = [
    "__meta_kubernetes_pod_name",
    "__meta_kubernetes_pod_uid",
    "__meta_kubernetes_pod_ip",
    "__meta_kubernetes_pod_node_name",
    "__meta_kubernetes_pod_host_ip",
];

fn family(key: &str) -> usize {
    const POD: &str = "__meta_kubernetes_pod_";
    const CONTAINER: &str = "__meta_kubernetes_pod_container_";
    if PER_TARGET.contains(&key) {
        3
    } else if PER_POD.contains(&key) {
        4
    } else if key.starts_with(POD) && !key.starts_with(CONTAINER) {
        0
    } else if key.starts_with("__meta_kubernetes_node_") {
        1
    } else {
        2
    }
}

/// An interned string's identity: its address, unique while the string is interned (a block holds
/// its strings, so they outlive it).
fn sym_id(s: &Sym) -> usize {
    s.as_ptr() as usize
}

fn block_hash(hasher: &foldhash::fast::RandomState, pairs: &[(Sym, Sym)]) -> u64 {
    let mut h = hasher.build_hasher();
    for (k, v) in pairs {
        h.write_usize(sym_id(k));
        h.write_usize(sym_id(v));
    }
    h.finish()
}

/// What an interner's content-hashed tables (strings, container ids) rehash their entries by.
trait Hashed {
    fn hash_with(&self, hasher: &foldhash::fast::RandomState) -> u64;
}

impl Hashed for Sym {
    fn hash_with(&self, hasher: &foldhash::fast::RandomState) -> u64 {
        hasher.hash_one(self.as_str())
    }
}

impl Hashed for Id {
    fn hash_with(&self, hasher: &foldhash::fast::RandomState) -> u64 {
        hasher.hash_one(**self)
    }
}

/// Keeps the entries of every shard that `keep` accepts.
fn retain<T>(shards: &mut [Shard<T>], mut keep: impl FnMut(&T) -> bool) {
    for shard in shards.iter_mut() {
        shard
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|t| keep(t));
    }
}

/// Tables an interner splits its strings and its blocks between, by hash: the index's build workers
/// intern concurrently, and a lock per shard keeps them from waiting on each other.
const SHARDS: usize = 16;

/// One shard of an interner's table.
type Shard<T> = Mutex<HashTable<T>>;

fn shards<T>() -> Box<[Shard<T>]> {
    (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect()
}

/// The shard for `hash` (its top bits: hashbrown places entries by the low ones).
fn lock<T>(shards: &[Shard<T>], hash: u64) -> MutexGuard<'_, HashTable<T>> {
    // A panic while a shard was held left it consistent (inserts are single calls), so a poisoned
    // lock is taken as it is.
    shards[(hash >> 60) as usize % SHARDS]
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Strings and blocks in use, each held once. Shared by the index's build workers (`&self`, a lock
/// per shard); what it hands out is immutable and shared with readers.
#[derive(Debug)]
pub struct Interner {
    syms: Box<[Shard<Sym>]>,
    /// Container ids, packed (`PackedId`).
    pub(crate) ids: Box<[Shard<Id>]>,
    /// Blocks, hashed and compared by the identity of their interned strings: equal strings are one
    /// allocation, so pointers decide equality without reading a byte of label text (hashing blocks
    /// by content cost ~10 % of a first sync).
    blocks: Box<[Shard<Block>]>,
    hasher: foldhash::fast::RandomState,
    /// Sizes after the last sweep: the next one runs when either doubles.
    swept: (usize, usize),
}

impl Default for Interner {
    fn default() -> Interner {
        Interner {
            syms: shards(),
            ids: shards(),
            blocks: shards(),
            hasher: foldhash::fast::RandomState::default(),
            swept: (0, 0),
        }
    }
}

impl Interner {
    pub fn sym(&self, s: &str) -> Sym {
        let hash = self.hasher.hash_one(s);
        self.find_or_insert(&self.syms, hash, |sym| **sym == *s, || Sym::from(s))
    }

    /// `s` interned as it is: it becomes the interned string when none equal is, so that an object's
    /// key (shared with the face's entry) and the label values naming the object are one allocation.
    pub fn adopt(&self, s: &Sym) {
        let hash = self.hasher.hash_one(s.as_str());
        self.find_or_insert(&self.syms, hash, |sym| **sym == **s, || s.clone());
    }

    fn id(&self, id: PackedId) -> Id {
        let hash = self.hasher.hash_one(id);
        self.find_or_insert(&self.ids, hash, |found| **found == id, || Id::new(id))
    }

    /// The entry of `shards` equal to what `same` looks for, else `make()` inserted. Strings and
    /// container ids hash by content (`Hashed`), so the table rehashes them as they were hashed.
    fn find_or_insert<T: Clone + Hashed>(
        &self,
        shards: &[Shard<T>],
        hash: u64,
        same: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> T {
        let mut table = lock(shards, hash);
        if let Some(found) = table.find(hash, same) {
            return found.clone();
        }
        let made = make();
        table.insert_unique(hash, made.clone(), |t| t.hash_with(&self.hasher));
        made
    }

    fn block(&self, pairs: &[(Sym, Sym)]) -> Block {
        let hash = block_hash(&self.hasher, pairs);
        let same = |b: &Block| {
            b.pairs().len() == pairs.len()
                && b.pairs()
                    .iter()
                    .zip(pairs)
                    .all(|((bk, bv), (k, v))| Sym::ptr_eq(bk, k) && Sym::ptr_eq(bv, v))
        };
        let mut table = lock(&self.blocks, hash);
        if let Some(b) = table.find(hash, same) {
            return b.clone();
        }
        let b = Block::new(pairs);
        table.insert_unique(hash, b.clone(), |b| block_hash(&self.hasher, b.pairs()));
        b
    }

    /// `labels` (sorted, as a `LabelSet` is) split by family into interned blocks, empty ones left
    /// out; `skip` names a label not to keep.
    pub(crate) fn blocks(
        &self,
        labels: &LabelSet,
        skip: Option<&str>,
        recent: &mut Recent,
    ) -> Box<[Block]> {
        self.family_blocks(labels, skip, None, recent)
            .into_iter()
            .flatten()
            .collect()
    }

    /// `labels` split by family into interned blocks, by family. A run of labels equal to one of
    /// `recent`'s blocks is that block, without interning a string. With `id`, a container id of
    /// the packed shape is left out of the blocks and interned into it instead (`PackedId`).
    pub(crate) fn family_blocks(
        &self,
        labels: &LabelSet,
        skip: Option<&str>,
        mut id: Option<&mut Option<Id>>,
        recent: &mut Recent,
    ) -> Families {
        let mut runs: [Vec<(&str, &str)>; FAMILIES] = Default::default();
        for (k, v) in labels {
            if skip == Some(k.as_str()) {
                continue;
            }
            if k == CONTAINER_ID
                && let Some(slot) = id.as_deref_mut()
                && let Some(packed) = PackedId::pack(v)
            {
                *slot = Some(self.id(packed));
                continue;
            }
            runs[family(k)].push((k, v));
        }
        runs.map(|run| {
            if run.is_empty() {
                return None;
            }
            // A table without slots (`Recent::none`) is not worth the hash.
            let hash = recent.is_on().then(|| recent.hash(&run));
            if let Some(b) = hash.and_then(|h| recent.get(h, &run)) {
                return Some(b);
            }
            let pairs: Vec<(Sym, Sym)> = run
                .iter()
                .map(|(k, v)| (self.sym(k), self.sym(v)))
                .collect();
            let b = self.block(&pairs);
            if let Some(h) = hash {
                recent.put(h, &b);
            }
            Some(b)
        })
    }

    /// One block of two blocks' labels (a target's own and its pod's, should they ever share a
    /// family), the second's winning on equal names as a `LabelSet` extend would.
    pub(crate) fn merge(&self, a: &Block, b: &Block) -> Block {
        let mut pairs: Vec<(Sym, Sym)> = a
            .pairs()
            .iter()
            .filter(|(k, _)| !b.pairs().iter().any(|(bk, _)| Sym::ptr_eq(k, bk)))
            .cloned()
            .collect();
        pairs.extend(b.pairs().iter().cloned());
        pairs.sort_by(|x, y| x.0.cmp(&y.0));
        self.block(&pairs)
    }

    /// Drops strings and blocks nothing else holds any more, once either table doubled since the last
    /// sweep: churn (pod names, IPs, uids) must not grow it for ever.
    pub fn maybe_sweep(&mut self) {
        let (syms, blocks) = self.swept;
        let (now_syms, now_blocks) = self.len();
        if now_syms < 2 * syms.max(4096) && now_blocks < 2 * blocks.max(4096) {
            return;
        }
        // Blocks first: a dropped block releases its strings.
        retain(&mut self.blocks, |b| !b.unused());
        // A static string (arcstr's empty one) is never dropped, nor counted.
        retain(&mut self.syms, |s| {
            Sym::strong_count(s).is_none_or(|n| n > 1)
        });
        retain(&mut self.ids, |id| !id.is_unique());
        self.swept = self.len();
    }

    /// Strings (container ids included) and blocks held (for metrics and tests).
    pub fn len(&self) -> (usize, usize) {
        fn count<T>(shards: &[Shard<T>]) -> usize {
            shards
                .iter()
                .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
                .sum()
        }
        (count(&self.syms) + count(&self.ids), count(&self.blocks))
    }
}

/// A label set's blocks by family (`None` where it has no label of that family).
pub(crate) type Families = [Option<Block>; FAMILIES];

/// The blocks one build worker made or met last, by the hash of their labels' text: most of a
/// target's labels come in runs that the neighbouring groups repeat (a workload's replicas share their
/// labels, annotations and controller; the targets of one port share their container and port
/// labels), and a run found here is its block at the cost of hashing and comparing its text, without
/// a string interned or a shared table's lock taken. NB: interning each string cost ~17 % of a first
/// sync at `k8s-limits`, most of it the shared tables' locks and cache misses. Direct-mapped: a newer
/// block takes its slot.
#[derive(Debug)]
pub struct Recent {
    slots: Vec<Option<(u64, Block)>>,
    hasher: foldhash::fast::FixedState,
}

impl Default for Recent {
    /// A worker's cache.
    fn default() -> Recent {
        Recent::with_slots(Recent::SLOTS)
    }
}

impl Recent {
    pub(crate) const SLOTS: usize = 4096;

    /// No cache: every run is interned (one-off groups, where a table would cost more than it saves).
    pub fn none() -> Recent {
        Recent::with_slots(0)
    }

    /// A cache for a batch of `groups` groups: a watch event's few groups need a few slots, not the
    /// 64 KiB a worker's table takes.
    pub fn for_groups(groups: usize) -> Recent {
        Recent::with_slots(
            groups
                .saturating_mul(16)
                .next_power_of_two()
                .clamp(16, Recent::SLOTS),
        )
    }

    pub(crate) fn with_slots(n: usize) -> Recent {
        debug_assert!(n == 0 || n.is_power_of_two());
        Recent {
            slots: (0..n).map(|_| None).collect(),
            hasher: foldhash::fast::FixedState::default(),
        }
    }

    /// Whether the table has slots to look in.
    fn is_on(&self) -> bool {
        !self.slots.is_empty()
    }

    pub(crate) fn hash(&self, run: &[(&str, &str)]) -> u64 {
        let mut h = self.hasher.build_hasher();
        for (k, v) in run {
            // 0xff never occurs in UTF-8: the separators keep ("ab", "c") apart from ("a", "bc").
            h.write(k.as_bytes());
            h.write_u8(0xff);
            h.write(v.as_bytes());
            h.write_u8(0xff);
        }
        h.finish()
    }

    fn slot(&self, hash: u64) -> Option<usize> {
        (!self.slots.is_empty()).then(|| hash as usize & (self.slots.len() - 1))
    }

    pub(crate) fn get(&self, hash: u64, run: &[(&str, &str)]) -> Option<Block> {
        let (h, b) = self.slots[self.slot(hash)?].as_ref()?;
        let same = *h == hash
            && b.pairs().len() == run.len()
            && b.pairs()
                .iter()
                .zip(run)
                .all(|((bk, bv), (k, v))| **bk == **k && **bv == **v);
        same.then(|| b.clone())
    }

    fn put(&mut self, hash: u64, b: &Block) {
        if let Some(i) = self.slot(hash) {
            self.slots[i] = Some((hash, b.clone()));
        }
    }
}
