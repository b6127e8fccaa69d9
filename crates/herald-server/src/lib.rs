//! herald-server: the running herald — one upstream list+watch per kind (kube-rs) feeding the
//! discovery engine (herald-index), and the HTTP faces serving Prometheus HTTP SD and a read-only
//! Kubernetes API to any number of consumers.
//!
//! Layer: on top of herald-index (objects, cache, index, groups, bodies), herald-core, kube-face and
//! kube-selectors; the only crate of the server that imports kube, axum and hyper. Nothing in the
//! workspace but the binary (herald) and the benchmarks import it.
//!
//! Rooms: `upstream` (watch tasks; `frames` bounds their lines), `state` (what tasks and handlers
//! share), `http` (axum router), `status` (the status page's data), `monitors` and `istio`
//! (prometheus-operator monitors and Istio's PeerAuthentications, read from the cache), `kube_api`
//! (the Kubernetes API face), `allocator` (the OpenTelemetry target allocator's API over the same
//! bodies), `explain` (why an object's targets are or are not served, asked of the serving code;
//! `heap` gives its memory back when it is done), `auth` and `tls` (credentials and TLS on every
//! port), `serve` (wiring). See ARCHITECTURE.md for the layers and the rule that keeps them.

pub mod admission;
pub mod allocator;
pub mod auth;
pub mod catalog;
pub mod changes;
pub mod escape;
pub mod explain;
pub mod frames;
pub mod heap;
pub mod http;
pub mod istio;
pub mod kube_api;
pub mod metrics;
pub mod monitors;
pub mod serve;
pub mod state;
pub mod status;
pub mod tls;
pub mod upstream;

// The discovery engine, re-exported where herald-server's API named it before it had a crate.
pub use herald_index::{
    Encoded, FilterError, Group, Index, JobFilter, JobSpec, Object, ObjectKey, Reference,
    ReferenceError, Shard, StoredObject, WatchKind, bodies, cache, compact, filter, hot, index,
    reference, segments, snapshot,
};

pub use allocator::Allocator;
pub use auth::Security;
pub use http::{app, app_with};
pub use serve::{
    DEFAULT_KUBE_KINDS, Herald, KubeServeOptions, ServeError, ServeOptions, USER_AGENT, job_specs,
    kube_kinds,
};
pub use state::Shared;
pub use state::{DEFAULT_WATCH_BATCH, KubeApiOptions};
pub use upstream::{Compression as UpstreamCompression, InitialList};
