//! `herald serve`: read and validate the job file (failing before serving, naming job and field),
//! build the upstream client config, run until SIGINT/SIGTERM.

use anyhow::Context as _;
use herald_server::{
    Herald, KubeApiOptions, KubeServeOptions, ServeOptions, USER_AGENT, job_specs, kube_kinds,
};

use crate::cli::ServeArgs;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let yaml = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading job file {}", args.config.display()))?;
    let config = herald_core::parse_config(&yaml)
        .with_context(|| format!("job file {}", args.config.display()))?;
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

    let herald = Herald::start(
        specs,
        kube_config,
        ServeOptions {
            listen: args.listen,
            initial_list: args.initial_list.into(),
            user_agent: USER_AGENT.to_string(),
            kube,
        },
    )
    .await?;
    println!("herald serving on {}", herald.url());
    if let Some(url) = herald.kube_url() {
        println!("kubernetes API on {url}");
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    herald.stop().await;
    Ok(())
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
    Ok(Some(KubeServeOptions {
        listen,
        api,
        custom,
        token_file: args
            .kube_token_file
            .clone()
            .or_else(|| cfg.token_file.clone().map(Into::into)),
        insecure: args.kube_insecure || cfg.insecure,
    }))
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
    if let Some(path) = &args.kubeconfig {
        let kc = kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("reading kubeconfig {}", path.display()))?;
        return kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .with_context(|| format!("kubeconfig {}", path.display()));
    }
    kube::Config::incluster().context(
        "no --apiserver or --kubeconfig given and not running in a cluster (in-cluster config)",
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
