//! Prometheus HTTP SD output: target groups flattened to one entry per target, encoded as the JSON
//! array `http_sd_configs` reads (<https://prometheus.io/docs/prometheus/latest/http_sd/>).

use serde::Serialize;

use crate::labels::ADDRESS;
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
