//! A body held as blocks: runs of whole groups' entries, each compressed with zstd on its own. A body is
//! held at a fraction of its size, sent by expanding one block at a time (never whole), and the next
//! generation of the same (job, shard) takes over every block whose groups did not change instead of
//! copying and compressing it again. The gzip form is made of the same blocks, each deflated on its
//! own and kept beside its zstd form (DESIGN-NOTES section 3).

use std::cell::RefCell;
use std::io::Write as _;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::DeflateEncoder;

/// A block is closed after the group that takes it past this many identity bytes. NB: small enough
/// that expanding one per response frame is quick and a changed group re-compresses little; large
/// enough that the compressor finds the label names and values the targets repeat (measured with
/// LZ4: 64 KiB blocks compress 3 % worse, 512 KiB ones 1 % better).
pub const BLOCK_BYTES: usize = 128 * 1024;

/// zstd's level for blocks: 1, its fastest standard level. NB: measured on one shard of the pod job
/// at `k8s-limits` (101 MB identity, 128 KiB blocks; `zstd -b1 -B131072`, `lz4 -b1`): zstd at level
/// 1 keeps 5.0 MB where LZ4 keeps 9.2 MB, compresses at ~1.2 GB/s and expands at 3.0–3.5 GB/s on the
/// 2-core VM; level 3 keeps no less at 128 KiB blocks (DESIGN-NOTES section 3).
const LEVEL: i32 = 1;

/// What a block costs besides its compressed bytes (the struct, its `Arc`, the body's pointer).
const BLOCK_OVERHEAD: usize = 104;

/// A body's dictionary is the first this many bytes of its first block: the entries of its first
/// groups, whose label names and values the later blocks repeat. NB: measured on one shard of each
/// job at `k8s-limits` (128 KiB blocks, level 1): pods 5.03 → 4.54 MB, EndpointSlices 4.17 → 3.59
/// MB; 32 or 64 KiB of dictionary kept no less, and cost more to prepare (DESIGN-NOTES section 3).
const DICT_BYTES: usize = 16 * 1024;
/// A first block shorter than this makes no dictionary (a small body gains nothing from one).
const DICT_MIN_BYTES: usize = 4 * 1024;

/// The zstd dictionary of a (job, shard)'s bodies: made from its first body's first block, and
/// handed from each generation to the next with the blocks it takes over, so every block of a body
/// expands with the dictionary it was compressed with.
pub struct Dict {
    cdict: zstd::zstd_safe::CDict<'static>,
    ddict: zstd::zstd_safe::DDict<'static>,
}

impl Dict {
    /// The dictionary of a body whose first block is `first`, if it is long enough to be worth one.
    /// NB: raw content (a block begins with `{` or `,`, never with zstd's dictionary magic).
    pub fn of(first: &[u8]) -> Option<Arc<Dict>> {
        if first.len() < DICT_MIN_BYTES {
            return None;
        }
        let content = &first[..first.len().min(DICT_BYTES)];
        Some(Arc::new(Dict {
            cdict: zstd::zstd_safe::CDict::create(content, LEVEL),
            ddict: zstd::zstd_safe::DDict::create(content),
        }))
    }

    /// Bytes the prepared dictionaries hold.
    pub fn held_bytes(&self) -> usize {
        zstd::zstd_safe::CDict::sizeof(&self.cdict) + zstd::zstd_safe::DDict::sizeof(&self.ddict)
    }
}

impl std::fmt::Debug for Dict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dict")
            .field("held_bytes", &self.held_bytes())
            .finish()
    }
}

/// gzip member header (RFC 1952): deflate, no flags, no mtime, no extra flags, OS unknown.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// A hot body's blocks, each expanded by the first response that reaches it and shared with every
/// later one.
#[derive(Debug)]
pub struct Expanded {
    pub(crate) blocks: Box<[OnceLock<Bytes>]>,
}

