//! Shared helpers of the audit tests: fixture paths and the findings of a report as a set.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use herald_audit::{Options, Report};

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn audit_files(names: &[&str]) -> Report {
    let paths: Vec<_> = names.iter().map(|n| fixture(n)).collect();
    let cluster = herald_audit::load::load_paths(&paths).expect("fixtures load");
    herald_audit::audit(&cluster, &Options::default(), "test".into())
}

/// `(code, first object)` of every finding; `cluster` for findings about no object.
pub fn found(report: &Report) -> BTreeSet<(String, String)> {
    report
        .findings
        .iter()
        .map(|f| {
            let obj = f
                .objects
                .first()
                .map_or_else(|| "cluster".to_string(), ToString::to_string);
            (f.code.to_string(), obj)
        })
        .collect()
}

pub fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(c, o)| (c.to_string(), o.to_string()))
        .collect()
}
