//! The upstream's GETs, with herald's own content coding.
//!
//! NB: kube-rs decodes gzip in tower-http's decompression layer, which decodes only the first gzip
//! member of a body and fails on the rest ("there are extra bytes after body has been
//! decompressed"). kube-apiserver 1.37 sends a compressed watch — a streaming list among them
//! (WatchListCompression) — as one gzip member per flush, so with the layer herald never finished a
//! streaming list from a real apiserver. herald's client is built with compression off (the layer
//! then neither asks for gzip nor decodes it) and this module asks for gzip itself, when
//! [`Compression::Gzip`] is chosen, and decodes every member of what comes back.

use std::pin::Pin;

use futures::io::{AsyncBufRead, AsyncReadExt as _, BufReader};
use futures::{StreamExt as _, TryStreamExt as _};
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING};
use http_body_util::BodyExt as _;

/// Whether herald asks its upstream for compressed responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// `Accept-Encoding: identity`: the apiserver spends no CPU compressing herald's lists and
    /// watches, and herald none decoding them (the default: see `--upstream-compression`).
    #[default]
    Identity,
    /// `Accept-Encoding: gzip`, as client-go asks: fewer bytes on the wire, more CPU on both ends.
    Gzip,
}

/// A response body, decoded, read as a byte stream.
pub type BodyReader = Pin<Box<dyn AsyncBufRead + Send>>;

/// The upstream client and how herald talks to it.
#[derive(Clone)]
pub struct Upstream {
    pub client: kube::Client,
    pub compression: Compression,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    pub fn new(client: kube::Client, compression: Compression) -> Upstream {
        Upstream {
            client,
            compression,
        }
    }

    /// GETs `url` (a path and query) and streams its decoded body. A 4xx or 5xx becomes
    /// `kube::Error::Api` with the apiserver's `Status` (or one made of the text it sent).
    pub async fn get(&self, url: &str) -> Result<BodyReader, kube::Error> {
        let req = http::Request::get(url)
            .header(
                ACCEPT_ENCODING,
                match self.compression {
                    Compression::Identity => "identity",
                    Compression::Gzip => "gzip",
                },
            )
            .body(kube::client::Body::empty())
            .map_err(kube::Error::HttpError)?;
        let res = self.client.send(req).await?;
        let status = res.status();
        let gzip = res
            .headers()
            .get(CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let body = res
            .into_body()
            .into_data_stream()
            .map_err(std::io::Error::other)
            .into_async_read();
        let mut reader = decoded(Box::pin(body), gzip);
        if status.is_client_error() || status.is_server_error() {
            let mut text = Vec::new();
            // An error body is a small Status; one cut short still names the status code.
            let _ = (&mut reader).take(1 << 20).read_to_end(&mut text).await;
            return Err(api_error(status, &text));
        }
        Ok(reader)
    }

    /// GETs `url` and reads its decoded body whole (a LIST page).
    pub async fn get_bytes(&self, url: &str) -> Result<Vec<u8>, kube::Error> {
        let mut reader = self.get(url).await?;
        let mut body = Vec::new();
        reader
            .read_to_end(&mut body)
            .await
            .map_err(|e| kube::Error::Service(Box::new(e)))?;
        Ok(body)
    }
}

/// `body` decoded: every gzip member in turn when `gzip`, else as it is.
pub fn decoded(body: BodyReader, gzip: bool) -> BodyReader {
    if !gzip {
        return body;
    }
    let mut decoder = async_compression::futures::bufread::GzipDecoder::new(body);
    decoder.multiple_members(true);
    Box::pin(BufReader::new(decoder))
}

/// The error of a failed request: the apiserver's `Status`, or one made of the text it sent.
fn api_error(status: http::StatusCode, body: &[u8]) -> kube::Error {
    let parsed = serde_json::from_slice::<kube::core::Status>(body)
        .ok()
        .filter(|s| s.code != 0 || !s.message.is_empty());
    // NB: not every refusal is a Status: kube-apiserver's API Priority and Fairness answers 429 with
    // the text "Too many requests, please try again later.". Its reason is then the HTTP status's
    // (`TooManyRequests`), not a parse failure, which herald's log and status page would show.
    let s = parsed.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body);
        let reason: String = status
            .canonical_reason()
            .unwrap_or("Unknown")
            .split_whitespace()
            .collect();
        kube::core::Status::failure(text.trim(), &reason)
    });
    let code = if s.code == 0 { status.as_u16() } else { s.code };
    kube::Error::Api(s.with_code(code).boxed())
}

/// What a failed list or watch of `resource` (its qualified name, `endpointslices.discovery.k8s.io`)
/// says in the log and on the status page. The apiserver's refusals lead with what was refused: a
/// 403 `forbidden: cannot VERB RESOURCE at cluster scope: ` and the apiserver's words (which name
/// the user), a 401 `unauthorized: `; other failures name the request. herald's requests are all
/// cluster-wide.
pub fn failure(verb: &str, resource: &str, url: &str, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => format!(
            "forbidden: cannot {verb} {resource} at cluster scope: {} (grant {verb} on {resource} in herald's ClusterRole)",
            s.message
        ),
        kube::Error::Api(s) if s.code == 401 => format!(
            "unauthorized: cannot {verb} {resource}: {} (herald's credentials were not accepted)",
            s.message
        ),
        kube::Error::Api(s) => format!("{verb} {url}: {} {}: {}", s.code, s.reason, s.message),
        e => format!("{verb} {url}: {e}"),
    }
}

