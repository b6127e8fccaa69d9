//! Helpers shared by kube-sim's integration tests: a quiet simulation on port 0 and a line reader for
//! watch streams.

#![allow(dead_code)]

use std::time::Duration;

use futures::StreamExt;
use kube_sim::generate::ClusterSpec;
use kube_sim::{Settings, Sim, SimConfig};
use serde_json::{Value, json};

pub async fn start(spec: ClusterSpec, window: usize, settings: Settings) -> Sim {
    Sim::start(SimConfig {
        spec,
        history_window: window,
        settings,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts on loopback")
}

/// A cluster with only its namespaces: tests create what they need.
pub async fn start_empty_with(window: usize, settings: Settings) -> Sim {
    Sim::start(SimConfig {
        populate: false,
        history_window: window,
        settings,
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim starts on loopback")
}

pub async fn start_empty() -> Sim {
    start_empty_with(1000, Settings::default()).await
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .user_agent("kube-sim-tests")
        // NB: kube-sim compresses a streaming list for a client that accepts gzip as the 1.37
        // apiserver does, one gzip member per write, and reqwest decodes only the first member.
        .no_gzip()
        .build()
        .expect("client")
}

pub fn cm(name: &str, labels: Value, data: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default", "labels": labels},
           "data": {"v": data}})
}

pub async fn post(url: &str, body: &Value) -> Value {
    let r = client().post(url).json(body).send().await.expect("post");
    assert!(r.status().is_success(), "POST {url}: {}", r.status());
    r.json().await.expect("json")
}

pub async fn put(url: &str, body: &Value) -> Value {
    let r = client().put(url).json(body).send().await.expect("put");
    assert!(r.status().is_success(), "PUT {url}: {}", r.status());
    r.json().await.expect("json")
}

pub async fn delete(url: &str) -> Value {
    let r = client().delete(url).send().await.expect("delete");
    assert!(r.status().is_success(), "DELETE {url}: {}", r.status());
    r.json().await.expect("json")
}

pub fn rv_of(obj: &Value) -> String {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .to_string()
}

/// Reads newline-delimited watch events.
pub struct Watch {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: Vec<u8>,
    pub ended: bool,
}

impl Watch {
    pub async fn open(url: &str) -> Watch {
        let r = client().get(url).send().await.expect("watch request");
        assert_eq!(r.status(), 200, "watch {url}");
        Watch {
            stream: r.bytes_stream().boxed(),
            buf: Vec::new(),
            ended: false,
        }
    }

    /// The next event, or None when the stream ends or nothing arrives within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("each line is one JSON event"));
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
                Ok(Some(Err(_))) | Ok(None) => {
                    self.ended = true;
                    return None;
                }
                Err(_) => return None,
            }
        }
    }

    /// The next event that is not a BOOKMARK.
    pub async fn next_change(&mut self, wait: Duration) -> Option<Value> {
        loop {
            let e = self.next(wait).await?;
            if e["type"] != "BOOKMARK" {
                return Some(e);
            }
        }
    }

    /// `(type, name, data.v)` of the next non-bookmark event.
    pub async fn expect(&mut self) -> (String, String, String) {
        let e = self
            .next_change(Duration::from_secs(5))
            .await
            .expect("an event within 5s");
        (
            e["type"].as_str().unwrap_or("").to_string(),
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            e["object"]["data"]["v"].as_str().unwrap_or("").to_string(),
        )
    }

    /// Asserts no non-bookmark event arrives for a short while.
    pub async fn expect_silence(&mut self) {
        if let Some(e) = self.next_change(Duration::from_millis(300)).await {
            panic!("unexpected event {e}");
        }
    }
}

pub fn ev(ty: &str, name: &str, v: &str) -> (String, String, String) {
    (ty.to_string(), name.to_string(), v.to_string())
}
