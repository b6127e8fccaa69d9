//! Compact forms of what a store keeps per object: its JSON ([`Json`], compressed alone or against
//! a sibling's) and its protobuf ([`Proto`]); its labels and fields are packed in `selectable`
//! (re-exported here).
//!
//! NB: written by hand for memory: a store holds these for every object of a cluster.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

pub use crate::selectable::{Fields, Labels, OWN_FIELDS};

/// An object's JSON as a store holds it: as received (`plain`), or LZ4-compressed (`compress`,
/// about half the size for Kubernetes objects) and decompressed each time it is read, alone or
/// against a sibling's JSON (`against`, see `siblings`).
#[derive(Clone)]
pub struct Json(Repr);

#[derive(Clone)]
enum Repr {
    Plain(Bytes),
    /// An LZ4 block and the length it decompresses to.
    Lz4 {
        block: Box<[u8]>,
        len: u32,
    },
    /// A zstd frame compressed with `base`'s JSON as its dictionary: only what differs from it.
    Against {
        block: Box<[u8]>,
        len: u32,
        base: Arc<Base>,
    },
    /// A zstd frame compressed with its resource's dictionary (`Dict`): how a family's base is held
    /// once the resource has one.
    Zstd {
        block: Box<[u8]>,
        len: u32,
        dict: Arc<Dict>,
    },
}

/// A resource's zstd dictionary: the JSON of its first objects, back to back, as raw content
/// (`siblings::Siblings` makes it). The bases of families, and every object of a resource whose
/// objects have no family (each Service, Endpoints and EndpointSlice is its own base), are held
/// zstd-compressed against it.
///
/// NB: measured on `k8s-limits` (DESIGN-NOTES section 10): the bases held 13.3 → 6.3 MB for
/// Endpoints, 15.3 → 6.3 MB for EndpointSlices, 3.3 → 0.8 MB for Services and 16.9 → 4.8 MB for
/// Pods against LZ4 alone; a base decompresses in a few microseconds, and at most once per thread
/// while a list reads its family.
pub struct Dict {
    cdict: zstd::zstd_safe::CDict<'static>,
    ddict: zstd::zstd_safe::DDict<'static>,
    len: usize,
}

/// zstd's level for dictionary blocks: on objects of a few kilobytes with a dictionary, levels 1
/// and 3 keep the same bytes within 2 %, and 1 compresses faster.
const DICT_LEVEL: i32 = 1;

impl Dict {
    /// A dictionary of `content` (raw: any bytes like what will be compressed). NB: content that
    /// began with zstd's dictionary magic (`37 A4 30 EC`) would be read as a trained dictionary;
    /// JSON begins with `{`, so the stores' never does.
    pub fn new(content: &[u8]) -> Dict {
        Dict {
            cdict: zstd::zstd_safe::CDict::create(content, DICT_LEVEL),
            ddict: zstd::zstd_safe::DDict::create(content),
            len: content.len(),
        }
    }

    /// The dictionary's content length.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn compress(&self, bytes: &[u8]) -> Box<[u8]> {
        thread_local! {
            static CCTX: RefCell<zstd::zstd_safe::CCtx<'static>> =
                RefCell::new(zstd::zstd_safe::CCtx::create());
        }
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(bytes.len()));
        CCTX.with(|c| {
            c.borrow_mut()
                .compress_using_cdict(&mut out, bytes, &self.cdict)
                // Compressing into a buffer of `compress_bound` bytes cannot run out of room.
                .expect("zstd compresses into a buffer of its bound");
        });
        out.into_boxed_slice()
    }

    /// Decompresses `block` into `out`, which must be exactly as long as what it was compressed
    /// from; the bytes written.
    fn decompress_into(&self, block: &[u8], out: &mut [u8]) -> usize {
        thread_local! {
            static DCTX: RefCell<zstd::zstd_safe::DCtx<'static>> =
                RefCell::new(zstd::zstd_safe::DCtx::create());
        }
        DCTX.with(|d| {
            d.borrow_mut()
                .decompress_using_ddict(out, block, &self.ddict)
                .expect("a frame this store compressed decompresses")
        })
    }
}

impl fmt::Debug for Dict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dict").field("len", &self.len).finish()
    }
}

/// Which of a base's dictionaries a member frame is compressed against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Of {
    /// The base's JSON.
    Json,
    /// The family's protobuf dictionary (`Base::offer_proto`).
    Proto,
}

