//! kube-face: the Kubernetes API's list/watch face — discovery, OpenAPI stubs, get, list, watch and
//! Table printing — served from any store that implements [`Backend`]. kube-sim (a simulated
//! apiserver with writes) and herald (a read-only cache of a real one) both serve through it, so the
//! same conformance tests cover both.
//!
//! Layers: `resource` (what is served), `log` (one resource's objects and bounded event history,
//! with apiserver list/watch resourceVersion semantics), `request` (paths and query parameters),
//! `packed` (compact JSON and protobuf), `selectable` (compact labels and field values), `shard` (KEP-5866 shardSelector), `proto` (the protobuf wire format), `status` (metav1.Status errors), `discovery`/`openapi`/`table` (documents), `serve` (the HTTP
//! handler), `watch` (one watch stream), `scan` (byte-level helpers for raw upstream JSON).

pub mod backend;
pub mod discovery;
pub mod log;
pub mod openapi;
pub mod packed;
pub mod proto;
pub mod recent;
pub mod request;
pub mod resource;
pub mod scan;
pub mod selectable;
pub mod serve;
pub mod shard;
pub mod siblings;
pub mod status;
pub mod table;
pub mod watch;

pub use backend::{Backend, NoopObserver, WatchObserver, WatchSettings, WriteRequest};
pub use log::{Entry, Event, EventType, Key, ListAt, Page, ResourceLog, StoreError, event_line};
pub use packed::{Fields, Json, Labels};
pub use resource::{Catalog, ResId, Resource};
pub use serve::{json_response, router};
pub use shard::ShardSelector;
pub use siblings::Siblings;
pub use status::ApiError;
