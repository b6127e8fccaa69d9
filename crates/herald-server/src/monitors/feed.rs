//! Builds the monitor jobs (`Views`) from the prometheus-operator monitors in herald's cache, and
//! keeps them current as monitors change (one list+watch per kind, like every other resource).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use herald_core::istio::{IstioJob, IstioMode};
use herald_core::monitor::{self, MonitorContext, MonitorJob, MonitorKind};
use herald_core::{JobRelabel, MonitorsConfig, Role};
use herald_index::cache::Cache;
use kube_face::ResId;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::monitors::{MonitorState, View, Views, base_name};

/// The cached resource `plural` of API group `group` ("" for core), if herald caches it.
fn cached(cache: &Cache, group: &str, plural: &str) -> Option<ResId> {
    cache.ids().find(|r| {
        let res = &cache.get(*r).resource;
        res.plural == plural && res.group == group
    })
}

/// The cached prometheus-operator resource `plural`.
pub fn resource(cache: &Cache, plural: &str) -> Option<ResId> {
    cached(cache, "monitoring.coreos.com", plural)
}

/// Which namespaces' monitors are taken.
#[derive(Debug)]
enum NamespaceSelection {
    All,
    Names(Vec<String>),
    /// Namespaces whose labels match (a Prometheus object's `*NamespaceSelector`).
    Labels(kube_selectors::LabelSelector),
}

/// How monitors of one kind are selected; `None`: none of that kind.
#[derive(Debug)]
struct Selection {
    monitors: kube_selectors::LabelSelector,
    namespaces: NamespaceSelection,
}

/// What `build_views` selects with: from the `monitors:` section, or from a Prometheus object.
struct Selecting {
    service: Option<Selection>,
    pod: Option<Selection>,
    ctx: MonitorContext,
}

/// A Kubernetes `LabelSelector` object as a selector: `null` selects nothing (`None`), `{}`
/// everything, as the operator reads a Prometheus object's monitor selectors.
fn label_selector(
    v: &serde_json::Value,
    field: &str,
) -> Result<Option<kube_selectors::LabelSelector>, String> {
    if v.is_null() {
        return Ok(None);
    }
    let mut parts = Vec::new();
    if let Some(m) = v.get("matchLabels").and_then(|m| m.as_object()) {
        for (k, v) in m {
            let v = v
                .as_str()
                .ok_or_else(|| format!("{field}.matchLabels.{k}: not a string"))?;
            parts.push(format!("{k}={v}"));
        }
    }
    for (i, e) in v
        .get("matchExpressions")
        .and_then(|e| e.as_array())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let key = e["key"]
            .as_str()
            .ok_or_else(|| format!("{field}.matchExpressions[{i}]: no key"))?;
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect();
        parts.push(match e["operator"].as_str() {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("Exists") => key.to_string(),
            Some("DoesNotExist") => format!("!{key}"),
            other => {
                return Err(format!(
                    "{field}.matchExpressions[{i}].operator {other:?}: not In, NotIn, Exists or DoesNotExist"
                ));
            }
        });
    }
    kube_selectors::LabelSelector::parse(&parts.join(","))
        .map(Some)
        .map_err(|e| format!("{field}: {e}"))
}

/// The selection of the `monitors:` section.
fn configured(cfg: &MonitorsConfig) -> Selecting {
    let selection = || Selection {
        monitors: cfg.label_selector(),
        namespaces: if cfg.namespaces.is_empty() {
            NamespaceSelection::All
        } else {
            NamespaceSelection::Names(cfg.namespaces.clone())
        },
    };
    Selecting {
        service: cfg.service_monitors.then(selection),
        pod: cfg.pod_monitors.then(selection),
        ctx: MonitorContext {
            ignore_namespace_selectors: cfg.ignore_namespace_selectors,
            service_discovery_role: cfg.service_role(),
            scrape_classes: cfg.scrape_classes(),
            node_metadata_attached: cfg.attach_node_metadata,
            ..MonitorContext::default()
        },
    }
}