/// The JSON of one object of a family (`siblings::Siblings`), held compressed (against its
/// resource's dictionary when there is one, LZ4 alone before), that its siblings are compressed
/// against.
pub struct Base {
    /// Unique for the process's life: what a thread's decompressed copy is known by (an address
    /// could be reused by a later base).
    id: u64,
    json: Json,
    /// The family's protobuf dictionary: the protobuf of the first member whose protobuf was held
    /// (`Json::pack_proto`), held as the base's JSON is (against the resource's dictionary once
    /// there is one). NB: any bytes serve as a raw dictionary; taking a member's spares encoding the
    /// base's JSON a second time, and for a family of one (each Service, EndpointSlice, Node) it
    /// is that object's own.
    proto: OnceLock<Json>,
}

impl Base {
    /// A base holding `json` LZ4-compressed.
    pub fn new(json: &[u8]) -> Base {
        Base::with(Json::compress(json))
    }

    /// A base holding `json` compressed against `dict`.
    pub fn with_dict(json: &[u8], dict: &Arc<Dict>) -> Base {
        Base::with(Json::with_dict(json, dict))
    }

    fn with(json: Json) -> Base {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Base {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            json,
            proto: OnceLock::new(),
        }
    }

    /// What the base holds (its compressed size).
    pub fn held_len(&self) -> usize {
        self.json.held_len()
    }

    /// `bytes` as one zstd frame with the base's JSON (`Of::Json`) or the family's protobuf
    /// dictionary (`Of::Proto`, `offer_proto` first) as its dictionary. NB: zstd, not LZ4 (the
    /// members of `k8s-limits`'s ReplicaSets: 42.7 → 25.7 MB of JSON, DESIGN-NOTES section 10; a Pod's
    /// protobuf against its family's, offline at a tenth of `k8s-limits`: 202 bytes of 2,060, section
    /// 7); each thread keeps a context per `Of` with the dictionary loaded, so the members of one family, which
    /// lists and relists read one after the other, load it once.
    fn compress_member(&self, of: Of, bytes: &[u8]) -> Box<[u8]> {
        thread_local! {
            static CCTX: RefCell<[(u64, zstd::zstd_safe::CCtx<'static>); 2]> =
                RefCell::new([(0, member_cctx()), (0, member_cctx())]);
        }
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(bytes.len()));
        CCTX.with_borrow_mut(|ctxs| {
            let (loaded, c) = &mut ctxs[of as usize];
            if *loaded != self.id {
                self.with_dictionary(of, |dict| c.load_dictionary(dict))
                    .expect("zstd loads any bytes as a raw dictionary");
                *loaded = self.id;
            }
            c.compress2(&mut out, bytes)
                .expect("compressing into a buffer of zstd's bound succeeds");
        });
        out.into_boxed_slice()
    }

    /// Decompresses a member's frame (`compress_member` with the same `of`) into `out`, exactly as
    /// long as what it was compressed from; the bytes written.
    fn decompress_member(&self, of: Of, block: &[u8], out: &mut [u8]) -> usize {
        thread_local! {
            static DCTX: RefCell<[(u64, zstd::zstd_safe::DCtx<'static>); 2]> = RefCell::new([
                (0, zstd::zstd_safe::DCtx::create()),
                (0, zstd::zstd_safe::DCtx::create()),
            ]);
        }
        DCTX.with_borrow_mut(|ctxs| {
            let (loaded, d) = &mut ctxs[of as usize];
            if *loaded != self.id {
                self.with_dictionary(of, |dict| d.load_dictionary(dict))
                    .expect("zstd loads any bytes as a raw dictionary");
                *loaded = self.id;
            }
            d.decompress(out, block)
                .expect("a frame this store compressed decompresses")
        })
    }

    /// Calls `f` with the dictionary `of` names, expanded once per thread while the thread reads
    /// members of the same base (a list reads a family's members one after the other). Empty for
    /// `Of::Proto` before a member offered one (never, for a frame made here).
    fn with_dictionary<R>(&self, of: Of, f: impl FnOnce(&[u8]) -> R) -> R {
        thread_local! {
            /// One per `Of`: a member's JSON and protobuf are read in turn when its protobuf is made.
            static LAST: RefCell<[(u64, Vec<u8>); 2]> =
                const { RefCell::new([(0, Vec::new()), (0, Vec::new())]) };
        }
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            let (id, bytes) = &mut last[of as usize];
            if *id != self.id {
                bytes.clear();
                match of {
                    Of::Json => self.json.append_to(bytes),
                    Of::Proto => {
                        if let Some(p) = self.proto.get() {
                            p.append_to(bytes);
                        }
                    }
                }
                *id = self.id;
            }
            f(bytes)
        })
    }

    /// Makes `proto`, a member's protobuf, the family's protobuf dictionary unless it has one;
    /// whether it did.
    fn offer_proto(&self, proto: &[u8]) -> bool {
        let mut made = false;
        self.proto.get_or_init(|| {
            made = true;
            match &self.json.0 {
                Repr::Zstd { dict, .. } => Json::with_dict(proto, dict),
                _ => Json::compress(proto),
            }
        });
        made
    }

    /// What the family's protobuf dictionary holds, once offered.
    pub fn proto_held_len(&self) -> usize {
        self.proto.get().map_or(0, Json::held_len)
    }
}

