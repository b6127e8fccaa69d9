//! The status page in a real browser: headless Chromium (Debian `chromium`) loads `/` from a herald
//! over kube-sim, takes a screenshot, and its DOM holds every job with the target count herald
//! serves; Chromium's log shows no console error. `/status.json` carries the same numbers.

#[path = "peers/harness.rs"]
mod peers;

use std::path::Path;
use std::process::Command;

use kube_sim::peers as installed;
use peers::cluster::{loopback_spec, start_herald, start_sim};

const CHROMIUM_INSTALL: &str = "apt-get install chromium";

const JOBS: &str = "jobs:\n- name: pods\n  role: pod\n- name: endpointslices\n  role: endpointslice\n- name: nodes\n  role: node\n";

/// Runs headless Chromium on `url` with `extra` arguments; returns (stdout, stderr).
fn chromium(bin: &Path, profile: &Path, extra: &[String], url: &str) -> (String, String) {
    let mut args: Vec<String> = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=3000",
    ]
    .map(str::to_string)
    .to_vec();
    args.push(format!("--user-data-dir={}", profile.display()));
    args.extend_from_slice(extra);
    args.push(url.to_string());
    let out = Command::new(bin)
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "chromium failed: {stderr}");
    (stdout, stderr)
}

/// Console messages at error level, or uncaught errors, in Chromium's log.
fn console_errors(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("Failed to load resource")
        })
        .filter(|l| {
            !l.contains(":INFO:CONSOLE") || l.contains("Uncaught") || l.contains("Failed to load")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_renders_in_chromium_with_every_job_and_its_target_count() {
    let Some(bin) = installed::find("chromium", CHROMIUM_INSTALL) else {
        return;
    };
    let sim = start_sim(loopback_spec(), 21).await;
    let herald = start_herald(&sim, JOBS).await;
    let http = reqwest::Client::new();
    for job in ["pods", "nodes"] {
        let res = http
            .get(format!("{}/sd/v1/{job}", herald.url()))
            .send()
            .await
            .expect("sd");
        assert_eq!(res.status(), 200);
    }
    let status: serde_json::Value = http
        .get(format!("{}/status.json", herald.url()))
        .send()
        .await
        .expect("status.json")
        .json()
        .await
        .expect("json");
    assert_eq!(status["consumers"]["sd_clients"], 2, "{status}");
    assert!(status["consumers"]["watches_saved"].is_u64());

    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("{}/", herald.url());
    let shot = dir.path().join("status.png");
    let (bin2, profile, url2, shot2) = (
        bin.clone(),
        dir.path().join("p1"),
        url.clone(),
        shot.clone(),
    );
    let (_, shot_log) = tokio::task::spawn_blocking(move || {
        chromium(
            &bin2,
            &profile,
            &[
                format!("--screenshot={}", shot2.display()),
                "--window-size=1280,900".to_string(),
            ],
            &url2,
        )
    })
    .await
    .expect("chromium screenshot");
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real screenshot ({} bytes)",
        png.len()
    );
    if let Ok(keep) = std::env::var("HERALD_STATUS_SCREENSHOT") {
        std::fs::copy(&shot, keep).expect("keep screenshot");
    }
    let (bin3, profile) = (bin.clone(), dir.path().join("p2"));
    let (dom, dom_log) = tokio::task::spawn_blocking(move || {
        chromium(&bin3, &profile, &["--dump-dom".to_string()], &url)
    })
    .await
    .expect("chromium dump-dom");

    for job in status["jobs"].as_array().expect("jobs") {
        let name = job["name"].as_str().expect("name");
        let targets = job["targets"].as_u64().expect("targets");
        assert!(targets > 0, "job {name} has targets");
        let row = dom
            .split("<tr ")
            .find(|r| r.starts_with(&format!("data-job=\"{name}\"")))
            .unwrap_or_else(|| panic!("job {name} has a row in the DOM: {dom}"));
        assert!(
            row.contains(&format!("<td class=\"n targets\">{targets}</td>")),
            "job {name} shows {targets} targets: {row}"
        );
        assert!(row.contains(&format!("href=\"/sd/v1/{name}\"")), "{row}");
    }
    assert!(
        dom.contains("id=\"sd-clients\">2<"),
        "the consumers are counted: {dom}"
    );
    for kind in ["pods", "endpointslices", "nodes", "services"] {
        assert!(
            dom.contains(&format!("data-kind=\"{kind}\"")),
            "kind {kind} is listed"
        );
    }
    for log in [&shot_log, &dom_log] {
        let errors = console_errors(log);
        assert!(errors.is_empty(), "console errors: {errors:?}");
    }
    herald.stop().await;
}

#[test]
fn console_errors_are_told_from_ordinary_chromium_log_lines() {
    let log = "[1:2:INFO:CONSOLE(1)] \"hello\", source: http://x/ (1)\n\
               [1:2:INFO:CONSOLE(3)] \"Uncaught ReferenceError: x is not defined\", source: http://x/ (3)\n\
               [1:2:ERROR:gpu_init.cc(1)] no GPU\n";
    assert_eq!(console_errors(log).len(), 1);
}
