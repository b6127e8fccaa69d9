//! `GET /`: the status page, server-rendered HTML with no external assets that reloads itself every
//! few seconds; `GET /status.json`: the same `Status`, machine-readable.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};

use crate::escape::html as esc;
use crate::http::style::STYLE;
use crate::shared::Shared;
use crate::status::Status;

/// Seconds between the page's reloads.
pub const REFRESH_SECONDS: u32 = 5;

pub async fn json(State(shared): State<Arc<Shared>>) -> Json<Status> {
    Json(Status::collect(&shared))
}

pub async fn page(State(shared): State<Arc<Shared>>) -> Response {
    let mut res = Html(render(&Status::collect(&shared))).into_response();
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// The page for `s`. Every value from the cluster or a client is escaped.
pub fn render(s: &Status) -> String {
    let mut h = String::with_capacity(8 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta name=\"viewport\" content=\"width=device-width\"><link rel=\"icon\" href=\"data:,\">\
         <title>herald status</title><style>{STYLE}</style></head><body>\
         <h1>herald {}</h1><p class=\"{}\" id=\"ready\">{}</p>",
        esc(s.version),
        if s.ready { "ok" } else { "syncing" },
        if s.ready {
            "ready: every kind has synced"
        } else {
            "not ready: waiting for a first sync"
        },
    );
    let c = &s.consumers;
    let _ = write!(
        h,
        "<h2>Consumers</h2><dl id=\"consumers\">\
         <dt>service discovery clients (last {}s)</dt><dd id=\"sd-clients\">{}</dd>\
         <dt>long-polls waiting</dt><dd>{}</dd>\
         <dt>Kubernetes API watches open</dt><dd id=\"kube-watches\">{}</dd>\
         <dt>upstream watches herald holds</dt><dd id=\"upstream-watches\">{}</dd>\
         <dt>watches these consumers would hold on the apiserver</dt><dd id=\"direct-watches\">{}</dd>\
         <dt>apiserver watches saved (estimate)</dt><dd id=\"watches-saved\">{}</dd></dl>",
        c.window_seconds,
        c.sd_clients,
        c.sd_waiting,
        c.kube_watches_open,
        c.upstream_watches,
        c.direct_watches,
        c.watches_saved,
    );
    h.push_str(
        "<h2>Jobs</h2><table id=\"jobs\"><tr><th>job</th><th>role</th><th>targets</th>\
         <th>groups</th><th>generation</th><th>state</th><th>shards in use</th></tr>",
    );
    for j in &s.jobs {
        let (class, state) = match (j.synced, j.stale) {
            (false, _) => ("syncing", "syncing"),
            (true, true) => ("stale", "stale"),
            (true, false) => ("ok", "ok"),
        };
        let shards = if j.shards_in_use.is_empty() {
            "<span class=\"dim\">unsharded</span>".to_string()
        } else {
            esc(&j.shards_in_use.join(", "))
        };
        let _ = write!(
            h,
            "<tr data-job=\"{name}\"><td><a href=\"{url}\">{name}</a></td><td>{}</td>\
             <td class=\"n targets\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"{class}\">{state}</td><td>{shards}</td></tr>",
            esc(j.role),
            j.targets,
            j.groups,
            j.generation,
            name = esc(&j.name),
            url = esc(&format!("/sd/v1/{}", crate::escape::query(&j.name))),
        );
    }
    h.push_str("</table>");
    if let Some(m) = &s.monitors {
        let _ = write!(
            h,
            "<h2>Monitors</h2><dl id=\"monitors\"><dt>selected by</dt><dd>{}</dd>\
             <dt>monitors</dt><dd id=\"monitor-count\">{}</dd><dt>jobs served (one per endpoint)</dt>\
             <dd id=\"monitor-jobs\">{}</dd><dt>state</dt><dd class=\"{}\">{}</dd></dl>\
             <p class=\"dim\"><a href=\"/sd/v1\">the jobs</a> · \
             <a href=\"/scrape-configs\">scrape configs for Prometheus</a></p>",
            esc(&m.selected_by),
            m.monitors,
            m.jobs,
            if m.ready { "ok" } else { "syncing" },
            if m.ready { "ok" } else { "syncing" },
        );
        if !m.problems.is_empty() || !m.warnings.is_empty() {
            h.push_str("<ul id=\"monitor-problems\">");
            for p in &m.problems {
                let _ = write!(h, "<li>not served: {}</li>", esc(p));
            }
            for w in &m.warnings {
                let _ = write!(h, "<li>served: {}</li>", esc(w));
            }
            h.push_str("</ul>");
        }
    }
    // NB: this page reloads itself; `/explain.html` holds the same form without reloading.
    h.push_str(&crate::http::explain_page::form(&Default::default()));
    h.push_str(
        "<p class=\"dim\"><a href=\"/explain.html\">the explain page</a> (does not reload)</p>",
    );
    h.push_str(
        "<h2>Upstream watches</h2><table id=\"upstream\"><tr><th>kind</th><th>health</th>\
         <th>objects</th><th>last event</th><th>watches started</th><th>relists</th><th>errors</th>\
         <th>last error</th></tr>",
    );
    for u in &s.upstream {
        let age = u
            .last_event_age_seconds
            .map_or_else(|| "never".to_string(), |a| format!("{a:.1}s ago"));
        // The last error in the failing kind's colour; dim once the kind is healthy again.
        let last_error = match (&u.last_error, u.health) {
            (None, _) => "<span class=\"dim\">none</span>".to_string(),
            (Some(e), "ok") => format!("<span class=\"dim\">{}</span>", esc(e)),
            (Some(e), health) => format!("<span class=\"{health}\">{}</span>", esc(e)),
        };
        let _ = write!(
            h,
            "<tr data-kind=\"{kind}\"><td>{kind}</td><td class=\"{health}\">{health}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{age}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"last-error\">{last_error}</td></tr>",
            u.objects,
            u.watches_started,
            u.relists,
            u.errors,
            kind = esc(&u.kind),
            health = u.health,
        );
    }
    h.push_str("</table><h2>Recent warnings</h2>");
    if s.recent_warnings.is_empty() {
        h.push_str("<p class=\"dim\" id=\"warnings\">none</p>");
    } else {
        h.push_str("<table id=\"warnings\"><tr><th>when</th><th>level</th><th>what</th></tr>");
        for w in &s.recent_warnings {
            let _ = write!(
                h,
                "<tr><td class=\"n\">{}</td><td>{}</td><td>{}: {}</td></tr>",
                utc(w.at),
                esc(&w.level),
                esc(&w.target),
                esc(&w.message)
            );
        }
        h.push_str("</table>");
    }
    h.push_str(
        "<p class=\"dim\"><a href=\"/status.json\">status.json</a> · <a href=\"/sd/v1\">jobs</a> · \
         <a href=\"/metrics\">metrics</a></p></body></html>",
    );
    h
}

/// `HH:MM:SS` UTC of a Unix time.
fn utc(at: f64) -> String {
    let secs = at.max(0.0) as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{ConsumerStatus, JobStatus, RecentWarning, UpstreamKind};

    #[test]
    fn the_page_escapes_what_it_shows_and_links_each_job_to_its_json() {
        let s = Status {
            version: "0.0.0",
            ready: true,
            upstream: vec![UpstreamKind {
                kind: "endpointslices".into(),
                health: "syncing",
                objects: 0,
                last_event_age_seconds: None,
                watches_started: 0,
                relists: 3,
                errors: 3,
                last_error: Some(
                    "forbidden: cannot watch endpointslices.discovery.k8s.io at cluster scope: \
                     User \"system:serviceaccount:herald:herald\" cannot watch resource <x>"
                        .into(),
                ),
            }],
            jobs: vec![JobStatus {
                name: "a<b>&c d".into(),
                role: "pod",
                targets: 42,
                groups: 3,
                generation: 7,
                synced: true,
                stale: false,
                url: "/sd/v1/a<b>&c d".into(),
                shards_in_use: vec!["0/2".into()],
            }],
            consumers: ConsumerStatus {
                sd_clients: 1,
                window_seconds: 300,
                sd_waiting: 0,
                kube_watches_open: 0,
                upstream_watches: 1,
                direct_watches: 1,
                watches_saved: 0,
            },
            monitors: Some(crate::status::MonitorStatus {
                selected_by: "Prometheus monitoring/k8s".into(),
                monitors: 3,
                jobs: 4,
                problems: vec!["servicemonitors a/b: <bad>".into()],
                warnings: vec!["ServiceMonitor a/c: unknown field spec.<x>".into()],
                ready: true,
            }),
            recent_warnings: vec![RecentWarning {
                at: 3723.0,
                level: "WARN".into(),
                target: "herald".into(),
                message: "<script>alert(1)</script>".into(),
            }],
        };
        let html = render(&s);
        assert!(
            html.contains("<a href=\"/sd/v1/a%3Cb%3E%26c%20d\">a&lt;b&gt;&amp;c d</a>"),
            "{html}"
        );
        assert!(html.contains("<td class=\"n targets\">42</td>"));
        assert!(
            html.contains(
                "<td class=\"last-error\"><span class=\"syncing\">forbidden: cannot watch \
                 endpointslices.discovery.k8s.io at cluster scope: User \
                 &quot;system:serviceaccount:herald:herald&quot; cannot watch resource &lt;x&gt;</span></td>"
            ),
            "{html}"
        );
        assert!(!html.contains("<script>"));
        assert!(html.contains("01:02:03"));
        assert!(html.contains("<dd id=\"monitor-jobs\">4</dd>"), "{html}");
        assert!(
            html.contains("<li>not served: servicemonitors a/b: &lt;bad&gt;</li>"),
            "{html}"
        );
        assert!(
            html.contains("<li>served: ServiceMonitor a/c: unknown field spec.&lt;x&gt;</li>"),
            "{html}"
        );
        assert_eq!(
            html.matches("<table").count(),
            html.matches("</table>").count()
        );
        assert!(html.contains("http-equiv=\"refresh\""));
    }
}
