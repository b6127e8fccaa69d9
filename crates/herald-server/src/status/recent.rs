//! The last warnings and errors herald logged, in a small bounded ring the status page shows: a
//! `tracing` layer the binary installs next to its log output. Process-wide, like the log itself.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;

/// Warnings kept; older ones are dropped first.
pub const RECENT_CAPACITY: usize = 50;

static RING: Mutex<VecDeque<RecentWarning>> = Mutex::new(VecDeque::new());

/// One logged warning or error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecentWarning {
    /// Seconds since the Unix epoch.
    pub at: f64,
    pub level: String,
    pub target: String,
    /// The message and its fields, as the text log shows them.
    pub message: String,
}

/// The ring's contents, newest first.
pub fn recent_warnings() -> Vec<RecentWarning> {
    RING.lock()
        .expect("warning ring lock is never poisoned")
        .iter()
        .rev()
        .cloned()
        .collect()
}

fn push(w: RecentWarning) {
    let mut ring = RING.lock().expect("warning ring lock is never poisoned");
    if ring.len() == RECENT_CAPACITY {
        ring.pop_front();
    }
    ring.push_back(w);
}

/// A `tracing` layer keeping WARN and ERROR events in the ring.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecentWarnings;

#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}

impl<S: Subscriber> tracing_subscriber::Layer<S> for RecentWarnings {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > Level::WARN {
            return;
        }
        let mut text = Text::default();
        event.record(&mut text);
        push(RecentWarning {
            at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            level: level.to_string(),
            target: event.metadata().target().to_string(),
            message: format!("{}{}", text.message, text.fields),
        });
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    #[test]
    fn warnings_land_in_a_bounded_ring_newest_first_and_info_does_not() {
        let subscriber = tracing_subscriber::registry().with(RecentWarnings);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("not kept");
            for i in 0..RECENT_CAPACITY + 5 {
                tracing::warn!(kind = "pods", attempt = i, "upstream watch failed");
            }
        });
        let all = recent_warnings();
        assert_eq!(all.len(), RECENT_CAPACITY);
        let newest = RECENT_CAPACITY + 4;
        assert_eq!(
            all[0].message,
            format!("upstream watch failed kind=pods attempt={newest}")
        );
        assert!(all.iter().all(|w| w.level == "WARN"));
    }
}
