//! The audit report: the `herald.audit/v1` JSON document and the table for terminals.

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;

use crate::finding::{Finding, NotChecked, Severity};
use crate::inventory::Cluster;
use crate::kind::Kind;
use crate::rules::Evaluation;

/// The JSON schema identifier; bumped on any incompatible change.
pub const SCHEMA: &str = "herald.audit/v1";
/// The table fits a terminal this wide.
pub const TABLE_WIDTH: usize = 100;

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
        let mut summary = Summary::default();
        for f in &evaluation.findings {
            match f.severity {
                Severity::Critical => summary.critical += 1,
                Severity::Warning => summary.warning += 1,
                Severity::Info => summary.info += 1,
            }
        }
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

    /// Findings grouped by severity, worst first, wrapped to [`TABLE_WIDTH`] columns.
    pub fn write_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let s = &self.summary;
        let header = format!(
            "herald audit of {}: {} critical, {} warning, {} info; {} rule(s) not checked",
            self.source,
            s.critical,
            s.warning,
            s.info,
            self.not_checked.len()
        );
        for line in wrap(&header, "", "  ") {
            writeln!(out, "{line}")?;
        }
        for sev in [Severity::Critical, Severity::Warning, Severity::Info] {
            let group: Vec<_> = self.findings.iter().filter(|f| f.severity == sev).collect();
            if group.is_empty() {
                continue;
            }
            writeln!(out)?;
            writeln!(out, "{} ({})", sev.as_str().to_uppercase(), group.len())?;
            for f in group {
                write_finding(out, f)?;
            }
        }
        if !self.not_checked.is_empty() {
            writeln!(out)?;
            writeln!(out, "NOT CHECKED (kinds missing from the input)")?;
            for n in &self.not_checked {
                let kinds: Vec<_> = n.missing_kinds.iter().map(|k| k.name()).collect();
                let line = format!("{} {}: needs {}", n.code, n.rule, kinds.join(", "));
                for l in wrap(&line, "  ", "        ") {
                    writeln!(out, "{l}")?;
                }
            }
        }
        if !self.inventory.unknown_kinds.is_empty() {
            writeln!(out)?;
            writeln!(out, "IGNORED (unknown kinds)")?;
            for (k, n) in &self.inventory.unknown_kinds {
                writeln!(out, "  {k}: {n}")?;
            }
        }
        Ok(())
    }
}

fn write_finding(out: &mut dyn Write, f: &Finding) -> std::io::Result<()> {
    const PAD: &str = "        ";
    for l in wrap(&format!("{} {}", f.code, f.title), "  ", PAD) {
        writeln!(out, "{l}")?;
    }
    if !f.objects.is_empty() {
        let objs: Vec<_> = f.objects.iter().map(ToString::to_string).collect();
        for l in wrap(&format!("objects: {}", objs.join(", ")), PAD, PAD) {
            writeln!(out, "{l}")?;
        }
    }
    for e in &f.evidence {
        for l in wrap(&format!("- {e}"), PAD, &format!("{PAD}  ")) {
            writeln!(out, "{l}")?;
        }
    }
    for l in wrap(&format!("cost: {}", f.cost.summary), PAD, PAD) {
        writeln!(out, "{l}")?;
    }
    let file = f
        .fix
        .file
        .as_deref()
        .map(|p| format!(" [{p}]"))
        .unwrap_or_default();
    for l in wrap(&format!("fix: {}{file}", f.fix.summary), PAD, PAD) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// Word-wraps `text` to [`TABLE_WIDTH`] columns; a word longer than a line is cut.
fn wrap(text: &str, first: &str, rest: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        let needed = if empty {
            word.chars().count()
        } else {
            word.chars().count() + 1
        };
        if !empty && line.chars().count() + needed > TABLE_WIDTH {
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        let room = TABLE_WIDTH.saturating_sub(line.chars().count()).max(1);
        let mut w: String = word.chars().take(room).collect();
        let mut remaining: String = word.chars().skip(room).collect();
        line.push_str(&w);
        empty = false;
        while !remaining.is_empty() {
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            let room = TABLE_WIDTH.saturating_sub(rest.chars().count()).max(1);
            w = remaining.chars().take(room).collect();
            remaining = remaining.chars().skip(room).collect();
            line.push_str(&w);
        }
    }
    if !empty || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_lines_never_pass_the_table_width() {
        let text = "word ".repeat(60) + &"x".repeat(250);
        let lines = wrap(&text, "  ", "      ");
        assert!(lines.len() > 3);
        for l in &lines {
            assert!(l.chars().count() <= TABLE_WIDTH, "{l}");
        }
        assert!(lines[1].starts_with("      word"));
    }
}
