//! herald-core
