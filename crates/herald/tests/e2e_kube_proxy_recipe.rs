//! The kube-proxy recipe (docs/recipes/kube-proxy-coredns.md) run by real kube-proxy v1.37.2
//! (`peers/build`): herald served as the install page sets it up (its openssl certificate, its
//! tokens file; the Kubernetes API face on TLS with bearer tokens) over kube-sim, and kube-proxy
//! in a throwaway network namespace reading herald through the recipe's kubeconfig, with only its
//! server address (a port bridged into the namespace) and the mount path changed: the certificate
//! checked for `tls-server-name`, the node agents' token read from `tokenFile`. kube-proxy then
//! writes the Service chains `herald simulate` generates for the cluster, and its log holds no
//! refused credential.
//!
//! Needs root (network namespaces), `ip` and `nft`; every socket is on a namespace's loopback.

mod kube_proxy;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_proxy::{Launch, Mode};

mod support;
use support::{KillOnDrop, block_after};

const BIN: &str = env!("CARGO_BIN_EXE_herald");

/// The nftables Service chains `herald simulate` generates for kube-sim's state on `node`.
fn simulated_service_chains(sim: &kube_sim::Sim, node: &str) -> Vec<String> {
    let input = kube_proxy::proxy_input(sim, node);
    let sets = herald_simulate::sync::Rulesets::of(&input);
    let mut names: Vec<String> = sets
        .nft_full
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("add chain ip kube-proxy "))
        .filter(|n| n.starts_with("service-"))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn kube_proxy_syncs_from_herald_through_the_recipes_kubeconfig() {
    let mode = Mode::Nftables;
    let Some(bin) = kube_proxy::kube_proxy_bin() else {
        return;
    };
    if !kube_proxy::can_run(mode.tools()) {
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let sim = rt.block_on(kube_proxy::start_sim(0));
    let node = kube_proxy::nodes(&sim, 1).remove(0);
    let dir = tempfile::tempdir().expect("tmp");
    let work = dir.path();

    // The install page's certificate and tokens, made by its own block.
    let tls = block_after("docs/install.md", "With openssl, a CA of your own");
    let out = Command::new("bash")
        .args(["-eu", "-c", &tls])
        .current_dir(work)
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "the openssl block: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tokens = std::fs::read_to_string(work.join("tokens")).expect("tokens");
    let node_token = tokens.lines().nth(1).expect("a node agents' token");
    std::fs::write(work.join("jobs.yaml"), "jobs: []\n").expect("jobs");

    // herald with the Kubernetes API face on TLS and tokens, its default kinds.
    let mut herald = KillOnDrop(
        Command::new(BIN)
            .args(["serve", "--config", "jobs.yaml", "--apiserver", &sim.url()])
            .args(["--listen", "127.0.0.1:0", "--kube-listen", "127.0.0.1:0"])
            .args(["--kube-tls-cert", "tls.crt", "--kube-tls-key", "tls.key"])
            .args(["--kube-token-file", "tokens", "-q"])
            .current_dir(work)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("herald starts"),
    );
    let mut out = BufReader::new(herald.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    let face: SocketAddr = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("stdout") > 0,
            "herald exited"
        );
        if let Some(url) = line.trim().strip_prefix("kubernetes API on https://") {
            break url.parse().expect("the face's address");
        }
    };

    // The recipe's Secret and kubeconfig, mounted at a scratch /var/lib/herald.
    let ns = kube_proxy::netns();
    let port = rt.block_on(kube_proxy::bridge(ns.name(), face));
    let mount = work.join("var-lib-herald");
    std::fs::create_dir_all(&mount).expect("mkdir");
    std::fs::copy(work.join("ca.crt"), mount.join("ca.crt")).expect("ca.crt");
    std::fs::write(mount.join("token"), node_token).expect("token");
    let kubeconfig = block_after("docs/recipes/kube-proxy-coredns.md", "## The kubeconfig")
        .replace(
            "herald-api.example.internal:6443",
            &format!("127.0.0.1:{port}"),
        )
        .replace("/var/lib/herald", &mount.display().to_string());
    assert!(
        kubeconfig.contains("tls-server-name: herald.herald.svc")
            && kubeconfig.contains("tokenFile"),
        "the recipe verifies by name and reads a token file:\n{kubeconfig}"
    );
    std::fs::write(mount.join("kubeconfig"), &kubeconfig).expect("kubeconfig");

    let mut proxy = Launch {
        bin: &bin,
        kubeconfig: &mount.join("kubeconfig"),
        node: &node,
        mode,
        cluster_cidr: kube_proxy::POD_CIDR,
        verbosity: 2,
        dir: work,
    }
    .start(ns.name());
    let want = simulated_service_chains(&sim, &node);
    assert!(!want.is_empty(), "the cluster has Services");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        proxy.check_alive();
        let got = kube_proxy::service_chains(&kube_proxy::ruleset(&ns, mode), mode);
        if got == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kube-proxy through the recipe's kubeconfig wrote {} Service chains, herald simulate {}; \
             log tail:\n{}",
            got.len(),
            want.len(),
            proxy.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = proxy.log_text();
    for refused in ["Unauthorized", "x509"] {
        assert!(
            !log.contains(refused),
            "kube-proxy's log names {refused:?}:\n{}",
            proxy.log_tail(30)
        );
    }
}