impl Expanded {
    /// A body of `blocks` blocks, none expanded yet.
    pub fn new(blocks: usize) -> Expanded {
        Expanded {
            blocks: (0..blocks).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Block `i` of the body, expanded (`block` is that block).
    pub fn block(&self, i: usize, block: &Block) -> Bytes {
        match self.blocks.get(i) {
            Some(cell) => cell.get_or_init(|| block.expand()).clone(),
            None => block.expand(),
        }
    }
}

/// One block: whole groups' entries, separated by commas, with a comma before the first one unless
/// it is the body's first entry.
#[derive(Debug)]
pub struct Block {
    raw_len: usize,
    /// One zstd frame, compressed against `dict` when there is one.
    packed: Box<[u8]>,
    dict: Option<Arc<Dict>>,
    targets: usize,
    leading_comma: bool,
    gzip: OnceLock<Deflated>,
}

/// A block deflated on its own, ending on a byte boundary without the final-block bit (a sync
/// flush), so deflated blocks concatenate into one deflate stream: the pigz technique.
#[derive(Debug)]
pub(crate) struct Deflated {
    pub(crate) bytes: Bytes,
    crc: u32,
}

impl Block {
    /// `raw`: the entries; `targets`: how many; `leading_comma`: whether `raw` starts with the comma
    /// that separates it from an earlier entry; `dict`: the body's dictionary, if it has one.
    pub fn compress(
        raw: &[u8],
        targets: usize,
        leading_comma: bool,
        dict: Option<&Arc<Dict>>,
    ) -> Block {
        Block {
            raw_len: raw.len(),
            packed: pack(raw, dict),
            dict: dict.cloned(),
            targets,
            leading_comma: leading_comma && targets > 0,
            gzip: OnceLock::new(),
        }
    }

    pub fn raw_len(&self) -> usize {
        self.raw_len
    }

    pub fn targets(&self) -> usize {
        self.targets
    }

    /// Whether the block can follow `targets_before` entries: its first entry has a comma before
    /// it exactly when some entry precedes it (a block without entries goes anywhere).
    pub fn fits_after(&self, targets_before: usize) -> bool {
        self.targets == 0 || self.leading_comma == (targets_before > 0)
    }

    /// The identity bytes, into `buf` (cleared first).
    pub fn expand_into(&self, buf: &mut Vec<u8>) {
        thread_local! {
            static UNPACK: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
                const { RefCell::new(None) };
        }
        buf.clear();
        buf.reserve(self.raw_len);
        let n = UNPACK.with_borrow_mut(|d| {
            let d = d.get_or_insert_with(zstd::zstd_safe::DCtx::create);
            // Writes from the start of `buf` (empty) into its capacity and sets its length.
            match &self.dict {
                Some(dict) => d.decompress_using_ddict(buf, &self.packed, &dict.ddict),
                None => d.decompress(buf, &self.packed),
            }
        });
        let n = n.expect("a block herald compressed itself expands");
        debug_assert_eq!(n, self.raw_len);
    }

    pub fn expand(&self) -> Bytes {
        let mut buf = Vec::new();
        self.expand_into(&mut buf);
        Bytes::from(buf)
    }

    /// Bytes the block keeps (its zstd form, its gzip form once made, its bookkeeping).
    pub fn held_bytes(&self) -> usize {
        BLOCK_OVERHEAD + self.packed.len() + self.gzip.get().map_or(0, |d| d.bytes.len())
    }

    /// Bytes the gzip form adds to `held_bytes` once made.
    pub fn gzip_bytes(&self) -> usize {
        self.gzip.get().map_or(0, |d| d.bytes.len())
    }

    pub(crate) fn deflated(&self) -> &Deflated {
        self.gzip.get_or_init(|| {
            let raw = self.expand();
            let mut crc = crc32fast::Hasher::new();
            crc.update(&raw);
            Deflated {
                bytes: deflate(&raw, false),
                crc: crc.finalize(),
            }
        })
    }
}

/// `raw` as one zstd frame (against `dict` if given), of exactly its compressed size. The context
/// and the output buffer are kept per thread: a block build compresses block after block.
fn pack(raw: &[u8], dict: Option<&Arc<Dict>>) -> Box<[u8]> {
    thread_local! {
        static PACK: RefCell<Option<(zstd::zstd_safe::CCtx<'static>, Vec<u8>)>> =
            const { RefCell::new(None) };
    }
    PACK.with_borrow_mut(|ctx| {
        let (c, out) = ctx.get_or_insert_with(|| (zstd::zstd_safe::CCtx::create(), Vec::new()));
        out.clear();
        out.reserve(zstd::zstd_safe::compress_bound(raw.len()));
        let n = match dict {
            Some(dict) => c.compress_using_cdict(out, raw, &dict.cdict),
            None => c.compress(out, raw, LEVEL),
        };
        n.expect("compressing into a buffer of zstd's bound succeeds");
        out.as_slice().into()
    })
}

/// zlib's level for gzip blocks: its default, 6. NB: a block is deflated once, when a gzip client
/// first asks for a body holding it, and kept; a body's next generation takes over its unchanged
/// blocks with their deflated form, so the level costs CPU once per block, not per response.
/// Measured on one shard of each job at `k8s-limits` (flate2 with zlib-rs, 128 KiB blocks, 2-core
/// VM): level 1 keeps 9.0 MB (pods, 100.6 MB identity) and 10.3 MB (EndpointSlices, 118.3 MB) at
/// ~300 MB/s; level 6 keeps 5.5 and 4.2 MB at ~120 MB/s (DESIGN-NOTES section 3).
const GZIP_LEVEL: u32 = 6;

/// `raw` deflated on its own: ended by a sync flush (more may follow), or `last` (final block).
fn deflate(raw: &[u8], last: bool) -> Bytes {
    let mut enc = DeflateEncoder::new(
        Vec::with_capacity(raw.len() / 4 + 64),
        Compression::new(GZIP_LEVEL),
    );
    enc.write_all(raw)
        .expect("writing to an in-memory deflate encoder cannot fail");
    let out = if last {
        enc.finish()
            .expect("finishing an in-memory deflate encoder cannot fail")
    } else {
        enc.flush()
            .expect("flushing an in-memory deflate encoder cannot fail");
        // NB: taken before the encoder drops: dropping it writes a final block into what it holds.
        std::mem::take(enc.get_mut())
    };
    // NB: `Bytes::from(Vec)` keeps the Vec's capacity, and a block deflates to well under the quarter
    // reserved above: held as is, a kept gzip block cost that quarter, not its length (heaptrack of
    // the steady state at k8s-limits: 105 MB live at this site, for two gzip consumers).
    Bytes::from(out.into_boxed_slice())
}

/// A body's gzip form besides its blocks' deflated bytes: the header with `[`, and `]` with the
/// final block and the trailer (CRC-32 and length of the identity body).
#[derive(Debug)]
pub struct GzipForm {
    pub(crate) head: Bytes,
    pub(crate) tail: Bytes,
    len: usize,
}

impl GzipForm {
    /// Deflates every block of `blocks` not deflated yet (blocks taken over from an earlier
    /// generation usually are).
    pub fn make(blocks: &[Arc<Block>]) -> GzipForm {
        let mut crc = crc32fast::Hasher::new();
        crc.update(b"[");
        let mut len = 0;
        let mut raw_len: u64 = 1;
        for b in blocks {
            let d = b.deflated();
            crc.combine(&crc32fast::Hasher::new_with_initial_len(
                d.crc,
                b.raw_len as u64,
            ));
            len += d.bytes.len();
            raw_len += b.raw_len as u64;
        }
        crc.update(b"]");
        raw_len += 1;
        let mut head = GZIP_HEADER.to_vec();
        head.extend_from_slice(&deflate(b"[", false));
        let mut tail = deflate(b"]", true).to_vec();
        tail.extend_from_slice(&crc.finalize().to_le_bytes());
        // ISIZE: the length modulo 2^32 (RFC 1952).
        tail.extend_from_slice(&(raw_len as u32).to_le_bytes());
        len += head.len() + tail.len();
        GzipForm {
            head: Bytes::from(head),
            tail: Bytes::from(tail),
            len,
        }
    }

    /// The whole gzip body's length.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held besides the blocks' deflated forms.
    pub fn held_bytes(&self) -> usize {
        self.head.len() + self.tail.len() + 64
    }

    /// The whole gzip body in one buffer (a hot body's, `hot_bodies::HotBodies`), from `blocks`, the
    /// blocks this form was made of.
    pub fn whole(&self, blocks: &[Arc<Block>]) -> Bytes {
        let mut out = Vec::with_capacity(self.len);
        out.extend_from_slice(&self.head);
        for b in blocks {
            out.extend_from_slice(&b.deflated().bytes);
        }
        out.extend_from_slice(&self.tail);
        debug_assert_eq!(out.len(), self.len);
        Bytes::from(out)
    }
}
