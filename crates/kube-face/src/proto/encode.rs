//! The transcoder itself: a JSON object's tape (`json`) walked in the schema's field order and
//! written as protobuf, each message in place in one output buffer.

use std::borrow::Cow;

use base64::Engine as _;

use super::json::{self, Kind, Tok};
use super::{
    Message, MsgId, NONE, Presence, Schema, Ty, integer, is_zero_time, put_len, put_tag,
    put_varint, quantity, rfc3339, varint_len,
};

impl Schema {
    /// Encodes a JSON object as message `id` (no envelope). Never fails: see the module docs.
    pub fn encode(&self, id: MsgId, json: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(json.len() * 3 / 4 + 16);
        SCRATCH.with_borrow_mut(|scratch| {
            let Scratch { tape, stack, slots } = scratch;
            // encoding/json refuses a text that is not UTF-8 JSON: every field absent.
            let text = std::str::from_utf8(json)
                .ok()
                .filter(|t| json::tokenize(t.as_bytes(), tape, stack))
                .unwrap_or_else(|| {
                    tape.clear();
                    ""
                });
            let mut enc = Encoder {
                schema: self,
                text,
                tape,
                slots,
                entries: Vec::new(),
                absent_runs: true,
            };
            enc.message(id, (!enc.tape.is_empty()).then_some(0), &mut out);
            if tape.capacity() > MAX_KEPT_TAPE {
                // One huge object must not leave its tape behind in every thread that saw it.
                *scratch = Scratch::default();
            }
        });
        out
    }

    /// Message `id`'s `absent` and `absent_at`, by the field-by-field encoder.
    pub(super) fn absent(&self, id: MsgId) -> (Vec<u8>, Vec<u32>) {
        let mut slots = Vec::new();
        let mut enc = Encoder {
            schema: self,
            text: "",
            tape: &[],
            slots: &mut slots,
            entries: Vec::new(),
            absent_runs: false,
        };
        let mut bytes = Vec::new();
        let mut at = vec![0];
        for f in &self.msgs[id].fields {
            if f.json.is_some() && f.presence == Presence::Plain {
                enc.value(f.num, &f.ty, None, &mut bytes);
            }
            at.push(bytes.len() as u32);
        }
        (bytes, at)
    }
}

thread_local! {
    /// The tape and slot stack of `Schema::encode`, kept per thread so encoding allocates nothing
    /// but its output and a list of map entries once they have grown to the largest object seen.
    static SCRATCH: std::cell::RefCell<Scratch> = Default::default();
}

#[derive(Default)]
struct Scratch {
    tape: Vec<Tok>,
    stack: Vec<u32>,
    slots: Vec<u32>,
}

/// Tape entries (16 bytes each) a thread keeps between encodes: enough for objects of a few
/// hundred kB.
const MAX_KEPT_TAPE: usize = 1 << 16;

/// One `encode` call: the object's tape and the stacks nested messages push their state on.
///
/// NB: each message's fields are found by one walk over its object's members into `slots` (one
/// per field of the message and of its inline structs, `Message::keys`), then written in field
/// order; a nested message is written in place after a length guessed from its JSON size and the
/// length fixed up afterwards (`nested`), so no message gets a buffer of its own.
struct Encoder<'a, 's> {
    schema: &'a Schema,
    text: &'a str,
    tape: &'s [Tok],
    /// Tape index of each field's value (or `NONE`), a frame per message being written.
    slots: &'s mut Vec<u32>,
    /// A map's entries (key, tape index of the value) while it is sorted and written.
    entries: Vec<(Cow<'a, str>, u32)>,
    /// Whether absent fields are written from `Message::absent` (false only while that is made).
    absent_runs: bool,
}

impl<'a> Encoder<'a, '_> {
    /// Writes message `id` from the value at tape index `obj` (absent, or not an object: every
    /// field absent).
    fn message(&mut self, id: MsgId, obj: Option<u32>, out: &mut Vec<u8>) {
        let m = &self.schema.msgs[id];
        let base = self.slots.len();
        self.slots.resize(base + m.flat_len as usize, NONE);
        if let Some(o) = obj.filter(|&o| self.tape[o as usize].kind == Kind::Obj)
            && !self.fill(m, o, base)
        {
            self.slots.truncate(base);
            self.slots.resize(base + m.flat_len as usize, NONE);
        }
        self.fields(id, base, out);
        self.slots.truncate(base);
    }

    /// Points the slots of message `m` (frame at `base`) at the members of object `o`; a later
    /// duplicate key wins, as in encoding/json. False when a key is not a string serde reads
    /// (a lone surrogate escape): the old encoder then took the value for no object at all.
    fn fill(&mut self, m: &Message, o: u32, base: usize) -> bool {
        let tape = self.tape;
        let end = tape[o as usize].next;
        let mut k = o + 1;
        while k < end {
            let v = k + 1;
            let key = &tape[k as usize];
            let found = if key.kind == Kind::Str {
                m.keys
                    .get(&self.text.as_bytes()[key.start as usize + 1..key.end as usize - 1])
            } else {
                let Some(key) = string_of(self.text, key) else {
                    return false;
                };
                m.keys.get(key.as_bytes())
            };
            if let Some((from, n)) = found {
                for &t in &m.targets[from as usize..from as usize + n as usize] {
                    self.slots[base + t as usize] = v;
                }
            }
            k = tape[v as usize].next;
        }
        true
    }