/// A compression context for family members: zstd level 1 (levels 3 and up keep no less here, and
/// the negative levels keep 40 % more).
fn member_cctx() -> zstd::zstd_safe::CCtx<'static> {
    let mut c = zstd::zstd_safe::CCtx::create();
    c.set_parameter(zstd::zstd_safe::CParameter::CompressionLevel(DICT_LEVEL))
        .expect("level 1 is a valid zstd level");
    c
}

impl fmt::Debug for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Base")
            .field("id", &self.id)
            .field("json", &self.json)
            .finish()
    }
}

impl Json {
    /// The bytes as they are.
    pub fn plain(bytes: Bytes) -> Json {
        Json(Repr::Plain(bytes))
    }

    /// The bytes compressed (empty ones stay plain: nothing to save).
    pub fn compress(bytes: &[u8]) -> Json {
        Json::packed(bytes, |len| Repr::Lz4 {
            block: lz4_flex::block::compress(bytes).into_boxed_slice(),
            len,
        })
    }

    /// `bytes` in the form `pack` makes of them (given their length); plain when empty (nothing to
    /// save) or of 4 GiB or more (the lengths are 32-bit).
    fn packed(bytes: &[u8], pack: impl FnOnce(u32) -> Repr) -> Json {
        match u32::try_from(bytes.len()) {
            Ok(len) if len > 0 => Json(pack(len)),
            _ => Json(Repr::Plain(Bytes::copy_from_slice(bytes))),
        }
    }

    /// The bytes compressed with `base`'s JSON as the dictionary: a few percent of their size
    /// when they differ from it only in names, uids, addresses and times (a ReplicaSet's pods).
    pub fn against(bytes: &[u8], base: &Arc<Base>) -> Json {
        Json::packed(bytes, |len| Repr::Against {
            block: base.compress_member(Of::Json, bytes),
            len,
            base: base.clone(),
        })
    }

    /// The bytes compressed with zstd against `dict` (empty ones stay plain).
    pub fn with_dict(bytes: &[u8], dict: &Arc<Dict>) -> Json {
        Json::packed(bytes, |len| Repr::Zstd {
            block: dict.compress(bytes),
            len,
            dict: dict.clone(),
        })
    }

    /// Other bytes held in this one's form (a changed version of the same object).
    pub fn like(&self, bytes: Vec<u8>) -> Json {
        match &self.0 {
            Repr::Plain(_) => Json::plain(Bytes::from(bytes)),
            Repr::Lz4 { .. } => Json::compress(&bytes),
            Repr::Against { base, .. } => Json::against(&bytes, base),
            Repr::Zstd { dict, .. } => Json::with_dict(&bytes, dict),
        }
    }

    pub fn is_compressed(&self) -> bool {
        !matches!(self.0, Repr::Plain(_))
    }

    /// The base this JSON is compressed against, if any.
    pub fn base(&self) -> Option<&Arc<Base>> {
        match &self.0 {
            Repr::Against { base, .. } => Some(base),
            _ => None,
        }
    }

