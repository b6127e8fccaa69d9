//! The report's plots, drawn with plotters' SVG backend into strings: sync time and rules versus
//! Services (each proxy mode, the cluster marked), apiserver egress versus consumers (directly and
//! through herald). Every plot has axis titles; modelled series say so in their legend.

use plotters::prelude::*;

use crate::curve::{Point, Source, rule_count};
use crate::error::SimulateError;
use crate::fanout::EgressPoint;
use crate::measure::Backend;

const SIZE: (u32, u32) = (860, 500);

/// One line of a plot.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

fn err(plot: &str) -> impl Fn(String) -> SimulateError + '_ {
    move |reason| SimulateError::Plot {
        plot: plot.to_string(),
        reason,
    }
}

/// A log-log line plot; `marker` draws a vertical line at that x, labelled.
fn draw(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    marker: Option<(f64, &str)>,
) -> Result<String, SimulateError> {
    let e = err(title);
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .collect();
    if all.is_empty() {
        return Err(e("no positive values to draw".into()));
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in &all {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    let (x0, x1) = (x0 / 1.3, x1 * 1.3);
    let (y0, y1) = (y0 / 2.0, y1 * 2.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(|x| e(x.to_string()))?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .axis_desc_style(("sans-serif", 16))
            .draw()
            .map_err(|x| e(x.to_string()))?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| *x > 0.0 && *y > 0.0)
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|x| e(x.to_string()))?
                .label(s.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(|x| e(x.to_string()))?;
        }
        if let Some((x, label)) = marker {
            chart
                .draw_series(LineSeries::new(
                    vec![(x, y0), (x, y1)],
                    BLACK.stroke_width(1),
                ))
                .map_err(|x| e(x.to_string()))?
                .label(label.to_string())
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|x| e(x.to_string()))?;
        root.present().map_err(|x| e(x.to_string()))?;
    }
    Ok(svg)
}

fn source_note(points: &[&Point], backend: Backend) -> &'static str {
    let sources: Vec<Source> = points
        .iter()
        .flat_map(|p| {
            p.timings
                .iter()
                .filter(|t| t.backend == backend)
                .map(|t| t.source)
        })
        .collect();
    if sources.iter().all(|s| *s == Source::Measured) {
        "measured"
    } else if sources.iter().all(|s| *s == Source::Modelled) {
        "modelled"
    } else {
        "measured, larger sizes modelled"
    }
}

/// Sync time versus Services: the full sync of each mode, and the sync after one endpoint change.
pub fn sync_time(curve: &[Point], cluster_services: usize) -> Result<String, SimulateError> {
    let mut pts: Vec<&Point> = curve.iter().collect();
    pts.sort_by_key(|p| p.sizes.services);
    let mut series = Vec::new();
    for backend in [
        Backend::IptablesLegacy,
        Backend::IptablesNft,
        Backend::Nftables,
        Backend::Ipvs,
    ] {
        let note = source_note(&pts, backend);
        let of = |change: bool| -> Vec<(f64, f64)> {
            pts.iter()
                .filter_map(|p| {
                    let t = p.timings.iter().find(|t| t.backend == backend)?;
                    Some((
                        p.sizes.services as f64,
                        if change { t.change_s } else { t.full_s },
                    ))
                })
                .collect()
        };
        series.push(Series {
            label: format!("{} full sync ({note})", backend.label()),
            points: of(false),
        });
        let change = match backend {
            Backend::IptablesLegacy | Backend::IptablesNft => "partial sync, 1 endpoint changed",
            Backend::Nftables => "sync after 1 endpoint changed",
            Backend::Ipvs => "1 endpoint changed",
        };
        series.push(Series {
            label: format!("{} {change} ({note})", backend.label()),
            points: of(true),
        });
    }
    draw(
        "kube-proxy sync time per node",
        "Services",
        "sync time (s)",
        &series,
        Some((cluster_services as f64, "this cluster")),
    )
}

/// Rules versus Services.
pub fn rules(curve: &[Point], cluster_services: usize) -> Result<String, SimulateError> {
    let mut pts: Vec<&Point> = curve.iter().collect();
    pts.sort_by_key(|p| p.sizes.services);
    let series = vec![
        Series {
            label: "iptables rules (filter + nat)".into(),
            points: pts
                .iter()
                .map(|p| {
                    (
                        p.sizes.services as f64,
                        rule_count(&p.sizes, Backend::IptablesNft) as f64,
                    )
                })
                .collect(),
        },
        Series {
            label: "iptables rules written by a partial sync".into(),
            points: pts
                .iter()
                .map(|p| {
                    (
                        p.sizes.services as f64,
                        p.sizes.iptables_partial_rules() as f64,
                    )
                })
                .collect(),
        },
        Series {
            label: "nftables rules + map elements".into(),
            points: pts
                .iter()
                .map(|p| {
                    (
                        p.sizes.services as f64,
                        rule_count(&p.sizes, Backend::Nftables) as f64,
                    )
                })
                .collect(),
        },
    ];
    draw(
        "Rules kube-proxy writes per node",
        "Services",
        "rules",
        &series,
        Some((cluster_services as f64, "this cluster")),
    )
}

/// Apiserver egress versus consumers, directly and through herald.
pub fn egress(curve: &[EgressPoint], cluster_watches: u64) -> Result<String, SimulateError> {
    let line = |f: fn(&EgressPoint) -> f64| -> Vec<(f64, f64)> {
        curve.iter().map(|p| (p.watches as f64, f(p))).collect()
    };
    let series = vec![
        Series {
            label: "every consumer watches the apiserver".into(),
            points: line(|p| p.direct_bytes_per_second),
        },
        Series {
            label: "through one herald".into(),
            points: line(|p| p.herald_bytes_per_second),
        },
        Series {
            label: "through an HA pair of heralds".into(),
            points: line(|p| p.herald_pair_bytes_per_second),
        },
    ];
    draw(
        "Apiserver watch egress (modelled, herald-audit HA010 model)",
        "consumers (watches on discovery kinds)",
        "apiserver egress (bytes/s)",
        &series,
        Some((cluster_watches.max(1) as f64, "this cluster")),
    )
}
