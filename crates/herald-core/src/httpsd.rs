//! Prometheus HTTP SD output: target groups flattened to one entry per target, encoded as the JSON
//! array `http_sd_configs` reads (<https://prometheus.io/docs/prometheus/latest/http_sd/>).

use serde::Serialize;

use crate::config::Job;
use crate::labels::ADDRESS;
use crate::relabel::Relabeler;
use crate::target::{LabelSet, TargetGroup};

/// One target with all its labels: the group's labels overlaid with the target's own (target labels
/// win, as when Prometheus merges a group into its targets), `__address__` removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSdEntry {
    pub target: String,
    pub labels: LabelSet,
}

/// One entry per target of `group`, in the group's order. A target without `__address__` is skipped:
/// Prometheus would drop it too ("no address").
pub fn http_sd_entries(group: &TargetGroup) -> Vec<HttpSdEntry> {
    group
        .targets
        .iter()
        .filter_map(|t| {
            let target = t.get(ADDRESS)?.clone();
            let mut labels = group.labels.clone();
            labels.extend(
                t.iter()
                    .filter(|(k, _)| k.as_str() != ADDRESS)
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
            Some(HttpSdEntry { target, labels })
        })
        .collect()
}

/// A job's relabeling, applied by herald before encoding: each target's labels (its group's overlaid
/// by its own, `__address__` among them) go through the job's `relabel_configs`; a dropped target, or
/// one left without an `__address__`, is not served; labels starting with `__meta_` are then removed
/// unless the job sets `keep_meta_labels`. The other `__` labels a rule sets (`__scheme__`,
/// `__metrics_path__`, `__param_*`, `__scrape_interval__`, `__scrape_timeout__`) are served, and the
/// consumer's scrape honours them as if its own relabeling had set them.
///
/// As Prometheus's scrape does before relabeling (`PopulateDiscoveredLabels` in scrape/target.go),
/// labels with an empty value are removed first. NB: the rules see the labels discovery gives, not the
/// scrape defaults a Prometheus job adds before its own relabeling (`job`, `__scheme__`,
/// `__metrics_path__`, `__scrape_interval__`, `__scrape_timeout__`): herald does not know the
/// consumer's job; a rule reading one of those sees "" unless an earlier rule set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRelabel {
    rules: Relabeler,
    keep_meta: bool,
    /// The labels Prometheus sets before a job's relabeling (`job`, `__scheme__`, `__metrics_path__`,
    /// ...), when herald writes the consumer's scrape config and so knows them (a monitor job): the
    /// operator's rules read `job`.
    defaults: LabelSet,
}

/// Where relabeling stopped a target (see [`JobRelabel::apply_or_stop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelabelStop {
    /// Rule `i` (from 0) dropped it.
    Rule(usize),
    /// Every rule kept it, but it was left without an `__address__`.
    NoAddress,
}

/// Prefix of the discovery labels removed after relabeling.
const META_PREFIX: &str = "__meta_";

impl JobRelabel {
    /// The relabeling of `job`; `None` when it has no `relabel_configs` (its targets are served with
    /// every discovered label, unchanged).
    pub fn of_job(job: &Job) -> Option<JobRelabel> {
        if job.relabel_configs.is_empty() {
            return None;
        }
        Some(
            JobRelabel::new(job.relabel_configs.clone(), job.keep_meta_labels)
                .expect("parse_config validated the job's relabel_configs"),
        )
    }

    /// The relabeling by `rules` (validated here), keeping `__meta_*` labels when `keep_meta`.
    pub fn new(
        rules: Vec<crate::relabel::RelabelConfig>,
        keep_meta: bool,
    ) -> Result<JobRelabel, crate::relabel::RelabelError> {
        Ok(JobRelabel {
            rules: Relabeler::new(rules)?,
            keep_meta,
            defaults: LabelSet::new(),
        })
    }

    /// As Prometheus does before a job's relabeling, set each of `defaults` that discovery did not
    /// (for jobs whose scrape config herald writes, so it knows them).
    pub fn with_defaults(mut self, defaults: LabelSet) -> JobRelabel {
        self.defaults = defaults;
        self
    }

    /// Relabel one target: `labels` holds all its labels, `__address__` included. Returns the final
    /// address and leaves in `labels` what is served with it; `None` when the target is dropped.
    pub fn apply(&self, labels: &mut LabelSet) -> Option<String> {
        self.apply_or_stop(labels).ok()
    }

