//! `herald serve`: read and validate the job file (failing before serving, naming job and field),
//! build the upstream client config, run until SIGINT/SIGTERM.

use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use herald_server::{
    Herald, KubeApiOptions, KubeServeOptions, Security, ServeOptions, USER_AGENT, job_specs,
    kube_kinds,
};

use crate::cli::ServeArgs;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let yaml = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading job file {}", args.config.display()))?;
    let mut config = herald_core::parse_config(&yaml)
        .with_context(|| format!("job file {}", args.config.display()))?;
    config.target_allocator = target_allocator(&args, &config)?;
    for (job, field) in config.ignored_fields() {
        tracing::warn!(
            job,
            field,
            "client setting ignored: herald reads from its own upstream"
        );
    }
    let own_namespace = args.namespace.clone().or_else(service_account_namespace);
    let specs = job_specs(&config, own_namespace.as_deref())
        .with_context(|| format!("job file {}", args.config.display()))?;
    let kube_config = kube_config(&args).await?;
    let kube = kube_options(&args, &config.kube_api)?;
    let (listen, security) = server_options(&args, &config.server)?;

    let herald = Herald::start(
        specs,
        kube_config,
        ServeOptions {
            listen,
            initial_list: args.initial_list.into(),
            upstream_compression: args.upstream_compression.into(),
            user_agent: USER_AGENT.to_string(),
            kube,
            security,
            max_object_bytes: args.max_object_bytes.0,
            body_budget_bytes: args.body_budget_bytes.0,
            hot_body_bytes: args.hot_body_bytes.0,
            monitors: config.monitors.clone(),
            istio: config.istio.clone(),
            target_allocator: config.target_allocator.clone(),
        },
    )
    .await?;
    let shared = herald.shared();
    shared.metrics.set_build_info(
        env!("CARGO_PKG_VERSION"),
        env!("HERALD_COMMIT"),
        env!("HERALD_RUSTC"),
    );
    let kinds: Vec<String> = shared
        .cache
        .ids()
        .map(|r| shared.cache.get(r).resource.plural.clone())
        .collect();
    shared
        .metrics
        .export_known(&kinds, shared.kube_api.is_some());
    println!("herald serving on {}", herald.url());
    if let Some(url) = herald.kube_url() {
        println!("kubernetes API on {url}");
    }
    // Once the first sync is done, freed pages go back to the OS at once (see herald-alloc).
    let shared = shared.clone();
    tokio::spawn(async move {
        while !shared.ready() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        if herald_alloc::purge_freed_pages_at_once() {
            tracing::debug!("first sync done: freed pages are returned to the OS at once");
        }
        // And what the sync freed before that goes back now.
        herald_alloc::release_free_memory();
    });
    shutdown_signal().await;
    tracing::info!("shutting down");
    herald.stop().await;
    Ok(())
}

