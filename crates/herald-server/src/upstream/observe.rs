//! A tower layer under the kube client that sees every upstream request: it counts lists and watches
//! per kind, and clears a kind's stale flag as soon as a watch is re-established — kube's watcher
//! resumes silently after an outage, so without this a quiet kind would look stale until its next event.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use http::{Request, Response, Uri};
use tower::{Layer, Service};

use crate::cluster::WatchKind;
use crate::metrics::Metrics;
use crate::state::Shared;

/// Wraps the kube client's HTTP stack with `Observe`, which counts upstream requests per kind.
#[derive(Debug, Clone)]
pub struct ObserveLayer {
    shared: Arc<Shared>,
}

impl ObserveLayer {
    pub fn new(shared: Arc<Shared>) -> ObserveLayer {
        ObserveLayer { shared }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Observe<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// What an upstream request was, as far as herald's metrics care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    List(WatchKind),
    /// `initial` is a StreamingList watch (`sendInitialEvents=true`): its 200 does not mean synced.
    Watch {
        kind: WatchKind,
        initial: bool,
    },
}

fn classify(uri: &Uri) -> Option<Call> {
    let kind = WatchKind::from_plural(uri.path().rsplit('/').next()?)?;
    let query = uri.query().unwrap_or("");
    let has = |p: &str| query.split('&').any(|kv| kv == p);
    if has("watch=true") || has("watch=1") {
        Some(Call::Watch {
            kind,
            initial: has("sendInitialEvents=true"),
        })
    } else {
        Some(Call::List(kind))
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Observe<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let call = classify(req.uri());
        let shared = self.shared.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            if let (Some(call), Ok(r)) = (call, &res)
                && r.status().is_success()
            {
                observed(&shared, call);
            }
            res
        })
    }
}

fn observed(shared: &Shared, call: Call) {
    match call {
        Call::List(kind) => {
            shared
                .metrics
                .upstream_lists
                .get_or_create(&Metrics::kind(kind.plural()))
                .inc();
        }
        Call::Watch { kind, initial } => {
            shared
                .metrics
                .upstream_watches
                .get_or_create(&Metrics::kind(kind.plural()))
                .inc();
            let relisting = shared
                .kind_status(kind)
                .is_some_and(|s| s.in_init.load(Ordering::Acquire));
            // A resumed watch serves the state herald already holds: it is current again. During a
            // relist the swap at InitDone decides instead.
            if !initial && !relisting {
                shared.set_stale(kind, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_by_resource_and_watch_flag() {
        let uri = |s: &str| s.parse::<Uri>().expect("uri");
        assert_eq!(
            classify(&uri("/api/v1/pods?limit=500")),
            Some(Call::List(WatchKind::Pod))
        );
        assert_eq!(
            classify(&uri(
                "/apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion=5"
            )),
            Some(Call::Watch {
                kind: WatchKind::EndpointSlice,
                initial: false
            })
        );
        assert_eq!(
            classify(&uri("/api/v1/nodes?watch=true&sendInitialEvents=true")),
            Some(Call::Watch {
                kind: WatchKind::Node,
                initial: true
            })
        );
        assert_eq!(classify(&uri("/version")), None);
    }
}
