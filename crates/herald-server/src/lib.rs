//! herald-server: the running herald — one upstream list+watch per kind (kube-rs), a synchronous
//! discovery index over the cached objects, and the HTTP faces serving Prometheus HTTP SD to any
//! number of consumers.
//!
//! Layers, bottom up: `cluster` (per-kind stores of slim projections and the per-job lookup),
//! `filter` (a job's namespaces and selectors), `compact` (groups as interned, shared label blocks),
//! `index` (per-job groups, recomputed incrementally), `snapshot` (encoded bodies + ETags per
//! job/shard/generation, held as zstd blocks), `bodies` (the bodies kept, within a byte budget; `hot`: those asked for again and again, kept
//! expanded within their own), `cache` (upstream objects per served resource), `state` (what tasks and
//! handlers share), `upstream` (watch tasks; `frames` bounds their lines), `http` (axum router),
//! `status` (the status page's data), `monitors` and `istio` (prometheus-operator monitors and
//! Istio's PeerAuthentications, read from the cache), `allocator` (the OpenTelemetry target
//! allocator's API over the same bodies), `explain` (why an object's targets are or are not served,
//! asked of the serving code; `heap` gives its memory back when it is done), `auth` and `tls` (credentials and TLS on every port), `serve`
//! (wiring); `reference` computes jobs from scratch for the tests and the fault soak to compare with.

pub mod admission;
pub mod allocator;
pub mod auth;
pub mod bodies;
pub mod cache;
pub mod cluster;
pub mod compact;
pub mod explain;
pub mod filter;
pub mod frames;
pub mod heap;
pub mod hot;
pub mod http;
pub mod index;
pub mod istio;
pub mod kube_api;
pub mod metrics;
pub mod monitors;
pub mod reference;
pub mod segments;
pub mod serve;
pub mod snapshot;
pub mod state;
pub mod status;
pub mod tls;
pub mod upstream;

pub use allocator::Allocator;
pub use auth::Security;
pub use cluster::{Object, ObjectKey, StoredObject, WatchKind};
pub use compact::Group;
pub use filter::{FilterError, JobFilter, JobSpec};
pub use http::{app, app_with};
pub use index::Index;
pub use reference::{Reference, ReferenceError};
pub use serve::{
    DEFAULT_KUBE_KINDS, Herald, KubeServeOptions, ServeError, ServeOptions, USER_AGENT, job_specs,
    kube_kinds,
};
pub use snapshot::{Encoded, Shard};
pub use state::Shared;
pub use state::{DEFAULT_WATCH_BATCH, KubeApiOptions};
pub use upstream::{Compression as UpstreamCompression, InitialList};
