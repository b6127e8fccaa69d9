//! An event's encodings (its JSON watch line, its protobuf frame) held while the event is among its
//! resource's newest, and shared by every watcher then; an older event's are built by each reader.
//!
//! Why: watchers that keep up read an event within milliseconds of its recording, so sharing its
//! encoding is what spares thousands of them an encode each (the apiserver's serialize-once cache,
//! KEP-1152). Held for the whole window (10,000 events per resource in herald) the lines cost more
//! than the objects they carry: a line is the object's JSON uncompressed, the object is held
//! LZ4-compressed (`packed::Json`). Only watchers far behind, and watches resumed from an old
//! resourceVersion, read older events; they pay one decompression per event.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::log::Event;

/// Bytes of JSON watch lines a resource's log holds by default (see [`Recent`]): ~700 lines of
/// 3 KB pods, seconds of events even at a thousand a second. NB: 8 MiB before; a heap profile of
/// the steady state at `k8s-limits` (DESIGN-NOTES section 10) found 25 MB of lines held for the
/// three resources under churn, for watchers that read each line within milliseconds.
pub const DEFAULT_RECENT_BYTES: usize = 2 << 20;

/// One encoding of an event, held or not.
#[derive(Debug, Default)]
pub struct Encoded(Mutex<Slot>);

#[derive(Debug, Default)]
enum Slot {
    /// Not built yet: the first reader builds it and keeps it.
    #[default]
    Empty,
    Held(Bytes),
    /// The event is no longer recent: readers build it and keep nothing.
    Released,
}

impl Encoded {
    /// The encoding: the held one, else `make`'s (kept unless the event is no longer recent).
    /// NB: `make` runs under the slot's lock while the event is recent, so concurrent readers wait
    /// for one build rather than each building it.
    pub fn get_or(&self, make: impl FnOnce() -> Bytes) -> Bytes {
        let mut slot = self
            .0
            .lock()
            .expect("no code panics holding an encoding's lock");
        match &*slot {
            Slot::Held(b) => b.clone(),
            Slot::Empty => {
                let b = make();
                *slot = Slot::Held(b.clone());
                b
            }
            Slot::Released => {
                drop(slot);
                make()
            }
        }
    }

    /// Whether the encoding is held now.
    pub fn is_held(&self) -> bool {
        matches!(
            *self
                .0
                .lock()
                .expect("no code panics holding an encoding's lock"),
            Slot::Held(_)
        )
    }

    /// Drops the held encoding, if any, and keeps none from now on.
    fn release(&self) {
        *self
            .0
            .lock()
            .expect("no code panics holding an encoding's lock") = Slot::Released;
    }
}

/// Which of a history's events hold their encodings: the newest ones whose JSON lines fit in
/// `budget` bytes (the newest event always does).
#[derive(Debug)]
pub struct Recent {
    budget: usize,
    /// Bytes of the JSON lines held.
    held: usize,
    /// Index in the history of the oldest event still holding its encodings.
    from: usize,
}

impl Recent {
    pub fn new(budget: usize) -> Recent {
        Recent {
            budget,
            held: 0,
            from: 0,
        }
    }

    /// Bytes of the recent events' JSON lines: what they hold once JSON watchers have read them.
    pub fn held(&self) -> usize {
        self.held
    }

    /// `history`'s newest event was just pushed, whose line (built or not yet) is `line_len` bytes:
    /// releases the oldest recent events until their lines fit the budget again.
    pub fn pushed(&mut self, history: &VecDeque<Arc<Event>>, line_len: usize) {
        self.held += line_len;
        while self.held > self.budget && self.from + 1 < history.len() {
            let ev = &history[self.from];
            ev.line.release();
            ev.frame.release();
            self.held -= ev.line_len();
            self.from += 1;
        }
    }

    /// The history's oldest event was just popped.
    pub fn popped_front(&mut self, ev: &Event) {
        if self.from > 0 {
            self.from -= 1;
        } else {
            ev.line.release();
            ev.frame.release();
            self.held -= ev.line_len();
        }
    }

    /// The history was cleared.
    pub fn cleared(&mut self) {
        self.held = 0;
        self.from = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::log::{Entry, ResourceLog, event_line};
    use crate::packed::{Fields, Json, Labels};
    use crate::resource::Resource;

    fn mk_entry(name: &str, rv: u64) -> Arc<Entry> {
        Arc::new(Entry {
            key: ("ns".into(), name.into()),
            rv,
            labels: Labels::new(),
            fields: Fields::default(),
            uid_hash: 0,
            bytes: Json::compress(
                format!(
                    r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}},"data":"{}"}}"#,
                    "x".repeat(200)
                )
                .as_bytes(),
            ),
            proto: Default::default(),
        })
    }

    /// What every event's line must be, held or not.
    fn expected(log: &ResourceLog) -> Vec<(u64, bytes::Bytes)> {
        log.events_after(log.horizon())
            .expect("in window")
            .iter()
            .map(|e| (e.rv, event_line(e.ty.as_str(), &e.obj.bytes.get())))
            .collect()
    }

    #[test]
    fn only_the_newest_lines_are_held_and_every_line_reads_the_same() {
        let cm = Resource::builtin("configmaps").expect("configmaps");
        let mut log = ResourceLog::new(&cm, 50).with_recent_bytes(2_000);
        let mut rv = 0;
        for i in 1..=120u64 {
            rv += 1;
            log.upsert(mk_entry(&format!("o{}", i % 7), rv), true);
            if i % 11 == 0 {
                rv += 1;
                log.remove(mk_entry(&format!("o{}", i % 7), rv));
            }
            let events = log.events_after(log.horizon()).expect("in window");
            let newest = events.last().expect("an event");
            assert!(!newest.line.is_held(), "no line is built before it is read");
            // Every watcher reads every event: the recent ones keep what they built.
            for e in &events {
                e.line();
            }
            let held: Vec<_> = events.iter().filter(|e| e.line.is_held()).collect();
            // The held ones are the newest, their bytes are what the log counts, within budget.
            let newest = &events[events.len() - held.len()..];
            assert!(newest.iter().all(|e| e.line.is_held()), "at {rv}");
            let held_bytes: usize = newest.iter().map(|e| e.line().len()).sum();
            assert_eq!(log.recent_bytes(), held_bytes, "at {rv}");
            assert!(held_bytes <= 2_000, "at {rv}: {held_bytes}");
            assert!(!held.is_empty(), "the newest event holds its line");
        }
        let events = log.events_after(log.horizon()).expect("in window");
        assert!(events.len() > 20, "{}", events.len());
        assert!(!events[0].line.is_held(), "old events hold no line");
        let got: Vec<_> = events.iter().map(|e| (e.rv, e.line())).collect();
        assert_eq!(got, expected(&log));
        // A released line stays released: reading it kept nothing.
        assert!(!events[0].line.is_held());
        log.compact(log.last_event_rv());
        assert_eq!(log.recent_bytes(), 0);
    }
}
