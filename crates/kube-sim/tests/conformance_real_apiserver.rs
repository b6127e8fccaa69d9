//! kube-sim held to the apiserver: the same generated cluster (`small`, seed 7) loaded into kube-sim
//! and into a real control plane (etcd 3.7, kube-apiserver v1.37.2, `peers/build`; no controllers),
//! the same requests sent to both, and what clients read of the answers compared: the HTTP status,
//! the headers (Content-Type; for watches Transfer-Encoding; Content-Encoding when gzip is asked;
//! Retry-After), and the body's shape (kind, apiVersion, the list metadata's keys, the items' kinds,
//! a Status's status, reason, code and details; a watch's event types and bookmarks; a Table's
//! columns; the protobuf magic) — never values that differ by nature (uids, resourceVersions,
//! names the apiserver makes, timestamps, messages).
//!
//! Too old: kube-sim compacts with `Fault::Compact`; the apiserver's etcd is compacted and the
//! apiserver restarted (its watch cache keeps every event since it started, whatever etcd
//! compacted). 429: kube-sim's `Fault::Errors`; the apiserver's priority and fairness, a FlowSchema
//! putting a user in a priority level without seats that rejects, while one of its lists waits.
//!
//! Every difference is either fixed in kube-sim (or kube-face) or listed in [`KNOWN`] with its
//! reason (and in crates/kube-sim/README.md, "Differences from kube-apiserver"); any other
//! difference fails the test, and so does a listed one that no longer occurs. [`TIMING`] holds the
//! few facts where the apiserver's own answer depends on timing.
//!
//! Skipped (with how to build them) when the control plane's binaries are missing; a failure under
//! `CI=true`. `CONFORMANCE_DUMP=1` prints every fact of both servers, `CONFORMANCE_DUMP=2` the
//! bodies too.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::time::Duration;

use http::{HeaderMap, Method, Request};
use http_body_util::BodyExt as _;
use kube_sim::generate::{ClusterSpec, generate};
use kube_sim::peers::controlplane::{ADMIN_TOKEN, ControlPlane, Options};
use kube_sim::{Fault, Sim, SimConfig};
use serde_json::{Value, json};

const SEED: u64 = 7;
/// The namespace the namespaced requests use: it holds pods and ConfigMaps on both servers.
const NS: &str = "kube-system";
/// The user the real apiserver's priority and fairness rejects (429), and its token.
const LIMITED_USER: &str = "conformance-limited";
const LIMITED_TOKEN: &str = "conformance-limited-token";

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// A difference kept on purpose: in `case` (or every case: `*`), `fact` is `sim` on kube-sim and
/// `real` on kube-apiserver (`-` for a fact one side lacks), for the reason `why`. A case kube-sim
/// does not implement at all is listed with `*` for fact and values.
struct Known {
    case: &'static str,
    fact: &'static str,
    sim: &'static str,
    real: &'static str,
    why: &'static str,
}

/// The known differences (each also in crates/kube-sim/README.md).
const KNOWN: &[Known] = &[
    Known {
        case: "*",
        fact: "managedFields",
        sim: "-",
        real: "present",
        why: "kube-sim keeps no field-manager bookkeeping (no server-side apply): its objects carry no metadata.managedFields",
    },
    Known {
        case: "*",
        fact: "item managedFields",
        sim: "-",
        real: "present",
        why: "as managedFields",
    },
    Known {
        case: "patch",
        fact: "*",
        sim: "*",
        real: "*",
        why: "kube-sim takes no PATCH (merge, strategic, JSON or apply): 405; its writes are POST, PUT and DELETE",
    },
    Known {
        case: "subresource",
        fact: "*",
        sim: "*",
        real: "*",
        why: "kube-sim serves no subresources (status, scale, eviction, log, exec, ...): a path below an object is the apiserver's generic 404",
    },
];

/// Facts where the apiserver's answer depends on timing it does not control: `values` are all
/// its possible answers, and kube-sim's must be one of them.
struct Timing {
    case: &'static str,
    fact: &'static str,
    values: &'static [&'static str],
    why: &'static str,
}

const TIMING: &[Timing] = &[
    Timing {
        case: "watch bookmarks from now",
        fact: "events",
        values: &["none", "BOOKMARK"],
        why: "the apiserver's watch cache learns of newer etcd revisions (its own lease renewals) from the progress notifications a consistent read requests; one arriving during the watch makes a bookmark",
    },
    Timing {
        case: "watch bookmarks from now",
        fact: "event keys",
        values: &["-", "object,type"],
        why: "as above",
    },
    Timing {
        case: "watch without initial events",
        fact: "events",
        values: &["none", "BOOKMARK"],
        why: "as above",
    },
    Timing {
        case: "watch without initial events",
        fact: "event keys",
        values: &["-", "object,type"],
        why: "as above",
    },
];

/// One server under test.
struct Peer {
    name: &'static str,
    client: kube::Client,
}

fn peer(name: &'static str, mut config: kube::Config) -> Peer {
    // Compression is this test's business: no client layer asks for gzip or decodes it. Nor
    // does one retry a 429, 503 or 504: they are what is compared.
    config.disable_compression = true;
    config.default_retry = false;
    Peer {
        name,
        client: kube::Client::try_from(config).expect("a client"),
    }
}

/// How much of a response to read.
#[derive(Clone, Copy)]
enum Read {
    /// To its end.
    All,
    /// A watch: until the stream ends, `stop` holds for its events, or `max` passed.
    Watch {
        stop: fn(&[Value]) -> bool,
        max: Duration,
    },
    /// A protobuf watch: until `bytes` arrived, the stream ends, or `max` passed.
    Bytes { bytes: usize, max: Duration },
}

/// A request, sent the same to both servers but for the per-server parts of its path.
#[derive(Clone)]
struct Req {
    method: Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Option<Value>,
    read: Read,
}

fn get(path: impl Into<String>) -> Req {
    Req {
        method: Method::GET,
        path: path.into(),
        headers: Vec::new(),
        body: None,
        read: Read::All,
    }
}

impl Req {
    fn method(mut self, m: Method) -> Self {
        self.method = m;
        self
    }
    fn header(mut self, k: &'static str, v: &str) -> Self {
        self.headers.push((k, v.to_string()));
        self
    }
    fn body(mut self, b: Value) -> Self {
        self.body = Some(b);
        self
    }
    fn watch(mut self, stop: fn(&[Value]) -> bool, max: Duration) -> Self {
        self.read = Read::Watch { stop, max };
        self
    }
    fn bytes(mut self, bytes: usize, max: Duration) -> Self {
        self.read = Read::Bytes { bytes, max };
        self
    }
}

