//! `herald explain`'s side: one `GET /explain` to a herald (http, or https against a given CA),
//! with a bearer token if given, and the answer as a table.

use std::path::Path;
use std::sync::Arc;

use http_body_util::BodyExt as _;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};

use crate::escape::query as encode_query;

/// Why `herald explain` has no answer to show.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("--server {0:?}: not an http:// or https:// URL with a host")]
    BadServer(String),
    #[error("--server is https: give the CA that signed herald's certificate with --ca-file")]
    NoCa,
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("{server}: {message}")]
    Connect { server: String, message: String },
    /// herald answered with an error status and message.
    #[error("herald answered {status}: {message}")]
    Refused { status: u16, message: String },
}

/// The object asked about: kind, `NS/NAME` (or `NAME` for a Node), optional shard counts.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    pub kind: &'a str,
    pub object: &'a str,
    pub shards: Option<&'a str>,
}

impl Ask<'_> {
    /// The request path and query.
    pub fn path(&self) -> String {
        let (ns, name) = match self.object.split_once('/') {
            Some((ns, name)) => (ns, name),
            None => ("", self.object),
        };
        let mut q = format!(
            "/explain?kind={}&name={}",
            encode_query(self.kind),
            encode_query(name)
        );
        if !ns.is_empty() {
            q.push_str(&format!("&namespace={}", encode_query(ns)));
        }
        if let Some(s) = self.shards {
            q.push_str(&format!("&shards={}", encode_query(s)));
        }
        q
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|e| ClientError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Asks the herald at `server` (`http://host:port` or `https://...`) and returns its JSON answer.
/// The token is the first non-comment line of `token_file`, as herald's own token files hold them.
pub async fn fetch(
    server: &str,
    ask: &Ask<'_>,
    token_file: Option<&Path>,
    ca_file: Option<&Path>,
) -> Result<serde_json::Value, ClientError> {
    let bad = || ClientError::BadServer(server.to_string());
    let (tls, rest) = if let Some(r) = server.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = server.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(bad());
    };
    if tls && ca_file.is_none() {
        return Err(ClientError::NoCa);
    }
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') {
        return Err(bad());
    }
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let addr = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
    {
        authority.to_string()
    } else {
        format!("{authority}:{}", if tls { 443 } else { 80 })
    };
    let token = match token_file {
        Some(p) => {
            let text = String::from_utf8_lossy(&read(p)?).into_owned();
            text.lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
        }
        None => None,
    };
    let connect = |message: String| ClientError::Connect {
        server: server.to_string(),
        message,
    };
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| connect(e.to_string()))?;
    let mut req = http::Request::get(ask.path()).header(http::header::HOST, authority);
    if let Some(t) = &token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| connect(e.to_string()))?;
    let res = if tls {
        let ca = ca_file.ok_or(ClientError::NoCa)?;
        let mut roots = rustls::RootCertStore::empty();
        let pem = read(ca)?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| ClientError::File {
                path: ca.display().to_string(),
                message: e.to_string(),
            })?;
            roots.add(cert).map_err(|e| ClientError::File {
                path: ca.display().to_string(),
                message: e.to_string(),
            })?;
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| connect(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = ServerName::try_from(host).map_err(|_| bad())?;
        let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| connect(e.to_string()))?;
        send(hyper_util::rt::TokioIo::new(stream), req).await
    } else {
        send(hyper_util::rt::TokioIo::new(tcp), req).await
    }
    .map_err(connect)?;
    let (status, body) = res;
    let value: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        connect(format!(
            "answered {status} with a body that is not JSON: {e}"
        ))
    })?;
    if status != 200 {
        return Err(ClientError::Refused {
            status,
            message: value["error"].as_str().unwrap_or("").to_string(),
        });
    }
    Ok(value)
}

async fn send<T>(
    io: T,
    req: http::Request<http_body_util::Empty<bytes::Bytes>>,
) -> Result<(u16, Vec<u8>), String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = res.status().as_u16();
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes()
        .to_vec();
    driver.abort();
    Ok((status, body))
}
