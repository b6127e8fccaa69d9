//! Just enough HTTP/1.1 for a watch client: a request line, the response head, and the chunked body
//! decoder. Each watcher is one task over one `TcpStream` (no connection task and body channel per
//! watcher as a general-purpose client would have), so 10,000 of them cost the benchmark little CPU.

/// The parts of a response head a watch client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub chunked: bool,
    pub content_length: Option<u64>,
    /// `Retry-After` in seconds, when given as a number.
    pub retry_after: Option<u64>,
    /// Bytes of the head, including the blank line.
    pub len: usize,
}

/// The longest response head accepted.
pub const MAX_HEAD: usize = 16 * 1024;

/// Parses the response head at the start of `buf`: `Ok(None)` when it is not complete yet.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let Some(end) = memchr::memmem::find(buf, b"\r\n\r\n") else {
        if buf.len() > MAX_HEAD {
            return Err(format!("response head longer than {MAX_HEAD} bytes"));
        }
        return Ok(None);
    };
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| "response head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut head = Head {
        status,
        chunked: false,
        content_length: None,
        retry_after: None,
        len: end + 4,
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
        } else if name.eq_ignore_ascii_case("content-length") {
            head.content_length = value.parse().ok();
        } else if name.eq_ignore_ascii_case("retry-after") {
            head.retry_after = value.parse().ok();
        }
    }
    Ok(Some(head))
}

/// The `GET` request for `path` (with its query) on a keep-alive connection.
pub fn get_request(path: &str, host: &str, user_agent: &str) -> Vec<u8> {
    get_request_accepting(path, host, user_agent, "application/json")
}

/// A GET with the given Accept header.
pub fn get_request_accepting(path: &str, host: &str, user_agent: &str, accept: &str) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {user_agent}\r\nAccept: {accept}\r\n\r\n"
    )
    .into_bytes()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk with this many bytes left.
    Data(usize),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// The last chunk was read (trailers are not read).
    Done,
}

/// A streaming `Transfer-Encoding: chunked` decoder.
#[derive(Debug)]
pub struct Chunked {
    state: State,
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked { state: State::Size }
    }
}

impl Chunked {
    /// Decodes what it can of `raw`, appending the payload to `out`; returns how many bytes of `raw`
    /// it consumed (the rest is an incomplete chunk-size line or CRLF, to be offered again with more).
    pub fn decode(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
        let mut pos = 0;
        loop {
            match self.state {
                State::Done => return Ok(pos),
                State::Size => {
                    let Some(nl) = memchr::memmem::find(&raw[pos..], b"\r\n") else {
                        if raw.len() - pos > 1024 {
                            return Err("chunk-size line longer than 1 KiB".into());
                        }
                        return Ok(pos);
                    };
                    let line = &raw[pos..pos + nl];
                    let hex = line.split(|&b| b == b';').next().unwrap_or(b"");
                    let hex = std::str::from_utf8(hex)
                        .map_err(|_| "chunk size is not ASCII")?
                        .trim();
                    let size = usize::from_str_radix(hex, 16)
                        .map_err(|_| format!("bad chunk size {hex:?}"))?;
                    pos += nl + 2;
                    self.state = if size == 0 {
                        State::Done
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    let take = left.min(raw.len() - pos);
                    if take == 0 {
                        return Ok(pos);
                    }
                    out.extend_from_slice(&raw[pos..pos + take]);
                    pos += take;
                    self.state = if take == left {
                        State::DataEnd
                    } else {
                        State::Data(left - take)
                    };
                }
                State::DataEnd => {
                    if raw.len() - pos < 2 {
                        return Ok(pos);
                    }
                    if &raw[pos..pos + 2] != b"\r\n" {
                        return Err("chunk data not followed by CRLF".into());
                    }
                    pos += 2;
                    self.state = State::Size;
                }
            }
        }
    }

    /// Whether the terminating zero-size chunk has been read.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_parsed_when_complete() {
        let raw = b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nRetry-After: 2\r\ncontent-length: 10\r\n\r\n0123456789";
        let h = parse_head(raw).expect("valid").expect("complete");
        assert_eq!(h.status, 429);
        assert_eq!(h.retry_after, Some(2));
        assert_eq!(h.content_length, Some(10));
        assert!(!h.chunked);
        assert_eq!(&raw[h.len..], b"0123456789");
        assert_eq!(parse_head(&raw[..20]), Ok(None));
        let ok = parse_head(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            .expect("valid")
            .expect("complete");
        assert!(ok.chunked && ok.status == 200);
        assert!(parse_head(b"SPDY 200\r\n\r\n").is_err());
    }

    #[test]
    fn chunked_bodies_decode_across_any_split() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";
        for split in 0..wire.len() {
            let mut d = Chunked::default();
            let mut out = Vec::new();
            let mut pending = wire[..split].to_vec();
            let used = d.decode(&pending, &mut out).expect("valid");
            pending.drain(..used);
            pending.extend_from_slice(&wire[split..]);
            let used = d.decode(&pending, &mut out).expect("valid");
            assert_eq!(out, b"hello, world", "split at {split}");
            assert!(d.done());
            assert_eq!(used, pending.len() - 2, "trailer CRLF left unread");
        }
        let mut d = Chunked::default();
        assert!(d.decode(b"zz\r\n", &mut Vec::new()).is_err());
        let mut d = Chunked::default();
        assert!(d.decode(b"1\r\nabc\r\n", &mut Vec::new()).is_err());
    }
}