    /// The length of the JSON (not of its compressed form).
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Plain(b) => b.len(),
            Repr::Lz4 { len, .. } | Repr::Against { len, .. } | Repr::Zstd { len, .. } => {
                *len as usize
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the store holds for it (the compressed size when compressed; a base is shared, and
    /// not counted here).
    pub fn held_len(&self) -> usize {
        match &self.0 {
            Repr::Plain(b) => b.len(),
            Repr::Lz4 { block, .. } | Repr::Against { block, .. } | Repr::Zstd { block, .. } => {
                block.len()
            }
        }
    }

    /// The JSON: borrowed when plain, decompressed otherwise.
    pub fn get(&self) -> Cow<'_, [u8]> {
        match &self.0 {
            Repr::Plain(b) => Cow::Borrowed(b),
            Repr::Lz4 { len, .. } | Repr::Against { len, .. } | Repr::Zstd { len, .. } => {
                let mut out = Vec::with_capacity(*len as usize);
                self.append_to(&mut out);
                Cow::Owned(out)
            }
        }
    }

    /// The JSON as `Bytes` (shared, not copied, when plain).
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            Repr::Plain(b) => b.clone(),
            Repr::Lz4 { .. } | Repr::Against { .. } | Repr::Zstd { .. } => {
                Bytes::from(self.get().into_owned())
            }
        }
    }

    /// Appends the JSON to `out`: a list decompresses each object straight into its body.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        match &self.0 {
            Repr::Plain(b) => out.extend_from_slice(b),
            Repr::Lz4 { block, len } => {
                let start = out.len();
                out.resize(start + *len as usize, 0);
                // The block was compressed from `len` bytes here: it decompresses to exactly that.
                let n = lz4_flex::block::decompress_into(block, &mut out[start..])
                    .expect("a block this store compressed decompresses");
                debug_assert_eq!(n, *len as usize);
            }
            Repr::Against { block, len, base } => {
                let start = out.len();
                out.resize(start + *len as usize, 0);
                // As above, with the dictionary it was compressed with.
                let n = base.decompress_member(Of::Json, block, &mut out[start..]);
                debug_assert_eq!(n, *len as usize);
            }
            Repr::Zstd { block, len, dict } => {
                let start = out.len();
                out.resize(start + *len as usize, 0);
                let n = dict.decompress_into(block, &mut out[start..]);
                debug_assert_eq!(n, *len as usize);
            }
        }
    }
}

/// An object's protobuf message held in the form of its JSON (`Json::pack_proto`): compressed
/// against its family base's protobuf or its resource's dictionary, or as encoded. Only the `Json`
/// it was packed by expands it.
#[derive(Debug)]
pub struct Proto(ProtoRepr);

#[derive(Debug)]
enum ProtoRepr {
    Plain(Box<[u8]>),
    /// One zstd frame, against what the JSON it belongs to is held against.
    Packed {
        block: Box<[u8]>,
        len: u32,
    },
    /// The family's protobuf dictionary itself: this object's protobuf made it (nothing more held:
    /// a family of one, each Service or EndpointSlice, holds its protobuf once).
    Donor {
        len: u32,
    },
}

impl Proto {
    /// The message's length (not its held form's).
    pub fn len(&self) -> usize {
        match &self.0 {
            ProtoRepr::Plain(b) => b.len(),
            ProtoRepr::Packed { len, .. } | ProtoRepr::Donor { len } => *len as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What is held for it.
    pub fn held_len(&self) -> usize {
        match &self.0 {
            ProtoRepr::Plain(b) => b.len(),
            ProtoRepr::Packed { block, .. } => block.len(),
            ProtoRepr::Donor { .. } => 0,
        }
    }
}

impl Json {
    /// `proto`, this object's protobuf message, held as this JSON is: a family member's against its
    /// family's protobuf dictionary (`Base::offer_proto`), an object held against its resource's
    /// dictionary against that dictionary (it holds the same names and values), else as encoded.
    pub(crate) fn pack_proto(&self, proto: Vec<u8>) -> Proto {
        let len = match u32::try_from(proto.len()) {
            Ok(len) if len > 0 => len,
            _ => return Proto(ProtoRepr::Plain(proto.into_boxed_slice())),
        };
        let block = match &self.0 {
            Repr::Against { base, .. } => {
                if base.offer_proto(&proto) {
                    return Proto(ProtoRepr::Donor { len });
                }
                base.compress_member(Of::Proto, &proto)
            }
            Repr::Zstd { dict, .. } => dict.compress(&proto),
            Repr::Plain(_) | Repr::Lz4 { .. } => {
                return Proto(ProtoRepr::Plain(proto.into_boxed_slice()));
            }
        };
        Proto(ProtoRepr::Packed { block, len })
    }

    /// The protobuf `held` (packed by this JSON): borrowed when held as encoded.
    pub(crate) fn proto<'a>(&self, held: &'a Proto) -> Cow<'a, [u8]> {
        match &held.0 {
            ProtoRepr::Plain(b) => Cow::Borrowed(b),
            ProtoRepr::Packed { len, .. } | ProtoRepr::Donor { len } => {
                let mut out = Vec::with_capacity(*len as usize);
                self.append_proto(held, &mut out);
                Cow::Owned(out)
            }
        }
    }

