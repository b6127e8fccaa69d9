//! The HTML report of `herald simulate` in real headless Chromium: it renders (a screenshot is
//! taken), its three plots are in the DOM with their axis titles, it loads nothing from elsewhere
//! and logs no console error.

#[path = "simulate_support.rs"]
mod support;

use std::process::{Command, Output};

fn chromium(bin: &std::path::Path, profile: &std::path::Path, args: &[String]) -> Output {
    Command::new(bin)
        .args([
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
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium runs")
}

fn console_errors(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("Uncaught") || (l.contains("CONSOLE") && l.contains("rror")))
        .collect()
}

#[test]
fn the_report_renders_in_chromium_with_its_plots_and_axis_titles() {
    let Some(chromium_bin) = kube_sim::peers::find("chromium", "apt-get install chromium") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let html = dir.path().join("report.html");
    let out = support::herald()
        .args([
            "simulate",
            "--services",
            "300",
            "--factors",
            "0.25,1,4",
            "--report",
        ])
        .arg(&html)
        .output()
        .expect("herald runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&html).expect("report written");
    assert!(!text.contains("<script"), "no scripts");
    assert!(
        !text.contains("src=") && !text.contains("<link"),
        "nothing loaded from elsewhere"
    );

    let url = format!("file://{}", html.display());
    let shot = dir.path().join("shot.png");
    let o = chromium(
        &chromium_bin,
        &dir.path().join("profile1"),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1200,2400".into(),
            url.clone(),
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let png = std::fs::read(&shot).expect("screenshot taken");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real screenshot"
    );
    assert!(console_errors(&stderr).is_empty(), "{stderr}");

    let o = chromium(
        &chromium_bin,
        &dir.path().join("profile2"),
        &["--dump-dom".into(), url],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(console_errors(&stderr).is_empty(), "{stderr}");
    // plotters writes each text on a line of its own: `<text ...>\nServices\n</text>`.
    let dom = String::from_utf8_lossy(&o.stdout)
        .replace(">\n", ">")
        .replace("\n<", "<");
    for id in ["plot-sync-time", "plot-rules", "plot-egress"] {
        let start = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("{id} in the DOM"));
        let figure = &dom[start..start + dom[start..].find("</figure>").expect("closed")];
        assert!(figure.contains("<svg"), "{id} is an inline SVG");
    }
    for title in [
        "Services",
        "sync time (s)",
        "rules",
        "consumers (watches on discovery kinds)",
        "apiserver egress (bytes/s)",
        "this cluster",
    ] {
        assert!(
            dom.contains(&format!(">{title}<")),
            "axis title {title:?} in the DOM"
        );
    }
}
