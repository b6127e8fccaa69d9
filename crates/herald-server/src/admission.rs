//! Admission of new lists and watches on herald's Kubernetes API: a token bucket (`rate` a second up
//! to `burst`), and for the requests it refuses a Retry-After that paces them back at that rate.
//!
//! NB: a refusal that says "1 second" to every client of a storm brings them all back together a
//! second later, to be refused again: 10,000 kubelet-shaped informers made 349,579 refused requests
//! in herald's restart benchmark, and handling them slowed the sync they were waiting for. client-go
//! honours Retry-After (ten times per request, then its reflector backs off), so herald tells each
//! refused client the next free slot of a schedule that advances by `1 / rate` per refusal, as
//! golang.org/x/time/rate's reservations do: the refused come back no faster than herald admits.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The longest Retry-After herald gives, in seconds: the schedule never runs further ahead than this
/// (clients that ignore it cannot push everyone else's answer out without bound).
pub const MAX_RETRY_AFTER: u64 = 30;

/// The admission state: see the module's documentation.
#[derive(Debug)]
pub struct Admission {
    rate: f64,
    burst: f64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    tokens: f64,
    at: Instant,
    /// The first slot not yet promised to a refused client.
    next_free: Instant,
}

impl Admission {
    pub fn new(rate: f64, burst: u32) -> Admission {
        let now = Instant::now();
        let burst = f64::from(burst.max(1));
        Admission {
            rate: rate.max(0.001),
            burst,
            state: Mutex::new(State {
                tokens: burst,
                at: now,
                next_free: now,
            }),
        }
    }

    /// Takes a token, or refuses with the seconds after which to come back.
    pub fn take(&self, now: Instant) -> Result<(), u64> {
        let mut s = self.state.lock().expect("admission lock is never poisoned");
        s.tokens = (s.tokens + now.saturating_duration_since(s.at).as_secs_f64() * self.rate)
            .min(self.burst);
        s.at = now;
        if s.tokens >= 1.0 {
            s.tokens -= 1.0;
            return Ok(());
        }
        let refill = Duration::from_secs_f64((1.0 - s.tokens) / self.rate);
        Err(self.promise(&mut s, now, now + refill))
    }

    /// A refusal that spends no token (the resource has not synced yet): the seconds after which to
    /// come back, at least one, on the same schedule as the bucket's refusals.
    pub fn defer(&self, now: Instant) -> u64 {
        let mut s = self.state.lock().expect("admission lock is never poisoned");
        self.promise(&mut s, now, now + Duration::from_secs(1))
    }

    /// Promises the first free slot no earlier than `earliest`: its distance from `now` in whole
    /// seconds, 1 to [`MAX_RETRY_AFTER`].
    fn promise(&self, s: &mut State, now: Instant, earliest: Instant) -> u64 {
        let horizon = now + Duration::from_secs(MAX_RETRY_AFTER);
        let slot = earliest.max(s.next_free).min(horizon);
        s.next_free = (slot + Duration::from_secs_f64(1.0 / self.rate)).min(horizon);
        slot.saturating_duration_since(now)
            .as_secs_f64()
            .ceil()
            .clamp(1.0, MAX_RETRY_AFTER as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_admits_its_burst_then_refills() {
        let a = Admission::new(1000.0, 3);
        let t0 = Instant::now();
        assert!((0..3).all(|_| a.take(t0).is_ok()));
        assert_eq!(a.take(t0), Err(1), "burst spent: come back in a second");
        assert!(a.take(t0 + Duration::from_millis(5)).is_ok(), "refilled");
    }

    #[test]
    fn a_storm_is_told_to_come_back_at_the_rate_it_can_be_admitted() {
        // 10 a second, burst 10: 100 clients at once. The first 10 get in; the other 90 are promised
        // slots 0.1 s apart, so no second brings back more than herald admits in it.
        let a = Admission::new(10.0, 10);
        let t0 = Instant::now();
        let answers: Vec<Result<(), u64>> = (0..100).map(|_| a.take(t0)).collect();
        assert!(answers[..10].iter().all(Result::is_ok));
        let mut per_second = std::collections::BTreeMap::new();
        for r in &answers[10..] {
            *per_second.entry(r.expect_err("refused")).or_insert(0) += 1;
        }
        assert_eq!(
            per_second.keys().copied().collect::<Vec<_>>(),
            (1..=9).collect::<Vec<u64>>()
        );
        assert!(per_second.values().all(|&n| n <= 10), "{per_second:?}");
        // Coming back when told, the first ones are admitted (the bucket refilled meanwhile).
        assert!(a.take(t0 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn refusals_before_the_sync_spend_nothing_and_spread_on_the_same_schedule() {
        let a = Admission::new(2.0, 1);
        let t0 = Instant::now();
        let told: Vec<u64> = (0..6).map(|_| a.defer(t0)).collect();
        assert_eq!(told, vec![1, 2, 2, 3, 3, 4]);
        assert!(a.take(t0).is_ok(), "the token is still there");
        // The schedule is bounded: clients that ignore it cannot push the answer past the cap.
        let last = (0..10_000).map(|_| a.defer(t0)).last();
        assert_eq!(last, Some(MAX_RETRY_AFTER));
        // Once the promised slots have passed, a refusal is told a second again.
        let later = t0 + Duration::from_secs(2 * MAX_RETRY_AFTER);
        assert_eq!(a.defer(later), 1);
    }
}