    /// Appends the protobuf `held` (packed by this JSON) to `out`.
    pub(crate) fn append_proto(&self, held: &Proto, out: &mut Vec<u8>) {
        let (block, len) = match (&held.0, &self.0) {
            (ProtoRepr::Plain(b), _) => return out.extend_from_slice(b),
            (ProtoRepr::Donor { .. }, Repr::Against { base, .. }) => {
                return base.with_dictionary(Of::Proto, |p| out.extend_from_slice(p));
            }
            (ProtoRepr::Packed { block, len }, _) => (block, *len as usize),
            (ProtoRepr::Donor { .. }, _) => {
                unreachable!("only a family member donates its family's protobuf dictionary")
            }
        };
        let start = out.len();
        out.resize(start + len, 0);
        let n = match &self.0 {
            Repr::Against { base, .. } => {
                base.decompress_member(Of::Proto, block, &mut out[start..])
            }
            Repr::Zstd { dict, .. } => dict.decompress_into(block, &mut out[start..]),
            Repr::Plain(_) | Repr::Lz4 { .. } => {
                unreachable!(
                    "a protobuf is packed only by a JSON held against a base or dictionary"
                )
            }
        };
        debug_assert_eq!(n, len);
    }
}

impl From<Bytes> for Json {
    fn from(bytes: Bytes) -> Json {
        Json::plain(bytes)
    }
}

impl PartialEq for Json {
    fn eq(&self, other: &Json) -> bool {
        match (&self.0, &other.0) {
            (Repr::Plain(a), Repr::Plain(b)) => a == b,
            // LZ4 compression is deterministic, so equal blocks mean equal JSON and the converse.
            (Repr::Lz4 { block: a, .. }, Repr::Lz4 { block: b, .. }) => a == b,
            (
                Repr::Against {
                    block: a, base: x, ..
                },
                Repr::Against {
                    block: b, base: y, ..
                },
            ) if Arc::ptr_eq(x, y) => a == b,
            _ => self.len() == other.len() && self.get() == other.get(),
        }
    }
}

impl Eq for Json {}

impl fmt::Debug for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Json")
            .field("len", &self.len())
            .field("held", &self.held_len())
            .finish()
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn json_reads_back_as_given_compressed_or_not() {
        let raw = br#"{"metadata":{"name":"a","labels":{"app":"web","app2":"web"}},"spec":{}}"#;
        let (plain, lz4) = (Json::plain(Bytes::from_static(raw)), Json::compress(raw));
        assert!(lz4.is_compressed() && !plain.is_compressed());
        for j in [&plain, &lz4] {
            assert_eq!(j.len(), raw.len());
            assert_eq!(&*j.get(), raw);
            assert_eq!(&j.to_bytes()[..], raw);
            let mut out = b"[".to_vec();
            j.append_to(&mut out);
            assert_eq!(&out[1..], raw);
        }
        assert_eq!(plain, lz4);
        assert_eq!(lz4, Json::compress(raw));
        assert_ne!(lz4, Json::compress(b"{}"));
        assert_ne!(plain, Json::compress(b"{}"));
        assert!(lz4.like(b"{}".to_vec()).is_compressed());
        assert_eq!(&*plain.like(b"{}".to_vec()).get(), b"{}");
        let empty = Json::compress(b"");
        assert!(empty.is_empty() && empty.get().is_empty());
    }

    proptest! {
        #[test]
        fn compressed_json_round_trips(raw in proptest::collection::vec(any::<u8>(), 0..600)) {
            let j = Json::compress(&raw);
            prop_assert_eq!(&*j.get(), &raw[..]);
            prop_assert_eq!(j, Json::plain(Bytes::from(raw)));
        }
    }
}
