//! A monitor's spec read against prometheus-operator's CRD schema (`crd_fields.txt`, written by
//! `crd_fields.py` from the operator's CRD manifests): the fields the schema does not have, and the
//! values whose type, pattern or enum it refuses.
//!
//! What the apiserver does with them, and so what herald does:
//! - a field the structural schema does not have is pruned (or refused, under kubectl's default
//!   strict field validation), so the operator never sees it and generates its config from the rest.
//!   herald serves the monitor without it too, and reports it by name: a typo'd field means the
//!   monitor does not do what its author thinks (`spec.selector.matchLabel` selects every Service).
//!   They reach herald from kube-sim, from clusters whose CRDs were installed without schemas, and
//!   from operators newer than this list;
//! - a value of the wrong type, or outside the field's pattern or enum, is refused with the whole
//!   object: herald does not serve the monitor (`interval: 15sec` would otherwise reach Prometheus,
//!   which refuses the whole `scrape_configs` file for it).
//!
//! NB: `null` is accepted everywhere (herald reads it as the field's default), and the schema's
//! `required`, `minimum` and CEL rules are not checked.

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;

use super::MonitorKind;

/// The generated field list.
const CRD_FIELDS: &str = include_str!("crd_fields.txt");

/// At most this many unknown fields are listed per monitor; the rest are counted.
const MAX_UNKNOWN: usize = 16;

/// What the schema allows at one path (`spec.endpoints[].port`).
#[derive(Debug)]
enum Node {
    Object,
    List,
    /// A map whose keys are free (`matchLabels`, `params`).
    Map,
    Leaf(Leaf),
}

/// A scalar field: its type and the pattern or values the apiserver checks.
#[derive(Debug)]
struct Leaf {
    kind: LeafKind,
    pattern: Option<Regex>,
    values: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
enum LeafKind {
    String,
    Boolean,
    Integer,
    IntOrString,
}

impl LeafKind {
    fn parse(s: &str) -> LeafKind {
        match s {
            "string" => LeafKind::String,
            "boolean" => LeafKind::Boolean,
            "integer" => LeafKind::Integer,
            "int-or-string" => LeafKind::IntOrString,
            other => panic!("crd_fields.txt: unknown type {other:?}"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            LeafKind::String => "a string",
            LeafKind::Boolean => "a boolean",
            LeafKind::Integer => "an integer",
            LeafKind::IntOrString => "an integer or a string",
        }
    }

    fn accepts(self, v: &Value) -> bool {
        match self {
            LeafKind::String => v.is_string(),
            LeafKind::Boolean => v.is_boolean(),
            LeafKind::Integer => v.is_i64() || v.is_u64(),
            LeafKind::IntOrString => v.is_string() || v.is_i64() || v.is_u64(),
        }
    }
}

/// The schema of one kind: every path, its prefixes included.
#[derive(Debug, Default)]
struct Schema(HashMap<String, Node>);

impl Schema {
    fn add(&mut self, path: &str, node: Node) {
        // Every prefix ending before `.` is an object, before `[]` a list.
        for (i, c) in path.char_indices() {
            let node = match c {
                '.' => Node::Object,
                '[' => Node::List,
                _ => continue,
            };
            self.0.entry(path[..i].to_owned()).or_insert(node);
        }
        self.0.insert(path.to_owned(), node);
    }
}

fn schemas() -> &'static [Schema; 2] {
    static SCHEMAS: OnceLock<[Schema; 2]> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut out = [Schema::default(), Schema::default()];
        for line in CRD_FIELDS.lines().filter(|l| !l.starts_with('#')) {
            let mut parts = line.splitn(4, ' ');
            let (Some(kind), Some(path)) = (parts.next(), parts.next()) else {
                panic!("crd_fields.txt: bad line {line:?}");
            };
            let schema = match kind {
                "ServiceMonitor" => &mut out[0],
                "PodMonitor" => &mut out[1],
                other => panic!("crd_fields.txt: unknown kind {other:?}"),
            };
            if let Some(map) = path.strip_suffix("{}") {
                schema.add(map, Node::Map);
                continue;
            }
            let kind = LeafKind::parse(parts.next().unwrap_or_default());
            let rest = parts.next().unwrap_or_default();
            let mut leaf = Leaf {
                kind,
                pattern: None,
                values: Vec::new(),
            };
            if let Some(p) = rest.strip_prefix("pattern ") {
                leaf.pattern = Some(Regex::new(p).expect("the CRD's patterns are RE2, as Rust's"));
            } else if let Some(v) = rest.strip_prefix("enum ") {
                leaf.values = v.split(' ').map(str::to_owned).collect();
            }
            schema.add(path, Node::Leaf(leaf));
        }
        out
    })
}

