//! The versions of the components whose behaviour a rule's advice depends on, as the input shows
//! them: kube-proxy and the kubelet per node, prometheus-operator from its image tag.

use std::collections::BTreeMap;

use crate::inventory::Cluster;
use crate::istio::image_version;
use crate::objects::Container;

/// `(major, minor)`.
pub type Minor = (u32, u32);

/// `(major, minor)` of a Kubernetes version string (`v1.26.3`, `v1.31.0-eks-a737599`).
pub fn kube_minor(version: &str) -> Option<Minor> {
    let mut it = version
        .trim()
        .trim_start_matches('v')
        .split(['.', '-', '+']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Where a node's kube-proxy version was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum VersionSource {
    /// `status.nodeInfo.kubeProxyVersion` (deprecated; kubelets stop setting it from 1.31).
    KubeProxy,
    /// `status.nodeInfo.kubeletVersion`: kube-proxy follows the node's version in every installer
    /// that deploys it as a DaemonSet per Kubernetes release.
    Kubelet,
}

/// Nodes per kube-proxy version: `kubeProxyVersion` where a node reports one, else its kubelet's.
/// Nodes reporting neither are counted under `None`.
pub fn kube_proxy_versions(c: &Cluster) -> BTreeMap<Option<(Minor, VersionSource)>, usize> {
    let mut out = BTreeMap::new();
    for n in &c.nodes {
        let info = n.status.as_ref().and_then(|s| s.node_info.as_ref());
        let version = info.and_then(|i| {
            kube_minor(&i.kube_proxy_version)
                .map(|v| (v, VersionSource::KubeProxy))
                .or_else(|| kube_minor(&i.kubelet_version).map(|v| (v, VersionSource::Kubelet)))
        });
        *out.entry(version).or_default() += 1;
    }
    out
}

/// The newest kubelet version among the nodes: the cluster is at least this version (the
/// apiserver is never older than its kubelets, per the version skew policy).
pub fn newest_kubelet(c: &Cluster) -> Option<Minor> {
    c.nodes
        .iter()
        .filter_map(|n| {
            let info = n.status.as_ref()?.node_info.as_ref()?;
            kube_minor(&info.kubelet_version)
        })
        .max()
}

/// prometheus-operator's version, from the image tag of its Deployment or pods
/// (`quay.io/prometheus-operator/prometheus-operator:v0.75.2`), and where it was read.
pub fn prometheus_operator(c: &Cluster) -> Option<((u32, u32, u32), String)> {
    let find = |containers: &[Container]| {
        containers.iter().find_map(|k| {
            let image = k.image.as_deref()?;
            let repo = image.rsplit('/').next()?.split([':', '@']).next()?;
            (repo == "prometheus-operator").then(|| image.to_string())
        })
    };
    let from_deployments = c.deployments.iter().find_map(|d| {
        let spec = d.spec.as_ref()?.template.spec.as_ref()?;
        find(&spec.containers)
    });
    let image = from_deployments.or_else(|| {
        c.pods
            .iter()
            .find_map(|p| find(&p.spec.as_ref()?.containers))
    })?;
    Some((image_version(&image)?, image))
}

/// A Go duration as in a KubeProxyConfiguration (`30s`, `1m0s`, `500ms`, `1h`), in seconds
/// (time.ParseDuration's units: h, m, s, ms, us/µs, ns).
pub fn go_duration_seconds(text: &str) -> Option<f64> {
    let text = text.trim();
    if text == "0" {
        return Some(0.0);
    }
    let mut rest = text;
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_versions_parse_with_vendor_suffixes() {
        assert_eq!(kube_minor("v1.26.3"), Some((1, 26)));
        assert_eq!(kube_minor("v1.31.0-eks-a737599"), Some((1, 31)));
        assert_eq!(kube_minor("1.29+"), Some((1, 29)));
        assert_eq!(kube_minor(""), None);
        assert_eq!(kube_minor("DEPRECATED"), None);
    }

    #[test]
    fn go_durations_parse_as_kube_proxy_writes_them() {
        assert_eq!(go_duration_seconds("30s"), Some(30.0));
        assert_eq!(go_duration_seconds("1m0s"), Some(60.0));
        assert_eq!(go_duration_seconds("1h30m"), Some(5400.0));
        assert_eq!(go_duration_seconds("500ms"), Some(0.5));
        assert_eq!(go_duration_seconds("0s"), Some(0.0));
        assert_eq!(go_duration_seconds("soon"), None);
        assert_eq!(go_duration_seconds("10"), None);
    }
}
