//! The documentation's code blocks cannot drift from herald:
//!
//! - every `herald <subcommand> --flag` in a shell block of README.md, docs/ and deploy/**/README.md
//!   is a flag `herald <subcommand> --help` lists (a failure names the file, the line and the flag);
//! - every YAML block parses;
//! - the blocks marked `<!-- runnable ... -->` run, in order, one shell per page, in a scratch
//!   directory: the README's "herald against a cluster" against a kube-sim standing in for
//!   `~/.kube/config`; the install page's TLS recipe (its certificate verified for the names the
//!   ServiceMonitor and the node agents use), Secrets, Helm and kustomize installs against a
//!   recording kubectl and helm that render instead of applying (the rendered objects then carry
//!   the image the page sets, the Secrets the Deployment mounts, and nothing that needs
//!   prometheus-operator's CRDs); the Prometheus recipe's scrape configs through `promtool check
//!   config`;
//! - the kube-proxy/CoreDNS recipe's kubeconfig, with only its server address and file paths
//!   pointed at a scratch herald, lets real kubectl list through herald's TLS face with the install
//!   page's certificate and a token from a file.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kube_sim::peers as installed;

mod support;
use support::{Block, KillOnDrop, all_blocks, free_port, is_shell, page_script, root};

const BIN: &str = env!("CARGO_BIN_EXE_herald");

/// The shell lines of a block joined across `\` continuations, each with its first line number.
fn logical_lines(b: &Block) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut first = 0;
    let mut heredoc: Option<String> = None;
    for (i, raw) in b.text.lines().enumerate() {
        let n = b.line + 1 + i;
        if let Some(end) = &heredoc {
            if raw.trim() == end {
                heredoc = None;
            }
            continue;
        }
        if current.is_empty() {
            first = n;
        }
        let line = raw.strip_prefix("$ ").unwrap_or(raw);
        if let Some(cont) = line.strip_suffix('\\') {
            current.push_str(cont);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        if let Some(at) = current.find("<<") {
            let tag = current[at + 2..]
                .trim_start_matches('-')
                .trim()
                .trim_matches(['\'', '"'])
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string();
            if !tag.is_empty() {
                heredoc = Some(tag);
            }
        }
        out.push((first, std::mem::take(&mut current)));
    }
    out
}

/// The commands of a shell line: split at `|`, `;` and `&` outside quotes and outside brackets
/// (a synopsis's `[--output table|json]` and `(--kubeconfig PATH | --from DIR)` stay whole).
fn commands(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let (mut depth, mut quote) = (0usize, None::<char>);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[' | '(') => depth += 1,
            (None, ']' | ')') => depth = depth.saturating_sub(1),
            (None, '|' | ';' | '&') if depth == 0 => {
                out.push(String::new());
                continue;
            }
            _ => {}
        }
        out.last_mut().expect("a command").push(c);
    }
    out
}

/// The `herald` invocations of one shell line: (subcommand, flags). `herald` counts at the start
/// of a command (after `VAR=value` assignments), as a path ending in `/herald`, or after
/// `cargo run ... --`.
fn invocations(line: &str) -> Vec<(String, Vec<String>)> {
    let line = line.split(" #").next().unwrap_or(line);
    if line.trim_start().starts_with('#') {
        return vec![];
    }
    let mut out = Vec::new();
    for command in commands(line) {
        let words: Vec<&str> = command
            .split_whitespace()
            .map(|w| w.trim_matches(['"', '\'', '[', ']', '(', ')']))
            .filter(|w| !w.is_empty())
            .collect();
        let mut at = words
            .iter()
            .position(|w| !w.contains('=') || w.starts_with('-'))
            .unwrap_or(words.len());
        if words.get(at) == Some(&"cargo") {
            match words.iter().position(|w| *w == "--") {
                Some(p) if words.contains(&"herald") => at = p,
                _ => continue,
            }
        } else if !words
            .get(at)
            .is_some_and(|w| *w == "herald" || w.ends_with("/herald"))
        {
            continue;
        }
        let Some(sub) = words.get(at + 1) else {
            continue;
        };
        let flags = words[at + 2..]
            .iter()
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(|w| {
                w.split('=')
                    .next()
                    .expect("a flag")
                    .trim_end_matches("...")
                    .to_string()
            })
            .collect();
        out.push((sub.to_string(), flags));
    }
    out
}

