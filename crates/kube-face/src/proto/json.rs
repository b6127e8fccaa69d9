//! The JSON side of the transcoder: one validating pass over an object's text that writes a flat
//! tape of its values, so the encoder reads each object's members in place and skips a value it
//! does not need in one step.
//!
//! NB: hand-written, rather than serde_json's `RawValue` maps the encoder first used, for speed
//! (issue 21): those re-parsed every object once per nesting level and allocated a member vector
//! per object, which made the first protobuf list of 15,000 Pods take 858 ms against 111 ms for
//! JSON. The grammar is serde_json's (RFC 8259, strict: no trailing commas, no control characters
//! in strings, escapes `\" \\ \/ \b \f \n \r \t \uXXXX` with any code unit accepted here, numbers
//! `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, no depth limit), so a text the old encoder
//! took for JSON this one takes too, and a text it refused (encoded as an empty object) this one
//! refuses (`proto/tests.rs` checks the two against each other).

/// What a tape entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Null,
    True,
    False,
    Num,
    /// A string without escapes: its content is the text between the quotes.
    Str,
    /// A string with at least one backslash escape.
    EscStr,
    /// An object: its members follow on the tape as key, value, key, value…
    Obj,
    /// An array: its elements follow on the tape.
    Arr,
}

/// One value (or object key) of the text.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tok {
    pub kind: Kind,
    /// Byte offsets of the value's text (quotes and brackets included).
    pub start: u32,
    pub end: u32,
    /// The tape index after this value and everything inside it.
    pub next: u32,
}

/// Bytes that end the fast run inside a string: the quote, the backslash and the control
/// characters (which JSON forbids unescaped).
static STRING_SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Tokenizes `text` (one JSON value, whitespace around it allowed) onto `tape`, using `stack` for
/// the open containers. False when the text is not JSON (the tape is then meaningless). Texts of
/// 4 GiB or more are refused (the tape holds 32-bit offsets).
pub(super) fn tokenize(text: &[u8], tape: &mut Vec<Tok>, stack: &mut Vec<u32>) -> bool {
    tape.clear();
    stack.clear();
    if u32::try_from(text.len()).is_err() {
        return false;
    }
    let mut i = skip_ws(text, 0);
    'value: loop {
        // A value starts at `i`.
        let Some(&b) = text.get(i) else {
            return false;
        };
        let start = i;
        let kind = match b {
            b'{' | b'[' => {
                let kind = if b == b'{' { Kind::Obj } else { Kind::Arr };
                stack.push(tape.len() as u32);
                tape.push(Tok {
                    kind,
                    start: start as u32,
                    end: 0,
                    next: 0,
                });
                i = skip_ws(text, i + 1);
                let close = if b == b'{' { b'}' } else { b']' };
                if text.get(i) == Some(&close) {
                    i += 1;
                    // An empty container: closed below like any other value's end.
                } else {
                    if b == b'{' {
                        match key(text, i, tape) {
                            Some(after) => i = after,
                            None => return false,
                        }
                    }
                    continue 'value;
                }
                let open = stack.pop().expect("just pushed") as usize;
                let next = tape.len() as u32;
                tape[open].end = i as u32;
                tape[open].next = next;
                None
            }
            b'"' => {
                let (end, escaped) = match string(text, i) {
                    Some(s) => s,
                    None => return false,
                };
                i = end;
                Some(if escaped { Kind::EscStr } else { Kind::Str })
            }
            b'n' => {
                i = match literal(text, i, b"null") {
                    Some(end) => end,
                    None => return false,
                };
                Some(Kind::Null)
            }
            b't' => {
                i = match literal(text, i, b"true") {
                    Some(end) => end,
                    None => return false,
                };
                Some(Kind::True)
            }
            b'f' => {
                i = match literal(text, i, b"false") {
                    Some(end) => end,
                    None => return false,
                };
                Some(Kind::False)
            }
            b'-' | b'0'..=b'9' => {
                i = match number(text, i) {
                    Some(end) => end,
                    None => return false,
                };
                Some(Kind::Num)
            }
            _ => return false,
        };
        if let Some(kind) = kind {
            let next = tape.len() as u32 + 1;
            tape.push(Tok {
                kind,
                start: start as u32,
                end: i as u32,
                next,
            });
        }
        // After a value: a comma and the next member or element, the end of containers, or (at the
        // top) the end of the text.
        loop {
            i = skip_ws(text, i);
            let Some(&open) = stack.last() else {
                return i == text.len();
            };
            let in_object = tape[open as usize].kind == Kind::Obj;
            match text.get(i) {
                Some(b',') => {
                    i = skip_ws(text, i + 1);
                    if in_object {
                        match key(text, i, tape) {
                            Some(after) => i = after,
                            None => return false,
                        }
                    }
                    continue 'value;
                }
                Some(b'}') if in_object => {}
                Some(b']') if !in_object => {}
                _ => return false,
            }
            i += 1;
            stack.pop();
            let next = tape.len() as u32;
            let t = &mut tape[open as usize];
            t.end = i as u32;
            t.next = next;
        }
    }
}

