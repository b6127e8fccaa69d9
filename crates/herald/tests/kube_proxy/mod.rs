//! Support for the real-kube-proxy tests: throwaway network namespaces (herald-simulate's `Netns`,
//! deleted on drop and swept on the next start after a killed run), code run inside one, byte
//! bridges between two namespaces' loopbacks, kube-proxy as a child process, and its rulesets read
//! back and canonicalised.
//!
//! NB: every socket here is on a namespace's own 127.0.0.1. A bridge is a listener created in one
//! namespace and a connection created in another, copied by this process: no packet leaves either
//! namespace's loopback and no address outside 127.0.0.0/8 is ever dialled.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use herald_simulate::input::{ProxyInput, from_cluster};
use herald_simulate::netns::Netns;
use kube_sim::generate::ClusterSpec;
use kube_sim::peers::controlplane::ControlPlane;
use kube_sim::{Kind, Sim, SimConfig};
use serde_json::Value;

/// The pod CIDR of the tests' clusters: every address kube-sim hands out is on 127.0.0.0/8.
pub const POD_CIDR: &str = "127.16.0.0/12";

/// kube-sim's `small` preset on loopback ranges, with at least `nodes` nodes.
pub fn spec(nodes: usize) -> ClusterSpec {
    let small = ClusterSpec::small();
    ClusterSpec {
        pod_cidr: POD_CIDR.parse().expect("cidr"),
        node_cidr: "127.8.0.0/16".parse().expect("cidr"),
        service_cidr: "127.4.0.0/16".parse().expect("cidr"),
        nodes: nodes.max(small.nodes),
        ..small
    }
}

/// kube-sim on the calling runtime's loopback with [`spec`]`(nodes)`, seed 7.
pub async fn start_sim(nodes: usize) -> Sim {
    Sim::start(SimConfig {
        spec: spec(nodes),
        seed: 7,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts")
}

/// The names of kube-sim's first `n` nodes, sorted.
pub fn nodes(sim: &Sim, n: usize) -> Vec<String> {
    let mut names: Vec<String> = sim
        .handle()
        .objects_json(Kind::Node)
        .iter()
        .filter_map(|v| v["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names.truncate(n);
    names
}

/// `herald simulate`'s view of kube-sim's cluster from `node`, with the IPv4 ranges of its
/// ServiceCIDRs (which kube-proxy watches; herald-audit's inventory does not keep them).
pub fn proxy_input(sim: &Sim, node: &str) -> ProxyInput {
    let mut cluster = herald_audit::Cluster::default();
    let mut service_cidrs = Vec::new();
    for item in sim.handle().dump()["items"].as_array().expect("a List") {
        if item["kind"] == "ServiceCIDR" {
            for c in item["spec"]["cidrs"].as_array().into_iter().flatten() {
                if let Some(c) = c.as_str().filter(|c| !c.contains(':')) {
                    service_cidrs.push(c.to_string());
                }
            }
            continue;
        }
        cluster
            .add(item.clone())
            .expect("kube-sim objects are valid");
    }
    let mut input = from_cluster(&cluster, node, POD_CIDR).expect("input");
    input.service_cidrs = service_cidrs;
    input
}

/// The kube-proxy binary `peers/build` made, or `None` (skip) outside CI.
pub fn kube_proxy_bin() -> Option<PathBuf> {
    kube_sim::peers::find("kube-proxy", kube_sim::peers::GO_PEERS_INSTALL)
}

/// Whether this machine can run the tests: root (namespaces), `ip`, and the proxy mode's tools.
/// Under `CI=true` a missing piece fails; locally the test is skipped with the reason.
pub fn can_run(tools: &[&str]) -> bool {
    let mut missing: Vec<String> = tools
        .iter()
        .filter(|t| herald_simulate::netns::which(t).is_none())
        .map(|t| format!("{t} (apt-get install iptables nftables iproute2)"))
        .collect();
    if !herald_simulate::netns::is_root() {
        missing.push("root (network namespaces)".into());
    }
    if missing.is_empty() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("required under CI=true: {}", missing.join(", "));
    }
    eprintln!("SKIPPED: missing {}", missing.join(", "));
    false
}

/// A fresh namespace with its loopback up; stale ones of killed runs are swept first.
pub fn netns() -> Netns {
    let _ = herald_simulate::netns::sweep_stale();
    let ns = Netns::create().expect("a network namespace (root)");
    ns.run("ip", &["link", "set", "lo", "up"], b"")
        .expect("loopback up in the new namespace");
    ns
}

/// Runs `f` on a thread that has joined namespace `ns`; sockets it creates belong to `ns`.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("setns {path}: {e}"));
        f()
    })
    .join()
    .expect("the namespace thread does not panic")
}

