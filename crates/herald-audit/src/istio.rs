//! What the input shows of an Istio mesh: whether it is there, istiod's version (from its image
//! tag), the mesh config that matters to scraping, and per-pod sidecar facts.

use serde::Deserialize;

use crate::finding::ObjectRef;
use crate::inventory::{Cluster, ns_name};
use crate::kind::Kind;
use crate::objects::{Container, Pod};

/// The Istio version from which a `~` exportTo no longer triggers pushes (istio/istio PR #47009,
/// the fix of istio/istio#46950).
pub const EXPORT_TO_NONE_FIXED: (u32, u32) = (1, 20);

/// `(major, minor, patch)`.
pub type Version = (u32, u32, u32);

/// The mesh as the input shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Istio {
    /// `(major, minor, patch)` from istiod's image tag, else from a sidecar's proxyv2 tag.
    pub version: Option<(u32, u32, u32)>,
    /// Where the version (or the mesh's presence) was read.
    pub evidence: String,
    /// The root namespace, where a selector-less PeerAuthentication is mesh-wide.
    pub root_namespace: String,
    /// `meshConfig.enablePrometheusMerge`, on unless set to false.
    pub merge_enabled: bool,
    /// `meshConfig.defaultServiceExportTo`, `["*"]` unless set.
    pub default_export_to: Vec<String>,
    pub istiod: Option<ObjectRef>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MeshConfig {
    root_namespace: Option<String>,
    enable_prometheus_merge: Option<bool>,
    default_service_export_to: Option<Vec<String>>,
}

impl Istio {
    /// Istio is present when istiod runs (a Deployment or pods whose image is `.../pilot:TAG`, or
    /// named istiod) or any pod carries an injected `istio-proxy` sidecar.
    pub fn detect(c: &Cluster) -> Option<Istio> {
        let mut found: Option<(ObjectRef, Option<Version>, String)> = None;
        for d in &c.deployments {
            let (ns, name) = ns_name(&d.metadata);
            let containers = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .map(|s| s.containers.as_slice())
                .unwrap_or_default();
            if let Some(img) = pilot_image(name, containers) {
                let obj = ObjectRef::new(Kind::Deployment, ns, name);
                let ev = format!("{obj} runs {img}");
                found = Some((obj, image_version(&img), ev));
                break;
            }
        }
        if found.is_none() {
            for p in &c.pods {
                let (ns, name) = ns_name(&p.metadata);
                let is_istiod = p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .is_some_and(|a| a == "istiod");
                let containers = p
                    .spec
                    .as_ref()
                    .map(|s| s.containers.as_slice())
                    .unwrap_or_default();
                let img = pilot_image(if is_istiod { "istiod" } else { name }, containers);
                if let Some(img) = img {
                    let obj = ObjectRef::new(Kind::Pod, ns, name);
                    let ev = format!("{obj} runs {img}");
                    found = Some((obj, image_version(&img), ev));
                    break;
                }
            }
        }
        let (istiod, version, evidence) = match found {
            Some((obj, v, ev)) => (Some(obj), v, ev),
            None => {
                let sidecar = c.pods.iter().find_map(|p| {
                    let proxy = sidecar(p)?;
                    let (ns, name) = ns_name(&p.metadata);
                    let img = proxy.image.clone().unwrap_or_default();
                    Some((
                        image_version(&img),
                        format!("Pod {ns}/{name} has an istio-proxy sidecar ({img})"),
                    ))
                })?;
                (None, sidecar.0, sidecar.1)
            }
        };
        let istiod_ns = istiod
            .as_ref()
            .and_then(|o| o.namespace.clone())
            .unwrap_or_else(|| "istio-system".into());
        let mesh = c
            .config_map(&istiod_ns, "istio")
            .and_then(|cm| cm.data.as_ref()?.get("mesh").cloned())
            .and_then(|text| serde_yaml::from_str::<MeshConfig>(&text).ok())
            .unwrap_or_default();
        Some(Istio {
            version,
            evidence,
            root_namespace: mesh.root_namespace.unwrap_or(istiod_ns),
            merge_enabled: mesh.enable_prometheus_merge.unwrap_or(true),
            default_export_to: mesh
                .default_service_export_to
                .unwrap_or_else(|| vec!["*".into()]),
            istiod,
        })
    }

