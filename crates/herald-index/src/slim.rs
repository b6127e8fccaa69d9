//! Slim projections as discovery stores them: each object's own bytes, with the values that many
//! objects repeat byte for byte (`herald_core::slim::Mask::Shared`: a workload's labels, annotations,
//! owner and container specs, the same in every replica) held once and spliced back in on decode.
//!
//! Why: at `k8s-limits` the projections of 150,000 pods were ~280 MB, two thirds of it such repeated
//! values; pods of one ReplicaSet differ only in name, uid, IPs, node and container ids. What is left
//! of each (its own bytes) is held LZ4-compressed against a sibling's (`kube_face::siblings`): its
//! keys and structure are its family's, so only its own values stay (0.45 of the own bytes for
//! 30,000 `k8s-limits` pods, against 0.80 for LZ4 alone; DESIGN-NOTES section 11).

use std::cell::RefCell;
use std::collections::HashSet;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use kube_face::log::Key;
use kube_face::packed::Json;
use kube_face::siblings::Siblings;

/// A repeated value, held once.
type Segment = Arc<[u8]>;

/// One object's slim projection.
#[derive(Debug, Clone)]
pub struct Slim {
    /// The projection with the shared values cut out (compressed against a sibling's when stored
    /// by `Segments::slim`).
    own: Json,
    /// Where each shared value goes back in (an offset into `own`), in order; `None` when none.
    cuts: Option<Arc<[(u32, Segment)]>>,
}

impl Slim {
    /// A projection kept whole (fixtures, and objects with nothing to share).
    pub fn whole(bytes: Vec<u8>) -> Slim {
        Slim {
            own: Json::plain(bytes.into()),
            cuts: None,
        }
    }

    /// The projection's length in bytes.
    pub fn len(&self) -> usize {
        self.own.len()
            + self
                .cuts
                .iter()
                .flat_map(|c| c.iter())
                .map(|(_, s)| s.len())
                .sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with the projection's JSON: its own bytes decompressed and the shared values
    /// spliced back in, in per-thread buffers (borrowed as stored when plain and whole).
    pub fn with_json<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        if self.cuts.is_none() && !self.own.is_compressed() {
            return f(&self.own.get());
        }
        thread_local! {
            static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
        }
        SCRATCH.with(|scratch| {
            // NB: taken out of the cell so that `f` may decode another object (a lookup) meanwhile.
            let (mut own, mut buf) = std::mem::take(&mut *scratch.borrow_mut());
            own.clear();
            self.own.append_to(&mut own);
            let json = match &self.cuts {
                None => &own,
                Some(cuts) => {
                    buf.clear();
                    let mut at = 0;
                    for (pos, seg) in cuts.iter() {
                        let pos = *pos as usize;
                        buf.extend_from_slice(&own[at..pos]);
                        buf.extend_from_slice(seg);
                        at = pos;
                    }
                    buf.extend_from_slice(&own[at..]);
                    &buf
                }
            };
            let r = f(json);
            *scratch.borrow_mut() = (own, buf);
            r
        })
    }
}

impl PartialEq for Slim {
    /// Equal JSON. The same mask cuts equal JSON at the same places, so the parts compare one by one;
    /// interned segments mostly compare by address.
    fn eq(&self, other: &Slim) -> bool {
        match (&self.cuts, &other.cuts) {
            (None, None) => self.own == other.own,
            (Some(a), Some(b)) => {
                self.own == other.own
                    && a.len() == b.len()
                    && a.iter()
                        .zip(b.iter())
                        .all(|((pa, sa), (pb, sb))| pa == pb && (Arc::ptr_eq(sa, sb) || sa == sb))
            }
            _ => self.with_json(|a| other.with_json(|b| a == b)),
        }
    }
}

/// The shared values in use, each held once. Every feed interns into it as objects arrive.
#[derive(Debug, Default)]
pub struct Segments {
    inner: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    set: HashSet<Segment, foldhash::fast::RandomState>,
    /// Size after the last sweep: the next one runs when it doubles.
    swept: usize,
}

