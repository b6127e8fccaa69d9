//! The scaling curve of section 1 as SVG (plotters): first-sync time and RSS after sync against the
//! cluster's pod count, herald next to vmagent.

use std::path::Path;

use plotters::prelude::*;
use serde_json::Value;

/// (pods, value) points of `who`'s median `key` across the section's scales.
fn series(points: &[Value], who: &str, key: &str) -> Vec<(f64, f64)> {
    points
        .iter()
        .filter_map(|p| Some((p["pods"].as_f64()?, p[who]["median"][key].as_f64()?)))
        .collect()
}

pub fn scaling_svg(discovery: &Value, path: &Path) -> anyhow::Result<()> {
    let points = discovery["points"].as_array().cloned().unwrap_or_default();
    let root = SVGBackend::new(path, (1100, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(550);
    for (area, key, title, unit) in [
        (&left, "sync_seconds", "First complete sync", "seconds"),
        (&right, "rss_mib", "RSS after sync", "MiB"),
    ] {
        let h = series(&points, "herald", key);
        let v = series(&points, "vmagent", key);
        let xmax = h.iter().chain(&v).map(|p| p.0).fold(1.0, f64::max) * 1.05;
        let ymax = h.iter().chain(&v).map(|p| p.1).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
        chart
            .configure_mesh()
            .x_desc("pods in the cluster (jobs pod + endpointslice)")
            .y_desc(unit)
            .x_label_formatter(&|x| format!("{:.0}k", x / 1000.0))
            .draw()?;
        for (name, data, color) in [("herald", &h, &BLUE), ("vmagent", &v, &RED)] {
            if data.is_empty() {
                continue;
            }
            chart
                .draw_series(LineSeries::new(data.iter().copied(), color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(
                data.iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
