//! A throw-away PKI for the TLS tests: a CA, server certificates for 127.0.0.1 and client
//! certificates it signs, as PEM; and an HTTPS client (rustls, ring) trusting a given CA.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM.
pub struct Pair {
    pub cert: String,
    pub key: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn issue(&self, names: Vec<String>, cn: &str) -> Pair {
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self) -> Pair {
        self.issue(vec!["127.0.0.1".into(), "localhost".into()], "herald")
    }

    /// A client certificate.
    pub fn client(&self, cn: &str) -> Pair {
        self.issue(vec![], cn)
    }
}

impl Pair {
    /// Writes `NAME.crt` and `NAME.key` in `dir` (key first, so a reader never pairs a new
    /// certificate with an old key for long); returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&key, &self.key).expect("write key");
        std::fs::write(&cert, &self.cert).expect("write cert");
        (cert, key)
    }
}

/// An HTTPS client trusting only `ca_pem`, presenting `identity` when given; each request opens its
/// own connection. NB: hand-written over tokio-rustls and hyper rather than reqwest, because giving
/// reqwest a preconfigured rustls config needs its `rustls-no-provider` feature, which Cargo then
/// turns on for every reqwest client the workspace's tests build, and those panic without a
/// process-wide crypto provider.
pub fn client(ca_pem: &str, identity: Option<&Pair>) -> TlsClient {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA certificate");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots);
    let config = match identity {
        Some(p) => {
            let chain = CertificateDer::pem_slice_iter(p.cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("client cert PEM");
            let key = PrivateKeyDer::from_pem_slice(p.key.as_bytes()).expect("client key PEM");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client identity")
        }
        None => builder.with_no_client_auth(),
    };
    TlsClient {
        config: Arc::new(config),
    }
}

/// See `client`.
pub struct TlsClient {
    config: Arc<rustls::ClientConfig>,
}

impl TlsClient {
    /// `GET url` (an `https://127.0.0.1:PORT/path` URL), with a bearer token when given: the status,
    /// or why no response came (handshake refused, connection closed).
    pub async fn get(&self, url: &str, token: Option<&str>) -> Result<u16, String> {
        self.fetch(url, token).await.map(|r| r.status().as_u16())
    }

    /// As `get`, the whole response.
    pub async fn fetch(
        &self,
        url: &str,
        token: Option<&str>,
    ) -> Result<http::Response<bytes::Bytes>, String> {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| format!("{url} is not https"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let tcp = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| format!("connect {authority}: {e}"))?;
        let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        let name = rustls_pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("server name {host}: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .map_err(|e| format!("HTTP handshake: {e}"))?;
        tokio::spawn(conn);
        let mut req = http::Request::get(path).header("host", authority);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| e.to_string())?;
        let res = sender
            .send_request(req)
            .await
            .map_err(|e| format!("request: {e}"))?;
        let (parts, body) = res.into_parts();
        let body = http_body_util::BodyExt::collect(body)
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok(http::Response::from_parts(parts, body))
    }
}
