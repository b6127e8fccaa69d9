//! What one job admits from the shared per-kind caches: its namespaces and its per-role label and field
//! selectors — exactly what Prometheus would have sent the apiserver in its own list/watch calls.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use herald_core::config::Selector;
use herald_core::{AttachMetadata, Job, JobRelabel, Role};
use kube_selectors::{FieldSelector, LabelSelector, LabelSet};

use crate::objects::{Object, WatchKind};

/// A job herald cannot serve as configured.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error(
        "job {job:?}: namespaces.own_namespace is set but herald does not know its own namespace (pass --namespace or set POD_NAMESPACE)"
    )]
    OwnNamespaceUnknown { job: String },
    #[error(
        "job {job:?}: attach_metadata.{field} is not supported by herald (it would need a ReplicaSet/Job watch)"
    )]
    OwnerMetadataUnsupported { job: String, field: &'static str },
    #[error("job {job:?}: names starting with {prefix:?} are reserved for the monitors' base jobs")]
    ReservedName { job: String, prefix: &'static str },
}

/// A job as the index needs it: the parts of a `kubernetes_sd_configs` entry that decide its targets.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub name: String,
    pub role: Role,
    pub attach: AttachMetadata,
    pub filter: JobFilter,
    /// The job's `relabel_configs`, applied before encoding; `None` serves every discovered label.
    pub relabel: Option<Arc<JobRelabel>>,
    /// `istio:`: the job serves its targets as an Istio mesh needs them, with a companion job for
    /// those under STRICT mTLS (`herald_core::istio`).
    pub istio: Option<herald_core::istio::IstioMode>,
}

impl JobSpec {
    /// The spec of a configured job. `own_namespace` is the namespace herald runs in.
    pub fn from_job(job: &Job, own_namespace: Option<&str>) -> Result<JobSpec, FilterError> {
        let owners = [
            ("deployment", job.owner_metadata.deployment),
            ("job", job.owner_metadata.job),
            ("cronjob", job.owner_metadata.cronjob),
        ];
        if let Some((field, _)) = owners.into_iter().find(|(_, on)| *on) {
            return Err(FilterError::OwnerMetadataUnsupported {
                job: job.name.clone(),
                field,
            });
        }
        Ok(JobSpec {
            name: job.name.clone(),
            role: job.role,
            attach: job.attach_metadata,
            filter: JobFilter::new(
                &job.name,
                &job.namespaces.names,
                job.namespaces.own_namespace,
                own_namespace,
                &job.selectors,
            )?,
            relabel: JobRelabel::of_job(job).map(Arc::new),
            istio: job.istio,
        })
    }

    /// The kinds this job reads.
    pub fn kinds(&self) -> Vec<WatchKind> {
        WatchKind::needed(self.role, self.attach)
    }
}

/// The objects a job sees of each kind.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// `None`: every namespace (Prometheus's `apiv1.NamespaceAll`).
    namespaces: Option<BTreeSet<String>>,
    selectors: BTreeMap<WatchKind, (LabelSelector, FieldSelector)>,
}

impl JobFilter {
    /// Builds the filter of job `job` from its `namespaces` and `selectors`. `own_namespace` is the
    /// namespace herald runs in, used when the job sets `namespaces.own_namespace`: Prometheus reads it
    /// from the service-account namespace file (discovery/kubernetes/kubernetes.go `getNamespaces`).
    pub fn new(
        job: &str,
        names: &[String],
        include_own_namespace: bool,
        own_namespace: Option<&str>,
        selectors: &[Selector],
    ) -> Result<JobFilter, FilterError> {
        let mut namespaces: BTreeSet<String> = names.iter().cloned().collect();
        if include_own_namespace {
            match own_namespace {
                Some(ns) if !ns.is_empty() => {
                    namespaces.insert(ns.to_string());
                }
                _ => {
                    return Err(FilterError::OwnNamespaceUnknown {
                        job: job.to_string(),
                    });
                }
            }
        }
        // Prometheus keeps one selector pair per role (its config validation rejects duplicates).
        let compiled = selectors
            .iter()
            .map(|s| {
                let pair = (s.label_selector.clone(), s.field_selector.clone());
                (WatchKind::primary(s.role), pair)
            })
            .collect();
        Ok(JobFilter {
            namespaces: (!namespaces.is_empty()).then_some(namespaces),
            selectors: compiled,
        })
    }

    /// Whether the job's informer for the object's kind would hold it.
    pub fn admits(&self, obj: &Object) -> bool {
        let namespace = obj.meta().namespace.as_deref().unwrap_or("");
        self.admits_parts(obj.kind(), namespace, obj.labels(), |f| obj.field(f))
    }

    /// `admits` from an object's parts; `field` is only called for field selectors. Namespaces
    /// restrict only namespaced kinds: Prometheus's Node and Namespace informers are cluster-wide.
    /// Whether the job selects objects of `kind` by labels or fields (and so reads them).
    pub fn selects(&self, kind: WatchKind) -> bool {
        self.selectors.contains_key(&kind)
    }