/// Runs the test body on a runtime whose threads live in namespace `ns`: kube-sim and herald
/// started in it listen on `ns`'s loopback.
pub fn run_in<F: Future<Output = ()> + Send + 'static>(
    ns: &str,
    body: impl FnOnce() -> F + Send + 'static,
) {
    in_netns(ns, move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(body())
    });
}

/// Serves `127.0.0.1:<port>` inside namespace `ns` by connecting each accepted connection to
/// `target` from the calling runtime's namespace; returns the port. Lives as long as the runtime.
pub async fn bridge(ns: &str, target: SocketAddr) -> u16 {
    let std_listener = in_netns(ns, || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind in the namespace");
        l.set_nonblocking(true).expect("non-blocking");
        l
    });
    let port = std_listener.local_addr().expect("addr").port();
    let listener = tokio::net::TcpListener::from_std(std_listener).expect("tokio listener");
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    port
}

/// `GET http://127.0.0.1:<port><path>` from inside namespace `ns` (HTTP/1.0, blocking; small
/// bodies: kube-proxy's metrics).
pub fn get_in(ns: &str, port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    in_netns(ns, move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(req.as_bytes()).ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    })
}

/// A kubeconfig for an unauthenticated server on the namespace's loopback.
pub fn kubeconfig(dir: &Path, name: &str, port: u16) -> PathBuf {
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .expect("write kubeconfig");
    path
}

/// kube-proxy's proxier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Iptables,
    Nftables,
}

impl Mode {
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
        }
    }
    pub fn tools(self) -> &'static [&'static str] {
        match self {
            Mode::Iptables => &["ip", "iptables", "iptables-save"],
            Mode::Nftables => &["ip", "nft"],
        }
    }
}

/// A kube-proxy running in a namespace; dropping it kills it.
pub struct KubeProxy {
    child: Child,
    pub ns: String,
    pub log: PathBuf,
    pub metrics_port: u16,
}

/// How to start a kube-proxy.
pub struct Launch<'a> {
    pub bin: &'a Path,
    pub kubeconfig: &'a Path,
    /// `--hostname-override`: the Node it is.
    pub node: &'a str,
    pub mode: Mode,
    pub cluster_cidr: &'a str,
    /// `-v`: 2 logs each restore's counts, 9 every restore input and nftables transaction.
    pub verbosity: u8,
    /// Where its log goes.
    pub dir: &'a Path,
}

impl Launch<'_> {
    /// Starts kube-proxy in namespace `ns`. Healthz and metrics on the namespace's loopback;
    /// conntrack sysctls left alone (`--conntrack-max-per-core=0` and zero TCP timeouts); localhost
    /// NodePorts at their default (on: kube-proxy sets `route_localnet` — of the throwaway namespace
    /// only — and writes the rules `herald simulate` models).
    pub fn start(&self, ns: &str) -> KubeProxy {
        let log = self
            .dir
            .join(format!("kube-proxy-{ns}-{}.log", self.mode.flag()));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let metrics_port = 10249;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(self.bin)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--hostname-override={}", self.node))
            .arg(format!("--proxy-mode={}", self.mode.flag()))
            .arg("--healthz-bind-address=127.0.0.1:10256")
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
            .arg("--conntrack-max-per-core=0")
            .arg("--conntrack-tcp-timeout-established=0s")
            .arg("--conntrack-tcp-timeout-close-wait=0s")
            .arg(format!("--cluster-cidr={}", self.cluster_cidr))
            .arg(format!("--v={}", self.verbosity))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start kube-proxy under ip netns exec");
        KubeProxy {
            child,
            ns: ns.to_string(),
            log,
            metrics_port,
        }
    }
}

