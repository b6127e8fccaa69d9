//! Reading dumps: files or directories of JSON or YAML, each document a single object or a List
//! (`kubectl get <kinds> -A -o json` writes `kind: List`; the API itself answers `PodList` & co.
//! whose items carry no `kind`, which is filled in from the list's own).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::error::AuditError;
use crate::inventory::Cluster;

/// Reads every path (a file, or a directory whose `*.json`, `*.yaml` and `*.yml` files are read in
/// name order) into one inventory.
pub fn load_paths(paths: &[PathBuf]) -> Result<Cluster, AuditError> {
    let mut cluster = Cluster::default();
    for path in paths {
        if path.is_dir() {
            for file in dump_files(path)? {
                load_file(&mut cluster, &file)?;
            }
        } else {
            load_file(&mut cluster, path)?;
        }
    }
    Ok(cluster)
}

fn dump_files(dir: &Path) -> Result<Vec<PathBuf>, AuditError> {
    let read_err = |source| AuditError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        let is_dump = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("json" | "yaml" | "yml")
        );
        if is_dump && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Reads one file into `cluster`.
pub fn load_file(cluster: &mut Cluster, path: &Path) -> Result<(), AuditError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuditError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let documents = parse_documents(path, &text)?;
    for (d, doc) in documents.into_iter().enumerate() {
        add_document(cluster, path, d + 1, doc)?;
    }
    Ok(())
}

/// JSON when the file says so or looks like it (a concatenation of JSON values is accepted, as
/// several `kubectl get -o json` outputs appended to one file); YAML multi-document otherwise.
fn parse_documents(path: &Path, text: &str) -> Result<Vec<Value>, AuditError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    let json =
        ext == "json" || (ext != "yaml" && ext != "yml" && text.trim_start().starts_with('{'));
    let mut docs = Vec::new();
    if json {
        for (i, doc) in serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .enumerate()
        {
            docs.push(doc.map_err(|e| AuditError::Parse {
                path: path.to_path_buf(),
                document: i + 1,
                format: "JSON",
                message: e.to_string(),
            })?);
        }
    } else {
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let value = Value::deserialize(doc).map_err(|e| AuditError::Parse {
                path: path.to_path_buf(),
                document: i + 1,
                format: "YAML",
                message: e.to_string(),
            })?;
            // `---` followed by nothing is an empty document, not an object.
            if !value.is_null() {
                docs.push(value);
            }
        }
    }
    Ok(docs)
}

fn add_document(
    cluster: &mut Cluster,
    path: &Path,
    document: usize,
    doc: Value,
) -> Result<(), AuditError> {
    let list_kind = doc
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| k.ends_with("List"))
        .map(str::to_owned);
    let Some(list_kind) = list_kind.filter(|_| doc.get("items").is_some()) else {
        return cluster.add(doc).map_err(|r| AuditError::Malformed {
            path: path.to_path_buf(),
            object: r.object.unwrap_or_else(|| format!("document {document}")),
            reason: r.reason,
        });
    };
    let list_api_version = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("v1")
        .to_owned();
    let Value::Array(items) = doc["items"].clone() else {
        return Err(AuditError::Malformed {
            path: path.to_path_buf(),
            object: format!("document {document} ({list_kind})"),
            reason: "items is not a list".into(),
        });
    };
    // `PodList` items omit kind and apiVersion; a plain `List` carries them per item.
    let item_kind = list_kind.strip_suffix("List").filter(|k| !k.is_empty());
    for (i, mut item) in items.into_iter().enumerate() {
        if let (Some(kind), Some(map)) = (item_kind, item.as_object_mut()) {
            map.entry("kind").or_insert_with(|| kind.into());
            map.entry("apiVersion")
                .or_insert_with(|| list_api_version.clone().into());
        }
        cluster.add(item).map_err(|r| AuditError::Malformed {
            path: path.to_path_buf(),
            object: r
                .object
                .unwrap_or_else(|| format!("document {document} item {i}")),
            reason: r.reason,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Kind;

    #[test]
    fn typed_lists_lend_their_kind_to_items() {
        let mut c = Cluster::default();
        let doc = serde_json::json!({"apiVersion": "v1", "kind": "PodList",
            "items": [{"metadata": {"name": "p", "namespace": "a"}}]});
        add_document(&mut c, Path::new("x.json"), 1, doc).expect("a PodList item is a Pod");
        assert_eq!(c.counts().get(&Kind::Pod), Some(&1));
    }

    #[test]
    fn an_item_without_identity_is_named_by_its_position() {
        let mut c = Cluster::default();
        let doc = serde_json::json!({"apiVersion": "v1", "kind": "List",
            "items": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}, 7]});
        let err = add_document(&mut c, Path::new("dump.json"), 2, doc).expect_err("7 is no object");
        assert_eq!(
            err.to_string(),
            "dump.json: document 2 item 1: not a JSON object"
        );
    }
}
