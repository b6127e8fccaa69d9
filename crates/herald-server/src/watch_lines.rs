//! Watch frames read one line at a time with a size limit: a line longer than the limit is skipped
//! as it arrives — never held whole in memory — and reported, so a gigantic upstream object is
//! refused and counted instead of exhausting herald's memory.
//!
//! NB: cancel-safe: what was read stays in the caller's line or in the reader's skip state, so the
//! read can be polled once (`now_or_never`) and awaited again later.

use futures::io::{AsyncBufRead, AsyncBufReadExt as _};

/// The default largest object herald accepts from upstream: twice etcd's default request limit
/// (1.5 MiB), so every object a stock apiserver can store passes.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024;

/// What one read produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A line of this many bytes (newline included) is in the caller's buffer.
    Line(usize),
    /// A line of this many bytes exceeded the limit and was skipped; the buffer is empty.
    Oversized(usize),
    /// The stream ended; the buffer holds whatever came after the last newline.
    End,
}

/// Reads lines of at most `limit` bytes.
#[derive(Debug)]
pub struct LineReader {
    limit: usize,
    /// Bytes of an oversized line skipped so far, while skipping one.
    skipping: Option<usize>,
}

impl LineReader {
    pub fn new(limit: usize) -> LineReader {
        LineReader {
            limit: limit.max(1),
            skipping: None,
        }
    }

    /// Appends the next line to `line` (which the caller clears between frames).
    pub async fn read<R: AsyncBufRead + Unpin>(
        &mut self,
        stream: &mut R,
        line: &mut Vec<u8>,
    ) -> std::io::Result<Frame> {
        loop {
            let buf = stream.fill_buf().await?;
            if buf.is_empty() {
                return Ok(match self.skipping.take() {
                    Some(n) => Frame::Oversized(n),
                    None => Frame::End,
                });
            }
            let (take, done) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            match &mut self.skipping {
                Some(n) => *n += take,
                None if line.len() + take > self.limit => {
                    self.skipping = Some(line.len() + take);
                    line.clear();
                }
                None => line.extend_from_slice(&buf[..take]),
            }
            stream.consume_unpin(take);
            if done {
                return Ok(match self.skipping.take() {
                    Some(n) => Frame::Oversized(n),
                    None => Frame::Line(line.len()),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8], limit: usize, chunk: usize) -> Vec<(Frame, Vec<u8>)> {
        // A buffer of `chunk` bytes: each fill returns at most that much.
        let mut stream =
            futures::io::BufReader::with_capacity(chunk, futures::io::Cursor::new(input.to_vec()));
        let mut reader = LineReader::new(limit);
        let mut out = Vec::new();
        loop {
            let mut line = Vec::new();
            let f = reader.read(&mut stream, &mut line).await.expect("read");
            out.push((f, line));
            if f == Frame::End {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn lines_over_the_limit_are_skipped_and_reported_whatever_the_chunking() {
        let input = b"ab\nthis line is far too long\ncd\ntail";
        for chunk in [1, 2, 3, 7, 100] {
            let got = frames(input, 8, chunk).await;
            assert_eq!(
                got,
                vec![
                    (Frame::Line(3), b"ab\n".to_vec()),
                    (Frame::Oversized(26), vec![]),
                    (Frame::Line(3), b"cd\n".to_vec()),
                    (Frame::End, b"tail".to_vec()),
                ],
                "chunks of {chunk}"
            );
        }
    }
}