impl KubeProxy {
    /// Fails when kube-proxy has exited, with the end of its log.
    pub fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "kube-proxy in {} exited ({status}); log tail:\n{}",
                self.ns,
                self.log_tail(40)
            );
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// A metric's value (the first sample whose line starts with `series`).
    pub fn metric(&self, series: &str) -> Option<f64> {
        let text = get_in(&self.ns, self.metrics_port, "/metrics")?;
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for KubeProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The namespace's ruleset as kube-proxy's mode writes it, canonicalised: counters and handles
/// dropped, and lines (iptables) or objects and set elements (nftables) sorted, since kube-proxy
/// writes Services in Go map order, which differs from run to run.
pub fn ruleset(ns: &Netns, mode: Mode) -> Vec<String> {
    match mode {
        Mode::Iptables => {
            let out = Command::new("ip")
                .args(["netns", "exec", ns.name(), "iptables-save"])
                .output()
                .expect("iptables-save");
            canonical_iptables(&String::from_utf8_lossy(&out.stdout))
        }
        Mode::Nftables => {
            let out = Command::new("ip")
                .args(["netns", "exec", ns.name(), "nft", "-j", "list", "ruleset"])
                .output()
                .expect("nft -j list ruleset");
            canonical_nft(&String::from_utf8_lossy(&out.stdout))
        }
    }
}

/// iptables-save output without comments and counters, each line prefixed by its table, sorted.
pub fn canonical_iptables(save: &str) -> Vec<String> {
    let mut table = String::new();
    let mut out = Vec::new();
    for line in save.lines() {
        if line.starts_with('#') || line == "COMMIT" || line.is_empty() {
            continue;
        }
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
            continue;
        }
        let line = match line.strip_prefix(':') {
            // ":CHAIN POLICY [packets:bytes]"
            Some(decl) => {
                let mut parts = decl.split_whitespace();
                format!(
                    ":{} {}",
                    parts.next().unwrap_or(""),
                    parts.next().unwrap_or("")
                )
            }
            None => line.to_string(),
        };
        out.push(format!("{table} {line}"));
    }
    out.sort();
    out
}

