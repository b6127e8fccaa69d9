//! A target group pre-encoded as HTTP SD JSON: what the index keeps per object instead of label maps.
//! A response body is then the concatenation of its groups' fragments (a memcpy, not a re-encode), and
//! a shard is the subset of entries whose address it holds.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use herald_core::{TargetGroup, encode_http_sd, http_sd_entries};

/// One group's HTTP SD entries (`{"targets":["addr"],"labels":{..}}`, one per target), joined by `,`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fragment {
    json: Bytes,
    /// Each entry's target address and byte range in `json`, in order.
    entries: Vec<(Box<str>, Range<usize>)>,
}

impl Fragment {
    /// Encodes `group` with herald-core's HTTP SD encoding (so bodies are byte-equal to encoding the
    /// groups in one go).
    pub fn of(group: &TargetGroup) -> Fragment {
        let mut json = BytesMut::new();
        let mut entries = Vec::new();
        for entry in http_sd_entries(group) {
            // `encode_http_sd` of one entry is `[{...}]`: keep the object.
            let one = encode_http_sd([&entry]);
            let object = &one[1..one.len() - 1];
            if !json.is_empty() {
                json.extend_from_slice(b",");
            }
            let start = json.len();
            json.extend_from_slice(object);
            entries.push((entry.target.into_boxed_str(), start..json.len()));
        }
        // Copied once into an exact-size buffer: a grown buffer keeps up to twice its length, and
        // fragments are what herald's memory is mostly made of.
        entries.shrink_to_fit();
        Fragment {
            json: Bytes::copy_from_slice(&json),
            entries,
        }
    }

    /// Number of targets (entries).
    pub fn targets(&self) -> usize {
        self.entries.len()
    }

    /// The whole fragment: entries joined by `,` (empty without targets).
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// Each entry's target address and JSON object.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries
            .iter()
            .map(|(t, r)| (&**t, &self.json[r.clone()]))
    }
}

#[cfg(test)]
mod tests {
    use herald_core::LabelSet;

    use super::*;

    fn mk_group(addrs: &[&str]) -> TargetGroup {
        TargetGroup {
            source: "pod/default/p".into(),
            targets: addrs
                .iter()
                .map(|a| LabelSet::from([("__address__".to_string(), a.to_string())]))
                .collect(),
            labels: LabelSet::from([("g".to_string(), "v".to_string())]),
        }
    }

    #[test]
    fn a_fragment_is_the_group_s_encoding_without_brackets() {
        let g = mk_group(&["127.0.0.2:80", "[::1]:80"]);
        let f = Fragment::of(&g);
        let whole = encode_http_sd(&http_sd_entries(&g));
        assert_eq!(f.json(), &whole[1..whole.len() - 1]);
        assert_eq!(f.targets(), 2);
        let targets: Vec<&str> = f.entries().map(|(t, _)| t).collect();
        assert_eq!(targets, vec!["127.0.0.2:80", "[::1]:80"]);
        let (_, first) = f.entries().next().expect("an entry");
        let v: serde_json::Value =
            serde_json::from_slice(first).expect("an entry is a JSON object");
        assert_eq!(v["targets"][0], "127.0.0.2:80");
    }

    #[test]
    fn a_group_without_targets_is_an_empty_fragment() {
        let f = Fragment::of(&mk_group(&[]));
        assert!(f.json().is_empty());
        assert_eq!(f.targets(), 0);
    }
}
