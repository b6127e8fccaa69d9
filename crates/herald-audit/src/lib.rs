//! herald-audit