/// `nft -j list ruleset` as one sorted line per table, chain, set, map and rule, with handles,
/// counters' values and the metainfo record dropped and set elements sorted.
pub fn canonical_nft(json: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    let mut out: Vec<String> = v["nftables"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|i| i.get("metainfo").is_none())
                .map(|i| {
                    let mut i = i.clone();
                    scrub(&mut i);
                    i.to_string()
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn scrub(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("handle");
            if let Some(Value::Object(c)) = m.get_mut("counter") {
                c.remove("packets");
                c.remove("bytes");
            }
            if let Some(Value::Array(elems)) = m.get_mut("elem") {
                elems.sort_by_key(|e| e.to_string());
            }
            for (_, x) in m.iter_mut() {
                scrub(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// Lines in one canonical ruleset and not the other, at most `max` of each.
pub fn diff(a_name: &str, a: &[String], b_name: &str, b: &[String], max: usize) -> String {
    use std::collections::BTreeSet;
    let (sa, sb): (BTreeSet<_>, BTreeSet<_>) = (a.iter().collect(), b.iter().collect());
    let only_a: Vec<_> = sa.difference(&sb).take(max).collect();
    let only_b: Vec<_> = sb.difference(&sa).take(max).collect();
    format!(
        "{} lines vs {}; only in {a_name}: {only_a:#?}\nonly in {b_name}: {only_b:#?}",
        a.len(),
        b.len()
    )
}

/// The Service chains of a canonical ruleset (`KUBE-SVC-*` declarations; nftables `service-*`
/// chains holding rules), by name.
pub fn service_chains(lines: &[String], mode: Mode) -> Vec<String> {
    let mut names: Vec<String> = match mode {
        Mode::Iptables => lines
            .iter()
            .filter_map(|l| l.strip_prefix("nat :KUBE-SVC-"))
            .map(|rest| format!("KUBE-SVC-{}", rest.split(' ').next().unwrap_or("")))
            .collect(),
        Mode::Nftables => lines
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            // Chains with rules: kube-proxy flushes a stale Service chain at once but deletes it
            // only at a sync at least a second later (pkg/proxy/nftables/proxier.go staleChains),
            // so a quiet cluster keeps it, empty.
            .filter_map(|v| v["rule"]["chain"].as_str().map(str::to_string))
            .filter(|n| n.starts_with("service-"))
            .collect(),
    };
    names.sort();
    names.dedup();
    names
}

/// kube-sim's meter: open watches by resource.
pub fn open_watches(stats: &Value) -> BTreeMap<String, i64> {
    stats["by_resource"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v["watches_open"].as_i64().unwrap_or(0)))
                .filter(|(_, n)| *n != 0)
                .collect()
        })
        .unwrap_or_default()
}

/// A list from the real apiserver (`ControlPlane`) with each item's `kind` and `apiVersion` filled in.
pub async fn list(cp: &ControlPlane, path: &str, kind: &str, api_version: &str) -> Vec<Value> {
    let mut v = cp.get_json(path).await.unwrap_or_else(|e| panic!("{e:#}"));
    let mut items = match v["items"].take() {
        Value::Array(a) => a,
        _ => Vec::new(),
    };
    for i in &mut items {
        i["kind"] = kind.into();
        i["apiVersion"] = api_version.into();
    }
    items
}

/// What `herald simulate` generates for the apiserver's current state on `node`: the Service
/// chains of its full iptables restore and nftables transaction.
pub async fn simulated_service_chains(cp: &ControlPlane, node: &str, mode: Mode) -> Vec<String> {
    let mut cluster = herald_audit::Cluster::default();
    for item in list(cp, "/api/v1/services", "Service", "v1")
        .await
        .into_iter()
        .chain(
            list(
                cp,
                "/apis/discovery.k8s.io/v1/endpointslices",
                "EndpointSlice",
                "discovery.k8s.io/v1",
            )
            .await,
        )
    {
        cluster
            .add(item)
            .expect("the apiserver's objects are valid");
    }
    let mut input = herald_simulate::input::from_cluster(&cluster, node, &pod_cidr())
        .expect("simulate's input");
    input.service_cidrs = list(
        cp,
        "/apis/networking.k8s.io/v1/servicecidrs",
        "ServiceCIDR",
        "networking.k8s.io/v1",
    )
    .await
    .iter()
    .flat_map(|c| c["spec"]["cidrs"].as_array().cloned().unwrap_or_default())
    .filter_map(|c| c.as_str().filter(|c| !c.contains(':')).map(str::to_string))
    .collect();
    simulated_chains(&herald_simulate::sync::Rulesets::of(&input), mode)
}

pub fn pod_cidr() -> String {
    ClusterSpec::small().pod_cidr.to_string()
}

/// The Service chains of `sets`' full iptables restore or nftables transaction, sorted.
pub fn simulated_chains(sets: &herald_simulate::sync::Rulesets, mode: Mode) -> Vec<String> {
    let mut names: Vec<String> = match mode {
        Mode::Iptables => sets
            .iptables_full
            .text
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .filter(|l| l.starts_with("KUBE-SVC-"))
            .map(|l| l.split(' ').next().unwrap_or("").to_string())
            .collect(),
        Mode::Nftables => sets
            .nft_full
            .text
            .lines()
            .filter_map(|l| l.strip_prefix("add chain ip kube-proxy "))
            .filter(|n| n.starts_with("service-"))
            .map(str::to_string)
            .collect(),
    };
    names.sort();
    names.dedup();
    names
}