fn schema(kind: MonitorKind) -> &'static Schema {
    match kind {
        MonitorKind::ServiceMonitor => &schemas()[0],
        MonitorKind::PodMonitor => &schemas()[1],
    }
}

/// What the schema says about a monitor's spec.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Fields the schema does not have, by path (`spec.endpoints[0].prot`), at most
    /// `MAX_UNKNOWN`.
    pub unknown: Vec<String>,
    /// How many more there are.
    pub more_unknown: usize,
    /// Values it refuses: (path, why).
    pub invalid: Vec<(String, String)>,
}

/// Reads `obj.spec` against the CRD schema of `kind`.
pub fn check(obj: &Value, kind: MonitorKind) -> Findings {
    let mut out = Findings::default();
    if let Some(spec) = obj.get("spec") {
        walk(spec, "spec", "spec", schema(kind), &mut out);
    }
    if out.unknown.len() > MAX_UNKNOWN {
        out.more_unknown = out.unknown.len() - MAX_UNKNOWN;
        out.unknown.truncate(MAX_UNKNOWN);
    }
    out
}

/// `generic` is the schema path (`spec.endpoints[]`), `concrete` the object's (`spec.endpoints[0]`).
fn walk(v: &Value, generic: &str, concrete: &str, schema: &Schema, out: &mut Findings) {
    if v.is_null() {
        return;
    }
    let Some(node) = schema.0.get(generic) else {
        out.unknown.push(concrete.to_owned());
        return;
    };
    let wrong = |out: &mut Findings, what: &str| {
        out.invalid
            .push((concrete.to_owned(), format!("{v} is not {what}")));
    };
    match node {
        Node::Object => match v {
            Value::Object(map) => {
                for (k, child) in map {
                    let g = format!("{generic}.{k}");
                    let c = format!("{concrete}.{k}");
                    walk(child, &g, &c, schema, out);
                }
            }
            _ => wrong(out, "an object"),
        },
        Node::List => match v {
            Value::Array(items) => {
                let g = format!("{generic}[]");
                for (i, item) in items.iter().enumerate() {
                    walk(item, &g, &format!("{concrete}[{i}]"), schema, out);
                }
            }
            _ => wrong(out, "a list"),
        },
        Node::Map => {
            if !v.is_object() {
                wrong(out, "a map");
            }
        }
        Node::Leaf(leaf) => {
            if !leaf.kind.accepts(v) {
                wrong(out, leaf.kind.name());
                return;
            }
            let Some(s) = v.as_str() else {
                return;
            };
            if let Some(p) = &leaf.pattern
                && !p.is_match(s)
            {
                out.invalid.push((
                    concrete.to_owned(),
                    format!("{s:?} does not match the CRD's pattern {}", p.as_str()),
                ));
            }
            if !leaf.values.is_empty() && !leaf.values.iter().any(|a| a == s) {
                out.invalid.push((
                    concrete.to_owned(),
                    format!("{s:?} is not one of {}", leaf.values.join(", ")),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sm(spec: Value) -> Findings {
        check(&json!({"spec": spec}), MonitorKind::ServiceMonitor)
    }

    fn pm(spec: Value) -> Findings {
        check(&json!({"spec": spec}), MonitorKind::PodMonitor)
    }

    #[test]
    fn the_field_list_reads_and_knows_both_kinds() {
        let [service, pod] = schemas();
        assert!(matches!(
            service.0.get("spec.endpoints[].port"),
            Some(Node::Leaf(_))
        ));
        assert!(matches!(service.0.get("spec.endpoints"), Some(Node::List)));
        assert!(matches!(
            service.0.get("spec.endpoints[].tlsConfig"),
            Some(Node::Object)
        ));
        assert!(matches!(
            service.0.get("spec.selector.matchLabels"),
            Some(Node::Map)
        ));
        assert!(matches!(
            pod.0.get("spec.podMetricsEndpoints[].portNumber"),
            Some(Node::Leaf(_))
        ));
        assert!(!pod.0.contains_key("spec.endpoints"));
        assert!(
            !pod.0
                .contains_key("spec.podMetricsEndpoints[].tlsConfig.caFile")
        );
    }

    #[test]
    fn fields_the_crd_has_are_not_reported() {
        let f = sm(json!({
            "jobLabel": "app",
            "selector": {"matchLabels": {"app.kubernetes.io/name": "x", "anything": "goes"},
                         "matchExpressions": [{"key": "k", "operator": "In", "values": ["a"]}]},
            "namespaceSelector": {"any": true},
            "endpoints": [{
                "port": "web", "interval": "30s", "scrapeTimeout": "1m30s", "scheme": "HTTPS",
                "targetPort": 8080, "params": {"module": ["a"]},
                "tlsConfig": {"caFile": "/ca", "ca": {"secret": {"name": "s", "key": "k"}}},
                "relabelings": [{"action": "Keep", "sourceLabels": ["a"], "regex": "x"}],
                "proxyConnectHeader": {"X-Header": [{"name": "s", "key": "k"}]},
            }],
            "nativeHistogramMinBucketFactor": 2,
            "bodySizeLimit": "10MiB",
            "selectorMechanism": null,
        }));
        assert_eq!(f, Findings::default());
    }

    #[test]
    fn unknown_fields_are_named_by_their_path_at_any_depth() {
        let f = sm(json!({
            "endpoint": [{"port": "web"}],
            "selector": {"matchLabel": {"app": "x"}},
            "endpoints": [
                {"port": "web"},
                {"prot": "web", "tlsConfig": {"caFiel": "/ca"},
                 "relabelings": [{"sourceLabel": ["a"]}]},
            ],
        }));
        let mut unknown = f.unknown.clone();
        unknown.sort();
        assert_eq!(
            unknown,
            [
                "spec.endpoint",
                "spec.endpoints[1].prot",
                "spec.endpoints[1].relabelings[0].sourceLabel",
                "spec.endpoints[1].tlsConfig.caFiel",
                "spec.selector.matchLabel",
            ]
        );
        assert!(f.invalid.is_empty(), "{:?}", f.invalid);
    }

    #[test]
    fn fields_of_the_other_kind_are_unknown() {
        // A PodMonitor's TLS config has no file fields (SafeTLSConfig), nor a ServiceMonitor's
        // endpoint a portNumber.
        let f = pm(json!({"podMetricsEndpoints": [{"tlsConfig": {"caFile": "/ca"}}]}));
        assert_eq!(f.unknown, ["spec.podMetricsEndpoints[0].tlsConfig.caFile"]);
        let f = sm(json!({"endpoints": [{"portNumber": 8080}], "podMetricsEndpoints": []}));
        assert_eq!(
            f.unknown,
            ["spec.endpoints[0].portNumber", "spec.podMetricsEndpoints"]
        );
    }

    #[test]
    fn values_outside_the_type_pattern_or_enum_are_invalid() {
        let f = sm(json!({
            "endpoints": [{
                "interval": "15sec",
                "scrapeTimeout": 10,
                "scheme": "ftp",
                "honorLabels": "yes",
                "targetPort": true,
                "tlsConfig": {"minVersion": "TLS1.2"},
                "relabelings": [{"action": "KEEP"}],
            }],
            "nativeHistogramBucketLimit": "many",
            "scrapeProtocols": ["PrometheusProto", "JSON"],
            "bodySizeLimit": "10 MB",
            "selector": [],
        }));
        let mut got: Vec<String> = f.invalid.iter().map(|(p, m)| format!("{p}: {m}")).collect();
        got.sort();
        let want = [
            "spec.bodySizeLimit: \"10 MB\" does not match the CRD's pattern (^0|([0-9]*[.])?[0-9]+((K|M|G|T|E|P)i?)?B)$",
            "spec.endpoints[0].honorLabels: \"yes\" is not a boolean",
            "spec.endpoints[0].interval: \"15sec\" does not match the CRD's pattern ^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
            "spec.endpoints[0].relabelings[0].action: \"KEEP\" is not one of replace, Replace, keep, Keep, drop, Drop, hashmod, HashMod, labelmap, LabelMap, labeldrop, LabelDrop, labelkeep, LabelKeep, lowercase, Lowercase, uppercase, Uppercase, keepequal, KeepEqual, dropequal, DropEqual",
            "spec.endpoints[0].scheme: \"ftp\" is not one of http, https, HTTP, HTTPS",
            "spec.endpoints[0].scrapeTimeout: 10 is not a string",
            "spec.endpoints[0].targetPort: true is not an integer or a string",
            "spec.endpoints[0].tlsConfig.minVersion: \"TLS1.2\" is not one of TLS10, TLS11, TLS12, TLS13",
            "spec.nativeHistogramBucketLimit: \"many\" is not an integer",
            "spec.scrapeProtocols[1]: \"JSON\" is not one of PrometheusProto, OpenMetricsText0.0.1, OpenMetricsText1.0.0, PrometheusText0.0.4, PrometheusText1.0.0",
            "spec.selector: [] is not an object",
        ];
        assert_eq!(got, want);
        assert!(f.unknown.is_empty());
    }

    #[test]
    fn a_flood_of_unknown_fields_is_listed_up_to_a_bound() {
        let spec: serde_json::Map<String, Value> =
            (0..100).map(|i| (format!("f{i:03}"), json!(1))).collect();
        let f = sm(Value::Object(spec));
        assert_eq!(f.unknown.len(), MAX_UNKNOWN);
        assert_eq!(f.unknown[0], "spec.f000");
        assert_eq!(f.more_unknown, 100 - MAX_UNKNOWN);
    }
}
