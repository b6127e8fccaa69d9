//! kube-sim: a simulated kube-apiserver with faithful list/watch semantics, generated clusters,
//! controllers, churn, fault injection and apiserver-style load accounting.

pub mod churn;
pub mod controllers;
pub mod ipalloc;
pub mod kind;

pub use kind::{Kind, Object, Write};

pub mod api;
pub mod discovery;
pub mod faults;
pub mod generate;
pub mod meter;
pub mod openapi;
pub mod peers;
pub mod server;
pub mod sim;
pub mod status;
pub mod store;
pub mod table;
pub mod watch;

pub use faults::Fault;
pub use server::Settings;
pub use sim::{Sim, SimConfig, SimError, SimHandle};
