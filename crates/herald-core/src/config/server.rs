//! `server:`: how herald's own port (service discovery, status page, metrics) is secured. Paths are
//! read by the server at start; command-line flags override each key.

use serde::Deserialize;

/// The `server:` section of the job file.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Where to serve (`--listen` overrides).
    #[serde(default)]
    pub listen: Option<String>,
    /// A file of bearer tokens, one per line, re-read when it changes.
    #[serde(default)]
    pub token_file: Option<String>,
    /// PEM certificate chain and key to serve over TLS, re-read when they change.
    #[serde(default)]
    pub tls_cert_file: Option<String>,
    #[serde(default)]
    pub tls_key_file: Option<String>,
    /// A PEM CA: clients presenting a certificate it signed are authenticated (mTLS). Needs TLS.
    #[serde(default)]
    pub client_ca_file: Option<String>,
    /// Serve without authentication on a non-loopback address.
    #[serde(default)]
    pub insecure: bool,
}
