//! Upstream: one kube-rs watcher per kind some job needs, feeding the index. Relists are buffered and
//! swapped in whole; failures keep the last good state and mark the kind stale until it recovers.

mod observe;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::cluster::{Object, ObjectKey, StoredObject, WatchKind};
use crate::metrics::{EventLabels, Metrics};
use crate::state::Shared;

pub use observe::{Observe, ObserveLayer};

/// How the first list of each kind is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialList {
    /// StreamingList when the apiserver is 1.32 or newer (WatchList beta, on by default), else ListWatch.
    #[default]
    Auto,
    /// A watch with `sendInitialEvents=true` (KEP-3157): no large LIST response held in memory.
    Streaming,
    /// Paged LIST, then WATCH from its resourceVersion.
    ListWatch,
}

/// Why herald could not talk to its upstream.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("building the kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("invalid user agent {0:?}")]
    UserAgent(String),
}

/// A kube client that sends `user_agent` and reports upstream requests to `shared`.
pub fn client(
    mut config: kube::Config,
    shared: Arc<Shared>,
    user_agent: &str,
) -> Result<kube::Client, UpstreamError> {
    let ua = http::HeaderValue::from_str(user_agent)
        .map_err(|_| UpstreamError::UserAgent(user_agent.to_string()))?;
    config.headers.push((http::header::USER_AGENT, ua));
    let builder = kube::client::ClientBuilder::try_from(config).map_err(UpstreamError::Client)?;
    Ok(builder.with_layer(&ObserveLayer::new(shared)).build())
}

/// Whether to use StreamingList against this apiserver.
pub async fn use_streaming(client: &kube::Client, mode: InitialList) -> bool {
    match mode {
        InitialList::Streaming => true,
        InitialList::ListWatch => false,
        InitialList::Auto => match client.apiserver_version().await {
            Ok(info) => {
                let minor: u32 = info
                    .minor
                    .trim_end_matches(|c: char| !c.is_ascii_digit())
                    .parse()
                    .unwrap_or(0);
                let major: u32 = info.major.parse().unwrap_or(0);
                major > 1 || (major == 1 && minor >= 32)
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading /version failed; using list+watch");
                false
            }
        },
    }
}

/// Spawns one watch task per needed kind. They run until `shutdown` is cancelled.
pub fn spawn(
    client: kube::Client,
    shared: Arc<Shared>,
    streaming: bool,
    shutdown: CancellationToken,
) -> Vec<JoinHandle<()>> {
    shared
        .needed_kinds()
        .collect::<Vec<_>>()
        .into_iter()
        .map(|kind| {
            let span = tracing::info_span!("upstream", kind = kind.plural());
            let task = run_kind(
                kind,
                client.clone(),
                shared.clone(),
                streaming,
                shutdown.clone(),
            );
            tokio::spawn(task.instrument(span))
        })
        .collect()
}

fn api_resource(kind: WatchKind) -> ApiResource {
    match kind {
        WatchKind::Namespace => ApiResource::erase::<Namespace>(&()),
        WatchKind::Node => ApiResource::erase::<Node>(&()),
        WatchKind::Service => ApiResource::erase::<Service>(&()),
        WatchKind::Pod => ApiResource::erase::<Pod>(&()),
        WatchKind::Endpoints => ApiResource::erase::<Endpoints>(&()),
        WatchKind::EndpointSlice => ApiResource::erase::<EndpointSlice>(&()),
        WatchKind::Ingress => ApiResource::erase::<Ingress>(&()),
    }
}

/// Where a kind's feed stands between two watcher events.
#[derive(Debug)]
enum Feed {
    /// Applying watch events to the index as they come.
    Live,
    /// A (re)list is under way. Its objects are buffered here and swapped in at `InitDone`, so no
    /// reader ever sees half a list. NB: this buffer is bounded by the kind's size in the cluster —
    /// one full list — which is what an atomic swap needs.
    Relisting {
        buffer: Vec<StoredObject>,
        /// Listed objects that did not decode: their last good versions are kept.
        malformed: Vec<ObjectKey>,
    },
}

