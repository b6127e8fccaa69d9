//! The audit report: the `herald.audit/v1` JSON document (every finding), the selection of
//! findings the command line asks for, and the table for terminals (`table.rs`).

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;

use crate::error::AuditError;
use crate::finding::{Finding, NotChecked, Severity};
use crate::inventory::Cluster;
use crate::kind::Kind;
use crate::rules::{Evaluation, RULES};

/// The JSON schema identifier; bumped on any incompatible change.
pub const SCHEMA: &str = "herald.audit/v1";

/// The whole audit result. Its JSON form is documented in the crate README.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub schema: &'static str,
    /// What was audited: `files: a.json, b.yaml` or `kubeconfig: PATH`.
    pub source: String,
    pub inventory: Inventory,
    pub summary: Summary,
    pub not_checked: Vec<NotChecked>,
    pub findings: Vec<Finding>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    /// Objects read per known kind; a kind absent here was not in the input.
    pub objects: BTreeMap<Kind, usize>,
    /// Kinds the input lacked (their rules are "not checked", never "absent").
    pub missing_kinds: Vec<Kind>,
    /// Objects of kinds the audit does not know, by `apiVersion/kind`: ignored.
    pub unknown_kinds: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub critical: usize,
    pub warning: usize,
    pub info: usize,
}

impl Report {
    pub fn new(cluster: &Cluster, evaluation: Evaluation, source: String) -> Report {
        let summary = Summary::of(&evaluation.findings);
        Report {
            schema: SCHEMA,
            source,
            inventory: Inventory {
                objects: cluster.counts(),
                missing_kinds: cluster.missing(&Kind::ALL),
                unknown_kinds: cluster.unknown_kinds().clone(),
            },
            summary,
            not_checked: evaluation.not_checked,
            findings: evaluation.findings,
        }
    }

    /// 1 when a finding reaches `fail_on`, else 0.
    pub fn exit_code(&self, fail_on: Severity) -> i32 {
        i32::from(self.findings.iter().any(|f| f.severity >= fail_on))
    }

    pub fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self)?;
        writeln!(out)
    }

    /// Keeps only the findings `selection` picks (all when it picks by nothing) and recounts the
    /// summary. Rules that could not run stay listed.
    pub fn select(&mut self, selection: &Selection) {
        if selection.is_everything() {
            return;
        }
        self.findings.retain(|f| selection.picks(f));
        self.summary = Summary::of(&self.findings);
    }

    /// The table: the severity summary, then one block per rule (`table.rs`).
    pub fn write_table(&self, out: &mut dyn Write, style: &TableStyle) -> std::io::Result<()> {
        crate::table::write(self, out, style)
    }
}

impl Summary {
    pub fn of(findings: &[Finding]) -> Summary {
        let mut summary = Summary::default();
        for f in findings {
            match f.severity {
                Severity::Critical => summary.critical += 1,
                Severity::Warning => summary.warning += 1,
                Severity::Info => summary.info += 1,
            }
        }
        summary
    }
}

/// Which findings to show: those of the given rules and namespaces (either list empty: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Rule codes (`HA004`).
    pub rules: Vec<&'static str>,
    pub namespaces: Vec<String>,
}

impl Selection {
    /// The selection the command line asks for; an unknown rule is an error naming the known ones.
    pub fn new(rules: &[String], namespaces: &[String]) -> Result<Selection, AuditError> {
        let mut codes = Vec::new();
        for given in rules {
            let rule = RULES
                .iter()
                .find(|r| r.code.eq_ignore_ascii_case(given) || r.slug == given.as_str())
                .ok_or_else(|| AuditError::UnknownRule {
                    given: given.clone(),
                    known: RULES
                        .iter()
                        .map(|r| format!("{} {}", r.code, r.slug))
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            codes.push(rule.code);
        }
        Ok(Selection {
            rules: codes,
            namespaces: namespaces.to_vec(),
        })
    }

    pub fn is_everything(&self) -> bool {
        self.rules.is_empty() && self.namespaces.is_empty()
    }

    /// Whether `f` is selected: its rule is listed, and the object at fault is in a listed
    /// namespace (a finding about no namespaced object is in none).
    pub fn picks(&self, f: &Finding) -> bool {
        let rule = self.rules.is_empty() || self.rules.contains(&f.code);
        let namespace = self.namespaces.is_empty()
            || f.objects
                .first()
                .and_then(|o| o.namespace.as_deref())
                .is_some_and(|ns| self.namespaces.iter().any(|n| n == ns));
        rule && namespace
    }
}

/// How the table prints findings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableStyle {
    /// Every finding in full (`--all`, or a `--rule`/`--namespace` selection).
    pub full: bool,
    /// The command that reads the same input (`herald audit --from dump.json`), for the hints
    /// that say how to list the rest of a group.
    pub command: String,
    /// The fix directory, when fixes were written.
    pub fix_dir: Option<String>,
}
