//! `herald-bench static-server`: the machine's limit for serving one body. It fetches the exact body
//! bytes (identity and gzip) and ETag of one herald URL once, then serves them from memory with hyper,
//! with herald's headers (ETag, Content-Type, Vary, Cache-Control, x-herald-*): 304 when If-None-Match matches, gzip when Accept-Encoding has it, identity
//! otherwise. Run as its own process, like herald, so the load client does not share its runtime.

use std::convert::Infallible;
use std::sync::Arc;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

#[derive(Debug, clap::Args)]
pub struct StaticArgs {
    /// The herald URL whose body to serve (e.g. http://127.0.0.1:9095/sd/v1/pod?shard=0&shards=4).
    #[arg(long)]
    pub from: String,
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: std::net::SocketAddr,
}

struct Bodies {
    identity: Bytes,
    gzip: Bytes,
    etag: HeaderValue,
    /// herald's response headers but the per-response ones (length, encoding, date).
    headers: HeaderMap,
}

async fn fetch(from: &str) -> anyhow::Result<Bodies> {
    // No automatic decompression: the gzip bytes are kept as herald sent them.
    let http = reqwest::Client::builder().no_proxy().no_gzip().build()?;
    let plain = http.get(from).send().await?.error_for_status()?;
    let etag = plain
        .headers()
        .get(header::ETAG)
        .cloned()
        .context("herald sent no ETag")?;
    let mut headers = plain.headers().clone();
    for h in [
        header::CONTENT_LENGTH,
        header::CONTENT_ENCODING,
        header::TRANSFER_ENCODING,
        header::DATE,
        header::CONNECTION,
    ] {
        headers.remove(h);
    }
    let identity = plain.bytes().await?;
    let gz = http
        .get(from)
        .header(header::ACCEPT_ENCODING, "gzip")
        .send()
        .await?
        .error_for_status()?;
    anyhow::ensure!(
        gz.headers().get(header::CONTENT_ENCODING) == Some(&HeaderValue::from_static("gzip")),
        "herald did not answer gzip to Accept-Encoding: gzip"
    );
    let gzip = gz.bytes().await?;
    Ok(Bodies {
        identity,
        gzip,
        etag,
        headers,
    })
}

fn respond(b: &Bodies, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let h = req.headers();
    let mut r = if h.get(header::IF_NONE_MATCH) == Some(&b.etag) {
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else if h
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("gzip"))
    {
        let mut r = Response::new(Full::new(b.gzip.clone()));
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        r
    } else {
        Response::new(Full::new(b.identity.clone()))
    };
    let hs = r.headers_mut();
    for (k, v) in &b.headers {
        hs.insert(k, v.clone());
    }
    r
}

pub async fn serve(args: StaticArgs) -> anyhow::Result<()> {
    let bodies = Arc::new(fetch(&args.from).await?);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("static serving on http://{}", listener.local_addr()?);
    eprintln!(
        "static-server: identity {} bytes, gzip {} bytes, ETag {:?}",
        bodies.identity.len(),
        bodies.gzip.len(),
        bodies.etag
    );
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let bodies = bodies.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let r = respond(&bodies, &req);
                async move { Ok::<_, Infallible>(r) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
