//! Kubernetes' protobuf wire format for the built-in kinds (`application/vnd.kubernetes.protobuf`):
//! the JSON objects a store holds transcoded into the bytes apimachinery's protobuf serializer writes
//! for the same object, so client-go decodes what it would get from the apiserver.
//!
//! - Objects: `k8s\0` and a `runtime.Unknown` envelope (typeMeta, raw, contentEncoding "",
//!   contentType ""; k8s.io/apimachinery pkg/runtime/serializer/protobuf `Serializer.doEncode` and
//!   pkg/runtime/types_proto.go `NestedMarshalTo`).
//! - Lists: the same envelope around `{ListMeta metadata = 1; repeated T items = 2}`; each item is the
//!   object's own encoding, so a list is assembled from the per-object bytes like the JSON one.
//! - Watches (`;stream=watch`): each event a 4-byte big-endian length and a `metav1.WatchEvent`
//!   `{type = 1; RawExtension object = 2}` written raw, its object enveloped as above
//!   (k8s.io/apiserver pkg/endpoints/handlers/response.go `watchEncoder.doEncode`; the stream
//!   serializer is the raw one and the framer length-delimited).
//!
//! The field numbers, JSON names and Go shapes come from `proto/schema.txt`, generated from the Go
//! types of k8s.io/api v0.37.2 by `peers/cmd/protoschema` (a test regenerates it and compares). What
//! the gogo marshallers of those types do, and this encoder does too:
//! - fields in field-number order; a non-pointer scalar or struct field is always written (zero
//!   values too), a pointer only when set, a slice element by element, a map (when not empty) one
//!   entry per key in sorted key order with its key and value always written (a `[]byte` value only
//!   when not null);
//! - `metav1.Time` is `{seconds = 1; nanos = 2}` with nanos always 0, and the zero time an empty
//!   message; `MicroTime` keeps microseconds; `resource.Quantity` is `{string = 1}` in its canonical
//!   form (`quantity::canonical`); `IntOrString` is `{type = 1; intVal = 2; strVal = 3}`;
//!   `RawExtension` and `FieldsV1` carry the JSON text of their value as it was received.
//!
//! NB: written by hand, rather than with prost types, because herald holds objects as the JSON its
//! upstream sent and encodes each object version at most once per format: a schema-driven transcoder
//! goes from those bytes to the wire bytes in one pass, without decoding into typed structs, and it
//! keeps the gogo marshallers' presence rules (which prost's proto2 Options cannot express for
//! non-pointer Go fields) exactly. The encoder never fails: a JSON value of the wrong shape is
//! treated as absent, so a malformed upstream object still yields a well-formed message.
//!
//! How (issue 21, where the first encoder, over serde_json `RawValue` maps with a buffer per nested
//! message, made the first protobuf list of 15,000 Pods 858 ms against 111 ms for JSON): `json`
//! tokenizes the object once onto a flat tape; `encode` walks it in field order, finding each
//! message's members through a small per-message key table into a slot frame, writing nested
//! messages in place with their lengths fixed up after, and runs of absent fields from bytes made
//! once per message. Its output is the first encoder's, byte for byte (`proto/tests.rs` keeps that
//! one as the reference and compares them on generated, broken and real objects).

mod encode;
mod json;
mod quantity;

use std::collections::HashMap;
use std::sync::LazyLock;

use bytes::Bytes;

pub use quantity::canonical as canonical_quantity;

/// The content type of objects and lists.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The content type of watch streams.
pub const WATCH_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// The four bytes every enveloped object starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

const SCHEMA_TEXT: &str = include_str!("proto/schema.txt");

/// A message of the schema.
pub type MsgId = usize;

