//! `--fix DIR`: one YAML file per rule and namespace holding the fixes of those findings that have
//! manifests, and an index (`README.md` for people, `index.json` for tools) saying what each file
//! does and in which order to apply them.
//!
//! A file opens with comments (per finding: what it fixes and its steps in order) and one
//! machine-readable line for the whole file,
//! `# herald-fix: {"code":..,"namespace":..,"actions":[{"verb":"create|replace|delete","object":{..}}]}`,
//! then the manifests of the created and replaced objects, in action order, as YAML documents.
//! Deleted objects have no manifest. An action repeated by two findings of the file (the same
//! verb on the same object with the same manifest) is written once. Every file is valid input for
//! `kubectl create --dry-run=client -f`.
//!
//! Files are numbered in the order to apply them: critical rules first, then by code and
//! namespace. They are cut from one snapshot: a file acting on an object an earlier file also acts
//! on belongs to the next round, after the audit has run again; the index names those.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::{Value, json};

use crate::error::AuditError;
use crate::finding::{Action, Finding, ObjectRef, Severity, Verb};
use crate::report::Report;
use crate::rules::RULES;

/// The prefix of the machine-readable header line.
pub const HEADER_PREFIX: &str = "# herald-fix: ";
/// The namespace part of the file name of fixes about cluster-scoped objects or none.
const CLUSTER: &str = "cluster";

/// One file of the index.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct IndexEntry {
    order: usize,
    file: String,
    code: &'static str,
    rule: &'static str,
    severity: Severity,
    namespace: String,
    findings: usize,
    summary: String,
    /// Actions per verb.
    actions: BTreeMap<&'static str, usize>,
    /// Earlier files acting on an object this file acts on too: apply this one in the next round.
    after_audit_of: Vec<String>,
}

