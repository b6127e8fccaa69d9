//! Streaming one document — a single object or a List — into the inventory, object by object,
//! with serde seeds: the document's `items` array is visited element by element, each element is
//! transcoded into compact JSON (a reused buffer; its length is the object's wire size) and added to
//! the inventory at once. No document is ever held as a value tree, so a 500 MB List costs the
//! compact facts of its objects, not gigabytes of `serde_json::Value`.
//!
//! The same seeds read dumps (JSON streams from a file reader, YAML documents from serde_yaml) and
//! live list pages.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

use crate::inventory::{Cluster, ListType, Rejected, without_position};

/// An object the inventory refused, and where it was in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// `document 2 item 7` (or `document 2` for a single object): used when the object has no
    /// usable identity.
    pub position: String,
    pub rejected: Rejected,
}

/// Where streamed objects go, and the refusal that stopped the stream (serde errors carry text
/// only, so the structured reason is kept here).
pub struct Sink<'c> {
    cluster: &'c mut Cluster,
    refused: Option<Refused>,
    buf: Vec<u8>,
    /// Whether the last document had begun (its first token was read) when it ended.
    started: bool,
}

/// What a document was.
#[derive(Debug, Default)]
pub struct Outcome {
    /// `metadata.continue` of a List page.
    pub continue_token: Option<String>,
}

impl<'c> Sink<'c> {
    pub fn new(cluster: &'c mut Cluster) -> Sink<'c> {
        Sink {
            cluster,
            refused: None,
            buf: Vec::with_capacity(64 * 1024),
            started: false,
        }
    }

    /// Whether the last document had begun: an end-of-input error before it began is the clean
    /// end of a stream of documents.
    pub fn document_started(&self) -> bool {
        self.started
    }

    /// The refusal that stopped the last document, if that is what stopped it.
    pub fn take_refused(&mut self) -> Option<Refused> {
        self.refused.take()
    }

    /// Reads document number `document` (1-based, for error positions) from `d`.
    pub fn document<'de, D: Deserializer<'de>>(
        &mut self,
        document: usize,
        d: D,
    ) -> Result<Outcome, D::Error> {
        self.started = false;
        DocumentSeed {
            sink: self,
            document,
            lend: None,
        }
        .deserialize(d)
    }

    /// Reads a list page of objects of a known type, lending it to items without their own
    /// (whatever the page's own `kind` says).
    pub fn page<'de, D: Deserializer<'de>>(
        &mut self,
        page: usize,
        lend: &ListType,
        d: D,
    ) -> Result<Outcome, D::Error> {
        self.started = false;
        DocumentSeed {
            sink: self,
            document: page,
            lend: Some(lend),
        }
        .deserialize(d)
    }

    /// Adds an object; `Ok(false)` when `defer_untyped` and it lacks its kind.
    fn add<E: serde::de::Error>(
        &mut self,
        json: &[u8],
        lend: Option<&ListType>,
        defer_untyped: bool,
        position: impl FnOnce() -> String,
    ) -> Result<bool, E> {
        self.cluster
            .add_or_defer(json, lend, defer_untyped)
            .map_err(|rejected| {
                self.refused = Some(Refused {
                    position: position(),
                    rejected,
                });
                E::custom("the object was refused")
            })
    }
}

/// The item kind a typed list lends its items: `PodList` → `Pod`; a plain `List` lends none.
fn lent_type(list_kind: &str, api_version: Option<&str>) -> Option<ListType> {
    let kind = list_kind.strip_suffix("List").filter(|k| !k.is_empty())?;
    Some(ListType {
        kind: kind.to_string(),
        api_version: api_version.unwrap_or("v1").to_string(),
    })
}

/// Transcodes whatever value `d` holds into compact JSON in `out`.
fn compact<'de, D: Deserializer<'de>>(d: D, out: &mut Vec<u8>) -> Result<(), D::Error> {
    out.clear();
    let mut ser = serde_json::Serializer::new(&mut *out);
    serde_transcode::transcode(d, &mut ser)
        .map_err(|e| D::Error::custom(without_position(&e.to_string())))
}

struct DocumentSeed<'s, 'c> {
    sink: &'s mut Sink<'c>,
    document: usize,
    /// The type of the items, when the caller knows it.
    lend: Option<&'s ListType>,
}

impl<'de> DeserializeSeed<'de> for DocumentSeed<'_, '_> {
    type Value = Outcome;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Outcome, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DocumentSeed<'_, '_> {
    type Value = Outcome;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object or List")
    }

    /// `---` followed by nothing is an empty document, not an object.
    fn visit_unit<E>(self) -> Result<Outcome, E> {
        self.sink.started = true;
        Ok(Outcome::default())
    }

