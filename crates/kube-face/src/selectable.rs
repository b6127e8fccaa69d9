//! An object's labels ([`Labels`]) and field-selector values ([`Fields`]) in packed form: what a
//! store reads to answer label and field selectors without decoding the object.
//!
//! NB: written by hand for memory. A store holds these for every object of a cluster: as a
//! `BTreeMap<String, String>` a pod's labels took a ~540-byte map node plus two allocations per
//! label, and its fields a `(&str, String)` per field plus one allocation each (~1.7 KB per pod at
//! k8s-limits shape). Packed, each is two allocations: the strings back to back in one buffer, and
//! where each ends.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use kube_selectors::LabelSet;

/// Strings stored back to back in one buffer; `ends[i]` is where string `i` ends.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
struct Strs {
    buf: Box<str>,
    ends: Box<[u32]>,
}

impl Strs {
    fn collect<'a>(items: impl IntoIterator<Item = &'a str>) -> Strs {
        let mut buf = String::new();
        let mut ends = Vec::new();
        for s in items {
            buf.push_str(s);
            // An object's labels and fields are part of it, and objects are far below 4 GiB.
            ends.push(u32::try_from(buf.len()).expect("labels and fields below 4 GiB"));
        }
        Strs {
            buf: buf.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        &self.buf[start..self.ends[i] as usize]
    }
}

/// An object's labels: keys sorted and unique (as in the map they are read into), values alongside.
/// Equal label sets compare equal, and are one allocation while any object holds them: the replicas
/// of a workload carry the same labels (150,000 pods at `k8s-limits` have 10,004 distinct sets; held
/// once per pod they took ~25 MB).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels(
    /// key 0, value 0, key 1, value 1, ...; `None` without labels (nothing allocated).
    Option<Arc<Strs>>,
);

/// Label sets and field values in use, each held once (see [`Labels`], [`Fields`]). NB: a set no object holds any more is dropped
/// when the table has doubled since its last sweep, so churn does not grow it for ever.
struct LabelTable {
    sets: std::collections::HashSet<Arc<Strs>>,
    swept: usize,
}

static LABEL_SETS: std::sync::LazyLock<std::sync::Mutex<LabelTable>> =
    std::sync::LazyLock::new(|| {
        std::sync::Mutex::new(LabelTable {
            sets: std::collections::HashSet::new(),
            swept: 0,
        })
    });

/// The one shared copy of `strs`.
fn intern(strs: Strs) -> Arc<Strs> {
    // A panic while the table was held left it consistent (each change is one call).
    let mut table = LABEL_SETS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(held) = table.sets.get(&strs) {
        return held.clone();
    }
    if table.sets.len() >= 2 * table.swept.max(1024) {
        table.sets.retain(|s| Arc::strong_count(s) > 1);
        table.swept = table.sets.len();
    }
    let held = Arc::new(strs);
    table.sets.insert(held.clone());
    held
}

impl Labels {
    /// No labels (allocates nothing).
    pub fn new() -> Labels {
        Labels::default()
    }

    /// Labels from (key, value) pairs in any order; of pairs with the same key the last one counts,
    /// as when inserting them into a map in order.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Labels {
        let mut pairs: Vec<(K, V)> = pairs.into_iter().collect();
        // Stable: among equal keys the input order stays, so the last one is the one to keep.
        pairs.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        let mut kept: Vec<(&str, &str)> = Vec::with_capacity(pairs.len());
        for (k, v) in &pairs {
            let (k, v) = (k.as_ref(), v.as_ref());
            match kept.last_mut() {
                Some(last) if last.0 == k => last.1 = v,
                _ => kept.push((k, v)),
            }
        }
        if kept.is_empty() {
            return Labels(None);
        }
        Labels(Some(intern(Strs::collect(
            kept.iter().flat_map(|(k, v)| [*k, *v]),
        ))))
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |s| s.len() / 2)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `self` and `other` are one allocation (or both empty).
    pub fn ptr_eq(&self, other: &Labels) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// NB: only called below `len()`, so there are labels.
    fn strs(&self) -> &Strs {
        self.0.as_deref().expect("an index below len() has labels")
    }

    fn key(&self, i: usize) -> &str {
        self.strs().get(2 * i)
    }

    fn value(&self, i: usize) -> &str {
        self.strs().get(2 * i + 1)
    }

    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        // Keys are sorted: binary search over the even positions.
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.value(mid)),
            }
        }
        None
    }

    /// (key, value) in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        (0..self.len()).map(|i| (self.key(i), self.value(i)))
    }

    /// As the map typed objects carry.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

