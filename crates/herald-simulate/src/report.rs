//! The simulation's result: its JSON form (`herald.simulate/v1`) and its table form.

use std::io::{self, Write};

use serde::Serialize;

use crate::curve::{Point, Source};
use crate::fanout::Fanout;

pub const SCHEMA: &str = "herald.simulate/v1";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    /// Headless, ExternalName and IPv6-only Services.
    pub no_cluster_ip: usize,
    /// Labelled `service.kubernetes.io/service-proxy-name`.
    pub service_proxy_name: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub source: String,
    pub node: String,
    pub skipped: Skipped,
    /// How the times were obtained, in a sentence.
    pub timing: String,
    /// The sizes around the cluster's (its Services scaled).
    pub curve: Vec<Point>,
    /// The audit's fixes applied.
    pub what_ifs: Vec<Point>,
    pub fanout: Fanout,
}

impl Report {
    /// The point at the cluster's own size.
    pub fn cluster(&self) -> Option<&Point> {
        self.curve.iter().find(|p| p.label == "1×")
    }

    pub fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self).map_err(io::Error::other)?;
        writeln!(out)
    }

    pub fn write_table(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "herald simulate: {} (node {})", self.source, self.node)?;
        writeln!(
            out,
            "skipped: {} Services without a cluster IP, {} with service.kubernetes.io/service-proxy-name",
            self.skipped.no_cluster_ip, self.skipped.service_proxy_name
        )?;
        writeln!(out, "{}", self.timing)?;
        if let Some(p) = self.cluster() {
            writeln!(
                out,
                "generated at the cluster's size: iptables restore input {:.2} s, nftables transaction {:.2} s ({:.2} s for the four rulesets, two threads)",
                p.sizes.iptables_generate_s, p.sizes.nftables_generate_s, p.generate_s
            )?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "{:<22} {:>8} {:>9} {:>9} {:>9} {:>11} {:>9} {:>11}",
            "size",
            "Services",
            "endpoints",
            "ipt rules",
            "ipt MB",
            "partial ipt",
            "nft rules",
            "nft elements"
        )?;
        for p in self.curve.iter().chain(&self.what_ifs) {
            let s = &p.sizes;
            writeln!(
                out,
                "{:<22} {:>8} {:>9} {:>9} {:>9.2} {:>11} {:>9} {:>11}",
                p.label,
                s.services,
                s.endpoints,
                s.iptables_rules(),
                s.iptables_bytes as f64 / 1e6,
                s.iptables_partial_rules(),
                s.nftables.rules,
                s.nftables.elements
            )?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "{:<22} {:<24} {:>10} {:>12} {:>9}",
            "size", "proxy mode", "full (s)", "1 change (s)", "source"
        )?;
        for p in self.curve.iter().chain(&self.what_ifs) {
            for t in &p.timings {
                writeln!(
                    out,
                    "{:<22} {:<24} {:>10.3} {:>12.3} {:>9}",
                    p.label,
                    t.backend.label(),
                    t.full_s,
                    t.change_s,
                    match t.source {
                        Source::Measured => "measured",
                        Source::Modelled => "modelled",
                    }
                )?;
            }
        }
        writeln!(out)?;
        writeln!(
            out,
            "apiserver watch fan-out at {} pod changes/s (herald-audit HA010 model):",
            self.fanout.churn_per_second
        )?;
        writeln!(
            out,
            "{:<14} {:>8} {:>9} {:>11} {:>14} {:>14} {:>14}",
            "kind",
            "watches",
            "events/s",
            "event bytes",
            "direct B/s",
            "herald B/s",
            "herald×2 B/s"
        )?;
        for k in &self.fanout.kinds {
            writeln!(
                out,
                "{:<14} {:>8} {:>9.2} {:>11.0} {:>14.0} {:>14.0} {:>14.0}",
                k.kind,
                k.watches,
                k.events_per_second,
                k.event_bytes,
                k.direct_bytes_per_second,
                k.herald_bytes_per_second,
                k.herald_pair_bytes_per_second
            )?;
        }
        let t = self.fanout.total();
        writeln!(
            out,
            "{:<14} {:>8} {:>9} {:>11} {:>14.0} {:>14.0} {:>14.0}",
            "total",
            t.watches,
            "",
            "",
            t.direct_bytes_per_second,
            t.herald_bytes_per_second,
            t.herald_pair_bytes_per_second
        )
    }
}
