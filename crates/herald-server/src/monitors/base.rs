//! The base jobs monitor jobs are views over (every object of a role, in every namespace), and the
//! prometheus-operator resources herald caches for monitors.

use herald_core::{MonitorsConfig, Role};
use herald_index::filter::{FilterError, JobSpec};

use crate::kube_api::CustomRef;

/// Prefix of the base jobs' names; no configured job may start with it.
pub const BASE_PREFIX: &str = "monitor-base-";

/// The name of the base job of `role`.
pub fn base_name(role: Role) -> String {
    format!("{BASE_PREFIX}{}", role.as_str())
}

/// The roles monitors need base jobs for.
pub fn base_roles(cfg: &MonitorsConfig) -> Vec<Role> {
    let mut roles = Vec::new();
    if cfg.service_monitors {
        roles.extend(cfg.service_roles());
    }
    if cfg.pod_monitors {
        roles.push(Role::Pod);
    }
    roles
}

/// The base jobs: every object of each role, in every namespace; node metadata attached with
/// `monitors.attach_node_metadata`, none otherwise.
pub fn base_specs(cfg: &MonitorsConfig) -> Result<Vec<JobSpec>, FilterError> {
    let mut yaml = String::from("jobs:\n");
    let attach = if cfg.attach_node_metadata {
        ", attach_metadata: {node: true}"
    } else {
        ""
    };
    for role in base_roles(cfg) {
        yaml.push_str(&format!(
            "- {{name: {}, role: {}{attach}}}\n",
            base_name(role),
            role.as_str()
        ));
    }
    let config = herald_core::parse_config(&yaml).expect("the base jobs are a valid job file");
    config
        .jobs
        .iter()
        .map(|j| JobSpec::from_job(j, None))
        .collect()
}

/// The custom resources herald must cache for `cfg`.
pub fn resources(cfg: &MonitorsConfig) -> Vec<CustomRef> {
    let crd = |plural: &str| {
        (
            "monitoring.coreos.com".to_string(),
            "v1".to_string(),
            plural.to_string(),
        )
    };
    let mut out = Vec::new();
    if cfg.service_monitors {
        out.push(crd("servicemonitors"));
    }
    if cfg.pod_monitors {
        out.push(crd("podmonitors"));
    }
    if cfg.prometheus.is_some() {
        out.push(crd("prometheuses"));
    }
    out
}
