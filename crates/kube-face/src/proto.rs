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

mod quantity;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::LazyLock;

use base64::Engine as _;
use bytes::Bytes;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

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
}

#[derive(Debug)]
struct Message {
    name: String,
    fields: Vec<Field>,
    /// JSON name → index into `fields` (inline fields are not here).
    by_json: HashMap<String, usize>,
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
                    by_json: HashMap::new(),
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
                    if let Some(j) = &json {
                        m.by_json.insert(j.clone(), m.fields.len());
                    }
                    m.fields.push(Field {
                        num,
                        json,
                        presence,
                        ty,
                    });
                }
                _ => return Err(err("unrecognised line")),
            }
        }
        Ok(Schema {
            msgs,
            by_name: names,
            kinds,
        })
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

    /// Encodes a JSON object as message `id` (no envelope). Never fails: see the module docs.
    pub fn encode(&self, id: MsgId, json: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(json.len() / 2);
        let raw = std::str::from_utf8(json)
            .ok()
            .and_then(|s| serde_json::from_str::<&RawValue>(s).ok());
        self.message_into(id, raw, &mut out);
        out
    }

    /// Writes message `id`'s fields from the JSON object `raw` (absent, null or not an object: every
    /// field absent).
    fn message_into(&self, id: MsgId, raw: Option<&RawValue>, out: &mut Vec<u8>) {
        let obj = raw.and_then(object);
        self.fields_into(id, obj.as_deref().unwrap_or(&[]), out);
    }

    fn fields_into(&self, id: MsgId, obj: &[(Cow<'_, str>, &RawValue)], out: &mut Vec<u8>) {
        let m = &self.msgs[id];
        let mut slots: Vec<Option<&RawValue>> = vec![None; m.fields.len()];
        for (k, v) in obj {
            if let Some(&i) = m.by_json.get(k.as_ref()) {
                slots[i] = Some(v);
            }
        }
        for (f, slot) in m.fields.iter().zip(slots) {
            let v = slot.filter(|v| v.get() != "null");
            if f.json.is_none() {
                // Inline: the nested message reads the same JSON object.
                let Ty::Msg(child) = f.ty else { continue };
                let mut buf = Vec::new();
                self.fields_into(child, obj, &mut buf);
                if f.presence == Presence::Plain || inline_set(self, child, obj) {
                    put_len(out, f.num, &buf);
                }
                continue;
            }
            match f.presence {
                Presence::Plain => self.value_into(f.num, &f.ty, v, out),
                Presence::Ptr => {
                    if v.is_some() {
                        self.value_into(f.num, &f.ty, v, out);
                    }
                }
                Presence::Rep => {
                    if let Some(items) = v.and_then(array) {
                        for item in items {
                            let item = Some(item).filter(|v| v.get() != "null");
                            self.value_into(f.num, &f.ty, item, out);
                        }
                    }
                }
            }
        }
    }

    /// Writes one value of type `ty` as field `num`. `v` is None for an absent or null value (the
    /// zero value is written: callers decide presence).
    fn value_into(&self, num: u32, ty: &Ty, v: Option<&RawValue>, out: &mut Vec<u8>) {
        match ty {
            Ty::Str => {
                let s = v.and_then(string).unwrap_or_default();
                put_len(out, num, s.as_bytes());
            }
            Ty::Bool => {
                put_tag(out, num, 0);
                out.push(u8::from(v.is_some_and(|v| v.get() == "true")));
            }
            Ty::I32 => {
                put_tag(out, num, 0);
                // Go writes uint64(int32): negative numbers sign-extended to ten bytes.
                let n = v.and_then(integer).unwrap_or(0) as i32;
                put_varint(out, i64::from(n) as u64);
            }
            Ty::I64 => {
                put_tag(out, num, 0);
                put_varint(out, v.and_then(integer).unwrap_or(0) as u64);
            }
            Ty::F64 => {
                put_tag(out, num, 1);
                let f = v.and_then(|v| v.get().parse::<f64>().ok()).unwrap_or(0.0);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            Ty::Bytes => {
                let b = v
                    .and_then(string)
                    .and_then(|s| base64::engine::general_purpose::STANDARD.decode(&*s).ok())
                    .unwrap_or_default();
                put_len(out, num, &b);
            }
            Ty::Time | Ty::MicroTime => {
                let mut buf = Vec::new();
                if let Some((secs, nanos)) = v.and_then(string).and_then(|s| rfc3339(&s))
                    && !is_zero_time(secs, nanos)
                {
                    let nanos = if *ty == Ty::Time {
                        0
                    } else {
                        nanos - nanos % 1000
                    };
                    put_tag(&mut buf, 1, 0);
                    put_varint(&mut buf, secs as u64);
                    put_tag(&mut buf, 2, 0);
                    put_varint(&mut buf, i64::from(nanos) as u64);
                }
                put_len(out, num, &buf);
            }
            Ty::Quantity => {
                let text = v.map(|v| match string(v) {
                    Some(s) => s.into_owned(),
                    None => v.get().to_string(),
                });
                let q = quantity::canonical(text.as_deref().unwrap_or("0"));
                let mut buf = Vec::with_capacity(q.len() + 2);
                put_len(&mut buf, 1, q.as_bytes());
                put_len(out, num, &buf);
            }
            Ty::IntOrString => {
                let (kind, int, s) = match v {
                    Some(v) if v.get().starts_with('"') => (1, 0, string(v).unwrap_or_default()),
                    Some(v) => (0, integer(v).unwrap_or(0) as i32, Cow::Borrowed("")),
                    None => (0, 0, Cow::Borrowed("")),
                };
                let mut buf = Vec::new();
                put_tag(&mut buf, 1, 0);
                put_varint(&mut buf, kind);
                put_tag(&mut buf, 2, 0);
                put_varint(&mut buf, i64::from(int) as u64);
                put_len(&mut buf, 3, s.as_bytes());
                put_len(out, num, &buf);
            }
            Ty::Raw | Ty::FieldsV1 => {
                let mut buf = Vec::new();
                if let Some(v) = v {
                    put_len(&mut buf, 1, v.get().as_bytes());
                }
                put_len(out, num, &buf);
            }
            Ty::Msg(id) => {
                let mut buf = Vec::new();
                self.message_into(*id, v, &mut buf);
                put_len(out, num, &buf);
            }
            Ty::Map(value) => {
                let Some(mut entries) = v.and_then(object) else {
                    return;
                };
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                for (k, ev) in entries {
                    let ev = Some(ev).filter(|v| v.get() != "null");
                    let mut buf = Vec::new();
                    put_len(&mut buf, 1, k.as_bytes());
                    if !(**value == Ty::Bytes && ev.is_none()) {
                        self.value_into(2, value, ev, &mut buf);
                    }
                    put_len(out, num, &buf);
                }
            }
        }
    }
}

/// Whether any field of an inline pointer struct appears in the JSON object (Go allocates the
/// embedded pointer when one of its fields is decoded).
fn inline_set(schema: &Schema, id: MsgId, obj: &[(Cow<'_, str>, &RawValue)]) -> bool {
    let m = &schema.msgs[id];
    obj.iter().any(|(k, _)| m.by_json.contains_key(k.as_ref()))
        || m.fields.iter().any(|f| match (&f.json, &f.ty) {
            (None, Ty::Msg(c)) => inline_set(schema, *c, obj),
            _ => false,
        })
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

fn string(v: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Cow<'_, str>>(v.get()).ok()
}

fn integer(v: &RawValue) -> Option<i64> {
    let t = v.get();
    t.parse::<i64>().ok().or_else(|| {
        // encoding/json refuses a fraction for an integer field; an integral float (1e3) it takes.
        let f = t.parse::<f64>().ok()?;
        (f.fract() == 0.0 && f.abs() < 9.2e18).then_some(f as i64)
    })
}

fn array(v: &RawValue) -> Option<Vec<&RawValue>> {
    serde_json::from_str::<Vec<&RawValue>>(v.get()).ok()
}

/// A JSON object's members in document order (a later duplicate key wins, as in encoding/json).
fn object(v: &RawValue) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    let members = serde_json::from_str::<Members<'_>>(v.get()).ok()?.0;
    Some(members)
}

struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

#[derive(serde::Deserialize)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::new();
                while let Some((Key(k), v)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    match out.iter_mut().find(|(ok, _)| *ok == k) {
                        Some(slot) => slot.1 = v,
                        None => out.push((k, v)),
                    }
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
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
    let mut out = Vec::with_capacity(raw.len() + api_version.len() + kind.len() + 24);
    envelope_into(api_version, kind, raw, &mut out);
    out
}

fn envelope_into(api_version: &str, kind: &str, raw: &[u8], out: &mut Vec<u8>) {
    let mut tm = Vec::with_capacity(api_version.len() + kind.len() + 4);
    put_len(&mut tm, 1, api_version.as_bytes());
    put_len(&mut tm, 2, kind.as_bytes());
    out.extend_from_slice(MAGIC);
    put_len(out, 1, &tm);
    put_len(out, 2, raw);
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
    let mut body =
        Vec::with_capacity(list_meta.len() + 8 + items.clone().map(|i| i.len() + 6).sum::<usize>());
    put_len(&mut body, 1, list_meta);
    for item in items {
        put_len(&mut body, 2, item);
    }
    envelope(api_version, list_kind, &body)
}

/// One watch frame: the length prefix and a `WatchEvent` of `ty` around the enveloped object.
pub fn watch_frame(ty: &str, enveloped: &[u8]) -> Bytes {
    let mut ev = Vec::with_capacity(enveloped.len() + ty.len() + 16);
    put_len(&mut ev, 1, ty.as_bytes());
    let mut raw = Vec::with_capacity(enveloped.len() + 6);
    put_len(&mut raw, 1, enveloped);
    put_len(&mut ev, 2, &raw);
    let mut out = Vec::with_capacity(ev.len() + 4);
    out.extend_from_slice(&(ev.len() as u32).to_be_bytes());
    out.extend_from_slice(&ev);
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
