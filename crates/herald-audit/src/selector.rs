//! Label selector matching, as the apiserver evaluates `metav1.LabelSelector`
//! (kubernetes:staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go LabelSelectorAsSelector):
//! an empty selector matches everything; `matchLabels` and every `matchExpressions` entry must hold.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::custom::NamespaceSelector;
use crate::objects::Labels;

/// Whether `selector` selects an object labelled `labels`. An expression with an unknown operator
/// selects nothing, as the apiserver rejects it.
pub fn matches(selector: &LabelSelector, labels: Option<&Labels>) -> bool {
    let empty = Labels::default();
    let labels = labels.unwrap_or(&empty);
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    labels_ok
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// Whether a Service's `spec.selector` map selects a pod labelled `labels`. A Service without a
/// selector selects no pods (its Endpoints are managed by hand).
pub fn service_selects(
    selector: Option<&BTreeMap<String, String>>,
    labels: Option<&Labels>,
) -> bool {
    match selector {
        None => false,
        Some(s) if s.is_empty() => false,
        Some(s) => labels.is_some_and(|l| s.iter().all(|(k, v)| l.get(k) == Some(v))),
    }
}

/// Whether a ServiceMonitor/PodMonitor in `own` namespace looks into `namespace`: `any: true`, the
/// listed `matchNames`, or its own namespace when neither is set
/// (prometheus-operator:pkg/prometheus/promcfg.go getNamespacesFromNamespaceSelector).
pub fn monitor_namespace_matches(sel: &NamespaceSelector, own: &str, namespace: &str) -> bool {
    if sel.any {
        true
    } else if sel.match_names.is_empty() {
        own == namespace
    } else {
        sel.match_names.iter().any(|n| n == namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn expressions_and_labels_must_all_hold() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "web")]).to_map()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        assert!(matches(&sel, Some(&labels(&[("app", "web")]))));
        assert!(!matches(
            &sel,
            Some(&labels(&[("app", "web"), ("tier", "db")]))
        ));
        assert!(!matches(&sel, None));
        assert!(matches(&LabelSelector::default(), None));
    }

    #[test]
    fn a_service_without_selector_selects_no_pod() {
        assert!(!service_selects(None, Some(&labels(&[("a", "b")]))));
        assert!(!service_selects(
            Some(&BTreeMap::new()),
            Some(&labels(&[("a", "b")]))
        ));
        assert!(service_selects(
            Some(&labels(&[("a", "b")]).to_map()),
            Some(&labels(&[("a", "b"), ("c", "d")]))
        ));
    }
}
