//! A log-linear histogram of microsecond latencies: exact below 128 µs, then 64 buckets per power of
//! two (at most 1.6 % relative error), in a fixed 30 KiB of counters. Merging is adding counters, so
//! each group of watchers can keep its own and the report adds them up.

/// Sub-buckets per power of two.
const SUB: u64 = 64;
/// Values at or above 2^40 µs (12 days) land in the last bucket.
const MAX_BITS: u64 = 40;
const BUCKETS: usize = (2 * SUB + (MAX_BITS - 7) * SUB) as usize;

/// Latency counts in microseconds.
#[derive(Debug, Clone)]
pub struct Hist {
    counts: Vec<u64>,
    n: u64,
    max: u64,
    sum: u128,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            counts: vec![0; BUCKETS],
            n: 0,
            max: 0,
            sum: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < 2 * SUB {
        return v as usize;
    }
    let msb = 63 - u64::from(v.leading_zeros());
    if msb >= MAX_BITS {
        return BUCKETS - 1;
    }
    let shift = msb - 6;
    (2 * SUB + (msb - 7) * SUB + ((v >> shift) - SUB)) as usize
}

/// The smallest value of bucket `i`.
fn lower(i: usize) -> u64 {
    let i = i as u64;
    if i < 2 * SUB {
        return i;
    }
    let j = i - 2 * SUB;
    let octave = j / SUB + 7;
    (j % SUB + SUB) << (octave - 6)
}

impl Hist {
    pub fn record(&mut self, micros: u64) {
        self.counts[index(micros)] += 1;
        self.n += 1;
        self.max = self.max.max(micros);
        self.sum += u128::from(micros);
    }

    pub fn merge(&mut self, other: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.n += other.n;
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum as f64 / self.n as f64)
    }

    /// How many values are at or above `micros` (to bucket precision).
    pub fn count_at_least(&self, micros: u64) -> u64 {
        self.counts[index(micros)..].iter().sum()
    }

    /// The value at quantile `q` (0..=1): the middle of the bucket holding the rank-⌈q·n⌉ value, never
    /// above the maximum seen (the maximum itself for the last rank). `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        if rank == self.n {
            return Some(self.max);
        }
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let lo = lower(i);
                let hi = if i + 1 < BUCKETS { lower(i + 1) } else { lo };
                return Some((lo + hi.saturating_sub(1)).div_ceil(2).min(self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_monotonic() {
        for i in 0..BUCKETS - 1 {
            assert!(lower(i) < lower(i + 1), "bucket {i}");
            assert_eq!(index(lower(i)), i);
            assert_eq!(index(lower(i + 1) - 1), i);
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_within_bucket_precision() {
        let mut h = Hist::default();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        for (q, want) in [(0.5, 50_000.0), (0.99, 99_000.0), (0.001, 100.0)] {
            let got = h.quantile(q).expect("non-empty") as f64;
            assert!((got - want).abs() / want < 0.02, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.quantile(1.0), Some(100_000));
        assert_eq!(h.count_at_least(1), 100_000);
        let mut m = Hist::default();
        m.record(7);
        m.merge(&h);
        assert_eq!(m.count(), 100_001);
        assert_eq!(m.max(), 100_000);
        assert_eq!(Hist::default().quantile(0.5), None);
    }
}