/// The selection a Prometheus object makes, as prometheus-operator reads it: a `null` monitor
/// selector selects no monitor of that kind, `{}` every one; a `null` namespace selector means the
/// Prometheus object's own namespace, `{}` every namespace.
/// Why a Prometheus object gives no selection.
enum NoSelection {
    /// It is not there (or not cached): it selects nothing.
    Missing(String),
    /// It is there but the operator would refuse it: the last valid selection stays.
    Invalid(String),
}

fn from_prometheus(
    cache: &Cache,
    cfg: &MonitorsConfig,
    (pns, pname): (&str, &str),
) -> Result<Selecting, NoSelection> {
    let r = resource(cache, "prometheuses")
        .ok_or_else(|| NoSelection::Missing("prometheuses are not cached".into()))?;
    let bytes = {
        let log = cache.read(r);
        log.get_parts(pns, pname)
            .ok_or_else(|| NoSelection::Missing(format!("Prometheus {pns}/{pname} not found")))?
            .bytes
            .to_bytes()
    };
    read_prometheus(cfg, (pns, pname), &bytes).map_err(NoSelection::Invalid)
}

/// The selection of the Prometheus object `bytes` holds.
fn read_prometheus(
    cfg: &MonitorsConfig,
    (pns, pname): (&str, &str),
    bytes: &[u8],
) -> Result<Selecting, String> {
    let obj: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("Prometheus {pns}/{pname}: not JSON: {e}"))?;
    let spec = &obj["spec"];
    let selection = |sel: &str, ns_sel: &str, on: bool| -> Result<Option<Selection>, String> {
        let Some(monitors) = label_selector(&spec[sel], &format!("spec.{sel}"))? else {
            return Ok(None);
        };
        let namespaces = match label_selector(&spec[ns_sel], &format!("spec.{ns_sel}"))? {
            None => NamespaceSelection::Names(vec![pns.to_string()]),
            Some(s) if s.to_string().is_empty() => NamespaceSelection::All,
            Some(s) => NamespaceSelection::Labels(s),
        };
        Ok(on.then_some(Selection {
            monitors,
            namespaces,
        }))
    };
    // The operator refuses to configure a Prometheus with bad scrape classes; herald serves none of
    // its monitors either, and says why.
    let scrape_classes = monitor::scrape_classes(&spec["scrapeClasses"])
        .map_err(|e| format!("Prometheus {pns}/{pname}: spec.scrapeClasses: {e}"))?;
    let role = match spec["serviceDiscoveryRole"].as_str() {
        Some("EndpointSlice") => Role::EndpointSlice,
        _ => Role::Endpoints,
    };
    Ok(Selecting {
        service: selection(
            "serviceMonitorSelector",
            "serviceMonitorNamespaceSelector",
            cfg.service_monitors,
        )?,
        pod: selection(
            "podMonitorSelector",
            "podMonitorNamespaceSelector",
            cfg.pod_monitors,
        )?,
        ctx: MonitorContext {
            ignore_namespace_selectors: spec["ignoreNamespaceSelectors"].as_bool().unwrap_or(false),
            service_discovery_role: role,
            scrape_interval: spec["scrapeInterval"]
                .as_str()
                .filter(|i| !i.is_empty())
                .unwrap_or(monitor::DEFAULT_SCRAPE_INTERVAL)
                .to_string(),
            scrape_classes,
            node_metadata_attached: cfg.attach_node_metadata,
            ..MonitorContext::default()
        },
    })
}

/// Labels of every namespace herald caches (for namespace label selectors).
fn namespace_labels(cache: &Cache) -> BTreeMap<String, kube_face::Labels> {
    let Some(r) = cached(cache, "", "namespaces") else {
        return BTreeMap::new();
    };
    cache
        .read(r)
        .values()
        .map(|e| (e.key.1.to_string(), e.labels.clone()))
        .collect()
}

