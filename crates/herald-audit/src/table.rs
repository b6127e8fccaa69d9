//! The table for terminals: the severity summary first, then one block per rule. A rule with one
//! finding shows it in full; a rule with many shows their count, their total cost, the top entries
//! by cost and the command that lists the rest, so that a 5,000-node cluster's thousands of
//! findings read as a page. `--all` or a `--rule`/`--namespace` selection prints findings in full.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use crate::finding::{Finding, Severity};
use crate::report::{Report, TableStyle};
use crate::rules::RULES;

/// The table fits a terminal this wide.
pub const TABLE_WIDTH: usize = 100;
/// Entries listed per grouped rule.
const TOP: usize = 5;
/// Fix files named per grouped rule before "and N more".
const FILES_SHOWN: usize = 3;
const PAD: &str = "        ";

pub fn write(report: &Report, out: &mut dyn Write, style: &TableStyle) -> std::io::Result<()> {
    let s = &report.summary;
    let header = format!(
        "herald audit of {}: {} critical, {} warning, {} info; {} rule(s) not checked",
        report.source,
        thousands(s.critical),
        thousands(s.warning),
        thousands(s.info),
        report.not_checked.len()
    );
    for line in wrap(&header, "", "  ") {
        writeln!(out, "{line}")?;
    }
    let groups = group(&report.findings);
    for sev in [Severity::Critical, Severity::Warning, Severity::Info] {
        let rules: Vec<String> = groups
            .iter()
            .filter_map(|g| {
                let n = g.findings.iter().filter(|f| f.severity == sev).count();
                (n > 0).then(|| format!("{} {} ×{}", g.code, g.slug, thousands(n)))
            })
            .collect();
        if rules.is_empty() {
            continue;
        }
        let count = match sev {
            Severity::Critical => s.critical,
            Severity::Warning => s.warning,
            Severity::Info => s.info,
        };
        let line = format!(
            "{} {}: {}",
            thousands(count),
            sev.as_str(),
            rules.join(", ")
        );
        for l in wrap(&line, "  ", "    ") {
            writeln!(out, "{l}")?;
        }
    }
    for g in &groups {
        writeln!(out)?;
        write_group(out, g, style)?;
    }
    if !report.not_checked.is_empty() {
        writeln!(out)?;
        writeln!(out, "NOT CHECKED (kinds missing from the input)")?;
        for n in &report.not_checked {
            let kinds: Vec<_> = n.missing_kinds.iter().map(|k| k.name()).collect();
            let line = format!("{} {}: needs {}", n.code, n.rule, kinds.join(", "));
            for l in wrap(&line, "  ", PAD) {
                writeln!(out, "{l}")?;
            }
        }
    }
    if !report.inventory.unknown_kinds.is_empty() {
        writeln!(out)?;
        writeln!(out, "IGNORED (unknown kinds)")?;
        for (k, n) in &report.inventory.unknown_kinds {
            writeln!(out, "  {k}: {n}")?;
        }
    }
    Ok(())
}

/// The findings of one rule.
struct Group<'r> {
    code: &'static str,
    slug: &'static str,
    worst: Severity,
    findings: Vec<&'r Finding>,
}

/// Findings by rule, worst severity first, then by code.
fn group(findings: &[Finding]) -> Vec<Group<'_>> {
    let mut by_code: BTreeMap<&'static str, Group<'_>> = BTreeMap::new();
    for f in findings {
        let g = by_code.entry(f.code).or_insert_with(|| Group {
            code: f.code,
            slug: f.rule,
            worst: f.severity,
            findings: Vec::new(),
        });
        g.worst = g.worst.max(f.severity);
        g.findings.push(f);
    }
    let mut groups: Vec<Group<'_>> = by_code.into_values().collect();
    groups.sort_by(|a, b| b.worst.cmp(&a.worst).then(a.code.cmp(b.code)));
    groups
}

fn severities(findings: &[&Finding]) -> String {
    let mut parts = Vec::new();
    for sev in [Severity::Critical, Severity::Warning, Severity::Info] {
        let n = findings.iter().filter(|f| f.severity == sev).count();
        if n > 0 {
            parts.push(format!("{} {}", thousands(n), sev.as_str()));
        }
    }
    parts.join(", ")
}

