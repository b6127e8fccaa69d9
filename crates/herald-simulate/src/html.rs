//! The self-contained HTML report: the plots as inline SVG and the tables behind them; no scripts,
//! no external fonts or stylesheets.

use std::fmt::Write as _;

use crate::curve::{Point, Source};
use crate::error::SimulateError;
use crate::plots;
use crate::report::Report;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn rows(out: &mut String, points: &[Point]) {
    for p in points {
        let s = &p.sizes;
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.label),
            s.services,
            s.endpoints,
            s.iptables_rules(),
            s.iptables_bytes,
            s.iptables_partial_rules(),
            s.nftables.rules,
            s.nftables.elements
        );
    }
}

fn timing_rows(out: &mut String, points: &[Point]) {
    for p in points {
        for t in &p.timings {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td class=\"{}\">{}</td></tr>",
                esc(&p.label),
                esc(t.backend.label()),
                t.full_s,
                t.change_s,
                match t.source {
                    Source::Measured => "measured",
                    Source::Modelled => "modelled",
                },
                match t.source {
                    Source::Measured => "measured",
                    Source::Modelled => "modelled",
                }
            );
        }
    }
}

/// The report as one HTML document.
pub fn render(report: &Report) -> Result<String, SimulateError> {
    let services = report.cluster().map_or(0, |p| p.sizes.services);
    let sync = plots::sync_time(&report.curve, services)?;
    let rules = plots::rules(&report.curve, services)?;
    let egress = plots::egress(&report.fanout.curve, report.fanout.total().watches)?;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>herald simulate: {}</title>\
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse;margin:1em 0}}\
td,th{{border:1px solid #bbb;padding:3px 8px;text-align:right}}td:first-child,th:first-child{{text-align:left}}\
.modelled{{color:#8a5a00;font-style:italic}}figure{{margin:1.5em 0}}</style></head><body>",
        esc(&report.source)
    );
    let _ = write!(
        h,
        "<h1>herald simulate</h1><p>Input: {} &mdash; rules for node <code>{}</code>. Skipped: {} Services without a cluster IP, {} labelled <code>service.kubernetes.io/service-proxy-name</code>.</p><p>{}</p>",
        esc(&report.source),
        esc(&report.node),
        report.skipped.no_cluster_ip,
        report.skipped.service_proxy_name,
        esc(&report.timing)
    );
    for (id, svg) in [
        ("plot-sync-time", &sync),
        ("plot-rules", &rules),
        ("plot-egress", &egress),
    ] {
        let _ = write!(h, "<figure id=\"{id}\">{svg}</figure>");
    }
    h.push_str("<h2>Rules per node</h2><table><tr><th>size</th><th>Services</th><th>endpoints</th><th>iptables rules</th><th>restore bytes</th><th>partial-sync rules</th><th>nftables rules</th><th>map elements</th></tr>");
    rows(&mut h, &report.curve);
    rows(&mut h, &report.what_ifs);
    h.push_str("</table><h2>Sync times</h2><table><tr><th>size</th><th>proxy mode</th><th>full sync (s)</th><th>after 1 endpoint change (s)</th><th>source</th></tr>");
    timing_rows(&mut h, &report.curve);
    timing_rows(&mut h, &report.what_ifs);
    let _ = write!(
        h,
        "</table><h2>Apiserver watch fan-out</h2><p>At {} pod changes per second, herald-audit's HA010 model.</p><table><tr><th>kind</th><th>watches</th><th>events/s</th><th>event bytes</th><th>direct B/s</th><th>through herald B/s</th><th>HA pair B/s</th></tr>",
        report.fanout.churn_per_second
    );
    for k in &report.fanout.kinds {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td></tr>",
            esc(&k.kind),
            k.watches,
            k.events_per_second,
            k.event_bytes,
            k.direct_bytes_per_second,
            k.herald_bytes_per_second,
            k.herald_pair_bytes_per_second
        );
    }
    h.push_str("</table></body></html>\n");
    Ok(h)
}
