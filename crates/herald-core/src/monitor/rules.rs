//! The generated target relabeling of a monitor endpoint, rule by rule in the operator's order
//! (prometheus-operator `pkg/prometheus/promcfg.go`: `initRelabelings`, `generateRunningFilter`,
//! the selector rules, `generateRelabelConfig`, `appendShardingRelabelingWithLabel`).

use serde_yaml::{Mapping, Value as Yaml};

use super::{
    LabelSelector, MonitorContext, MonitorError, MonitorRelabelConfig, ScrapeClass,
    sanitize_label_name,
};
use crate::relabel::{RelabelConfig, validate_all};

/// One rule under construction, keys in the operator's order.
#[derive(Default)]
pub(super) struct Rule(pub(super) Mapping);

impl Rule {
    pub(super) fn set(mut self, k: &str, v: &str) -> Self {
        self.0.insert(k.into(), v.into());
        self
    }
    pub(super) fn action(self, a: &str) -> Self {
        self.set("action", a)
    }
    pub(super) fn source<S: AsRef<str>>(mut self, labels: &[S]) -> Self {
        let seq = labels.iter().map(|l| Yaml::from(l.as_ref())).collect();
        self.0.insert("source_labels".into(), Yaml::Sequence(seq));
        self
    }
    pub(super) fn regex(self, r: &str) -> Self {
        self.set("regex", r)
    }
    pub(super) fn target(self, t: &str) -> Self {
        self.set("target_label", t)
    }
    pub(super) fn replacement(self, r: &str) -> Self {
        self.set("replacement", r)
    }
}

/// Rules accumulated for one job, with the error context.
pub(super) struct Rules<'a> {
    pub(super) rules: Vec<Yaml>,
    /// What some rules stand for (see [`super::RuleNote`]), by rule index.
    pub(super) notes: Vec<(usize, super::RuleNote)>,
    pub(super) err: &'a dyn Fn(String, String) -> MonitorError,
}

