//! herald-index: the discovery engine. It holds what herald knows of the cluster and what it serves
//! from it, and knows no HTTP and no Kubernetes client: upstream feeds write into it, the faces read
//! it.
//!
//! Layer: above herald-core (roles, labels, relabelling), kube-face (the cache's resource logs) and
//! kube-selectors; below herald-server. It may import those three, k8s-openapi's types and plain
//! libraries (tokio's sync and time, codecs, hashing), never axum, hyper, kube or reqwest: the
//! compiler keeps the layer, since they are not in its manifest.
//!
//! Rooms, bottom up (each imports only rooms listed before it):
//! - `objects`: the watched kinds, object keys, typed objects decoded from upstream JSON;
//! - `slim`: slim projections, held in segments shared between objects;
//! - `stored`: what discovery keeps of each object (`Stored`) and the per-kind stores (`Cluster`);
//! - `filter`: a job's spec, namespaces and selectors;
//! - `lookup`: objects decoded for a stretch of group builds, and the per-job `Lookup` role code
//!   reads through;
//! - `cache`: herald's copy of its upstream, one resource log per served resource;
//! - `interner`: label strings and blocks held once, shared by every group that has them;
//! - `groups`: target groups as interned, shared label blocks;
//! - `encoded`: encoded bodies (HTTP SD JSON held as compressed blocks, ETags, shards);
//! - `sending`: an encoded body sent as an HTTP body (`http_body::Body`), block by block;
//! - `hot_bodies`: bodies asked for again and again, kept expanded; `body_store`: the store of encoded bodies
//!   within a byte budget;
//! - `index`: every job's groups, recomputed incrementally from object changes;
//! - `reference`: jobs computed from scratch, the yardstick the index is tested against.

pub mod body_store;
pub mod cache;
pub mod encoded;
pub mod filter;
pub mod groups;
pub mod hot_bodies;
pub mod index;
pub mod interner;
pub mod lookup;
pub mod objects;
pub mod reference;
pub mod sending;
pub mod slim;
pub mod stored;

pub use encoded::{Encoded, Shard};
pub use filter::{FilterError, JobFilter, JobSpec};
pub use groups::Group;
pub use index::Index;
pub use objects::{DecodeError, Object, ObjectKey, WatchKind};
pub use reference::{Reference, ReferenceError};
pub use stored::{Cluster, Ingested, Projection, Stored, StoredObject};