/// What came back.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: HeaderMap,
    /// The body decoded (every gzip member).
    body: Vec<u8>,
    /// gzip members of the body as sent (0: not gzip).
    members: usize,
    /// What each member decoded to, in bytes.
    member_sizes: Vec<usize>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| "-".to_string(), str::to_string)
    }
}

/// Each gzip member of `raw` in turn: what they decode to, and what each complete one held.
fn gunzip(raw: &[u8]) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    let mut rest = raw;
    let mut sizes = Vec::new();
    while !rest.is_empty() {
        let mut d = flate2::bufread::GzDecoder::new(rest);
        let mut buf = Vec::new();
        let done = d.read_to_end(&mut buf).is_ok();
        out.extend_from_slice(&buf);
        if !done {
            break;
        }
        sizes.push(buf.len());
        rest = d.into_inner();
    }
    (out, sizes)
}

/// The complete JSON lines of a watch body.
fn events(body: &[u8]) -> Vec<Value> {
    let mut lines: Vec<&[u8]> = body.split(|b| *b == b'\n').collect();
    lines.pop(); // after the last newline: empty, or a line still coming
    lines
        .into_iter()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap_or(Value::Null))
        .collect()
}

impl Peer {
    async fn send(&self, req: &Req) -> Reply {
        let mut r = Request::builder().method(req.method.clone()).uri(&req.path);
        for (k, v) in &req.headers {
            r = r.header(*k, v);
        }
        let body = match &req.body {
            Some(b) => {
                r = r.header("content-type", "application/json");
                serde_json::to_vec(b).expect("json")
            }
            None => Vec::new(),
        };
        let res = self
            .client
            .send(r.body(kube::client::Body::from(body)).expect("a request"))
            .await
            .unwrap_or_else(|e| panic!("{}: {} {}: {e}", self.name, req.method, req.path));
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let gzip = headers
            .get("content-encoding")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let (max, stop, bytes) = match req.read {
            Read::All => (Duration::from_secs(30), None, usize::MAX),
            Read::Watch { stop, max } => (max, Some(stop), usize::MAX),
            Read::Bytes { bytes, max } => (max, None, bytes),
        };
        let deadline = tokio::time::Instant::now() + max;
        let mut body = res.into_body();
        let mut raw = Vec::new();
        // Decoded as it comes (a compressed watch's member stays open between flushes), and
        // parsed line by line: the stop condition sees every complete event.
        let mut gz = gzip.then(|| flate2::write::MultiGzDecoder::new(Vec::new()));
        let mut events = Vec::new();
        let mut parsed = 0;
        loop {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) | Ok(None) => break,
                Ok(Some(Err(e))) => panic!("{}: {} {}: {e}", self.name, req.method, req.path),
                Ok(Some(Ok(f))) => {
                    if let Some(d) = f.data_ref() {
                        raw.extend_from_slice(d);
                        if let Some(gz) = gz.as_mut() {
                            gz.write_all(d).expect("gzip");
                            gz.flush().expect("gzip");
                        }
                    }
                }
            }
            if raw.len() >= bytes {
                break;
            }
            if let Some(stop) = stop {
                let decoded = gz.as_ref().map_or(&raw, |gz| gz.get_ref());
                while let Some(n) = decoded[parsed..].iter().position(|b| *b == b'\n') {
                    let line = &decoded[parsed..parsed + n];
                    if !line.is_empty() {
                        events.push(serde_json::from_slice(line).unwrap_or(Value::Null));
                    }
                    parsed += n + 1;
                }
                if stop(&events) {
                    break;
                }
            }
        }
        let (body, member_sizes) = if gzip {
            gunzip(&raw)
        } else {
            (raw.clone(), Vec::new())
        };
        if gzip && matches!(req.read, Read::All) {
            // What a client's multi-member decoder makes of it is the same.
            let mut multi = Vec::new();
            flate2::read::MultiGzDecoder::new(&raw[..])
                .read_to_end(&mut multi)
                .expect("a complete gzip body");
            assert_eq!(multi, body, "{}: {}", self.name, req.path);
        }
        Reply {
            status,
            headers,
            body,
            members: member_sizes.len(),
            member_sizes,
        }
    }
}

type Facts = BTreeMap<String, String>;

