//! Reading dumps: files or directories of JSON or YAML, each document a single object or a List
//! (`kubectl get <kinds> -A -o json` writes `kind: List`; the API itself answers `PodList` & co.
//! whose items carry no `kind`, which is filled in from the list's own). JSON is streamed from the
//! file object by object (`document.rs`); YAML is parsed by serde_yaml, which reads the whole
//! file as text first, one document at a time.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::document::Sink;
use crate::error::AuditError;
use crate::inventory::{Cluster, without_position};

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

/// Reads one file into `cluster`: JSON when its name says so or it starts with `{` (a
/// concatenation of JSON documents is accepted, as several `kubectl get -o json` outputs appended
/// to one file); YAML multi-document otherwise.
pub fn load_file(cluster: &mut Cluster, path: &Path) -> Result<(), AuditError> {
    let read_err = |source| AuditError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    let json = match ext {
        "json" => true,
        "yaml" | "yml" => false,
        _ => skip_whitespace(&mut reader).map_err(read_err)? == Some(b'{'),
    };
    let mut sink = Sink::new(cluster);
    if json {
        // NB: the deserializer owns the reader: std reads `Bytes<BufReader<_>>` straight from the
        // buffer, twice as fast as through `&mut BufReader` on a 500 MB dump.
        let mut de = serde_json::Deserializer::from_reader(reader);
        for document in 1.. {
            let result = sink.document(document, &mut de);
            // The end of the input where the next document would start: done.
            if let Err(e) = &result
                && e.classify() == serde_json::error::Category::Eof
                && !sink.document_started()
            {
                break;
            }
            finish(&mut sink, path, document, "JSON", result)?;
        }
    } else {
        let mut text = String::new();
        reader.read_to_string(&mut text).map_err(read_err)?;
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let result = sink.document(i + 1, doc);
            finish(&mut sink, path, i + 1, "YAML", result)?;
        }
    }
    Ok(())
}

/// Maps the end of one document: an object the inventory refused, or a parse error.
fn finish<T, E: std::fmt::Display>(
    sink: &mut Sink<'_>,
    path: &Path,
    document: usize,
    format: &'static str,
    result: Result<T, E>,
) -> Result<(), AuditError> {
    let Err(e) = result else { return Ok(()) };
    if let Some(refused) = sink.take_refused() {
        return Err(AuditError::Malformed {
            path: path.to_path_buf(),
            object: refused.rejected.object.unwrap_or(refused.position),
            reason: refused.rejected.reason,
        });
    }
    let message = e.to_string();
    Err(AuditError::Parse {
        path: path.to_path_buf(),
        document,
        format,
        message: if format == "JSON" {
            message
        } else {
            without_position(&message).to_string()
        },
    })
}

/// Skips whitespace; returns the next byte without consuming it, `None` at the end.
fn skip_whitespace(reader: &mut impl BufRead) -> std::io::Result<Option<u8>> {
    loop {
        let buf = reader.fill_buf()?;
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        let n = buf.iter().take_while(|b| b.is_ascii_whitespace()).count();
        if n == 0 {
            return Ok(Some(first));
        }
        reader.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Kind;

    fn write(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    #[test]
    fn concatenated_json_documents_are_read_one_after_the_other() {
        let (_d, path) = write(
            "dump",
            "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"a\"}}\n\
             {\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\
               {\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"b\"}}]}\n\n",
        );
        let c = load_paths(&[path]).expect("loads");
        assert_eq!(c.counts().get(&Kind::Namespace), Some(&2));
    }

    #[test]
    fn a_truncated_json_document_is_a_parse_error_naming_the_document() {
        let (_d, path) = write(
            "dump.json",
            "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"a\"}}\n{\"kind\": \"List\", \"items\": [",
        );
        let err = load_paths(std::slice::from_ref(&path)).expect_err("truncated");
        assert!(
            matches!(
                &err,
                AuditError::Parse {
                    document: 2,
                    format: "JSON",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn empty_yaml_documents_are_skipped() {
        let (_d, path) = write(
            "dump.yaml",
            "---\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n",
        );
        let c = load_paths(&[path]).expect("loads");
        assert_eq!(c.counts().get(&Kind::Namespace), Some(&1));
    }
}
