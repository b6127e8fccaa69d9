//! `target_allocator:`: herald serving the OpenTelemetry target allocator's API (`/scrape_configs`,
//! `/jobs`, `/jobs/{job}/targets?collector_id=`) — the strategy, and the collectors, listed here or
//! found as the allocator finds them: the pods matching a label selector in one namespace.
//! Key names are the allocator's own (open-telemetry/opentelemetry-operator
//! `cmd/otel-allocator/internal/config/config.go` at be8944414a876f17fcdeb5a59b86b8866fb5c88e).

use serde::Deserialize;

use crate::allocation::{Collector, Strategy};

/// The job herald finds the collector pods with (`collector_selector`): a `role: pod` job over the
/// pod watch herald already holds, served like any other job, so `/sd/v1/target-allocator/collectors`
/// shows which pods herald takes as collectors.
pub const COLLECTORS_JOB: &str = "target-allocator/collectors";

/// The validated `target_allocator:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetAllocatorConfig {
    pub strategy: Strategy,
    /// Places the targets `per-node` finds no node for.
    pub fallback: Option<Strategy>,
    pub collectors: Collectors,
}

/// Where the collectors come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Collectors {
    /// A fixed list (`collectors:`).
    Static(Vec<Collector>),
    /// The pods of `namespace` matching `selector` (`collector_namespace:`, `collector_selector:`),
    /// each a collector named by its pod name on its node.
    Pods { namespace: String, selector: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    allocation_strategy: Option<String>,
    #[serde(default)]
    allocation_fallback_strategy: Option<String>,
    #[serde(default)]
    collectors: Option<Vec<RawCollector>>,
    #[serde(default)]
    collector_namespace: Option<String>,
    #[serde(default)]
    collector_selector: Option<String>,
}

/// `- name` or `- {name: NAME, node: NODE}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawCollector {
    Name(String),
    Full {
        name: String,
        #[serde(default)]
        node: Option<String>,
    },
}

impl TargetAllocatorConfig {
    /// The job selecting the collector pods, when they are selected rather than listed.
    pub fn collectors_job(&self) -> Option<crate::Job> {
        let Collectors::Pods {
            namespace,
            selector,
        } = &self.collectors
        else {
            return None;
        };
        let value = serde_yaml::to_value(serde_json::json!({
            "name": COLLECTORS_JOB,
            "role": "pod",
            "namespaces": {"names": [namespace]},
            "selectors": [{"role": "pod", "label": selector}],
        }))
        .expect("a JSON value is a YAML value");
        let job = super::parse_job(COLLECTORS_JOB.to_string(), value)
            .expect("parse validated the namespace and the selector");
        Some(job)
    }
}

