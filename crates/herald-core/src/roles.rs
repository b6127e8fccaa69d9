//! The six kubernetes_sd roles, each turning one object (plus lookups) into one target group.

pub mod endpoints;
pub mod endpointslice;
pub mod ingress;
pub mod node;
pub mod pod;
pub mod service;
