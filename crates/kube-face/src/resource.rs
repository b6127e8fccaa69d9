//! What a server serves: each resource's API coordinates (group, version, plural, kind, scope, short
//! names) and the field selectors the apiserver supports on it. Built-in resources come from a table
//! that mirrors the apiserver's discovery; custom resources are described by group/version/plural.

/// The field selectors of every resource (k8s.io/apiserver pkg/registry/generic `ObjectMetaFieldsSet`).
const META_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

/// One served resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// API group, "" for core.
    pub group: String,
    pub version: String,
    /// The `kind` field of its objects.
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// Field selectors supported beyond `metadata.name` and `metadata.namespace`, as the apiserver's
    /// field label conversion functions allow them.
    pub extra_fields: &'static [&'static str],
}

/// (group, version, kind, plural, namespaced, short names, extra field selectors) of the built-in
/// resources, as the apiserver's discovery reports them. Field selectors: kubernetes
/// pkg/registry/core/pod/strategy.go `PodToSelectableFields`, node/strategy.go `NodeToSelectableFields`,
/// namespace/strategy.go `NamespaceToSelectableFields`, service/strategy.go `SelectableFields`
/// (`spec.clusterIP`, `spec.type`: kube-proxy lists Services with `spec.clusterIP!=None`).
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    &'static [&'static str],
);
const BUILTINS: &[Builtin] = &[
    (
        "",
        "v1",
        "Namespace",
        "namespaces",
        false,
        &["ns"],
        &["status.phase"],
    ),
    (
        "",
        "v1",
        "Node",
        "nodes",
        false,
        &["no"],
        &["spec.unschedulable"],
    ),
    ("", "v1", "ConfigMap", "configmaps", true, &["cm"], &[]),
    (
        "",
        "v1",
        "Service",
        "services",
        true,
        &["svc"],
        &["spec.clusterIP", "spec.type"],
    ),
    (
        "",
        "v1",
        "Pod",
        "pods",
        true,
        &["po"],
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
    ),
    ("", "v1", "Endpoints", "endpoints", true, &["ep"], &[]),
    (
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        &["sa"],
        &[],
    ),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true,
        &[],
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        true,
        &["ing"],
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false,
        &[],
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "ServiceCIDR",
        "servicecidrs",
        false,
        &[],
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
        &["netpol"],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        &[],
        &[],
    ),
    (
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        &["deploy"],
        &[],
    ),
    ("apps", "v1", "DaemonSet", "daemonsets", true, &["ds"], &[]),
    (
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        true,
        &["sts"],
        &[],
    ),
    (
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        true,
        &["rs"],
        &[],
    ),
    (
        "monitoring.coreos.com",
        "v1",
        "ServiceMonitor",
        "servicemonitors",
        true,
        &["smon"],
        &[],
    ),
    (
        "monitoring.coreos.com",
        "v1",
        "PodMonitor",
        "podmonitors",
        true,
        &["pmon"],
        &[],
    ),
    (
        "monitoring.coreos.com",
        "v1",
        "Prometheus",
        "prometheuses",
        true,
        &["prom"],
        &[],
    ),
    (
        "security.istio.io",
        "v1",
        "PeerAuthentication",
        "peerauthentications",
        true,
        &["pa"],
        &[],
    ),
];

impl Resource {
    /// A built-in resource by plural name (`pods`) or `plural.group` (`ingresses.networking.k8s.io`).
    pub fn builtin(name: &str) -> Option<Resource> {
        let (plural, group) = match name.split_once('.') {
            Some((p, g)) => (p, Some(g)),
            None => (name, None),
        };
        BUILTINS
            .iter()
            .find(|b| b.3 == plural && group.is_none_or(|g| b.0 == g))
            .map(|b| Resource {
                group: b.0.into(),
                version: b.1.into(),
                kind: b.2.into(),
                plural: b.3.into(),
                singular: singular_of(b.2),
                namespaced: b.4,
                short_names: b.5.iter().map(|s| s.to_string()).collect(),
                extra_fields: b.6,
            })
    }

