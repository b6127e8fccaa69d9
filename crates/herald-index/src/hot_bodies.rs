//! Hot bodies: a body form asked for again within a few seconds, kept expanded (identity) or whole
//! (gzip) while it stays asked for, in the room the body store's budget leaves beside its compressed
//! bodies and at most `--hot-body-bytes` (DESIGN-NOTES section 3).
//!
//! NB: why by hand. Bodies are held as zstd blocks (`encoded::blocks`) and an identity response
//! expands them as it goes: ~11 ms of CPU per 25 MB on the 2-core VM, more than writing the bytes
//! (~9 ms). A body many clients keep asking for (a fleet of unsharded consumers, an HA pair polling
//! together, a herald tier below) would pay that on every response. What is kept here is each block
//! expanded once, shared by every response of the body until nobody has asked for it for a window.
//! A body asked for once per scrape interval (Prometheus shards polling their own shard every 15 s
//! or more) is never admitted, and so costs nothing here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use crate::encoded::{Encoded, Expanded};

/// The default most the hot forms hold: room for a hot shard body at `k8s-limits` scale (one tenth
/// of a job is 25–110 MB identity), a third of the body store's default budget.
pub const DEFAULT_HOT_BYTES: usize = 128 << 20;

/// A body sent again within this long of its last send is hot; a hot body nobody asked for in
/// this long is dropped. NB: shorter than any scrape or SD refresh interval herald expects from a
/// consumer on its own (Prometheus's http_sd refreshes every 60 s by default, the steady-state
/// benchmark's consumers every 15 s), long enough that back-to-back or concurrent requests count.
pub const WINDOW: Duration = Duration::from_secs(10);

/// At most this many bodies are remembered as sent once: bounds the bookkeeping.
const MAX_SEEN: usize = 4096;

/// What a hot body costs besides its expanded bytes (its entry, its blocks' cells).
const ENTRY_OVERHEAD: usize = 128;

/// Hot bodies' metrics (registered in `Metrics::registry`).
#[derive(Debug, Clone, Default)]
pub struct HotMetrics {
    /// Bytes reserved for the hot bodies' forms (each form's length: identity or gzip).
    pub held: Gauge,
    pub budget: Gauge,
    /// Body forms that became hot (a body's identity and gzip forms count apart).
    pub admitted: Counter,
    /// Responses sent from a hot form: identity from its shared expanded blocks, gzip as its one
    /// joined frame.
    pub responses: Counter,
}

/// Which form of a body is hot: each is admitted, held and dropped on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Form {
    Identity,
    Gzip,
}

/// What a hot form holds: the identity blocks expanded as responses reach them, or the whole gzip
/// body in one buffer (made by the first response).
#[derive(Debug, Clone)]
enum Kept {
    Identity(Arc<Expanded>),
    Gzip(Arc<OnceLock<Bytes>>),
}

#[derive(Debug)]
struct Hot {
    /// NB: a `Weak` keeps the body's allocation (not its blocks), so its address, the key, cannot
    /// name another body while the entry lives.
    body: Weak<Encoded>,
    kept: Kept,
    reserved: usize,
    used: Instant,
}

/// A body by its address, and the form.
type Key = (usize, Form);

#[derive(Debug, Default)]
struct Inner {
    /// Bodies sent lately but not hot, with when.
    seen: HashMap<Key, (Weak<Encoded>, Instant)>,
    hot: HashMap<Key, Hot>,
    held: usize,
}

/// The hot bodies, within a byte budget (`--hot-body-bytes`; 0 keeps none) and within what the body
/// store's budget leaves beside its compressed bodies (`BodyStore::hot_identity`).
#[derive(Debug)]
pub struct HotBodies {
    budget: AtomicUsize,
    inner: Mutex<Inner>,
    metrics: HotMetrics,
}

impl HotBodies {
    pub fn new(budget: usize, metrics: HotMetrics) -> HotBodies {
        metrics
            .budget
            .set(i64::try_from(budget).unwrap_or(i64::MAX));
        HotBodies {
            budget: AtomicUsize::new(budget),
            inner: Mutex::default(),
            metrics,
        }
    }

