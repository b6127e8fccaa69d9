//! `explain` for one object: every job that reads its kind, and what it contributes there.

use std::collections::BTreeMap;
use std::sync::Arc;

use herald_core::monitor::MonitorJob;
use herald_core::{LabelSet, Role};
use herald_index::filter::Refusal;
use herald_index::groups::Group;
use herald_index::lookup::Decoded;
use herald_index::{Object, ObjectKey, WatchKind};

use crate::explain::answer::*;
use crate::explain::jobs::{Found, How, job_answers};
use crate::shared::Shared;

/// The object's parts every job's answer reads, decoded once.
struct Subjected {
    kind: WatchKind,
    key: ObjectKey,
    labels: BTreeMap<String, String>,
    /// A pod's controller (owner) name, to find the truncated Endpoints that would list it.
    controller: Option<String>,
    fields: BTreeMap<String, Option<String>>,
}

pub(crate) fn explain_object(
    shared: &Shared,
    q: &Query,
    kind: WatchKind,
    answer: &mut Explanation,
) -> Result<(), ExplainError> {
    if shared.cache.id_of(kind).is_none() {
        return Err(ExplainError::NotFound(format!(
            "herald holds no {}: no job reads them",
            kind.plural()
        )));
    }
    let key = ObjectKey::new(&q.namespace, &q.name);
    // The object, decoded under the lock; the groups each job holds for it, cloned out.
    let subject = shared.read_index(|index| {
        let cluster = index.cluster();
        cluster.get(kind, &key)?;
        let decoded = Decoded::new(cluster);
        let obj = decoded.object(kind, &key)?;
        let mut fields = BTreeMap::new();
        for spec in index.specs() {
            if let Some(sel) = spec.filter.field_selector(kind) {
                for f in sel.fields() {
                    fields.insert(f.to_string(), obj.field(f));
                }
            }
        }
        let controller = match obj {
            Object::Pod(p) => p
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .map(|o| o.name.clone()),
            _ => None,
        };
        if let Object::Endpoints(e) = obj
            && e.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(TRUNCATED_ANNOTATION))
                .is_some_and(|v| v == "truncated")
        {
            answer.notes.push(format!(
                "this Endpoints object is truncated at 1000 addresses ({TRUNCATED_ANNOTATION}: \
                 truncated): the endpoints roles never see the rest; {TRUNCATED_FIX}"
            ));
        }
        Some(Subjected {
            kind,
            labels: obj.labels().clone(),
            key: key.clone(),
            controller,
            fields,
        })
    });
    let subject =
        subject.ok_or_else(|| ExplainError::NotFound(format!("{} not found", q.object_name())))?;
    let views = shared.monitors.views();
    let policies = shared.istio.current();
    let mut by_base: std::collections::HashMap<usize, Found> = Default::default();
    for (j, h) in shared.jobs().iter().enumerate() {
        if h.source != j || !h.kinds.contains(&kind) {
            continue;
        }
        let how = How {
            relabel: h.relabel.as_deref(),
            istio: h.istio.as_ref().map(|(job, _)| (job, &policies.policies)),
            monitor: None,
        };
        let source = if h.name.starts_with(crate::monitors::BASE_PREFIX) {
            "monitor base"
        } else {
            "job"
        };
        let companion = h.companions.first().map(|c| shared.jobs()[*c].name.clone());
        let found = object_targets(shared, j, h.role, &subject);
        by_base.insert(j, found.clone());
        answer.jobs.extend(job_answers(
            &h.name,
            source,
            h.role,
            companion,
            found,
            &how,
            &answer.shard_counts,
        ));
    }
    for (name, view) in &views.by_name {
        let base = &shared.jobs()[view.base];
        if !base.kinds.contains(&kind) {
            continue;
        }
        let how = How {
            relabel: Some(&view.relabel),
            istio: view.istio.as_ref().map(|job| (job, &policies.policies)),
            monitor: Some(&view.job),
        };
        let found = match outside_monitor(&view.job, &subject) {
            Some(reason) => Err(reason),
            None => by_base
                .entry(view.base)
                .or_insert_with(|| object_targets(shared, view.base, base.role, &subject))
                .clone(),
        };
        answer.jobs.extend(job_answers(
            name,
            "monitor",
            view.job.role,
            view.companion(),
            found,
            &how,
            &answer.shard_counts,
        ));
    }
    Ok(())
}

/// The annotation the Endpoints controller sets on an object it truncated.
const TRUNCATED_ANNOTATION: &str = "endpoints.kubernetes.io/over-capacity";
const TRUNCATED_FIX: &str = "use role endpointslice (a ServiceMonitor's serviceDiscoveryRole: \
                             EndpointSlice), whose slices list every endpoint";

