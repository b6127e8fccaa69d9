//! The yardstick herald is measured against: each job's HTTP SD body computed from scratch with
//! herald-core over a set of objects (a kube-sim dump, `kubectl get -o json`), independent of the
//! incremental index, the compact groups and the upstream. Serving never uses it; the end-to-end tests
//! and the fault soak (`herald-bench soak`) compare herald's answers with it.

use std::collections::BTreeMap;

use herald_core::{HttpSdEntry, Lookup, Role, TargetGroup};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};

use crate::filter::{JobFilter, JobSpec};
use crate::objects::{DecodeError, Object, ObjectKey, WatchKind};

/// Why a list could not be read as a reference.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("the list has no items array")]
    NoItems,
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Every object of the kinds herald watches, keyed like herald's own stores.
#[derive(Debug, Default, Clone)]
pub struct Reference {
    objects: BTreeMap<WatchKind, BTreeMap<ObjectKey, Object>>,
}

/// The watched kind of an object's `kind` field (`Pod`, `EndpointSlice`, ...).
fn kind_of(kind: &str) -> Option<WatchKind> {
    Some(match kind {
        "Namespace" => WatchKind::Namespace,
        "Node" => WatchKind::Node,
        "Service" => WatchKind::Service,
        "Pod" => WatchKind::Pod,
        "Endpoints" => WatchKind::Endpoints,
        "EndpointSlice" => WatchKind::EndpointSlice,
        "Ingress" => WatchKind::Ingress,
        _ => return None,
    })
}

impl Reference {
    /// Adds (or replaces) one object.
    pub fn insert(&mut self, obj: Object) {
        self.objects
            .entry(obj.kind())
            .or_default()
            .insert(obj.key(), obj);
    }

    /// Reads a `List` of mixed kinds (kube-sim's `/sim/dump`, `kubectl get -o json`); items of kinds
    /// herald does not watch are skipped, and an item of a watched kind that does not decode is an
    /// error naming it.
    pub fn from_list(list: serde_json::Value) -> Result<Reference, ReferenceError> {
        let serde_json::Value::Object(mut list) = list else {
            return Err(ReferenceError::NoItems);
        };
        let Some(serde_json::Value::Array(items)) = list.remove("items") else {
            return Err(ReferenceError::NoItems);
        };
        let mut r = Reference::default();
        for item in items {
            let Some(kind) = item.get("kind").and_then(|k| k.as_str()).and_then(kind_of) else {
                continue;
            };
            r.insert(Object::decode(kind, item)?);
        }
        Ok(r)
    }

    /// Objects held of `kind`.
    pub fn count(&self, kind: WatchKind) -> usize {
        self.objects.get(&kind).map_or(0, BTreeMap::len)
    }

    fn get(&self, kind: WatchKind, ns: &str, name: &str) -> Option<&Object> {
        self.objects.get(&kind)?.get(&ObjectKey::new(ns, name))
    }

