//! A minimal OpenAPI v3 face (`/openapi/v3`, `/openapi/v3/{api|apis/group}/v1`): enough for kubectl to
//! learn that the server supports the `fieldValidation` query parameter for every kind, so that
//! `kubectl create -f` / `replace -f` validate on the server instead of downloading full schemas
//! (k8s.io/cli-runtime pkg/resource/query_param_verifier_v3.go looks for a PATCH operation carrying the
//! kind's `x-kubernetes-group-version-kind` and a `fieldValidation` query parameter).
//! NB: kube-sim accepts the parameter but does not reject unknown fields.

use serde_json::{Map, Value, json};

use crate::kind::Kind;

fn gv_path(group: &str) -> String {
    if group.is_empty() {
        "api/v1".to_string()
    } else {
        format!("apis/{group}/v1")
    }
}

/// The root document: one entry per group version.
pub fn root() -> Value {
    let mut paths = Map::new();
    for k in Kind::ALL {
        let p = gv_path(k.group());
        paths.entry(p.clone()).or_insert_with(
            || json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=kube-sim-1")}),
        );
    }
    json!({"paths": paths})
}

/// The document of one group version (`rest` is e.g. `api/v1` or `apis/discovery.k8s.io/v1`).
pub fn group_version(rest: &str) -> Option<Value> {
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| gv_path(k.group()) == rest.trim_matches('/'))
        .collect();
    if kinds.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    for k in kinds {
        let prefix = format!("/{}", gv_path(k.group()));
        let path = if k.namespaced() {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", k.plural())
        } else {
            format!("{prefix}/{}/{{name}}", k.plural())
        };
        let gvk = json!({"group": k.group(), "version": "v1", "kind": k.name()});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
        ]);
        let op = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", k.name()),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}}
            })
        };
        paths.insert(path, json!({"put": op("put"), "patch": op("patch")}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kube-sim)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}
