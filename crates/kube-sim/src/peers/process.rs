//! A real peer binary (Prometheus, vmagent) as a child process of a test: started on a free loopback
//! port, killed on drop, with its log printed when the test fails.

use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

/// How long a peer gets to answer on its HTTP port after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running peer; dropping it kills the process.
pub struct Peer {
    name: &'static str,
    child: Child,
    port: u16,
    log: PathBuf,
    http: reqwest::Client,
    /// Holds the config, data and log; removed on drop.
    _dir: TempDir,
}

impl Peer {
    /// Starts `bin` with the arguments `args(dir, port)` returns (`dir` is a fresh temp dir holding
    /// whatever `files` names, `port` a free loopback port), and waits until `GET ready_path` answers
    /// 2xx. The free port is found by binding and releasing it; another process may take it in
    /// between, so a start that fails on the port is retried on a new one.
    pub async fn start(
        name: &'static str,
        bin: &Path,
        files: &[(&str, &str)],
        args: impl Fn(&Path, u16) -> Vec<String>,
        ready_path: &str,
    ) -> Peer {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .no_proxy()
            .build()
            .expect("http client");
        let mut last_log = String::new();
        for attempt in 1..=3 {
            let dir = tempfile::tempdir().expect("a temp dir for the peer");
            for (file, text) in files {
                std::fs::write(dir.path().join(file), text).expect("write the peer's config");
            }
            let port = free_loopback_port();
            let log = dir.path().join(format!("{name}-{attempt}.log"));
            let out = File::create(&log).expect("create the peer's log file");
            let err = out.try_clone().expect("share the peer's log file");
            let child = Command::new(bin)
                .args(args(dir.path(), port))
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .unwrap_or_else(|e| panic!("{name} ({}) starts: {e}", bin.display()));
            let mut peer = Peer {
                name,
                child,
                port,
                log,
                http: http.clone(),
                _dir: dir,
            };
            match peer.wait_ready(ready_path).await {
                Ok(()) => return peer,
                Err(e) => {
                    let text = peer.log_text();
                    last_log = format!("{e}\n{text}");
                    let _ = peer.child.kill();
                    let _ = peer.child.wait();
                    if !text.contains("address already in use") {
                        break;
                    }
                }
            }
        }
        panic!("{name} did not start:\n{last_log}");
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Fails when the process has exited: nothing it serves can be trusted after that.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!("{} exited early with {status}", self.name)),
            Err(e) => Err(format!("cannot check on {}: {e}", self.name)),
        }
    }

    /// `GET path` as JSON, checking the Prometheus API envelope (`status: success`) and returning `data`.
    pub async fn api(&mut self, path: &str) -> Result<serde_json::Value, String> {
        self.check_alive()?;
        let url = format!("{}{path}", self.base());
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("GET {url}: {}", resp.status()));
        }
        let mut body: serde_json::Value = resp
            .json()
            .await
            .map_err(|e| format!("GET {url}: the body is not JSON: {e}"))?;
        if body["status"] != "success" {
            return Err(format!("GET {url}: status is not success: {body}"));
        }
        Ok(body["data"].take())
    }

    /// The whole log (stdout and stderr).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log)
            .unwrap_or_else(|e| format!("(no {} log: {e})", self.name))
    }

    /// Log lines containing any of `needles`.
    pub fn log_lines_with(&self, needles: &[&str]) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|l| needles.iter().any(|n| l.contains(n)))
            .map(str::to_string)
            .collect()
    }

    async fn wait_ready(&mut self, path: &str) -> Result<(), String> {
        let url = format!("{}{path}", self.base());
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            self.check_alive()?;
            if self
                .http
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "{} did not answer on {url} within {START_TIMEOUT:?}",
                    self.name
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let text = self.log_text();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!(
                "--- {} log, last 40 lines ---\n{}",
                self.name,
                tail.join("\n")
            );
        }
    }
}

pub fn free_loopback_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free loopback port");
    l.local_addr().expect("local addr").port()
}