impl Rules<'_> {
    pub(super) fn push(&mut self, r: Rule) {
        self.rules.push(Yaml::Mapping(r.0));
    }

    /// `initRelabelings`.
    pub(super) fn init(&mut self) {
        self.push(
            Rule::default()
                .source(&["job"])
                .target("__tmp_prometheus_job_name"),
        );
    }

    /// `generateRunningFilter`.
    pub(super) fn running_filter(&mut self) {
        self.notes
            .push((self.rules.len(), super::RuleNote::RunningFilter));
        self.push(
            Rule::default()
                .action("drop")
                .source(&["__meta_kubernetes_pod_phase"])
                .regex("(Failed|Succeeded)"),
        );
    }

    /// The selector as keep/drop rules on `__meta_kubernetes_<object>_label[present]_<key>`, after
    /// checking it as the operator does (`LabelSelectorAsSelector`: a monitor with an invalid
    /// selector is rejected). `exact`: the values are matched literally, as a selector matches
    /// them; the operator's own rules (`exact` false) put them into the regex as they are, so a `.`
    /// in a value matches any character there.
    pub(super) fn selector(
        &mut self,
        sel: &LabelSelector,
        object: &str,
        field: &str,
        exact: bool,
    ) -> Result<(), MonitorError> {
        let value = |v: &str| {
            if exact {
                regex::escape(v)
            } else {
                v.to_owned()
            }
        };
        let label = |k: &str| {
            format!(
                "__meta_kubernetes_{object}_label_{}",
                sanitize_label_name(k)
            )
        };
        let present = |k: &str| {
            format!(
                "__meta_kubernetes_{object}_labelpresent_{}",
                sanitize_label_name(k)
            )
        };
        let note = |requirement: String| super::RuleNote::Selector {
            field: field.to_owned(),
            object: object.to_owned(),
            requirement,
        };
        for (k, v) in &sel.match_labels {
            self.notes
                .push((self.rules.len(), note(format!("matchLabels: {k}={v}"))));
            self.push(
                Rule::default()
                    .action("keep")
                    .source(&[label(k), present(k)])
                    .regex(&format!("({});true", value(v))),
            );
        }
        for (i, exp) in sel.match_expressions.iter().enumerate() {
            let k = &exp.key;
            let values: Vec<String> = exp.values.iter().map(|v| value(v)).collect();
            let values = values.join("|");
            let rule = match exp.operator.as_str() {
                "In" => Rule::default()
                    .action("keep")
                    .source(&[label(k), present(k)])
                    .regex(&format!("({values});true")),
                "NotIn" => Rule::default()
                    .action("drop")
                    .source(&[label(k), present(k)])
                    .regex(&format!("({values});true")),
                "Exists" => Rule::default()
                    .action("keep")
                    .source(&[present(k)])
                    .regex("true"),
                "DoesNotExist" => Rule::default()
                    .action("drop")
                    .source(&[present(k)])
                    .regex("true"),
                other => {
                    return Err((self.err)(
                        format!("{field}.matchExpressions[{i}].operator"),
                        format!("{other:?} is not one of In, NotIn, Exists, DoesNotExist"),
                    ));
                }
            };
            let requirement = format!(
                "matchExpressions[{i}]: {k} {} ({})",
                exp.operator,
                exp.values.join(",")
            );
            self.notes.push((self.rules.len(), note(requirement)));
            self.push(rule);
        }
        let expressions = sel
            .match_expressions
            .iter()
            .map(|e| (e.key.as_str(), e.operator.as_str(), e.values.as_slice()));
        kube_selectors::LabelSelector::from_parts(&sel.match_labels, expressions)
            .map_err(|e| (self.err)(field.to_owned(), e.to_string()))?;
        Ok(())
    }

    /// `<source>` copied to `<target>` when not empty (target labels, pod target labels, jobLabel).
    pub(super) fn copy_if_set(&mut self, source: &str, target: &str) {
        self.push(
            Rule::default()
                .source(&[source])
                .target(target)
                .regex("(.+)")
                .replacement("${1}"),
        );
    }

    /// The monitor's `relabelings` and the enforced namespace label.
    pub(super) fn user(
        &mut self,
        rcs: &[MonitorRelabelConfig],
        field: &str,
        namespace: &str,
        ctx: &MonitorContext,
    ) -> Result<(), MonitorError> {
        self.rules
            .extend(user_rules(rcs, field, namespace, ctx, self.err)?);
        Ok(())
    }

    /// herald's own: where discovery attaches node metadata the job did not ask for, drop it
    /// (see [`MonitorContext::node_metadata_attached`]).
    pub(super) fn unasked_node_metadata(
        &mut self,
        ctx: &MonitorContext,
        attach: Option<crate::target::AttachMetadata>,
    ) {
        if ctx.node_metadata_attached && !attach.is_some_and(|a| a.node) {
            self.push(
                Rule::default()
                    .regex("__meta_kubernetes_node_.+")
                    .action("labeldrop"),
            );
        }
    }

    /// The scrape class's relabelings (validated with the class), before the monitor's own.
    pub(super) fn class(&mut self, class: Option<&ScrapeClass>) {
        for rc in class.iter().flat_map(|c| &c.relabelings) {
            self.rules.push(rc.to_yaml());
        }
    }

    /// `appendShardingRelabelingWithLabel` on `__address__`.
    pub(super) fn sharding(&mut self, ctx: &MonitorContext) -> Result<(), MonitorError> {
        let Some(sh) = ctx.sharding else {
            return Ok(());
        };
        if sh.shards == 0 {
            return Err(MonitorError::NoShards);
        }
        let shard = sh
            .shard
            .map_or_else(|| "$(SHARD)".to_owned(), |s| s.to_string());
        self.push(
            Rule::default()
                .source(&["__address__", "__tmp_hash"])
                .target("__tmp_hash")
                .regex("(.+);")
                .replacement("$1")
                .action("replace"),
        );
        let mut hashmod = Rule::default().source(&["__tmp_hash"]).target("__tmp_hash");
        hashmod
            .0
            .insert("modulus".into(), u64::from(sh.shards).into());
        self.push(hashmod.action("hashmod"));
        self.push(
            Rule::default()
                .source(&["__tmp_hash", "__tmp_disable_sharding"])
                .regex(&format!("{shard};|.+;.+"))
                .action("keep"),
        );
        Ok(())
    }

    pub(super) fn finish(self) -> Result<Vec<RelabelConfig>, MonitorError> {
        let configs = to_relabel_configs(&self.rules)
            .map_err(|(i, m)| (self.err)(format!("generated relabel_configs[{i}]"), m))?;
        validate_all(&configs)
            .map_err(|e| (self.err)("generated relabel_configs".into(), e.to_string()))?;
        Ok(configs)
    }
}

fn to_relabel_configs(rules: &[Yaml]) -> Result<Vec<RelabelConfig>, (usize, String)> {
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| serde_yaml::from_value(r.clone()).map_err(|e| (i, e.to_string())))
        .collect()
}

/// `generateRelabelConfig` of a monitor's `relabelings`/`metricRelabelings`, plus the enforced
/// namespace label, each checked as a Prometheus relabel rule.
pub(super) fn user_rules(
    rcs: &[MonitorRelabelConfig],
    field: &str,
    namespace: &str,
    ctx: &MonitorContext,
    err: &dyn Fn(String, String) -> MonitorError,
) -> Result<Vec<Yaml>, MonitorError> {
    let mut out = Vec::with_capacity(rcs.len() + 1);
    for (i, rc) in rcs.iter().enumerate() {
        let y = rc.to_yaml();
        let parsed: RelabelConfig = serde_yaml::from_value(y.clone())
            .map_err(|e| err(format!("{field}[{i}]"), e.to_string()))?;
        parsed
            .validate()
            .map_err(|e| err(format!("{field}[{i}]"), e.to_string()))?;
        out.push(y);
    }
    if let Some(label) = ctx
        .enforced_namespace_label
        .as_deref()
        .filter(|l| !l.is_empty())
    {
        out.push(Yaml::Mapping(
            Rule::default().target(label).replacement(namespace).0,
        ));
    }
    Ok(out)
}