impl LabelSet for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Labels {
        Labels::from_pairs(iter)
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(map: &BTreeMap<String, String>) -> Labels {
        Labels::from_pairs(map)
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// An object's values of its resource's field selectors beyond `metadata.name`/`metadata.namespace`
/// (`Resource::extra_fields`): the names are the resource's static list, so only values are stored,
/// interned as label sets are (the pods of one node in one phase have the same values). A value of
/// a field that differs per object ([`OWN_FIELDS`]: a pod's IP, a Service's cluster IP) is held
/// apart, so the rest of the set is still shared.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Fields {
    names: &'static [&'static str],
    /// `None` when there are no names. The value of an own field is "" here.
    values: Option<Arc<Strs>>,
    /// The value of the resource's own field (the first of `names` in [`OWN_FIELDS`]), if any.
    own: Option<Box<str>>,
}

/// Fields whose values are one object's own: interned with the others, they made every pod's set
/// distinct (150,000 sets and ~25 MB at `k8s-limits`, against a few thousand without the IP).
pub const OWN_FIELDS: &[&str] = &["status.podIP", "spec.clusterIP"];

impl Fields {
    /// One value per name, in the order of `names`.
    ///
    /// # Panics
    /// When `values` does not yield one value per name.
    pub fn new<'a>(
        names: &'static [&'static str],
        values: impl IntoIterator<Item = &'a str>,
    ) -> Fields {
        let mut values: Vec<&str> = values.into_iter().collect();
        assert_eq!(names.len(), values.len(), "one value per field name");
        let own = own_at(names).map(|i| Box::from(std::mem::take(&mut values[i])));
        Fields {
            names,
            values: (!names.is_empty()).then(|| intern(Strs::collect(values))),
            own,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The value of field `name`, `None` when the object has no such field.
    pub fn get(&self, name: &str) -> Option<&str> {
        let i = self.names.iter().position(|n| *n == name)?;
        Some(self.value(i))
    }

    /// The value of the `i`th name. NB: only called below `names.len()`, so there are values.
    fn value(&self, i: usize) -> &str {
        match &self.own {
            Some(own) if own_at(self.names) == Some(i) => own,
            _ => self
                .values
                .as_deref()
                .expect("a resource with names has values")
                .get(i),
        }
    }

    /// (name, value) in the resource's order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&'static str, &str)> + '_ {
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, self.value(i)))
    }
}

/// Where among `names` the own field is (see [`OWN_FIELDS`]).
fn own_at(names: &[&str]) -> Option<usize> {
    names.iter().position(|n| OWN_FIELDS.contains(n))
}

