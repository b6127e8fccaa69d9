//! Objects' JSON compressed against a sibling's: the pods of one ReplicaSet or DaemonSet, the nodes
//! of a pool, are the same document but for names, uids, addresses and times, so zstd with the
//! first sibling's JSON as its dictionary keeps a few hundred bytes per object where LZ4 alone keeps
//! about half of it (`packed::Json`; LZ4 against the sibling until 2026-11-27 kept 1.7× zstd's).
//!
//! A family is (namespace, name up to its last `-`): what apimachinery's `generateName` leaves of a
//! generated name (`web-7d9f8c6b5-x2x4q` → `web-7d9f8c6b5`, a DaemonSet's `node-exporter-8bc2f` →
//! `node-exporter`), and a StatefulSet's or a pool's numbered names alike. A wrong guess costs only
//! compression: every object decompresses to its own bytes whatever base it was compressed against.
//!
//! The bases themselves are held zstd-compressed against the resource's dictionary (`packed::Dict`):
//! the JSON of the first objects the resource's siblings saw. Where objects have no family (each
//! Service, Endpoints and EndpointSlice is its own base) that is how every object is held.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::log::Key;
use crate::packed::{Base, Dict, Json};

/// By default, a member compressed to more than this fraction of its JSON (1/`POOR`) starts a new
/// base for its family: the family has drifted from its base (a new image, a new template).
const POOR: usize = 4;

/// The dictionary is the first objects' JSON, up to this many bytes (raw content: zstd matches
/// anything in it). Measured on `k8s-limits`: 16 KiB kept the bases as small as 32 or 64 KiB did,
/// and as a dictionary trained (`ZDICT`) on objects from the whole list.
const DICT_BYTES: usize = 16 << 10;
/// ...or of at most this many objects, when they are small.
const DICT_OBJECTS: usize = 64;

/// The bases of one resource's families.
#[derive(Debug)]
pub struct Siblings {
    families: Mutex<Families>,
    /// A member compressed to more than `kept.0 / kept.1` of its size starts a new base.
    kept: (usize, usize),
}

impl Default for Siblings {
    fn default() -> Siblings {
        Siblings::keeping(1, POOR)
    }
}

#[derive(Debug, Default)]
struct Families {
    /// NB: weak, so a base lives exactly as long as a member compressed against it.
    bases: HashMap<(Box<str>, Box<str>), Weak<Base>>,
    /// Families above which the dead ones are swept (twice the live count at the last sweep).
    sweep_at: usize,
    /// The resource's dictionary, once its first objects are in.
    dict: Option<Arc<Dict>>,
    /// The first objects' JSON, while the dictionary is being gathered.
    sample: Vec<u8>,
    sampled: usize,
}

impl Families {
    /// Takes `json` into the dictionary's sample, making the dictionary when it is full.
    fn sample(&mut self, json: &[u8]) {
        if self.dict.is_some() {
            return;
        }
        let room = DICT_BYTES - self.sample.len();
        self.sample.extend_from_slice(&json[..json.len().min(room)]);
        self.sampled += 1;
        if self.sample.len() == DICT_BYTES || self.sampled == DICT_OBJECTS {
            self.dict = Some(Arc::new(Dict::new(&self.sample)));
            self.sample = Vec::new();
        }
    }
}

impl Siblings {
    pub fn new() -> Siblings {
        Siblings::default()
    }

    /// Siblings whose members start a new base only when they compress to more than
    /// `numerator / denominator` of their size: for documents whose members are mostly their own
    /// (discovery's slim projections, where names, uids, addresses and container ids are most of
    /// the bytes) and still gain from the base's keys and structure.
    pub fn keeping(numerator: usize, denominator: usize) -> Siblings {
        Siblings {
            families: Mutex::default(),
            kept: (numerator, denominator.max(1)),
        }
    }

