//! The status page's explain form in a real browser: headless Chromium (Debian `chromium`), driven
//! over the DevTools protocol (a minimal WebSocket client below, loopback only), opens `/`, fills
//! the form's kind, namespace and name, clicks "explain", and the page it lands on shows the same
//! answer as `GET /explain`: every job with its target count and the reason for each job that
//! serves nothing. No console error.

#[path = "peers/harness.rs"]
mod peers;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_sim::peers as installed;
use peers::cluster::{loopback_spec, start_herald, start_sim};
use serde_json::{Value, json};

const CHROMIUM_INSTALL: &str = "apt-get install chromium";

const JOBS: &str = "\
jobs:
- {name: pods, role: pod}
- name: web-only
  role: pod
  relabel_configs:
  - {source_labels: [__meta_kubernetes_pod_label_app], regex: no-such-app, action: keep}
- {name: far, role: pod, namespaces: {names: [no-such-namespace]}}
";

/// Chromium with a DevTools port, killed on drop.
struct Browser {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    fn start(bin: &std::path::Path) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut child = Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
        let stderr = child.stderr.take().expect("stderr piped");
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        // Reads the log for the DevTools address, then keeps draining it so Chromium never blocks
        // on a full pipe; console errors are read through the protocol instead.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("DevTools listening on ws://127.0.0.1:").nth(1)
                    && let Some(port) = rest.split('/').next().and_then(|p| p.parse::<u16>().ok())
                {
                    let _ = port_tx.send(port);
                }
            }
        });
        let port = match port_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(port) => port,
            Err(e) => {
                let _ = child.kill();
                panic!("chromium printed no DevTools address within 30 s: {e}");
            }
        };
        Browser {
            child,
            port,
            _profile: profile,
        }
    }

    /// The first page target's WebSocket URL path.
    fn page_path(&self) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("DevTools port");
        write!(
            s,
            "GET /json/list HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        )
        .expect("request");
        // NB: Chromium keeps the connection open whatever it is asked: read by Content-Length.
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).expect("response head");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("a Content-Length");
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).expect("response body");
        let body = String::from_utf8_lossy(&body).into_owned();
        let list: Value = serde_json::from_str(&body).expect("JSON target list");
        let url = list
            .as_array()
            .expect("targets")
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target")
            .to_string();
        let path = url.split_once("127.0.0.1:").expect("loopback").1;
        path[path.find('/').expect("a path")..].to_string()
    }
}

/// A DevTools session over a minimal WebSocket (RFC 6455) client: text frames, masked.
struct Session {
    ws: TcpStream,
    next: u64,
    /// Console messages and exceptions seen, as they arrived.
    events: Vec<Value>,
}