    /// Whether Services without the annotation are visible to other namespaces' sidecars.
    pub fn exports_by_default(&self) -> bool {
        self.default_export_to.iter().any(|v| v != "~" && v != ".")
    }

    /// The `networking.istio.io/exportTo` value to advise, and why.
    pub fn advised_export_to(&self, c: &Cluster) -> (String, String) {
        match self.version {
            Some((maj, min, _)) if (maj, min) >= EXPORT_TO_NONE_FIXED => (
                "~".into(),
                format!(
                    "Istio {maj}.{min} skips pushes for services exported nowhere (`~`, istio/istio PR #47009; \
                     EDS pushes too since 1.25)"
                ),
            ),
            Some((maj, min, _)) => (
                unused_namespace(c),
                format!(
                    "Istio {maj}.{min} < 1.20 still pushes on every change to a `~` service (istio/istio#46950), \
                     so the Service is exported to a namespace that does not exist"
                ),
            ),
            None => (
                "~".into(),
                "the Istio version is unknown: `~` is right on Istio >= 1.20; on older meshes export to a \
                 namespace that does not exist instead (istio/istio#46950)"
                    .into(),
            ),
        }
    }
}

/// A namespace name the cluster does not have, for exportTo on Istio < 1.20.
fn unused_namespace(c: &Cluster) -> String {
    let mut name = String::from("herald-no-namespace");
    let mut n = 1;
    while c.namespace(&name).is_some() {
        n += 1;
        name = format!("herald-no-namespace-{n}");
    }
    name
}

fn pilot_image(name: &str, containers: &[Container]) -> Option<String> {
    containers.iter().find_map(|c| {
        let img = c.image.as_deref()?;
        let repo = img.rsplit('/').next().unwrap_or(img);
        let is_pilot = repo.starts_with("pilot:") || repo == "pilot" || repo.starts_with("pilot@");
        (is_pilot || (name.starts_with("istiod") && c.name == "discovery")).then(|| img.to_string())
    })
}

/// `(major, minor, patch)` of an image tag such as `docker.io/istio/pilot:1.19.3-distroless`.
pub fn image_version(image: &str) -> Option<(u32, u32, u32)> {
    let last = image.rsplit('/').next()?;
    let tag = last.split_once(':')?.1;
    let tag = tag.split('@').next()?.trim_start_matches('v');
    let core = tag.split(['-', '+']).next()?;
    let mut parts = core.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, minor, patch))
}

/// The pod's `istio-proxy` sidecar, if injected (as a container, or as a native sidecar init
/// container since Istio 1.19's `ENABLE_NATIVE_SIDECARS`).
pub fn sidecar(pod: &Pod) -> Option<&Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == "istio-proxy")
}

/// The prometheus.io annotations the application declared: for a merged pod the injector moved
/// them into `ISTIO_PROMETHEUS_ANNOTATIONS` on istio-proxy and pointed the pod's own at :15020
/// (istio/istio:pkg/kube/inject/inject.go applyPrometheusMerge).
pub fn original_prometheus_annotations(
    pod: &Pod,
) -> Option<std::collections::BTreeMap<String, String>> {
    let env = sidecar(pod)?.env.as_ref()?;
    let raw = env
        .iter()
        .find(|e| e.name == "ISTIO_PROMETHEUS_ANNOTATIONS")?
        .value
        .as_deref()?;
    let parsed: std::collections::BTreeMap<String, String> = serde_json::from_str(raw).ok()?;
    Some(
        parsed
            .into_iter()
            .map(|(k, v)| {
                let key = if k.contains('/') {
                    k
                } else {
                    format!("prometheus.io/{k}")
                };
                (key, v)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_versions_parse_from_tags_with_suffixes() {
        assert_eq!(
            image_version("docker.io/istio/pilot:1.19.3"),
            Some((1, 19, 3))
        );
        assert_eq!(
            image_version("gcr.io/istio-release/pilot:1.22-distroless"),
            Some((1, 22, 0))
        );
        assert_eq!(
            image_version("localhost:5000/istio/pilot:v1.20.1"),
            Some((1, 20, 1))
        );
        assert_eq!(image_version("istio/pilot"), None);
        assert_eq!(image_version("istio/pilot:latest"), None);
    }
}
