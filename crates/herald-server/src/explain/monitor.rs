//! `explain` for a ServiceMonitor or PodMonitor: the objects its selectors pick, each endpoint's
//! job with its target count, the objects one selector requirement away, and what herald already
//! reported about it. Each job's rules run over its base job's groups in its namespaces, as its
//! bodies are built; the selection is the prefix of those rules that applies the selector.

use std::collections::BTreeSet;

use herald_core::monitor::{self, RuleNote};
use herald_core::{JobRelabel, LabelSet};

use crate::explain::answer::{
    EndpointAnswer, ExplainError, Explanation, JobAnswer, MAX_LISTED, MonitorAnswer, NearMiss,
    Query, Subject,
};
use crate::explain::jobs::{How, job_answers};
use crate::shared::Shared;

pub(crate) fn explain_monitor(
    shared: &Shared,
    q: &Query,
    answer: &mut Explanation,
) -> Result<(), ExplainError> {
    let (kind, plural, prefix) = match q.subject {
        Subject::ServiceMonitor => ("ServiceMonitor", "servicemonitors", "serviceMonitor"),
        _ => ("PodMonitor", "podmonitors", "podMonitor"),
    };
    let Some(r) = crate::monitors::feed::resource(&shared.cache, plural) else {
        return Err(ExplainError::NotFound(format!(
            "herald holds no {kind}s: no monitors: section selects them"
        )));
    };
    if shared
        .cache
        .read(r)
        .get_parts(&q.namespace, &q.name)
        .is_none()
    {
        return Err(ExplainError::NotFound(format!(
            "{kind} {}/{} not found",
            q.namespace, q.name
        )));
    }
    let views = shared.monitors.views();
    let who = format!("{}/{}", q.namespace, q.name);
    let job_prefix = format!("{prefix}/{who}/");
    let mentions = |m: &String| m.contains(&who) || m.contains(&job_prefix);
    let mut out = MonitorAnswer {
        selected: vec![],
        endpoints: vec![],
        nearly: vec![],
        unsupported: vec![],
        warnings: views
            .warnings
            .iter()
            .filter(|m| mentions(m))
            .cloned()
            .collect(),
        problems: views
            .problems
            .iter()
            .filter(|m| mentions(m))
            .cloned()
            .collect(),
    };
    let mut selected = BTreeSet::new();
    let mut nearly: std::collections::BTreeMap<String, NearMiss> = Default::default();
    let policies = shared.istio.current();
    for (name, view) in views.by_name.range(job_prefix.clone()..) {
        if !name.starts_with(&job_prefix) {
            break;
        }
        out.unsupported.extend(view.job.unsupported.iter().cloned());
        out.warnings.extend(shared.view_warnings(view));
        let cut = shared.cut_namespaces(view.base, &view.job.namespaces);
        // The selector's rules: every rule up to the last one a selector requirement wrote.
        let end = view
            .job
            .rule_notes
            .iter()
            .filter(|(_, n)| matches!(n, RuleNote::Selector { .. }))
            .map(|(i, _)| i + 1)
            .max()
            .unwrap_or(0);
        let select = JobRelabel::new(view.job.relabel_configs[..end].to_vec(), true)
            .expect("a prefix of the job's validated rules")
            .with_defaults(monitor::scrape_defaults(&view.job));
        let how = How {
            relabel: Some(&view.relabel),
            istio: view.istio.as_ref().map(|j| (j, &policies.policies)),
            monitor: Some(&view.job),
        };
        let mut targets = 0;
        let mut mtls = 0;
        let mut labels = LabelSet::new();
        for group in cut.groups.iter() {
            let mut group_targets = Vec::new();
            let mut picked = false;
            let mut near: Option<NearMiss> = None;
            for t in group.iter() {
                group.discovered(t, &mut labels);
                let object = object_of(&labels);
                let mut seen = labels.clone();
                seen.remove(herald_core::istio::APP_ANNOTATIONS_LABEL);
                match select.apply_or_stop(&mut seen) {
                    Ok(_) => picked = true,
                    Err(herald_core::RelabelStop::Rule(_)) if near.is_none() && !picked => {
                        near = one_away(&view.job, &select, &labels, &object);
                    }
                    Err(_) => {}
                }
                if picked {
                    selected.insert(object);
                }
                group_targets.push(labels.clone());
            }
            if !picked && let Some(n) = near {
                nearly.entry(n.object.clone()).or_insert(n);
            }
            let answers = job_answers(
                name,
                "monitor",
                view.job.role,
                view.companion(),
                Ok(vec![group_targets]),
                &how,
                &[],
            );
            targets += answers.first().map_or(0, |a: &JobAnswer| a.served);
            mtls += answers.get(1).map_or(0, |a| a.served);
        }
        out.endpoints.push(EndpointAnswer {
            job: name.clone(),
            port: view.job.port_rule.as_ref().map(|p| p.port.clone()),
            targets,
            mtls_targets: view.istio.as_ref().map(|_| mtls),
        });
    }
    out.unsupported.sort();
    out.unsupported.dedup();
    out.warnings.sort();
    out.warnings.dedup();
    out.selected = selected.into_iter().take(MAX_LISTED).collect();
    out.nearly = nearly.into_values().take(MAX_LISTED).collect();
    answer.monitor = Some(out);
    Ok(())
}

/// `namespace/name` of the object a discovered target comes from (the Service for the endpoints
/// roles, the pod for the pod role).
fn object_of(labels: &LabelSet) -> String {
    let ns = labels
        .get("__meta_kubernetes_namespace")
        .map_or("", String::as_str);
    let name = labels
        .get("__meta_kubernetes_service_name")
        .or_else(|| labels.get("__meta_kubernetes_pod_name"))
        .map_or("", String::as_str);
    format!("{ns}/{name}")
}

/// The one selector requirement `discovered` fails, when it fails exactly one: each selector rule
/// applied alone, by the relabel engine, to the labels the selection sees.
fn one_away(
    job: &herald_core::monitor::MonitorJob,
    select: &JobRelabel,
    discovered: &LabelSet,
    object: &str,
) -> Option<NearMiss> {
    // As the selection sees them: empty values removed, the scrape defaults set.
    let mut seen = discovered.clone();
    let empty = JobRelabel::new(vec![], true)
        .expect("no rules are valid")
        .with_defaults(monitor::scrape_defaults(job));
    empty.apply_or_stop(&mut seen).ok()?;
    seen.insert(
        herald_core::labels::ADDRESS.to_string(),
        discovered
            .get(herald_core::labels::ADDRESS)
            .cloned()
            .unwrap_or_default(),
    );
    let mut failed = job.rule_notes.iter().filter_map(|(i, note)| {
        let RuleNote::Selector {
            requirement,
            object: on,
            ..
        } = note
        else {
            return None;
        };
        let rule = select.rules().get(*i)?;
        let mut l = seen.clone();
        (!rule.apply(&mut l)).then(|| (requirement.clone(), on.clone()))
    });
    let (requirement, on) = failed.next()?;
    if failed.next().is_some() {
        return None;
    }
    let prefix = format!("__meta_kubernetes_{on}_label_");
    Some(NearMiss {
        object: object.to_string(),
        requirement,
        labels: seen
            .into_iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .collect(),
    })
}