async fn run_kind(
    kind: WatchKind,
    client: kube::Client,
    shared: Arc<Shared>,
    mut streaming: bool,
    shutdown: CancellationToken,
) {
    // NB: objects are watched as `DynamicObject`, not as k8s-openapi types. kube's typed watcher
    // fails a whole list (and every relist after it) when one item does not decode, so one malformed
    // object would freeze the kind forever. `DynamicObject` only needs valid `metadata`; the typed
    // decode happens per object in `Object::decode`, and an object that fails it is skipped with a
    // warning and `herald_upstream_malformed_objects_total`, keeping its last good version.
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource(kind));
    'watcher: loop {
        let mut config = watcher::Config::default();
        if streaming {
            config = config.streaming_lists();
        }
        // Backoff between failed attempts as client-go's reflector does (kube-runtime
        // `DefaultBackoff`: 800 ms doubling to 30 s, with jitter, reset after 120 s of health).
        let mut events = watcher::watcher(api.clone(), config)
            .default_backoff()
            .boxed();
        let mut feed = Feed::Live;
        tracing::info!(streaming, "starting upstream watch");
        loop {
            let next = tokio::select! {
                next = events.next() => next,
                () = shutdown.cancelled() => break 'watcher,
            };
            let Some(event) = next else { break 'watcher };
            if streaming && rejects_streaming(&event) {
                // An apiserver whose WatchList feature is off refuses `sendInitialEvents`
                // (kubernetes: staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go validation).
                tracing::warn!(
                    "the apiserver refused a streaming list; falling back to list+watch"
                );
                streaming = false;
                continue 'watcher;
            }
            feed = step(kind, &shared, feed, event);
        }
    }
    tracing::info!("upstream watch stopped");
}

/// A watch start refused as invalid (400/422): what an apiserver without WatchList answers.
fn rejects_streaming(event: &Result<Event<DynamicObject>, watcher::Error>) -> bool {
    matches!(
        event,
        Err(watcher::Error::WatchStartFailed(kube::Error::Api(status)))
            if status.code == 400 || status.code == 422
    )
}

/// The feed's one transition function: applies a watcher event and returns the next state.
fn step(
    kind: WatchKind,
    shared: &Shared,
    feed: Feed,
    event: Result<Event<DynamicObject>, watcher::Error>,
) -> Feed {
    let labels = Metrics::kind(kind.plural());
    let count = |event: &str| {
        shared
            .metrics
            .upstream_events
            .get_or_create(&EventLabels {
                kind: kind.plural().to_string(),
                event: event.to_string(),
            })
            .inc();
    };
    let status = shared.kind_status(kind);
    let set_in_init = |v: bool| {
        if let Some(s) = status {
            s.in_init.store(v, std::sync::atomic::Ordering::Release);
        }
    };
    match event {
        Ok(Event::Init) => {
            shared.metrics.upstream_relists.get_or_create(&labels).inc();
            set_in_init(true);
            tracing::debug!("relist started");
            Feed::Relisting {
                buffer: Vec::new(),
                malformed: Vec::new(),
            }
        }
        Ok(Event::InitApply(obj)) => {
            count("relist_object");
            match feed {
                Feed::Relisting {
                    mut buffer,
                    mut malformed,
                } => {
                    let key = key_of(&obj);
                    match decode(kind, shared, obj) {
                        Some(o) => buffer.push(o.into()),
                        None => malformed.push(key),
                    }
                    Feed::Relisting { buffer, malformed }
                }
                Feed::Live => {
                    // kube's watcher always sends Init first; stay correct if it ever did not.
                    if let Some(o) = decode(kind, shared, obj) {
                        shared.apply(o);
                    }
                    Feed::Live
                }
            }
        }
        Ok(Event::InitDone) => {
            if let Feed::Relisting { buffer, malformed } = feed {
                let n = buffer.len();
                let started = std::time::Instant::now();
                shared.reset(kind, buffer, malformed);
                let index_ms = started.elapsed().as_millis() as u64;
                tracing::info!(objects = n, index_ms, "relist applied");
            }
            set_in_init(false);
            shared.mark_synced(kind);
            shared.touch(kind);
            shared.set_stale(kind, false);
            Feed::Live
        }
        Ok(Event::Apply(obj)) => {
            count("apply");
            shared.touch(kind);
            shared.set_stale(kind, false);
            if let Some(o) = decode(kind, shared, obj) {
                shared.apply(o);
            }
            feed
        }
        Ok(Event::Delete(obj)) => {
            count("delete");
            shared.touch(kind);
            shared.set_stale(kind, false);
            shared.delete(kind, &key_of(&obj));
            feed
        }
        Err(e) => {
            shared.metrics.upstream_errors.get_or_create(&labels).inc();
            shared.set_stale(kind, true);
            tracing::warn!(error = %e, "upstream watch failed; serving the last good state");
            // A failed relist restarts with a fresh Init, which resets the buffer.
            feed
        }
    }
}

