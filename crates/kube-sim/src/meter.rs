//! The load meter: what the apiserver would record about its clients. `/metrics` uses the apiserver's own
//! metric names where one exists; `/sim/stats` gives the same counts as JSON, also per User-Agent, so a
//! test or benchmark can see exactly what herald costs the apiserver.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;

/// Distinct User-Agents tracked one by one; the rest are counted under "other" so a misbehaving client
/// fleet cannot grow the map without bound.
const MAX_USER_AGENTS: usize = 1000;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    resource: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbResource {
    verb: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabel {
    resource: String,
}

/// Counts for one resource or one client, as `/sim/stats` reports them.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub watches_open: i64,
    pub watches_total: u64,
    pub lists: u64,
    pub watch_events: u64,
    pub bytes_sent: u64,
}

#[derive(Default)]
struct Tables {
    by_resource: BTreeMap<String, Counts>,
    by_user_agent: BTreeMap<String, Counts>,
}

impl Tables {
    fn both(&mut self, resource: &str, ua: &str, f: impl Fn(&mut Counts)) {
        f(self.by_resource.entry(resource.to_string()).or_default());
        let ua =
            if self.by_user_agent.contains_key(ua) || self.by_user_agent.len() < MAX_USER_AGENTS {
                ua
            } else {
                "other"
            };
        f(self.by_user_agent.entry(ua.to_string()).or_default());
    }
}

/// Shared by every request handler.
pub struct Meter {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    longrunning: Family<VerbResource, Gauge>,
    watch_events: Family<ResourceLabel, Counter>,
    bytes: Family<VerbResource, Counter>,
    tables: Mutex<Tables>,
}

impl Default for Meter {
    fn default() -> Self {
        Self::new()
    }
}

impl Meter {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let longrunning = Family::<VerbResource, Gauge>::default();
        let watch_events = Family::<ResourceLabel, Counter>::default();
        let bytes = Family::<VerbResource, Counter>::default();
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, resource and HTTP response code.",
            requests.clone(),
        );
        registry.register(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests (watches) broken out by verb and resource.",
            longrunning.clone(),
        );
        registry.register(
            "apiserver_watch_events",
            "Number of events sent in watch clients.",
            watch_events.clone(),
        );
        // NB: the real apiserver only has the apiserver_response_sizes histogram; a counter is what a
        // benchmark needs to compare bytes pushed with and without herald.
        registry.register(
            "kube_sim_sent_bytes",
            "Response body bytes sent, by verb and resource (watch bytes counted per event).",
            bytes.clone(),
        );
        Meter {
            registry,
            requests,
            longrunning,
            watch_events,
            bytes,
            tables: Mutex::new(Tables::default()),
        }
    }

    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().expect("meter lock is never poisoned")
    }

    /// One finished request (for WATCH: one started watch).
    pub fn request(&self, verb: &str, resource: &str, code: u16, ua: &str, bytes: u64) {
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb.into(),
                resource: resource.into(),
                code: code.to_string(),
            })
            .inc();
        if bytes > 0 {
            self.bytes
                .get_or_create(&VerbResource {
                    verb: verb.into(),
                    resource: resource.into(),
                })
                .inc_by(bytes);
        }
        let is_list = verb == "LIST";
        self.tables().both(resource, ua, |c| {
            c.bytes_sent += bytes;
            if is_list {
                c.lists += 1;
            }
        });
    }

    /// A watch opened; the guard counts it closed when dropped.
    pub fn watch_opened(self: &Arc<Self>, resource: &str, ua: &str) -> WatchGuard {
        self.longrunning
            .get_or_create(&VerbResource {
                verb: "WATCH".into(),
                resource: resource.into(),
            })
            .inc();
        self.tables().both(resource, ua, |c| {
            c.watches_open += 1;
            c.watches_total += 1;
        });
        WatchGuard {
            meter: self.clone(),
            resource: resource.to_string(),
            ua: ua.to_string(),
        }
    }

    fn watch_event(&self, resource: &str, ua: &str, lines: u64, bytes: u64) {
        self.watch_events
            .get_or_create(&ResourceLabel {
                resource: resource.into(),
            })
            .inc_by(lines);
        self.bytes
            .get_or_create(&VerbResource {
                verb: "WATCH".into(),
                resource: resource.into(),
            })
            .inc_by(bytes);
        self.tables().both(resource, ua, |c| {
            c.watch_events += lines;
            c.bytes_sent += bytes;
        });
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding into a String cannot fail");
        out
    }

    /// `(by_resource, by_user_agent)` for `/sim/stats`.
    pub fn snapshot(&self) -> (BTreeMap<String, Counts>, BTreeMap<String, Counts>) {
        let t = self.tables();
        (t.by_resource.clone(), t.by_user_agent.clone())
    }
}

/// Held by an open watch.
pub struct WatchGuard {
    meter: Arc<Meter>,
    resource: String,
    ua: String,
}

impl kube_face::WatchObserver for WatchGuard {
    /// Events (or bookmarks, or errors) sent on this watch in one write.
    fn sent(&self, lines: u64, bytes: u64) {
        self.meter
            .watch_event(&self.resource, &self.ua, lines, bytes);
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.meter
            .longrunning
            .get_or_create(&VerbResource {
                verb: "WATCH".into(),
                resource: self.resource.clone(),
            })
            .dec();
        self.meter
            .tables()
            .both(&self.resource, &self.ua, |c| c.watches_open -= 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_face::WatchObserver as _;

    #[test]
    fn watches_are_counted_open_until_their_guard_drops() {
        let m = Arc::new(Meter::new());
        let g = m.watch_opened("pods", "herald/0.1");
        g.sent(1, 100);
        let (res, ua) = m.snapshot();
        assert_eq!(res["pods"].watches_open, 1);
        assert_eq!(ua["herald/0.1"].watch_events, 1);
        assert_eq!(ua["herald/0.1"].bytes_sent, 100);
        drop(g);
        let (res, _) = m.snapshot();
        assert_eq!(res["pods"].watches_open, 0);
        assert_eq!(res["pods"].watches_total, 1);
        let text = m.encode();
        assert!(
            text.contains("apiserver_longrunning_requests{verb=\"WATCH\",resource=\"pods\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("apiserver_watch_events_total{resource=\"pods\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn lists_count_requests_and_bytes() {
        let m = Meter::new();
        m.request("LIST", "services", 200, "kubectl", 42);
        let (res, _) = m.snapshot();
        assert_eq!(res["services"].lists, 1);
        assert_eq!(res["services"].bytes_sent, 42);
        assert!(m.encode().contains(
            "apiserver_request_total{verb=\"LIST\",resource=\"services\",code=\"200\"} 1"
        ));
    }
}
