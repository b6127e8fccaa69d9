//! Slim projections as discovery stores them: each object's own bytes, with the values that many
//! objects repeat byte for byte (`herald_core::slim::Mask::Shared`: a workload's labels, annotations,
//! owner and container specs, the same in every replica) held once and spliced back in on decode.
//!
//! Why: at `k8s-limits` the projections of 150,000 pods were ~280 MB, two thirds of it such repeated
//! values; pods of one ReplicaSet differ only in name, uid, IPs, node and container ids.

use std::cell::RefCell;
use std::collections::HashSet;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// A repeated value, held once.
type Segment = Arc<[u8]>;

/// One object's slim projection.
#[derive(Debug, Clone)]
pub struct Slim {
    /// The projection with the shared values cut out.
    own: Bytes,
    /// Where each shared value goes back in (an offset into `own`), in order; `None` when none.
    cuts: Option<Arc<[(u32, Segment)]>>,
}

impl Slim {
    /// A projection kept whole (fixtures, and objects with nothing to share).
    pub fn whole(bytes: Vec<u8>) -> Slim {
        Slim {
            own: Bytes::from(bytes),
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

    /// Calls `f` with the projection's JSON, spliced together in a per-thread buffer when it has
    /// shared values.
    pub fn with_json<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let Some(cuts) = &self.cuts else {
            return f(&self.own);
        };
        thread_local! {
            static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        SCRATCH.with(|scratch| {
            // NB: taken out of the cell so that `f` may decode another object (a lookup) meanwhile.
            let mut buf = std::mem::take(&mut *scratch.borrow_mut());
            buf.clear();
            let mut at = 0;
            for (pos, seg) in cuts.iter() {
                let pos = *pos as usize;
                buf.extend_from_slice(&self.own[at..pos]);
                buf.extend_from_slice(seg);
                at = pos;
            }
            buf.extend_from_slice(&self.own[at..]);
            let r = f(&buf);
            *scratch.borrow_mut() = buf;
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
    /// The stored form of a projection whose `shared` ranges (in order, not overlapping) are values
    /// other objects may repeat.
    pub fn slim(&self, projected: Vec<u8>, shared: &[Range<usize>]) -> Slim {
        if shared.is_empty() {
            return Slim::whole(projected);
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
        Slim {
            own: Bytes::from(own),
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

    fn stored(segments: &Segments, raw: &[u8]) -> Slim {
        let (bytes, shared) = slim::project_marked(&slim::POD, raw).expect("projects");
        segments.slim(bytes, &shared)
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