/// Writes the fixes with manifests into `dir` (created if needed), records each finding's file in
/// the report, and writes the index.
pub fn write_fixes(report: &mut Report, dir: &Path) -> Result<(), AuditError> {
    std::fs::create_dir_all(dir).map_err(|source| AuditError::WriteFix {
        path: dir.to_path_buf(),
        source,
    })?;
    // (worst severity, code, namespace) -> finding indices, in report order.
    let mut files: BTreeMap<(&'static str, String), Vec<usize>> = BTreeMap::new();
    for (i, f) in report.findings.iter().enumerate() {
        if f.fix.manifests.is_empty() {
            continue;
        }
        files.entry((f.code, namespace_of(f))).or_default().push(i);
    }
    let mut order: Vec<((&'static str, String), Vec<usize>)> = files.into_iter().collect();
    let worst = |findings: &[Finding], ids: &[usize]| {
        ids.iter()
            .map(|&i| findings[i].severity)
            .max()
            .unwrap_or(Severity::Info)
    };
    order.sort_by(|(ka, a), (kb, b)| {
        worst(&report.findings, b)
            .cmp(&worst(&report.findings, a))
            .then(ka.cmp(kb))
    });
    let width = order.len().to_string().len().max(2);
    let mut index = Vec::new();
    let mut touched: BTreeMap<ObjectRef, String> = BTreeMap::new();
    for (n, ((code, namespace), ids)) in order.into_iter().enumerate() {
        let name = format!(
            "{:0width$}-{}-{}.yaml",
            n + 1,
            code.to_ascii_lowercase(),
            file_safe(&namespace)
        );
        let findings: Vec<&Finding> = ids.iter().map(|&i| &report.findings[i]).collect();
        let (text, actions) = render(code, &namespace, &findings)?;
        let path = dir.join(&name);
        std::fs::write(&path, text).map_err(|source| AuditError::WriteFix { path, source })?;
        let mut after: BTreeSet<String> = BTreeSet::new();
        for a in &actions {
            match touched.get(&a.object) {
                Some(earlier) if *earlier != name => {
                    after.insert(earlier.clone());
                }
                Some(_) => {}
                None => {
                    touched.insert(a.object.clone(), name.clone());
                }
            }
        }
        let mut per_verb = BTreeMap::new();
        for a in &actions {
            *per_verb.entry(verb_name(a.verb)).or_default() += 1;
        }
        index.push(IndexEntry {
            order: n + 1,
            file: name.clone(),
            code,
            rule: findings[0].rule,
            severity: worst(&report.findings, &ids),
            namespace: namespace.clone(),
            findings: findings.len(),
            summary: summary(code, &findings),
            actions: per_verb,
            after_audit_of: after.into_iter().collect(),
        });
        for &i in &ids {
            report.findings[i].fix.file = Some(name.clone());
        }
    }
    write_index(dir, &report.source, &index)
}

/// The namespace a finding's fix file is for: that of the object at fault.
fn namespace_of(f: &Finding) -> String {
    f.objects
        .first()
        .and_then(|o| o.namespace.clone())
        .unwrap_or_else(|| CLUSTER.to_string())
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

fn verb_name(v: Verb) -> &'static str {
    match v {
        Verb::Create => "create",
        Verb::Replace => "replace",
        Verb::Delete => "delete",
    }
}

/// What a file does: the fix summary its findings share, else the rule's own line.
fn summary(code: &str, findings: &[&Finding]) -> String {
    let distinct: BTreeSet<&str> = findings.iter().map(|f| f.fix.summary.as_str()).collect();
    match distinct.len() {
        1 => distinct.into_iter().next().expect("one").to_string(),
        _ => RULES
            .iter()
            .find(|r| r.code == code)
            .map_or_else(String::new, |r| format!("fixes {}", r.about)),
    }
}

/// The text of one file and its actions, in order, duplicates dropped.
pub fn render(
    code: &str,
    namespace: &str,
    findings: &[&Finding],
) -> Result<(String, Vec<Action>), AuditError> {
    let mut out = String::new();
    let rule = findings.first().map_or("", |f| f.rule);
    // `write!` into a String cannot fail.
    let _ = writeln!(
        out,
        "# herald audit fix {code} ({rule}), namespace {namespace}: {} finding(s)",
        findings.len()
    );
    let _ = writeln!(
        out,
        "# Apply the actions of the herald-fix line in order: delete the object, or kubectl create / \
         replace the next manifest."
    );
    let mut actions: Vec<Action> = Vec::new();
    let mut manifests: Vec<&Value> = Vec::new();
    // (verb, object, manifest) already written.
    let mut seen: Vec<(Verb, &ObjectRef, Option<&Value>)> = Vec::new();
    for (n, f) in findings.iter().enumerate() {
        let _ = writeln!(out, "#");
        let _ = writeln!(out, "# {}. {}", n + 1, f.title.replace('\n', " "));
        let _ = writeln!(out, "#    {}", f.fix.summary.replace('\n', " "));
        for (i, s) in f.fix.steps.iter().enumerate() {
            let _ = writeln!(out, "#    {}. {}", i + 1, s.replace('\n', " "));
        }
        let mut next = f.fix.manifests.iter();
        for a in &f.fix.actions {
            let m = match a.verb {
                Verb::Delete => None,
                _ => Some(next.next().ok_or_else(|| AuditError::EncodeFix {
                    object: a.object.to_string(),
                    message: format!("{}: an action without its manifest", f.code),
                })?),
            };
            if seen
                .iter()
                .any(|(v, o, sm)| *v == a.verb && **o == a.object && *sm == m)
            {
                continue;
            }
            seen.push((a.verb, &a.object, m));
            actions.push(a.clone());
            manifests.extend(m);
        }
    }
    let header = json!({"code": code, "namespace": namespace, "actions": actions});
    let _ = writeln!(out, "#");
    let _ = writeln!(out, "{HEADER_PREFIX}{header}");
    for m in manifests {
        let yaml = serde_yaml::to_string(m).map_err(|e| AuditError::EncodeFix {
            object: format!("{} in {code}", m["metadata"]["name"]),
            message: e.to_string(),
        })?;
        out.push_str("---\n");
        out.push_str(&yaml);
    }
    Ok((out, actions))
}

fn write_index(dir: &Path, source: &str, index: &[IndexEntry]) -> Result<(), AuditError> {
    let json_path = dir.join("index.json");
    let doc = json!({"schema": "herald.audit.fixes/v1", "source": source, "files": index});
    let text = serde_json::to_string_pretty(&doc).map_err(|e| AuditError::WriteIndex {
        path: json_path.clone(),
        message: e.to_string(),
    })?;
    std::fs::write(&json_path, text + "\n").map_err(|source| AuditError::WriteFix {
        path: json_path,
        source,
    })?;
    let mut md = String::new();
    let _ = writeln!(md, "# herald audit fixes\n");
    let _ = writeln!(
        md,
        "Cut from the audit of {source}. Apply the files in the order below. Each opens with the steps \
         of its findings; its `# herald-fix:` line lists its actions in order: `delete` the object, or \
         `kubectl create -f` / `kubectl replace -f` the next manifest of the file.\n"
    );
    let _ = writeln!(
        md,
        "The files are cut from one snapshot. A file marked *next round* acts on an object that an \
         earlier file acts on too: apply it only after running the audit again, which writes it anew \
         from the changed cluster. Repeat until no file is left.\n"
    );
    let _ = writeln!(
        md,
        "| order | file | rule | severity | namespace | findings | actions | what it does |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for e in index {
        let actions: Vec<String> = e.actions.iter().map(|(v, n)| format!("{v} {n}")).collect();
        let mut what = e.summary.replace('|', "\\|");
        if !e.after_audit_of.is_empty() {
            what.push_str(&format!(
                " — *next round*: acts on objects of {}",
                e.after_audit_of.join(", ")
            ));
        }
        let _ = writeln!(
            md,
            "| {} | [{}]({}) | {} {} | {} | {} | {} | {} | {} |",
            e.order,
            e.file,
            e.file,
            e.code,
            e.rule,
            e.severity.as_str(),
            e.namespace,
            e.findings,
            actions.join(", "),
            what
        );
    }
    let md_path = dir.join("README.md");
    std::fs::write(&md_path, md).map_err(|source| AuditError::WriteFix {
        path: md_path,
        source,
    })
}
