//! Reading watch event lines without parsing them: the event type is the line's fixed prefix
//! (`{"type":"MODIFIED",…`, as kube-face and the apiserver write it), the send time is the digits after
//! the first `"t":"`, and the resume point is the digits after the last line's `"resourceVersion":"`.

use memchr::memmem::Finder;
use std::sync::OnceLock;

/// What one batch of complete lines held.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Batch {
    pub modified: u64,
    pub added: u64,
    pub deleted: u64,
    pub bookmarks: u64,
    /// An ERROR event (410 Expired and the like): the watch is over.
    pub error: bool,
    /// The resourceVersion in the batch's last line, if it had one.
    pub last_rv: Option<u64>,
}

impl Batch {
    /// Events and bookmarks in the batch; an ERROR event is not counted (it ends the watch).
    pub fn lines(&self) -> u64 {
        self.modified + self.added + self.deleted + self.bookmarks
    }
}

fn finder(
    cell: &'static OnceLock<Finder<'static>>,
    needle: &'static [u8],
) -> &'static Finder<'static> {
    cell.get_or_init(|| Finder::new(needle))
}

fn t_finder() -> &'static Finder<'static> {
    static F: OnceLock<Finder<'static>> = OnceLock::new();
    finder(&F, b"\"t\":\"")
}

fn rv_finder() -> &'static Finder<'static> {
    static F: OnceLock<Finder<'static>> = OnceLock::new();
    finder(&F, b"\"resourceVersion\":\"")
}

/// The decimal digits at the start of `s`.
fn leading_number(s: &[u8]) -> Option<u64> {
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    s[..digits].iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// The send time (`data.t`) of an event line, if it has one.
pub fn send_time(line: &[u8]) -> Option<u64> {
    let at = t_finder().find(line)?;
    leading_number(&line[at + 5..])
}

/// The resourceVersion in an event line (the object's, or a bookmark's).
pub fn resource_version(line: &[u8]) -> Option<u64> {
    let at = rv_finder().find(line)?;
    leading_number(&line[at + 19..])
}

/// Takes the complete lines off the front of `body`, calling `on_modified` with the send time of each
/// MODIFIED event that has one; an incomplete last line stays in `body`.
pub fn take_lines(body: &mut Vec<u8>, mut on_modified: impl FnMut(u64)) -> Batch {
    let mut batch = Batch::default();
    let mut start = 0;
    let mut last = None;
    for nl in memchr::memchr_iter(b'\n', body) {
        let line = &body[start..nl];
        if line.starts_with(b"{\"type\":\"MODIFIED\"") {
            batch.modified += 1;
            if let Some(t) = send_time(line) {
                on_modified(t);
            }
        } else if line.starts_with(b"{\"type\":\"ADDED\"") {
            batch.added += 1;
        } else if line.starts_with(b"{\"type\":\"DELETED\"") {
            batch.deleted += 1;
        } else if line.starts_with(b"{\"type\":\"BOOKMARK\"") {
            batch.bookmarks += 1;
        } else if line.starts_with(b"{\"type\":\"ERROR\"") {
            batch.error = true;
        }
        if !line.is_empty() {
            last = Some((start, nl));
        }
        start = nl + 1;
    }
    if let Some((a, b)) = last {
        batch.last_rv = resource_version(&body[a..b]);
    }
    body.drain(..start);
    batch
}

/// The complete protobuf watch frames at the front of `body` (`application/vnd.kubernetes.protobuf;
/// stream=watch`: a 4-byte big-endian length, then a `metav1.WatchEvent`), classified as
/// `take_lines` classifies JSON lines: the event type, and for MODIFIED the send time (the
/// annotation `t`, else a ConfigMap's `data.t`); the last frame's resourceVersion. Consumed frames are drained.
///
/// NB: a field walk over the wire bytes (WatchEvent → RawExtension → `k8s\0` + Unknown → ConfigMap →
/// ObjectMeta / data), without decoding into structs, as `take_lines` avoids a JSON tree.
pub fn take_frames(body: &mut Vec<u8>, mut on_modified: impl FnMut(u64)) -> Batch {
    let mut batch = Batch::default();
    let mut at = 0;
    let mut last_rv = None;
    while body.len() >= at + 4 {
        let len = u32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]) as usize;
        if body.len() < at + 4 + len {
            break;
        }
        let frame = &body[at + 4..at + 4 + len];
        at += 4 + len;
        let ty = field(frame, 1).unwrap_or_default();
        let object = field(frame, 2)
            .and_then(|raw| field(raw, 1))
            .and_then(|o| o.strip_prefix(b"k8s\0"))
            .and_then(|u| field(u, 2));
        match ty {
            b"MODIFIED" => {
                batch.modified += 1;
                if let Some(t) = object.and_then(send_time_of).and_then(leading_number) {
                    on_modified(t);
                }
            }
            b"ADDED" => batch.added += 1,
            b"DELETED" => batch.deleted += 1,
            b"BOOKMARK" => batch.bookmarks += 1,
            b"ERROR" => batch.error = true,
            _ => {}
        }
        last_rv = object
            .and_then(|o| field(o, 1))
            .and_then(|meta| field(meta, 6))
            .and_then(leading_number)
            .or(if ty == b"ERROR" { None } else { last_rv });
        if ty == b"ERROR" {
            last_rv = None;
        }
    }
    batch.last_rv = last_rv;
    body.drain(..at);
    batch
}