    fn visit_none<E>(self) -> Result<Outcome, E> {
        self.sink.started = true;
        Ok(Outcome::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Outcome, A::Error> {
        let DocumentSeed {
            sink,
            document,
            lend: known,
        } = self;
        sink.started = true;
        // Every field but `items`, compact, to rebuild a single object from.
        let mut fields: Vec<(String, Vec<u8>)> = Vec::new();
        let mut kind: Option<String> = None;
        let mut api_version: Option<String> = None;
        let mut continue_token = None;
        let mut streamed = false;
        // Items without kind met before the list's own kind: typed-list items to be lent it.
        let mut pending: Vec<(usize, Vec<u8>)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            // NB: `kubectl get -o json` writes `kind: List` after `items` (its keys are sorted),
            // while the API writes `kind: PodList` first; items are streamed either way.
            if key == "items" && kind.as_deref().is_none_or(|k| k.ends_with("List")) {
                let lend = known.cloned().or_else(|| {
                    kind.as_deref()
                        .and_then(|k| lent_type(k, api_version.as_deref()))
                });
                map.next_value_seed(ItemsSeed {
                    sink: &mut *sink,
                    document,
                    lend: lend.as_ref(),
                    kind_known: kind.is_some() || known.is_some(),
                    pending: &mut pending,
                })?;
                streamed = true;
                continue;
            }
            let mut value = Vec::new();
            map.next_value_seed(CompactSeed(&mut value))?;
            match key.as_str() {
                "kind" => kind = serde_json::from_slice(&value).ok(),
                "apiVersion" => api_version = serde_json::from_slice(&value).ok(),
                "metadata" => {
                    continue_token = serde_json::from_slice::<ListMeta>(&value)
                        .ok()
                        .and_then(|m| m.continue_)
                        .filter(|t| !t.is_empty());
                }
                _ => {}
            }
            fields.push((key, value));
        }
        if streamed {
            let lend = match kind.as_deref() {
                _ if known.is_some() => known.cloned(),
                Some(k) if k.ends_with("List") => lent_type(k, api_version.as_deref()),
                other => {
                    sink.refused = Some(Refused {
                        position: format!("document {document}"),
                        rejected: Rejected {
                            object: None,
                            reason: match other {
                                Some(k) => format!("it has items, but its kind {k} is not a List"),
                                None => "apiVersion and kind must be strings".into(),
                            },
                        },
                    });
                    return Err(A::Error::custom("the document was refused"));
                }
            };
            for (i, json) in pending {
                sink.add(&json, lend.as_ref(), false, || {
                    format!("document {document} item {i}")
                })?;
            }
        } else {
            let mut object =
                Vec::with_capacity(fields.iter().map(|(k, v)| k.len() + v.len() + 4).sum());
            object.push(b'{');
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    object.push(b',');
                }
                serde_json::to_writer(&mut object, k).expect("a string always encodes");
                object.push(b':');
                object.extend_from_slice(v);
            }
            object.push(b'}');
            sink.add(&object, None, false, || format!("document {document}"))?;
        }
        Ok(Outcome { continue_token })
    }
}

#[derive(serde::Deserialize)]
struct ListMeta {
    #[serde(rename = "continue")]
    continue_: Option<String>,
}

struct CompactSeed<'b>(&'b mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for CompactSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        compact(d, self.0)
    }
}

struct ItemsSeed<'s, 'c, 'p> {
    sink: &'s mut Sink<'c>,
    document: usize,
    lend: Option<&'p ListType>,
    kind_known: bool,
    pending: &'p mut Vec<(usize, Vec<u8>)>,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_, '_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("items: a list of objects")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let ItemsSeed {
            sink,
            document,
            lend,
            kind_known,
            pending,
        } = self;
        let mut i = 0;
        let mut buf = std::mem::take(&mut sink.buf);
        let result = loop {
            match seq.next_element_seed(CompactSeed(&mut buf)) {
                Ok(Some(())) => {}
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
            // Before the list's kind is known, an item lacking its own kind waits for it.
            match sink.add(&buf, lend, !kind_known, || {
                format!("document {document} item {i}")
            }) {
                Ok(true) => {}
                Ok(false) => pending.push((i, buf.clone())),
                Err(e) => break Err(e),
            }
            i += 1;
        };
        sink.buf = buf;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Kind;

    fn read(text: &str) -> (Cluster, Result<Outcome, serde_json::Error>, Option<Refused>) {
        let mut c = Cluster::default();
        let mut sink = Sink::new(&mut c);
        let r = sink.document(2, &mut serde_json::Deserializer::from_str(text));
        let refused = sink.take_refused();
        (c, r, refused)
    }

    #[test]
    fn typed_lists_lend_their_kind_to_items_before_or_after_them() {
        for text in [
            r#"{"apiVersion": "v1", "kind": "PodList", "items": [{"metadata": {"name": "p", "namespace": "a"}}]}"#,
            r#"{"apiVersion": "v1", "items": [{"metadata": {"name": "p", "namespace": "a"}}], "kind": "PodList"}"#,
        ] {
            let (c, r, _) = read(text);
            r.expect("a PodList item is a Pod");
            assert_eq!(c.counts().get(&Kind::Pod), Some(&1), "{text}");
        }
    }

    #[test]
    fn an_item_without_identity_is_named_by_its_position() {
        let (_, r, refused) = read(
            r#"{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}, 7]}"#,
        );
        assert!(r.is_err());
        let refused = refused.expect("refused");
        assert_eq!(refused.position, "document 2 item 1");
        assert_eq!(refused.rejected.reason, "not a JSON object");
    }

    #[test]
    fn a_single_object_is_rebuilt_from_its_fields_with_its_wire_size() {
        let text = r#"{"apiVersion": "v1", "kind": "Namespace",  "metadata": {"name": "a"}}"#;
        let (c, r, _) = read(text);
        r.expect("a Namespace");
        let compact =
            serde_json::to_vec(&serde_json::from_str::<serde_json::Value>(text).expect("JSON"))
                .expect("encodes");
        assert_eq!(c.namespaces[0].wire_bytes, compact.len());
    }

    #[test]
    fn the_continue_token_of_a_page_is_returned() {
        let (_, r, _) = read(
            r#"{"kind": "PodList", "apiVersion": "v1", "metadata": {"continue": "abc"}, "items": []}"#,
        );
        assert_eq!(r.expect("a page").continue_token.as_deref(), Some("abc"));
    }
}
