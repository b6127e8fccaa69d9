//! `annotations: prometheus.io` (and `prometheus.io/slow`): the `prometheus.io/*` annotation
//! conventions as the prometheus-community chart's default scrape jobs implement them, as relabel rules
//! herald applies before a job's own `relabel_configs`.
//!
//! The rules are those of the `kubernetes-pods`, `kubernetes-pods-slow`, `kubernetes-service-endpoints`
//! and `kubernetes-service-endpoints-slow` jobs in prometheus-community/helm-charts
//! `charts/prometheus/values.yaml` at commit cf408a290aec489277a94450bb3511432477a53a (2026-08-22):
//! `prometheus.io/scrape: "true"` keeps (the slow jobs keep `scrape_slow` instead, the others drop it),
//! `scheme` sets `__scheme__` (http or https), `path` `__metrics_path__`, `port` the address's port,
//! `param_<name>` the URL parameter `<name>`; pod labels (Service labels for the endpoints roles) are
//! copied, and `namespace`, `pod` or `service`, and `node` are set; pods not running are dropped. On
//! a pod, the annotations are the pod's; on the endpoints roles, the Service's.
//!
//! What the chart's jobs set outside relabeling is the consumer's to keep: `honor_labels: true`, and
//! for the slow jobs `scrape_interval: 5m` and `scrape_timeout: 30s`.

use super::JobError;
use crate::relabel::RelabelConfig;
use crate::target::Role;

/// The two presets, as written in a job's `annotations`.
pub const PRESETS: [&str; 2] = ["prometheus.io", "prometheus.io/slow"];

/// The chart's rules that select by annotation: the normal job keeps `scrape` and drops `scrape_slow`,
/// the slow one keeps `scrape_slow`. `{kind}` is `pod` or `service`.
fn select(slow: bool) -> &'static str {
    if slow {
        "- {source_labels: [__meta_kubernetes_{kind}_annotation_prometheus_io_scrape_slow], action: keep, regex: 'true'}\n"
    } else {
        "- {source_labels: [__meta_kubernetes_{kind}_annotation_prometheus_io_scrape], action: keep, regex: 'true'}\n\
         - {source_labels: [__meta_kubernetes_{kind}_annotation_prometheus_io_scrape_slow], action: drop, regex: 'true'}\n"
    }
}

/// `scheme` and `path`, common to both kinds.
const SCHEME_PATH: &str = "\
- {source_labels: [__meta_kubernetes_{kind}_annotation_prometheus_io_scheme], action: replace, target_label: __scheme__, regex: '(https?)'}
- {source_labels: [__meta_kubernetes_{kind}_annotation_prometheus_io_path], action: replace, target_label: __metrics_path__, regex: '(.+)'}
";

/// `kubernetes-pods`: the port annotation with the pod IP (IPv6, then IPv4), params, pod labels,
/// namespace, pod, the phase filter and node.
const POD_REST: &str = r#"- source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
  action: replace
  regex: '(\d+);(([A-Fa-f0-9]{1,4}::?){1,7}[A-Fa-f0-9]{1,4})'
  replacement: '[$2]:$1'
  target_label: __address__
- source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
  action: replace
  regex: '(\d+);((([0-9]+?)(\.|$)){4})'
  replacement: '$2:$1'
  target_label: __address__
- {action: labelmap, regex: '__meta_kubernetes_pod_annotation_prometheus_io_param_(.+)', replacement: '__param_$1'}
- {action: labelmap, regex: '__meta_kubernetes_pod_label_(.+)'}
- {source_labels: [__meta_kubernetes_namespace], action: replace, target_label: namespace}
- {source_labels: [__meta_kubernetes_pod_name], action: replace, target_label: pod}
- {source_labels: [__meta_kubernetes_pod_phase], regex: 'Pending|Succeeded|Failed|Completed', action: drop}
- {source_labels: [__meta_kubernetes_pod_node_name], action: replace, target_label: node}
"#;

/// `kubernetes-service-endpoints`: the port annotation replaces the address's port, params, Service
/// labels, namespace, service and node.
const SERVICE_REST: &str = r#"- source_labels: [__address__, __meta_kubernetes_service_annotation_prometheus_io_port]
  action: replace
  target_label: __address__
  regex: '(.+?)(?::\d+)?;(\d+)'
  replacement: '$1:$2'
- {action: labelmap, regex: '__meta_kubernetes_service_annotation_prometheus_io_param_(.+)', replacement: '__param_$1'}
- {action: labelmap, regex: '__meta_kubernetes_service_label_(.+)'}
- {source_labels: [__meta_kubernetes_namespace], action: replace, target_label: namespace}
- {source_labels: [__meta_kubernetes_service_name], action: replace, target_label: service}
- {source_labels: [__meta_kubernetes_pod_node_name], action: replace, target_label: node}
"#;

