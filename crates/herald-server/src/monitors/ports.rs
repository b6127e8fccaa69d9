//! A monitor job whose endpoint port (`port`, `targetPort`, `portNumber`) matches no port of the
//! Services or pods its monitor selects: the operator's generated config keeps no target, Prometheus
//! shows an empty job and nothing says why. herald serves the job as the operator would (empty) and
//! lists the port with the ports the selected objects do have.
//!
//! The check runs the job's rules up to its port rule (the operator's selection: the selector's
//! keep rules, and the running filter for pods) over the base job's groups of the monitor's
//! namespaces, and stops at the first selected target the port rule keeps. A monitor that selects
//! nothing is not reported here (its port is not the problem). NB: it runs when a job's warnings are
//! asked for (`GET /sd/v1`, on a blocking thread), once per base job generation, not as bodies are
//! built, so `/scrape-configs` (which consumers reload on change) never varies with the cluster. A
//! job whose port matches costs the groups up to its first selected target, skipped group by group
//! as body encoding skips them (`Group::may_keep`).

use std::collections::BTreeSet;
use std::sync::Arc;

use herald_core::LabelSet;

use crate::monitors::View;
use crate::monitors::views::MAX_PORT_WARNINGS;
use crate::shared::Shared;
use herald_index::groups::Group;

/// At most this many port names are listed in a warning.
const MAX_LISTED: usize = 12;

impl Shared {
    /// What is wrong with monitor job `view` while it is served: the fields its monitor holds that
    /// herald ignored, and a port that matches no port of the objects its monitor selects (at the
    /// base job's current generation).
    pub fn view_warnings(&self, view: &Arc<View>) -> Vec<String> {
        let mut out = view.job.warnings.clone();
        out.extend(self.port_warning(view));
        out
    }

    fn port_warning(&self, view: &Arc<View>) -> Option<String> {
        view.select.as_ref()?;
        let generation = self.generation(view.base);
        {
            let map = self.monitors.port_warnings.lock().expect("lock poisoned");
            if let Some((v, g, warning)) = map.get(&view.job.name)
                && Arc::ptr_eq(v, view)
                && *g == generation
            {
                return warning.clone();
            }
        }
        let cut = self.cut_namespaces(view.base, &view.job.namespaces);
        let warning = check(&cut.groups, view);
        let mut map = self.monitors.port_warnings.lock().expect("lock poisoned");
        if map.len() >= MAX_PORT_WARNINGS {
            map.clear();
        }
        map.insert(
            view.job.name.clone(),
            (view.clone(), cut.generation, warning.clone()),
        );
        warning
    }
}

/// The port warning of `view` over `groups` (its namespaces' groups of its base job).
pub(crate) fn check(groups: &[Arc<Group>], view: &View) -> Option<String> {
    let select = view.select.as_ref()?;
    let port_rule = view.job.port_rule.as_ref()?;
    let keep = view.job.relabel_configs.get(port_rule.rule)?;
    let label = keep.source_labels().first()?;
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut selected = false;
    let mut labels = LabelSet::new();
    for group in groups.iter().filter(|g| g.may_keep(select)) {
        for target in group.iter() {
            if group.relabel(target, select, &mut labels).is_none() {
                continue;
            }
            selected = true;
            if keep.apply(&mut labels) {
                return None;
            }
            if let Some(port) = labels.get(label).filter(|p| !p.is_empty()) {
                seen.insert(port.clone());
            }
        }
    }
    if !selected {
        return None;
    }
    let have = if seen.is_empty() {
        "they have none of that kind".to_string()
    } else {
        let mut listed: Vec<String> = seen
            .iter()
            .take(MAX_LISTED)
            .map(|p| format!("{p:?}"))
            .collect();
        if seen.len() > MAX_LISTED {
            listed.push(format!("{} more", seen.len() - MAX_LISTED));
        }
        format!("they have {}", listed.join(", "))
    };
    Some(format!(
        "{} {:?} matches none of {} ({have}): the job has no targets",
        port_rule.field, port_rule.port, port_rule.among
    ))
}

#[cfg(test)]
mod tests {
    use herald_core::monitor::MonitorContext;
    use herald_core::{LabelSet, TargetGroup};
    use serde_json::{Value, json};

    use super::*;
    use crate::monitors::views::selection;
    use herald_core::JobRelabel;
    use herald_core::monitor;
    use herald_index::groups::Interner;

    fn labels(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// An Endpoints group of Service `app` in `prod`, one target per named port.
    fn mk_endpoints(app: &str, ports: &[&str]) -> Arc<Group> {
        let group = TargetGroup {
            source: format!("endpoints/prod/{app}"),
            labels: labels(&[
                ("__meta_kubernetes_namespace", "prod"),
                ("__meta_kubernetes_service_name", app),
                ("__meta_kubernetes_service_label_app", app),
                ("__meta_kubernetes_service_labelpresent_app", "true"),
            ]),
            targets: ports
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    labels(&[
                        ("__address__", &format!("127.16.0.1:{}", 8080 + i)),
                        ("__meta_kubernetes_endpoint_port_name", p),
                    ])
                })
                .collect(),
        };
        Arc::new(Group::of(&group, &Interner::default()))
    }

    fn mk_view(endpoint: Value) -> View {
        let obj = json!({
            "kind": "ServiceMonitor",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "endpoints": [endpoint]},
        });
        let mut jobs = monitor::service_monitor_jobs(&obj, &MonitorContext::default())
            .expect("a valid monitor");
        let job = jobs.remove(0);
        View {
            relabel: JobRelabel::new(job.relabel_configs.clone(), false).expect("valid rules"),
            select: selection(&job),
            job,
            base: 0,
            istio: None,
        }
    }

    #[test]
    fn a_port_of_a_selected_service_is_no_warning() {
        let groups = [
            mk_endpoints("db", &["sql"]),
            mk_endpoints("web", &["http", "metrics"]),
        ];
        assert_eq!(check(&groups, &mk_view(json!({"port": "metrics"}))), None);
        // As a regex, as the operator's rule reads it.
        assert_eq!(check(&groups, &mk_view(json!({"port": "met.*"}))), None);
    }

    #[test]
    fn a_port_no_selected_service_has_is_named_with_the_ports_they_have() {
        // `db` has a port `metrcs`, but the monitor does not select `db`.
        let groups = [
            mk_endpoints("db", &["metrcs"]),
            mk_endpoints("web", &["http", "metrics", ""]),
        ];
        assert_eq!(
            check(&groups, &mk_view(json!({"port": "metrcs"}))).as_deref(),
            Some(
                "spec.endpoints[0].port \"metrcs\" matches none of the ports of the selected \
                 Services (they have \"http\", \"metrics\"): the job has no targets"
            )
        );
    }

    #[test]
    fn a_monitor_selecting_nothing_says_nothing_of_its_port() {
        let groups = [mk_endpoints("db", &["sql"])];
        assert_eq!(check(&groups, &mk_view(json!({"port": "metrics"}))), None);
        assert_eq!(check(&[], &mk_view(json!({"port": "metrics"}))), None);
    }

    #[test]
    fn an_endpoint_without_a_port_has_nothing_to_check() {
        let view = mk_view(json!({"path": "/metrics"}));
        assert!(view.select.is_none());
        assert_eq!(check(&[mk_endpoints("web", &["http"])], &view), None);
    }
}
