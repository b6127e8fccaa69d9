//! prometheus-operator monitors served as HTTP SD jobs: each endpoint of each selected ServiceMonitor and
//! PodMonitor is a job named as the operator names it (`serviceMonitor/<ns>/<name>/<i>`), whose targets
//! are what the operator's generated scrape config would keep, with its final labels.
//!
//! How: a monitor job is a view over one base job of its role (`monitor-base-endpoints`,
//! `-endpointslice`, `-pod`: every object, all namespaces), restricted to the namespaces the monitor
//! discovers in (one range of the base job's groups each) and relabeled by the rules the operator would
//! generate (herald-core `monitor`). Views hold no targets of their own: a body is encoded on request
//! per (view, shard, base generation) and cached like a job's, copying the bytes of unchanged groups.
//! NB: thousands of monitors therefore cost herald the base jobs plus their encoded bodies, not one
//! index per monitor. Monitors are read from herald's cache (one list+watch per kind, like every other
//! resource) and the views are rebuilt whenever one changes — no restart.
//!
//! A bad monitor never stops the others: one the operator would reject (an invalid regex, a value its
//! CRD refuses, a timeout over its interval) is not served and is listed in `Views::problems`; one
//! with fields the CRD does not have is served without them and listed in `Views::warnings`; a job
//! whose port matches no port of what its monitor selects is served (empty) and says so (`ports`).
//!
//! Rooms: `base` (the base jobs and the resources monitors need), `views` (the monitor jobs as
//! served, and the state that holds them), `feed` (builds the views from herald's cache and keeps
//! them current), `ports` (the port warning of a job whose port matches nothing).

mod base;
pub mod feed;
pub mod ports;
pub(crate) mod views;

pub use base::{BASE_PREFIX, base_name, base_roles, base_specs, resources};
pub use views::{Checked, MonitorState, View, Views};
