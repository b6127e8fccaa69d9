//! `--fix DIR`: one YAML file per fix that has manifests. Each file opens with comments: what it
//! fixes, the steps in order, and one machine-readable line
//! `# herald-fix: {"code":..,"actions":[{"verb":"create|replace|delete","object":{..}}]}`;
//! then the manifests of the created and replaced objects, in action order, as YAML documents.
//! Deleted objects have no manifest. The file is valid input for `kubectl create --dry-run=client -f`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use crate::error::AuditError;
use crate::finding::Finding;
use crate::report::Report;

/// The prefix of the machine-readable header line.
pub const HEADER_PREFIX: &str = "# herald-fix: ";

/// Writes every fix with manifests into `dir` (created if needed) and records the file names in
/// the report.
pub fn write_fixes(report: &mut Report, dir: &Path) -> Result<(), AuditError> {
    std::fs::create_dir_all(dir).map_err(|source| AuditError::WriteFix {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut used = BTreeSet::new();
    for f in &mut report.findings {
        if f.fix.manifests.is_empty() {
            continue;
        }
        let base = file_stem(f);
        let mut name = format!("{base}.yaml");
        let mut n = 1;
        while !used.insert(name.clone()) {
            n += 1;
            name = format!("{base}-{n}.yaml");
        }
        let text = render(f)?;
        let path = dir.join(&name);
        std::fs::write(&path, text).map_err(|source| AuditError::WriteFix { path, source })?;
        f.fix.file = Some(name);
    }
    Ok(())
}

/// `ha004-service-shop-web`: the code and the first object, lower-case, file-name safe.
fn file_stem(f: &Finding) -> String {
    let mut s = f.code.to_ascii_lowercase();
    if let Some(o) = f.objects.first() {
        for part in [
            Some(o.kind.as_str()),
            o.namespace.as_deref(),
            Some(o.name.as_str()),
        ]
        .into_iter()
        .flatten()
        {
            s.push('-');
            s.extend(part.chars().map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            }));
        }
    }
    s
}

/// The file's text.
pub fn render(f: &Finding) -> Result<String, AuditError> {
    let mut out = String::new();
    // `write!` into a String cannot fail.
    let _ = writeln!(
        out,
        "# herald audit fix {} ({}): {}",
        f.code, f.rule, f.title
    );
    let _ = writeln!(out, "# {}", f.fix.summary);
    let _ = writeln!(out, "#");
    let _ = writeln!(out, "# Steps:");
    for (i, s) in f.fix.steps.iter().enumerate() {
        let _ = writeln!(out, "#   {}. {}", i + 1, s.replace('\n', " "));
    }
    let header = json!({"code": f.code, "actions": f.fix.actions});
    let _ = writeln!(out, "#");
    let _ = writeln!(out, "{HEADER_PREFIX}{header}");
    for m in &f.fix.manifests {
        let yaml = serde_yaml::to_string(m).map_err(|e| AuditError::EncodeFix {
            object: format!("{} in {}", m["metadata"]["name"], f.code),
            message: e.to_string(),
        })?;
        out.push_str("---\n");
        out.push_str(&yaml);
    }
    Ok(out)
}
