//! Byte-level helpers for objects received as raw JSON: read what a store indexes (key,
//! resourceVersion, labels, field-selector values) without building a value tree, and cut
//! `metadata.managedFields` out of the bytes.
//!
//! NB: written by hand because a proxy handles every object of a cluster on every relist: decoding
//! each into a `serde_json::Value` and re-encoding it costs several times the object's size in
//! allocations, while these helpers borrow from the input and copy only what they keep.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};

use crate::log::Key;
use crate::packed::{Fields, Labels};
use crate::resource::Resource;

/// What a store indexes of one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub key: Key,
    pub rv: u64,
    pub labels: Labels,
    pub fields: Fields,
    /// FNV-1a of `metadata.uid` ("" when absent), for `Entry::uid_hash`.
    pub uid_hash: u64,
}

/// Why an object's head could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("not a JSON object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("object without metadata.name")]
    MissingName,
    #[error("metadata.resourceVersion {0:?} is not an unsigned integer")]
    BadResourceVersion(String),
}

#[derive(Deserialize, Default)]
struct RawMeta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uid: Option<Cow<'a, str>>,
    /// Read into a map only when wanted (`Wanted::labels`).
    #[serde(borrow, default)]
    labels: Option<&'a serde_json::value::RawValue>,
}

#[derive(Deserialize)]
struct RawHead<'a> {
    #[serde(borrow, default)]
    metadata: RawMeta<'a>,
}

/// The fields the apiserver lets field selectors read beyond metadata (see `Resource::extra_fields`).
#[derive(Deserialize, Default)]
struct RawSelectable<'a> {
    #[serde(borrow, default)]
    spec: Option<RawSpec<'a>>,
    #[serde(borrow, default)]
    status: Option<RawStatus<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawSpec<'a> {
    #[serde(borrow, default)]
    node_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    restart_policy: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    scheduler_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    service_account_name: Option<Cow<'a, str>>,
    #[serde(default)]
    host_network: Option<bool>,
    #[serde(default)]
    unschedulable: Option<bool>,
    #[serde(borrow, default, rename = "clusterIP")]
    cluster_ip: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "type")]
    type_: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawStatus<'a> {
    #[serde(borrow, default)]
    phase: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "podIP")]
    pod_ip: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    nominated_node_name: Option<Cow<'a, str>>,
}

/// Which parts of a head a store keeps besides the key and resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    pub labels: bool,
    pub fields: bool,
}

impl Wanted {
    pub const ALL: Wanted = Wanted {
        labels: true,
        fields: true,
    };
}

/// Reads an object's key, resourceVersion, labels and the resource's selectable fields.
pub fn head(resource: &Resource, raw: &[u8]) -> Result<Head, ScanError> {
    head_with(resource, raw, Wanted::ALL)
}

/// Reads an object's key and resourceVersion, and its labels and selectable fields when `want`
/// says so (left empty otherwise). NB: a store that serves no label or field selector on a resource
/// need not hold them: at 150,000 pods they are ~170 MB of maps and strings.
pub fn head_with(resource: &Resource, raw: &[u8], want: Wanted) -> Result<Head, ScanError> {
    let h: RawHead = serde_json::from_slice(raw)?;
    let name = h
        .metadata
        .name
        .filter(|n| !n.is_empty())
        .ok_or(ScanError::MissingName)?;
    let ns = match &h.metadata.namespace {
        Some(ns) if resource.namespaced => ns.as_ref(),
        _ => "",
    };
    let rv = match h.metadata.resource_version.as_deref() {
        None | Some("") => 0,
        Some(v) => v
            .parse()
            .map_err(|_| ScanError::BadResourceVersion(v.to_string()))?,
    };
    let labels = match h.metadata.labels {
        Some(l) if want.labels => serde_json::from_str::<Option<RawLabels>>(l.get())?
            .map_or_else(Labels::new, |l| Labels::from_pairs(l.0)),
        _ => Labels::new(),
    };
    let mut fields = Fields::default();
    if want.fields && !resource.extra_fields.is_empty() {
        let sel: RawSelectable = serde_json::from_slice(raw)?;
        let spec = sel.spec.unwrap_or_default();
        let status = sel.status.unwrap_or_default();
        fn s<'a>(v: &'a Option<Cow<str>>) -> &'a str {
            v.as_deref().unwrap_or("")
        }
        let bool = |v: Option<bool>| if v.unwrap_or(false) { "true" } else { "false" };
        let values: Vec<&str> = resource
            .extra_fields
            .iter()
            .map(|f| match *f {
                "spec.nodeName" => s(&spec.node_name),
                "spec.restartPolicy" => s(&spec.restart_policy),
                "spec.schedulerName" => s(&spec.scheduler_name),
                "spec.serviceAccountName" => s(&spec.service_account_name),
                "spec.hostNetwork" => bool(spec.host_network),
                "spec.unschedulable" => bool(spec.unschedulable),
                "spec.clusterIP" => s(&spec.cluster_ip),
                "spec.type" => s(&spec.type_),
                "status.phase" => s(&status.phase),
                "status.podIP" => s(&status.pod_ip),
                "status.nominatedNodeName" => s(&status.nominated_node_name),
                // Every field of `resource::BUILTINS` is read above (a test checks it).
                _ => "",
            })
            .collect();
        fields = Fields::new(resource.extra_fields, values);
    }
    Ok(Head {
        key: crate::log::key(ns, &name),
        rv,
        labels,
        fields,
        uid_hash: crate::shard::fnv1a64(h.metadata.uid.as_deref().unwrap_or("").as_bytes()),
    })
}