/// Parses the section; errors name the key at fault.
pub fn parse(value: serde_yaml::Value) -> Result<TargetAllocatorConfig, String> {
    let raw: Raw = serde_yaml::from_value(value).map_err(|e| e.to_string())?;
    let strategy = |key: &str, v: &str| {
        Strategy::parse(v).ok_or_else(|| {
            format!("{key} {v:?} is not a strategy herald serves (consistent-hashing, rendezvous-hashing, per-node)")
        })
    };
    let main = match &raw.allocation_strategy {
        Some(v) => strategy("allocation_strategy", v)?,
        None => Strategy::default(),
    };
    let fallback = match &raw.allocation_fallback_strategy {
        Some(v) if v.is_empty() => None,
        Some(v) => Some(strategy("allocation_fallback_strategy", v)?),
        None => None,
    };
    let collectors = match (
        raw.collectors,
        raw.collector_selector,
        raw.collector_namespace,
    ) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(
                "collectors and collector_selector/collector_namespace exclude each other: \
                        list the collectors or select their pods"
                    .into(),
            );
        }
        (Some(list), None, None) => {
            let mut out = Vec::new();
            for c in list {
                let (name, node) = match c {
                    RawCollector::Name(n) => (n, None),
                    RawCollector::Full { name, node } => (name, node),
                };
                check_collector_id(&name).map_err(|e| format!("collectors: {e}"))?;
                if out.iter().any(|o: &Collector| o.name == name) {
                    return Err(format!("collectors: {name:?} is listed twice"));
                }
                out.push(Collector { name, node });
            }
            if main == Strategy::PerNode && out.iter().any(|c| c.node.is_none()) {
                return Err(
                    "collectors: per-node needs each collector's node ({name, node})".into(),
                );
            }
            Collectors::Static(out)
        }
        (None, Some(selector), Some(namespace)) => {
            kube_selectors::LabelSelector::parse(&selector)
                .map_err(|e| format!("collector_selector {selector:?}: {e}"))?;
            if selector.trim().is_empty() {
                return Err(
                    "collector_selector is empty: it would take every pod of the namespace \
                            as a collector"
                        .into(),
                );
            }
            if namespace.is_empty() {
                return Err("collector_namespace is empty".into());
            }
            Collectors::Pods {
                namespace,
                selector,
            }
        }
        (None, Some(_), None) => {
            return Err(
                "collector_selector needs collector_namespace (the collectors' namespace)".into(),
            );
        }
        (None, None, _) => {
            return Err(
                "name the collectors: collectors (a list) or collector_namespace and \
                        collector_selector (their pods)"
                    .into(),
            );
        }
    };
    Ok(TargetAllocatorConfig {
        strategy: main,
        fallback,
        collectors,
    })
}

/// A collector id as the collector sends it in `?collector_id=`: non-empty, at most 253 bytes, no
/// control characters (the collector refuses an empty id or one with an unexpanded `${`).
pub fn check_collector_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("a collector id is empty".into());
    }
    if id.len() > 253 {
        return Err(format!(
            "collector id {:?}… is longer than 253 bytes",
            &id[..40]
        ));
    }
    if id.chars().any(char::is_control) || id.contains("${") {
        return Err(format!(
            "collector id {id:?} has control characters or an unexpanded ${{"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk(yaml: &str) -> Result<TargetAllocatorConfig, String> {
        parse(serde_yaml::from_str(yaml).expect("yaml"))
    }

    #[test]
    fn static_collectors_and_pod_selection_parse_and_exclude_each_other() {
        let c = mk("collectors: [a, {name: b, node: n2}]").expect("valid");
        assert_eq!(c.strategy, Strategy::ConsistentHashing);
        assert_eq!(
            c.collectors,
            Collectors::Static(vec![
                Collector {
                    name: "a".into(),
                    node: None
                },
                Collector {
                    name: "b".into(),
                    node: Some("n2".into())
                },
            ])
        );
        let p = mk(
            "allocation_strategy: per-node\ncollector_namespace: obs\ncollector_selector: app=otel",
        )
        .expect("valid");
        assert_eq!(p.strategy, Strategy::PerNode);
        assert!(matches!(p.collectors, Collectors::Pods { .. }));
        let job = p.collectors_job().expect("a pod job");
        assert_eq!(job.name, COLLECTORS_JOB);
        assert_eq!(job.namespaces.names, vec!["obs".to_string()]);
        let both = mk("collectors: [a]\ncollector_namespace: obs\ncollector_selector: app=otel");
        assert!(both.unwrap_err().contains("exclude each other"));
    }

    #[test]
    fn bad_sections_are_refused_naming_the_key() {
        for (yaml, needle) in [
            (
                "allocation_strategy: least-weighted\ncollectors: [a]",
                "allocation_strategy",
            ),
            ("collectors: [a, a]", "listed twice"),
            ("collectors: ['']", "empty"),
            ("allocation_strategy: per-node\ncollectors: [a]", "node"),
            ("collector_selector: app=otel", "collector_namespace"),
            (
                "collector_namespace: obs\ncollector_selector: 'a in ('",
                "collector_selector",
            ),
            ("{}", "name the collectors"),
            ("collectors: [a]\nfoo: 1", "foo"),
        ] {
            let e = mk(yaml).expect_err(yaml);
            assert!(e.contains(needle), "{yaml}: {e}");
        }
    }
}
