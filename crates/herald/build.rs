//! Stamps the build: `HERALD_COMMIT`, the short commit of the checkout (`unknown` outside a git
//! checkout, e.g. a source tarball), and `HERALD_RUSTC`, the compiler's version, for
//! `herald --version` and the `herald_build_info` metric.

use std::process::Command;

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    let commit = output("git", &["rev-parse", "--short=10", "HEAD"]);
    println!(
        "cargo:rustc-env=HERALD_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    // Rebuilt when HEAD moves: HEAD itself (a checkout) and the ref it points at (a commit).
    if commit.is_some() {
        for path in ["HEAD", "packed-refs"] {
            if let Some(p) = output("git", &["rev-parse", "--git-path", path]) {
                println!("cargo:rerun-if-changed={p}");
            }
        }
        if let Some(r) = output("git", &["symbolic-ref", "-q", "HEAD"])
            && let Some(p) = output("git", &["rev-parse", "--git-path", &r])
        {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = output(&rustc, &["--version"]).unwrap_or_else(|| "rustc unknown".into());
    // "rustc 1.91.0 (f8297e351 2025-10-28)": the version alone.
    let short: Vec<&str> = version.split_whitespace().take(2).collect();
    println!("cargo:rustc-env=HERALD_RUSTC={}", short.join(" "));
}