#[derive(Debug, Clone, PartialEq)]
enum Ty {
    Str,
    Bool,
    I32,
    I64,
    F64,
    Bytes,
    Time,
    MicroTime,
    Quantity,
    IntOrString,
    Raw,
    FieldsV1,
    Msg(MsgId),
    Map(Box<Ty>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Presence {
    /// Always written (a non-pointer Go field).
    Plain,
    /// Written when set (a pointer).
    Ptr,
    /// Each element (a slice).
    Rep,
}

#[derive(Debug)]
struct Field {
    num: u32,
    /// None for an inline struct, whose JSON fields sit in the parent object.
    json: Option<String>,
    presence: Presence,
    ty: Ty,
    /// Where the field's value is in its message's slot frame (`Encoder::slots`); for an inline
    /// struct, where the struct's own frame starts inside its parent's.
    slot: u32,
    /// For an inline struct that is a pointer: the slot any of its JSON keys marks (Go allocates
    /// the embedded pointer when one of its fields is decoded); `NONE` otherwise.
    present: u32,
}

#[derive(Debug)]
struct Message {
    name: String,
    fields: Vec<Field>,
    /// Slots in the message's frame: its JSON fields and those of its inline structs, and their
    /// presence slots.
    flat_len: u32,
    /// JSON name (of the message or of an inline struct in it) → the range of `targets` holding
    /// the slots that name's value goes to (usually one).
    keys: KeyTable,
    targets: Vec<u32>,
    /// What each field writes when its value is absent or null, one after the other, and where
    /// field i's bytes start (`absent_at[i]`, and the end last): the zero value of a plain field
    /// (a nested message's included), nothing for a pointer, a slice or a map. Inline structs
    /// write nothing here (the encoder writes them from the object).
    ///
    /// NB: most fields of most objects are absent (a Pod sets a few of a Container's twenty-odd
    /// fields), and Go writes the zero value of every plain one: copying runs of them at once
    /// rather than encoding each was a quarter of the encoder's time.
    absent: Vec<u8>,
    absent_at: Vec<u32>,
}

impl Message {
    /// The bytes of fields `from..to` all absent.
    fn absent_between(&self, from: usize, to: usize) -> &[u8] {
        &self.absent[self.absent_at[from] as usize..self.absent_at[to] as usize]
    }
}

/// A message's JSON names, looked up once per member of every object encoded.
///
/// NB: hand-written for speed (issue 21): a `HashMap` hashed every byte of the name (SipHash, or
/// FNV's multiply per byte) and that was the encoder's largest cost; here the hash reads the
/// name's length and three of its bytes, and the table is kept at most a quarter full, so a
/// lookup is one or two probes and one comparison.
#[derive(Debug, Default)]
struct KeyTable {
    /// 1 + an index into `names`, or 0 for an empty place; a power of two long.
    index: Vec<u16>,
    /// Name, and the range of `Message::targets` it sends its value to.
    names: Vec<(Box<[u8]>, u32, u32)>,
}

impl KeyTable {
    fn hash(k: &[u8]) -> usize {
        let n = k.len();
        let Some(&first) = k.first() else { return 0 };
        let h = n.wrapping_mul(0x9e37_79b9)
            ^ usize::from(first).wrapping_mul(0x85eb_ca6b)
            ^ usize::from(k[n - 1]).wrapping_mul(0xc2b2_ae35)
            ^ usize::from(k[n / 2]).wrapping_mul(0x27d4_eb2f);
        h ^ (h >> 15)
    }

    /// Builds the table from (name, slot) pairs sorted by name.
    fn new(keyed: &[(Box<[u8]>, u32)], targets: &mut Vec<u32>) -> KeyTable {
        let mut names: Vec<(Box<[u8]>, u32, u32)> = Vec::new();
        for (k, t) in keyed {
            let at = targets.len() as u32;
            targets.push(*t);
            match names.last_mut() {
                Some(last) if last.0 == *k => last.2 += 1,
                _ => names.push((k.clone(), at, 1)),
            }
        }
        let mut index = vec![0u16; (names.len() * 4).next_power_of_two().max(8)];
        let mask = index.len() - 1;
        for (n, (k, _, _)) in names.iter().enumerate() {
            let mut i = Self::hash(k) & mask;
            while index[i] != 0 {
                i = (i + 1) & mask;
            }
            index[i] = u16::try_from(n + 1).expect("fewer than 65,535 names in a message");
        }
        KeyTable { index, names }
    }

    /// The range of `targets` for name `k`.
    fn get(&self, k: &[u8]) -> Option<(u32, u32)> {
        let mask = self.index.len().checked_sub(1)?;
        let mut i = Self::hash(k) & mask;
        loop {
            let (name, from, n) = self.names.get(usize::from(self.index[i]).checked_sub(1)?)?;
            if **name == *k {
                return Some((*from, *n));
            }
            i = (i + 1) & mask;
        }
    }
}

/// The parsed schema: messages and the kinds served as them.
#[derive(Debug)]
pub struct Schema {
    msgs: Vec<Message>,
    by_name: HashMap<String, MsgId>,
    kinds: HashMap<(String, String), MsgId>,
}

static ENCODED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Objects encoded in protobuf so far, by every store of this process (each object version at most
/// once).
pub fn encoded_total() -> u64 {
    ENCODED.load(std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn count_encoded() {
    ENCODED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// The embedded schema (parsed on first use).
pub fn schema() -> &'static Schema {
    static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
        Schema::parse(SCHEMA_TEXT).unwrap_or_else(|e| panic!("embedded proto schema: {e}"))
    });
    &SCHEMA
}

impl Schema {
    /// Parses the text `peers/cmd/protoschema` prints.
    pub fn parse(text: &str) -> Result<Schema, String> {
        let mut names: HashMap<String, MsgId> = HashMap::new();
        for l in text.lines() {
            if let Some(n) = l.strip_prefix("M ") {
                let id = names.len();
                names.insert(n.to_string(), id);
            }
        }
        let mut msgs: Vec<Message> = Vec::with_capacity(names.len());
        let mut kinds = HashMap::new();
        for (i, l) in text.lines().enumerate() {
            let err = |m: &str| format!("line {}: {m}: {l:?}", i + 1);
            let parts: Vec<&str> = l.split(' ').collect();
            match parts.as_slice() {
                ["#", ..] | [""] => {}
                ["K", api_version, kind, msg] => {
                    let id = *names.get(*msg).ok_or_else(|| err("unknown message"))?;
                    kinds.insert((api_version.to_string(), kind.to_string()), id);
                }
                ["M", name] => msgs.push(Message {
                    name: name.to_string(),
                    fields: Vec::new(),
                    flat_len: 0,
                    keys: KeyTable::default(),
                    targets: Vec::new(),
                    absent: Vec::new(),
                    absent_at: Vec::new(),
                }),
                ["F", num, json, flags, ty] => {
                    let m = msgs
                        .last_mut()
                        .ok_or_else(|| err("field outside a message"))?;
                    let num: u32 = num.parse().map_err(|_| err("bad field number"))?;
                    let presence = match *flags {
                        "-" => Presence::Plain,
                        "p" => Presence::Ptr,
                        "r" => Presence::Rep,
                        _ => return Err(err("bad flags")),
                    };
                    let ty = parse_ty(ty, &names).ok_or_else(|| err("bad type"))?;
                    let json = (*json != "-").then(|| json.to_string());
                    m.fields.push(Field {
                        num,
                        json,
                        presence,
                        ty,
                        slot: 0,
                        present: NONE,
                    });
                }
                _ => return Err(err("unrecognised line")),
            }
        }
        let mut state = vec![Layout::Todo; msgs.len()];
        for id in 0..msgs.len() {
            lay_out(&mut msgs, id, &mut state)?;
        }
        let mut schema = Schema {
            msgs,
            by_name: names,
            kinds,
        };
        let absent: Vec<(Vec<u8>, Vec<u32>)> =
            (0..schema.msgs.len()).map(|id| schema.absent(id)).collect();
        for (m, (bytes, at)) in schema.msgs.iter_mut().zip(absent) {
            m.absent = bytes;
            m.absent_at = at;
        }
        Ok(schema)
    }

    /// The message a kind is served as (`apiVersion` as in objects: "v1", "apps/v1").
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<MsgId> {
        self.kinds
            .get(&(api_version.to_string(), kind.to_string()))
            .copied()
    }

    /// A message by its schema name ("meta/v1.Status").
    pub fn message(&self, name: &str) -> Option<MsgId> {
        self.by_name.get(name).copied()
    }

    /// A message's schema name.
    pub fn name(&self, id: MsgId) -> &str {
        &self.msgs[id].name
    }
}

/// A slot no member filled.
const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Layout {
    Todo,
    Doing,
    Done,
}

/// Gives message `id` its slot frame: a slot per JSON field in field order, and for an inline
/// struct (laid out first) its presence slot when it is a pointer, then its own frame; and the
/// key table that sends each JSON name to its slots.
fn lay_out(msgs: &mut [Message], id: MsgId, state: &mut [Layout]) -> Result<(), String> {
    match state[id] {
        Layout::Done => return Ok(()),
        Layout::Doing => return Err(format!("{}: inline structs in a cycle", msgs[id].name)),
        Layout::Todo => state[id] = Layout::Doing,
    }
    let mut keyed: Vec<(Box<[u8]>, u32)> = Vec::new();
    let mut next = 0u32;
    for i in 0..msgs[id].fields.len() {
        let f = &msgs[id].fields[i];
        let (child, plain) = match (&f.json, &f.ty) {
            (Some(json), _) => {
                keyed.push((json.as_bytes().into(), next));
                msgs[id].fields[i].slot = next;
                next += 1;
                continue;
            }
            (None, Ty::Msg(child)) => (*child, f.presence == Presence::Plain),
            (None, _) => continue, // never written (as before)
        };
        lay_out(msgs, child, state)?;
        let c = &msgs[child];
        let child_keys: Vec<(Box<[u8]>, Vec<u32>)> = c
            .keys
            .names
            .iter()
            .map(|(k, from, n)| {
                (
                    k.clone(),
                    c.targets[*from as usize..(from + n) as usize].to_vec(),
                )
            })
            .collect();
        if !plain {
            msgs[id].fields[i].present = next;
            keyed.extend(child_keys.iter().map(|(k, _)| (k.clone(), next)));
            next += 1;
        }
        msgs[id].fields[i].slot = next;
        for (k, targets) in child_keys {
            keyed.extend(targets.into_iter().map(|t| (k.clone(), next + t)));
        }
        next += msgs[child].flat_len;
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let m = &mut msgs[id];
    m.flat_len = next;
    m.keys = KeyTable::new(&keyed, &mut m.targets);
    state[id] = Layout::Done;
    Ok(())
}

fn parse_ty(s: &str, names: &HashMap<String, MsgId>) -> Option<Ty> {
    Some(match s {
        "s" => Ty::Str,
        "b" => Ty::Bool,
        "i32" => Ty::I32,
        "i64" => Ty::I64,
        "f64" => Ty::F64,
        "y" => Ty::Bytes,
        "time" => Ty::Time,
        "mtime" => Ty::MicroTime,
        "qty" => Ty::Quantity,
        "ios" => Ty::IntOrString,
        "raw" => Ty::Raw,
        "fv1" => Ty::FieldsV1,
        _ => {
            if let Some(m) = s.strip_prefix("m:") {
                Ty::Msg(*names.get(m)?)
            } else if let Some(v) = s.strip_prefix("map:s:") {
                Ty::Map(Box::new(parse_ty(v, names)?))
            } else {
                return None;
            }
        }
    })
}

/// The zero `time.Time` (0001-01-01T00:00:00Z), which Go writes as an empty message.
fn is_zero_time(secs: i64, nanos: i32) -> bool {
    secs == -62_135_596_800 && nanos == 0
}

/// Parses an RFC 3339 date-time (Go's time.RFC3339 layout, which also reads fractional seconds) to
/// Unix seconds and nanoseconds.
pub fn rfc3339(s: &str) -> Option<(i64, i32)> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = b.get(r)?;
        if !t.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(t).ok()?.parse().ok()
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos: i64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i.min(start + 9)];
        nanos = digits.parse::<i64>().ok()? * 10i64.pow(9 - digits.len() as u32);
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        b'+' | b'-' if i + 6 == b.len() && b[i + 3] == b':' => {
            let o = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if b[i] == b'-' { -o } else { o }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    Some((
        days * 86_400 + h * 3600 + mi * 60 + sec - offset,
        nanos as i32,
    ))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn integer(t: &str) -> Option<i64> {
    t.parse::<i64>().ok().or_else(|| {
        // encoding/json refuses a fraction for an integer field; an integral float (1e3) it takes.
        let f = t.parse::<f64>().ok()?;
        (f.fract() == 0.0 && f.abs() < 9.2e18).then_some(f as i64)
    })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_tag(out: &mut Vec<u8>, num: u32, wire: u8) {
    put_varint(out, (u64::from(num) << 3) | u64::from(wire));
}

fn put_len(out: &mut Vec<u8>, num: u32, data: &[u8]) {
    put_tag(out, num, 2);
    put_varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// `k8s\0` and the `runtime.Unknown` envelope around a message's bytes.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(envelope_len(api_version, kind, raw.len()));
    envelope_head(api_version, kind, raw.len(), &mut out);
    out.extend_from_slice(raw);
    envelope_tail(&mut out);
    out
}

/// The size of `len_of` (a length-delimited field's tag of one byte, length and content).
fn len_of(content: usize) -> usize {
    1 + varint_len(content as u64) + content
}

fn envelope_len(api_version: &str, kind: &str, raw: usize) -> usize {
    let tm = len_of(api_version.len()) + len_of(kind.len());
    MAGIC.len() + len_of(tm) + len_of(raw) + 4
}

/// The envelope up to its raw bytes (whose length is `raw`): each object, list and frame is
/// written straight into one buffer of its final size.
fn envelope_head(api_version: &str, kind: &str, raw: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(MAGIC);
    put_tag(out, 1, 2);
    put_varint(out, (len_of(api_version.len()) + len_of(kind.len())) as u64);
    put_len(out, 1, api_version.as_bytes());
    put_len(out, 2, kind.as_bytes());
    put_tag(out, 2, 2);
    put_varint(out, raw as u64);
}

/// The envelope after its raw bytes: contentEncoding and contentType, both empty.
fn envelope_tail(out: &mut Vec<u8>) {
    put_len(out, 3, b"");
    put_len(out, 4, b"");
}

/// A list: the envelope around the encoded ListMeta and the items' encodings.
pub fn list<'a>(
    api_version: &str,
    list_kind: &str,
    list_meta: &[u8],
    items: impl Iterator<Item = &'a [u8]> + Clone,
) -> Vec<u8> {
    let body = len_of(list_meta.len()) + items.clone().map(|i| len_of(i.len())).sum::<usize>();
    let mut out = Vec::with_capacity(envelope_len(api_version, list_kind, body));
    envelope_head(api_version, list_kind, body, &mut out);
    put_len(&mut out, 1, list_meta);
    for item in items {
        put_len(&mut out, 2, item);
    }
    envelope_tail(&mut out);
    out
}

/// A list as `list`, of items given by their lengths and a writer that appends item `i` (exactly
/// `lens[i]` bytes) to the body: items held compressed are expanded straight into it, never all
/// at once beside it.
pub fn list_with(
    api_version: &str,
    list_kind: &str,
    list_meta: &[u8],
    lens: &[usize],
    mut write: impl FnMut(usize, &mut Vec<u8>),
) -> Vec<u8> {
    let body = len_of(list_meta.len()) + lens.iter().map(|&n| len_of(n)).sum::<usize>();
    let mut out = Vec::with_capacity(envelope_len(api_version, list_kind, body));
    envelope_head(api_version, list_kind, body, &mut out);
    put_len(&mut out, 1, list_meta);
    for (i, &n) in lens.iter().enumerate() {
        put_tag(&mut out, 2, 2);
        put_varint(&mut out, n as u64);
        let start = out.len();
        write(i, &mut out);
        assert_eq!(
            out.len() - start,
            n,
            "item {i} is as long as its length says"
        );
    }
    envelope_tail(&mut out);
    out
}

/// One watch frame: the length prefix and a `WatchEvent` of `ty` around the enveloped object.
pub fn watch_frame(ty: &str, enveloped: &[u8]) -> Bytes {
    // WatchEvent {type = 1; RawExtension object = 2 {raw = 1}}.
    let object = len_of(enveloped.len());
    let event = len_of(ty.len()) + len_of(object);
    let mut out = Vec::with_capacity(4 + event);
    out.extend_from_slice(&(event as u32).to_be_bytes());
    put_len(&mut out, 1, ty.as_bytes());
    put_tag(&mut out, 2, 2);
    put_varint(&mut out, object as u64);
    put_len(&mut out, 1, enveloped);
    Bytes::from(out)
}

/// A `metav1.Status` (as JSON) enveloped in protobuf.
pub fn status(status_json: &serde_json::Value) -> Vec<u8> {
    let s = schema();
    let id = s
        .message("meta/v1.Status")
        .expect("Status is in the schema");
    let raw = s.encode(id, status_json.to_string().as_bytes());
    envelope("v1", "Status", &raw)
}

#[cfg(test)]
mod tests;
