//! `explain`: for one object, every job that reads its kind and what it contributes there — the
//! targets with their final labels and shards, or the first reason it contributes none; for one
//! monitor, what it selects, what it nearly selects and what each of its endpoints serves.
//!
//! Nothing here decides a target's fate by itself: the job's filter (`JobFilter::admission`), the
//! index's groups, the relabel engine (`JobRelabel::apply_or_stop`, the loop serving runs), Istio's
//! placement (`IstioJob::targets`, `IstioJob::decision`) and the shard function (`hashmod`) are the
//! serving code's own, asked to say where a target stopped. Computed on request from the index
//! and the views; nothing is kept afterwards.
//!
//! Rooms: `answer` (the question and the answer), `object` and `monitor` (the two subjects),
//! `jobs` (what a job makes of an object's targets), `render` (the answer as text and HTML) and
//! `client` (asking a running herald).

mod answer;
pub mod client;
mod jobs;
mod monitor;
mod object;
pub mod render;

use std::collections::BTreeSet;

pub use answer::*;

use crate::shared::Shared;

/// Answers `q` from what `shared` serves now.
pub fn explain(shared: &Shared, q: &Query) -> Result<Explanation, ExplainError> {
    let mut counts: BTreeSet<u64> = shared
        .consumers
        .recent()
        .into_iter()
        .filter_map(|c| c.shard.map(|s| s.count))
        .collect();
    counts.extend(q.shards.iter().copied());
    let mut answer = Explanation {
        kind: q.kind.clone(),
        namespace: q.namespace.clone(),
        name: q.name.clone(),
        shard_counts: counts.into_iter().collect(),
        notes: vec![],
        jobs: vec![],
        monitor: None,
    };
    match q.subject {
        Subject::Object(kind) => object::explain_object(shared, q, kind, &mut answer)?,
        Subject::ServiceMonitor | Subject::PodMonitor => {
            monitor::explain_monitor(shared, q, &mut answer)?;
        }
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_index::WatchKind;

    fn q(pairs: &[(&str, &str)]) -> Result<Query, ExplainError> {
        Query::parse(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn param(r: Result<Query, ExplainError>) -> &'static str {
        match r {
            Err(ExplainError::BadParam { param, .. }) => param,
            other => panic!("a bad parameter, not {other:?}"),
        }
    }

    #[test]
    fn a_query_names_the_parameter_it_cannot_take() {
        assert_eq!(param(q(&[("namespace", "a"), ("name", "b")])), "kind");
        assert_eq!(
            param(q(&[
                ("kind", "Deployment"),
                ("namespace", "a"),
                ("name", "b")
            ])),
            "kind"
        );
        assert_eq!(param(q(&[("kind", "Pod"), ("name", "b")])), "namespace");
        assert_eq!(
            param(q(&[("kind", "Node"), ("namespace", "a"), ("name", "b")])),
            "namespace"
        );
        assert_eq!(param(q(&[("kind", "Pod"), ("namespace", "a")])), "name");
        for bad in ["0", "x", "2,", "1025"] {
            let r = q(&[
                ("kind", "Pod"),
                ("namespace", "a"),
                ("name", "b"),
                ("shards", bad),
            ]);
            assert_eq!(param(r), "shards", "{bad}");
        }
        assert_eq!(
            param(q(&[("kind", "Pod"), ("name", "b"), ("x", "1")])),
            "query"
        );
        let ok = q(&[("kind", "Node"), ("name", "n1"), ("shards", "2,4")]).expect("valid");
        assert_eq!(
            (ok.subject, ok.shards),
            (Subject::Object(WatchKind::Node), vec![2, 4])
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]
        /// Any query parses or is refused naming a parameter; never a panic.
        #[test]
        fn any_query_parses_or_names_a_parameter(
            params in proptest::collection::btree_map(
                "(kind|namespace|name|shards|[a-z]{0,3})",
                "(Pod|Node|ServiceMonitor|[ -~]{0,12}|[0-9,]{0,8})",
                0..5,
            )
        ) {
            match Query::parse(&params) {
                Ok(q) => proptest::prop_assert!(!q.name.is_empty()),
                Err(ExplainError::BadParam { param, message }) => {
                    proptest::prop_assert!(!message.is_empty(), "{param}");
                }
                Err(other) => proptest::prop_assert!(false, "{other}"),
            }
        }
    }

    #[test]
    fn a_reason_reads_back_from_its_json_as_the_table_shows_it() {
        let r = Reason::DroppedByRule {
            rule: 2,
            text: "{\"action\":\"drop\"}".into(),
            saw: [("a".to_string(), "1".to_string())].into(),
        };
        let v = serde_json::to_value(&r).expect("json");
        assert_eq!(v["reason"], "dropped_by_rule");
        assert_eq!(render::reason_line(&v), r.summary());
        assert!(r.summary().contains("rule 2"), "{}", r.summary());
    }
}