/// The `target_allocator:` section with the `--ta-*` flags applied (flags win; a collector list and
/// a pod selection replace each other), validated as the section is.
fn target_allocator(
    args: &ServeArgs,
    config: &herald_core::Config,
) -> anyhow::Result<Option<herald_core::TargetAllocatorConfig>> {
    use herald_core::config::target_allocator::{COLLECTORS_JOB, Collectors, parse};
    use serde_yaml::{Mapping, Value};
    let flagged = args.ta_strategy.is_some()
        || !args.ta_collector.is_empty()
        || args.ta_collector_namespace.is_some()
        || args.ta_collector_selector.is_some();
    if !flagged {
        return Ok(config.target_allocator.clone());
    }
    let mut m = Mapping::new();
    let put = |m: &mut Mapping, k: &str, v: Value| {
        m.insert(Value::from(k), v);
    };
    if let Some(file) = &config.target_allocator {
        put(&mut m, "allocation_strategy", file.strategy.as_str().into());
        if let Some(f) = file.fallback {
            put(&mut m, "allocation_fallback_strategy", f.as_str().into());
        }
        match &file.collectors {
            Collectors::Static(list) => {
                let list = list
                    .iter()
                    .map(|c| {
                        let mut e = Mapping::new();
                        e.insert("name".into(), c.name.clone().into());
                        if let Some(n) = &c.node {
                            e.insert("node".into(), n.clone().into());
                        }
                        Value::Mapping(e)
                    })
                    .collect();
                put(&mut m, "collectors", Value::Sequence(list));
            }
            Collectors::Pods {
                namespace,
                selector,
            } => {
                put(&mut m, "collector_namespace", namespace.clone().into());
                put(&mut m, "collector_selector", selector.clone().into());
            }
        }
    }
    if let Some(s) = &args.ta_strategy {
        put(&mut m, "allocation_strategy", s.clone().into());
    }
    if !args.ta_collector.is_empty() {
        m.remove("collector_namespace");
        m.remove("collector_selector");
        let list = args
            .ta_collector
            .iter()
            .map(|c| {
                let mut e = Mapping::new();
                let (name, node) = match c.split_once('@') {
                    Some((n, node)) => (n, Some(node)),
                    None => (c.as_str(), None),
                };
                e.insert("name".into(), name.into());
                if let Some(node) = node {
                    e.insert("node".into(), node.into());
                }
                Value::Mapping(e)
            })
            .collect();
        put(&mut m, "collectors", Value::Sequence(list));
    }
    if args.ta_collector_namespace.is_some() || args.ta_collector_selector.is_some() {
        m.remove("collectors");
        if let Some(ns) = &args.ta_collector_namespace {
            put(&mut m, "collector_namespace", ns.clone().into());
        }
        if let Some(sel) = &args.ta_collector_selector {
            put(&mut m, "collector_selector", sel.clone().into());
        }
    }
    let ta = parse(Value::Mapping(m)).map_err(|e| anyhow::anyhow!("--ta-* flags: {e}"))?;
    if matches!(ta.collectors, Collectors::Pods { .. })
        && config.jobs.iter().any(|j| j.name == COLLECTORS_JOB)
    {
        anyhow::bail!(
            "job {COLLECTORS_JOB:?} is reserved: herald finds the collector pods with it"
        );
    }
    Ok(Some(ta))
}

/// The Kubernetes API face's options: the config file's `kube_api:` section, flags winning.
fn kube_options(
    args: &ServeArgs,
    cfg: &herald_core::KubeApiConfig,
) -> anyhow::Result<Option<KubeServeOptions>> {
    let listen = match (args.kube_listen, &cfg.listen) {
        (Some(a), _) => a,
        (None, Some(s)) => s
            .parse()
            .with_context(|| format!("kube_api.listen {s:?} is not an address (host:port)"))?,
        (None, None) => return Ok(None),
    };
    let (resources, custom) = kube_kinds(&cfg.kinds)?;
    let mut api = KubeApiOptions {
        resources,
        ..KubeApiOptions::default()
    };
    if let Some(r) = cfg.admission_rate {
        anyhow::ensure!(r > 0.0, "kube_api.admission_rate must be positive, not {r}");
        api.admission_rate = r;
    }
    if let Some(b) = cfg.admission_burst {
        anyhow::ensure!(b > 0, "kube_api.admission_burst must be positive");
        api.admission_burst = b;
    }
    if let Some(w) = cfg.history_window {
        anyhow::ensure!(w > 0, "kube_api.history_window must be positive");
        api.history_window = w;
    }
    if let Some(ms) = cfg.watch_batch_ms {
        anyhow::ensure!(
            ms <= 1000,
            "kube_api.watch_batch_ms must be at most 1000 (a second of delay), not {ms}"
        );
        api.watch.batch_window = std::time::Duration::from_millis(ms);
    }
    Ok(Some(KubeServeOptions {
        listen,
        api,
        custom,
        token_file: args
            .kube_token_file
            .clone()
            .or_else(|| cfg.token_file.clone().map(Into::into)),
        insecure: args.kube_insecure || cfg.insecure,
        tls: tls_files(
            "kube_api",
            [
                (&args.kube_tls_cert, &cfg.tls_cert_file),
                (&args.kube_tls_key, &cfg.tls_key_file),
                (&args.kube_client_ca, &cfg.client_ca_file),
            ],
        )?,
    }))
}