/// herald's subcommands, from `herald --help`.
fn subcommands() -> BTreeSet<String> {
    let out = Command::new(BIN)
        .arg("--help")
        .output()
        .expect("herald --help");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split("Commands:")
        .nth(1)
        .expect("a Commands section")
        .split("\n\n")
        .next()
        .expect("the list")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

/// The `--flags` `herald <sub> --help` lists.
fn help_flags(sub: &str) -> BTreeSet<String> {
    let out = Command::new(BIN)
        .args([sub, "--help"])
        .output()
        .expect("herald --help");
    assert!(out.status.success(), "herald {sub} --help");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|w| w.trim_end_matches([',', '.']))
        .filter(|w| w.starts_with("--"))
        .map(|w| w.split(['=', '<', '[']).next().expect("a flag").to_string())
        .collect()
}

#[test]
fn invocations_are_found_where_herald_is_the_command() {
    let b = Block {
        file: "x.md".into(),
        line: 1,
        lang: "sh".into(),
        marker: None,
        text: "herald serve --config j.yaml \\\n  --listen=x --kubeconfig k &\n\
               helm install herald deploy/helm/herald --set a=b\n\
               RUST_LOG=x target/release/herald explain Pod a/b --server u | jq .\n\
               cargo run --release -p herald -- demo --for 5s\n\
               cat > f <<'EOF'\nherald serve --not-a-command\nEOF\n\
               herald audit (--kubeconfig PATH | --from DIR...) [--output table|json] &\n"
            .into(),
    };
    let found: Vec<(usize, String, Vec<String>)> = logical_lines(&b)
        .into_iter()
        .flat_map(|(n, l)| invocations(&l).into_iter().map(move |(s, f)| (n, s, f)))
        .collect();
    let flags = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        found,
        vec![
            (
                2,
                "serve".into(),
                flags(&["--config", "--listen", "--kubeconfig"])
            ),
            (5, "explain".into(), flags(&["--server"])),
            (6, "demo".into(), flags(&["--for"])),
            (
                10,
                "audit".into(),
                flags(&["--kubeconfig", "--from", "--output"])
            ),
        ]
    );
}

#[test]
fn every_herald_flag_in_a_shell_block_is_one_its_help_lists() {
    let subs = subcommands();
    assert!(
        subs.contains("serve") && subs.contains("completion"),
        "{subs:?}"
    );
    let mut help: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for b in all_blocks().iter().filter(|b| is_shell(b)) {
        for (n, line) in logical_lines(b) {
            for (sub, flags) in invocations(&line) {
                if sub.starts_with('-') {
                    continue;
                }
                if !subs.contains(&sub) {
                    problems.push(format!("{}:{n}: herald {sub}: no such subcommand", b.file));
                    continue;
                }
                let known = help.entry(sub.clone()).or_insert_with(|| help_flags(&sub));
                for f in flags {
                    checked += 1;
                    if !known.contains(&f) {
                        problems.push(format!(
                            "{}:{n}: herald {sub} {f}: not in `herald {sub} --help`",
                            b.file
                        ));
                    }
                }
            }
        }
    }
    assert!(checked >= 20, "flags were found in the docs ({checked})");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_yaml_block_parses() {
    let mut problems = Vec::new();
    let mut n = 0;
    for b in all_blocks()
        .iter()
        .filter(|b| matches!(b.lang.as_str(), "yaml" | "yml"))
    {
        n += 1;
        for doc in serde_yaml::Deserializer::from_str(&b.text) {
            if let Err(e) = <serde_yaml::Value as serde::Deserialize>::deserialize(doc) {
                problems.push(format!("{}:{}: {e}", b.file, b.line));
                break;
            }
        }
    }
    assert!(n >= 15, "YAML blocks found ({n})");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The runnable blocks of `file`, in order.
fn runnable(file: &str) -> Vec<Block> {
    let v: Vec<Block> = all_blocks()
        .into_iter()
        .filter(|b| b.file == file && b.marked("runnable"))
        .collect();
    assert!(!v.is_empty(), "{file} has runnable blocks");
    v
}

/// A scratch directory for a page's blocks: `work/` (with `deploy` linked to the repository's, as
/// the blocks run from a checkout), `home/`, `bin/` (the recording shims and herald), `record/`.
struct Scratch {
    _dir: tempfile::TempDir,
    work: PathBuf,
    home: PathBuf,
    bin: PathBuf,
    record: PathBuf,
}

fn scratch() -> Scratch {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().to_path_buf();
    let s = Scratch {
        work: p.join("work"),
        home: p.join("home"),
        bin: p.join("bin"),
        record: p.join("record"),
        _dir: dir,
    };
    for d in [&s.work, &s.home, &s.bin, &s.record] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::os::unix::fs::symlink(root().join("deploy"), s.work.join("deploy")).expect("link deploy");
    std::os::unix::fs::symlink(BIN, s.bin.join("herald")).expect("link herald");
    s
}

/// A kubectl that renders instead of applying: `create` runs as a client-side dry run, `apply -k`
/// as `kubectl kustomize`, `apply -f -` keeps its input; each output is a file in `$RECORD`.
const KUBECTL_SHIM: &str = r#"#!/usr/bin/env bash
set -euo pipefail
out="$RECORD/$(date +%s%N)-kubectl.yaml"
ns=(); rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n|--namespace) ns=(--namespace "$2"); shift 2 ;;
    *) rest+=("$1"); shift ;;
  esac
