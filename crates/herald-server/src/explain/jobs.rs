//! What one job makes of an object's discovered targets, through the serving code's own pieces:
//! its relabelling, Istio's placement and the shard function.

use herald_core::istio::{IstioJob, Part, Policies};
use herald_core::monitor::{MonitorJob, RuleNote};
use herald_core::{JobRelabel, LabelSet, RelabelStop, Role, hashmod};

use crate::explain::answer::*;

/// What a job does with targets: the serving code's pieces for it.
pub(crate) struct How<'a> {
    pub(crate) relabel: Option<&'a JobRelabel>,
    pub(crate) istio: Option<(&'a IstioJob, &'a Policies)>,
    pub(crate) monitor: Option<&'a MonitorJob>,
}

/// The discovered targets the job holds for the object (each target's full discovered labels,
/// `__address__` included, one list per group: equal targets are served once per group), or why
/// it holds none.
pub(crate) type Found = Result<Vec<Vec<LabelSet>>, Reason>;

/// What one job (and its Istio companion) serves of `found`, through the serving code.
pub(crate) fn job_answers(
    job: &str,
    source: &'static str,
    role: Role,
    companion: Option<String>,
    found: Found,
    how: &How<'_>,
    counts: &[u64],
) -> Vec<JobAnswer> {
    let mut own = JobAnswer {
        job: job.to_string(),
        source,
        role: role.as_str(),
        targets: vec![],
        served: 0,
        reason: None,
        dropped: vec![],
    };
    let mut mtls = companion.clone().map(|name| JobAnswer {
        job: name,
        source: "istio-mtls companion",
        role: role.as_str(),
        targets: vec![],
        served: 0,
        reason: None,
        dropped: vec![],
    });
    let groups = match found {
        Ok(groups) => groups,
        Err(reason) => {
            own.reason = Some(reason.clone());
            if let Some(m) = &mut mtls {
                m.reason = Some(reason);
            }
            return std::iter::once(own).chain(mtls).collect();
        }
    };
    let mut moved_by: Option<String> = None;
    let mut first_drop: Option<Reason> = None;
    let mut port_stops: Vec<String> = Vec::new();
    for group in groups {
        let mut served: Vec<(Part, String, LabelSet)> = Vec::new();
        for discovered in group {
            let mut placed = Vec::new();
            let stop = place(discovered.clone(), how, &mut placed);
            for (part, address, labels) in placed {
                if part == Part::Mtls
                    && moved_by.is_none()
                    && let Some(d) = IstioJob::decision(
                        &address,
                        &discovered,
                        how.istio.map_or(&EMPTY, |(_, p)| p),
                    )
                {
                    moved_by = d.by.or(Some("(default)".into()));
                }
                served.push((part, address, labels));
            }
            if let Some((stop, seen)) = stop {
                let address = discovered
                    .get(herald_core::labels::ADDRESS)
                    .cloned()
                    .unwrap_or_default();
                let reason = classify(stop, &seen, how);
                if let Reason::PortMatchesNothing { .. } = reason
                    && let Some(port) = how
                        .monitor
                        .and_then(|m| m.port_rule.as_ref())
                        .and_then(|p| how.relabel?.rules().get(p.rule))
                        .and_then(|r| r.source_labels().first())
                        .and_then(|l| seen.get(l))
                {
                    port_stops.push(port.clone());
                }
                if first_drop.is_none() {
                    first_drop = Some(reason.clone());
                }
                if own.dropped.len() < MAX_LISTED {
                    own.dropped.push(DroppedTarget { address, reason });
                }
            }
        }
        // Equal targets of one group are served once, in a stable order (`encoded::place_group`).
        // Without relabeling, the body writes every discovered target as it is.
        if how.relabel.is_some() {
            served.sort_unstable();
            served.dedup();
        }
        for (part, address, labels) in served {
            let shards = counts.iter().map(|n| (*n, hashmod(&address, *n))).collect();
            let t = TargetAnswer {
                address,
                labels,
                shards,
            };
            let into = match (part, &mut mtls) {
                (Part::Mtls, Some(m)) => m,
                _ => &mut own,
            };
            into.served += 1;
            if into.targets.len() < MAX_LISTED {
                into.targets.push(t);
            }
        }
    }
    port_stops.sort();
    port_stops.dedup();
    if let Some(Reason::PortMatchesNothing { ports, .. }) = &mut first_drop {
        *ports = port_stops;
    }
    if own.served == 0 {
        own.reason = match (&moved_by, &mtls) {
            (Some(by), Some(m)) if m.served > 0 => Some(Reason::MovedToIstioMtls {
                companion: m.job.clone(),
                by: by.clone(),
            }),
            _ => first_drop.clone(),
        };
    }
    if let Some(m) = &mut mtls
        && m.served == 0
    {
        m.reason = first_drop.or(Some(Reason::NoTargets {
            why: "no target of it is under STRICT mTLS".into(),
        }));
    }
    std::iter::once(own).chain(mtls).collect()
}

