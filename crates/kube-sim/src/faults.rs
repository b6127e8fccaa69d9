//! Fault injection: what a misbehaving or restarting apiserver does to its clients.

use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

/// One fault, as posted to `POST /sim/faults` (`{"fault": "close_watches"}`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// Close every open watch now.
    CloseWatches,
    /// Drop every kind's event history: watches and exact lists from older RVs get 410 Expired.
    Compact,
    /// An apiserver restart: close all watches, then for `duration_ms` refuse connections
    /// (`refuse: true`) or answer 503; afterwards serve the same objects and RVs.
    Restart {
        duration_ms: u64,
        #[serde(default)]
        refuse: bool,
    },
    /// Answer this fraction of API requests (not /sim, not /metrics) with `code` (429 or 500); 429s carry
    /// `Retry-After: retry_after_seconds`. A fraction of 0 turns it off.
    Errors {
        code: u16,
        fraction: f64,
        #[serde(default = "one")]
        retry_after_seconds: u64,
    },
    /// Hold every watch event back by this long before it is sent (0 turns it off).
    WatchDelay { delay_ms: u64 },
    /// Clear every ongoing fault.
    Clear,
}

fn one() -> u64 {
    1
}

#[derive(Debug, Clone, Copy, Default)]
struct Settings {
    down_until: Option<Instant>,
    refuse: bool,
    error_code: u16,
    error_fraction: f64,
    retry_after: u64,
    watch_delay: Duration,
}

/// The fault state every request consults.
pub struct Faults {
    settings: Mutex<Settings>,
    /// Bumped to close every open watch.
    close_tx: watch::Sender<u64>,
    counter: std::sync::atomic::AtomicU64,
}

/// What the request path must do now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Serve,
    /// Drop the connection without answering.
    Refuse,
    /// Answer with this status code (and Retry-After seconds for 429/503).
    Fail {
        code: u16,
        retry_after: u64,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    #[error("errors fault: code must be 429 or 500, got {0}")]
    Code(u16),
    #[error("errors fault: fraction must be within 0..=1, got {0}")]
    Fraction(f64),
}

impl Default for Faults {
    fn default() -> Self {
        Self::new()
    }
}

impl Faults {
    pub fn new() -> Self {
        Faults {
            settings: Mutex::new(Settings::default()),
            close_tx: watch::channel(0).0,
            counter: Default::default(),
        }
    }

    fn settings(&self) -> std::sync::MutexGuard<'_, Settings> {
        self.settings.lock().expect("fault lock is never poisoned")
    }

    /// Applies a fault. Compaction is the store's business: the caller does it.
    pub fn inject(&self, fault: &Fault) -> Result<(), FaultError> {
        match *fault {
            Fault::CloseWatches => self.close_watches(),
            Fault::Compact => {}
            Fault::Restart {
                duration_ms,
                refuse,
            } => {
                {
                    let mut s = self.settings();
                    s.down_until = Some(Instant::now() + Duration::from_millis(duration_ms));
                    s.refuse = refuse;
                }
                self.close_watches();
            }
            Fault::Errors {
                code,
                fraction,
                retry_after_seconds,
            } => {
                if code != 429 && code != 500 {
                    return Err(FaultError::Code(code));
                }
                if !(0.0..=1.0).contains(&fraction) {
                    return Err(FaultError::Fraction(fraction));
                }
                let mut s = self.settings();
                s.error_code = code;
                s.error_fraction = fraction;
                s.retry_after = retry_after_seconds;
            }
            Fault::WatchDelay { delay_ms } => {
                self.settings().watch_delay = Duration::from_millis(delay_ms)
            }
            Fault::Clear => *self.settings() = Settings::default(),
        }
        Ok(())
    }

    fn close_watches(&self) {
        self.close_tx.send_modify(|n| *n += 1);
    }

    /// Resolves when watches must close.
    pub fn closer(&self) -> watch::Receiver<u64> {
        self.close_tx.subscribe()
    }

    pub fn watch_delay(&self) -> Duration {
        self.settings().watch_delay
    }

    /// Whether the server is "down" right now (restart fault), for the accept loop.
    pub fn refusing(&self) -> bool {
        let s = *self.settings();
        s.refuse && s.down_until.is_some_and(|t| Instant::now() < t)
    }

    /// The verdict for one API request. Error fractions are spread evenly (every 1/fraction-th request),
    /// so runs are reproducible.
    pub fn verdict(&self) -> Verdict {
        let s = *self.settings();
        if let Some(until) = s.down_until
            && Instant::now() < until
        {
            return if s.refuse {
                Verdict::Refuse
            } else {
                Verdict::Fail {
                    code: 503,
                    retry_after: 1,
                }
            };
        }
        if s.error_fraction > 0.0 {
            let n = self
                .counter
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed) as f64;
            if ((n + 1.0) * s.error_fraction).floor() > (n * s.error_fraction).floor() {
                return Verdict::Fail {
                    code: s.error_code,
                    retry_after: s.retry_after,
                };
            }
        }
        Verdict::Serve
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_fraction_fails_that_share_of_requests() {
        let f = Faults::new();
        f.inject(&Fault::Errors {
            code: 429,
            fraction: 0.25,
            retry_after_seconds: 2,
        })
        .expect("valid");
        let failed = (0..100).filter(|_| f.verdict() != Verdict::Serve).count();
        assert_eq!(failed, 25);
        f.inject(&Fault::Clear).expect("valid");
        assert_eq!(f.verdict(), Verdict::Serve);
    }

    #[test]
    fn bad_fault_parameters_are_rejected() {
        let f = Faults::new();
        assert!(
            f.inject(&Fault::Errors {
                code: 404,
                fraction: 0.1,
                retry_after_seconds: 1
            })
            .is_err()
        );
        assert!(
            f.inject(&Fault::Errors {
                code: 500,
                fraction: 1.5,
                retry_after_seconds: 1
            })
            .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn restart_answers_503_until_it_is_over() {
        let f = Faults::new();
        let mut closer = f.closer();
        f.inject(&Fault::Restart {
            duration_ms: 500,
            refuse: false,
        })
        .expect("valid");
        assert!(closer.has_changed().expect("sender alive"));
        closer.mark_unchanged();
        assert!(matches!(f.verdict(), Verdict::Fail { code: 503, .. }));
        tokio::time::advance(Duration::from_millis(600)).await;
        assert_eq!(f.verdict(), Verdict::Serve);
    }

    #[test]
    fn faults_parse_from_json() {
        let f: Fault =
            serde_json::from_str(r#"{"fault":"restart","duration_ms":200}"#).expect("parses");
        assert_eq!(
            f,
            Fault::Restart {
                duration_ms: 200,
                refuse: false
            }
        );
        assert!(serde_json::from_str::<Fault>(r#"{"fault":"nope"}"#).is_err());
    }
}
