//! Live mode: lists the audited kinds read-only through a kubeconfig, paging with limit/continue.
//! A kind the server does not serve (404), or that the credentials may not list (403), is left
//! out of the inventory, so its rules say "not checked".

use std::path::Path;

use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::document::Sink;
use crate::error::AuditError;
use crate::inventory::{Cluster, ListType};
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

/// Lists every object of `kind` at `version` into `cluster`, page by page: each page's JSON is
/// streamed into the inventory object by object ([`crate::document`]), so the objects' wire sizes
/// are the server's own, as in a dump. False when the server does not serve the kind or forbids it.
async fn list_kind(
    client: &Client,
    cluster: &mut Cluster,
    kind: Kind,
    version: &str,
) -> Result<bool, AuditError> {
    let path = if kind.group().is_empty() {
        format!("/api/{version}/{}", kind.plural())
    } else {
        format!("/apis/{}/{version}/{}", kind.group(), kind.plural())
    };
    let list_err = |message: String| AuditError::List {
        kind: kind.name(),
        message,
    };
    // List items of built-in kinds come without kind and apiVersion.
    let lend = ListType {
        kind: kind.name().to_string(),
        api_version: if kind.group().is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", kind.group())
        },
    };
    let mut params = ListParams::default().limit(PAGE);
    let mut page = 0;
    loop {
        page += 1;
        let request = kube::core::Request::new(&path)
            .list(&params)
            .map_err(|e| list_err(e.to_string()))?;
        let text = match client.request_text(request).await {
            Ok(text) => text,
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => {
                return Ok(false);
            }
            Err(e) => return Err(list_err(e.to_string())),
        };
        cluster.mark_checked(kind);
        let mut sink = Sink::new(cluster);
        let outcome = sink.page(page, &lend, &mut serde_json::Deserializer::from_str(&text));
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                return Err(match sink.take_refused() {
                    Some(r) => AuditError::LiveObject {
                        object: r
                            .rejected
                            .object
                            .unwrap_or_else(|| format!("{kind} (page {page}, {})", r.position)),
                        reason: r.rejected.reason,
                    },
                    None => list_err(format!("page {page} is not a valid list: {e}")),
                });
            }
        };
        match outcome.continue_token {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(true),
        }
    }
}