    pub fn budget(&self) -> usize {
        self.budget.load(Ordering::Relaxed)
    }

    /// Sets the budget, dropping at once the hot bodies that no longer fit.
    pub fn set_budget(&self, bytes: usize) {
        self.budget.store(bytes, Ordering::Relaxed);
        self.metrics
            .budget
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        let mut inner = self.lock();
        self.make_room(&mut inner, bytes);
    }

    /// Drops the least recently used hot forms until the rest hold at most `most` bytes (the body
    /// store's compressed bodies need the room).
    pub fn shrink_to(&self, most: usize) {
        let mut inner = self.lock();
        if inner.held > most {
            self.make_room(&mut inner, most);
        }
    }

    /// Bytes reserved for the hot bodies' expanded blocks and gzip forms.
    pub fn held(&self) -> usize {
        self.lock().held
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("hot bodies lock poisoned")
    }

    /// An identity response of `body` begins at `now`: its shared expanded blocks if the body is
    /// hot (or becomes hot now: it was sent within `WINDOW` before and fits the budget and `room`,
    /// what the body store leaves for hot forms in all).
    pub fn identity(
        &self,
        body: &Arc<Encoded>,
        now: Instant,
        room: usize,
    ) -> Option<Arc<Expanded>> {
        let kept = self.begin(body, Form::Identity, body.len(), now, room, || {
            Kept::Identity(Arc::new(Expanded::new(body.blocks().len())))
        })?;
        match kept {
            Kept::Identity(expanded) => Some(expanded),
            Kept::Gzip(_) => None,
        }
    }

    /// A gzip response of `body` (whose gzip form is `len` bytes) begins at `now`: if it is hot (or
    /// becomes hot now, as `identity`), the cell of the whole gzip body in one buffer, which the
    /// first response fills (`GzipForm::whole`; outside any lock).
    pub fn gzip(
        &self,
        body: &Arc<Encoded>,
        len: usize,
        now: Instant,
        room: usize,
    ) -> Option<Arc<OnceLock<Bytes>>> {
        let kept = self.begin(body, Form::Gzip, len, now, room, || {
            Kept::Gzip(Arc::default())
        })?;
        match kept {
            Kept::Gzip(whole) => Some(whole),
            Kept::Identity(_) => None,
        }
    }

    /// What `form` of `body` keeps if it is hot or becomes hot now (`make` makes it, empty, for
    /// `len` bytes).
    fn begin(
        &self,
        body: &Arc<Encoded>,
        form: Form,
        len: usize,
        now: Instant,
        room: usize,
        make: impl FnOnce() -> Kept,
    ) -> Option<Kept> {
        let budget = self.budget().min(room);
        if budget == 0 {
            return None;
        }
        let key = (Arc::as_ptr(body) as usize, form);
        let mut inner = self.lock();
        let inner = &mut *inner;
        if let Some(hot) = inner.hot.get_mut(&key) {
            hot.used = now;
            self.metrics.responses.inc();
            return Some(hot.kept.clone());
        }
        let again = inner
            .seen
            .insert(key, (Arc::downgrade(body), now))
            .is_some_and(|(_, at)| now.saturating_duration_since(at) <= WINDOW);
        if !again {
            if inner.seen.len() > MAX_SEEN {
                inner
                    .seen
                    .retain(|_, (_, at)| now.saturating_duration_since(*at) <= WINDOW);
                if inner.seen.len() > MAX_SEEN {
                    inner.seen.clear();
                }
            }
            return None;
        }
        let reserved = len + ENTRY_OVERHEAD;
        if reserved > budget {
            return None;
        }
        inner.seen.remove(&key);
        self.expire(inner, now);
        self.make_room(inner, budget - reserved);
        let kept = make();
        inner.hot.insert(
            key,
            Hot {
                body: Arc::downgrade(body),
                kept: kept.clone(),
                reserved,
                used: now,
            },
        );
        inner.held += reserved;
        self.metrics.admitted.inc();
        self.metrics.responses.inc();
        self.set_held(inner);
        Some(kept)
    }

