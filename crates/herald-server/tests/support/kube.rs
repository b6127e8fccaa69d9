//! Starting herald with its Kubernetes API face in front of a kube-sim (or another herald), for the
//! `kube_api_*` and `e2e_kube_api_*` tests.

#![allow(dead_code)] // each test binary uses a different subset

use std::net::SocketAddr;
use std::time::Duration;

use herald_server::{Herald, KubeApiOptions, KubeServeOptions, ServeOptions, job_specs};
use kube_sim::generate::ClusterSpec;

/// A small generated cluster whose every address is on 127.0.0.0/8.
pub fn loopback_cluster() -> ClusterSpec {
    ClusterSpec {
        pod_cidr: "127.16.0.0/12".parse().expect("cidr"),
        node_cidr: "127.8.0.0/16".parse().expect("cidr"),
        service_cidr: "127.4.0.0/16".parse().expect("cidr"),
        ..ClusterSpec::small()
    }
}

/// The default served kinds plus `extra` (built-in names).
pub fn kube_options(extra: &[&str]) -> KubeApiOptions {
    let (mut resources, _) = herald_server::kube_kinds(&[]).expect("defaults");
    for name in extra {
        resources.push(kube_face::Resource::builtin(name).expect("built-in"));
    }
    KubeApiOptions {
        resources,
        ..KubeApiOptions::default()
    }
}

/// herald with `jobs` (a job file) and the face on a free loopback port, upstream at `upstream`;
/// waits for its first sync.
pub async fn start_herald(
    upstream: &str,
    jobs: &str,
    api: KubeApiOptions,
    user_agent: &str,
) -> Herald {
    let herald = start_herald_unsynced(
        upstream,
        jobs,
        api,
        user_agent,
        "127.0.0.1:0".parse().expect("addr"),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(30), herald.ready())
        .await
        .expect("herald syncs within 30 s");
    herald
}

/// As `start_herald`, with the face on `listen`, without waiting for the first sync.
pub async fn start_herald_unsynced(
    upstream: &str,
    jobs: &str,
    api: KubeApiOptions,
    user_agent: &str,
    listen: SocketAddr,
) -> Herald {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let cfg = herald_core::parse_config(jobs).expect("valid jobs");
    Herald::start(
        job_specs(&cfg, None).expect("valid specs"),
        kube::Config::new(upstream.parse().expect("url")),
        ServeOptions {
            user_agent: user_agent.to_string(),
            kube: Some(KubeServeOptions::plain(listen, api)),
            ..ServeOptions::default()
        },
    )
    .await
    .expect("herald starts")
}

/// herald's `/metrics` text.
pub fn metrics_text(herald: &Herald) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, herald.shared().registry())
        .expect("encode");
    out
}

/// A kube-rs client for a face at `url`.
pub fn client_for(url: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(url.parse().expect("url"))).expect("client")
}

/// A kubeconfig for a server at `url`, optionally with a bearer token and the CA (PEM) to trust.
pub fn kubeconfig(url: &str, token: Option<&str>, ca_pem: Option<&str>) -> String {
    use std::fmt::Write as _;
    let user = match token {
        Some(t) => format!("{{token: {t}}}"),
        None => "{}".to_string(),
    };
    let mut ca = String::new();
    if let Some(pem) = ca_pem {
        let b64 = base64_encode(pem.as_bytes());
        let _ = write!(ca, "\n    certificate-authority-data: {b64}");
    }
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}{ca}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: c\nusers:\n- name: u\n  user: {user}\n"
    )
}

/// A self-signed certificate for 127.0.0.1 written as PEM files in `dir`: (cert path, key path,
/// cert PEM).
pub fn self_signed(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("certificate");
    let cert_pem = ck.cert.pem();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, &cert_pem).expect("cert");
    std::fs::write(&key, ck.signing_key.serialize_pem()).expect("key");
    (cert, key, cert_pem)
}

fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
