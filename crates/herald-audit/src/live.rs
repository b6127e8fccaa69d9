//! Live mode: lists the audited kinds read-only through a kubeconfig, paging with limit/continue.
//! A kind the server does not serve (404), or that the credentials may not list (403), is left
//! out of the inventory, so its rules say "not checked".

use std::path::Path;

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;

use crate::error::AuditError;
use crate::inventory::Cluster;
use crate::kind::Kind;

const PAGE: u32 = 500;

/// Versions to try per kind, preferred first: Istio served PeerAuthentication as v1beta1 only
/// before 1.22.
fn versions(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::PeerAuthentication => &["v1", "v1beta1"],
        Kind::PrometheusAgent => &["v1alpha1"],
        _ => &["v1"],
    }
}

/// Builds the inventory from the cluster `kubeconfig` (and `context`) points at.
pub async fn load(kubeconfig: &Path, context: Option<&str>) -> Result<Cluster, AuditError> {
    let kc_err = |message: String| AuditError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        message,
    };
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| kc_err(e.to_string()))?;
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|e| kc_err(e.to_string()))?;
    let client = Client::try_from(config).map_err(|e| kc_err(e.to_string()))?;
    let mut cluster = Cluster::default();
    for kind in Kind::ALL {
        for version in versions(kind) {
            if list_kind(&client, &mut cluster, kind, version).await? {
                break;
            }
        }
    }
    Ok(cluster)
}

/// Lists every object of `kind` at `version` into `cluster`; false when the server does not serve
/// it or forbids it.
async fn list_kind(
    client: &Client,
    cluster: &mut Cluster,
    kind: Kind,
    version: &str,
) -> Result<bool, AuditError> {
    let api_version = if kind.group().is_empty() {
        version.to_string()
    } else {
        format!("{}/{version}", kind.group())
    };
    let resource = ApiResource {
        group: kind.group().into(),
        version: version.into(),
        api_version: api_version.clone(),
        kind: kind.name().into(),
        plural: kind.plural().into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = match api.list(&params).await {
            Ok(page) => page,
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => {
                return Ok(false);
            }
            Err(e) => {
                return Err(AuditError::List {
                    kind: kind.name(),
                    message: e.to_string(),
                });
            }
        };
        cluster.mark_checked(kind);
        for item in page.items {
            let mut v = serde_json::to_value(&item).map_err(|e| AuditError::LiveObject {
                object: format!("{kind} {:?}", item.metadata.name),
                reason: e.to_string(),
            })?;
            // List items of built-in kinds come without kind and apiVersion.
            if let Some(map) = v.as_object_mut() {
                map.insert("kind".into(), Value::from(kind.name()));
                map.insert("apiVersion".into(), Value::from(api_version.clone()));
            }
            cluster.add(v).map_err(|r| AuditError::LiveObject {
                object: r.object.unwrap_or_else(|| kind.name().to_string()),
                reason: r.reason,
            })?;
        }
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(true),
        }
    }
}