    /// Writes message `id`'s fields from its slot frame at `base`.
    fn fields(&mut self, id: MsgId, base: usize, out: &mut Vec<u8>) {
        let m = &self.schema.msgs[id];
        // Fields `run..` (up to the one at hand) are absent: written at once from `m.absent`.
        let mut run = 0;
        for (i, f) in m.fields.iter().enumerate() {
            if f.json.is_none() {
                if self.absent_runs {
                    out.extend_from_slice(m.absent_between(run, i));
                    run = i + 1;
                }
                // Inline: the nested message reads the same JSON object.
                let Ty::Msg(child) = f.ty else { continue };
                let set =
                    f.presence == Presence::Plain || self.slots[base + f.present as usize] != NONE;
                if set {
                    let child_base = base + f.slot as usize;
                    self.nested(out, f.num, 0, |enc, out| enc.fields(child, child_base, out));
                }
                continue;
            }
            let v = self.value_at(self.slots[base + f.slot as usize]);
            if self.absent_runs {
                if v.is_none() {
                    continue;
                }
                out.extend_from_slice(m.absent_between(run, i));
                run = i + 1;
            }
            match f.presence {
                Presence::Plain => self.value(f.num, &f.ty, v, out),
                Presence::Ptr => {
                    if v.is_some() {
                        self.value(f.num, &f.ty, v, out);
                    }
                }
                Presence::Rep => {
                    if let Some(a) = v.filter(|&a| self.tape[a as usize].kind == Kind::Arr) {
                        let end = self.tape[a as usize].next;
                        let mut i = a + 1;
                        while i < end {
                            self.value(f.num, &f.ty, self.value_at(i), out);
                            i = self.tape[i as usize].next;
                        }
                    }
                }
            }
        }
        if self.absent_runs {
            out.extend_from_slice(m.absent_between(run, m.fields.len()));
        }
    }

    /// The value at a tape index, None for an empty slot or a JSON null.
    fn value_at(&self, i: u32) -> Option<u32> {
        (i != NONE && self.tape[i as usize].kind != Kind::Null).then_some(i)
    }