impl Segments {
    /// The stored form of the projection of the object at `key`, whose `shared` ranges (in order, not
    /// overlapping) are values other objects may repeat; the rest compressed against a sibling's in
    /// `siblings` (one per resource: a family is a namespace and a name stem).
    pub fn slim(
        &self,
        projected: Vec<u8>,
        shared: &[Range<usize>],
        siblings: &Siblings,
        key: &Key,
    ) -> Slim {
        if shared.is_empty() {
            return Slim {
                own: siblings.compress(key, &projected),
                cuts: None,
            };
        }
        let kept: usize = projected.len() - shared.iter().map(|r| r.len()).sum::<usize>();
        let mut own = Vec::with_capacity(kept);
        let mut cuts = Vec::with_capacity(shared.len());
        let mut table = self
            .inner
            .lock()
            .expect("segment table lock is never poisoned");
        let mut at = 0;
        for r in shared {
            own.extend_from_slice(&projected[at..r.start]);
            let pos = u32::try_from(own.len()).expect("a projection is far below 4 GiB");
            cuts.push((pos, table.intern(&projected[r.clone()])));
            at = r.end;
        }
        own.extend_from_slice(&projected[at..]);
        table.maybe_sweep();
        drop(table);
        Slim {
            own: siblings.compress(key, &own),
            cuts: Some(Arc::from(cuts)),
        }
    }

    /// Distinct shared values held (for tests).
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .expect("segment table lock is never poisoned")
            .set
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Table {
    fn intern(&mut self, bytes: &[u8]) -> Segment {
        if let Some(s) = self.set.get(bytes) {
            return s.clone();
        }
        let s: Segment = Arc::from(bytes);
        self.set.insert(s.clone());
        s
    }

    /// Drops values no stored object holds any more, once the table doubled since the last sweep:
    /// churn (new ReplicaSets, images) must not grow it for ever.
    fn maybe_sweep(&mut self) {
        if self.set.len() < 2 * self.swept.max(4096) {
            return;
        }
        self.set.retain(|s| Arc::strong_count(s) > 1);
        self.swept = self.set.len();
    }
}

#[cfg(test)]
mod tests {
    use herald_core::slim;
    use serde_json::json;

    use super::*;