/// A stream of `chunks` as a body reader (tests and the benchmark's fakes).
pub fn reader_of(chunks: Vec<bytes::Bytes>) -> BodyReader {
    Box::pin(
        futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>))
            .boxed()
            .into_async_read(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::io::AsyncBufReadExt as _;
    use std::io::Write as _;

    fn member(text: &str) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(text.as_bytes()).expect("gzip");
        e.finish().expect("gzip")
    }

    #[tokio::test]
    async fn every_gzip_member_is_decoded_however_the_chunks_fall() {
        let lines: Vec<String> = (0..40).map(|i| format!("{{\"event\":{i}}}\n")).collect();
        let wire: Vec<u8> = lines.iter().flat_map(|l| member(l)).collect();
        let want: String = lines.concat();
        // Whole, byte by byte, and in chunks that cut members (and their headers) anywhere.
        for size in [wire.len(), 1, 3, 7, 10, 64, 333] {
            let chunks = wire
                .chunks(size)
                .map(bytes::Bytes::copy_from_slice)
                .collect();
            let mut got = String::new();
            decoded(reader_of(chunks), true)
                .read_to_string(&mut got)
                .await
                .expect("decodes");
            assert_eq!(got, want, "chunks of {size} bytes");
        }
    }

    #[tokio::test]
    async fn a_member_is_read_as_soon_as_it_ends_before_the_next_arrives() {
        // A watch: the apiserver flushes one member per event and then waits. The event must be
        // readable at once, not when the next member (or the end of the stream) comes.
        let (tx, rx) = futures::channel::mpsc::unbounded::<std::io::Result<bytes::Bytes>>();
        let mut reader = decoded(Box::pin(rx.into_async_read()), true);
        for i in 0..5 {
            let line = format!("{{\"event\":{i}}}\n");
            tx.unbounded_send(Ok(member(&line).into())).expect("send");
            let mut got = String::new();
            tokio::time::timeout(
                std::time::Duration::from_secs(5),
                reader.read_line(&mut got),
            )
            .await
            .expect("the event is readable before the next member is sent")
            .expect("decodes");
            assert_eq!(got, line);
        }
        drop(tx);
        let mut rest = String::new();
        reader.read_to_string(&mut rest).await.expect("ends");
        assert_eq!(rest, "");
    }

    #[tokio::test]
    async fn identity_is_passed_through_and_garbage_is_an_error_not_a_panic() {
        let mut got = String::new();
        decoded(reader_of(vec!["plain\n".into()]), false)
            .read_to_string(&mut got)
            .await
            .expect("identity");
        assert_eq!(got, "plain\n");
        let mut wire = member("good\n");
        wire.extend_from_slice(b"\x1f\x8bnot gzip at all");
        let mut got = String::new();
        let err = decoded(reader_of(vec![wire.into()]), true)
            .read_to_string(&mut got)
            .await;
        assert!(err.is_err(), "a corrupt member is an error: {got:?}");
    }

    #[test]
    fn a_refusal_names_the_verb_and_the_resource_with_the_apiservers_words() {
        let url = "/apis/discovery.k8s.io/v1/endpointslices?watch=true";
        let forbidden = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"endpointslices.discovery.k8s.io is forbidden: User \"system:serviceaccount:herald:herald\" cannot watch resource \"endpointslices\" in API group \"discovery.k8s.io\" at the cluster scope","reason":"Forbidden","details":{"group":"discovery.k8s.io","kind":"endpointslices"},"code":403}"#;
        let e = api_error(http::StatusCode::FORBIDDEN, forbidden);
        assert_eq!(
            failure("watch", "endpointslices.discovery.k8s.io", url, &e),
            "forbidden: cannot watch endpointslices.discovery.k8s.io at cluster scope: \
             endpointslices.discovery.k8s.io is forbidden: User \"system:serviceaccount:herald:herald\" \
             cannot watch resource \"endpointslices\" in API group \"discovery.k8s.io\" at the cluster scope \
             (grant watch on endpointslices.discovery.k8s.io in herald's ClusterRole)"
        );
        let e = api_error(
            http::StatusCode::UNAUTHORIZED,
            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#,
        );
        assert_eq!(
            failure("list", "pods", "/api/v1/pods?limit=500", &e),
            "unauthorized: cannot list pods: Unauthorized (herald's credentials were not accepted)"
        );
        let e = api_error(
            http::StatusCode::INTERNAL_SERVER_ERROR,
            br#"{"kind":"Status","status":"Failure","message":"etcdserver: request timed out","reason":"InternalError","code":500}"#,
        );
        assert_eq!(
            failure("list", "pods", "/api/v1/pods?limit=500", &e),
            "list /api/v1/pods?limit=500: 500 InternalError: etcdserver: request timed out"
        );
    }

    #[test]
    fn an_error_body_becomes_the_apiservers_status_or_one_made_of_its_text() {
        let status = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (20)","reason":"Expired","code":410}"#;
        match api_error(http::StatusCode::GONE, status) {
            kube::Error::Api(s) => {
                assert_eq!(s.code, 410);
                assert_eq!(s.reason, "Expired");
            }
            e => panic!("{e:?}"),
        }
        // As kube-apiserver's API Priority and Fairness rejects: text, not a Status.
        let apf = b"Too many requests, please try again later.\n";
        match api_error(http::StatusCode::TOO_MANY_REQUESTS, apf) {
            kube::Error::Api(s) => {
                assert_eq!(s.code, 429);
                assert_eq!(s.reason, "TooManyRequests");
                assert_eq!(s.message, "Too many requests, please try again later.");
            }
            e => panic!("{e:?}"),
        }
    }
}