impl Session {
    fn connect(port: u16, path: &str) -> Session {
        let mut ws = TcpStream::connect(("127.0.0.1", port)).expect("DevTools port");
        ws.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        write!(
            ws,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        )
        .expect("upgrade");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            ws.read_exact(&mut byte).expect("upgrade response");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "upgrade refused: {head}");
        Session {
            ws,
            next: 1,
            events: vec![],
        }
    }

    fn send_frame(&mut self, payload: &[u8]) {
        let mut frame = vec![0x81u8];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n < 65536 => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let mask = [0x12u8, 0x34, 0x56, 0x78];
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.ws.write_all(&frame).expect("frame sent");
    }

    /// One whole message (continuation frames joined; control frames skipped).
    fn read_message(&mut self) -> Vec<u8> {
        let mut message = Vec::new();
        loop {
            let mut h = [0u8; 2];
            self.ws.read_exact(&mut h).expect("frame header");
            let (fin, opcode) = (h[0] & 0x80 != 0, h[0] & 0x0f);
            let mut len = u64::from(h[1] & 0x7f);
            if len == 126 {
                let mut b = [0u8; 2];
                self.ws.read_exact(&mut b).expect("length");
                len = u64::from(u16::from_be_bytes(b));
            } else if len == 127 {
                let mut b = [0u8; 8];
                self.ws.read_exact(&mut b).expect("length");
                len = u64::from_be_bytes(b);
            }
            let mut payload = vec![0u8; usize::try_from(len).expect("a frame that fits")];
            self.ws.read_exact(&mut payload).expect("payload");
            if opcode >= 0x8 {
                continue;
            }
            message.extend_from_slice(&payload);
            if fin {
                return message;
            }
        }
    }

    /// Sends `method` and waits for its result, keeping the events that arrive meanwhile.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.try_call(method, params)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// As `call`, the protocol's error returned.
    fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next;
        self.next += 1;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.send_frame(msg.as_bytes());
        loop {
            let v: Value = serde_json::from_slice(&self.read_message()).expect("a JSON message");
            if v["id"] == id {
                if !v["error"].is_null() {
                    return Err(v["error"].clone());
                }
                return Ok(v["result"].clone());
            }
            if v["method"].is_string() {
                self.events.push(v);
            }
        }
    }

    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r["exceptionDetails"].is_null(), "{expression}: {r}");
        r["result"]["value"].clone()
    }

    /// Polls `expression` until it is true (at most 15 s). An evaluation cut short by a
    /// navigation counts as not yet.
    fn wait_for(&mut self, expression: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let r = self.try_call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            );
            if r.is_ok_and(|r| r["result"]["value"] == json!(true)) {
                return;
            }
            assert!(Instant::now() < deadline, "never true: {expression}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_explain_form_shows_the_answer_explain_gives() {
    let Some(bin) = installed::find("chromium", CHROMIUM_INSTALL) else {
        return;
    };
    let sim = start_sim(loopback_spec(), 21).await;
    let herald = start_herald(&sim, JOBS).await;
    // A running pod with an IP: served by `pods`, dropped by `web-only`'s rule, outside `far`.
    let pod = sim
        .handle()
        .objects_json(kube_sim::Kind::Pod)
        .into_iter()
        .find(|p| p["status"]["podIP"].is_string() && p["status"]["phase"] == "Running")
        .expect("a running pod");
    let (ns, name) = (
        pod["metadata"]["namespace"]
            .as_str()
            .expect("ns")
            .to_string(),
        pod["metadata"]["name"].as_str().expect("name").to_string(),
    );
    let http = reqwest::Client::new();
    let want: Value = http
        .get(format!(
            "{}/explain?kind=Pod&namespace={ns}&name={name}",
            herald.url()
        ))
        .send()
        .await
        .expect("explain")
        .json()
        .await
        .expect("json");

    let url = format!("{}/", herald.url());
    let (ns2, name2) = (ns.clone(), name.clone());
    let (got, events) = tokio::task::spawn_blocking(move || {
        let (ns, name) = (ns2, name2);
        let browser = Browser::start(&bin);
        let mut s = Session::connect(browser.port, &browser.page_path());
        s.call("Runtime.enable", json!({}));
        s.call("Page.enable", json!({}));
        s.call("Page.navigate", json!({"url": url}));
        s.wait_for("document.readyState === 'complete' && !!document.getElementById('explain')");
        // Fill the form as a user would, and click its button.
        let fill = format!(
            "(() => {{ document.getElementById('explain-kind').value = 'Pod';\
              document.getElementById('explain-namespace').value = {ns:?};\
              document.getElementById('explain-name').value = {name:?};\
              document.getElementById('explain-submit').click(); return true; }})()"
        );
        s.eval(&fill);
        s.wait_for("location.pathname === '/explain.html' && document.readyState === 'complete' && !!document.getElementById('explained')");
        let rows = s.eval(
            "Array.from(document.querySelectorAll('#explain-jobs tr[data-job]')).map(r => ({\
               job: r.dataset.job, served: r.children[1].textContent,\
               reason: (r.querySelector('.reason') || {dataset: {}}).dataset.reason || null,\
               text: r.children[2].textContent }))",
        );
        let heading = s.eval("document.getElementById('explained').textContent");
        let form_kept = s.eval("document.getElementById('explain-name').value");
        (json!({"rows": rows, "heading": heading, "form": form_kept}), s.events)
    })
    .await
    .expect("chromium session");

    assert_eq!(got["heading"], format!("Pod {ns}/{name}"), "{got:#}");
    assert_eq!(got["form"], name.as_str(), "the form keeps what was asked");
    let rows = got["rows"].as_array().expect("rows");
    let jobs = want["jobs"].as_array().expect("jobs");
    assert_eq!(
        rows.len(),
        jobs.len(),
        "one row per job: {got:#} vs {want:#}"
    );
    for (row, job) in rows.iter().zip(jobs) {
        assert_eq!(row["job"], job["job"]);
        assert_eq!(row["served"], job["served"].to_string(), "{row} vs {job}");
        assert_eq!(
            row["reason"], job["reason"]["reason"],
            "the same reason: {row} vs {job}"
        );
    }
    let by = |j: &str| rows.iter().find(|r| r["job"] == j).expect("row");
    assert_ne!(by("pods")["served"], "0", "{rows:?}");
    assert_eq!(by("web-only")["reason"], "dropped_by_rule");
    assert!(
        by("web-only")["text"]
            .as_str()
            .expect("text")
            .contains("relabel rule 0"),
        "{rows:?}"
    );
    assert_eq!(by("far")["reason"], "outside_namespaces");
    let errors: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["method"] == "Runtime.exceptionThrown"
                || (e["method"] == "Runtime.consoleAPICalled" && e["params"]["type"] == "error")
        })
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    herald.stop().await;
}