/// The send time a writer stamped on an object: its annotation `t` (ObjectMeta field 12), else a
/// ConfigMap's `data.t` (ConfigMap field 2).
fn send_time_of(object: &[u8]) -> Option<&[u8]> {
    field(object, 1)
        .and_then(|meta| map_value(meta, 12, b"t"))
        .or_else(|| map_value(object, 2, b"t"))
}

fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The first length-delimited field `num` of a message.
fn field(msg: &[u8], num: u64) -> Option<&[u8]> {
    fields(msg).find(|(n, _)| *n == num).map(|(_, v)| v)
}

/// The length-delimited fields of a message, in order (other wire types skipped).
fn fields(msg: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < msg.len() {
            let tag = varint(msg, &mut at)?;
            match tag & 7 {
                0 => {
                    varint(msg, &mut at)?;
                }
                1 => at += 8,
                5 => at += 4,
                2 => {
                    let len = varint(msg, &mut at)? as usize;
                    let v = msg.get(at..at + len)?;
                    at += len;
                    return Some((tag >> 3, v));
                }
                _ => return None,
            }
        }
        None
    })
}

/// The value of `key` in the map field `num` (entries `{key = 1; value = 2}`).
fn map_value<'a>(msg: &'a [u8], num: u64, key: &[u8]) -> Option<&'a [u8]> {
    fields(msg)
        .filter(|(n, _)| *n == num)
        .find(|(_, entry)| field(entry, 1) == Some(key))
        .and_then(|(_, entry)| field(entry, 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_classified_and_timed_without_parsing() {
        let mut body = concat!(
            r#"{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"bench-1","namespace":"default","resourceVersion":"41"},"data":{"t":"1700000000000000001"}}}"#,
            "\n",
            r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"42"},"data":{"t":"5"}}}"#,
            "\n",
            r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"50"}}}"#,
            "\n",
            r#"{"type":"MODIFIED","object":{"data":{"t":"17"#,
        )
        .as_bytes()
        .to_vec();
        let mut times = vec![];
        let b = take_lines(&mut body, |t| times.push(t));
        assert_eq!(times, vec![1_700_000_000_000_000_001]);
        assert_eq!((b.modified, b.added, b.bookmarks), (1, 1, 1));
        assert_eq!(b.last_rv, Some(50));
        assert!(!b.error);
        assert_eq!(body, br#"{"type":"MODIFIED","object":{"data":{"t":"17"#);
        body.extend_from_slice(b"\"}}}\n{\"type\":\"ERROR\",\"object\":{\"code\":410}}\n");
        let b = take_lines(&mut body, |t| times.push(t));
        assert_eq!(times.last(), Some(&17));
        assert!(b.error);
        assert_eq!(b.last_rv, None);
        assert!(body.is_empty());
    }

    #[test]
    fn protobuf_frames_are_classified_and_timed() {
        // A ConfigMap {metadata {resourceVersion "41"}, data {"t": "17"}} in a MODIFIED frame, as
        // kube-face writes it, then half of a second frame.
        let obj = kube_face::proto::schema().encode(
            kube_face::proto::schema()
                .kind("v1", "ConfigMap")
                .expect("ConfigMap"),
            br#"{"metadata":{"name":"bench-1","resourceVersion":"41"},"data":{"a":"x","t":"17"}}"#,
        );
        let frame = kube_face::proto::watch_frame(
            "MODIFIED",
            &kube_face::proto::envelope("v1", "ConfigMap", &obj),
        );
        let mut body = frame.to_vec();
        body.extend_from_slice(&frame[..10]);
        let mut times = vec![];
        let b = take_frames(&mut body, |t| times.push(t));
        assert_eq!(times, vec![17]);
        assert_eq!((b.modified, b.last_rv), (1, Some(41)));
        assert_eq!(body, &frame[..10]);
    }

    #[test]
    fn a_pods_send_time_is_its_annotation() {
        // A Pod whose container is named "t" and whose label "t" differs: only the annotation counts.
        let obj = kube_face::proto::schema().encode(
            kube_face::proto::schema().kind("v1", "Pod").expect("Pod"),
            br#"{"metadata":{"name":"p","resourceVersion":"7","labels":{"t":"1"},"annotations":{"a":"b","t":"99"}},"spec":{"containers":[{"name":"t","image":"i"}]}}"#,
        );
        let frame = kube_face::proto::watch_frame(
            "MODIFIED",
            &kube_face::proto::envelope("v1", "Pod", &obj),
        );
        let mut body = frame.to_vec();
        let mut times = vec![];
        let b = take_frames(&mut body, |t| times.push(t));
        assert_eq!(times, vec![99]);
        assert_eq!((b.modified, b.last_rv), (1, Some(7)));
        // JSON: the first `"t":"` of a Pod line is its annotation's when it has no label "t".
        let mut line = br#"{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"p","resourceVersion":"8","annotations":{"t":"5"}},"spec":{"containers":[{"name":"t"}]}}}
"#.to_vec();
        let b = take_lines(&mut line, |t| times.push(t));
        assert_eq!((times[1], b.last_rv), (5, Some(8)));
    }

    #[test]
    fn numbers_are_bounded() {
        assert_eq!(leading_number(b"123\""), Some(123));
        assert_eq!(leading_number(b"\""), None);
        assert_eq!(leading_number(b"99999999999999999999"), None);
    }
}
