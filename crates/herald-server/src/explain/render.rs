//! An explanation as a readable table (`herald explain`) and as HTML (the status page's form),
//! both from its JSON form, so the CLI renders exactly what `GET /explain` answered.

use std::fmt::Write as _;

use serde_json::Value;

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// One line per label set: `{a="1", b="2"}`.
fn labels(v: &Value) -> String {
    let parts: Vec<String> = v
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={:?}", s(v)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn shards(v: &Value) -> String {
    let parts: Vec<String> = v
        .as_object()
        .into_iter()
        .flatten()
        .map(|(n, i)| format!("{}/{n}", i.as_u64().unwrap_or(0)))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" shard {}", parts.join(" "))
    }
}

/// A reason's one-line summary, from its JSON form (`Reason::summary` on the server side).
pub fn reason_line(r: &Value) -> String {
    match serde_json::from_value::<crate::explain::answer::Reason>(r.clone()) {
        Ok(reason) => reason.summary(),
        Err(_) => r.to_string(),
    }
}

/// The explanation `e` (the JSON `GET /explain` answers) as a table.
pub fn table(e: &Value) -> String {
    let mut out = String::new();
    let ns = s(&e["namespace"]);
    let _ = writeln!(
        out,
        "{} {}{}",
        s(&e["kind"]),
        if ns.is_empty() {
            String::new()
        } else {
            format!("{ns}/")
        },
        s(&e["name"])
    );
    let counts: Vec<String> = e["shard_counts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c.to_string())
        .collect();
    if !counts.is_empty() {
        let _ = writeln!(out, "shard counts: {}", counts.join(", "));
    }
    for n in e["notes"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "note: {}", s(n));
    }
    let jobs = e["jobs"].as_array().cloned().unwrap_or_default();
    if jobs.is_empty() && e["monitor"].is_null() {
        let _ = writeln!(out, "no job reads this kind");
    }
    let width = jobs.iter().map(|j| s(&j["job"]).len()).max().unwrap_or(0);
    if !jobs.is_empty() {
        let _ = writeln!(out, "\n{:<width$}  {:>7}  ANSWER", "JOB", "TARGETS");
    }
    for j in &jobs {
        let served = j["served"].as_u64().unwrap_or(0);
        let answer = if served > 0 {
            "served".to_string()
        } else if j["reason"].is_null() {
            "no targets".to_string()
        } else {
            reason_line(&j["reason"])
        };
        let _ = writeln!(out, "{:<width$}  {served:>7}  {answer}", s(&j["job"]));
        for t in j["targets"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "{:<width$}           {}{} {}",
                "",
                s(&t["address"]),
                shards(&t["shards"]),
                labels(&t["labels"])
            );
        }
    }
    if let Some(m) = e["monitor"].as_object() {
        let list = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .map(|x| s(x).to_string())
                .collect()
        };
        let _ = writeln!(out, "\nENDPOINT JOB  PORT  TARGETS");
        for ep in m["endpoints"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "{}  {}  {}{}",
                s(&ep["job"]),
                ep["port"].as_str().unwrap_or("(any)"),
                ep["targets"].as_u64().unwrap_or(0),
                ep["mtls_targets"]
                    .as_u64()
                    .map(|n| format!(" (+{n} in /istio-mtls)"))
                    .unwrap_or_default()
            );
        }
        let _ = writeln!(out, "\nselects: {}", none_or(&list(&m["selected"])));
        for n in m["nearly"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "nearly: {} fails {} (labels {})",
                s(&n["object"]),
                s(&n["requirement"]),
                labels(&n["labels"])
            );
        }
        for (what, key) in [
            ("unsupported", "unsupported"),
            ("warning", "warnings"),
            ("not served", "problems"),
        ] {
            for x in list(&m[key]) {
                let _ = writeln!(out, "{what}: {x}");
            }
        }
    }
    out
}

fn none_or(v: &[String]) -> String {
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}

/// The explanation `e` as an HTML fragment (every value escaped).
pub fn html(e: &Value) -> String {
    let esc = crate::escape::html;
    let mut h = String::new();
    let ns = s(&e["namespace"]);
    let _ = write!(
        h,
        "<h2 id=\"explained\">{} {}{}</h2>",
        esc(s(&e["kind"])),
        if ns.is_empty() {
            String::new()
        } else {
            format!("{}/", esc(ns))
        },
        esc(s(&e["name"]))
    );
    for n in e["notes"].as_array().into_iter().flatten() {
        let _ = write!(h, "<p class=\"note\">{}</p>", esc(s(n)));
    }
    h.push_str("<table id=\"explain-jobs\"><tr><th>job</th><th>targets</th><th>answer</th></tr>");
    for j in e["jobs"].as_array().into_iter().flatten() {
        let served = j["served"].as_u64().unwrap_or(0);
        let answer = if served > 0 {
            let ts: Vec<String> = j["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    format!(
                        "<li><code>{}</code>{} {}</li>",
                        esc(s(&t["address"])),
                        esc(&shards(&t["shards"])),
                        esc(&labels(&t["labels"]))
                    )
                })
                .collect();
            format!("<ul>{}</ul>", ts.join(""))
        } else if j["reason"].is_null() {
            "no targets".into()
        } else {
            format!(
                "<span class=\"reason\" data-reason=\"{}\">{}</span>",
                esc(s(&j["reason"]["reason"])),
                esc(&reason_line(&j["reason"]))
            )
        };
        let _ = write!(
            h,
            "<tr data-job=\"{name}\"><td>{name}</td><td class=\"n\">{served}</td><td>{answer}</td></tr>",
            name = esc(s(&j["job"])),
        );
    }
    h.push_str("</table>");
    if !e["monitor"].is_null() {
        let _ = write!(h, "<pre id=\"explain-monitor\">{}</pre>", esc(&table(e)));
    }
    h
}
