//! TLS for a serving port (rustls): a certificate chain and key from PEM files, re-read when either
//! file changes so a rotated certificate (cert-manager, a mounted Secret) takes effect without a
//! restart, optionally client certificates verified against a CA file (mTLS; also re-read), and an
//! accept loop that serves an axum router over it, marking requests whose client certificate
//! verified (`VerifiedClient`, which `auth` reads).
//!
//! NB: client-go sends bearer tokens only over TLS, so the Kubernetes API face needs TLS for its
//! tokens to reach it from kubectl or any informer.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// Marks a request that came over a TLS connection whose client certificate the client CA verified
/// (set by `serve`; never by anything a client sends).
#[derive(Debug, Clone, Copy)]
pub struct VerifiedClient;

/// Why a certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading TLS certificate {path}: {message}")]
    Cert { path: String, message: String },
    #[error("reading TLS key {path}: {message}")]
    Key { path: String, message: String },
    #[error("reading client CA {path}: {message}")]
    ClientCa { path: String, message: String },
    #[error("TLS certificate {cert} and key {key} do not form a usable pair: {message}")]
    Config {
        cert: String,
        key: String,
        message: String,
    },
}

/// Certificate and key files, and the CA that client certificates must chain to (mTLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With it, clients may present a certificate signed by this CA (PEM) instead of a token; one
    /// that does not verify fails the handshake.
    pub client_ca: Option<PathBuf>,
}

type Mtimes = (SystemTime, SystemTime, Option<SystemTime>);

impl TlsFiles {
    /// Server certificate and key, no client certificates.
    pub fn new(cert: PathBuf, key: PathBuf) -> TlsFiles {
        TlsFiles {
            cert,
            key,
            client_ca: None,
        }
    }

    fn mtimes(&self) -> Option<Mtimes> {
        let m = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let ca = match &self.client_ca {
            Some(p) => Some(m(p)?),
            None => None,
        };
        Some((m(&self.cert)?, m(&self.key)?, ca))
    }

    /// A verifier accepting client certificates that chain to `client_ca`, and clients without one
    /// (they may still bring a token; the gate decides).
    fn client_verifier(
        &self,
        provider: &Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>, TlsError> {
        let Some(path) = &self.client_ca else {
            return Ok(None);
        };
        let err = |message: String| TlsError::ClientCa {
            path: path.display().to_string(),
            message,
        };
        let mut roots = rustls::RootCertStore::empty();
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| err(e.to_string()))?;
        if certs.is_empty() {
            return Err(err("no certificate in the file".into()));
        }
        for c in certs {
            roots.add(c).map_err(|e| err(e.to_string()))?;
        }
        rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map(Some)
        .map_err(|e| err(e.to_string()))
    }

    /// A server config from the files as they are now.
    pub fn load(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let cert_path = self.cert.display().to_string();
        let key_path = self.key.display().to_string();
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| TlsError::Cert {
                path: cert_path.clone(),
                message: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(TlsError::Cert {
                path: cert_path,
                message: "no certificate in the file".into(),
            });
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| TlsError::Key {
            path: key_path.clone(),
            message: e.to_string(),
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = self.client_verifier(&provider)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| {
                match verifier {
                    Some(v) => b.with_client_cert_verifier(v),
                    None => b.with_no_client_auth(),
                }
                .with_single_cert(certs, key)
            })
            .map_err(|e| TlsError::Config {
                cert: cert_path,
                key: key_path,
                message: e.to_string(),
            })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A server config that follows its files: checked at most every `CHECK_EVERY` when a connection
/// arrives; a broken new pair is logged and the last good one kept.
#[derive(Debug)]
pub struct Reloading {
    files: TlsFiles,
    state: Mutex<ReloadState>,
}

#[derive(Debug)]
struct ReloadState {
    config: Arc<rustls::ServerConfig>,
    mtimes: Option<Mtimes>,
    checked: std::time::Instant,
}

const CHECK_EVERY: Duration = Duration::from_secs(2);

impl Reloading {
    pub fn new(files: TlsFiles) -> Result<Reloading, TlsError> {
        let config = files.load()?;
        Ok(Reloading {
            state: Mutex::new(ReloadState {
                config,
                mtimes: files.mtimes(),
                checked: std::time::Instant::now(),
            }),
            files,
        })
    }

    /// The config to accept the next connection with.
    pub fn current(&self) -> Arc<rustls::ServerConfig> {
        let mut s = self.state.lock().expect("tls state lock is never poisoned");
        if s.checked.elapsed() >= CHECK_EVERY {
            s.checked = std::time::Instant::now();
            let now = self.files.mtimes();
            if now != s.mtimes {
                match self.files.load() {
                    Ok(config) => {
                        tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                        s.config = config;
                        s.mtimes = now;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "new TLS files unusable; keeping the previous ones")
                    }
                }
            }
        }
        s.config.clone()
    }
}

/// Serves `router` over TLS on `listener` until `shutdown`; each connection ends with it.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<Reloading>,
    router: Router,
    shutdown: CancellationToken,
) {
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
        let router = router.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream));
            let tls_stream = match handshake.await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            // NB: the verifier only lets a client certificate through if it chains to the client CA.
            let verified = tls_stream
                .get_ref()
                .1
                .peer_certificates()
                .is_some_and(|c| !c.is_empty());
            let svc = hyper_util::service::TowerToHyperService::new(router.map_request(
                move |r: Request<hyper::body::Incoming>| {
                    let mut r = r.map(Body::new);
                    r.extensions_mut()
                        .insert(axum::extract::connect_info::ConnectInfo(peer));
                    if verified {
                        r.extensions_mut().insert(VerifiedClient);
                    }
                    r
                },
            ));
            let io = hyper_util::rt::TokioIo::new(tls_stream);
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(io, svc);
            tokio::select! {
                _ = conn => {}
                () = shutdown.cancelled() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_refused_with_their_path() {
        let dir = std::env::temp_dir().join(format!("herald-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        std::fs::write(dir.join("cert.pem"), "not a certificate").expect("write");
        std::fs::write(dir.join("key.pem"), "not a key").expect("write");
        let files = TlsFiles::new(dir.join("cert.pem"), dir.join("key.pem"));
        let e = files.load().expect_err("garbage");
        assert!(e.to_string().contains("cert.pem"), "{e}");
        let missing = TlsFiles::new(dir.join("nope.pem"), dir.join("key.pem"));
        assert!(
            missing
                .load()
                .expect_err("missing")
                .to_string()
                .contains("nope.pem")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