done
set -- "${rest[@]}"
case "$1" in
  create) "$REAL_KUBECTL" "$@" "${ns[@]}" --dry-run=client -o yaml > "$out" ;;
  apply)
    if [ "$2" = -k ]; then "$REAL_KUBECTL" kustomize "$3" > "$out"
    elif [ "$2" = -f ] && [ "$3" = - ]; then cat > "$out"
    else echo "recording kubectl: apply $* is not recorded" >&2; exit 2; fi ;;
  *) echo "recording kubectl: $* is not recorded" >&2; exit 2 ;;
esac
"#;

/// A helm whose `install` is `helm template` with the same arguments, kept in `$RECORD`.
const HELM_SHIM: &str = r#"#!/usr/bin/env bash
set -euo pipefail
[ "$1" = install ] || { echo "recording helm: $* is not recorded" >&2; exit 2; }
shift
"$REAL_HELM" template "$@" > "$RECORD/$(date +%s%N)-helm.yaml"
"#;

fn write_exec(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Runs `script` with bash (`-eu`, within 120 s) in the scratch directory; panics with its output
/// naming `what` unless it succeeds. Returns stdout.
fn run_script(s: &Scratch, what: &str, script: &str, env: &[(&str, &str)]) -> String {
    let path = format!(
        "{}:{}",
        s.bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // NB: no pipefail: `curl … | head -c 300` is how a reader looks at a body, and curl's
    // SIGPIPE is not a failure. A timeout, so a block waiting for a herald that never comes fails.
    let out = Command::new("timeout")
        .args(["120", "bash", "-eu", "-c"])
        .arg(script)
        .current_dir(&s.work)
        .env("PATH", path)
        .env("HOME", &s.home)
        .env("RECORD", &s.record)
        .env("HELM_CONFIG_HOME", s.home.join("helm-config"))
        .env("HELM_CACHE_HOME", s.home.join("helm-cache"))
        .envs(env.iter().copied())
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- script\n{script}\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The objects recorded by the shims, in the order they were made: (recorder, object).
fn recorded(s: &Scratch) -> Vec<(String, serde_json::Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&s.record)
        .expect("record")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let who = f
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('-').nth(1))
            .unwrap_or("")
            .trim_end_matches(".yaml")
            .to_string();
        let text = std::fs::read_to_string(&f).expect("read");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = <serde_json::Value as serde::Deserialize>::deserialize(doc).expect("YAML");
            if !v.is_null() {
                out.push((who.clone(), v));
            }
        }
    }
    out
}