    /// Drops the hot bodies nobody asked for within `WINDOW` of `now` (or that are gone), and
    /// forgets bodies sent once before it. Called when a body becomes hot, and periodically by the
    /// server, so an idle herald does not keep what was hot.
    pub fn sweep(&self, now: Instant) {
        let mut inner = self.lock();
        self.expire(&mut inner, now);
        inner.seen.retain(|_, (body, at)| {
            now.saturating_duration_since(*at) <= WINDOW && body.strong_count() > 0
        });
    }

    fn expire(&self, inner: &mut Inner, now: Instant) {
        let held = &mut inner.held;
        inner.hot.retain(|_, hot| {
            let keep =
                now.saturating_duration_since(hot.used) <= WINDOW && hot.body.strong_count() > 0;
            if !keep {
                *held -= hot.reserved;
            }
            keep
        });
        self.set_held(inner);
    }

    /// Drops the least recently used hot forms until the rest hold at most `most` bytes.
    fn make_room(&self, inner: &mut Inner, most: usize) {
        while inner.held > most {
            let Some(lru) = inner
                .hot
                .iter()
                .min_by_key(|(_, h)| h.used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            let hot = inner.hot.remove(&lru).expect("found just now");
            inner.held -= hot.reserved;
        }
        self.set_held(inner);
    }

    fn set_held(&self, inner: &Inner) {
        self.metrics
            .held
            .set(i64::try_from(inner.held).unwrap_or(i64::MAX));
    }
}

/// Sweeps `hot` every `WINDOW` until `stop`, so what was hot is dropped once nobody asks.
pub async fn sweep(hot: &HotBodies, stop: tokio_util::sync::CancellationToken) {
    let mut every = tokio::time::interval(WINDOW);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => hot.sweep(Instant::now()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body_store::tests::mk_groups;
    use crate::sending::{Sending, drain};

    /// A body of several blocks.
    fn body(generation: u64) -> Arc<Encoded> {
        let body = Arc::new(Encoded::build(generation, &mk_groups(2000, 4), None));
        assert!(body.blocks().len() > 2, "{} blocks", body.blocks().len());
        body
    }

    fn send(hot: &HotBodies, body: &Arc<Encoded>, now: Instant) -> (bool, Vec<u8>) {
        let expanded = hot.identity(body, now, usize::MAX);
        let was_hot = expanded.is_some();
        (was_hot, drain(Sending::identity(body.clone(), expanded)))
    }

    #[test]
    fn a_body_sent_again_within_the_window_is_hot_and_sent_unchanged() {
        let metrics = HotMetrics::default();
        let hot = HotBodies::new(1 << 30, metrics.clone());
        let b = body(1);
        let want = b.identity();
        let t = Instant::now();
        assert_eq!(
            send(&hot, &b, t),
            (false, want.clone()),
            "sent once: not hot"
        );
        assert_eq!(hot.held(), 0);
        assert_eq!(
            send(&hot, &b, t + Duration::from_secs(1)),
            (true, want.clone())
        );
        assert_eq!(hot.held(), b.len() + ENTRY_OVERHEAD);
        // Later responses share the blocks the first expanded, and are equal byte for byte.
        for s in 2..5 {
            assert_eq!(
                send(&hot, &b, t + Duration::from_secs(s)),
                (true, want.clone())
            );
        }
        assert_eq!(metrics.admitted.get(), 1);
        assert_eq!(metrics.responses.get(), 4);
        // Asked for no more: dropped once the window has passed since the last response.
        hot.sweep(t + Duration::from_secs(4) + WINDOW);
        assert_eq!(
            hot.held(),
            b.len() + ENTRY_OVERHEAD,
            "within the window still"
        );
        hot.sweep(t + Duration::from_secs(5) + WINDOW);
        assert_eq!(hot.held(), 0);
        assert_eq!(metrics.held.get(), 0);
    }

    #[test]
    fn a_gzip_form_sent_again_is_held_whole_and_sent_unchanged_apart_from_identity() {
        let metrics = HotMetrics::default();
        let hot = HotBodies::new(1 << 30, metrics.clone());
        let b = body(1);
        let want = b.gzip_bytes();
        let (g, _) = b.gzip();
        let t = Instant::now();
        let at = |s| hot.gzip(&b, g.len(), t + Duration::from_secs(s), usize::MAX);
        assert!(at(0).is_none(), "sent once: not hot");
        for s in 1..4 {
            let cell = at(s).expect("hot");
            let whole = cell.get_or_init(|| g.whole(b.blocks())).clone();
            assert_eq!(drain(Sending::gzip_whole(b.clone(), whole)), want);
        }
        assert_eq!(hot.held(), g.len() + ENTRY_OVERHEAD);
        // The identity form is its own: not hot until it is sent twice itself.
        assert!(!send(&hot, &b, t).0);
        assert!(send(&hot, &b, t).0);
        assert_eq!(hot.held(), g.len() + b.len() + 2 * ENTRY_OVERHEAD);
        assert_eq!(metrics.admitted.get(), 2);
        let mut d = flate2::read::GzDecoder::new(&want[..]);
        let mut plain = Vec::new();
        std::io::Read::read_to_end(&mut d, &mut plain).expect("gzip");
        assert_eq!(plain, b.identity());
    }

    #[test]
    fn a_body_sent_once_per_window_or_less_is_never_hot() {
        let hot = HotBodies::new(1 << 30, HotMetrics::default());
        let b = body(1);
        let t = Instant::now();
        for i in 0..4 {
            let at = t + (WINDOW + Duration::from_secs(1)) * i;
            assert!(!send(&hot, &b, at).0, "send {i}");
        }
        assert_eq!(hot.held(), 0);
    }

    #[test]
    fn hot_bodies_stay_within_the_budget_least_recently_used_dropped() {
        let metrics = HotMetrics::default();
        let (a, b, c) = (body(1), body(2), body(3));
        let one = a.len() + ENTRY_OVERHEAD;
        // Room for two, not three.
        let hot = HotBodies::new(one * 2 + one / 2, metrics.clone());
        let t = Instant::now();
        for (i, x) in [&a, &b, &c].into_iter().enumerate() {
            let at = t + Duration::from_millis(10 * i as u64);
            send(&hot, x, at);
            assert_eq!(send(&hot, x, at).1, x.identity());
            assert!(
                hot.held() <= hot.budget(),
                "{} > {}",
                hot.held(),
                hot.budget()
            );
        }
        assert_eq!(hot.held(), one * 2);
        assert!(
            !send(&hot, &a, t + Duration::from_millis(50)).0,
            "a was dropped"
        );
        assert!(send(&hot, &c, t + Duration::from_millis(60)).0);
        // A body larger than the budget is never hot; a budget of 0 keeps none.
        hot.set_budget(one - 1);
        assert_eq!(hot.held(), 0);
        for _ in 0..3 {
            let (was_hot, got) = send(&hot, &b, t + Duration::from_millis(70));
            assert!(!was_hot);
            assert_eq!(got, b.identity());
        }
        hot.set_budget(0);
        assert!(
            hot.identity(&b, t, usize::MAX).is_none() && hot.identity(&b, t, usize::MAX).is_none()
        );
        assert_eq!(metrics.held.get(), 0);
    }

    #[test]
    fn a_body_dropped_everywhere_else_is_dropped_here_at_the_next_sweep() {
        let hot = HotBodies::new(1 << 30, HotMetrics::default());
        let b = body(1);
        let t = Instant::now();
        send(&hot, &b, t);
        assert!(send(&hot, &b, t).0);
        drop(b);
        hot.sweep(t);
        assert_eq!(hot.held(), 0);
        assert!(hot.lock().seen.is_empty() && hot.lock().hot.is_empty());
    }

    #[test]
    fn concurrent_responses_of_a_hot_body_share_its_blocks_and_equal_it() {
        let hot = Arc::new(HotBodies::new(1 << 30, HotMetrics::default()));
        let b = body(1);
        let want = b.identity();
        let t = Instant::now();
        send(&hot, &b, t);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (hot, b) = (hot.clone(), b.clone());
                std::thread::spawn(move || send(&hot, &b, t))
            })
            .collect();
        for th in threads {
            assert_eq!(th.join().expect("no panic"), (true, want.clone()));
        }
        let expanded = hot.identity(&b, t, usize::MAX).expect("hot");
        assert!(expanded.blocks.iter().all(|c| c.get().is_some()));
    }
}
