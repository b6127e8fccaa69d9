//! A closed-loop HTTP/1.1 load client on hyper: C keep-alive connections, each sending the same GET
//! back to back and reading every body to the end; latency per request into a [`Hist`]. Requests
//! count when they complete inside the window, body bytes when they arrive inside it; whatever is in
//! flight when the window ends is dropped.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use herald_bench::hist::Hist;
use http_body_util::{BodyExt as _, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// What a load run saw.
#[derive(Debug, Default)]
pub struct Load {
    pub requests: u64,
    pub body_bytes: u64,
    pub errors: u64,
    /// Responses whose status was not the expected one.
    pub unexpected_status: u64,
    pub hist: Hist,
    pub seconds: f64,
}

/// `concurrency` connections to `addr`, each sending `GET path` with `headers` for `seconds`
/// (after `warmup` seconds not counted), expecting `status`.
pub async fn run(
    addr: SocketAddr,
    path: &str,
    headers: &[(&'static str, String)],
    status: u16,
    concurrency: usize,
    warmup: f64,
    seconds: f64,
) -> anyhow::Result<Load> {
    let start = Instant::now() + Duration::from_secs_f64(warmup);
    let end = start + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let path = path.to_string();
        let headers = headers.to_vec();
        tasks.push(tokio::spawn(async move {
            conn(addr, path, headers, status, start, end).await
        }));
    }
    let mut total = Load::default();
    for t in tasks {
        let l = t.await.context("load task")?;
        total.requests += l.requests;
        total.body_bytes += l.body_bytes;
        total.errors += l.errors;
        total.unexpected_status += l.unexpected_status;
        total.hist.merge(&l.hist);
    }
    total.seconds = seconds;
    Ok(total)
}

async fn conn(
    addr: SocketAddr,
    path: String,
    headers: Vec<(&'static str, String)>,
    status: u16,
    start: Instant,
    end: Instant,
) -> Load {
    let mut l = Load::default();
    'reconnect: while Instant::now() < end {
        let Ok(stream) = TcpStream::connect(addr).await else {
            l.errors += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let Ok((mut send, connection)) =
            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream)).await
        else {
            l.errors += 1;
            continue;
        };
        let driver = tokio::spawn(connection);
        while Instant::now() < end {
            let mut req = Request::get(path.as_str()).header("host", addr.to_string());
            for (k, v) in &headers {
                req = req.header(*k, v.as_str());
            }
            let req = req.body(Empty::new()).expect("a valid request");
            let t = Instant::now();
            // Every request ends at `end`: with hundreds of clients on a large body, one response
            // can take longer than the window.
            let deadline = tokio::time::Instant::from_std(end);
            let resp = match tokio::time::timeout_at(deadline, send.send_request(req)).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => {
                    l.errors += 1;
                    driver.abort();
                    continue 'reconnect;
                }
                Err(_) => break,
            };
            let code = resp.status().as_u16();
            let mut body = resp.into_body();
            loop {
                let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(_) => {
                        driver.abort();
                        break 'reconnect;
                    }
                };
                match frame {
                    Ok(f) => {
                        // Bytes count when they arrive inside the window.
                        if let Some(d) = f.data_ref()
                            && Instant::now() >= start
                        {
                            l.body_bytes += d.len() as u64;
                        }
                    }
                    Err(_) => {
                        l.errors += 1;
                        driver.abort();
                        continue 'reconnect;
                    }
                }
            }
            // Requests count when they complete inside the window, wherever they started.
            let done = Instant::now();
            if done >= start && done <= end {
                l.requests += 1;
                l.hist.record(done.duration_since(t).as_micros() as u64);
                if code != status {
                    l.unexpected_status += 1;
                }
            }
        }
        driver.abort();
    }
    l
}
