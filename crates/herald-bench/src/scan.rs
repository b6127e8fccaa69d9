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
    fn numbers_are_bounded() {
        assert_eq!(leading_number(b"123\""), Some(123));
        assert_eq!(leading_number(b"\""), None);
        assert_eq!(leading_number(b"99999999999999999999"), None);
    }
}
