//! herald's own port with authentication and TLS on: a real Prometheus (Debian 2.42, http_sd with
//! `authorization` and `tls_config`) discovers through it; requests without a credential get 401,
//! with a wrong token 403; `/healthz` and `/readyz` stay open; a verified client certificate
//! (mTLS) is accepted and one from another CA refused; a replaced certificate is served without a
//! restart.
//!
//! NB: nothing here dials a non-loopback address: kube-sim's addresses are loopback, and
//! Prometheus drops every target (`action: drop` on `__address__`), listing them as dropped.

#[path = "peers/harness.rs"]
mod peers;
#[path = "support/pki.rs"]
mod pki;

use std::path::Path;
use std::time::Duration;

use herald_server::tls::TlsFiles;
use herald_server::{Herald, Security, ServeOptions, job_specs};
use kube_sim::peers as installed;
use peers::cluster::{loopback_spec, start_sim};
use peers::prometheus::Prometheus;
use pki::Ca;

const JOBS: &str = "jobs:\n- name: pods\n  role: pod\n- name: services\n  role: service\n";
const TOKEN: &str = "prometheus-token-7f3a";

/// How long a replaced certificate or Prometheus's discovery may take.
const DEADLINE: Duration = Duration::from_secs(30);

struct Secured {
    herald: Herald,
    _sim: kube_sim::Sim,
    ca: Ca,
    dir: tempfile::TempDir,
}

async fn start(client_ca: bool) -> Secured {
    let sim = start_sim(loopback_spec(), 11).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("herald test CA");
    let (cert, key) = ca.server().write(dir.path(), "tls");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("# prometheus\n{TOKEN}\n")).expect("tokens");
    let client_ca = client_ca.then(|| {
        let path = dir.path().join("client-ca.crt");
        std::fs::write(&path, ca.pem()).expect("client CA");
        path
    });
    let cfg = herald_core::parse_config(JOBS).expect("valid jobs");
    let herald = Herald::start(
        job_specs(&cfg, None).expect("specs"),
        kube::Config::new(sim.url().parse().expect("url")),
        ServeOptions {
            security: Security {
                token_file: Some(tokens),
                tls: Some(TlsFiles {
                    cert,
                    key,
                    client_ca,
                }),
                insecure: false,
            },
            ..ServeOptions::default()
        },
    )
    .await
    .expect("herald starts");
    tokio::time::timeout(Duration::from_secs(20), herald.ready())
        .await
        .expect("herald syncs within 20 s");
    Secured {
        herald,
        _sim: sim,
        ca,
        dir,
    }
}

