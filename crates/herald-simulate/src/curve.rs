//! Sync cost at several sizes of the cluster (its Services scaled by factors such as 0.25× to 4×)
//! and for the what-ifs: rules and bytes generated, and sync times — measured in a network
//! namespace when asked and possible, else modelled, each figure saying which.

use serde::Serialize;

use crate::error::SimulateError;
use crate::input::ProxyInput;
use crate::measure::{self, Backend};
use crate::model;
use crate::sync::{RulesetSizes, Rulesets, one_endpoint_change};

/// Where a time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Measured,
    Modelled,
}

/// One backend's sync times at one size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timing {
    pub backend: Backend,
    pub full_s: f64,
    /// The sync after one endpoint change (iptables: partial restore).
    pub change_s: f64,
    pub source: Source,
}

/// One point of the curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// What this point is: `1×`, `0.25×`, `after HA004 fixes`.
    pub label: String,
    /// Seconds taken to generate the rulesets (full and after one change, both modes).
    pub generate_s: f64,
    pub sizes: RulesetSizes,
    pub timings: Vec<Timing>,
}

/// How to time.
#[derive(Debug, Clone, PartialEq)]
pub struct Timer {
    pub measure: bool,
    pub runs: usize,
    /// A backend whose full sync took (or is modelled to take) longer than this is modelled.
    pub slow_after_s: f64,
    /// Measuring stops (the rest is modelled) where the model says it would run past this many
    /// seconds after `started`, over every call of `points`.
    pub budget_s: f64,
    pub started: std::time::Instant,
}

/// IPVS objects: (virtual servers + real servers of every port, of the changed Service).
fn ipvs_objects(input: &ProxyInput) -> (usize, usize) {
    let all = input
        .ports
        .iter()
        .map(|p| {
            1 + p.external_ips.len() + p.load_balancer_ips.len() + usize::from(p.node_port != 0)
        })
        .sum::<usize>()
        + input.endpoints();
    let changed = one_endpoint_change(input).map_or(0, |_| 2);
    (all, changed)
}

/// Builds the points for `inputs` (label, input), measuring where `timer` says and the backend is
/// not already past `slow_after_s` at a smaller size. `progress` hears one line per measurement.
pub fn points(
    inputs: Vec<(String, ProxyInput)>,
    timer: &Timer,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Point>, SimulateError> {
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    // Smallest first, so a slow backend stops before the biggest sizes.
    order.sort_by_key(|&i| inputs[i].1.endpoints() + inputs[i].1.ports.len());
    let mut too_slow: Vec<Backend> = Vec::new();
    let started = timer.started;
    let mut out: Vec<Option<Point>> = vec![None; inputs.len()];
    for i in order {
        let (label, input) = &inputs[i];
        let t = std::time::Instant::now();
        let sets = Rulesets::of(input);
        let generate_s = t.elapsed().as_secs_f64();
        let sizes = sets.sizes();
        let mut timings = Vec::new();
        for backend in Backend::MEASURABLE {
            // A measurement costs a first load, `runs` full syncs, `runs` changes and `runs` reloads.
            let expected = modelled(backend, &sizes, input).map_or(0.0, |m| {
                m.full_s * (1 + 2 * timer.runs) as f64 + m.change_s * timer.runs as f64
            });
            let affordable = expected / (1 + 2 * timer.runs) as f64 <= timer.slow_after_s
                && started.elapsed().as_secs_f64() + expected <= timer.budget_s;
            let measured = if timer.measure
                && backend.available()
                && affordable
                && !too_slow.contains(&backend)
            {
                progress(&format!(
                    "measuring {} at {label} ({} Services, {} rules)",
                    backend.label(),
                    sizes.services,
                    rule_count(&sizes, backend)
                ));
                let m = measure::measure(&sets, backend, timer.runs)?;
                if m.full_s > timer.slow_after_s {
                    too_slow.push(backend);
                }
                Some(Timing {
                    backend,
                    full_s: m.full_s,
                    change_s: m.change_s.unwrap_or(0.0),
                    source: Source::Measured,
                })
            } else {
                None
            };
            if let Some(t) = measured.or_else(|| modelled(backend, &sizes, input)) {
                timings.push(t);
            }
        }
        if let Some(t) = modelled(Backend::Ipvs, &sizes, input) {
            timings.push(t);
        }
        out[i] = Some(Point {
            label: label.clone(),
            generate_s,
            sizes,
            timings,
        });
    }
    Ok(out.into_iter().flatten().collect())
}

/// The rule count a backend's time is modelled on.
pub fn rule_count(sizes: &RulesetSizes, backend: Backend) -> usize {
    match backend {
        Backend::Nftables => sizes.nftables.rules + sizes.nftables.elements,
        _ => sizes.iptables_rules(),
    }
}

fn modelled(backend: Backend, sizes: &RulesetSizes, input: &ProxyInput) -> Option<Timing> {
    let (full_s, change_s) =
        model::modelled(backend, rule_count(sizes, backend), ipvs_objects(input))?;
    Some(Timing {
        backend,
        full_s,
        change_s,
        source: Source::Modelled,
    })
}