    /// `json`, the JSON of the object at `key`, compressed against its family's base (the first
    /// member seen becomes it).
    pub fn compress(&self, key: &Key, json: &[u8]) -> Json {
        let family = family(key);
        let (found, dict) = {
            let families = self.lock();
            let found = families.bases.get(&family).and_then(Weak::upgrade);
            (found, families.dict.clone())
        };
        if let Some(base) = found {
            let j = Json::against(json, &base);
            if j.held_len() * self.kept.1 <= json.len() * self.kept.0 {
                return j;
            }
        }
        let base = Arc::new(match &dict {
            Some(dict) => Base::with_dict(json, dict),
            None => Base::new(json),
        });
        let j = Json::against(json, &base);
        let mut families = self.lock();
        families.sample(json);
        families.bases.insert(family, Arc::downgrade(&base));
        if families.bases.len() > families.sweep_at {
            families.bases.retain(|_, b| b.strong_count() > 0);
            families.sweep_at = (families.bases.len() * 2).max(1024);
        }
        j
    }

    /// The resource's dictionary, once made.
    pub fn dict(&self) -> Option<Arc<Dict>> {
        self.lock().dict.clone()
    }

    /// Families with a live base.
    pub fn live(&self) -> usize {
        self.lock()
            .bases
            .values()
            .filter(|b| b.strong_count() > 0)
            .count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Families> {
        self.families
            .lock()
            .expect("no code panics holding the siblings' lock")
    }
}

/// The family of the object at `key` (see the module's comment).
fn family(key: &Key) -> (Box<str>, Box<str>) {
    let name = key.1.as_str();
    let stem = name.rfind('-').map_or(name, |i| &name[..i]);
    (key.0.as_str().into(), stem.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::Proto;
    use bytes::Bytes;

    fn pod(name: &str, ip: &str) -> Vec<u8> {
        format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","labels":{{"app":"web","tier":"frontend","pod-template-hash":"7d9f8c6b5"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f8c6b5","controller":true}}]}},"spec":{{"containers":[{{"name":"web","image":"registry.example/web:1.2.3","ports":[{{"containerPort":8080,"name":"http"}}],"resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}}}}}}],"nodeName":"node-17"}},"status":{{"phase":"Running","podIP":"{ip}"}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn siblings_read_back_as_given_and_hold_a_fraction_of_plain_lz4() {
        let s = Siblings::new();
        let mut kept = Vec::new();
        for i in 0..50 {
            let name = format!("web-7d9f8c6b5-{i:05}");
            let raw = pod(&name, &format!("10.0.{}.{}", i / 200, i % 200));
            let j = s.compress(&("ns".into(), name.into()), &raw);
            kept.push((raw, j));
        }
        for (raw, j) in &kept {
            assert_eq!(&*j.get(), &raw[..]);
            let mut out = b"prefix".to_vec();
            j.append_to(&mut out);
            assert_eq!(&out[6..], &raw[..]);
        }
        let base = kept[0].1.base().expect("compressed against a base").clone();
        assert!(
            kept.iter()
                .all(|(_, j)| Arc::ptr_eq(j.base().unwrap(), &base))
        );
        let held: usize = kept.iter().map(|(_, j)| j.held_len()).sum::<usize>() + base.held_len();
        let lz4: usize = kept.iter().map(|(r, _)| Json::compress(r).held_len()).sum();
        assert!(held * 3 < lz4, "held {held}, plain LZ4 {lz4}");
        assert_eq!(s.live(), 1);
        // A base lives while a member does.
        drop(base);
        kept.clear();
        assert_eq!(s.live(), 0);
    }

    /// An object's protobuf, packed by its JSON and read back (whole, and appended after a prefix);
    /// what it holds, its family's protobuf dictionary apart.
    fn proto_round_trip(j: &Json, msg: crate::proto::MsgId, raw: &[u8]) -> (Vec<u8>, Proto) {
        let encoded = crate::proto::schema().encode(msg, raw);
        let held = j.pack_proto(encoded.clone());
        assert_eq!(held.len(), encoded.len());
        assert_eq!(&*j.proto(&held), &encoded[..]);
        let mut out = b"prefix".to_vec();
        j.append_proto(&held, &mut out);
        assert_eq!(&out[6..], &encoded[..]);
        (encoded, held)
    }

    #[test]
    fn protobuf_is_held_as_its_json_is_and_reads_back() {
        let schema = crate::proto::schema();
        let pod_msg = schema.kind("v1", "Pod").expect("Pod is in the schema");
        let s = Siblings::new();
        let (mut encoded, mut held) = (0, 0);
        let mut kept = Vec::new();
        for i in 0..50 {
            let name = format!("web-7d9f8c6b5-{i:05}");
            let raw = pod(&name, &format!("10.0.{}.{}", i / 200, i % 200));
            let j = s.compress(&("ns".into(), name.into()), &raw);
            let (e, h) = proto_round_trip(&j, pod_msg, &raw);
            assert!(e.len() > 100, "a pod's protobuf: {} bytes", e.len());
            (encoded, held) = (encoded + e.len(), held + h.held_len());
            kept.push((j, e, h));
        }
        let base = kept[0].0.base().expect("a family").clone();
        held += base.proto_held_len();
        // Members against their family's protobuf: what differs, not the whole message.
        assert!(held * 5 < encoded, "held {held} of {encoded}");
        // Read back again in another order (the thread's contexts switch bases).
        for (j, e, h) in kept.iter().rev() {
            assert_eq!(&*j.proto(h), &e[..]);
        }

        // Services: each a family of one, its protobuf dictionary held against the resource's
        // dictionary once there is one.
        let svc_msg = schema
            .kind("v1", "Service")
            .expect("Service is in the schema");
        let s = Siblings::new();
        let (mut later_encoded, mut later_held) = (0, 0);
        let mut kept = Vec::new();
        for i in 0..400u32 {
            let raw = service(i);
            let j = s.compress(&("ns".into(), format!("svc{i}").into()), &raw);
            let (e, h) = proto_round_trip(&j, svc_msg, &raw);
            if i >= 200 {
                let base = j.base().expect("its own family");
                later_encoded += e.len();
                later_held += h.held_len() + base.proto_held_len();
            }
            kept.push((j, e, h));
        }
        assert!(s.dict().is_some());
        // Each holds its protobuf once, against the resource's dictionary (these are ~150 bytes:
        // a zstd frame's own bytes are a large part; an EndpointSlice is ~2.4 KB).
        assert!(
            later_held * 10 < later_encoded * 9,
            "held {later_held} of {later_encoded}"
        );
        for (j, e, h) in kept.iter().step_by(7) {
            assert_eq!(&*j.proto(h), &e[..]);
        }
        // Plain JSON packs plain protobuf.
        let raw = service(1);
        let (e, h) = proto_round_trip(&Json::plain(Bytes::from(raw.clone())), svc_msg, &raw);
        assert_eq!(h.held_len(), e.len());
    }

    /// A watch frame's one use of an entry's protobuf gives the bytes every other reader gets,
    /// whether it is the use that encodes them (the donor, a packed member) or a later one.
    #[test]
    fn an_entry_s_protobuf_for_one_use_is_its_protobuf() {
        let schema = crate::proto::schema();
        let pod_msg = schema.kind("v1", "Pod").expect("Pod is in the schema");
        let s = Siblings::new();
        for i in 0..3 {
            let name = format!("web-7d9f8c6b5-{i:05}");
            let raw = pod(&name, &format!("10.0.0.{i}"));
            let entry = crate::log::Entry {
                key: ("ns".into(), name.as_str().into()),
                rv: 1,
                labels: crate::packed::Labels::new(),
                fields: crate::packed::Fields::default(),
                uid_hash: 0,
                bytes: s.compress(&("ns".into(), name.into()), &raw),
                proto: Default::default(),
            };
            let expected = schema.encode(pod_msg, &raw);
            let before = crate::proto::encoded_total();
            assert_eq!(
                &*entry.proto_once(pod_msg),
                &expected[..],
                "pod {i}, encoding"
            );
            assert_eq!(&*entry.proto_once(pod_msg), &expected[..], "pod {i}, held");
            assert_eq!(&*entry.proto(pod_msg), &expected[..], "pod {i}");
            assert!(
                crate::proto::encoded_total() > before,
                "encoded by the first use"
            );
        }
    }

    #[test]
    fn a_member_unlike_its_base_starts_a_new_one_and_both_read_back() {
        let s = Siblings::new();
        let a = pod("web-1", "10.0.0.1");
        let b: Vec<u8> = (0..2000u32)
            .flat_map(|i| (i.wrapping_mul(2654435761)).to_le_bytes())
            .collect();
        let (ja, jb) = (
            s.compress(&("ns".into(), "web-1".into()), &a),
            s.compress(&("ns".into(), "web-2".into()), &b),
        );
        assert!(!Arc::ptr_eq(ja.base().unwrap(), jb.base().unwrap()));
        assert_eq!(&*ja.get(), &a[..]);
        assert_eq!(&*jb.get(), &b[..]);
        // Equality compares the JSON, whatever the bases.
        assert_eq!(ja, Json::compress(&a));
        assert_eq!(ja.like(b.clone()), jb);
        assert_ne!(ja, jb);
        assert_eq!(
            family(&("ns".into(), "web-7d9f8c6b5-x2x4q".into()))
                .1
                .as_ref(),
            "web-7d9f8c6b5"
        );
        assert_eq!(family(&("".into(), "node".into())).1.as_ref(), "node");
    }

    /// A Service-like object: each its own family, with little in common with the others but its
    /// keys and structure.
    fn service(i: u32) -> Vec<u8> {
        format!(
            r#"{{"kind":"Service","apiVersion":"v1","metadata":{{"name":"svc{i}","namespace":"ns{}","uid":"{:08x}-1c2d-4e5f-8a9b-{:012x}","resourceVersion":"{}","labels":{{"app":"a{i}"}}}},"spec":{{"ports":[{{"name":"http","protocol":"TCP","port":{},"targetPort":8080}}],"clusterIP":"10.96.{}.{}","type":"ClusterIP","sessionAffinity":"None"}},"status":{{"loadBalancer":{{}}}}}}"#,
            i % 7,
            i.wrapping_mul(2654435761),
            u64::from(i) * 7919,
            1000 + i,
            80 + i % 3,
            i / 250,
            i % 250
        )
        .into_bytes()
    }

    #[test]
    fn bases_after_the_first_objects_are_held_against_the_resource_dictionary() {
        let s = Siblings::new();
        let objects: Vec<(Key, Vec<u8>)> = (0..400u32)
            .map(|i| (("ns".into(), format!("svc{i}").into()), service(i)))
            .collect();
        let kept: Vec<Json> = objects.iter().map(|(k, raw)| s.compress(k, raw)).collect();
        let dict = s.dict().expect("a dictionary after the first objects");
        assert!(dict.len() <= DICT_BYTES && !dict.is_empty());
        for ((_, raw), j) in objects.iter().zip(&kept) {
            assert_eq!(&*j.get(), &raw[..]);
            let mut out = b"x".to_vec();
            j.append_to(&mut out);
            assert_eq!(&out[1..], &raw[..]);
        }
        // Every object is its own base here: those made after the dictionary hold less than
        // LZ4 alone would.
        let late = &kept[DICT_OBJECTS..];
        let held: usize = late.iter().map(|j| j.base().unwrap().held_len()).sum();
        let lz4: usize = objects[DICT_OBJECTS..]
            .iter()
            .map(|(_, r)| Json::compress(r).held_len())
            .sum();
        assert!(
            held * 2 < lz4,
            "held against the dictionary {held}, LZ4 {lz4}"
        );
        // A changed version keeps its form, and equality is by content.
        let changed = kept[300].base().unwrap().clone();
        assert_eq!(Json::against(&service(300), &changed), kept[300]);
    }

    proptest::proptest! {
        #[test]
        fn json_compressed_against_any_dictionary_round_trips(
            dict in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
        ) {
            let dict = Arc::new(Dict::new(&dict));
            let j = Json::with_dict(&raw, &dict);
            proptest::prop_assert_eq!(&*j.get(), &raw[..]);
            proptest::prop_assert_eq!(&j.like(raw.clone()), &j);
            let base = Arc::new(Base::with_dict(&raw, &dict));
            let k = Json::against(&raw, &base);
            proptest::prop_assert_eq!(&*k.get(), &raw[..]);
        }

        #[test]
        fn json_compressed_against_any_base_round_trips(
            base in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
        ) {
            let base = Arc::new(Base::new(&base));
            let j = Json::against(&raw, &base);
            proptest::prop_assert_eq!(&*j.get(), &raw[..]);
            proptest::prop_assert_eq!(j, Json::plain(bytes::Bytes::from(raw)));
        }
    }
}