async fn status(client: &pki::TlsClient, url: &str, token: Option<&str>) -> u16 {
    client
        .get(url, token)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_herald_answers_401_with_a_wrong_one_403_and_probes_stay_open() {
    let s = start(false).await;
    let url = s.herald.url();
    assert!(url.starts_with("https://"), "{url}");
    let client = pki::client(&s.ca.pem(), None);
    for path in ["/sd/v1/pods", "/sd/v1", "/metrics", "/"] {
        assert_eq!(
            status(&client, &format!("{url}{path}"), None).await,
            401,
            "{path}"
        );
        assert_eq!(
            status(&client, &format!("{url}{path}"), Some("not-the-token")).await,
            403,
            "{path}"
        );
    }
    let res = client
        .fetch(&format!("{url}/sd/v1/pods"), None)
        .await
        .expect("request");
    assert_eq!(
        res.headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer realm=\"herald\"")
    );
    assert_eq!(
        status(&client, &format!("{url}/sd/v1/pods"), Some(TOKEN)).await,
        200
    );
    assert_eq!(status(&client, &format!("{url}/healthz"), None).await, 200);
    assert_eq!(status(&client, &format!("{url}/readyz"), None).await, 200);
    let metrics = client
        .fetch(&format!("{url}/metrics"), Some(TOKEN))
        .await
        .expect("metrics");
    let metrics = String::from_utf8_lossy(metrics.body()).into_owned();
    assert!(
        metrics.contains("herald_http_auth_refused_total 9"),
        "every refusal is counted: {metrics}"
    );
    assert!(
        !metrics.contains(TOKEN),
        "the token never appears in metrics"
    );
    s.herald.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_from_the_client_ca_is_accepted_and_one_from_another_ca_refused() {
    let s = start(true).await;
    let url = format!("{}/sd/v1/pods", s.herald.url());
    let trusted = pki::client(&s.ca.pem(), Some(&s.ca.client("prometheus")));
    assert_eq!(status(&trusted, &url, None).await, 200);
    let stranger = Ca::new("someone else's CA").client("intruder");
    let untrusted = pki::client(&s.ca.pem(), Some(&stranger));
    let refused = untrusted.get(&url, None).await;
    assert!(
        refused.is_err(),
        "a certificate from another CA fails the handshake: {refused:?}"
    );
    let anonymous = pki::client(&s.ca.pem(), None);
    assert_eq!(status(&anonymous, &url, None).await, 401);
    assert_eq!(status(&anonymous, &url, Some(TOKEN)).await, 200);
    s.herald.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_certificate_is_served_without_a_restart() {
    let s = start(false).await;
    let url = format!("{}/healthz", s.herald.url());
    let old = pki::client(&s.ca.pem(), None);
    assert_eq!(status(&old, &url, None).await, 200);
    let next_ca = Ca::new("rotated CA");
    next_ca.server().write(s.dir.path(), "tls");
    let new = pki::client(&next_ca.pem(), None);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match new.get(&url, None).await {
            Ok(200) => break,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "the new certificate is not served within {DEADLINE:?}: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        old.get(&url, None).await.is_err(),
        "a client trusting only the old CA no longer connects"
    );
    s.herald.stop().await;
}

fn prometheus_config(herald: &str, dir: &Path, ca_pem: &str) -> String {
    let ca = dir.join("prom-ca.crt");
    std::fs::write(&ca, ca_pem).expect("ca");
    let creds = dir.join("prom-token");
    std::fs::write(&creds, TOKEN).expect("token");
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n\
         - job_name: pods\n  http_sd_configs:\n  - url: {herald}/sd/v1/pods\n    refresh_interval: 1s\n    \
         authorization:\n      type: Bearer\n      credentials_file: {}\n    \
         tls_config:\n      ca_file: {}\n  \
         relabel_configs:\n  - source_labels: [__address__]\n    regex: \".+\"\n    action: drop\n",
        creds.display(),
        ca.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_discovers_through_herald_over_tls_with_a_bearer_token() {
    let Some(bin) = installed::find("prometheus", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let s = start(false).await;
    let client = pki::client(&s.ca.pem(), None);
    let sd = client
        .fetch(&format!("{}/sd/v1/pods", s.herald.url()), Some(TOKEN))
        .await
        .expect("sd");
    let body: serde_json::Value = serde_json::from_slice(sd.body()).expect("json");
    let want: usize = body
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| g["targets"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(want > 10, "the job serves targets ({want})");
    let mut prom = Prometheus::start(
        &bin,
        &prometheus_config(&s.herald.url(), s.dir.path(), &s.ca.pem()),
    )
    .await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let targets = prom.targets().await.unwrap_or_default();
        let dropped = targets
            .iter()
            .filter(|t| t.health.is_empty() && t.job == "pods")
            .count();
        let active = targets.iter().filter(|t| !t.health.is_empty()).count();
        assert_eq!(active, 0, "every target is dropped, none dialed");
        if dropped == want {
            assert!(
                targets
                    .iter()
                    .all(|t| t.discovered.contains_key("__meta_kubernetes_pod_name")),
                "the discovered labels are herald's"
            );
            break;
        }
        if let Err(dead) = prom.check_alive() {
            panic!("{dead}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Prometheus lists {dropped} of {want} targets after {DEADLINE:?}; its problems: {:?}",
            prom.problems()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let problems: Vec<String> = prom
        .problems()
        .into_iter()
        .filter(|l| l.contains("http_sd") || l.contains("discovery"))
        .collect();
    assert!(
        problems.is_empty(),
        "Prometheus reports discovery problems: {problems:?}"
    );
    s.herald.stop().await;
}