    fn pod(name: &str, ip: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "labels": {"app": "web", "pod-template-hash": "abc"},
                         "annotations": {"prometheus.io/scrape": "true"}},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "main", "image": "img:1", "ports": [{"containerPort": 8080}]}]},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("json")
    }

    thread_local! {
        static SIBLINGS: Siblings = Siblings::keeping(3, 4);
    }

    /// `raw`'s stored form, compressed against the siblings of the test's thread.
    fn stored(segments: &Segments, raw: &[u8]) -> Slim {
        let v: serde_json::Value = serde_json::from_slice(raw).expect("json");
        let meta = &v["metadata"];
        let key: Key = kube_face::log::key(
            meta["namespace"].as_str().unwrap_or(""),
            meta["name"].as_str().unwrap_or(""),
        );
        let (bytes, shared) = slim::project_marked(&slim::POD, raw).expect("projects");
        SIBLINGS.with(|siblings| segments.slim(bytes, &shared, siblings, &key))
    }

    #[test]
    fn replicas_hold_their_repeated_values_once_and_decode_to_the_whole_projection() {
        let segments = Segments::default();
        let a = stored(&segments, &pod("web-1", "127.16.0.1"));
        let b = stored(&segments, &pod("web-2", "127.16.0.2"));
        let whole = slim::project(&slim::POD, &pod("web-1", "127.16.0.1")).expect("projects");
        a.with_json(|json| assert_eq!(json, &whole[..]));
        assert_eq!(a.len(), whole.len());
        // labels, annotations, containers, conditions: four values for both pods.
        assert_eq!(segments.len(), 4);
        let (ca, cb) = (
            a.cuts.as_ref().expect("cuts"),
            b.cuts.as_ref().expect("cuts"),
        );
        assert!(
            ca.iter()
                .zip(cb.iter())
                .all(|((_, x), (_, y))| Arc::ptr_eq(x, y))
        );
        let shared: usize = ca.iter().map(|(_, s)| s.len()).sum();
        assert_eq!(
            a.own.len() + shared,
            whole.len(),
            "only the shared values are cut out"
        );
        assert!(shared > 150);
    }

    #[test]
    fn equality_is_equality_of_the_json() {
        let segments = Segments::default();
        let raw = pod("web-1", "127.16.0.1");
        let a = stored(&segments, &raw);
        assert_eq!(a, stored(&segments, &raw));
        assert_eq!(a, stored(&Segments::default(), &raw), "interned elsewhere");
        let whole = Slim::whole(slim::project(&slim::POD, &raw).expect("projects"));
        assert_eq!(a, whole);
        assert_ne!(a, stored(&segments, &pod("web-1", "127.16.0.9")));
    }

    #[test]
    fn replicas_own_bytes_are_held_against_a_siblings_and_read_back_whole() {
        let segments = Segments::default();
        let siblings = Siblings::keeping(3, 4);
        let uid = |i: u32| {
            format!(
                "{:08x}-{:04x}-4{:03x}-9{:03x}-{:012x}",
                i * 7919,
                i,
                i,
                i,
                i * 104729
            )
        };
        let raws: Vec<Vec<u8>> = (0..50u32)
            .map(|i| {
                serde_json::to_vec(&json!({
                    "metadata": {"name": format!("web-5d8f-{i:05}"), "namespace": "ns", "uid": uid(i),
                                 "labels": {"app": "web"}},
                    "spec": {"nodeName": format!("node-{}", i % 7), "containers": [{"name": "main"}]},
                    "status": {"podIP": format!("127.16.0.{i}"), "hostIP": format!("127.17.0.{}", i % 7),
                               "containerStatuses": [{"name": "main",
                                   "containerID": format!("containerd://{:064x}", u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15))}]}
                }))
                .expect("json")
            })
            .collect();
        let kept: Vec<Slim> = raws
            .iter()
            .enumerate()
            .map(|(i, raw)| {
                let key: Key = ("ns".into(), format!("web-5d8f-{i:05}").into());
                let (bytes, shared) = slim::project_marked(&slim::POD, raw).expect("projects");
                segments.slim(bytes, &shared, &siblings, &key)
            })
            .collect();
        for (raw, s) in raws.iter().zip(&kept) {
            let whole = slim::project(&slim::POD, raw).expect("projects");
            s.with_json(|json| assert_eq!(json, &whole[..]));
            assert_eq!(s, &Slim::whole(whole));
        }
        assert_eq!(siblings.live(), 1, "one family, one base");
        let own: usize = kept.iter().map(|s| s.own.len()).sum();
        let held: usize = kept.iter().map(|s| s.own.held_len()).sum();
        assert!(held * 2 < own, "held {held} of {own} own bytes");
    }

    #[test]
    fn values_no_object_holds_are_swept() {
        let segments = Segments::default();
        let mut kept = Vec::new();
        for i in 0..9000 {
            let raw = serde_json::to_vec(
                &json!({"metadata": {"name": "p", "labels": {"i": i.to_string()}}}),
            )
            .expect("json");
            let s = stored(&segments, &raw);
            if i < 10 {
                kept.push((raw, s));
            }
        }
        // One sweep ran when the table reached 8,192 values: only the ten still held survived it.
        assert!(segments.len() < 1000, "{} values held", segments.len());
        for (raw, s) in &kept {
            let whole = slim::project(&slim::POD, raw).expect("projects");
            s.with_json(|json| assert_eq!(json, &whole[..]));
        }
    }
}
