//! Who may read what herald serves, on every port: bearer tokens from a file (re-read when it
//! changes), client certificates verified against a CA by the TLS layer (mTLS), and the middleware
//! each face puts in front of its routes. `/healthz` and `/readyz` stay open for probes.
//!
//! NB: tokens are secrets: they are never logged, and comparison takes the same time whatever
//! matches.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::Response;
use prometheus_client::metrics::counter::Counter;

use crate::tls::{TlsFiles, VerifiedClient};

/// Paths answered without a credential: kubelet probes carry none.
pub const OPEN_PATHS: &[&str] = &["/healthz", "/readyz"];

/// How one serving port is secured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// Bearer tokens, one per line; re-read when the file changes.
    pub token_file: Option<PathBuf>,
    /// Serve over TLS with these files; with `client_ca`, verified client certificates also
    /// authenticate.
    pub tls: Option<TlsFiles>,
    /// Allow a non-loopback address without any credential.
    pub insecure: bool,
}

impl Security {
    /// Whether requests need a credential.
    pub fn authenticates(&self) -> bool {
        self.token_file.is_some() || self.tls.as_ref().is_some_and(|t| t.client_ca.is_some())
    }

    /// Refuses to serve `face` on a non-loopback `addr` without authentication unless `insecure`.
    pub fn check_exposure(&self, face: &'static str, addr: SocketAddr) -> Result<(), AuthError> {
        if self.authenticates() || self.insecure || addr.ip().is_loopback() {
            Ok(())
        } else {
            Err(AuthError::Unauthenticated { face, addr })
        }
    }

    /// The tokens to check, read now (a missing or empty file stops start-up).
    pub fn tokens(&self) -> Result<Option<Arc<Tokens>>, TokenError> {
        Ok(self
            .token_file
            .clone()
            .map(Tokens::load)
            .transpose()?
            .map(Arc::new))
    }
}

/// Why a port may not be served as configured.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(
        "refusing to serve the {face} on {addr} without authentication: anyone who can reach it would read every pod address and label herald holds; give a token file or a client CA, listen on loopback, or pass --insecure (--kube-insecure for the Kubernetes API)"
    )]
    Unauthenticated {
        face: &'static str,
        addr: SocketAddr,
    },
}

/// Bearer tokens from a file, one per line (blank lines and `#` comments ignored), re-read when the
/// file changes.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    state: RwLock<(Option<SystemTime>, Vec<String>)>,
}

/// Why a token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("reading token file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("token file {0} holds no token")]
    Empty(String),
}

impl Tokens {
    pub fn load(path: PathBuf) -> Result<Tokens, TokenError> {
        let t = Tokens {
            path,
            state: RwLock::new((None, vec![])),
        };
        t.reload()?;
        Ok(t)
    }

    /// Re-reads the file if it changed. On error the previous tokens stay in force.
    pub fn reload(&self) -> Result<bool, TokenError> {
        let read_err = |source| TokenError::Read {
            path: self.path.display().to_string(),
            source,
        };
        let mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .map_err(read_err)?;
        if self.state.read().expect("token lock").0 == Some(mtime) {
            return Ok(false);
        }
        let text = std::fs::read_to_string(&self.path).map_err(read_err)?;
        let tokens: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect();
        if tokens.is_empty() {
            return Err(TokenError::Empty(self.path.display().to_string()));
        }
        *self.state.write().expect("token lock") = (Some(mtime), tokens);
        Ok(true)
    }

    pub fn accepts(&self, presented: &str) -> bool {
        let state = self.state.read().expect("token lock");
        state.1.iter().fold(false, |ok, t| {
            ok | constant_time_eq(t.as_bytes(), presented.as_bytes())
        })
    }

    /// Re-reads the file every `every` until `stop`.
    pub async fn watch_file(
        self: Arc<Self>,
        every: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            match self.reload() {
                Ok(true) => tracing::info!(path = %self.path.display(), "token file reloaded"),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "token file unusable; keeping the previous tokens")
                }
            }
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token and no verified client certificate.
    Missing,
    /// A bearer token none of the configured ones matches.
    Wrong,
}

/// A face's gate: what it accepts, how it answers a refusal, and what it counts.
#[derive(Clone)]
pub struct Gate {
    pub tokens: Option<Arc<Tokens>>,
    /// Whether a verified client certificate alone is enough.
    pub mtls: bool,
    pub refused: Counter,
    pub answer: fn(Refusal) -> Response,
}

impl Gate {
    /// Whether `req` may pass, and why not.
    pub fn judge(&self, req: &Request) -> Result<(), Refusal> {
        if OPEN_PATHS.contains(&req.uri().path()) {
            return Ok(());
        }
        if self.mtls && req.extensions().get::<VerifiedClient>().is_some() {
            return Ok(());
        }
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match (presented, &self.tokens) {
            (None, _) => Err(Refusal::Missing),
            (Some(t), Some(tokens)) if tokens.accepts(t) => Ok(()),
            (Some(_), _) => Err(Refusal::Wrong),
        }
    }