/// herald's own port and its security: the config file's `server:` section, flags winning.
fn server_options(
    args: &ServeArgs,
    cfg: &herald_core::ServerConfig,
) -> anyhow::Result<(SocketAddr, Security)> {
    let listen = match (args.listen, &cfg.listen) {
        (Some(a), _) => a,
        (None, Some(s)) => s
            .parse()
            .with_context(|| format!("server.listen {s:?} is not an address (host:port)"))?,
        (None, None) => SocketAddr::from(([127, 0, 0, 1], 9095)),
    };
    let security = Security {
        token_file: pick(&args.token_file, &cfg.token_file),
        tls: tls_files(
            "server",
            [
                (&args.tls_cert, &cfg.tls_cert_file),
                (&args.tls_key, &cfg.tls_key_file),
                (&args.client_ca, &cfg.client_ca_file),
            ],
        )?,
        insecure: args.insecure || cfg.insecure,
    };
    Ok((listen, security))
}

/// A flag, else the config file's value.
fn pick(flag: &Option<PathBuf>, file: &Option<String>) -> Option<PathBuf> {
    flag.clone().or_else(|| file.clone().map(Into::into))
}

/// Certificate, key and client CA of `section`, each (flag, file value).
fn tls_files(
    section: &str,
    [cert, key, ca]: [(&Option<PathBuf>, &Option<String>); 3],
) -> anyhow::Result<Option<herald_server::tls::TlsFiles>> {
    let client_ca = pick(ca.0, ca.1);
    match (pick(cert.0, cert.1), pick(key.0, key.1)) {
        (Some(cert), Some(key)) => Ok(Some(herald_server::tls::TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (None, None) if client_ca.is_some() => {
            anyhow::bail!("{section}: a client CA needs TLS (a certificate and its key)")
        }
        (None, None) => Ok(None),
        _ => anyhow::bail!("{section}: a TLS certificate needs its key and a key its certificate"),
    }
}

/// The namespace Prometheus's `own_namespace` means: the pod's service-account namespace file
/// (prometheus/prometheus: discovery/kubernetes/kubernetes.go reads the same path).
fn service_account_namespace() -> Option<String> {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

async fn kube_config(args: &ServeArgs) -> anyhow::Result<kube::Config> {
    if let Some(url) = &args.apiserver {
        let uri = url
            .parse()
            .with_context(|| format!("--apiserver {url:?} is not a URL"))?;
        return Ok(kube::Config::new(uri));
    }
    let options = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    if let Some(path) = &args.kubeconfig {
        let kc = kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("reading kubeconfig {}", path.display()))?;
        return kube::Config::from_custom_kubeconfig(kc, &options)
            .await
            .with_context(|| format!("kubeconfig {}", path.display()));
    }
    if let Some(context) = &args.context {
        // The kubeconfig kubectl would read (KUBECONFIG, else ~/.kube/config), at that context.
        return kube::Config::from_kubeconfig(&options)
            .await
            .with_context(|| format!("kubeconfig context {context:?}"));
    }
    kube::Config::incluster().context(
        "no --apiserver, --kubeconfig or --context given and not running in a cluster (in-cluster \
         config)",
    )
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    fn serve_args(extra: &[&str]) -> ServeArgs {
        let mut argv = vec!["herald", "serve", "--config", "jobs.yaml"];
        argv.extend_from_slice(extra);
        match Cli::parse_from(argv).command {
            Command::Serve(a) => *a,
            _ => panic!("serve"),
        }
    }

    #[test]
    fn the_kube_face_is_off_unless_an_address_is_given_and_flags_win_over_the_file() {
        let off = herald_core::KubeApiConfig::default();
        assert!(kube_options(&serve_args(&[]), &off).expect("ok").is_none());
        let cfg = herald_core::parse_config(
            "jobs: []\nkube_api:\n  listen: 127.0.0.1:7000\n  kinds: [pods, configmaps]\n  admission_rate: 10\n  token_file: /etc/t\n  watch_batch_ms: 0\n",
        )
        .expect("valid")
        .kube_api;
        let k = kube_options(&serve_args(&[]), &cfg)
            .expect("ok")
            .expect("on");
        assert_eq!(k.listen.to_string(), "127.0.0.1:7000");
        let names: Vec<&str> = k.api.resources.iter().map(|r| r.plural.as_str()).collect();
        assert_eq!(names, ["pods", "configmaps"]);
        assert_eq!(k.api.admission_rate, 10.0);
        assert_eq!(k.api.watch.batch_window, std::time::Duration::ZERO);
        assert_eq!(
            k.token_file.as_deref(),
            Some(std::path::Path::new("/etc/t"))
        );
        let k = kube_options(
            &serve_args(&["--kube-listen", "127.0.0.2:8000", "--kube-token-file", "/x"]),
            &cfg,
        )
        .expect("ok")
        .expect("on");
        assert_eq!(k.listen.to_string(), "127.0.0.2:8000");
        assert_eq!(k.token_file.as_deref(), Some(std::path::Path::new("/x")));
        let defaults = kube_options(&serve_args(&["--kube-listen", "127.0.0.1:1"]), &off)
            .expect("ok")
            .expect("on");
        assert_eq!(
            defaults.api.resources.len(),
            herald_server::DEFAULT_KUBE_KINDS.len()
        );
        assert_eq!(
            defaults.api.watch.batch_window,
            herald_server::DEFAULT_WATCH_BATCH
        );
    }

    #[test]
    fn bad_kube_api_settings_are_refused_with_what_is_wrong() {
        let bad = |yaml: &str| {
            let cfg = herald_core::parse_config(yaml).expect("parses").kube_api;
            kube_options(&serve_args(&[]), &cfg)
                .expect_err("refused")
                .to_string()
        };
        assert!(bad("jobs: []\nkube_api: {listen: nowhere}\n").contains("kube_api.listen"));
        assert!(
            bad("jobs: []\nkube_api: {listen: '127.0.0.1:1', kinds: [widgets]}\n")
                .contains("widgets")
        );
        assert!(
            bad("jobs: []\nkube_api: {listen: '127.0.0.1:1', admission_rate: 0}\n")
                .contains("admission_rate")
        );
        assert!(
            bad("jobs: []\nkube_api: {listen: '127.0.0.1:1', tls_cert_file: /c}\n").contains("TLS")
        );
        assert!(
            bad("jobs: []\nkube_api: {listen: '127.0.0.1:1', watch_batch_ms: 5000}\n")
                .contains("watch_batch_ms")
        );
    }

    #[test]
    fn the_server_section_secures_herald_s_own_port_and_flags_win_over_it() {
        let cfg = herald_core::parse_config(
            "jobs: []\nserver:\n  listen: 0.0.0.0:9095\n  token_file: /t\n  tls_cert_file: /c\n  tls_key_file: /k\n  client_ca_file: /ca\n",
        )
        .expect("valid")
        .server;
        let (listen, sec) = server_options(&serve_args(&[]), &cfg).expect("ok");
        assert_eq!(listen.to_string(), "0.0.0.0:9095");
        assert_eq!(sec.token_file.as_deref(), Some(std::path::Path::new("/t")));
        let tls = sec.tls.expect("tls");
        assert_eq!(tls.client_ca.as_deref(), Some(std::path::Path::new("/ca")));
        let (listen, sec) = server_options(
            &serve_args(&[
                "--listen",
                "127.0.0.1:1",
                "--token-file",
                "/x",
                "--insecure",
            ]),
            &cfg,
        )
        .expect("ok");
        assert_eq!(listen.to_string(), "127.0.0.1:1");
        assert_eq!(sec.token_file.as_deref(), Some(std::path::Path::new("/x")));
        assert!(sec.insecure);
        let (listen, sec) =
            server_options(&serve_args(&[]), &herald_core::ServerConfig::default()).expect("ok");
        assert_eq!(listen.to_string(), "127.0.0.1:9095");
        assert!(!sec.authenticates());
        let ca_only = herald_core::parse_config("jobs: []\nserver: {client_ca_file: /ca}\n")
            .expect("valid")
            .server;
        let e = server_options(&serve_args(&[]), &ca_only).expect_err("refused");
        assert!(e.to_string().contains("client CA needs TLS"), "{e}");
    }
}
