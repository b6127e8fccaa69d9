//! A target group pre-encoded as HTTP SD JSON: what the index keeps per object instead of label maps.
//! A response body is then the concatenation of its groups' fragments (a memcpy, not a re-encode), and
//! a shard is the subset of entries whose address it holds.

use std::ops::Range;

use std::cmp::Ordering;

use bytes::Bytes;
use herald_core::{LabelSet, TargetGroup};

/// Prometheus's address label (`model.AddressLabel`).
const ADDRESS: &str = "__address__";

/// One group's HTTP SD entries (`{"targets":["addr"],"labels":{..}}`, one per target), joined by `,`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fragment {
    json: Bytes,
    /// Each entry's target address and byte range in `json`, in order.
    entries: Vec<(Box<str>, Range<usize>)>,
}

impl Fragment {
    /// Encodes `group` as herald-core's `encode_http_sd(http_sd_entries(group))` would, byte for byte
    /// (tests hold it to that), but straight from the group: no per-target copy of the group's labels,
    /// which at 150,000 pods is most of a relist's allocations.
    pub fn of(group: &TargetGroup) -> Fragment {
        let mut json = Vec::new();
        let mut entries = Vec::new();
        for target in &group.targets {
            // A target without an address is skipped, as `http_sd_entries` (and Prometheus) do.
            let Some(address) = target.get(ADDRESS) else {
                continue;
            };
            if !json.is_empty() {
                json.push(b',');
            }
            let start = json.len();
            write_entry(&mut json, address, &group.labels, target);
            entries.push((address.as_str().into(), start..json.len()));
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

/// `{"targets":["ADDRESS"],"labels":{...}}` with the group's labels overlaid by the target's (the
/// target wins; its `__address__` is not a label), keys in byte order.
fn write_entry(out: &mut Vec<u8>, address: &str, group: &LabelSet, target: &LabelSet) {
    out.extend_from_slice(br#"{"targets":["#);
    write_str(out, address);
    out.extend_from_slice(br#"],"labels":{"#);
    let mut from_group = group.iter().peekable();
    let mut from_target = target.iter().filter(|(k, _)| *k != ADDRESS).peekable();
    let mut first = true;
    loop {
        let (k, v) = match (from_group.peek(), from_target.peek()) {
            (None, None) => break,
            (Some(_), None) => from_group.next(),
            (None, Some(_)) => from_target.next(),
            (Some((gk, _)), Some((tk, _))) => match gk.cmp(tk) {
                Ordering::Less => from_group.next(),
                Ordering::Greater => from_target.next(),
                Ordering::Equal => {
                    from_group.next();
                    from_target.next()
                }
            },
        }
        .expect("peeked");
        if !first {
            out.push(b',');
        }
        first = false;
        write_str(out, k);
        out.push(b':');
        write_str(out, v);
    }
    out.extend_from_slice(b"}}");
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("writing a string to a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    use herald_core::{encode_http_sd, http_sd_entries};

    use super::*;

    fn ls(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn fragments_are_byte_equal_to_herald_core_s_encoding() {
        let group = TargetGroup {
            source: "x".into(),
            targets: vec![
                ls(&[
                    ("__address__", "127.0.0.2:80"),
                    ("b", "target"),
                    ("d", "only \"t\""),
                ]),
                ls(&[("__address__", "[::1]:80"), ("a", "t-a"), ("z", "\u{e9}\n")]),
                ls(&[("no", "address")]),
                ls(&[("__address__", "127.0.0.3:80")]),
            ],
            labels: ls(&[("a", "g-a"), ("b", "g-b"), ("c", "g\\c")]),
        };
        let whole = encode_http_sd(&http_sd_entries(&group));
        let f = Fragment::of(&group);
        assert_eq!(f.json(), &whole[1..whole.len() - 1]);
        assert_eq!(f.targets(), 3);
    }

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