fn key_of(obj: &DynamicObject) -> ObjectKey {
    ObjectKey::new(
        obj.metadata.namespace.as_deref().unwrap_or(""),
        obj.metadata.name.as_deref().unwrap_or(""),
    )
}

fn decode(kind: WatchKind, shared: &Shared, obj: DynamicObject) -> Option<Object> {
    let value = match serde_json::to_value(obj) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(error = %e, "re-encoding an upstream object failed; skipping it");
            shared
                .metrics
                .upstream_malformed
                .get_or_create(&Metrics::kind(kind.plural()))
                .inc();
            return None;
        }
    };
    match Object::decode(kind, value) {
        Ok(o) => Some(o),
        Err(e) => {
            tracing::warn!(error = %e, "malformed upstream object skipped");
            shared
                .metrics
                .upstream_malformed
                .get_or_create(&Metrics::kind(kind.plural()))
                .inc();
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn mk_shared() -> Arc<Shared> {
        let cfg = herald_core::parse_config("jobs:\n- name: pods\n  role: pod\n").expect("valid");
        Shared::new(crate::serve::job_specs(&cfg, None).expect("valid"))
    }

    fn dynamic(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).expect("a DynamicObject only needs metadata")
    }

    fn mk_pod(name: &str, ip: &str) -> DynamicObject {
        dynamic(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": name, "resourceVersion": "1"},
            "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]},
            "status": {"podIP": ip}
        }))
    }

    fn mk_malformed_pod(name: &str) -> DynamicObject {
        dynamic(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": name, "resourceVersion": "1"},
            "spec": {"containers": "not a list"}
        }))
    }

    fn targets(shared: &Shared) -> usize {
        shared.job_counts(0).1
    }

    type PodEvent = Result<Event<DynamicObject>, watcher::Error>;

    /// Feeds pod events in order, as the watch task would, and returns the final feed state.
    fn pods(shared: &Shared, feed: Feed, events: Vec<PodEvent>) -> Feed {
        events.into_iter().fold(feed, |feed, event| {
            step(WatchKind::Pod, shared, feed, event)
        })
    }

    fn init_apply(name: &str, ip: &str) -> PodEvent {
        Ok(Event::InitApply(mk_pod(name, ip)))
    }

    #[test]
    fn a_relist_is_published_only_when_it_is_complete() {
        let shared = mk_shared();
        let feed = pods(
            &shared,
            Feed::Live,
            vec![
                Ok(Event::Init),
                init_apply("a", "127.16.0.1"),
                init_apply("b", "127.16.0.2"),
            ],
        );
        assert_eq!(targets(&shared), 0, "nothing published mid-list");
        assert!(!shared.ready());
        let feed = pods(&shared, feed, vec![Ok(Event::InitDone)]);
        assert!(matches!(feed, Feed::Live));
        assert_eq!(targets(&shared), 2);
        assert!(shared.ready());
        assert_eq!(
            shared.job_counts(0).0,
            1,
            "the whole list is one generation"
        );
    }

    #[test]
    fn a_relist_after_an_outage_keeps_serving_the_old_state_until_it_completes() {
        let shared = mk_shared();
        let feed = pods(
            &shared,
            Feed::Live,
            vec![
                Ok(Event::Init),
                init_apply("a", "127.16.0.1"),
                init_apply("b", "127.16.0.2"),
                Ok(Event::InitDone),
                Err(watcher::Error::NoResourceVersion),
            ],
        );
        assert!(shared.job_stale(0));
        assert_eq!(targets(&shared), 2, "an error keeps the last good state");

        let feed = pods(
            &shared,
            feed,
            vec![Ok(Event::Init), init_apply("c", "127.16.0.3")],
        );
        assert_eq!(targets(&shared), 2, "the half-done relist is invisible");
        let feed = pods(&shared, feed, vec![Ok(Event::InitDone)]);
        assert!(matches!(feed, Feed::Live));
        assert_eq!(targets(&shared), 1, "a, b deleted while away; c added");
        assert!(!shared.job_stale(0));
    }

    #[test]
    fn a_malformed_object_is_skipped_and_counted_without_emptying_the_snapshot() {
        let shared = mk_shared();
        let feed = pods(
            &shared,
            Feed::Live,
            vec![
                Ok(Event::Init),
                init_apply("a", "127.16.0.1"),
                Ok(Event::InitApply(mk_malformed_pod("bad"))),
                Ok(Event::InitDone),
            ],
        );
        assert_eq!(targets(&shared), 1);
        // A later malformed update of a good object keeps its last good version.
        let feed = pods(&shared, feed, vec![Ok(Event::Apply(mk_malformed_pod("a")))]);
        assert!(matches!(feed, Feed::Live));
        assert_eq!(targets(&shared), 1);
        let malformed = shared
            .metrics
            .upstream_malformed
            .get_or_create(&Metrics::kind("pods"))
            .get();
        assert_eq!(malformed, 2);
    }

    #[test]
    fn a_relist_keeps_the_last_good_version_of_an_object_that_no_longer_decodes() {
        let shared = mk_shared();
        pods(
            &shared,
            Feed::Live,
            vec![
                Ok(Event::Init),
                init_apply("a", "127.16.0.1"),
                Ok(Event::InitDone),
                Ok(Event::Init),
                Ok(Event::InitApply(mk_malformed_pod("a"))),
                Ok(Event::InitDone),
            ],
        );
        assert_eq!(targets(&shared), 1, "pod a keeps its last good version");
    }

    #[test]
    fn a_refused_streaming_list_is_recognised_and_other_errors_are_not() {
        let status = |code| {
            let s = kube::core::Status::failure("sendInitialEvents is forbidden", "Invalid")
                .with_code(code);
            Err(watcher::Error::WatchStartFailed(kube::Error::Api(
                Box::new(s),
            )))
        };
        assert!(rejects_streaming(&status(422)));
        assert!(!rejects_streaming(&status(503)));
        assert!(!rejects_streaming(&Ok(Event::InitDone)));
    }

    #[test]
    fn watch_events_apply_and_delete_incrementally() {
        let shared = mk_shared();
        let feed = pods(
            &shared,
            Feed::Live,
            vec![
                Ok(Event::Init),
                Ok(Event::InitDone),
                Ok(Event::Apply(mk_pod("a", "127.16.0.1"))),
            ],
        );
        assert_eq!(targets(&shared), 1);
        pods(
            &shared,
            feed,
            vec![Ok(Event::Delete(mk_pod("a", "127.16.0.1")))],
        );
        assert_eq!(targets(&shared), 0);
    }
}
