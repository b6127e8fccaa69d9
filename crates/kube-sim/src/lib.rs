//! kube-sim: a simulated kube-apiserver with faithful list/watch semantics, generated clusters,
//! controllers, churn, fault injection and apiserver-style load accounting.

pub mod churn;
pub mod controllers;
pub mod ipalloc;
pub mod kind;

pub use kind::{Kind, Object, Write};

pub mod faults;
pub mod generate;
pub mod meter;
pub mod peers;
pub mod server;
pub mod sim;
pub mod store;
pub mod writes;

pub use kube_face::{ApiError, request::MAX_BODY_BYTES};

pub use faults::Fault;
pub use server::Settings;
pub use sim::{Sim, SimConfig, SimError, SimHandle};