/// Builds the views from the monitors in herald's cache (`base_job`: the index job of a base job's
/// name). A job whose translation did not change keeps its `View` from `previous` (and so its
/// cached bodies): one monitor changing does not re-encode every other job.
pub fn build_views(
    cache: &Cache,
    previous: &Views,
    base_job: &(dyn Fn(&str) -> Option<usize> + Sync),
    cfg: &MonitorsConfig,
) -> Views {
    let mut views = Views::default();
    let selecting = match cfg.prometheus_object() {
        None => configured(cfg),
        Some(p) => match from_prometheus(cache, cfg, p) {
            Ok(s) => s,
            Err(NoSelection::Missing(e)) => {
                views.problems.push(format!("monitors.prometheus: {e}"));
                return views;
            }
            // As the operator, which keeps the config it last generated: the jobs stay as they
            // were, and the problem is listed first.
            Err(NoSelection::Invalid(e)) => {
                views.problems.push(format!(
                    "monitors.prometheus: {e} (serving the monitor jobs of its last valid state)"
                ));
                views.problems.extend(
                    previous
                        .problems
                        .iter()
                        .filter(|p| !p.starts_with("monitors.prometheus:"))
                        .cloned(),
                );
                views.by_name = previous.by_name.clone();
                views.warnings = previous.warnings.clone();
                views.monitors = previous.monitors;
                return views;
            }
        },
    };
    let ns_labels = match (&selecting.service, &selecting.pod) {
        (
            Some(Selection {
                namespaces: NamespaceSelection::Labels(_),
                ..
            }),
            _,
        )
        | (
            _,
            Some(Selection {
                namespaces: NamespaceSelection::Labels(_),
                ..
            }),
        ) => namespace_labels(cache),
        _ => BTreeMap::new(),
    };
    let no_labels = kube_face::Labels::new();
    let kinds: [(&str, MonitorKind, &Option<Selection>, MonitorFn); 2] = [
        (
            "servicemonitors",
            MonitorKind::ServiceMonitor,
            &selecting.service,
            monitor::service_monitor_jobs,
        ),
        (
            "podmonitors",
            MonitorKind::PodMonitor,
            &selecting.pod,
            monitor::pod_monitor_jobs,
        ),
    ];
    for (plural, kind, selection, translate) in kinds {
        let (Some(selection), Some(r)) = (selection, resource(cache, plural)) else {
            continue;
        };
        let log = cache.read(r);
        for entry in log.values() {
            let (ns, name) = (&entry.key.0, &entry.key.1);
            let in_namespace = match &selection.namespaces {
                NamespaceSelection::All => true,
                NamespaceSelection::Names(names) => names.iter().any(|n| n == ns.as_str()),
                NamespaceSelection::Labels(s) => {
                    s.matches(ns_labels.get(ns.as_str()).unwrap_or(&no_labels))
                }
            };
            if !in_namespace || !selection.monitors.matches(&entry.labels) {
                continue;
            }
            views.monitors += 1;
            let obj: serde_json::Value = match serde_json::from_slice(&entry.bytes.get()) {
                Ok(v) => v,
                Err(e) => {
                    views
                        .problems
                        .push(format!("{kind} {ns}/{name}: not JSON: {e}"));
                    continue;
                }
            };
            let jobs = match translate(&obj, &selecting.ctx) {
                Ok(jobs) => jobs,
                // A field error names the monitor already.
                Err(e @ monitor::MonitorError::Field { .. }) => {
                    views.problems.push(format!("{e}"));
                    continue;
                }
                Err(e) => {
                    views.problems.push(format!("{kind} {ns}/{name}: {e}"));
                    continue;
                }
            };
            for w in monitor::unknown_fields(&obj, kind) {
                views.warnings.push(format!("{kind} {ns}/{name}: {w}"));
            }
            for mut job in jobs {
                if job.attach_metadata.is_some_and(|a| a.node) && !cfg.attach_node_metadata {
                    let w = "attachMetadata.node: true (the monitor's or its scrape class's): \
                             served without node labels; set monitors.attach_node_metadata: true";
                    job.warnings.push(w.to_owned());
                    views.warnings.push(format!("{}: {w}", job.name));
                }
                if let Some(old) = previous.by_name.get(&job.name)
                    && old.job == job
                {
                    views.by_name.insert(job.name.clone(), old.clone());
                    continue;
                }
                let Some(base) = base_job(&base_name(job.role)) else {
                    views.problems.push(format!(
                        "{}: discovers with role {} that herald keeps no base job for \
                         (add {} to monitors.service_discovery_roles)",
                        job.name,
                        job.role.as_str(),
                        if job.role == Role::EndpointSlice {
                            "EndpointSlice"
                        } else {
                            "Endpoints"
                        },
                    ));
                    continue;
                };
                let relabel = match JobRelabel::new(job.relabel_configs.clone(), false) {
                    Ok(r) => r.with_defaults(monitor::scrape_defaults(&job)),
                    Err(e) => {
                        views.problems.push(format!("{}: {e}", job.name));
                        continue;
                    }
                };
                let select = crate::monitors::views::selection(&job);
                views.by_name.insert(
                    job.name.clone(),
                    Arc::new(View {
                        istio: cfg.istio.then(|| IstioJob {
                            mode: IstioMode::Merged,
                            job: job.name.clone(),
                        }),
                        job,
                        relabel,
                        base,
                        select,
                    }),
                );
            }
        }
    }
    views
}

