//! The Go peers `peers/build` makes from upstream modules: `promsd` (Prometheus's own kubernetes_sd
//! run as a library, `peers/cmd/promsd`) and `informer-judge` (client-go shared informers,
//! `peers/cmd/informer-judge`), found and run as child processes on loopback.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::Labels;
use super::compare::discovery_only;
use super::process::Peer;

/// How CI (and a developer) builds them.
pub const GO_PEERS_INSTALL: &str = "peers/build (Go 1.26; puts them in ~/.cache/herald-peers/bin)";

/// The path of Go peer `name`: `$<NAME>_BIN`, else `$HERALD_PEERS_CACHE/bin/<name>` (default
/// `~/.cache/herald-peers/bin`, where `peers/build` links its newest build), else `PATH`. `None` after
/// printing how to build it.
///
/// # Panics
/// Under `CI=true` when the binary is missing: CI must have built it.
pub fn find(name: &str) -> Option<PathBuf> {
    let env = format!("{}_BIN", name.to_uppercase().replace('-', "_"));
    let cache = std::env::var_os("HERALD_PEERS_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/herald-peers")));
    let found = std::env::var_os(&env)
        .map(PathBuf::from)
        .or_else(|| {
            cache
                .map(|c| c.join("bin").join(name))
                .filter(|p| p.is_file())
        })
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        });
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!(
                "{name} is required under CI=true but was not found: build it with {GO_PEERS_INSTALL}"
            );
        }
        eprintln!("SKIPPED: {name} not found; build it with {GO_PEERS_INSTALL}");
    }
    found
}

/// A running promsd: one kubernetes_sd_configs entry's Discoverer.
pub struct Promsd {
    peer: Peer,
    http: reqwest::Client,
}

impl Promsd {
    /// Starts `bin` with `sd_config` (one kubernetes_sd_configs entry, YAML, without
    /// `kubeconfig_file`) against the server `kubeconfig` (YAML) describes, with client-go's
    /// WatchListClient on or off (Prometheus's own tests run with it off).
    pub async fn start(bin: &Path, sd_config: &str, kubeconfig: &str, watch_list: bool) -> Promsd {
        // NB: a relative kubeconfig_file is read from promsd's working directory, the peer's dir
        // (promsd does not call SetDirectory as Prometheus's config loader would).
        let sd = format!("{sd_config}\nkubeconfig_file: kubeconfig\n");
        let peer = Peer::start(
            "promsd",
            bin,
            &[("sd.yml", &sd), ("kubeconfig", kubeconfig)],
            |dir, port| {
                vec![
                    format!("--config={}", dir.join("sd.yml").display()),
                    format!("--listen=127.0.0.1:{port}"),
                    format!("--watch-list={watch_list}"),
                ]
            },
            "/healthz",
        )
        .await;
        Promsd {
            peer,
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("http client"),
        }
    }

    /// Every target of the groups the Discoverer sent (the latest per source), each with its
    /// group's labels merged in (target labels win, as in Prometheus's scrape/target.go
    /// `targetsFromGroup`), reduced to discovery's labels and sorted; once nothing was sent for
    /// `quiet_ms`.
    pub async fn targets(&mut self, quiet_ms: u64) -> Result<Vec<Labels>, String> {
        self.peer.check_alive()?;
        let url = format!("{}/targets?quiet_ms={quiet_ms}", self.peer.base());
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !resp.status().is_success() {
            let code = resp.status();
            return Err(format!(
                "GET {url}: {code}: {}",
                resp.text().await.unwrap_or_default()
            ));
        }
        let body: Value = resp
            .json()
            .await
            .map_err(|e| format!("GET {url}: not JSON: {e}"))?;
        let mut out = Vec::new();
        for g in body["groups"].as_array().into_iter().flatten() {
            let group: Labels = serde_json::from_value(g["labels"].clone()).unwrap_or_default();
            for t in g["targets"].as_array().into_iter().flatten() {
                let mut labels = group.clone();
                let own: Labels = serde_json::from_value(t.clone())
                    .map_err(|e| format!("GET {url}: a target is not a label set: {e}"))?;
                labels.extend(own);
                out.push(discovery_only(&labels));
            }
        }
        out.sort();
        Ok(out)
    }

    pub fn log_text(&self) -> String {
        self.peer.log_text()
    }
}

/// What the client is to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentType {
    Json,
    Protobuf,
}

impl ContentType {
    fn flag(self) -> &'static str {
        match self {
            ContentType::Json => "json",
            ContentType::Protobuf => "protobuf",
        }
    }
}

/// How an informer-judge is run.
#[derive(Debug, Clone)]
pub struct JudgeOptions {
    pub content: ContentType,
    /// `KUBE_FEATURE_WatchListClient`: a watch with sendInitialEvents instead of LIST+WATCH.
    pub watch_list: bool,
    pub label_selector: String,
    pub field_selector: String,
    /// Watch one namespace through the namespaced path (empty: all namespaces).
    pub namespace: String,
    pub kinds: Vec<&'static str>,
}

/// One object in an informer's store: its resourceVersion and the hash of its JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Stored {
    pub rv: String,
    pub hash: String,
}