    pub fn admits_parts(
        &self,
        kind: WatchKind,
        namespace: &str,
        labels: &(impl LabelSet + ?Sized),
        field: impl Fn(&str) -> Option<String>,
    ) -> bool {
        self.admission(kind, namespace, labels, field).is_ok()
    }

    /// As `admits_parts`, saying what refused the object: the one check serving and `explain`
    /// share (a refusal borrows from the filter, so serving allocates nothing for it).
    pub fn admission(
        &self,
        kind: WatchKind,
        namespace: &str,
        labels: &(impl LabelSet + ?Sized),
        field: impl Fn(&str) -> Option<String>,
    ) -> Result<(), Refusal<'_>> {
        if kind.namespaced()
            && let Some(names) = &self.namespaces
            && !names.contains(namespace)
        {
            return Err(Refusal::Namespace(names));
        }
        // NB: Prometheus never filters its Namespace informer (kubernetes.go `newNamespaceInformer`).
        if kind == WatchKind::Namespace {
            return Ok(());
        }
        match self.selectors.get(&kind) {
            None => Ok(()),
            Some((l, f)) => {
                if let Some(r) = l.requirements.iter().find(|r| !r.matches(labels)) {
                    return Err(Refusal::Label(l, r));
                }
                if !f.is_empty() && !f.matches(field) {
                    return Err(Refusal::Field(f));
                }
                Ok(())
            }
        }
    }
}

/// Why a job's filter refused an object (see `JobFilter::admission`).
#[derive(Debug, Clone, Copy)]
pub enum Refusal<'f> {
    /// The object's namespace is not among the job's.
    Namespace(&'f BTreeSet<String>),
    /// The job's label selector for the kind, and its first requirement the object fails.
    Label(&'f LabelSelector, &'f kube_selectors::Requirement),
    /// The job's field selector for the kind.
    Field(&'f FieldSelector),
}

impl JobFilter {
    /// The job's field selector for `kind`, if it has one.
    pub fn field_selector(&self, kind: WatchKind) -> Option<&FieldSelector> {
        self.selectors
            .get(&kind)
            .map(|(_, f)| f)
            .filter(|f| !f.is_empty())
    }

    /// The namespaces the job reads (`None`: all).
    pub fn namespaces(&self) -> Option<&BTreeSet<String>> {
        self.namespaces.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn mk_pod(ns: &str, name: &str, app: &str, node: &str) -> Object {
        Object::Pod(Arc::new(Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    fn sel(yaml_selectors: &str) -> Vec<Selector> {
        let yaml = format!("jobs:\n- name: j\n  role: pod\n  selectors:\n{yaml_selectors}");
        herald_core::parse_config(&yaml).expect("valid config").jobs[0]
            .selectors
            .clone()
    }

    #[test]
    fn a_filter_without_namespaces_or_selectors_admits_everything() {
        let f = JobFilter::new("j", &[], false, None, &[]).expect("valid");
        assert!(f.admits(&mk_pod("a", "p", "x", "n1")));
    }

    #[test]
    fn namespaces_restrict_namespaced_kinds_only() {
        let f = JobFilter::new("j", &["a".into()], false, None, &[]).expect("valid");
        assert!(f.admits(&mk_pod("a", "p", "x", "n1")));
        assert!(!f.admits(&mk_pod("b", "p", "x", "n1")));
    }

    #[test]
    fn own_namespace_adds_herald_s_namespace_and_fails_when_unknown() {
        let f = JobFilter::new("j", &[], true, Some("mon"), &[]).expect("valid");
        assert!(f.admits(&mk_pod("mon", "p", "x", "n1")));
        assert!(!f.admits(&mk_pod("b", "p", "x", "n1")));
        let err = JobFilter::new("j", &[], true, None, &[]).expect_err("own namespace unknown");
        assert!(err.to_string().contains("job \"j\""), "{err}");
    }

    #[test]
    fn label_and_field_selectors_apply_to_their_role_s_kind() {
        let selectors =
            sel("  - role: pod\n    label: app in (x,y)\n    field: spec.nodeName=n1\n");
        let f = JobFilter::new("j", &[], false, None, &selectors).expect("valid");
        assert!(f.admits(&mk_pod("a", "p", "x", "n1")));
        assert!(!f.admits(&mk_pod("a", "p", "z", "n1")));
        assert!(!f.admits(&mk_pod("a", "p", "x", "n2")));
    }

    #[test]
    fn owner_metadata_is_refused_naming_the_job_and_field() {
        let yaml = "jobs:\n- name: web\n  role: pod\n  attach_metadata:\n    deployment: true\n";
        let job = &herald_core::parse_config(yaml).expect("valid config").jobs[0];
        let err = JobSpec::from_job(job, None).expect_err("unsupported");
        let msg = err.to_string();
        assert!(
            msg.contains("job \"web\"") && msg.contains("attach_metadata.deployment"),
            "{msg}"
        );
    }
}