    /// The object of a BOOKMARK event at `rv` (with the `k8s.io/initial-events-end` annotation when
    /// `initial_end`), as JSON, written as the apiserver writes it: the empty object of the kind,
    /// with only its resourceVersion and annotations set (k8s.io/apiserver pkg/storage/cacher
    /// `cacheWatcher`'s bookmark, `newFunc()` converted to the served version and encoded by Go's JSON).
    /// A built-in kind's empty object keeps its non-omitempty fields (a Pod's `"spec":{"containers":
    /// null},"status":{}`); see `bookmark_extras`. A custom resource's is unstructured: kind,
    /// apiVersion and metadata only.
    pub fn bookmark_object(&self, rv: u64, initial_end: bool) -> String {
        let (annotation, fields) = bookmark_extras(&self.group, &self.kind);
        let annotations = match (annotation, initial_end) {
            ("", false) => String::new(),
            ("", true) => r#","annotations":{"k8s.io/initial-events-end":"true"}"#.to_string(),
            (a, false) => format!(r#","annotations":{{{a}}}"#),
            // NB: Go writes a map's keys sorted, and the conversion's annotation sorts first.
            (a, true) => format!(r#","annotations":{{{a},"k8s.io/initial-events-end":"true"}}"#),
        };
        format!(
            r#"{{"kind":"{}","apiVersion":"{}","metadata":{{"resourceVersion":"{rv}"{annotations}}}{fields}}}"#,
            self.kind,
            self.api_version()
        )
    }

    /// Whether the apiserver serves this kind itself (typed), not as a custom resource
    /// (unstructured): the items of a typed kind's JSON list carry no kind or apiVersion, a custom
    /// resource's keep theirs. Kubernetes' own groups are the core group, the dotless legacy ones
    /// (`apps`, `batch`, `policy`, ...) and `*.k8s.io`; the custom resources kube-face knows
    /// (`monitoring.coreos.com`, `security.istio.io`) are not.
    pub fn is_typed(&self) -> bool {
        !self.group.contains('.') || self.group.ends_with(".k8s.io")
    }

    /// A custom resource, stored and served as raw objects.
    pub fn custom(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
    ) -> Resource {
        Resource {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: singular_of(kind),
            namespaced,
            short_names: vec![],
            extra_fields: &[],
        }
    }

    /// `apiVersion` as written in objects: `v1` or `group/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The URL prefix of its group version: `/api/v1` or `/apis/{group}/{version}`.
    pub fn gv_path(&self) -> String {
        if self.group.is_empty() {
            format!("api/{}", self.version)
        } else {
            format!("apis/{}/{}", self.group, self.version)
        }
    }

    /// Whether a field selector may name `field` on this resource.
    pub fn supports_field(&self, field: &str) -> bool {
        META_FIELDS.contains(&field) || self.extra_fields.contains(&field)
    }

    /// `plural` or `plural.group`, as users name it.
    pub fn qualified_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

fn singular_of(kind: &str) -> String {
    kind.to_ascii_lowercase()
}

/// An index into a [`Catalog`].
pub type ResId = usize;

/// The resources a server serves, and whether it takes writes.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub resources: Vec<Resource>,
    /// Verbs advertised in discovery: read-only servers offer get/list/watch only.
    pub writable: bool,
}

impl Catalog {
    pub fn get(&self, id: ResId) -> &Resource {
        &self.resources[id]
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<ResId> {
        self.resources
            .iter()
            .position(|r| r.group == group && r.version == version && r.plural == plural)
    }

    pub fn find_plural(&self, group: &str, plural: &str) -> Option<ResId> {
        self.resources
            .iter()
            .position(|r| r.group == group && r.plural == plural)
    }

    /// Served group names (without core), in first-served order.
    pub fn groups(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in &self.resources {
            if !r.group.is_empty() && !out.contains(&r.group.as_str()) {
                out.push(&r.group);
            }
        }
        out
    }

    /// Served versions of a group ("" for core).
    pub fn versions(&self, group: &str) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in self.resources.iter().filter(|r| r.group == group) {
            if !out.contains(&r.version.as_str()) {
                out.push(&r.version);
            }
        }
        out
    }
}

/// What the apiserver's bookmark object of a built-in kind holds besides `kind`, `apiVersion` and
/// `metadata.resourceVersion`: an annotation the conversion to v1 always sets (a DaemonSet's template
/// generation), and the fields Go's JSON writes for the empty object (non-omitempty ones, and a
/// Deployment's `replicas`, a pointer the conversion sets). As kube-apiserver v1.37.2 writes them
/// (observed; herald-server's `e2e_real_face` compares herald's bookmarks with the apiserver's).
fn bookmark_extras(group: &str, kind: &str) -> (&'static str, &'static str) {
    match (group, kind) {
        ("", "Namespace") => ("", r#","spec":{},"status":{}"#),
        ("", "Node") => (
            "",
            r#","spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"","containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","architecture":""}}"#,
        ),
        ("", "Service") => ("", r#","spec":{},"status":{"loadBalancer":{}}"#),
        ("", "Pod") => ("", r#","spec":{"containers":null},"status":{}"#),
        ("discovery.k8s.io", "EndpointSlice") => {
            ("", r#","addressType":"","endpoints":null,"ports":null"#)
        }
        ("networking.k8s.io", "Ingress") => ("", r#","spec":{},"status":{"loadBalancer":{}}"#),
        ("networking.k8s.io", "IngressClass") => ("", r#","spec":{}"#),
        ("networking.k8s.io", "ServiceCIDR") => ("", r#","spec":{},"status":{}"#),
        ("networking.k8s.io", "NetworkPolicy") => ("", r#","spec":{"podSelector":{}}"#),
        ("rbac.authorization.k8s.io", "ClusterRole" | "Role") => ("", r#","rules":null"#),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding" | "RoleBinding") => {
            ("", r#","roleRef":{"apiGroup":"","kind":"","name":""}"#)
        }
        ("apps", "Deployment") => (
            "",
            r#","spec":{"replicas":0,"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"strategy":{}},"status":{}"#,
        ),
        ("apps", "StatefulSet") => (
            "",
            r#","spec":{"replicas":0,"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"serviceName":"","updateStrategy":{}},"status":{"replicas":0,"availableReplicas":0}"#,
        ),
        ("apps", "ReplicaSet") => (
            "",
            r#","spec":{"replicas":0,"selector":null,"template":{"metadata":{},"spec":{"containers":null}}},"status":{"replicas":0}"#,
        ),
        ("apps", "DaemonSet") => (
            r#""deprecated.daemonset.template.generation":"0""#,
            r#","spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"updateStrategy":{}},"status":{"currentNumberScheduled":0,"numberMisscheduled":0,"desiredNumberScheduled":0,"numberReady":0}"#,
        ),
        // ConfigMap, Endpoints, ServiceAccount: every field omitempty; custom resources.
        _ => ("", ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookmarks_are_the_apiservers_empty_objects() {
        // As kube-apiserver v1.37.2 wrote them, byte for byte.
        let pods = Resource::builtin("pods").expect("pods");
        assert_eq!(
            pods.bookmark_object(209, true),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"209","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}"#
        );
        assert_eq!(
            pods.bookmark_object(7, false),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"7"},"spec":{"containers":null},"status":{}}"#
        );
        let ds = Resource::builtin("daemonsets").expect("daemonsets");
        assert_eq!(
            ds.bookmark_object(209, true),
            r#"{"kind":"DaemonSet","apiVersion":"apps/v1","metadata":{"resourceVersion":"209","annotations":{"deprecated.daemonset.template.generation":"0","k8s.io/initial-events-end":"true"}},"spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"updateStrategy":{}},"status":{"currentNumberScheduled":0,"numberMisscheduled":0,"desiredNumberScheduled":0,"numberReady":0}}"#
        );
        assert_eq!(
            Resource::builtin("endpointslices")
                .expect("endpointslices")
                .bookmark_object(1, false),
            r#"{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":"1"},"addressType":"","endpoints":null,"ports":null}"#
        );
        assert_eq!(
            Resource::builtin("configmaps")
                .expect("configmaps")
                .bookmark_object(1, true),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}"#
        );
        // Custom resources, served from CRDs (the monitoring ones included): unstructured.
        for r in [
            Resource::custom("example.com", "v1", "widgets", "Pod", true),
            Resource::builtin("servicemonitors").expect("servicemonitors"),
        ] {
            let b: serde_json::Value =
                serde_json::from_str(&r.bookmark_object(3, false)).expect("JSON");
            assert_eq!(b.as_object().expect("object").len(), 3, "{b}");
        }
        // Every built-in's bookmark is JSON, of its kind.
        for b in BUILTINS {
            let r = Resource::builtin(&format!("{}.{}", b.3, b.0)).expect("builtin");
            for end in [false, true] {
                let v: serde_json::Value =
                    serde_json::from_str(&r.bookmark_object(5, end)).expect("JSON");
                assert_eq!(v["kind"], b.2);
                assert_eq!(v["metadata"]["resourceVersion"], "5");
                assert_eq!(
                    v["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true",
                    end
                );
            }
        }
    }

    #[test]
    fn builtins_resolve_by_plural_or_qualified_name() {
        let pods = Resource::builtin("pods").expect("pods");
        assert_eq!((pods.group.as_str(), pods.kind.as_str()), ("", "Pod"));
        assert!(pods.supports_field("spec.nodeName"));
        assert!(!pods.supports_field("spec.bogus"));
        let ing = Resource::builtin("ingresses.networking.k8s.io").expect("ingresses");
        assert_eq!(ing.api_version(), "networking.k8s.io/v1");
        assert_eq!(ing.singular, "ingress");
        assert!(Resource::builtin("pods.apps").is_none());
        assert!(Resource::builtin("widgets").is_none());
        assert_eq!(
            Resource::builtin("endpoints").expect("ep").singular,
            "endpoints"
        );
    }
}