    /// `router` behind this gate.
    pub fn protect(self, router: Router) -> Router {
        router.layer(middleware::from_fn_with_state(Arc::new(self), gate))
    }
}

async fn gate(State(g): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    match g.judge(&req) {
        Ok(()) => next.run(req).await,
        Err(r) => {
            g.refused.inc();
            (g.answer)(r)
        }
    }
}

/// Puts `router` behind a gate when `security` authenticates, and starts re-reading its token file
/// until `stop`. Returns the router to serve.
pub fn guard(
    router: Router,
    security: &Security,
    refused: Counter,
    answer: fn(Refusal) -> Response,
    stop: &tokio_util::sync::CancellationToken,
) -> Result<Router, TokenError> {
    if !security.authenticates() {
        return Ok(router);
    }
    let tokens = security.tokens()?;
    if let Some(t) = &tokens {
        tokio::spawn(t.clone().watch_file(Duration::from_secs(2), stop.clone()));
    }
    let gate = Gate {
        tokens,
        mtls: security.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        refused,
        answer,
    };
    Ok(gate.protect(router))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_read_from_a_file_reloaded_on_change_and_kept_when_it_breaks() {
        let dir = std::env::temp_dir().join(format!("herald-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let path = dir.join("tokens");
        std::fs::write(&path, "# comment\nalpha\n\n").expect("write");
        let t = Tokens::load(path.clone()).expect("valid");
        assert!(t.accepts("alpha"));
        assert!(!t.accepts("alph"));
        assert!(!t.accepts("beta"));
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&path, "beta\n").expect("write");
        // make sure the mtime differs even on coarse clocks
        let later = SystemTime::now() + Duration::from_secs(2);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(later))
            .expect("touch");
        assert!(t.reload().expect("reloaded"));
        assert!(t.accepts("beta") && !t.accepts("alpha"));
        std::fs::write(&path, "\n").expect("write");
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(later + Duration::from_secs(2)))
            .expect("touch");
        assert!(t.reload().is_err(), "an empty file is refused");
        assert!(t.accepts("beta"), "the previous tokens stay");
        assert!(Tokens::load(dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn request(path: &str, token: Option<&str>, verified: bool) -> Request {
        let mut b = Request::builder().uri(path);
        if let Some(t) = token {
            b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let mut r = b.body(axum::body::Body::empty()).expect("request");
        if verified {
            r.extensions_mut().insert(VerifiedClient);
        }
        r
    }

    #[test]
    fn the_gate_lets_probes_through_and_tells_a_missing_credential_from_a_wrong_one() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("tokens");
        std::fs::write(&path, "s3cret\n").expect("write");
        let gate = Gate {
            tokens: Some(Arc::new(Tokens::load(path).expect("tokens"))),
            mtls: true,
            refused: Counter::default(),
            answer: |_| Response::default(),
        };
        assert_eq!(gate.judge(&request("/healthz", None, false)), Ok(()));
        assert_eq!(gate.judge(&request("/readyz", None, false)), Ok(()));
        assert_eq!(
            gate.judge(&request("/sd/v1", None, false)),
            Err(Refusal::Missing)
        );
        assert_eq!(
            gate.judge(&request("/sd/v1", Some("nope"), false)),
            Err(Refusal::Wrong)
        );
        assert_eq!(
            gate.judge(&request("/sd/v1", Some("s3cret"), false)),
            Ok(())
        );
        assert_eq!(gate.judge(&request("/metrics", None, true)), Ok(()));
        let tokens_only = Gate {
            mtls: false,
            ..gate
        };
        assert_eq!(
            tokens_only.judge(&request("/", None, true)),
            Err(Refusal::Missing)
        );
    }

    #[test]
    fn a_non_loopback_address_without_authentication_is_refused_with_the_reason() {
        let open = Security::default();
        let addr: SocketAddr = "0.0.0.0:9095".parse().expect("addr");
        let e = open
            .check_exposure("service discovery", addr)
            .expect_err("refused");
        assert!(e.to_string().contains("--insecure"), "{e}");
        assert!(e.to_string().contains("0.0.0.0:9095"), "{e}");
        assert!(
            open.check_exposure("x", "127.0.0.1:1".parse().expect("addr"))
                .is_ok()
        );
        let insecure = Security {
            insecure: true,
            ..Security::default()
        };
        assert!(insecure.check_exposure("x", addr).is_ok());
        let tokens = Security {
            token_file: Some("/t".into()),
            ..Security::default()
        };
        assert!(tokens.check_exposure("x", addr).is_ok());
    }
}
