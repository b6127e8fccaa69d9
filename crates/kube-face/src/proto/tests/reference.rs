//! The encoder as it was before issue 21's rewrite (serde_json `RawValue` maps, a buffer per
//! nested message), kept verbatim as the reference the fast encoder must match byte for byte.

use std::borrow::Cow;

use base64::Engine as _;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::super::{
    Message, MsgId, Presence, Schema, Ty, is_zero_time, put_len, put_tag, put_varint, quantity,
    rfc3339,
};

/// The field a JSON name is (the schema's last with that name, as the old `by_json` map kept).
fn by_json(m: &Message, k: &str) -> Option<usize> {
    m.fields.iter().rposition(|f| f.json.as_deref() == Some(k))
}

impl Schema {
    /// Encodes a JSON object as message `id` (no envelope). Never fails: see the module docs.
    pub(super) fn reference_encode(&self, id: MsgId, json: &[u8]) -> Vec<u8> {
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
            if let Some(&i) = by_json(m, k.as_ref()).as_ref() {
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
    obj.iter().any(|(k, _)| by_json(m, k.as_ref()).is_some())
        || m.fields.iter().any(|f| match (&f.json, &f.ty) {
            (None, Ty::Msg(c)) => inline_set(schema, *c, obj),
            _ => false,
        })
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

/// The envelope, list and watch frame as they were written before (a buffer per layer).
pub(super) fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut tm = Vec::new();
    put_len(&mut tm, 1, api_version.as_bytes());
    put_len(&mut tm, 2, kind.as_bytes());
    out.extend_from_slice(super::super::MAGIC);
    put_len(&mut out, 1, &tm);
    put_len(&mut out, 2, raw);
    put_len(&mut out, 3, b"");
    put_len(&mut out, 4, b"");
    out
}

pub(super) fn list(
    api_version: &str,
    list_kind: &str,
    list_meta: &[u8],
    items: &[&[u8]],
) -> Vec<u8> {
    let mut body = Vec::new();
    put_len(&mut body, 1, list_meta);
    for item in items {
        put_len(&mut body, 2, item);
    }
    envelope(api_version, list_kind, &body)
}

pub(super) fn watch_frame(ty: &str, enveloped: &[u8]) -> Vec<u8> {
    let mut ev = Vec::new();
    put_len(&mut ev, 1, ty.as_bytes());
    let mut raw = Vec::new();
    put_len(&mut raw, 1, enveloped);
    put_len(&mut ev, 2, &raw);
    let mut out = Vec::new();
    out.extend_from_slice(&(ev.len() as u32).to_be_bytes());
    out.extend_from_slice(&ev);
    out
}