    /// A value's JSON text.
    fn raw(&self, v: u32) -> &'a str {
        let t = &self.tape[v as usize];
        &self.text[t.start as usize..t.end as usize]
    }

    fn string(&self, v: Option<u32>) -> Option<Cow<'a, str>> {
        string_of(self.text, &self.tape[v? as usize])
    }

    fn integer(&self, v: Option<u32>) -> Option<i64> {
        integer(self.raw(v?))
    }

    /// Writes one value of type `ty` as field `num`. `v` is None for an absent or null value (the
    /// zero value is written: callers decide presence).
    fn value(&mut self, num: u32, ty: &Ty, v: Option<u32>, out: &mut Vec<u8>) {
        match ty {
            Ty::Str => {
                let s = self.string(v).unwrap_or_default();
                put_len(out, num, s.as_bytes());
            }
            Ty::Bool => {
                put_tag(out, num, 0);
                out.push(u8::from(
                    v.is_some_and(|v| self.tape[v as usize].kind == Kind::True),
                ));
            }
            Ty::I32 => {
                put_tag(out, num, 0);
                // Go writes uint64(int32): negative numbers sign-extended to ten bytes.
                let n = self.integer(v).unwrap_or(0) as i32;
                put_varint(out, i64::from(n) as u64);
            }
            Ty::I64 => {
                put_tag(out, num, 0);
                put_varint(out, self.integer(v).unwrap_or(0) as u64);
            }
            Ty::F64 => {
                put_tag(out, num, 1);
                let f = v
                    .and_then(|v| self.raw(v).parse::<f64>().ok())
                    .unwrap_or(0.0);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            Ty::Bytes => {
                let b = self
                    .string(v)
                    .and_then(|s| base64::engine::general_purpose::STANDARD.decode(&*s).ok())
                    .unwrap_or_default();
                put_len(out, num, &b);
            }
            Ty::Time | Ty::MicroTime => {
                let time = self
                    .string(v)
                    .and_then(|s| rfc3339(&s))
                    .filter(|&(secs, nanos)| !is_zero_time(secs, nanos));
                put_tag(out, num, 2);
                match time {
                    Some((secs, nanos)) => {
                        let nanos = if *ty == Ty::Time {
                            0
                        } else {
                            nanos - nanos % 1000
                        };
                        let (secs, nanos) = (secs as u64, i64::from(nanos) as u64);
                        put_varint(out, (2 + varint_len(secs) + varint_len(nanos)) as u64);
                        put_tag(out, 1, 0);
                        put_varint(out, secs);
                        put_tag(out, 2, 0);
                        put_varint(out, nanos);
                    }
                    None => out.push(0),
                }
            }
            Ty::Quantity => {
                let q = match v {
                    None => quantity::canonical("0"),
                    Some(v) => match self.string(Some(v)) {
                        Some(s) => quantity::canonical(&s),
                        None => quantity::canonical(self.raw(v)),
                    },
                };
                put_tag(out, num, 2);
                put_varint(out, (1 + varint_len(q.len() as u64) + q.len()) as u64);
                put_len(out, 1, q.as_bytes());
            }
            Ty::IntOrString => {
                let (kind, int, s) = match v {
                    Some(v) if self.tape[v as usize].kind.is_string() => {
                        (1, 0, self.string(Some(v)).unwrap_or_default())
                    }
                    Some(_) => (0, self.integer(v).unwrap_or(0) as i32, Cow::Borrowed("")),
                    None => (0, 0, Cow::Borrowed("")),
                };
                let int = i64::from(int) as u64;
                let len = 3 + varint_len(kind) + varint_len(int);
                put_tag(out, num, 2);
                put_varint(out, (len + varint_len(s.len() as u64) + s.len()) as u64);
                put_tag(out, 1, 0);
                put_varint(out, kind);
                put_tag(out, 2, 0);
                put_varint(out, int);
                put_len(out, 3, s.as_bytes());
            }
            Ty::Raw | Ty::FieldsV1 => {
                put_tag(out, num, 2);
                match v {
                    Some(v) => {
                        let raw = self.raw(v).as_bytes();
                        put_varint(out, (1 + varint_len(raw.len() as u64) + raw.len()) as u64);
                        put_len(out, 1, raw);
                    }
                    None => out.push(0),
                }
            }
            Ty::Msg(id) => {
                let hint = v.map_or(0, |v| self.raw(v).len());
                self.nested(out, num, hint, |enc, out| enc.message(*id, v, out));
            }
            Ty::Map(value) => self.map(num, value, v, out),
        }
    }

    /// A map: one entry message per key, in sorted key order (Go's marshallers sort the keys).
    fn map(&mut self, num: u32, value: &Ty, v: Option<u32>, out: &mut Vec<u8>) {
        let Some(o) = v.filter(|&o| self.tape[o as usize].kind == Kind::Obj) else {
            return;
        };
        let base = self.entries.len();
        let end = self.tape[o as usize].next;
        let mut k = o + 1;
        while k < end {
            let Some(key) = string_of(self.text, &self.tape[k as usize]) else {
                // A key serde cannot read: the old encoder took the value for no object.
                self.entries.truncate(base);
                return;
            };
            self.entries.push((key, k + 1));
            k = self.tape[k as usize + 1].next;
        }
        // Stable: among equal keys the last in the text is the last of its run, and wins.
        self.entries[base..].sort_by(|a, b| a.0.cmp(&b.0));
        let end = self.entries.len();
        for i in base..end {
            if i + 1 < end && self.entries[i + 1].0 == self.entries[i].0 {
                continue;
            }
            let (key, ev) = self.entries[i].clone();
            let ev = self.value_at(ev);
            let hint = key.len() + ev.map_or(0, |v| self.raw(v).len()) + 4;
            self.nested(out, num, hint, |enc, out| {
                put_len(out, 1, key.as_bytes());
                if !(*value == Ty::Bytes && ev.is_none()) {
                    enc.value(2, value, ev, out);
                }
            });
        }
        self.entries.truncate(base);
    }

    /// Writes a length-delimited field `num` whose content `write` appends to `out`: the length's
    /// varint gets the size a guess from `hint` (the content's JSON size) needs, and the content is
    /// moved when the real length needs another size.
    fn nested(
        &mut self,
        out: &mut Vec<u8>,
        num: u32,
        hint: usize,
        write: impl FnOnce(&mut Self, &mut Vec<u8>),
    ) {
        put_tag(out, num, 2);
        let at = out.len();
        let guess = varint_len((hint as u64 * 2) / 3);
        out.resize(at + guess, 0);
        write(self, out);
        let len = out.len() - at - guess;
        let need = varint_len(len as u64);
        if need != guess {
            if need > guess {
                out.resize(out.len() + need - guess, 0);
            }
            out.copy_within(at + guess..at + guess + len, at + need);
            out.truncate(at + need + len);
        }
        let mut v = len as u64;
        for b in &mut out[at..at + need] {
            *b = (v as u8 & 0x7f) | 0x80;
            v >>= 7;
        }
        out[at + need - 1] &= 0x7f;
    }
}

impl Kind {
    fn is_string(self) -> bool {
        matches!(self, Kind::Str | Kind::EscStr)
    }
}

/// A string value's content; None for any other value, or for escapes serde refuses in a string
/// (a lone surrogate), as the old encoder read them.
fn string_of<'a>(text: &'a str, t: &Tok) -> Option<Cow<'a, str>> {
    match t.kind {
        Kind::Str => Some(Cow::Borrowed(
            &text[t.start as usize + 1..t.end as usize - 1],
        )),
        // Rare in Kubernetes objects: serde's unescaping, exactly as before.
        Kind::EscStr => {
            serde_json::from_str::<Cow<'a, str>>(&text[t.start as usize..t.end as usize]).ok()
        }
        _ => None,
    }
}
