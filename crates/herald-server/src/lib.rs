//! herald-server: the running herald — one upstream list+watch per kind (kube-rs) feeding the
//! discovery engine (herald-index), and the HTTP faces serving Prometheus HTTP SD and a read-only
//! Kubernetes API to any number of consumers.
//!
//! Layer: on top of herald-index (objects, cache, index, groups, bodies), herald-core, kube-face and
//! kube-selectors; the only crate of the server that imports kube, axum and hyper. Nothing in the
//! workspace but the binary (herald) and the benchmarks import it.
//!
//! Rooms: `upstream` (watch tasks; `watch_lines` bounds their lines), `shared` (`Shared`: the cache,
//! the index, the jobs' generations and the body store, which tasks and handlers share), `catalog`
//! (what a job name serves, and its bodies), `http` (axum router), `status` (the status page's
//! data), `monitors` and `istio` (prometheus-operator monitors and Istio's PeerAuthentications,
//! read from the cache, each owning its state), `kube_api` (the Kubernetes API face), `allocator`
//! (the OpenTelemetry target allocator's API over the same bodies), `explain` (why an object's
//! targets are or are not served, asked of the serving code; `heap` gives its memory back when it
//! is done), `auth` and `tls` (credentials and TLS on every port), `escape` and `changes` (helpers
//! below them all), `serve` (wiring). ARCHITECTURE.md says which room may import which, and
//! `tests/layers.rs` fails on an import circle between files.

pub mod admission;
pub mod allocator;
pub mod auth;
pub mod catalog;
pub mod changes;
pub mod escape;
pub mod explain;
#[cfg(test)]
mod fixtures;
pub mod heap;
pub mod http;
pub mod istio;
pub mod kube_api;
pub mod metrics;
pub mod monitors;
pub mod serve;
pub mod shared;
pub mod status;
pub mod tls;
pub mod upstream;
pub mod watch_lines;

// The discovery engine, re-exported where herald-server's API named it before it had a crate
// (`bodies` and `hot` are the binary's flags' old paths of `body_store` and `hot_bodies`).
pub use herald_index::{
    Encoded, FilterError, Group, Index, JobFilter, JobSpec, Object, ObjectKey, Reference,
    ReferenceError, Shard, StoredObject, WatchKind, body_store, body_store as bodies, cache,
    encoded, filter, groups, hot_bodies, hot_bodies as hot, index, reference, slim,
};

// The binary's `--max-object-bytes` default, at its old path.
pub use watch_lines as frames;

pub use allocator::Allocator;
pub use auth::Security;
pub use http::{app, app_with};
pub use serve::{
    DEFAULT_KUBE_KINDS, Herald, KubeServeOptions, ServeError, ServeOptions, USER_AGENT, job_specs,
    kube_kinds,
};
pub use shared::Shared;
pub use shared::{DEFAULT_WATCH_BATCH, KubeApiOptions};
pub use upstream::{Compression as UpstreamCompression, InitialList};