fn keys(v: &Value) -> String {
    match v.as_object() {
        Some(m) if m.is_empty() => "{}".into(),
        Some(m) => m.keys().cloned().collect::<Vec<_>>().join(","),
        None if v.is_null() => "-".into(),
        None => format!("<{}>", type_name(v)),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The distinct values of `f` over `items`, joined.
fn distinct(items: &[Value], f: impl Fn(&Value) -> String) -> String {
    let set: BTreeSet<String> = items.iter().map(f).collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.into_iter().collect::<Vec<_>>().join("|")
    }
}

/// Whether an object's metadata has what every stored object has.
fn object_metadata(m: &Value) -> String {
    let core = ["name", "uid", "resourceVersion", "creationTimestamp"];
    match core
        .iter()
        .filter(|k| !m[**k].is_string())
        .collect::<Vec<_>>()
    {
        missing if missing.is_empty() => "name,uid,resourceVersion,creationTimestamp".into(),
        missing => format!("without {missing:?}"),
    }
}

fn managed_fields(m: &Value) -> String {
    if m["managedFields"].is_array() {
        "present".into()
    } else {
        "-".into()
    }
}

/// The shape of a JSON document: a Status, a Table, a list or an object.
fn body_facts(v: &Value, at: &str, out: &mut Facts) {
    let mut put = |k: &str, val: String| {
        out.insert(format!("{at}{k}"), val);
    };
    if !v.is_object() {
        put("body", format!("<{}>", type_name(v)));
        return;
    }
    put("kind", text(&v["kind"]));
    put("apiVersion", text(&v["apiVersion"]));
    let collection = v["kind"] == "Status" || v["kind"] == "Table" || v["items"].is_array();
    if !collection {
        // An object: its metadata is content, compared only for what every object carries.
        put("metadata", object_metadata(&v["metadata"]));
        put("managedFields", managed_fields(&v["metadata"]));
        return;
    }
    put("metadata", keys(&v["metadata"]));
    if v["kind"] == "Status" {
        put("Status.status", text(&v["status"]));
        put("reason", text(&v["reason"]));
        put("code", text(&v["code"]));
        put("details", keys(&v["details"]));
        put(
            "message",
            (if v["message"].as_str().is_some_and(|m| !m.is_empty()) {
                "some"
            } else {
                "-"
            })
            .into(),
        );
        if let Some(causes) = v["details"]["causes"].as_array() {
            put(
                "details.causes",
                distinct(causes, |c| {
                    format!("{}:{}", text(&c["reason"]), text(&c["field"]))
                }),
            );
        }
        for k in ["kind", "group", "name", "retryAfterSeconds"] {
            if !v["details"][k].is_null() {
                put(
                    &format!("details.{k}"),
                    if k == "name" {
                        "some".into()
                    } else {
                        text(&v["details"][k])
                    },
                );
            }
        }
        return;
    }
    if v["kind"] == "Table" {
        let cols = v["columnDefinitions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        put(
            "columns",
            cols.iter()
                .map(|c| {
                    format!(
                        "{}:{}:{}:{}",
                        text(&c["name"]),
                        text(&c["type"]),
                        text(&c["format"]),
                        text(&c["priority"])
                    )
                })
                .collect::<Vec<_>>()
                .join(","),
        );
        let rows = v["rows"].as_array().cloned().unwrap_or_default();
        put(
            "cell types",
            distinct(&rows, |r| {
                r["cells"]
                    .as_array()
                    .map(|c| c.iter().map(type_name).collect::<Vec<_>>().join(","))
                    .unwrap_or_default()
            }),
        );
        put("column keys", distinct(&cols, keys));
        let rows = v["rows"].as_array().cloned().unwrap_or_default();
        put("rows", if rows.is_empty() { "none" } else { "some" }.into());
        put("row keys", distinct(&rows, keys));
        put(
            "row object",
            distinct(&rows, |r| text(&r["object"]["kind"])),
        );
        put(
            "row object apiVersion",
            distinct(&rows, |r| text(&r["object"]["apiVersion"])),
        );
        return;
    }
    if let Some(items) = v["items"].as_array() {
        put("items", items.len().to_string());
        put("item kind", distinct(items, |i| text(&i["kind"])));
        put(
            "item apiVersion",
            distinct(items, |i| text(&i["apiVersion"])),
        );
        put(
            "item metadata",
            distinct(items, |i| object_metadata(&i["metadata"])),
        );
        put(
            "item managedFields",
            distinct(items, |i| managed_fields(&i["metadata"])),
        );
    }
}

/// The facts of one reply: status, headers, body shape.
fn facts(r: &Reply, read: Read) -> Facts {
    let mut f = Facts::new();
    f.insert("status".into(), r.status.to_string());
    f.insert("content-type".into(), r.header("content-type"));
    f.insert("content-encoding".into(), r.header("content-encoding"));
    // How many gzip members a compressed watch holds is the apiserver's flush timing (one to
    // several for the same streaming list): only that there are some is compared.
    f.insert(
        "gzip members".into(),
        if r.members == 0 { "none" } else { "some" }.into(),
    );
    if r.status == 429 || r.status == 503 || r.status == 504 {
        f.insert("retry-after".into(), r.header("retry-after"));
    }
    let proto = r
        .header("content-type")
        .starts_with("application/vnd.kubernetes.protobuf");
    match read {
        _ if r.status != 200 && !proto => body_facts(&r.json(), "", &mut f),
        Read::All if proto => {
            f.insert(
                "body prefix".into(),
                format!(
                    "{:?}",
                    String::from_utf8_lossy(&r.body[..r.body.len().min(4)])
                ),
            );
        }
        Read::All => body_facts(&r.json(), "", &mut f),
        Read::Bytes { .. } => {
            f.insert("transfer-encoding".into(), r.header("transfer-encoding"));
            // Each frame: a 4-byte big-endian length, then a WatchEvent whose object is an
            // enveloped (k8s\0) object.
            let b = &r.body;
            if b.len() >= 4 {
                let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                f.insert(
                    "first frame".into(),
                    if b.len() >= 4 + n { "complete" } else { "cut" }.into(),
                );
                let frame = &b[4..(4 + n).min(b.len())];
                f.insert(
                    "first frame holds k8s\\0".into(),
                    frame.windows(4).any(|w| w == b"k8s\0").to_string(),
                );
                f.insert(
                    "first frame starts with k8s\\0".into(),
                    frame.starts_with(b"k8s\0").to_string(),
                );
            } else {
                f.insert("first frame".into(), "none".into());
            }
        }
        Read::Watch { .. } => {
            f.insert("transfer-encoding".into(), r.header("transfer-encoding"));
            watch_facts(&events(&r.body), &mut f);
        }
    }
    f
}

/// A watch's events: their types (runs counted), the kinds of their objects, and the shapes of
/// its bookmarks and errors.
fn watch_facts(evs: &[Value], f: &mut Facts) {
    let mut runs: Vec<(String, usize)> = Vec::new();
    for e in evs {
        let t = text(&e["type"]);
        match runs.last_mut() {
            // How many bookmarks come is the server's timers: only that they come is compared.
            Some((last, _)) if *last == t && t == "BOOKMARK" => {}
            Some((last, n)) if *last == t => *n += 1,
            _ => runs.push((t, 1)),
        }
    }
    f.insert(
        "events".into(),
        if runs.is_empty() {
            "none".into()
        } else {
            runs.iter()
                .map(|(t, n)| {
                    if *n == 1 {
                        t.clone()
                    } else {
                        format!("{t}x{n}")
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        },
    );
    f.insert("event keys".into(), distinct(evs, keys));
    let objects: Vec<&Value> = evs
        .iter()
        .filter(|e| e["type"] != "BOOKMARK" && e["type"] != "ERROR")
        .collect();
    if !objects.is_empty() {
        let objs: Vec<Value> = objects.iter().map(|e| e["object"].clone()).collect();
        f.insert("object kind".into(), distinct(&objs, |o| text(&o["kind"])));
        f.insert(
            "object apiVersion".into(),
            distinct(&objs, |o| text(&o["apiVersion"])),
        );
        if objs[0]["kind"] == "Table" {
            body_facts(&objs[0], "first table ", f);
        }
    }
    let bookmarks: Vec<Value> = evs
        .iter()
        .filter(|e| e["type"] == "BOOKMARK")
        .map(|e| e["object"].clone())
        .collect();
    if !bookmarks.is_empty() {
        f.insert("bookmark keys".into(), distinct(&bookmarks, keys));
        f.insert(
            "bookmark kind".into(),
            distinct(&bookmarks, |o| text(&o["kind"])),
        );
        f.insert(
            "bookmark metadata".into(),
            distinct(&bookmarks, |o| keys(&o["metadata"])),
        );
        f.insert(
            "bookmark annotations".into(),
            distinct(&bookmarks, |o| {
                let a = &o["metadata"]["annotations"];
                a.as_object().map_or("-".into(), |m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", text(v)))
                        .collect::<Vec<_>>()
                        .join(",")
                })
            }),
        );
    }
    if let Some(e) = evs.iter().find(|e| e["type"] == "ERROR") {
        body_facts(&e["object"], "error ", f);
    }
}

/// The comparison: every case's facts on both servers.
struct Bench {
    sim: Peer,
    real: Peer,
    results: Vec<(String, Facts, Facts)>,
    started: std::time::Instant,
}

impl Bench {
    /// The same request to both.
    async fn same(&mut self, case: &str, req: Req) -> (Reply, Reply) {
        self.pair(case, req.clone(), req).await
    }

    /// A request to each (paths that carry a server's own names or versions).
    async fn pair(&mut self, case: &str, sim: Req, real: Req) -> (Reply, Reply) {
        eprintln!("[{:>6.1?}] {case}", self.started.elapsed());
        let (s, r) = tokio::join!(self.sim.send(&sim), self.real.send(&real));
        self.results
            .push((case.to_string(), facts(&s, sim.read), facts(&r, real.read)));
        dump_bodies(case, &s, &r);
        (s, r)
    }

    /// Records facts computed by the caller.
    fn record(&mut self, case: &str, sim: Facts, real: Facts) {
        self.results.push((case.to_string(), sim, real));
    }

    /// Fails on every difference not in [`KNOWN`], and on every entry of it that no longer occurs.
    fn check(&self) {
        let dump = std::env::var("CONFORMANCE_DUMP").is_ok_and(|v| v == "1" || v == "2");
        let mut unexplained = Vec::new();
        let mut used = vec![false; KNOWN.len()];
        for (case, sim, real) in &self.results {
            let names: BTreeSet<&String> = sim.keys().chain(real.keys()).collect();
            for fact in names {
                let s = sim.get(fact).map_or("-", String::as_str);
                let r = real.get(fact).map_or("-", String::as_str);
                if dump {
                    let mark = if s == r { " " } else { "≠" };
                    eprintln!("{mark} [{case}] {fact}: sim={s:?} real={r:?}");
                }
                if s == r {
                    continue;
                }
                if let Some(t) = TIMING.iter().find(|t| {
                    t.case == case
                        && t.fact == fact
                        && t.values.contains(&s)
                        && t.values.contains(&r)
                }) {
                    if dump {
                        eprintln!("  (timing: {})", t.why);
                    }
                    continue;
                }
                let any = |want: &str, got: &str| want == "*" || want == got;
                match KNOWN.iter().position(|k| {
                    any(k.case, case) && any(k.fact, fact) && any(k.sim, s) && any(k.real, r)
                }) {
                    Some(i) => used[i] = true,
                    None => unexplained.push(format!(
                        "[{case}] {fact}: kube-sim {s:?}, kube-apiserver {r:?}"
                    )),
                }
            }
        }
        let stale: Vec<String> = KNOWN
            .iter()
            .zip(&used)
            .filter(|(_, u)| !**u)
            .map(|(k, _)| {
                format!(
                    "[{}] {}: {:?} vs {:?} ({})",
                    k.case, k.fact, k.sim, k.real, k.why
                )
            })
            .collect();
        assert!(
            unexplained.is_empty() && stale.is_empty(),
            "kube-sim differs from kube-apiserver where no known difference says so:\n  {}\nknown differences that no longer occur:\n  {}",
            unexplained.join("\n  "),
            stale.join("\n  ")
        );
    }
}

fn stop_after(n: usize) -> fn(&[Value]) -> bool {
    match n {
        1 => |e| !e.is_empty(),
        3 => |e| e.len() >= 3,
        _ => unreachable!("stop_after({n})"),
    }
}

/// Stops at the bookmark that ends a streaming list's initial events.
fn initial_events_end(evs: &[Value]) -> bool {
    evs.iter().any(|e| {
        e["type"] == "BOOKMARK"
            && e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
    })
}

fn never(_: &[Value]) -> bool {
    false
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a resourceVersion in {v}"))
}

fn q(s: &str) -> String {
    s.replace(' ', "%20")
        .replace('=', "%3D")
        .replace(',', "%2C")
        .replace('!', "%21")
        .replace('(', "%28")
        .replace(')', "%29")
}

/// kube-sim's continue token at another resourceVersion: hex of `rv/namespace/name`.
fn sim_token_at(token: &str, rv: u64) -> String {
    let raw: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16).expect("hex"))
        .collect();
    let raw = String::from_utf8(raw).expect("utf-8");
    let (_, rest) = raw.split_once('/').expect("rv/key");
    format!("{rv}/{rest}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The apiserver's continue token at another resourceVersion: base64url of
/// `{"v":"meta.k8s.io/v1","rv":N,"start":KEY}`.
fn real_token_at(token: &str, rv: u64) -> String {
    use base64::Engine as _;
    let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let raw = e
        .decode(token.trim_end_matches('='))
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .expect("base64");
    let mut v: Value = serde_json::from_slice(&raw).expect("json token");
    v["rv"] = json!(rv);
    e.encode(serde_json::to_vec(&v).expect("json"))
}

/// The namespace the test writes in, created on both servers.
const OWN: &str = "conformance";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_sim_answers_as_kube_apiserver_does() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let started = std::time::Instant::now();
    let spec = ClusterSpec::small();
    let Some(cp) = ControlPlane::start(Options {
        // Only the apiserver is judged: no controller writes behind the test's back.
        controllers: false,
        service_cidr: spec.service_cidr.to_string(),
        tokens: vec![format!("{LIMITED_TOKEN},{LIMITED_USER},{LIMITED_USER}")],
        ..Options::default()
    })
    .await
    else {
        return;
    };
    let mut cp = cp.expect("the control plane starts");
    let cluster = generate(&spec, SEED);
    let (sim, loaded) = tokio::join!(
        Sim::start(SimConfig {
            spec: spec.clone(),
            seed: SEED,
            ..SimConfig::default()
        }),
        cp.load(&cluster)
    );
    let sim = sim.expect("kube-sim starts");
    loaded.expect("the cluster loads into kube-apiserver");
    eprintln!("both servers up and loaded in {:?}", started.elapsed());

    let mut b = Bench {
        sim: peer(
            "kube-sim",
            kube::Config::new(sim.url().parse().expect("url")),
        ),
        real: peer(
            "kube-apiserver",
            cp.kube_config(ADMIN_TOKEN).expect("kube config"),
        ),
        results: Vec::new(),
        started,
    };
    let secs = Duration::from_secs;

    // --- Lists, pagination, resourceVersion semantics ---
    let (s, r) = b.same("list", get("/api/v1/pods")).await;
    let (sim_rv, real_rv) = (rv(&s.json()), rv(&r.json()));
    let pod = s.json()["items"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .find(|p| p["metadata"]["namespace"] == NS)
                .cloned()
        })
        .expect("a pod in kube-system");
    let pod_name = pod["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    let node = pod["spec"]["nodeName"]
        .as_str()
        .expect("a node")
        .to_string();
    let (label_key, label_value) = pod["metadata"]["labels"]
        .as_object()
        .and_then(|m| m.iter().next())
        .map(|(k, v)| (k.clone(), text(v)))
        .expect("a labelled pod");

    let (s, r) = b.same("list limit", get("/api/v1/pods?limit=5")).await;
    let sim_token = text(&s.json()["metadata"]["continue"]);
    let real_token = text(&r.json()["metadata"]["continue"]);
    b.pair(
        "list continue",
        get(format!("/api/v1/pods?limit=5&continue={sim_token}")),
        get(format!("/api/v1/pods?limit=5&continue={real_token}")),
    )
    .await;
    b.pair(
        "list continue with resourceVersion",
        get(format!(
            "/api/v1/pods?limit=5&continue={sim_token}&resourceVersion={sim_rv}"
        )),
        get(format!(
            "/api/v1/pods?limit=5&continue={real_token}&resourceVersion={real_rv}"
        )),
    )
    .await;
    b.pair(
        "list continue with resourceVersionMatch",
        get(format!(
            "/api/v1/pods?limit=5&continue={sim_token}&resourceVersionMatch=NotOlderThan"
        )),
        get(format!(
            "/api/v1/pods?limit=5&continue={real_token}&resourceVersionMatch=NotOlderThan"
        )),
    )
    .await;
    b.same(
        "list invalid continue",
        get("/api/v1/pods?limit=5&continue=not-a-token"),
    )
    .await;
    b.same("list rv=0", get("/api/v1/pods?resourceVersion=0"))
        .await;
    b.same(
        "list rv=0 limit",
        get("/api/v1/pods?resourceVersion=0&limit=5"),
    )
    .await;
    b.pair(
        "list NotOlderThan",
        get(format!(
            "/api/v1/pods?resourceVersion={sim_rv}&resourceVersionMatch=NotOlderThan&limit=5"
        )),
        get(format!(
            "/api/v1/pods?resourceVersion={real_rv}&resourceVersionMatch=NotOlderThan&limit=5"
        )),
    )
    .await;
    b.pair(
        "list rv without match",
        get(format!("/api/v1/pods?resourceVersion={sim_rv}&limit=5")),
        get(format!("/api/v1/pods?resourceVersion={real_rv}&limit=5")),
    )
    .await;
    b.pair(
        "list Exact",
        get(format!(
            "/api/v1/pods?resourceVersion={sim_rv}&resourceVersionMatch=Exact&limit=5"
        )),
        get(format!(
            "/api/v1/pods?resourceVersion={real_rv}&resourceVersionMatch=Exact&limit=5"
        )),
    )
    .await;
    b.same(
        "list Exact without rv",
        get("/api/v1/pods?resourceVersionMatch=Exact"),
    )
    .await;
    b.same(
        "list Exact rv=0",
        get("/api/v1/pods?resourceVersion=0&resourceVersionMatch=Exact"),
    )
    .await;
    b.same(
        "list unknown resourceVersionMatch",
        get("/api/v1/pods?resourceVersion=1&resourceVersionMatch=Newest"),
    )
    .await;
    b.same(
        "list invalid resourceVersion",
        get("/api/v1/pods?resourceVersion=abc"),
    )
    .await;
    b.same(
        "list sendInitialEvents",
        get("/api/v1/pods?sendInitialEvents=true"),
    )
    .await;
    // A version from the future: both wait (3 s), then give up.
    let ahead = 1_000_000;
    b.pair(
        "list future rv",
        get(format!("/api/v1/pods?resourceVersion={}", sim_rv + ahead)),
        get(format!("/api/v1/pods?resourceVersion={}", real_rv + ahead)),
    )
    .await;
    b.pair(
        "list future rv Exact",
        get(format!(
            "/api/v1/pods?resourceVersion={}&resourceVersionMatch=Exact",
            sim_rv + ahead
        )),
        get(format!(
            "/api/v1/pods?resourceVersion={}&resourceVersionMatch=Exact",
            real_rv + ahead
        )),
    )
    .await;

    // --- Selectors ---
    b.same(
        "label selector",
        get(format!(
            "/api/v1/pods?labelSelector={}",
            q(&format!("{label_key}={label_value}"))
        )),
    )
    .await;
    b.same(
        "label selector set-based",
        get(format!(
            "/api/v1/pods?labelSelector={}",
            q(&format!(
                "{label_key} in ({label_value},x),!conformance-absent"
            ))
        )),
    )
    .await;
    b.same(
        "label selector invalid",
        get(format!("/api/v1/pods?labelSelector={}", q("a b"))),
    )
    .await;
    b.same(
        "label selector invalid value",
        get(format!("/api/v1/pods?labelSelector={}", q("a=b c"))),
    )
    .await;
    b.same(
        "field selector",
        get(format!(
            "/api/v1/pods?fieldSelector={}",
            q(&format!("spec.nodeName={node}"))
        )),
    )
    .await;
    b.same(
        "field selector phase and namespace",
        get(format!(
            "/api/v1/pods?fieldSelector={}",
            q(&format!("status.phase=Running,metadata.namespace!={NS}"))
        )),
    )
    .await;
    b.same(
        "field selector unsupported field",
        get(format!("/api/v1/pods?fieldSelector={}", q("spec.foo=x"))),
    )
    .await;
    b.same(
        "field selector invalid",
        get(format!("/api/v1/pods?fieldSelector={}", q("a"))),
    )
    .await;
    b.same(
        "field selector with limit",
        get(format!(
            "/api/v1/pods?limit=5&fieldSelector={}",
            q("status.phase=Running")
        )),
    )
    .await;

    // --- Objects and errors ---
    let one = format!("/api/v1/namespaces/{NS}/pods/{pod_name}");
    b.same("get", get(&one)).await;
    b.same(
        "get missing",
        get(format!("/api/v1/namespaces/{NS}/pods/conformance-missing")),
    )
    .await;
    b.same("get missing node", get("/api/v1/nodes/conformance-missing"))
        .await;
    b.same(
        "get missing endpointslice",
        get(format!(
            "/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/conformance-missing"
        )),
    )
    .await;
    b.same(
        "list in a missing namespace",
        get("/api/v1/namespaces/conformance-missing/pods"),
    )
    .await;
    for (case, path) in [
        ("unknown resource", "/api/v1/widgets"),
        (
            "unknown namespaced resource",
            "/api/v1/namespaces/default/widgets",
        ),
        ("unknown version", "/api/v2/pods"),
        ("unknown group", "/apis/conformance.example.com/v1/widgets"),
        ("unknown group discovery", "/apis/conformance.example.com"),
        (
            "unknown version of a group",
            "/apis/discovery.k8s.io/v9/endpointslices",
        ),
        (
            "unknown resource of a group",
            "/apis/discovery.k8s.io/v1/widgets",
        ),
        ("not an API path", "/conformance-nope"),
    ] {
        b.same(case, get(path)).await;
    }
    b.same(
        "POST on an object",
        get(&one).method(Method::POST).body(pod.clone()),
    )
    .await;
    b.same(
        "PUT on a collection",
        get(format!("/api/v1/namespaces/{NS}/configmaps"))
            .method(Method::PUT)
            .body(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})),
    )
    .await;
    b.same(
        "PATCH on a collection",
        get(format!("/api/v1/namespaces/{NS}/configmaps"))
            .method(Method::PATCH)
            .header("content-type", "application/merge-patch+json")
            .body(json!({})),
    )
    .await;
    b.same(
        "DELETE on all namespaces' pods",
        get("/api/v1/pods").method(Method::DELETE),
    )
    .await;
    b.same(
        "POST on all namespaces' pods",
        get("/api/v1/pods").method(Method::POST).body(pod.clone()),
    )
    .await;

    // --- Protobuf and Table ---
    b.same(
        "protobuf list",
        get(format!("/api/v1/namespaces/{NS}/pods")).header("accept", PROTOBUF),
    )
    .await;
    b.same("protobuf get", get(&one).header("accept", PROTOBUF))
        .await;
    b.same(
        "protobuf 404",
        get(format!("/api/v1/namespaces/{NS}/pods/conformance-missing")).header("accept", PROTOBUF),
    )
    .await;
    b.same(
        "protobuf or json",
        get(&one).header("accept", &format!("{PROTOBUF}, application/json")),
    )
    .await;
    b.same("table get", get(&one).header("accept", TABLE)).await;
    b.same("subresource", get(format!("{one}/status"))).await;
    b.same(
        "patch",
        get(&one)
            .method(Method::PATCH)
            .header("content-type", "application/merge-patch+json")
            .body(json!({"metadata": {"labels": {"conformance": "patched"}}})),
    )
    .await;
    for (case, path) in [
        ("table of pods", format!("/api/v1/namespaces/{NS}/pods")),
        (
            "table of configmaps",
            format!("/api/v1/namespaces/{NS}/configmaps"),
        ),
        ("table of services", "/api/v1/services".to_string()),
        ("table of nodes", "/api/v1/nodes".to_string()),
        ("table of namespaces", "/api/v1/namespaces".to_string()),
        // Empty on both: no controller makes the apiserver's (its columns are still sent).
        (
            "table of endpoints",
            "/api/v1/namespaces/conformance-missing/endpoints".to_string(),
        ),
        (
            "table of endpointslices",
            "/apis/discovery.k8s.io/v1/namespaces/conformance-missing/endpointslices".to_string(),
        ),
        (
            "table of ingresses",
            "/apis/networking.k8s.io/v1/ingresses".to_string(),
        ),
    ] {
        b.same(case, get(path).header("accept", TABLE)).await;
    }

    // --- Writes: 201, 409, 200 ---
    b.same(
        "create namespace",
        get("/api/v1/namespaces")
            .method(Method::POST)
            .body(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OWN}})),
    )
    .await;
    let cms = format!("/api/v1/namespaces/{OWN}/configmaps");
    let cm = |name: &str, data: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": OWN}, "data": {"v": data}})
    };
    b.same(
        "create",
        get(&cms)
            .method(Method::POST)
            .body(cm("conformance-keep", "1")),
    )
    .await;
    let (s, r) = b.same("list configmaps", get(&cms)).await;
    let (sim_cm_rv, real_cm_rv) = (rv(&s.json()), rv(&r.json()));
    b.same(
        "create another",
        get(&cms)
            .method(Method::POST)
            .body(cm("conformance-a", "1")),
    )
    .await;
    b.same(
        "create existing",
        get(&cms)
            .method(Method::POST)
            .body(cm("conformance-a", "1")),
    )
    .await;
    b.same(
        "create in another namespace",
        get(&cms).method(Method::POST).body(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "conformance-b", "namespace": NS}})),
    )
    .await;
    let mut stale = cm("conformance-a", "2");
    stale["metadata"]["resourceVersion"] = json!("1");
    b.same(
        "replace stale",
        get(format!("{cms}/conformance-a"))
            .method(Method::PUT)
            .body(stale),
    )
    .await;
    b.same(
        "replace",
        get(format!("{cms}/conformance-a"))
            .method(Method::PUT)
            .body(cm("conformance-a", "2")),
    )
    .await;
    b.same(
        "replace with another name",
        get(format!("{cms}/conformance-a"))
            .method(Method::PUT)
            .body(cm("conformance-c", "2")),
    )
    .await;
    b.same(
        "replace missing",
        get(format!("{cms}/conformance-c"))
            .method(Method::PUT)
            .body(cm("conformance-c", "2")),
    )
    .await;
    b.same(
        "delete",
        get(format!("{cms}/conformance-a")).method(Method::DELETE),
    )
    .await;
    b.same(
        "delete missing",
        get(format!("{cms}/conformance-a")).method(Method::DELETE),
    )
    .await;

    // --- Watches ---
    b.pair(
        "watch from a version",
        get(format!("{cms}?watch=1&resourceVersion={sim_cm_rv}")).watch(stop_after(3), secs(5)),
        get(format!("{cms}?watch=1&resourceVersion={real_cm_rv}")).watch(stop_after(3), secs(5)),
    )
    .await;
    b.same(
        "watch rv=0",
        get(format!("{cms}?watch=1&resourceVersion=0&timeoutSeconds=2")).watch(never, secs(8)),
    )
    .await;
    b.same(
        "watch without rv",
        get(format!("{cms}?watch=1&timeoutSeconds=1")).watch(never, secs(8)),
    )
    .await;
    b.same(
        "watch path",
        get(format!(
            "/api/v1/watch/namespaces/{OWN}/configmaps?resourceVersion=0&timeoutSeconds=1"
        ))
        .watch(never, secs(8)),
    )
    .await;
    b.same(
        "watch one object",
        get(format!(
            "{cms}?watch=1&fieldSelector=metadata.name%3Dconformance-keep&resourceVersion=0&timeoutSeconds=1"
        ))
        .watch(never, secs(8)),
    )
    .await;
    // A bookmark tells of progress the watcher has not seen: a write elsewhere (another
    // namespace) while the watch runs.
    let progress = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let other = format!("/api/v1/namespaces/{NS}/configmaps");
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "conformance-progress", "namespace": NS}});
        let (s, r) = tokio::join!(
            reqwest::Client::new()
                .post(format!("{}{other}", sim.url()))
                .json(&body)
                .send(),
            cp.request(
                Method::POST,
                &other,
                Some(("application/json", body.to_string().into_bytes())),
            )
        );
        assert!(s.expect("kube-sim write").status().is_success());
        assert!(r.expect("kube-apiserver write").0.is_success());
    };
    let (_, ()) = tokio::join!(
        b.pair(
            "watch bookmarks",
            get(format!(
                "{cms}?watch=1&resourceVersion={sim_cm_rv}&allowWatchBookmarks=true&timeoutSeconds=4"
            ))
            .watch(never, secs(10)),
            get(format!(
                "{cms}?watch=1&resourceVersion={real_cm_rv}&allowWatchBookmarks=true&timeoutSeconds=4"
            ))
            .watch(never, secs(10)),
        ),
        progress
    );
    let (s, r) = b.same("list configmaps again", get(&cms)).await;
    let (sim_now, real_now) = (rv(&s.json()), rv(&r.json()));
    // Nothing happens meanwhile: no bookmark.
    b.pair(
        "watch bookmarks from now",
        get(format!(
            "{cms}?watch=1&resourceVersion={sim_now}&allowWatchBookmarks=true&timeoutSeconds=3"
        ))
        .watch(never, secs(10)),
        get(format!(
            "{cms}?watch=1&resourceVersion={real_now}&allowWatchBookmarks=true&timeoutSeconds=3"
        ))
        .watch(never, secs(10)),
    )
    .await;
    let streaming = "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    b.same(
        "streaming list",
        get(streaming).watch(initial_events_end, secs(20)),
    )
    .await;
    b.same(
        "streaming list without bookmarks",
        get("/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=3")
            .watch(never, secs(10)),
    )
    .await;
    b.same(
        "streaming list without resourceVersionMatch",
        get("/api/v1/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"),
    )
    .await;
    b.same(
        "watch with resourceVersionMatch",
        get("/api/v1/pods?watch=1&resourceVersion=1&resourceVersionMatch=Exact"),
    )
    .await;
    b.same(
        "watch without initial events",
        get(format!("{cms}?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"))
            .watch(never, secs(8)),
    )
    .await;
    b.same(
        "protobuf watch",
        get(format!("{cms}?watch=1&resourceVersion=0&timeoutSeconds=1"))
            .header("accept", PROTOBUF)
            .bytes(1 << 20, secs(8)),
    )
    .await;
    b.same(
        "table watch",
        get(format!(
            "/api/v1/namespaces/{NS}/pods?watch=1&resourceVersion=0&timeoutSeconds=1"
        ))
        .header("accept", TABLE)
        .watch(never, secs(8)),
    )
    .await;

    // --- gzip ---
    let gz = |r: Req| r.header("accept-encoding", "gzip");
    let (s, _) = b
        .same(
            "streaming list gzip",
            gz(get(streaming)).watch(initial_events_end, secs(20)),
        )
        .await;
    // kube-sim's own promise (the apiserver's member count is its flush timing): a streaming list
    // of many chunks is several members, which a client must all decode.
    assert!(
        s.members > 1,
        "kube-sim's compressed streaming list holds {} gzip member(s)",
        s.members
    );
    b.same(
        "small streaming list gzip",
        gz(get(format!("{cms}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")))
            .watch(initial_events_end, secs(20)),
    )
    .await;
    b.same(
        "watch without initial events gzip",
        gz(get(format!("{cms}?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1")))
            .watch(never, secs(8)),
    )
    .await;
    b.same(
        "watch rv=0 gzip",
        gz(get(
            "/api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=2",
        ))
        .watch(never, secs(8)),
    )
    .await;
    b.pair(
        "watch from a version gzip",
        gz(get(format!(
            "{cms}?watch=1&resourceVersion={sim_cm_rv}&timeoutSeconds=1"
        )))
        .watch(never, secs(8)),
        gz(get(format!(
            "{cms}?watch=1&resourceVersion={real_cm_rv}&timeoutSeconds=1"
        )))
        .watch(never, secs(8)),
    )
    .await;
    b.same("list gzip", gz(get("/api/v1/pods"))).await;
    b.same("small list gzip", gz(get(&cms))).await;
    b.same("get gzip", gz(get(&one))).await;
    b.same(
        "protobuf list gzip",
        gz(get("/api/v1/pods")).header("accept", PROTOBUF),
    )
    .await;
    b.same(
        "error gzip",
        gz(get("/api/v1/pods?resourceVersionMatch=Exact")),
    )
    .await;

    // --- Too old: 410 after compaction (and, for the apiserver, a restart: its watch cache holds
    // every event since it started, whatever etcd compacted) ---
    sim.handle().fault(Fault::Compact).expect("compaction");
    cp.compact().await.expect("etcd compacts");
    cp.restart_apiserver()
        .await
        .expect("kube-apiserver restarts");
    b.same(
        "list Exact too old",
        get("/api/v1/pods?resourceVersion=1&resourceVersionMatch=Exact"),
    )
    .await;
    b.pair(
        "list Exact from before the compaction",
        get(format!(
            "/api/v1/pods?resourceVersion={sim_rv}&resourceVersionMatch=Exact&limit=5"
        )),
        get(format!(
            "/api/v1/pods?resourceVersion={real_rv}&resourceVersionMatch=Exact&limit=5"
        )),
    )
    .await;
    b.same(
        "list NotOlderThan old",
        get("/api/v1/pods?resourceVersion=1&resourceVersionMatch=NotOlderThan&limit=5"),
    )
    .await;
    b.same(
        "watch too old",
        get("/api/v1/pods?watch=1&resourceVersion=1").watch(stop_after(1), secs(5)),
    )
    .await;
    b.pair(
        "watch from before the compaction",
        get(format!("{cms}?watch=1&resourceVersion={sim_cm_rv}")).watch(stop_after(1), secs(5)),
        get(format!("{cms}?watch=1&resourceVersion={real_cm_rv}")).watch(stop_after(1), secs(5)),
    )
    .await;
    b.pair(
        "list continue too old",
        get(format!(
            "/api/v1/pods?limit=5&continue={}",
            sim_token_at(&sim_token, 1)
        )),
        get(format!(
            "/api/v1/pods?limit=5&continue={}",
            real_token_at(&real_token, 1)
        )),
    )
    .await;
    b.pair(
        "list continue from before the compaction",
        get(format!("/api/v1/pods?limit=5&continue={sim_token}")),
        get(format!("/api/v1/pods?limit=5&continue={real_token}")),
    )
    .await;

    // --- 429 ---
    sim.handle()
        .fault(Fault::Errors {
            code: 429,
            fraction: 1.0,
            retry_after_seconds: 1,
        })
        .expect("errors fault");
    let s = b.sim.send(&get("/api/v1/pods")).await;
    sim.handle().fault(Fault::Clear).expect("clear");
    let r = rejected_by_flow_control(&cp).await;
    b.record("429", facts(&s, Read::All), facts(&r, Read::All));
    dump_bodies("429", &s, &r);

    // --- Deletes that answer the object, or a Status ---
    let svc = cluster
        .objects
        .iter()
        .map(|o| o.to_json())
        .find(|o| o["kind"] == "Service" && o["metadata"]["namespace"] == NS)
        .expect("a Service in kube-system");
    let svc_name = svc["metadata"]["name"].as_str().expect("a name");
    for (case, path) in [
        (
            "delete pod",
            format!("/api/v1/namespaces/{NS}/pods/{pod_name}?gracePeriodSeconds=0"),
        ),
        (
            "delete service",
            format!("/api/v1/namespaces/{NS}/services/{svc_name}"),
        ),
        ("delete node", format!("/api/v1/nodes/{node}")),
        ("deletecollection", cms.clone()),
        ("delete namespace", format!("/api/v1/namespaces/{OWN}")),
    ] {
        b.same(case, get(path).method(Method::DELETE)).await;
    }

    eprintln!("{} cases in {:?}", b.results.len(), started.elapsed());
    b.check();
}