/// The rules of preset `name` for a job of `role`, in the chart's order.
pub fn rules(name: &str, role: Role) -> Result<Vec<RelabelConfig>, JobError> {
    let slow = match name {
        "prometheus.io" => false,
        "prometheus.io/slow" => true,
        other => {
            return Err(JobError::Field(format!(
                "annotations: unknown preset {other:?} (known: {})",
                PRESETS.join(", ")
            )));
        }
    };
    let (kind, rest) = match role {
        Role::Pod => ("pod", POD_REST),
        Role::Endpoints | Role::EndpointSlice => ("service", SERVICE_REST),
        other => {
            return Err(JobError::Field(format!(
                "annotations: {name:?} applies to roles pod, endpoints and endpointslice, not {}",
                other.as_str()
            )));
        }
    };
    let yaml = format!("{}{SCHEME_PATH}{rest}", select(slow)).replace("{kind}", kind);
    let rules: Vec<RelabelConfig> =
        serde_yaml::from_str(&yaml).expect("the preset rules are valid YAML relabel rules");
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::LabelSet;

    fn ls(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_preset_is_valid_for_the_roles_it_serves_and_refused_elsewhere() {
        for name in PRESETS {
            for role in [Role::Pod, Role::Endpoints, Role::EndpointSlice] {
                let rules = rules(name, role).expect("preset");
                crate::relabel::validate_all(&rules).expect("valid rules");
            }
            let err = rules(name, Role::Node).expect_err("node");
            assert!(err.to_string().contains("not node"), "{err}");
        }
        let err = rules("prometheus", Role::Pod).expect_err("unknown");
        assert!(
            err.to_string().contains("unknown preset \"prometheus\""),
            "{err}"
        );
    }

    #[test]
    fn an_annotated_running_pod_is_scraped_where_its_annotations_say() {
        let rules = rules("prometheus.io", Role::Pod).expect("preset");
        let mut l = ls(&[
            ("__address__", "127.0.0.9:8080"),
            ("__meta_kubernetes_pod_ip", "127.0.0.9"),
            (
                "__meta_kubernetes_pod_annotation_prometheus_io_scrape",
                "true",
            ),
            (
                "__meta_kubernetes_pod_annotation_prometheus_io_port",
                "9102",
            ),
            (
                "__meta_kubernetes_pod_annotation_prometheus_io_scheme",
                "https",
            ),
            ("__meta_kubernetes_pod_annotation_prometheus_io_path", "/m"),
            (
                "__meta_kubernetes_pod_annotation_prometheus_io_param_format",
                "text",
            ),
            ("__meta_kubernetes_pod_label_app", "web"),
            ("__meta_kubernetes_namespace", "shop"),
            ("__meta_kubernetes_pod_name", "web-1"),
            ("__meta_kubernetes_pod_phase", "Running"),
            ("__meta_kubernetes_pod_node_name", "node-3"),
        ]);
        assert!(crate::relabel::process(&mut l, &rules));
        for (k, v) in [
            ("__address__", "127.0.0.9:9102"),
            ("__scheme__", "https"),
            ("__metrics_path__", "/m"),
            ("__param_format", "text"),
            ("app", "web"),
            ("namespace", "shop"),
            ("pod", "web-1"),
            ("node", "node-3"),
        ] {
            assert_eq!(l.get(k).map(String::as_str), Some(v), "{k}");
        }
        // Not annotated, slow, or not running: dropped by the normal preset.
        for (k, v) in [
            (
                "__meta_kubernetes_pod_annotation_prometheus_io_scrape",
                "false",
            ),
            (
                "__meta_kubernetes_pod_annotation_prometheus_io_scrape_slow",
                "true",
            ),
            ("__meta_kubernetes_pod_phase", "Pending"),
        ] {
            let mut dropped = l.clone();
            dropped.insert(k.into(), v.into());
            dropped.insert(
                "__meta_kubernetes_pod_annotation_prometheus_io_scrape".into(),
                if v == "false" { "false" } else { "true" }.into(),
            );
            assert!(!crate::relabel::process(&mut dropped, &rules), "{k}={v}");
        }
        // The slow preset keeps what the normal one drops for scrape_slow.
        let slow = super::rules("prometheus.io/slow", Role::Pod).expect("preset");
        let mut s = ls(&[
            ("__address__", "127.0.0.9:8080"),
            (
                "__meta_kubernetes_pod_annotation_prometheus_io_scrape_slow",
                "true",
            ),
            ("__meta_kubernetes_pod_phase", "Running"),
        ]);
        assert!(crate::relabel::process(&mut s, &slow));
    }

    #[test]
    fn a_service_s_port_annotation_replaces_the_endpoint_s_port() {
        let rules = rules("prometheus.io", Role::EndpointSlice).expect("preset");
        let mut l = ls(&[
            ("__address__", "127.0.0.9:8080"),
            (
                "__meta_kubernetes_service_annotation_prometheus_io_scrape",
                "true",
            ),
            (
                "__meta_kubernetes_service_annotation_prometheus_io_port",
                "9300",
            ),
            ("__meta_kubernetes_service_label_team", "a"),
            ("__meta_kubernetes_service_name", "api"),
        ]);
        assert!(crate::relabel::process(&mut l, &rules));
        assert_eq!(l["__address__"], "127.0.0.9:9300");
        assert_eq!(l["team"], "a");
        assert_eq!(l["service"], "api");
    }
}
