//! Support for the `e2e_peers_*` tests: real Prometheus and vmagent processes, the kube-sim cluster
//! they judge herald on, and the label comparison between them.

#![allow(dead_code)] // each test binary uses a different subset

pub mod cluster;
pub mod compare;
pub mod golang;
pub mod known;
pub mod prometheus;

pub use kube_sim::peers::{Labels, process};
