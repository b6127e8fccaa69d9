//! A body on its way out: an encoded body sent as an HTTP body, block by block.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use crate::encoded::{Encoded, Expanded, GzipForm};

/// A response body sent block by block: each block expanded (identity) or its deflated bytes
/// (gzip) as hyper asks for the next frame, so a response holds one block beyond what is kept.
#[derive(Debug)]
pub struct Sending {
    body: Arc<Encoded>,
    form: Form,
    /// 0: the head, 1..=blocks: a block, blocks + 1: the tail, beyond: done (`Form::Whole`: 0, the
    /// whole response, beyond: done).
    next: usize,
    remaining: u64,
}

/// Which bytes a response sends of its body.
#[derive(Debug)]
enum Form {
    /// Each block expanded: by this response, or (`Some`) once and shared while the body is hot
    /// (`hot_bodies::HotBodies`).
    Identity(Option<Arc<Expanded>>),
    /// Each block's deflated form, between the gzip form's head and tail.
    Gzip(Arc<GzipForm>),
    /// The whole response in one buffer, sent as the only frame (a hot body's gzip form).
    Whole(Bytes),
}

impl Sending {
    /// `hot`: the body's shared expanded blocks if it is hot (`hot_bodies::HotBodies::identity`).
    pub fn identity(body: Arc<Encoded>, hot: Option<Arc<Expanded>>) -> Sending {
        Sending {
            remaining: body.len() as u64,
            body,
            form: Form::Identity(hot),
            next: 0,
        }
    }

    pub fn gzip(body: Arc<Encoded>, gzip: Arc<GzipForm>) -> Sending {
        Sending {
            remaining: gzip.len() as u64,
            body,
            form: Form::Gzip(gzip),
            next: 0,
        }
    }

    /// A hot body's gzip form held whole (`hot_bodies::HotBodies::gzip`): sent as one frame, as a static
    /// server would (its blocks' deflated forms are a few KiB each: hundreds of frames otherwise).
    pub fn gzip_whole(body: Arc<Encoded>, whole: Bytes) -> Sending {
        Sending {
            remaining: whole.len() as u64,
            body,
            form: Form::Whole(whole),
            next: 0,
        }
    }

    fn piece(&self, i: usize) -> Option<Bytes> {
        let blocks = self.body.blocks();
        match &self.form {
            Form::Whole(whole) => (i == 0).then(|| whole.clone()),
            Form::Gzip(g) => match i {
                0 => Some(g.head.clone()),
                i if i <= blocks.len() => Some(blocks[i - 1].deflated().bytes.clone()),
                i => (i == blocks.len() + 1).then(|| g.tail.clone()),
            },
            Form::Identity(hot) => match i {
                0 => Some(Bytes::from_static(b"[")),
                i if i <= blocks.len() => Some(match hot {
                    Some(hot) => hot.block(i - 1, &blocks[i - 1]),
                    None => blocks[i - 1].expand(),
                }),
                i => (i == blocks.len() + 1).then(|| Bytes::from_static(b"]")),
            },
        }
    }
}

impl http_body::Body for Sending {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        loop {
            let Some(piece) = this.piece(this.next) else {
                return Poll::Ready(None);
            };
            this.next += 1;
            if !piece.is_empty() {
                this.remaining -= piece.len() as u64;
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self.form {
            Form::Whole(_) => self.next > 0,
            _ => self.next > self.body.blocks().len() + 1,
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// Every byte `sending` sends (tests).
#[cfg(test)]
pub fn drain(mut sending: Sending) -> Vec<u8> {
    use http_body::Body as _;
    let mut out = Vec::new();
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    while let std::task::Poll::Ready(Some(Ok(frame))) =
        std::pin::Pin::new(&mut sending).poll_frame(&mut cx)
    {
        out.extend_from_slice(frame.data_ref().expect("data frames only"));
    }
    out
}