    /// The entries herald should serve for `spec`: groups in object-key order (herald's order), each
    /// flattened to one entry per target, relabeled by herald-core when the job relabels — then
    /// an entry equal to an earlier one of the same group left out (Prometheus scrapes it once).
    pub fn entries(&self, spec: &JobSpec) -> Vec<HttpSdEntry> {
        let lookup = RefLookup {
            state: self,
            filter: &spec.filter,
        };
        let Some(primary) = self.objects.get(&WatchKind::primary(spec.role)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for o in primary.values().filter(|o| spec.filter.admits(o)) {
            let entries = herald_core::http_sd_entries(&group(spec, o, &lookup));
            let Some(r) = &spec.relabel else {
                out.extend(entries);
                continue;
            };
            let mut kept: Vec<HttpSdEntry> = Vec::new();
            for e in entries.into_iter().filter_map(|e| r.entry(e)) {
                if !kept.contains(&e) {
                    kept.push(e);
                }
            }
            out.extend(kept);
        }
        out
    }

    /// The body herald should serve for `spec`, encoded in one go by herald-core (not through
    /// herald's compact groups).
    pub fn expected_body(&self, spec: &JobSpec) -> Vec<u8> {
        herald_core::encode_http_sd(&self.entries(spec))
    }
}

fn group(spec: &JobSpec, obj: &Object, lookup: &dyn Lookup) -> TargetGroup {
    let a = spec.attach;
    match (spec.role, obj) {
        (Role::Pod, Object::Pod(o)) => herald_core::pod_group(o, lookup, a),
        (Role::Service, Object::Service(o)) => herald_core::service_group(o, lookup, a),
        (Role::Endpoints, Object::Endpoints(o)) => herald_core::endpoints_group(o, lookup, a),
        (Role::EndpointSlice, Object::EndpointSlice(o)) => {
            herald_core::endpointslice_group(o, lookup, a)
        }
        (Role::Node, Object::Node(o)) => herald_core::node_group(o, lookup, a),
        (Role::Ingress, Object::Ingress(o)) => herald_core::ingress_group(o, lookup, a),
        // NB: unreachable by construction (objects are stored under their own kind and a role's
        // primary kind is fixed); an empty group keeps the reference total rather than panicking.
        _ => TargetGroup::default(),
    }
}

struct RefLookup<'a> {
    state: &'a Reference,
    filter: &'a JobFilter,
}

impl RefLookup<'_> {
    fn find(&self, kind: WatchKind, ns: &str, name: &str) -> Option<&Object> {
        self.state
            .get(kind, ns, name)
            .filter(|o| self.filter.admits(o))
    }
}

impl Lookup for RefLookup<'_> {
    fn pod(&self, ns: &str, name: &str) -> Option<&Pod> {
        match self.find(WatchKind::Pod, ns, name)? {
            Object::Pod(p) => Some(p),
            _ => None,
        }
    }
    fn service(&self, ns: &str, name: &str) -> Option<&Service> {
        match self.find(WatchKind::Service, ns, name)? {
            Object::Service(s) => Some(s),
            _ => None,
        }
    }
    fn node(&self, name: &str) -> Option<&Node> {
        match self.find(WatchKind::Node, "", name)? {
            Object::Node(n) => Some(n),
            _ => None,
        }
    }
    fn namespace(&self, name: &str) -> Option<&Namespace> {
        match self.find(WatchKind::Namespace, "", name)? {
            Object::Namespace(n) => Some(n),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_list() -> serde_json::Value {
        serde_json::json!({"kind": "List", "apiVersion": "v1", "items": [
            {"kind": "Pod", "apiVersion": "v1",
             "metadata": {"namespace": "a", "name": "p", "labels": {"app": "x"}},
             "spec": {"nodeName": "n", "containers": [
                 {"name": "c", "image": "i", "ports": [{"name": "m", "containerPort": 9100}]}]},
             "status": {"phase": "Running", "podIP": "127.0.0.5"}},
            {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"namespace": "a", "name": "c"}}
        ]})
    }

    #[test]
    fn a_list_of_mixed_kinds_gives_the_pod_role_s_targets() {
        let r = Reference::from_list(pod_list()).expect("valid list");
        assert_eq!(r.count(WatchKind::Pod), 1);
        let cfg = herald_core::parse_config("jobs:\n- name: p\n  role: pod\n").expect("config");
        let specs = [crate::JobSpec::from_job(&cfg.jobs[0], None).expect("spec")];
        let entries = r.entries(&specs[0]);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].target, "127.0.0.5:9100");
        assert_eq!(
            entries[0].labels["__meta_kubernetes_pod_label_app"], "x",
            "{:?}",
            entries[0].labels
        );
    }

    #[test]
    fn bad_lists_name_what_is_wrong() {
        assert!(matches!(
            Reference::from_list(serde_json::json!([])),
            Err(ReferenceError::NoItems)
        ));
        let bad = serde_json::json!({"items": [
            {"kind": "Pod", "metadata": {"namespace": "a", "name": "p"}, "spec": {"containers": 5}}]});
        let e = Reference::from_list(bad).expect_err("a pod with containers: 5");
        assert!(e.to_string().contains("pods a/p"), "{e}");
    }
}
