//! Grouping pods by the workload that owns them, so that findings name a Deployment once instead
//! of each of its pods.

use std::collections::BTreeMap;

use crate::finding::ObjectRef;
use crate::inventory::ns_name;
use crate::kind::Kind;
use crate::objects::Pod;

/// Labels the controllers add per pod or per revision; a generated selector must not use them.
const POD_SPECIFIC_LABELS: [&str; 4] = [
    "pod-template-hash",
    "controller-revision-hash",
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
];

/// The workload a pod belongs to: the Deployment behind its ReplicaSet (a ReplicaSet is named
/// `<deployment>-<pod-template-hash>`, kubernetes:pkg/controller/deployment/sync.go), its other
/// controller, or the pod itself.
pub fn owner(pod: &Pod) -> ObjectRef {
    let (ns, name) = ns_name(&pod.metadata);
    let Some(o) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .or_else(|| pod.metadata.owner_references.iter().flatten().next())
    else {
        return ObjectRef::new(Kind::Pod, ns, name);
    };
    if o.kind == "ReplicaSet" {
        let hash = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pod-template-hash"));
        if let Some(deploy) = hash.and_then(|h| o.name.strip_suffix(&format!("-{h}"))) {
            return ObjectRef::new(Kind::Deployment, ns, deploy);
        }
    }
    ObjectRef::other(&o.kind, Some(ns), &o.name)
}

/// A selector for the pods of a workload: the labels they all share, minus per-pod ones.
pub fn common_labels(pods: &[&Pod]) -> BTreeMap<String, String> {
    let mut common: Option<BTreeMap<String, String>> = None;
    for p in pods {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        common = Some(match common {
            None => labels.to_map(),
            Some(c) => c
                .into_iter()
                .filter(|(k, v)| labels.get(k) == Some(v))
                .collect(),
        });
    }
    let mut out = common.unwrap_or_default();
    for l in POD_SPECIFIC_LABELS {
        out.remove(l);
    }
    out
}

/// Pods grouped by owner, in first-seen order of owners.
pub fn group<'p>(pods: impl Iterator<Item = &'p Pod>) -> Vec<(ObjectRef, Vec<&'p Pod>)> {
    let mut out: Vec<(ObjectRef, Vec<&Pod>)> = Vec::new();
    let mut index: BTreeMap<ObjectRef, usize> = BTreeMap::new();
    for p in pods {
        let o = owner(p);
        match index.get(&o) {
            Some(i) => out[*i].1.push(p),
            None => {
                index.insert(o.clone(), out.len());
                out.push((o, vec![p]));
            }
        }
    }
    out
}