type MonitorFn = fn(
    &serde_json::Value,
    &MonitorContext,
) -> Result<Vec<MonitorJob>, herald_core::monitor::MonitorError>;

/// Keeps `monitors`' views current: rebuilt from `cache` at start and after every change to a
/// monitor (changes within 200 ms are taken together); `base_job` finds a base job's index job.
pub async fn run(
    monitors: &MonitorState,
    cache: &Cache,
    metrics: &Metrics,
    base_job: &(dyn Fn(&str) -> Option<usize> + Sync),
    stop: CancellationToken,
) {
    let Some(cfg) = monitors.config.clone() else {
        return;
    };
    let mut ids: Vec<ResId> = ["servicemonitors", "podmonitors", "prometheuses"]
        .into_iter()
        .filter_map(|p| resource(cache, p))
        .collect();
    if cfg.prometheus.is_some() {
        ids.extend(cached(cache, "", "namespaces"));
    }
    let mut changes: Vec<_> = ids.iter().map(|r| cache.subscribe(*r)).collect();
    loop {
        let listed = ids
            .iter()
            .all(|r| cache.get(*r).status.synced.load(Ordering::Acquire));
        let views = build_views(cache, &monitors.views(), base_job, &cfg);
        if !views.problems.is_empty() {
            tracing::warn!(problems = ?views.problems, "some monitors are not served");
        }
        if !views.warnings.is_empty() {
            tracing::warn!(warnings = ?views.warnings, "some monitors are served without fields they hold");
        }
        tracing::info!(
            monitors = views.monitors,
            jobs = views.by_name.len(),
            "monitor jobs updated"
        );
        let m = metrics;
        m.monitors_selected.set(views.monitors as i64);
        m.monitor_jobs.set(views.by_name.len() as i64);
        for (served, n) in [
            ("false", views.problems.len()),
            ("true", views.warnings.len()),
        ] {
            m.monitor_problems
                .get_or_create(&crate::metrics::ServedLabels { served })
                .set(n as i64);
        }
        monitors.set(views);
        if listed {
            monitors.built.store(true, Ordering::Release);
        }
        if !crate::changes::next_change(&stop, &mut changes, listed, Duration::from_millis(200))
            .await
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use kube_face::{Entry, Resource};

    use super::*;
    use crate::monitors::resources;

    fn mk_config() -> MonitorsConfig {
        herald_core::parse_config("jobs: []\nmonitors: {}\n")
            .expect("a valid job file")
            .monitors
            .expect("monitors are on")
    }

    fn mk_cache(cfg: &MonitorsConfig) -> Cache {
        let kind = |plural: &str| match plural {
            "servicemonitors" => "ServiceMonitor",
            "podmonitors" => "PodMonitor",
            _ => "Prometheus",
        };
        let resources = resources(cfg)
            .iter()
            .map(|(g, v, p)| Resource::custom(g, v, p, kind(p), true))
            .collect();
        Cache::new(resources, 10, true)
    }

    fn mk_service_monitor(name: &str, port: &str, rv: u64) -> Arc<Entry> {
        let json = serde_json::json!({
            "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"namespace": "prod", "name": name, "resourceVersion": rv.to_string()},
            "spec": {"selector": {"matchLabels": {"app": name}}, "endpoints": [{"port": port}]},
        });
        crate::fixtures::mk_entry("prod", name, rv, &json)
    }

    fn servicemonitors(cache: &Cache) -> ResId {
        resource(cache, "servicemonitors").expect("cached")
    }

    #[test]
    fn each_monitor_endpoint_is_a_job_over_its_role_s_base_job() {
        let cfg = mk_config();
        let cache = mk_cache(&cfg);
        let r = servicemonitors(&cache);
        cache.swap(r, 3, vec![mk_service_monitor("web", "metrics", 3)], &[]);
        let base_job = |name: &str| (name == base_name(Role::Endpoints)).then_some(4);
        let views = build_views(&cache, &Views::default(), &base_job, &cfg);
        assert_eq!(views.monitors, 1);
        assert!(views.problems.is_empty(), "{:?}", views.problems);
        let view = &views.by_name["serviceMonitor/prod/web/0"];
        assert_eq!((view.base, view.job.role), (4, Role::Endpoints));
        assert!(
            view.select.is_some(),
            "a port rule: the selection is kept for the port check"
        );
    }

    #[test]
    fn an_unchanged_monitor_keeps_its_view_and_a_changed_one_gets_a_new_one() {
        let cfg = mk_config();
        let cache = mk_cache(&cfg);
        let r = servicemonitors(&cache);
        let base_job = |_: &str| Some(0);
        let monitors = vec![
            mk_service_monitor("web", "metrics", 3),
            mk_service_monitor("api", "metrics", 4),
        ];
        cache.swap(r, 4, monitors, &[]);
        let before = build_views(&cache, &Views::default(), &base_job, &cfg);
        cache.swap(
            r,
            5,
            vec![
                mk_service_monitor("web", "metrics", 3),
                mk_service_monitor("api", "http", 5),
            ],
            &[],
        );
        let after = build_views(&cache, &before, &base_job, &cfg);
        let same = |name: &str| Arc::ptr_eq(&before.by_name[name], &after.by_name[name]);
        assert!(
            same("serviceMonitor/prod/web/0"),
            "unchanged: its bodies stay cached"
        );
        assert!(!same("serviceMonitor/prod/api/0"), "changed: a new view");
    }

    #[test]
    fn a_monitor_of_a_role_without_a_base_job_is_not_served_and_says_why() {
        let cfg = mk_config();
        let cache = mk_cache(&cfg);
        let r = servicemonitors(&cache);
        cache.swap(r, 3, vec![mk_service_monitor("web", "metrics", 3)], &[]);
        let views = build_views(&cache, &Views::default(), &|_| None, &cfg);
        assert!(views.by_name.is_empty());
        assert!(
            views.problems.len() == 1 && views.problems[0].contains("no base job"),
            "{:?}",
            views.problems
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_builds_the_views_and_is_ready_once_every_monitor_kind_is_listed() {
        let cfg = mk_config();
        let cache = mk_cache(&cfg);
        let monitors = MonitorState::new(Some(cfg));
        let metrics = Metrics::default();
        let stop = CancellationToken::new();
        let base_job = |_: &str| Some(0);
        let drive = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(!monitors.ready(), "nothing listed yet");
            for r in cache.ids() {
                let entries = if r == servicemonitors(&cache) {
                    vec![mk_service_monitor("web", "metrics", 3)]
                } else {
                    vec![]
                };
                cache.swap(r, 3, entries, &[]);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(monitors.ready());
            assert!(monitors.view("serviceMonitor/prod/web/0").is_some());
            assert_eq!(metrics.monitor_jobs.get(), 1);
            stop.cancel();
        };
        tokio::join!(
            run(&monitors, &cache, &metrics, &base_job, stop.clone()),
            drive
        );
    }
}
