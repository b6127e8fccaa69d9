//! Label helpers shared by every role: name sanitizing, `host:port` joining and the object-metadata,
//! node and namespace label families of prometheus/prometheus `discovery/kubernetes/kubernetes.go`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::target::{LabelSet, Lookup};

/// Prefix of every label kubernetes_sd sets (`model.MetaLabelPrefix + "kubernetes_"`).
pub const META: &str = "__meta_kubernetes_";
/// `model.AddressLabel`.
pub const ADDRESS: &str = "__address__";
/// `__meta_kubernetes_namespace`, set by every namespaced role.
pub const NAMESPACE: &str = "__meta_kubernetes_namespace";

/// Prometheus's `strutil.SanitizeLabelName` (util/strutil/strconv.go): every character outside
/// `[a-zA-Z0-9_]` becomes `_`. NB: unlike `SanitizeFullLabelName` a leading digit is kept and an
/// empty name stays empty; a multi-byte character becomes a single `_` (Go's regexp works on runes).
pub fn sanitize_label_name(name: &str) -> String {
    // Most names need no change: copy them whole.
    if name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return name.to_string();
    }
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `__meta_kubernetes_` followed by `parts`. NB: built by hand, not with `format!`: a label name is
/// built for every label and annotation of every object on each rebuild, and the formatting
/// machinery cost ~5 % of herald's first sync at `k8s-limits`.
pub fn meta_name(parts: &[&str]) -> String {
    let mut s = String::with_capacity(META.len() + parts.iter().map(|p| p.len()).sum::<usize>());
    s.push_str(META);
    for p in parts {
        s.push_str(p);
    }
    s
}

/// Go's `net.JoinHostPort`: brackets around a host that contains a colon (an IPv6 address).
pub fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A port as `strconv.FormatUint(uint64(p), 10)` prints it, which the pod and endpoints roles use.
/// NB: a negative int32 sign-extends to a huge uint64 in Go; we reproduce that rather than print `-1`.
pub fn format_port_unsigned(port: i32) -> String {
    (i64::from(port) as u64).to_string()
}

/// Insert `key=value`.
pub fn set(ls: &mut LabelSet, key: impl Into<String>, value: impl Into<String>) {
    ls.insert(key.into(), value.into());
}

/// `model.LabelSet.Merge`: `other` wins on conflicts.
pub fn merge(ls: &mut LabelSet, other: LabelSet) {
    ls.extend(other);
}

fn empty_map() -> &'static BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    &EMPTY
}

/// `addObjectAnnotationsAndLabels`: `<resource>_label_<name>`, `<resource>_labelpresent_<name>` and the
/// same for annotations, with sanitized names.
pub fn add_annotations_and_labels(ls: &mut LabelSet, meta: &ObjectMeta, resource: &str) {
    for (k, v) in meta.labels.as_ref().unwrap_or_else(|| empty_map()) {
        let ln = sanitize_label_name(k);
        set(ls, meta_name(&[resource, "_label_", &*ln]), v.clone());
        set(ls, meta_name(&[resource, "_labelpresent_", &*ln]), "true");
    }
    for (k, v) in meta.annotations.as_ref().unwrap_or_else(|| empty_map()) {
        let ln = sanitize_label_name(k);
        set(ls, meta_name(&[resource, "_annotation_", &*ln]), v.clone());
        set(
            ls,
            meta_name(&[resource, "_annotationpresent_", &*ln]),
            "true",
        );
    }
}

/// `addObjectMetaLabels`: `<role>_name` plus labels and annotations.
pub fn add_object_meta_labels(ls: &mut LabelSet, meta: &ObjectMeta, role: &str) {
    set(ls, meta_name(&[role, "_name"]), name_of(meta));
    add_annotations_and_labels(ls, meta, role);
}

/// `addNodeLabels` (discovery/kubernetes/endpoints.go): the node's name, labels and annotations when the
/// node is known; nothing otherwise.
pub fn add_node_labels(ls: &mut LabelSet, lookup: &dyn Lookup, node_name: &str) {
    if let Some(node) = lookup.node(node_name) {
        add_object_meta_labels(ls, &node.metadata, "node");
    }
}

/// `addNamespaceLabels`: the namespace's labels and annotations (its name is already in
/// `__meta_kubernetes_namespace`) when the namespace is known.
pub fn add_namespace_labels(ls: &mut LabelSet, lookup: &dyn Lookup, namespace: &str) {
    if let Some(ns) = lookup.namespace(namespace) {
        add_annotations_and_labels(ls, &ns.metadata, "namespace");
    }
}

/// `metadata.name`, empty when unset (Go's zero value).
pub fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("")
}

/// `metadata.namespace`, empty when unset.
pub fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("")
}

/// `<kind>/<namespace>/<name>`, the `source` of a namespaced object's group.
pub fn namespaced_source(kind: &str, meta: &ObjectMeta) -> String {
    format!("{kind}/{}/{}", namespace_of(meta), name_of(meta))
}

/// `GetControllerOf` (discovery/kubernetes/pod.go): the first owner reference marked `controller: true`.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Go's `strconv.FormatBool`.
pub fn bool_str(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_replaces_every_character_outside_the_label_alphabet() {
        assert_eq!(sanitize_label_name("test/label"), "test_label");
        assert_eq!(
            sanitize_label_name("app.kubernetes.io/name"),
            "app_kubernetes_io_name"
        );
        assert_eq!(sanitize_label_name("0abc_DEF"), "0abc_DEF");
        assert_eq!(sanitize_label_name("ünï"), "_n_");
        assert_eq!(sanitize_label_name(""), "");
    }

    #[test]
    fn join_host_port_brackets_ipv6_hosts_only() {
        assert_eq!(join_host_port("1.2.3.4", "80"), "1.2.3.4:80");
        assert_eq!(join_host_port("2001:db8::1", "80"), "[2001:db8::1]:80");
        assert_eq!(join_host_port("example.com", "443"), "example.com:443");
    }

    #[test]
    fn negative_ports_print_as_go_formats_a_sign_extended_uint64() {
        assert_eq!(format_port_unsigned(9000), "9000");
        assert_eq!(format_port_unsigned(-1), "18446744073709551615");
    }
}