impl fmt::Debug for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_selectors::LabelSelector;
    use proptest::prelude::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn labels_read_as_the_map_they_replace() {
        let pairs = [
            ("app.kubernetes.io/name", "web"),
            ("tier", ""),
            ("app", "web"),
            ("example.com/a/b", "x/y"),
            ("", "empty key"),
        ];
        let m = map(&pairs);
        let l = Labels::from_pairs(pairs);
        assert_eq!(l.len(), m.len());
        assert_eq!(l.to_map(), m);
        for k in [
            "app",
            "app.kubernetes.io/name",
            "tier",
            "example.com/a/b",
            "",
        ] {
            assert_eq!(l.get(k), m.get(k).map(String::as_str), "{k:?}");
        }
        for missing in ["ap", "appp", "app.kubernetes.io", "zzz", "example.com/a"] {
            assert_eq!(l.get(missing), None, "{missing:?}");
        }
        assert_eq!(l.get("tier"), Some(""));
        assert!(l.iter().map(|(k, _)| k).is_sorted());
        assert_eq!(Labels::from(&m), l);
    }

    #[test]
    fn equal_label_sets_are_one_allocation_and_unheld_ones_are_swept() {
        // Keys no other test uses: the table is the process's.
        let a = Labels::from_pairs([("interned-test/app", "web"), ("interned-test/tier", "1")]);
        let b = Labels::from_pairs([("interned-test/tier", "1"), ("interned-test/app", "web")]);
        assert!(a.ptr_eq(&b));
        let c = Labels::from_pairs([("interned-test/app", "web")]);
        assert!(!a.ptr_eq(&c));
        assert_ne!(a, c);
        let held = |key: &str| {
            let table = LABEL_SETS.lock().expect("not poisoned");
            table.sets.iter().any(|s| s.get(0) == key)
        };
        let gone = Labels::from_pairs([("interned-test/gone", "x")]);
        drop(gone);
        assert!(held("interned-test/gone"), "kept until a sweep");
        // Enough distinct sets to double the table, whatever other tests put in it.
        let filler: Vec<Labels> = (0..4096)
            .map(|i| Labels::from_pairs([("interned-test/filler", i.to_string())]))
            .collect();
        let more: Vec<Labels> = (0..8192)
            .map(|i| Labels::from_pairs([("interned-test/more", i.to_string())]))
            .collect();
        assert!(!held("interned-test/gone"), "swept once the table doubled");
        assert!(held("interned-test/app"), "a held set stays");
        assert_eq!(a.get("interned-test/app"), Some("web"));
        drop((filler, more));
    }

    #[test]
    fn empty_labels_hold_nothing_and_equal_an_empty_map() {
        let l = Labels::new();
        assert!(l.is_empty());
        assert_eq!(l.len(), 0);
        assert_eq!(l.get(""), None);
        assert_eq!(l, Labels::from(&BTreeMap::new()));
        assert_eq!(l, Labels::from_pairs(Vec::<(String, String)>::new()));
        assert_eq!(format!("{l:?}"), "{}");
        assert!(LabelSelector::parse("!app").expect("valid").matches(&l));
        assert!(!LabelSelector::parse("app").expect("valid").matches(&l));
    }

    #[test]
    fn the_last_of_repeated_keys_counts_and_order_does_not() {
        let l = Labels::from_pairs([("a", "1"), ("b", "2"), ("a", "3")]);
        assert_eq!(l.get("a"), Some("3"));
        assert_eq!(l.len(), 2);
        assert_eq!(l, Labels::from_pairs([("b", "2"), ("a", "3")]));
        assert_ne!(l, Labels::from_pairs([("a", "3")]));
        // NB: "a" + "b" and "ab" + "" pack into the same buffer; the ends tell them apart.
        assert_ne!(
            Labels::from_pairs([("a", "b")]),
            Labels::from_pairs([("ab", "")])
        );
        assert_eq!(format!("{l:?}"), r#"{"a": "3", "b": "2"}"#);
    }

    #[test]
    fn fields_keep_the_resource_names_and_the_values() {
        static NAMES: &[&str] = &["spec.nodeName", "status.phase", "spec.hostNetwork"];
        let f = Fields::new(NAMES, ["n1", "", "false"]);
        assert_eq!(f.get("spec.nodeName"), Some("n1"));
        assert_eq!(f.get("status.phase"), Some(""));
        assert_eq!(f.get("spec.hostNetwork"), Some("false"));
        assert_eq!(f.get("status.podIP"), None);
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            [
                ("spec.nodeName", "n1"),
                ("status.phase", ""),
                ("spec.hostNetwork", "false")
            ]
        );
        assert_eq!(f, Fields::new(NAMES, ["n1", "", "false"]));
        assert_ne!(f, Fields::new(NAMES, ["n1", "x", "false"]));
        let none = Fields::default();
        assert!(none.is_empty() && none.get("spec.nodeName").is_none());
    }

    #[test]
    fn an_own_field_is_held_apart_and_the_rest_of_the_set_is_shared() {
        static NAMES: &[&str] = &["spec.nodeName", "status.podIP", "status.phase"];
        let a = Fields::new(NAMES, ["n1", "10.0.0.1", "Running"]);
        let b = Fields::new(NAMES, ["n1", "10.0.0.2", "Running"]);
        assert_eq!(a.get("status.podIP"), Some("10.0.0.1"));
        assert_eq!(b.get("status.podIP"), Some("10.0.0.2"));
        assert_eq!(
            b.iter().collect::<Vec<_>>(),
            [
                ("spec.nodeName", "n1"),
                ("status.podIP", "10.0.0.2"),
                ("status.phase", "Running")
            ]
        );
        // Two pods of one node in one phase share the interned set; their IPs tell them apart.
        assert!(Arc::ptr_eq(
            a.values.as_ref().unwrap(),
            b.values.as_ref().unwrap()
        ));
        assert_ne!(a, b);
        assert_eq!(a, Fields::new(NAMES, ["n1", "10.0.0.1", "Running"]));
        // An empty own value reads back as empty, not as absent.
        assert_eq!(
            Fields::new(NAMES, ["n1", "", "Pending"]).get("status.podIP"),
            Some("")
        );
    }

    proptest! {
        #[test]
        fn selectors_match_packed_labels_as_they_match_the_map(
            pairs in proptest::collection::vec(("[a-c/.]{0,3}", "[a-c]{0,2}"), 0..6),
            probe in "[a-c/.]{0,3}",
            value in "[a-c]{0,2}",
        ) {
            let m: BTreeMap<String, String> = pairs.iter().cloned().collect();
            let l = Labels::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            prop_assert_eq!(l.to_map(), m.clone());
            prop_assert_eq!(l.get(&probe), m.get(&probe).map(String::as_str));
            for op in ["=", "!="] {
                let Ok(sel) = LabelSelector::parse(&format!("{probe}{op}{value}")) else { continue };
                prop_assert_eq!(sel.matches(&l), sel.matches(&m));
            }
        }
    }
}