/// Every informer's store: kind → `namespace/name` → object.
pub type Stores = BTreeMap<String, BTreeMap<String, Stored>>;

/// What `/stores` reports.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Report {
    pub watch_list: bool,
    pub synced: bool,
    pub kinds: Stores,
    /// Requests made by kind (`list`, `watch`, `watch_list`) and, not 200, by kind and status.
    pub requests: BTreeMap<String, u64>,
}

/// A running informer-judge.
pub struct InformerJudge {
    peer: Peer,
    http: reqwest::Client,
    pub name: String,
}

impl InformerJudge {
    /// Starts `bin` against the server `kubeconfig` (YAML) describes; `name` says which judge it is
    /// in reports.
    pub async fn start(
        bin: &Path,
        name: &str,
        kubeconfig: &str,
        opts: &JudgeOptions,
    ) -> InformerJudge {
        // --watch-list sets KUBE_FEATURE_WatchListClient in the judge before client-go reads it.
        let peer = Peer::start(
            "informer-judge",
            bin,
            &[("kubeconfig", kubeconfig)],
            |dir, port| {
                let mut args = vec![
                    format!("--kubeconfig={}", dir.join("kubeconfig").display()),
                    format!("--listen=127.0.0.1:{port}"),
                    format!("--content-type={}", opts.content.flag()),
                    format!("--watch-list={}", opts.watch_list),
                    format!("--label-selector={}", opts.label_selector),
                    format!("--field-selector={}", opts.field_selector),
                    format!("--namespace={}", opts.namespace),
                ];
                args.extend(opts.kinds.iter().map(|k| k.to_string()));
                args
            },
            "/healthz",
        )
        .await;
        InformerJudge {
            peer,
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("http client"),
            name: name.to_string(),
        }
    }

    pub async fn report(&mut self) -> Result<Report, String> {
        self.peer
            .check_alive()
            .map_err(|e| format!("{}: {e}", self.name))?;
        let url = format!("{}/stores", self.peer.base());
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("{}: GET {url}: {e}", self.name))?;
        if !resp.status().is_success() {
            return Err(format!("{}: GET {url}: {}", self.name, resp.status()));
        }
        resp.json()
            .await
            .map_err(|e| format!("{}: GET {url}: {e}", self.name))
    }

    pub fn log_text(&self) -> String {
        self.peer.log_text()
    }
}

/// How `got` differs from the server's keys and versions (`want`, read from `server`) and from the
/// reference judge's hashes, in at most a few lines per kind.
pub fn store_problems(
    who: &str,
    server: &str,
    got: &Stores,
    want: &BTreeMap<String, BTreeMap<String, String>>,
    reference: Option<&Stores>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, objs) in want {
        let Some(have) = got.get(kind) else {
            out.push(format!("{who}: no store for {kind}"));
            continue;
        };
        let missing: Vec<&String> = objs.keys().filter(|k| !have.contains_key(*k)).collect();
        let extra: Vec<&String> = have.keys().filter(|k| !objs.contains_key(*k)).collect();
        let stale: Vec<String> = objs
            .iter()
            .filter_map(|(k, rv)| {
                let h = have.get(k)?;
                (h.rv != *rv).then(|| format!("{k} at {} ({server} {rv})", h.rv))
            })
            .collect();
        let hashes: Vec<&String> = match reference.and_then(|r| r.get(kind)) {
            Some(r) => have
                .iter()
                .filter(|(k, h)| r.get(*k).is_some_and(|x| x.rv == h.rv && x.hash != h.hash))
                .map(|(k, _)| k)
                .collect(),
            None => Vec::new(),
        };
        if !(missing.is_empty() && extra.is_empty() && stale.is_empty() && hashes.is_empty()) {
            out.push(format!(
                "{who} {kind}: {} missing {:?}, {} extra {:?}, {} at another version {:?}, {} hashing otherwise than the reference {:?}",
                missing.len(),
                &missing[..missing.len().min(3)],
                extra.len(),
                &extra[..extra.len().min(3)],
                stale.len(),
                &stale[..stale.len().min(3)],
                hashes.len(),
                &hashes[..hashes.len().min(3)],
            ));
        }
    }
    out
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The first sync went the way each judge's WatchList setting says (`(name, watch_list)` per
/// judge, in the order of `reports`): by WatchList without a LIST, or by LIST+WATCH without a
/// WatchList request, for each of the `kinds` it watches.
pub fn assert_synced_as_configured<'a>(
    judges: impl IntoIterator<Item = (&'a str, bool)>,
    reports: &[Report],
    kinds: usize,
) {
    for ((name, watch_list), r) in judges.into_iter().zip(reports) {
        let n = |k: &str| r.requests.get(k).copied().unwrap_or(0);
        if watch_list {
            assert!(
                n("watch_list") >= kinds as u64 && n("list") == 0,
                "{name} synced without WatchList (client-go fell back to LIST+WATCH): requests {:?}",
                r.requests
            );
        } else {
            assert!(
                n("list") >= kinds as u64 && n("watch_list") == 0,
                "{name} did not sync by LIST+WATCH: requests {:?}",
                r.requests
            );
        }
    }
}