static EMPTY: std::sync::LazyLock<Policies> = std::sync::LazyLock::new(Policies::default);

/// One discovered target through the job's relabeling and placement, as serving builds bodies
/// (`encoded.rs`): what it serves pushed to `out`; where it stopped and what the stopping rule
/// saw when it serves nothing.
fn place(
    mut labels: LabelSet,
    how: &How<'_>,
    out: &mut Vec<(Part, String, LabelSet)>,
) -> Option<(RelabelStop, LabelSet)> {
    match (how.relabel, how.istio) {
        (Some(relabel), Some((job, policies))) => {
            job.targets(labels.clone(), relabel, policies, out);
            if !out.is_empty() {
                return None;
            }
            labels.remove(herald_core::istio::APP_ANNOTATIONS_LABEL);
            match relabel.apply_or_stop(&mut labels) {
                Ok(_) => None,
                Err(stop) => Some((stop, labels)),
            }
        }
        (Some(relabel), None) => match relabel.apply_or_stop(&mut labels) {
            Ok(address) => {
                out.push((Part::Plain, address, labels));
                None
            }
            Err(stop) => Some((stop, labels)),
        },
        (None, _) => {
            let address = labels
                .remove(herald_core::labels::ADDRESS)
                .unwrap_or_default();
            out.push((Part::Plain, address, labels));
            None
        }
    }
}

/// The reason a relabeling stop stands for: a monitor's selector requirement, port or running
/// filter where the rule is one of those, else the rule itself.
fn classify(stop: RelabelStop, seen: &LabelSet, how: &How<'_>) -> Reason {
    let RelabelStop::Rule(i) = stop else {
        return Reason::NoAddress;
    };
    let Some(relabel) = how.relabel else {
        return Reason::NoAddress;
    };
    if let Some(m) = how.monitor {
        if let Some(p) = m.port_rule.as_ref().filter(|p| p.rule == i) {
            return Reason::PortMatchesNothing {
                field: p.field.clone(),
                port: p.port.clone(),
                rule: i,
                ports: vec![],
            };
        }
        if let Some((_, note)) = m.rule_notes.iter().find(|(r, _)| *r == i) {
            return match note {
                RuleNote::RunningFilter => Reason::NotRunning {
                    phase: seen
                        .get("__meta_kubernetes_pod_phase")
                        .cloned()
                        .unwrap_or_default(),
                    rule: i,
                },
                RuleNote::Selector {
                    field,
                    object,
                    requirement,
                } => {
                    let prefix = format!("__meta_kubernetes_{object}_label_");
                    Reason::MonitorSelector {
                        field: field.clone(),
                        requirement: requirement.clone(),
                        rule: i,
                        labels: seen
                            .iter()
                            .filter(|(k, _)| k.starts_with(&prefix))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                    }
                }
            };
        }
    }
    let rule = &relabel.rules()[i];
    let mut saw = LabelSet::new();
    for l in rule.source_labels() {
        saw.insert(l.clone(), seen.get(l).cloned().unwrap_or_default());
    }
    if !rule.target_label.is_empty() {
        let t = &rule.target_label;
        saw.insert(t.clone(), seen.get(t).cloned().unwrap_or_default());
    }
    Reason::DroppedByRule {
        rule: i,
        text: rule_text(rule),
        saw,
    }
}