/// Whether a monitor job's namespaces (its `namespaceSelector`) leave the object out.
fn outside_monitor(m: &MonitorJob, s: &Subjected) -> Option<Reason> {
    (!m.namespaces.is_empty()
        && s.kind.namespaced()
        && !m.namespaces.iter().any(|n| **n == *s.key.namespace))
    .then(|| Reason::OutsideNamespaces {
        namespace: s.key.namespace.to_string(),
        namespaces: m.namespaces.clone(),
        by: "the monitor's namespaceSelector".into(),
    })
}

/// What index job `j` holds for the object (see `Found`). Monitor jobs read their base job's,
/// so it is computed once per base job for all of them.
fn object_targets(shared: &Shared, j: usize, role: Role, s: &Subjected) -> Found {
    let spec_filter = shared.read_index(|index| index.specs()[j].filter.clone());
    let admission = spec_filter.admission(s.kind, &s.key.namespace, &s.labels, |f| {
        s.fields.get(f).cloned().flatten()
    });
    if let Err(refusal) = admission {
        return Err(match refusal {
            Refusal::Namespace(names) => Reason::OutsideNamespaces {
                namespace: s.key.namespace.to_string(),
                namespaces: names.iter().cloned().collect(),
                by: "the job's namespaces".into(),
            },
            Refusal::Label(sel, req) => Reason::FilteredBySelector {
                selector: sel.to_string(),
                failed: kube_selectors::LabelSelector {
                    requirements: vec![req.clone()],
                }
                .to_string(),
            },
            Refusal::Field(f) => Reason::FilteredBySelector {
                selector: format!("field {f:?}"),
                failed: "the field selector".into(),
            },
        });
    }
    let primary = WatchKind::primary(role);
    let groups: Vec<(ObjectKey, Arc<Group>)> = shared.read_index(|index| {
        if primary == s.kind {
            index
                .group(j, &s.key)
                .map(|g| (s.key.clone(), g))
                .into_iter()
                .collect()
        } else {
            index.groups_reading(j, s.kind, &s.key)
        }
    });
    let mut out = Vec::new();
    let mut labels = LabelSet::new();
    for (_, group) in &groups {
        let mut mine = Vec::new();
        for target in group.iter() {
            group.discovered(target, &mut labels);
            // A pod is one of the targets of the Endpoints (EndpointSlice) groups listing it.
            if s.kind == WatchKind::Pod && primary != WatchKind::Pod {
                let pod = labels.get("__meta_kubernetes_pod_name").map(String::as_str);
                let ns = labels
                    .get("__meta_kubernetes_namespace")
                    .map(String::as_str);
                if pod != Some(&*s.key.name) || ns != Some(&*s.key.namespace) {
                    continue;
                }
            }
            mine.push(labels.clone());
        }
        if !mine.is_empty() {
            out.push(mine);
        }
    }
    if !out.is_empty() {
        return Ok(out);
    }
    if primary == s.kind {
        return Err(Reason::NoTargets {
            why: format!(
                "the {} role gives this object no target (no address or port to scrape yet)",
                role.as_str()
            ),
        });
    }
    if s.kind == WatchKind::Pod
        && primary == WatchKind::Endpoints
        && let Some(endpoints) = truncated_endpoints_of(shared, j, s)
    {
        return Err(Reason::EndpointsTruncated {
            endpoints,
            fix: TRUNCATED_FIX.into(),
        });
    }
    Err(Reason::NoTargets {
        why: format!(
            "no {} object of this job lists it",
            match primary {
                WatchKind::Endpoints => "Endpoints",
                WatchKind::EndpointSlice => "EndpointSlice",
                _ => "other",
            }
        ),
    })
}

/// A truncated Endpoints object in the pod's namespace listing pods of the same controller: the
/// one that would list the pod if it were not truncated.
fn truncated_endpoints_of(shared: &Shared, j: usize, s: &Subjected) -> Option<String> {
    let controller = s.controller.as_deref()?;
    shared.read_index(|index| {
        let cluster = index.cluster();
        let decoded = Decoded::new(cluster);
        let keys: Vec<ObjectKey> = cluster
            .keys(WatchKind::Endpoints)
            .filter(|k| k.namespace == s.key.namespace)
            .cloned()
            .collect();
        keys.into_iter().find_map(|k| {
            let Some(Object::Endpoints(e)) = decoded.object(WatchKind::Endpoints, &k) else {
                return None;
            };
            let truncated = e
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(TRUNCATED_ANNOTATION))
                .is_some_and(|v| v == "truncated");
            if !truncated {
                return None;
            }
            let group = index.group(j, &k)?;
            let mut labels = LabelSet::new();
            let same = group.iter().any(|t| {
                group.discovered(t, &mut labels);
                labels
                    .get("__meta_kubernetes_pod_controller_name")
                    .map(String::as_str)
                    == Some(controller)
            });
            same.then(|| format!("{}/{}", k.namespace, k.name))
        })
    })
}