    /// As [`JobRelabel::apply`], saying where a dropped target stopped: at rule `i` (`labels` then
    /// hold what that rule saw), or after the rules for want of an `__address__`. Serving calls it
    /// through `apply`; `explain` reads the stop.
    pub fn apply_or_stop(&self, labels: &mut LabelSet) -> Result<String, RelabelStop> {
        labels.retain(|_, v| !v.is_empty());
        for (k, v) in &self.defaults {
            if !labels.contains_key(k) {
                labels.insert(k.clone(), v.clone());
            }
        }
        if let Some(rule) = self.rules.first_drop(labels) {
            return Err(RelabelStop::Rule(rule));
        }
        let address = labels.remove(ADDRESS).ok_or(RelabelStop::NoAddress)?;
        if !self.keep_meta {
            labels.retain(|k, _| !k.starts_with(META_PREFIX));
        }
        Ok(address)
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[crate::relabel::RelabelConfig] {
        self.rules.rules()
    }

    /// Whether some target of a group can survive the rules, decided once for the whole group.
    /// `uniform(name)` is the value every target of the group has for label `name` (its own or the
    /// group's; `Ok(None)` when none has it), or `Err(())` when targets differ. The rules are walked
    /// from the first: a `keep` or `drop` whose source labels are uniform (never `__address__`) and
    /// were not written by an earlier rule gives every target the same verdict, so one evaluation
    /// tells whether every target is dropped there. A rule writing one named label (`replace`,
    /// `hashmod`, `lowercase`, `uppercase` with a target label without `$`) only marks that label
    /// as unknown; any other rule, or a `keep`/`drop` reading an unknown label, ends the walk. `true`
    /// when undecided.
    ///
    /// NB: this is what makes thousands of monitor jobs cheap: the operator's rules start with `keep`
    /// on the Service's or pod's labels, so a monitor's job skips every group of its namespaces it
    /// does not select without building one target's labels (k8s-limits: 4,950 monitor jobs).
    pub fn group_may_keep(&self, uniform: impl Fn(&str) -> Result<Option<String>, ()>) -> bool {
        use crate::relabel::Action;
        let mut written: Vec<&str> = Vec::new();
        for rule in self.rules.rules() {
            match rule.action {
                Action::Keep | Action::Drop => {}
                Action::Replace | Action::HashMod | Action::Lowercase | Action::Uppercase
                    if !rule.target_label.contains('$') =>
                {
                    written.push(&rule.target_label);
                    continue;
                }
                _ => break,
            }
            let mut labels = LabelSet::new();
            for s in rule.source_labels() {
                if s == ADDRESS || written.contains(&s.as_str()) {
                    return true;
                }
                let Ok(value) = uniform(s) else {
                    return true;
                };
                // As `apply` sees it: empty values removed, then the scrape defaults.
                match value.filter(|v| !v.is_empty()) {
                    Some(v) => {
                        labels.insert(s.clone(), v);
                    }
                    None => {
                        if let Some(d) = self.defaults.get(s) {
                            labels.insert(s.clone(), d.clone());
                        }
                    }
                }
            }
            if !rule.apply(&mut labels) {
                return false;
            }
        }
        true
    }

    /// `entry` as served after relabeling; `None` when it is dropped.
    pub fn entry(&self, entry: HttpSdEntry) -> Option<HttpSdEntry> {
        let mut labels = entry.labels;
        labels.insert(ADDRESS.to_string(), entry.target);
        let target = self.apply(&mut labels)?;
        Some(HttpSdEntry { target, labels })
    }
}

#[derive(Serialize)]
struct Wire<'a> {
    targets: [&'a str; 1],
    labels: &'a LabelSet,
}

/// Encode entries as compact JSON `[{"targets":["addr"],"labels":{...}}, ...]`, in the given order with
/// label names sorted, so equal inputs give byte-equal bodies (and equal ETags).
pub fn encode_http_sd<'a>(entries: impl IntoIterator<Item = &'a HttpSdEntry>) -> Vec<u8> {
    let wire: Vec<Wire<'_>> = entries
        .into_iter()
        .map(|e| Wire {
            targets: [e.target.as_str()],
            labels: &e.labels,
        })
        .collect();
    serde_json::to_vec(&wire).expect("a list of string maps always serializes to JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ls(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn mk_group() -> TargetGroup {
        TargetGroup {
            source: "pod/default/p".into(),
            targets: vec![
                ls(&[("__address__", "1.2.3.4:9000"), ("b", "target"), ("c", "1")]),
                ls(&[("__address__", "[2001:db8::1]:80"), ("c", "2")]),
                ls(&[("c", "no address")]),
            ],
            labels: ls(&[("a", "group"), ("b", "group")]),
        }
    }

    #[test]
    fn relabeling_says_which_rule_dropped_a_target_and_what_it_saw() {
        let yaml = "jobs:\n- name: j\n  role: pod\n  relabel_configs:\n  \
                    - {target_label: team, replacement: a}\n  \
                    - {source_labels: [team], regex: b, action: keep}\n";
        let r = relabel(yaml);
        let mut labels = ls(&[("__address__", "1.2.3.4:80"), ("x", "")]);
        assert_eq!(r.apply_or_stop(&mut labels), Err(RelabelStop::Rule(1)));
        assert_eq!(
            labels.get("team").map(String::as_str),
            Some("a"),
            "what rule 1 saw"
        );
        assert!(
            !labels.contains_key("x"),
            "empty labels are gone before the rules"
        );
        let mut kept = ls(&[("__address__", "1.2.3.4:80")]);
        let keep_all = relabel(
            "jobs:\n- name: j\n  role: pod\n  relabel_configs:\n  - {target_label: t, replacement: v}\n",
        );
        assert_eq!(
            keep_all.apply_or_stop(&mut kept),
            Ok("1.2.3.4:80".to_string())
        );
        let drop_address = relabel(
            "jobs:\n- name: j\n  role: pod\n  relabel_configs:\n  - {action: labeldrop, regex: __address__}\n",
        );
        let mut gone = ls(&[("__address__", "1.2.3.4:80")]);
        assert_eq!(
            drop_address.apply_or_stop(&mut gone),
            Err(RelabelStop::NoAddress)
        );
        assert_eq!(
            drop_address.apply(&mut ls(&[("__address__", "1.2.3.4:80")])),
            None
        );
    }

    #[test]
    fn entries_merge_group_and_target_labels_with_the_target_winning() {
        let entries = http_sd_entries(&mk_group());
        assert_eq!(
            entries,
            vec![
                HttpSdEntry {
                    target: "1.2.3.4:9000".into(),
                    labels: ls(&[("a", "group"), ("b", "target"), ("c", "1")]),
                },
                HttpSdEntry {
                    target: "[2001:db8::1]:80".into(),
                    labels: ls(&[("a", "group"), ("b", "group"), ("c", "2")]),
                },
            ]
        );
    }

    #[test]
    fn encoding_is_compact_sorted_json_in_entry_order() {
        let entries = http_sd_entries(&mk_group());
        let body = encode_http_sd(&entries);
        assert_eq!(
            String::from_utf8(body).expect("utf-8"),
            r#"[{"targets":["1.2.3.4:9000"],"labels":{"a":"group","b":"target","c":"1"}},{"targets":["[2001:db8::1]:80"],"labels":{"a":"group","b":"group","c":"2"}}]"#
        );
    }

    fn relabel(yaml: &str) -> JobRelabel {
        let cfg = crate::parse_config(yaml).expect("valid job file");
        JobRelabel::of_job(&cfg.jobs[0]).expect("the job relabels")
    }

    #[test]
    fn a_job_without_relabel_configs_has_no_relabeling() {
        let cfg = crate::parse_config("jobs:\n- {name: p, role: pod, keep_meta_labels: true}\n")
            .expect("valid");
        assert_eq!(JobRelabel::of_job(&cfg.jobs[0]), None);
    }

    #[test]
    fn relabeled_entries_lose_meta_labels_and_empty_values_and_take_the_final_address() {
        let r = relabel(
            "jobs:\n- name: p\n  role: pod\n  relabel_configs:\n  \
             - {source_labels: [__meta_kubernetes_pod_label_app], regex: web, action: keep}\n  \
             - {source_labels: [__meta_kubernetes_pod_ip], target_label: __address__, replacement: '$1:9100'}\n  \
             - {action: labelmap, regex: __meta_kubernetes_pod_label_(.+)}\n  \
             - {source_labels: [__meta_kubernetes_pod_label_empty], target_label: was_empty, replacement: 'x$1'}\n",
        );
        let entry = |app: &str| HttpSdEntry {
            target: "10.0.0.1:80".into(),
            labels: ls(&[
                ("__meta_kubernetes_pod_ip", "127.0.0.5"),
                ("__meta_kubernetes_pod_label_app", app),
                ("__meta_kubernetes_pod_label_empty", ""),
                ("__scheme__", "https"),
            ]),
        };
        assert_eq!(r.entry(entry("db")), None, "dropped by keep");
        assert_eq!(
            r.entry(entry("web")),
            Some(HttpSdEntry {
                target: "127.0.0.5:9100".into(),
                // The empty label was removed before relabeling (so `empty` is not mapped), the meta
                // labels after; `__scheme__` is served.
                labels: ls(&[("__scheme__", "https"), ("app", "web"), ("was_empty", "x")]),
            })
        );
    }

    #[test]
    fn keep_meta_labels_serves_the_discovery_labels_too_and_a_target_without_address_is_dropped() {
        let r = relabel(
            "jobs:\n- name: p\n  role: pod\n  keep_meta_labels: true\n  relabel_configs:\n  \
             - {source_labels: [__meta_x], regex: gone, target_label: __address__, replacement: ''}\n",
        );
        let entry = |x: &str| HttpSdEntry {
            target: "127.0.0.1:80".into(),
            labels: ls(&[("__meta_x", x)]),
        };
        assert_eq!(
            r.entry(entry("kept")),
            Some(HttpSdEntry {
                target: "127.0.0.1:80".into(),
                labels: ls(&[("__meta_x", "kept")]),
            })
        );
        assert_eq!(r.entry(entry("gone")), None, "no __address__ left");
    }

    #[test]
    fn a_group_is_skipped_only_when_its_own_labels_decide_every_target_is_dropped() {
        // A group whose every target shares the group's labels.
        fn of<'a>(
            pairs: &'a [(&'a str, &'a str)],
        ) -> impl Fn(&str) -> Result<Option<String>, ()> + 'a {
            move |name| {
                Ok(pairs
                    .iter()
                    .rev()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string()))
            }
        }
        let r = relabel(
            "jobs:\n- name: p\n  role: endpoints\n  relabel_configs:\n  \
             - {source_labels: [__meta_svc_label_app], regex: web, action: keep}\n  \
             - {source_labels: [job], regex: other, action: drop}\n  \
             - {target_label: x, replacement: y}\n  \
             - {source_labels: [__meta_svc_label_tier], regex: db, action: keep}\n",
        )
        .with_defaults(ls(&[("job", "other")]));
        // Not selected by the first keep: skipped.
        assert!(!r.group_may_keep(of(&[("__meta_svc_label_app", "db")])));
        assert!(
            !r.group_may_keep(of(&[("__meta_svc_label_app", "")])),
            "empty is absent"
        );
        // Selected, but the job default (as Prometheus sets it before relabeling) is dropped.
        assert!(!r.group_may_keep(of(&[("__meta_svc_label_app", "web")])));
        // Targets that differ in the label decide one by one: undecided.
        assert!(r.group_may_keep(|_: &str| Err(())));
        // A rule writing a named label is stepped over: tier is still read after `x`.
        let r = r.with_defaults(LabelSet::new());
        assert!(r.group_may_keep(of(&[
            ("__meta_svc_label_app", "web"),
            ("__meta_svc_label_tier", "db")
        ])));
        assert!(!r.group_may_keep(of(&[
            ("__meta_svc_label_app", "web"),
            ("__meta_svc_label_tier", "web")
        ])));
        // A keep reading a label an earlier rule wrote is undecided, and labelmap ends the walk.
        let w = relabel(
            "jobs:\n- name: p\n  role: endpoints\n  relabel_configs:\n  \
             - {source_labels: [__meta_a], target_label: b}\n  \
             - {source_labels: [b], regex: x, action: keep}\n",
        );
        assert!(w.group_may_keep(of(&[("__meta_a", "y")])));
        let m = relabel(
            "jobs:\n- name: p\n  role: endpoints\n  relabel_configs:\n  \
             - {action: labelmap, regex: '(.*)'}\n  \
             - {source_labels: [__meta_c], regex: x, action: keep}\n",
        );
        assert!(m.group_may_keep(of(&[("__meta_c", "y")])));
    }

    #[test]
    fn no_entries_encode_as_an_empty_array() {
        assert_eq!(encode_http_sd(&[]), b"[]");
    }

    #[test]
    fn labels_with_quotes_and_unicode_are_escaped_as_json() {
        let e = HttpSdEntry {
            target: "h:1".into(),
            labels: ls(&[("x", "a\"b\\c\u{e9}")]),
        };
        let parsed: serde_json::Value =
            serde_json::from_slice(&encode_http_sd([&e])).expect("valid json");
        assert_eq!(parsed[0]["labels"]["x"], "a\"b\\c\u{e9}");
    }
}