fn write_group(out: &mut dyn Write, g: &Group<'_>, style: &TableStyle) -> std::io::Result<()> {
    let n = g.findings.len();
    let head = format!(
        "{} {}: {} finding{} ({})",
        g.code,
        g.slug,
        thousands(n),
        if n == 1 { "" } else { "s" },
        severities(&g.findings)
    );
    for l in wrap(&head, "", "  ") {
        writeln!(out, "{l}")?;
    }
    if style.full || n == 1 {
        for f in &g.findings {
            write_finding(out, f)?;
        }
        return Ok(());
    }
    let about = RULES
        .iter()
        .find(|r| r.code == g.code)
        .map_or("", |r| r.about);
    for l in wrap(about, "  ", "  ") {
        writeln!(out, "{l}")?;
    }
    let headline = headline(g.code);
    let figure = |f: &Finding| {
        headline
            .as_ref()
            .and_then(|h| f.cost.figures.get(h.figure).copied())
            .unwrap_or(0.0)
    };
    if let Some(h) = &headline {
        let values: Vec<f64> = g.findings.iter().map(|f| figure(f)).collect();
        for l in wrap(&format!("cost: {}", (h.total)(&values)), "  ", "    ") {
            writeln!(out, "{l}")?;
        }
    }
    let mut ranked = g.findings.clone();
    // Stable: equal costs keep the report's order (severity, then objects).
    ranked.sort_by(|a, b| figure(b).total_cmp(&figure(a)));
    let shown = ranked.len().min(TOP);
    writeln!(
        out,
        "  {}:",
        if headline.is_some() {
            format!("top {shown} by cost")
        } else {
            format!("first {shown}")
        }
    )?;
    for f in &ranked[..shown] {
        let object = f
            .objects
            .first()
            .map_or_else(|| "cluster".to_string(), ToString::to_string);
        let line = format!("- {object} ({}): {}", f.severity.as_str(), f.cost.summary);
        for l in wrap(&line, "    ", "      ") {
            writeln!(out, "{l}")?;
        }
    }
    let fixes: BTreeSet<&str> = g.findings.iter().map(|f| f.fix.summary.as_str()).collect();
    if fixes.len() == 1 {
        let only = fixes.iter().next().expect("one fix summary");
        for l in wrap(&format!("fix: {only}"), "  ", "    ") {
            writeln!(out, "{l}")?;
        }
    }
    let files: BTreeSet<&str> = g
        .findings
        .iter()
        .filter_map(|f| f.fix.file.as_deref())
        .collect();
    if !files.is_empty() {
        let named: Vec<&str> = files.iter().copied().take(FILES_SHOWN).collect();
        let more = files.len() - named.len();
        let mut line = format!("fix files: {}", named.join(", "));
        if more > 0 {
            line.push_str(&format!(" and {} more", thousands(more)));
        }
        if let Some(dir) = &style.fix_dir {
            line.push_str(&format!(" (order: {dir}/README.md)"));
        }
        for l in wrap(&line, "  ", "    ") {
            writeln!(out, "{l}")?;
        }
    }
    let rest = n - shown;
    let hint = format!(
        "{}: {} --rule {} (add --namespace NAME to narrow it, or --all for every rule)",
        if rest > 0 {
            format!("the other {} and every detail", thousands(rest))
        } else {
            "every detail".to_string()
        },
        style.command,
        g.code
    );
    for l in wrap(&hint, "  ", "    ") {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// The figure a rule's findings are ranked and totalled by, and how to say the total.
#[derive(Clone, Copy)]
struct Headline {
    figure: &'static str,
    total: fn(&[f64]) -> String,
}

fn sum(values: &[f64]) -> usize {
    values.iter().sum::<f64>().round() as usize
}

fn headline(code: &str) -> Option<Headline> {
    let h = |figure, total| Some(Headline { figure, total });
    match code {
        "HA001" => h("missing_addresses", |v| {
            format!(
                "{} targets invisible to consumers of the Endpoints API",
                thousands(sum(v))
            )
        }),
        "HA002" => h("missing_targets", |v| {
            format!(
                "{} targets never scraped; {} Prometheus objects list and watch whole Endpoints objects",
                thousands(sum(v)),
                v.len()
            )
        }),
        "HA003" => h("kubelets_missing_from_mirrored_slices", |v| {
            format!(
                "{} kubelets missing from the mirrored slices",
                thousands(sum(v))
            )
        }),
        "HA004" => h("iptables_rules_per_node", |v| {
            format!(
                "~{} kube-proxy rules on every node for {} metrics-only Services",
                thousands(sum(v)),
                thousands(v.len())
            )
        }),
        "HA005" => h("scraped_ports", |v| {
            format!(
                "{} scraped ports tie discovery to {} traffic Services",
                thousands(sum(v)),
                thousands(v.len())
            )
        }),
        "HA006" => h("sidecars", |v| {
            format!(
                "{} metrics Services pushed to each of {} sidecars on every change",
                thousands(v.len()),
                thousands(v.iter().copied().fold(0.0, f64::max) as usize)
            )
        }),
        "HA008" => h("unscraped_endpoints", |v| {
            format!("{} metrics endpoints never scraped", thousands(sum(v)))
        }),
        "HA009" => h("pods", |v| {
            format!(
                "{} pods whose application metrics fail to scrape",
                thousands(sum(v))
            )
        }),
        _ => None,
    }
}

pub(crate) fn write_finding(out: &mut dyn Write, f: &Finding) -> std::io::Result<()> {
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

fn thousands(n: usize) -> String {
    crate::rules::thousands(n as u64)
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