/// An object key at `i` and its colon: pushes the key and returns where its value starts.
fn key(text: &[u8], i: usize, tape: &mut Vec<Tok>) -> Option<usize> {
    if text.get(i) != Some(&b'"') {
        return None;
    }
    let (end, escaped) = string(text, i)?;
    tape.push(Tok {
        kind: if escaped { Kind::EscStr } else { Kind::Str },
        start: i as u32,
        end: end as u32,
        next: tape.len() as u32 + 1,
    });
    let colon = skip_ws(text, end);
    if text.get(colon) != Some(&b':') {
        return None;
    }
    Some(skip_ws(text, colon + 1))
}

/// The string starting with the quote at `i`: the offset after its closing quote, and whether it
/// has escapes.
fn string(text: &[u8], i: usize) -> Option<(usize, bool)> {
    let mut j = i + 1;
    let mut escaped = false;
    loop {
        // Eight bytes at a time to the first special byte (most strings have no escapes).
        loop {
            match text.get(j..j + 8) {
                Some(chunk) => {
                    let m =
                        special_bytes(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
                    if m != 0 {
                        j += (m.trailing_zeros() / 8) as usize;
                        break;
                    }
                    j += 8;
                }
                None => {
                    while j < text.len() && !STRING_SPECIAL[text[j] as usize] {
                        j += 1;
                    }
                    break;
                }
            }
        }
        match text.get(j)? {
            b'"' => return Some((j + 1, escaped)),
            b'\\' => {
                escaped = true;
                match text.get(j + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j += 2,
                    b'u' => {
                        let hex = text.get(j + 2..j + 6)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        j += 6;
                    }
                    _ => return None,
                }
            }
            _ => return None, // a control character
        }
    }
}

/// The high bit of each of the eight bytes in `x` (little-endian) that is a quote, a backslash or
/// below 0x20, exact up to the first such byte (the classic has-zero-byte and has-less-than word
/// tricks: a borrow can only mark bytes after a true one), so `trailing_zeros / 8` is where the
/// first special byte is.
pub(super) fn special_bytes(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |y: u64| y.wrapping_sub(ONES) & !y & HIGH;
    let quote = zero(x ^ (ONES * u64::from(b'"')));
    let backslash = zero(x ^ (ONES * u64::from(b'\\')));
    let control = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
    quote | backslash | control
}

fn literal(text: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (text.get(i..i + word.len())? == word).then_some(i + word.len())
}

fn number(text: &[u8], mut i: usize) -> Option<usize> {
    let digits = |i: &mut usize| {
        let from = *i;
        while text.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > from
    };
    if text[i] == b'-' {
        i += 1;
    }
    match text.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => {
            digits(&mut i);
        }
        _ => return None,
    }
    if text.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return None;
        }
    }
    if matches!(text.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(text.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return None;
        }
    }
    Some(i)
}

fn skip_ws(text: &[u8], mut i: usize) -> usize {
    while matches!(text.get(i), Some(b' ' | b'\n' | b'\t' | b'\r')) {
        i += 1;
    }
    i
}
