//! herald-server