#[test]
fn the_install_page_runs_as_written() {
    let Some(kubectl) = installed::find("kubectl", installed::KUBECTL_INSTALL) else {
        return;
    };
    let Some(helm) = installed::find("helm", installed::GO_PEERS_INSTALL) else {
        return;
    };
    let s = scratch();
    write_exec(&s.bin.join("kubectl"), KUBECTL_SHIM);
    write_exec(&s.bin.join("helm"), HELM_SHIM);
    let blocks = runnable("docs/install.md");
    run_script(
        &s,
        "docs/install.md",
        &page_script(&blocks),
        &[
            ("REAL_KUBECTL", kubectl.to_str().expect("UTF-8")),
            ("REAL_HELM", helm.to_str().expect("UTF-8")),
        ],
    );

    // The certificate verifies with the CA for every name clients dial.
    for name in [
        "herald",
        "herald.herald",
        "herald.herald.svc",
        "herald.herald.svc.cluster.local",
    ] {
        let out = Command::new("openssl")
            .args([
                "verify",
                "-CAfile",
                "ca.crt",
                "-verify_hostname",
                name,
                "tls.crt",
            ])
            .current_dir(&s.work)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "tls.crt verifies for {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let objects = recorded(&s);
    let secret = |name: &str| -> &serde_json::Value {
        objects
            .iter()
            .map(|(_, o)| o)
            .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("the page creates Secret {name}"))
    };
    let decoded = |o: &serde_json::Value, key: &str| -> String {
        use std::io::Write as _;
        let b64 = o["data"][key]
            .as_str()
            .unwrap_or_else(|| panic!("key {key} in {}", o["metadata"]["name"]));
        let mut child = Command::new("base64")
            .arg("-d")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("base64");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b64.as_bytes())
            .expect("write");
        String::from_utf8(child.wait_with_output().expect("base64").stdout).expect("UTF-8")
    };
    let tls = secret("herald-tls");
    assert_eq!(tls["type"], "kubernetes.io/tls");
    assert_eq!(tls["metadata"]["namespace"], "herald");
    let ca = decoded(tls, "ca.crt");
    assert!(ca.contains("BEGIN CERTIFICATE"), "ca.crt is a certificate");
    assert!(decoded(tls, "tls.key").contains("PRIVATE KEY"));
    let tokens = secret("herald-tokens");
    let lines = decoded(tokens, "tokens");
    let prometheus = decoded(tokens, "prometheus");
    assert!(
        !prometheus.is_empty() && lines.lines().any(|l| l == prometheus),
        "the ServiceMonitor's token is a line of the tokens file"
    );

    // Each install: the image the page sets, the Secrets it made, nothing needing CRDs.
    let installs: Vec<(&str, Vec<&serde_json::Value>)> = ["helm", "kubectl"]
        .into_iter()
        .map(|who| {
            (
                who,
                objects
                    .iter()
                    .filter(|(w, o)| w == who && o["kind"] != "Secret")
                    .map(|(_, o)| o)
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    for (who, objs) in &installs {
        let deployment = objs
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .unwrap_or_else(|| panic!("{who}: the install renders the Deployment"));
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(
            pod["containers"][0]["image"], "registry.example.com/herald:0.1.0",
            "{who}: the image the page sets"
        );
        let mounted: BTreeSet<&str> = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .filter_map(|v| v["secret"]["secretName"].as_str())
            .collect();
        assert_eq!(
            mounted,
            ["herald-tls", "herald-tokens"].into_iter().collect(),
            "{who}: mounts the Secrets the page creates"
        );
        for o in objs {
            assert!(
                !matches!(
                    o["kind"].as_str(),
                    Some("ServiceMonitor" | "PrometheusRule")
                ),
                "{who}: {} needs prometheus-operator's CRDs",
                o["kind"]
            );
            if o["metadata"]["namespace"].is_string() {
                assert_eq!(o["metadata"]["namespace"], "herald", "{who}: {}", o["kind"]);
            }
        }
    }
}

fn small_sim(rt: &tokio::runtime::Runtime) -> kube_sim::Sim {
    rt.block_on(kube_sim::Sim::start(kube_sim::SimConfig {
        spec: kube_sim::generate::ClusterSpec {
            pod_cidr: "127.16.0.0/12".parse().expect("cidr"),
            node_cidr: "127.8.0.0/16".parse().expect("cidr"),
            service_cidr: "127.4.0.0/16".parse().expect("cidr"),
            ..kube_sim::generate::ClusterSpec::small()
        },
        ..Default::default()
    }))
    .expect("kube-sim starts")
}

#[test]
fn the_readmes_cluster_block_serves_a_cluster_from_its_kubeconfig() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let sim = small_sim(&rt);
    let s = scratch();
    std::fs::create_dir_all(s.home.join(".kube")).expect("mkdir");
    std::fs::write(s.home.join(".kube/config"), sim.kubeconfig_yaml()).expect("kubeconfig");
    let blocks = runnable("README.md");
    // NB: the only change: a free port for the block's 9095, as tests run side by side.
    let port = free_port();
    let script = page_script(&blocks).replace("127.0.0.1:9095", &format!("127.0.0.1:{port}"));
    let out = run_script(&s, "README.md", &script, &[]);
    assert!(
        out.contains("\"targets\":[\"127."),
        "pod targets served:\n{out}"
    );
    assert!(
        out.contains("\"pods\"") && out.contains("\"endpointslices\""),
        "the jobs listed:\n{out}"
    );
}

#[test]
fn the_prometheus_recipe_is_a_config_promtool_accepts() {
    let Some(promtool) = installed::find("promtool", installed::PROMETHEUS_INSTALL) else {
        return;
    };
    let blocks = runnable("docs/recipes/prometheus.md");
    let dir = tempfile::tempdir().expect("tmp");
    for b in blocks.iter().filter(|b| b.lang == "yaml") {
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, &b.text).expect("write");
        // NB: --syntax-only: the token and CA files are the Prometheus pod's, not this machine's.
        let out = Command::new(&promtool)
            .args(["check", "config", "--syntax-only"])
            .arg(&file)
            .output()
            .expect("promtool runs");
        assert!(
            out.status.success(),
            "{}:{}: promtool check config:\n{}{}",
            b.file,
            b.line,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cfg: serde_yaml::Value = serde_yaml::from_str(&b.text).expect("YAML");
        for job in cfg["scrape_configs"].as_sequence().expect("scrape_configs") {
            let sd = &job["http_sd_configs"][0];
            let url = sd["url"].as_str().expect("an http_sd url");
            assert!(
                url.starts_with("https://herald.herald.svc:9095/sd/v1/")
                    && url.contains("shard=0&shards=2"),
                "{url}: herald's Service, TLS, a shard"
            );
            assert!(
                sd["authorization"]["credentials_file"].is_string(),
                "{url}: a token"
            );
            assert!(
                sd["tls_config"]["ca_file"].is_string(),
                "{url}: herald's CA"
            );
        }
    }
}

#[test]
fn the_node_agents_kubeconfig_lists_through_heralds_tls_face() {
    let Some(kubectl) = installed::find("kubectl", installed::KUBECTL_INSTALL) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let sim = small_sim(&rt);
    // The install page's certificate and tokens.
    let s = scratch();
    let tls = runnable("docs/install.md")
        .into_iter()
        .find(|b| b.text.contains("openssl req"))
        .expect("the openssl block");
    run_script(&s, "the openssl block", &tls.text, &[]);
    let token = std::fs::read_to_string(s.work.join("tokens")).expect("tokens");
    let node_token = token
        .lines()
        .nth(1)
        .expect("a consumer's token")
        .to_string();
    std::fs::create_dir_all(s.work.join("var-lib-herald")).expect("mkdir");
    std::fs::copy(s.work.join("ca.crt"), s.work.join("var-lib-herald/ca.crt")).expect("ca");
    std::fs::write(s.work.join("var-lib-herald/token"), &node_token).expect("token");
    std::fs::write(
        s.work.join("jobs.yaml"),
        "jobs:\n- name: pods\n  role: pod\n",
    )
    .expect("jobs");
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args(["serve", "--config", "jobs.yaml", "--apiserver", &sim.url()])
            .args(["--listen", "127.0.0.1:0", "--kube-listen", "127.0.0.1:0"])
            .args(["--kube-tls-cert", "tls.crt", "--kube-tls-key", "tls.key"])
            .args(["--kube-token-file", "tokens", "-q"])
            .current_dir(&s.work)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("herald starts"),
    );
    let mut out = BufReader::new(child.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    let face = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("stdout") > 0,
            "herald exited"
        );
        if let Some(url) = line.trim().strip_prefix("kubernetes API on ") {
            break url.to_string();
        }
    };
    let addr = face.rsplit("//").next().expect("host:port").to_string();

    // The recipe's kubeconfig: only the server's address and the mount path changed.
    let recipe = all_blocks()
        .into_iter()
        .find(|b| b.file == "docs/recipes/kube-proxy-coredns.md" && b.text.contains("kind: Config"))
        .expect("the kubeconfig block");
    let kubeconfig = recipe
        .text
        .replace("herald-api.example.internal:6443", &addr)
        .replace(
            "/var/lib/herald",
            &s.work.join("var-lib-herald").display().to_string(),
        );
    assert!(
        kubeconfig.contains(&addr),
        "the recipe names the server as expected"
    );
    std::fs::write(s.work.join("var-lib-herald/kubeconfig"), &kubeconfig).expect("write");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let got = Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(s.work.join("var-lib-herald/kubeconfig"))
            .args(["get", "pods", "-A", "-o", "name"])
            .output()
            .expect("kubectl runs");
        let stdout = String::from_utf8_lossy(&got.stdout);
        if got.status.success() && stdout.lines().count() > 10 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "kubectl through the recipe's kubeconfig: {}{stdout}",
            String::from_utf8_lossy(&got.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
