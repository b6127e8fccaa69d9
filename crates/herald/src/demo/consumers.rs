//! `herald demo --consumers N`: consumers attached to herald from the start, so the live line shows
//! what herald saves — N simulated Prometheus shards polling every job's pre-sharded `/sd/v1` body
//! (`?shard=i&shards=N`, as a hashmod-sharded Prometheus fleet would), and N informers (kube-rs's
//! `watcher`: list, then watch, relisting on 410) on herald's Kubernetes API face, cycling through
//! pods, endpointslices and services as kube-proxy's and an ingress controller's informers do.
//!
//! Each consumer reports once it has had a first full answer (an SD body per job; an informer's
//! initial list), so the first live line already counts them.

use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How often a simulated Prometheus shard refreshes its SD (Prometheus's http_sd default is 60 s;
/// shorter so the demo's counters move).
const SD_REFRESH: Duration = Duration::from_secs(5);

/// The running consumers; dropping this stops them.
pub struct Attached {
    tasks: Vec<JoinHandle<()>>,
    pub sd_shards: usize,
    pub informers: usize,
}

impl Drop for Attached {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts `n` SD shards polling `jobs` on `sd_base` and `n` informers on `kube_url`, and waits (at
/// most `settle`) until each has had its first answer.
pub async fn attach(
    n: usize,
    sd_base: &str,
    jobs: &[String],
    kube_url: Option<&str>,
    settle: Duration,
) -> anyhow::Result<Attached> {
    let (ready_tx, mut ready_rx) = mpsc::channel::<()>(2 * n.max(1));
    let mut tasks = Vec::new();
    let http = reqwest::Client::new();
    for shard in 0..n {
        let urls: Vec<String> = jobs
            .iter()
            .map(|j| format!("{sd_base}/sd/v1/{j}?shard={shard}&shards={n}"))
            .collect();
        tasks.push(tokio::spawn(sd_shard(http.clone(), urls, ready_tx.clone())));
    }
    let mut informers = 0;
    if let Some(url) = kube_url {
        let client = |url: &str| -> anyhow::Result<kube::Client> {
            Ok(kube::Client::try_from(kube::Config::new(url.parse()?))?)
        };
        for i in 0..n {
            // One client each: each informer is its own process in the cluster it stands for.
            let c = client(url)?;
            let ready = ready_tx.clone();
            tasks.push(match i % 3 {
                0 => tokio::spawn(informer(kube::Api::<Pod>::all(c), ready)),
                1 => tokio::spawn(informer(kube::Api::<EndpointSlice>::all(c), ready)),
                _ => tokio::spawn(informer(kube::Api::<Service>::all(c), ready)),
            });
            informers += 1;
        }
    }
    drop(ready_tx);
    let expected = n + informers;
    let _ = tokio::time::timeout(settle, async {
        for _ in 0..expected {
            if ready_rx.recv().await.is_none() {
                break;
            }
        }
    })
    .await;
    Ok(Attached {
        tasks,
        sd_shards: n,
        informers,
    })
}

/// One Prometheus shard: every job's body for its shard, every `SD_REFRESH`.
async fn sd_shard(http: reqwest::Client, urls: Vec<String>, ready: mpsc::Sender<()>) {
    let mut ready = Some(ready);
    loop {
        let mut all_ok = true;
        for url in &urls {
            let ok = match http
                .get(url)
                .header("X-Prometheus-Refresh-Interval-Seconds", "5")
                .send()
                .await
            {
                Ok(res) if res.status().is_success() => res.bytes().await.is_ok(),
                _ => false,
            };
            all_ok &= ok;
        }
        if all_ok && let Some(tx) = ready.take() {
            let _ = tx.send(()).await;
        }
        tokio::time::sleep(SD_REFRESH).await;
    }
}

/// One informer: list+watch of `api` for as long as the demo runs, holding nothing but the stream.
async fn informer<K>(api: kube::Api<K>, ready: mpsc::Sender<()>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut ready = Some(ready);
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        if let Ok(watcher::Event::InitDone) = event
            && let Some(tx) = ready.take()
        {
            let _ = tx.send(()).await;
        }
        // Errors: the stream backs off and the watcher relists by itself.
    }
}
