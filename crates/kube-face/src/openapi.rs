//! A minimal OpenAPI v3 face (`/openapi/v3`, `/openapi/v3/{api|apis/group}/{version}`) for the served
//! resources: enough for kubectl to learn that the server supports the `fieldValidation` query
//! parameter for every kind, so that `kubectl create -f` / `replace -f` validate on the server instead
//! of downloading full schemas (k8s.io/cli-runtime pkg/resource/query_param_verifier_v3.go looks for a
//! PATCH operation carrying the kind's `x-kubernetes-group-version-kind` and a `fieldValidation` query
//! parameter). NB: the parameter is accepted, unknown fields are not rejected.

use serde_json::{Map, Value, json};

use crate::resource::Catalog;

/// The root document: one entry per served group version.
pub fn root(catalog: &Catalog) -> Value {
    let mut paths = Map::new();
    for r in &catalog.resources {
        let p = r.gv_path();
        paths.entry(p.clone()).or_insert_with(
            || json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=kube-face-1")}),
        );
    }
    json!({"paths": paths})
}

/// The document of one group version (`rest` is e.g. `api/v1` or `apis/discovery.k8s.io/v1`).
pub fn group_version(catalog: &Catalog, rest: &str) -> Option<Value> {
    let served: Vec<_> = catalog
        .resources
        .iter()
        .filter(|r| r.gv_path() == rest.trim_matches('/'))
        .collect();
    if served.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    for r in served {
        let prefix = format!("/{}", r.gv_path());
        let path = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{prefix}/{}/{{name}}", r.plural)
        };
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
        ]);
        let op = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", r.kind),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}}
            })
        };
        let ops = if catalog.writable {
            json!({"get": op("get"), "put": op("put"), "patch": op("patch")})
        } else {
            json!({"get": op("get")})
        };
        paths.insert(path, ops);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}