fn dump_bodies(case: &str, s: &Reply, r: &Reply) {
    if std::env::var("CONFORMANCE_DUMP").is_ok_and(|v| v == "2") {
        for (who, x) in [("sim", s), ("real", r)] {
            let text = String::from_utf8_lossy(&x.body);
            let cut: String = text.chars().take(700).collect();
            eprintln!("BODY [{case}] {who} {} {:?}: {cut}", x.status, x.headers);
            if x.members > 0 {
                eprintln!("BODY [{case}] {who} members {:?}", x.member_sizes);
            }
        }
    }
}

/// A request of [`LIMITED_USER`], whom a FlowSchema puts in a priority level with no seats of its
/// own that rejects what it cannot serve: while one of the user's lists waits (for a future
/// resourceVersion), the next is the apiserver's 429.
async fn rejected_by_flow_control(cp: &ControlPlane) -> Reply {
    for (path, obj) in [
        (
            "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
            json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
                   "metadata": {"name": "conformance-reject"},
                   "spec": {"type": "Limited", "limited": {
                       "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
                       "limitResponse": {"type": "Reject"}}}}),
        ),
        (
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
            json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                   "metadata": {"name": "conformance-reject"},
                   "spec": {"priorityLevelConfiguration": {"name": "conformance-reject"},
                            "matchingPrecedence": 100, "distinguisherMethod": {"type": "ByUser"},
                            "rules": [{"subjects": [{"kind": "User", "user": {"name": LIMITED_USER}}],
                                       "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                          "clusterScope": true, "namespaces": ["*"]}]}]}}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "conformance-limited"},
                   "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "conformance-limited"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "conformance-limited"},
                   "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": LIMITED_USER}]}),
        ),
    ] {
        let (code, body) = cp
            .request(
                Method::POST,
                path,
                Some(("application/json", serde_json::to_vec(&obj).expect("json"))),
            )
            .await
            .expect("a write");
        assert!(
            code.is_success(),
            "POST {path}: {code}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let config = cp.kube_config(LIMITED_TOKEN).expect("kube config");
    let limited = std::sync::Arc::new(peer("kube-apiserver as a limited user", config.clone()));
    let holder = std::sync::Arc::new(peer("kube-apiserver as a limited user", config));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let h = holder.clone();
        let hold =
            tokio::spawn(
                async move { h.send(&get("/api/v1/pods?resourceVersion=999999999")).await },
            );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let r = limited.send(&get("/api/v1/pods")).await;
        let held = hold.await.expect("the holder");
        if r.status == 429 || tokio::time::Instant::now() >= deadline {
            eprintln!("429 probe: {} (holder {})", r.status, held.status);
            return r;
        }
    }
}
