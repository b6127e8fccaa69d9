//! herald-audit: finds what makes a cluster's discovery expensive or blind, says what it costs,
//! and writes the manifests that fix it.
//!
//! Layers: [`load`] (dumps) and [`live`] (a cluster, read-only) stream objects one by one into a
//! [`Cluster`] inventory of compact [`objects`]; the [`rules`] are pure functions over it,
//! producing [`Finding`]s; [`Report`] renders them as a table grouped by rule or as
//! `herald.audit/v1` JSON (schema in the crate README); [`write_fixes`] writes one YAML file per
//! rule and namespace, and their index. [`run`] wires it all for `herald audit`.

mod args;
mod custom;
mod document;
mod error;
mod facts;
mod finding;
mod fix_file;
mod inventory;
mod istio;
mod kind;
pub mod live;
pub mod load;
mod manifest;
pub mod objects;
mod report;
pub mod rules;
mod selector;
mod table;
mod versions;
mod workload;

use std::io::Write;

pub use args::{AuditArgs, OutputFormat};
pub use error::AuditError;
pub use finding::{Action, Cost, Finding, Fix, NotChecked, ObjectRef, Severity, Verb};
pub use fix_file::{HEADER_PREFIX, write_fixes};
pub use inventory::{Cluster, Item, Rejected};
pub use kind::Kind;
pub use report::{Inventory, Report, SCHEMA, Selection, Summary, TableStyle};
pub use rules::{Options, RULES};
pub use table::TABLE_WIDTH;

/// Audits an inventory: pure, synchronous.
pub fn audit(cluster: &Cluster, options: &Options, source: String) -> Report {
    Report::new(cluster, rules::evaluate(cluster, options), source)
}

/// Runs `herald audit`: reads the cluster or the dumps, writes the report to `out` (and the fixes
/// to `--fix DIR`), and returns the exit code: 0 when no finding reaches `--fail-on`, 1 when one
/// does. Errors are for the caller to map to exit code 2.
pub async fn run(args: &AuditArgs, out: &mut dyn Write) -> Result<i32, AuditError> {
    let selection = Selection::new(&args.rules, &args.namespaces)?;
    let (cluster, source) = match (&args.kubeconfig, args.from.is_empty()) {
        (Some(path), _) => (
            live::load(path, args.context.as_deref()).await?,
            format!("kubeconfig {}", path.display()),
        ),
        (None, false) => {
            let names: Vec<_> = args.from.iter().map(|p| p.display().to_string()).collect();
            (load::load_paths(&args.from)?, names.join(", "))
        }
        (None, true) => return Err(AuditError::NoInput),
    };
    let options = Options {
        churn_per_second: args.churn_per_second,
    };
    let mut report = audit(&cluster, &options, source);
    // The inventory's objects are no longer needed: free them before the output is built.
    drop(cluster);
    report.select(&selection);
    if let Some(dir) = &args.fix {
        write_fixes(&mut report, dir)?;
    }
    let style = TableStyle {
        full: args.all || !selection.is_everything(),
        command: args.input_command(),
        fix_dir: args.fix.as_ref().map(|d| d.display().to_string()),
    };
    match args.output {
        OutputFormat::Table => report.write_table(out, &style),
        OutputFormat::Json => report.write_json(out),
    }
    .map_err(AuditError::Output)?;
    Ok(report.exit_code(args.fail_on))
}