/// `metadata.labels` as read: (key, value) pairs borrowed from the input where no escape forbids it.
/// NB: read by hand to skip the map a derived reader would build and drop per object.
struct RawLabels<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de> Deserialize<'de> for RawLabels<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = RawLabels<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((k, v)) = map.next_entry::<CowStr, CowStr>()? {
                    pairs.push((k.0, v.0));
                }
                Ok(RawLabels(pairs))
            }
        }
        d.deserialize_map(Pairs)
    }
}

/// A string borrowed when it has no escapes (serde's `Cow<str>` always copies).
struct CowStr<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for CowStr<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct S;
        impl<'de> Visitor<'de> for S {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(S)
    }
}

/// The object without `metadata.managedFields` (often its largest part, and never read by a
/// list/watch consumer). Borrowed when there is nothing to cut; unchanged when the bytes are not a
/// JSON object.
pub fn strip_managed_fields(raw: &[u8]) -> Cow<'_, [u8]> {
    const NEEDLE: &[u8] = b"\"managedFields\"";
    if !raw.windows(NEEDLE.len()).any(|w| w == NEEDLE) {
        return Cow::Borrowed(raw);
    }
    match member_span(raw, 0, b"metadata")
        .and_then(|(_, meta_value)| member_span(raw, meta_value.0, b"managedFields"))
    {
        Some((member, _)) => {
            let mut out = Vec::with_capacity(raw.len());
            out.extend_from_slice(&raw[..member.0]);
            out.extend_from_slice(&raw[member.1..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(raw),
    }
}

/// Replaces `metadata.resourceVersion` (the whole member's value) with `rv`: the apiserver stamps a
/// DELETED event's object with the deletion's version.
pub fn with_resource_version(raw: &[u8], rv: u64) -> Option<Vec<u8>> {
    let (_, meta) = member_span(raw, 0, b"metadata")?;
    let (_, value) = member_span(raw, meta.0, b"resourceVersion")?;
    let mut out = Vec::with_capacity(raw.len() + 8);
    out.extend_from_slice(&raw[..value.0]);
    out.extend_from_slice(format!("\"{rv}\"").as_bytes());
    out.extend_from_slice(&raw[value.1..]);
    Some(out)
}

type Span = (usize, usize);

/// In the object starting at `at` (whitespace allowed before it), finds the member named `name`.
/// Returns the span to cut to remove the member (with one adjacent comma) and the span of its value.
fn member_span(b: &[u8], at: usize, name: &[u8]) -> Option<(Span, Span)> {
    let mut i = skip_ws(b, at);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut prev_end = i; // end of the previous member's value (or just after '{')
    let mut first = true;
    loop {
        i = skip_ws(b, i);
        match b.get(i)? {
            b'}' => return None,
            b',' if !first => i = skip_ws(b, i + 1),
            _ if first => {}
            _ => return None,
        }
        let key_start = i;
        let key_end = skip_string(b, i)?;
        let key = &b[key_start + 1..key_end - 1];
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(b, i + 1);
        let value_end = skip_value(b, value_start)?;
        if key == name {
            // Cut from the end of the previous member (taking its comma) or, for the first member,
            // up to the next comma.
            let cut = if first {
                let after = skip_ws(b, value_end);
                if b.get(after) == Some(&b',') {
                    (key_start, after + 1)
                } else {
                    (key_start, value_end)
                }
            } else {
                (prev_end, value_end)
            };
            return Some((cut, (value_start, value_end)));
        }
        prev_end = value_end;
        first = false;
        i = value_end;
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        i += 1;
    }
    i
}

/// `i` at an opening quote; returns the index after the closing one.
fn skip_string(b: &[u8], mut i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    i += 1;
    loop {
        match b.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// `i` at the start of a value; returns the index after it.
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = skip_string(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while !matches!(
                b.get(j),
                None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
            ) {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(s: &str) -> String {
        String::from_utf8(strip_managed_fields(s.as_bytes()).into_owned()).expect("utf8")
    }

    #[test]
    fn managed_fields_are_cut_wherever_they_sit_in_metadata() {
        let mf = r#"[{"manager":"kubectl","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:a\"}":{}}}}}]"#;
        for (input, want) in [
            (
                format!(
                    r#"{{"metadata":{{"name":"a","managedFields":{mf},"uid":"u"}},"spec":{{}}}}"#
                ),
                r#"{"metadata":{"name":"a","uid":"u"},"spec":{}}"#,
            ),
            (
                format!(r#"{{"metadata":{{"managedFields":{mf},"name":"a"}}}}"#),
                r#"{"metadata":{"name":"a"}}"#,
            ),
            (
                format!(r#"{{"metadata":{{"name":"a", "managedFields" : {mf} }}}}"#),
                r#"{"metadata":{"name":"a" }}"#,
            ),
            (
                format!(r#"{{"metadata":{{"managedFields":{mf}}}}}"#),
                r#"{"metadata":{}}"#,
            ),
        ] {
            let got = strip(&input);
            assert_eq!(got, want);
            serde_json::from_str::<serde_json::Value>(&got).expect("still valid JSON");
        }
        // a label value that mentions managedFields is not metadata.managedFields
        let tricky = r#"{"metadata":{"name":"a","labels":{"x":"\"managedFields\""}}}"#;
        assert_eq!(strip(tricky), tricky);
        assert_eq!(
            strip("not json \"managedFields\""),
            "not json \"managedFields\""
        );
    }

    #[test]
    fn heads_read_key_version_labels_and_pod_fields() {
        let pods = Resource::builtin("pods").expect("pods");
        let raw = br#"{"kind":"Pod","metadata":{"name":"web-1","namespace":"prod","resourceVersion":"42",
            "labels":{"app":"web"}},"spec":{"nodeName":"n1","containers":[]},"status":{"phase":"Running"}}"#;
        let h = head(&pods, raw).expect("valid");
        assert_eq!(h.key, crate::log::key("prod", "web-1"));
        assert_eq!(h.rv, 42);
        assert_eq!(h.labels.get("app"), Some("web"));
        assert_eq!(h.fields.get("spec.nodeName"), Some("n1"));
        assert_eq!(h.fields.get("status.phase"), Some("Running"));
        assert_eq!(h.fields.get("spec.hostNetwork"), Some("false"));
        assert_eq!(h.fields.get("status.podIP"), Some(""));
        assert!(matches!(
            head(&pods, br#"{"metadata":{"namespace":"a"}}"#),
            Err(ScanError::MissingName)
        ));
        assert!(matches!(
            head(&pods, br#"{"metadata":{"name":"a","resourceVersion":"x"}}"#),
            Err(ScanError::BadResourceVersion(_))
        ));
        assert!(head(&pods, b"[1,2]").is_err());

        let bare = head_with(
            &pods,
            raw,
            Wanted {
                labels: false,
                fields: false,
            },
        )
        .expect("valid");
        assert_eq!((bare.key, bare.rv), (h.key.clone(), 42));
        assert!(bare.labels.is_empty() && bare.fields.is_empty());
        assert!(
            head(&pods, br#"{"metadata":{"name":"a","labels":{"x":1}}}"#).is_err(),
            "wanted labels are type-checked"
        );
    }

    #[test]
    fn labels_read_as_a_map_reads_them() {
        let pods = Resource::builtin("pods").expect("pods");
        let raw = br#"{"metadata":{"name":"a","labels":{"b":"2","a\/x":"\u0031","b":"3","":""}}}"#;
        let h = head(&pods, raw).expect("valid");
        let json: serde_json::Value = serde_json::from_slice(raw).expect("json");
        let map: std::collections::BTreeMap<String, String> =
            serde_json::from_value(json["metadata"]["labels"].clone()).expect("map");
        assert_eq!(h.labels.to_map(), map);
        assert_eq!(h.labels.get("a/x"), Some("1"));
        assert_eq!(h.labels.get("b"), Some("3"));
        for none in [
            br#"{"metadata":{"name":"a","labels":null}}"#.as_slice(),
            br#"{"metadata":{"name":"a","labels":{}}}"#,
            br#"{"metadata":{"name":"a"}}"#,
        ] {
            assert!(head(&pods, none).expect("valid").labels.is_empty());
        }
        assert!(head(&pods, br#"{"metadata":{"name":"a","labels":{"x":null}}}"#).is_err());
    }

    #[test]
    fn every_builtin_extra_field_is_read() {
        // A pod with every field set to a value distinct from the default "": a field `head`
        // does not read would come back empty.
        let raw = br#"{"metadata":{"name":"a"},"spec":{"nodeName":"x","restartPolicy":"x",
            "schedulerName":"x","serviceAccountName":"x","hostNetwork":true,"unschedulable":true,
            "clusterIP":"x","type":"x"},"status":{"phase":"x","podIP":"x","nominatedNodeName":"x"}}"#;
        for plural in ["pods", "nodes", "namespaces", "services"] {
            let r = Resource::builtin(plural).expect("builtin");
            let h = head(&r, raw).expect("valid");
            assert_eq!(h.fields.iter().len(), r.extra_fields.len());
            for (f, v) in h.fields.iter() {
                assert!(!v.is_empty(), "{plural} {f}");
            }
        }
    }

    #[test]
    fn deleted_objects_get_the_deletion_version() {
        let raw = br#"{"metadata":{"name":"a","resourceVersion":"7"},"x":1}"#;
        let out = with_resource_version(raw, 9).expect("has a version");
        assert_eq!(
            out,
            br#"{"metadata":{"name":"a","resourceVersion":"9"},"x":1}"#
        );
    }
}
