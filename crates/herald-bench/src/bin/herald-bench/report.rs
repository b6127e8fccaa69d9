//! The suite's report: `results.json` (every section with its own date, command and commit, so
//! `--only` refreshes one section and keeps the others) rendered as the RESULTS.md section between
//! two marker comments.

use std::path::Path;

use herald_bench::fmt;
use serde_json::Value;

pub const BEGIN: &str = "<!-- herald-bench suite: begin (written by bench/run; edits between these markers are overwritten) -->";
pub const END: &str = "<!-- herald-bench suite: end -->";

/// The sections, in order: (key, title). The soak, the steady state and the restart run only when
/// named (`--only soak`).
pub const SECTIONS: [(&str, &str); 8] = [
    ("discovery", "1. Discovery cost versus a real peer"),
    (
        "control",
        "2. Control-plane load, direct versus through herald",
    ),
    ("serving", "3. Serving"),
    ("propagation", "4. Propagation"),
    ("soak", "5. Fault soak"),
    ("steady", "6. Steady state beside vmagent"),
    ("restart", "7. A restart in the steady state"),
    (
        "realcp",
        "8. The real control plane, direct versus through herald",
    ),
];

fn n(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// A bold ratio, or "–" when it has no value (nothing served, or nothing to divide by).
fn ratio(x: Option<f64>) -> String {
    match x.filter(|x| x.is_finite()) {
        Some(x) => format!("**{}×**", fmt(Some(x), 2)),
        None => "–".into(),
    }
}

fn ms_pair(v: &Value) -> String {
    format!("{} / {}", fmt(n(&v["p50_ms"]), 2), fmt(n(&v["p99_ms"]), 2))
}

/// The whole markdown section, markers included.
pub fn markdown(doc: &Value) -> String {
    let m = &doc["machine"];
    let mut o = format!(
        "{BEGIN}\n## Benchmark suite (issue 9) — `bench/run`\n\n\
         Written by `bench/run` (`herald-bench suite`, `crates/herald-bench`): kube-sim, herald, vmagent, \
         the static server and the clients are separate processes on 127.0.0.1. Every pod and node \
         address kube-sim generates is loopback and vmagent drops every target, so nothing dials out.\n\n\
         Machine: {} × {} (`nproc` {}), {} GiB RAM (MemTotal), Linux {}.\n",
        m["cpu_model"].as_str().unwrap_or("?"),
        m["cpus"],
        m["nproc"],
        fmt(n(&m["mem_total_gib"]), 1),
        m["kernel"].as_str().unwrap_or("?"),
    );
    for (key, title) in SECTIONS {
        let s = &doc["sections"][key];
        o.push_str(&format!("\n### {title}\n\n"));
        if s.is_null() && key == "soak" {
            o.push_str(
                "Runs only when named: `bench/run --only soak` (10 minutes; `--soak-seconds N`).\n",
            );
            continue;
        }
        if s.is_null() && key == "steady" {
            o.push_str(
                "Runs only when named: `bench/run --only steady` (10 minutes; `--steady-seconds N`).\n",
            );
            continue;
        }
        if s.is_null() && key == "restart" {
            o.push_str(
                "Runs only when named: `bench/run --only restart` (10,000 informers; `--restart-watchers N`, `--restart-scale S`).\n",
            );
            continue;
        }
        if s.is_null() && key == "realcp" {
            o.push_str(
                "Runs only when named: `bench/run --only realcp` (needs `peers/build`; `--realcp '0.02=1,10,50,100;0.1=1,10'`).\n",
            );
            continue;
        }
        if s.is_null() {
            o.push_str("Not run yet.\n");
            continue;
        }
        let meta = &s["meta"];
        o.push_str(&format!(
            "Run {} UTC ({:.0} s), `{}`, commit `{}`, herald `{}`, vmagent `{}`. Load average before/after: {} / {}.{}\n\n",
            meta["date_utc"].as_str().unwrap_or("?"),
            meta["seconds"].as_f64().unwrap_or(0.0),
            meta["command"].as_str().unwrap_or("?"),
            meta["commit"].as_str().unwrap_or("?"),
            meta["herald_version"].as_str().unwrap_or("?"),
            meta["vmagent_version"].as_str().unwrap_or("not installed"),
            meta["loadavg_before"].as_str().unwrap_or("?"),
            meta["loadavg_after"].as_str().unwrap_or("?"),
            meta["note"]
                .as_str()
                .map(|t| format!(" **Conditions: {t}**"))
                .unwrap_or_default(),
        ));
        let d = &s["data"];
        if let Some(e) = s["error"].as_str() {
            o.push_str(&format!("**The section failed**: {e}\n"));
            continue;
        }
        match key {
            "discovery" => discovery(&mut o, d),
            "control" => control(&mut o, d),
            "serving" => serving(&mut o, d),
            "soak" => soak(&mut o, d),
            "steady" => steady(&mut o, d),
            "restart" => restart(&mut o, d),
            "realcp" => {
                for c in d["clusters"].as_array().into_iter().flatten() {
                    o.push_str(&format!(
                        "#### {}\n\n",
                        c["cluster"].as_str().unwrap_or("?")
                    ));
                    match c["error"].as_str() {
                        Some(e) => o.push_str(&format!("**The cluster failed**: {e}\n\n")),
                        None => realcp(&mut o, c),
                    }
                }
            }
            _ => propagation(&mut o, d),
        }
    }
    o.push_str(&format!("\n{END}\n"));
    o
}

fn steady(o: &mut String, d: &Value) {
    o.push_str(&format!(
        "kube-sim {}; herald (jobs `pod`, `endpointslice`, Kubernetes API face on) and one vmagent \
         (kubernetes_sd of both roles, every target dropped) on the same kube-sim in the same run, each \
         synced alone first. Then, for {} s: {} consumers each polling its shard of {} of both jobs every \
         {} s without Accept-Encoding (as Prometheus's http_sd), {} more with gzip, {} Kubernetes API \
         watchers of every pod through herald. Staleness: marker pods rewritten round-robin carrying \
         their send time → the first body a consumer got holding it (includes the wait for the next \
         poll). Yardstick: the pod, EndpointSlice and Service lists read at once from kube-sim and \
         discarded.\n\n",
        d["cluster"].as_str().unwrap_or("?"),
        d["seconds"],
        d["shards"],
        d["shards"],
        d["poll_interval_seconds"],
        d["gzip_consumers"],
        d["watchers"],
    ));
    let (h, v, r) = (&d["herald"], &d["vmagent"], &d["ratios"]);
    o.push_str("| | herald | vmagent | herald / vmagent |\n|---|---:|---:|---:|\n");
    let row =
        |o: &mut String, what: &str, a: &Value, b: &Value, ratio_key: Option<&str>, dec: usize| {
            o.push_str(&format!(
                "| {what} | {} | {} | {} |\n",
                fmt(n(a), dec),
                fmt(n(b), dec),
                ratio_key.map_or("".into(), |k| ratio(n(&r[k]))),
            ));
        };
    row(
        o,
        "first sync, s",
        &h["after_sync"]["sync_seconds"],
        &v["after_sync"]["sync_seconds"],
        Some("herald_sync_over_vmagent"),
        1,
    );
    row(
        o,
        "RSS after sync, MiB",
        &h["after_sync"]["rss_mib"],
        &v["after_sync"]["rss_mib"],
        Some("herald_rss_after_sync_over_vmagent"),
        0,
    );
    row(
        o,
        "steady peak RSS, MiB",
        &h["steady"]["peak_rss_mib"],
        &v["steady"]["peak_rss_mib"],
        Some("herald_peak_rss_over_vmagent_peak_rss"),
        0,
    );
    row(
        o,
        "steady mean RSS, MiB",
        &h["steady"]["mean_rss_mib"],
        &v["steady"]["mean_rss_mib"],
        None,
        0,
    );
    row(
        o,
        "steady mean CPU, cores",
        &h["steady"]["mean_cores"],
        &v["steady"]["mean_cores"],
        Some("herald_mean_cores_over_vmagent"),
        3,
    );
    let c = &d["consumers"];
    let s = &d["staleness"];
    let m = &h["metrics"];
    let w = &d["kube_watchers"];
    o.push_str(&format!(
        "\nherald's steady peak RSS over vmagent's RSS after its sync: {}. herald's first sync over the \
         yardstick ({} s for {} MB): {}.\n\n\
         Consumers: {} requests ({} failed), {} MB identity and {} MB gzip served, request p50 / p99 {} / {} ms. \
         Staleness, marker write → first body holding it: p50 {} ms, p99 {} ms, max {} ms ({} writes, {} never seen). \
         Bodies: {} MB held at the end (sampled peak {} MB, budget {} MB), {} built, {} evicted, {} blocks \
         compressed, {} taken over unchanged; hot bodies: {} admitted, {} responses from them, {} MB held at the end. \
         Watchers: {} attached, {} events, {} refused with 429.\n",
        ratio(n(&r["herald_peak_rss_over_vmagent_rss_after_sync"])),
        fmt(n(&d["yardstick"]["seconds"]), 2),
        fmt(n(&d["yardstick"]["bytes"]).map(|b| b / 1e6), 0),
        ratio(n(&r["herald_sync_over_yardstick"])),
        c["requests"], c["failed"],
        fmt(n(&c["identity_bytes"]).map(|b| b / 1e6), 0),
        fmt(n(&c["gzip_bytes"]).map(|b| b / 1e6), 0),
        fmt(n(&c["request_p50_ms"]), 1), fmt(n(&c["request_p99_ms"]), 1),
        fmt(n(&s["p50_ms"]), 0), fmt(n(&s["p99_ms"]), 0), fmt(n(&s["max_ms"]), 0),
        s["writes"], s["unseen"],
        fmt(n(&m["body_bytes_held"]).map(|b| b / 1e6), 1),
        fmt(n(&m["body_bytes_held_peak_sampled"]).map(|b| b / 1e6), 1),
        fmt(n(&m["body_budget_bytes"]).map(|b| b / 1e6), 0),
        fmt(n(&m["body_builds"]), 0), fmt(n(&m["body_evictions"]), 0),
        fmt(n(&m["blocks_compressed"]), 0), fmt(n(&m["blocks_taken"]), 0),
        fmt(n(&m["hot_admitted"]), 0), fmt(n(&m["hot_responses"]), 0),
        fmt(n(&m["hot_bytes_held"]).map(|b| b / 1e6), 1),
        w["attached"], w["events"], w["refused_429"],
    ));
    let z = &d["sizing"];
    if z.is_object() {
        o.push_str(&format!(
            "\nThe README's sizing for this load (objects {} MiB, bodies {} MiB, watchers {} MiB): request {} MiB, \
             limit {} MiB. Steady peak within the request: {}; high-water mark ({} MiB, the first sync's \
             included) within the limit: {}.\n",
            fmt(n(&z["objects_mib"]), 0),
            fmt(n(&z["bodies_mib"]), 0),
            fmt(n(&z["watchers_mib"]), 0),
            fmt(n(&z["request_mib"]), 0),
            fmt(n(&z["limit_mib"]), 0),
            yes_no(&z["steady_peak_within_request"]),
            fmt(n(&h["peak_rss_hwm_mib"]), 0),
            yes_no(&z["hwm_within_limit"]),
        ));
    }
}

fn yes_no(v: &Value) -> &'static str {
    match v.as_bool() {
        Some(true) => "**yes**",
        Some(false) => "**no**",
        None => "–",
    }
}

fn restart(o: &mut String, d: &Value) {
    let (b, s, g) = (&d["before"], &d["storm"], &d["goal"]);
    o.push_str(&format!(
        "kube-sim {}; herald (jobs `pod`, `endpointslice`, Kubernetes API face on, default admission: \
         {} new lists and watches with initial events a second, burst {}), {} consumers polling their shard of both jobs \
         every {} s and {} with gzip, and {} kubelet-shaped informers through herald's Kubernetes API: each \
         LISTs then WATCHes the pods of one node (`fieldSelector=spec.nodeName=…`, round-robin over the \
         {} nodes) with client-go's reflector backoff (800 ms doubling to 30 s, +0–100 % jitter) and its \
         REST client's Retry-After retries (10 per request). One marker pod per node is rewritten \
         whenever one of that node's informers has a watch open that has delivered nothing yet (at most \
         once a second per node). Once every informer was receiving ({} of {} after {} s) and after a \
         {} s baseline, herald was killed (SIGKILL) and started again at once with the same arguments \
         and ports (load average at the kill: {}).\n\n\
         **Resynced** (per informer): after the kill, a 200 WATCH from a resourceVersion it got after the \
         kill (a 200 LIST, or a watch resumed without one) and the first event or bookmark on that \
         watch; its time is that event's arrival, counted from the kill.\n\n",
        d["cluster"].as_str().unwrap_or("?"),
        // Runs before the admission was recorded had herald's defaults of then.
        fmt(d["admission"]["rate"].as_f64().or(Some(200.0)), 0),
        fmt(d["admission"]["burst"].as_f64().or(Some(1000.0)), 0),
        d["shards"],
        d["poll_interval_seconds"],
        d["gzip_consumers"],
        fmt(n(&d["watchers"]), 0),
        fmt(n(&d["nodes"]), 0),
        fmt(n(&b["receiving_at_kill"]), 0),
        fmt(n(&d["watchers"]), 0),
        fmt(n(&b["attach_seconds"]), 1),
        d["baseline_seconds"],
        d["loadavg_at_kill"].as_str().unwrap_or("?"),
    ));
    let (r, w, i) = (&s["resync"], &s["watching"], &s["informers"]);
    o.push_str("| after the kill | s |\n|---|---:|\n");
    for (what, v) in [
        ("herald listening again", &s["listening_seconds"]),
        ("herald ready (`/readyz`)", &s["ready_seconds"]),
        ("informers watching again: p50", &w["p50_s"]),
        ("informers watching again: p99", &w["p99_s"]),
        ("informers watching again: max", &w["max_s"]),
        ("informers resynced: p50", &r["p50_s"]),
        ("informers resynced: p99", &r["p99_s"]),
        ("**informers resynced: max (all)**", &r["max_s"]),
    ] {
        o.push_str(&format!("| {what} | {} |\n", fmt(n(v), 1)));
    }
    let (hb, hs) = (&b["herald"], &s["herald"]);
    o.push_str(&format!(
        "\nResynced {} of {} informers ({} after a relist); {} gave up. Through the storm ({} s followed): \
         informers refused with 429 {} times (herald's `herald_kube_admission_refused_total` since the \
         restart: {}), {} LISTs ({} answered with resourceVersion 0), {} watches ended by 410 Expired, \
         {} ended by the server; other statuses {}; consumers {} requests, {} failed; {} marker writes.\n\n",
        fmt(n(&s["resynced"]), 0),
        fmt(n(&d["watchers"]), 0),
        fmt(n(&s["relisted"]), 0),
        s["gave_up"],
        fmt(n(&s["seconds_followed"]), 1),
        fmt(n(&i["refused_429"]), 0),
        fmt(n(&s["metrics"]["kube_admission_refused"]), 0),
        fmt(n(&i["lists"]), 0),
        fmt(n(&i["lists_at_rv0"]), 0),
        fmt(n(&i["expired_410"]), 0),
        fmt(n(&i["server_ended"]), 0),
        s["informer_other_status"],
        fmt(n(&s["consumers"]["requests"]), 0),
        fmt(n(&s["consumers"]["failed"]), 0),
        fmt(n(&s["marker_writes"]), 0),
    ));
    o.push_str(
        "| herald | baseline before the kill | storm (restarted process) |\n|---|---:|---:|\n",
    );
    let row = |o: &mut String, what: &str, a: Option<f64>, c: Option<f64>, dec: usize| {
        o.push_str(&format!("| {what} | {} | {} |\n", fmt(a, dec), fmt(c, dec)));
    };
    row(
        o,
        "peak RSS sampled, MiB",
        n(&hb["peak_rss_mib"]),
        n(&hs["peak_rss_mib"]),
        0,
    );
    row(
        o,
        "peak RSS (VmHWM), MiB",
        n(&b["peak_rss_hwm_mib"]),
        n(&s["peak_rss_hwm_mib"]),
        0,
    );
    row(
        o,
        "mean CPU, cores",
        n(&hb["mean_cores"]),
        n(&hs["mean_cores"]),
        2,
    );
    row(
        o,
        "CPU seconds (window; storm: since start)",
        n(&hb["cpu_seconds"]),
        n(&s["herald_cpu_seconds_since_start"]),
        1,
    );
    row(
        o,
        "body bytes held, MB (storm: sampled peak)",
        n(&b["metrics"]["body_bytes_held"]).map(|x| x / 1e6),
        n(&s["body_bytes_held_peak_sampled"]).map(|x| x / 1e6),
        1,
    );
    row(
        o,
        "body budget, MB",
        n(&b["metrics"]["body_budget_bytes"]).map(|x| x / 1e6),
        n(&s["metrics"]["body_budget_bytes"]).map(|x| x / 1e6),
        1,
    );
    o.push_str("\nkube-sim saw, from the kill to the end of the storm (every LIST and WATCH there is herald's; a \
         streaming list, a WATCH with sendInitialEvents, counts as a WATCH, and herald resumes a watch \
         after its timeoutSeconds of 5–10 minutes), beside the restarted herald's own count of full \
         syncs (`herald_upstream_relists_total`, the initial list included):\n\n\
         | resource | LISTs | WATCHes | herald's full syncs |\n|---|---:|---:|---:|\n");
    if let Some(rs) = s["upstream"]["by_resource"].as_object() {
        for (res, c) in rs {
            o.push_str(&format!(
                "| {res} | {} | {} | {} |\n",
                fmt(n(&c["lists"]), 0),
                fmt(n(&c["watches"]), 0),
                fmt(n(&s["herald_upstream_relists"][res]), 0),
            ));
        }
    }
    o.push_str(&format!(
        "\nGoal (issue 22): every informer resynced within {} s: {}; none gave up: {}; each kind listed \
         once upstream (one full sync per kind, at most one LIST): {}; body bytes held within the body budget ({} MB held at most, budget {} MB): {}; \
         peak RSS within the body budget ({} MiB): {} — the budget bounds the encoded bodies herald \
         holds, not its whole RSS (the cache of every object, the indexes and the watchers are outside it); \
         peak RSS within the limit the README's sizing formula gives this load ({} MiB: objects {} MiB, \
         watchers {} MiB, the body budget): {}.\n",
        g["seconds"],
        yes_no(&g["all_resynced_within"]),
        yes_no(&g["none_gave_up"]),
        yes_no(&g["one_list_per_kind"]),
        fmt(n(&g["body_bytes_held_max"]).map(|x| x / 1e6), 1),
        fmt(n(&g["budget_bytes"]).map(|x| x / 1e6), 1),
        yes_no(&g["body_bytes_held_within_budget"]),
        fmt(n(&g["peak_rss_mib"]), 0),
        yes_no(&g["peak_rss_within_budget"]),
        fmt(n(&g["sizing"]["limit_mib"]), 0),
        fmt(n(&g["sizing"]["objects_mib"]), 0),
        fmt(n(&g["sizing"]["watchers_mib"]), 0),
        yes_no(&g["peak_rss_within_sizing_limit"]),
    ));
}

fn soak(o: &mut String, d: &Value) {
    o.push_str(
        "kube-sim churns the soak's own workloads (rolling ones replaced create-before-delete, others \
         relabelled and flapped in place; the invariant in `crates/herald-bench/src/soak.rs` gives a lower \
         bound on every job's and shard's true target count at every instant) while faults rotate and \
         consumers poll every job; at the end, faults cleared, every job and shard herald serves is \
         compared with herald-core over kube-sim's own objects.\n\n",
    );
    o.push_str(&crate::soak::markdown(d));
}

fn discovery(o: &mut String, d: &Value) {
    o.push_str(&format!(
        "Jobs `pod` and `endpointslice`, each process alone against the same kube-sim (preset `{}`, seed {}, \
         churn 0). herald is synced at `/readyz`; vmagent when its informers hold every pod, EndpointSlice \
         and Service. RSS and CPU seconds 2 s after the sync. Medians of {} run(s) at scale {}, {} elsewhere. \
         At scale {} herald also runs with `--initial-list list` (paged LISTs, as against an apiserver \
         without streaming lists), alternating with the others.\n\n",
        d["preset"].as_str().unwrap_or("?"),
        d["seed"],
        d["runs"]["at_main_scale"],
        d["runs"]["main_scale"],
        d["runs"]["elsewhere"],
        d["runs"]["main_scale"],
    ));
    o.push_str("| scale | pods | who | first complete sync s | RSS after sync MiB | peak RSS MiB | CPU s | bytes from kube-sim | targets (herald) |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
    for p in d["points"].as_array().into_iter().flatten() {
        for (who, name) in [
            ("herald", "herald"),
            ("herald_paged", "herald, paged LIST"),
            ("vmagent", "vmagent"),
        ] {
            let med = &p[who]["median"];
            if med.is_null() {
                continue;
            }
            o.push_str(&format!(
                "| {} | {} | {name} | {} | {} | {} | {} | {} | {} |\n",
                p["scale"],
                fmt(n(&p["pods"]), 0),
                fmt(n(&med["sync_seconds"]), 1),
                fmt(n(&med["rss_mib"]), 0),
                fmt(n(&med["peak_rss_mib"]), 0),
                fmt(n(&med["cpu_seconds"]), 1),
                fmt(n(&med["upstream_bytes"]), 0),
                fmt(n(&med["targets"]), 0),
            ));
        }
        for (who, name) in [("herald", "herald"), ("herald_paged", "herald paged")] {
            let r = |k: &str| {
                n(&p[who]["median"][k])
                    .zip(n(&p["vmagent"]["median"][k]))
                    .map(|(a, b)| a / b)
            };
            if r("sync_seconds").is_some() {
                o.push_str(&format!(
                    "| {} | | **{name} / vmagent** | **{}×** | **{}×** | {}× | {}× | {}× | |\n",
                    p["scale"],
                    fmt(r("sync_seconds"), 2),
                    fmt(r("rss_mib"), 2),
                    fmt(r("peak_rss_mib"), 2),
                    fmt(r("cpu_seconds"), 2),
                    fmt(r("upstream_bytes"), 2),
                ));
            }
        }
    }
    for s in d["skipped"].as_array().into_iter().flatten() {
        o.push_str(&format!("\nNot measured: {}\n", s.as_str().unwrap_or("?")));
    }
    if !d["vmagent_installed"].as_bool().unwrap_or(false) {
        o.push_str(
            "\nvmagent was not installed: herald rows only (`apt-get install victoria-metrics`).\n",
        );
    }
    o.push_str(
        "\n![herald and vmagent: first sync and RSS against cluster size](discovery-scaling.svg)\n",
    );
}

fn control(o: &mut String, d: &Value) {
    o.push_str(&format!(
        "One kube-sim ({}); one herald (jobs `pod` and `endpointslice`, Kubernetes API face on) attached \
         throughout. Each row: from just before N consumers attach to {} s later ({} s warm-up + {} s \
         window), one run. kube-sim figures are deltas of its meter: direct rows count the consumers' requests, \
         `herald` rows herald's (its consumers never reach kube-sim); kube-sim's CPU includes its churn. herald's initial sync took {} bytes in {} LISTs/watches before the rows. \
         `watchers`: kube-rs-style informers of every pod (LIST, then WATCH); `vmagent`: kubernetes_sd on \
         kube-sim (direct) or http_sd on herald every {} s; `http_sd`: pollers of both jobs every {} s. \
         herald egress = `herald_kube_bytes_sent_total` + `herald_sd_bytes_served_total`. The last column \
         compares kube-sim's writes (resourceVersions) in the row with the objects herald took in \
         (`herald_upstream_events_total`): far fewer means herald fell behind its upstream.\n\n",
        d["cluster"].as_str().unwrap_or("?"),
        fmt(n(&d["warmup_seconds"]).zip(n(&d["window_seconds"])).map(|(a, b)| a + b), 0),
        d["warmup_seconds"],
        d["window_seconds"],
        fmt(n(&d["herald_initial_sync_from_kube_sim"]["bytes"]), 0),
        fmt(
            n(&d["herald_initial_sync_from_kube_sim"]["lists"])
                .zip(n(&d["herald_initial_sync_from_kube_sim"]["watches_started"]))
                .map(|(a, b)| a + b),
            0
        ),
        d["poll_interval_seconds"],
        d["poll_interval_seconds"],
    ));
    o.push_str("| consumer | N | via | kube-sim open watches | kube-sim watch events | kube-sim bytes | kube-sim LISTs | kube-sim CPU s | herald CPU s | herald egress bytes | consumers CPU s | kube-sim writes → herald ingested |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for r in d["rows"].as_array().into_iter().flatten() {
        let k = &r["kube_sim"];
        let herald = r["via"] == "herald";
        let ingest = format!(
            "{} → {}",
            fmt(n(&r["kube_sim_writes"]), 0),
            fmt(n(&r["herald"]["upstream_events"]), 0)
        );
        o.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r["consumer"].as_str().unwrap_or("?"),
            r["n"],
            r["via"].as_str().unwrap_or("?"),
            fmt(n(&k["watches_open"]), 0),
            fmt(n(&k["watch_events"]), 0),
            fmt(n(&k["bytes"]), 0),
            fmt(n(&k["lists"]), 0),
            fmt(n(&k["cpu_seconds"]), 2),
            if herald {
                fmt(n(&r["herald"]["cpu_seconds"]), 2)
            } else {
                "–".into()
            },
            if herald {
                fmt(n(&r["herald"]["egress_bytes"]), 0)
            } else {
                "–".into()
            },
            fmt(n(&r["consumers_cpu_seconds"]), 2),
            ingest,
        ));
    }
    o.push_str("\nRatio direct / through herald (same N, same run; `http_sd` rows are compared with N direct `watchers`):\n\n| consumer | N | kube-sim bytes | open watches | watch events | kube-sim CPU |\n|---|---:|---:|---:|---:|---:|\n");
    for r in d["ratios_direct_over_herald"]
        .as_array()
        .into_iter()
        .flatten()
    {
        o.push_str(&format!(
            "| {} | {} | {}× | {}× | {}× | {}× |\n",
            r["consumer"].as_str().unwrap_or("?"),
            r["n"],
            fmt(n(&r["bytes"]), 1),
            fmt(n(&r["watches_open"]), 1),
            fmt(n(&r["watch_events"]), 1),
            fmt(n(&r["cpu_seconds"]), 1),
        ));
    }
}

fn realcp(o: &mut String, d: &Value) {
    let m = &d["memory"];
    let hs = &d["herald_start"];
    o.push_str(&format!(
        "etcd 3.7.0, kube-apiserver and kube-controller-manager v1.37.2 (`peers/build`) on loopback, loaded with {} \
         ({} objects through the API in {} s; EndpointSlices and Endpoints by the real controllers). One herald \
         (jobs `pod` and `endpointslice`, its Kubernetes API face on the default kinds) attached throughout. \
         N consumers of each shape: `promsd` (Prometheus's kubernetes_sd, role endpointslice: EndpointSlices, \
         Services, Pods) and `proxy-informers` (N sets of kube-proxy's four informers, protobuf); through herald \
         both read its face. Phases: **start** (all N at once until every one has synced), **churn** ({} events/s \
         for {} s through the API, a probe PATCHing a ConfigMap every 200 ms), **restart** (all killed, all \
         started again until synced). CPU from `/proc`; watch events, their bytes (`apiserver_watch_events_sizes`), \
         LIST/GET bytes (`apiserver_response_sizes`), LISTs (`apiserver_request_total`) and open \
         watches (`apiserver_longrunning_requests`) from the apiserver's own `/metrics`.\n\n\
         herald's own start cost the apiserver {} CPU s and etcd {} CPU s ({} watch events, {} LIST/GET bytes).\n\n\
         Memory holding the cluster: kube-apiserver {} MiB (empty: {} MiB; {} KiB a pod), herald {} MiB after its \
         sync with the face on (empty: {} MiB; {} KiB a pod): herald / apiserver per object, each over its empty self, {}. \
         The apiserver's figure is after a restart (its watch cache filled from its own lists).\n\n",
        d["cluster"].as_str().unwrap_or("?"),
        d["objects_loaded"],
        fmt(n(&d["load_seconds"]), 1),
        d["churn_rate"],
        d["churn_seconds"],
        fmt(n(&hs["apiserver_cpu_seconds"]), 2),
        fmt(n(&hs["etcd_cpu_seconds"]), 2),
        fmt(n(&hs["watch_events"]), 0),
        fmt(n(&hs["response_bytes"]), 0),
        fmt(n(&m["apiserver_loaded_mib"]), 0),
        fmt(n(&m["apiserver_empty_mib"]), 0),
        fmt(n(&m["apiserver_kib_per_pod"]), 2),
        fmt(n(&m["herald_synced_mib"]), 0),
        fmt(n(&m["herald_empty_mib"]), 0),
        fmt(n(&m["herald_kib_per_pod"]), 2),
        ratio(n(&m["herald_over_apiserver"])),
    ));
    o.push_str("herald's first sync by upstream format (median of 3 each, alternating; JSON throughout: herald does not decode the apiserver's protobuf):\n\n| initial list | compression | ready s | apiserver CPU s | apiserver RSS growth MiB | herald CPU s |\n|---|---|---:|---:|---:|---:|\n");
    for r in d["first_sync"].as_array().into_iter().flatten() {
        o.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r["initial_list"].as_str().unwrap_or("?"),
            r["compression"].as_str().unwrap_or("?"),
            fmt(n(&r["ready_seconds"]), 2),
            fmt(n(&r["apiserver_cpu_seconds"]), 2),
            fmt(n(&r["apiserver_rss_growth_mib"]), 0),
            fmt(n(&r["herald_cpu_seconds"]), 2),
        ));
    }
    o.push_str("\nThe yardstick, every pod in one LIST read and discarded (median of 3; bytes as decoded):\n\n| format | gzip | s | bytes |\n|---|---|---:|---:|\n");
    for r in d["raw_reads"].as_array().into_iter().flatten() {
        o.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r["format"].as_str().unwrap_or("?"),
            r["gzip"],
            fmt(n(&r["seconds"]), 3),
            fmt(n(&r["decoded_bytes"]), 0),
        ));
    }
    o.push('\n');
    o.push_str("| N | via | phase | s | apiserver CPU s | etcd CPU s | herald CPU s | apiserver peak MiB | watch events | watch bytes | LIST/GET bytes | LISTs | write p50 / p99 ms |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for r in d["rows"].as_array().into_iter().flatten() {
        if let Some(e) = r["error"].as_str() {
            o.push_str(&format!(
                "| {} | {} | failed: {e} |||||||||||||\n",
                r["n"],
                r["via"].as_str().unwrap_or("?")
            ));
            continue;
        }
        for ph in ["start", "churn", "restart"] {
            let p = &r[ph];
            let writes = if ph == "churn" {
                format!(
                    "{} / {}",
                    fmt(n(&p["probe_write_p50_ms"]), 1),
                    fmt(n(&p["probe_write_p99_ms"]), 1)
                )
            } else {
                "–".into()
            };
            o.push_str(&format!(
                "| {} | {} | {ph} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {writes} |\n",
                r["n"],
                r["via"].as_str().unwrap_or("?"),
                fmt(n(&p["seconds"]), 1),
                fmt(n(&p["apiserver_cpu_seconds"]), 2),
                fmt(n(&p["etcd_cpu_seconds"]), 2),
                if r["via"] == "herald" {
                    fmt(n(&p["herald_cpu_seconds"]), 2)
                } else {
                    "–".into()
                },
                fmt(n(&p["apiserver_peak_rss_mib"]), 0),
                fmt(n(&p["watch_events"]), 0),
                fmt(n(&p["watch_event_bytes"]), 0),
                fmt(n(&p["response_bytes"]), 0),
                fmt(n(&p["lists"]), 0),
            ));
        }
    }
    const WATCHED: [&str; 5] = [
        "pods",
        "services",
        "endpointslices",
        "nodes",
        "servicecidrs",
    ];
    o.push_str(&format!(
        "\nOpen watches on the apiserver once the N consumers have synced (`apiserver_longrunning_requests{{verb=\"WATCH\"}}`; the controller-manager's and herald's included):\n\n| N | via | {} |\n|---:|---|{}\n",
        WATCHED.join(" | "),
        "---:|".repeat(WATCHED.len())
    ));
    for r in d["rows"].as_array().into_iter().flatten() {
        let w = &r["start"]["watches_open"];
        let cells: Vec<String> = WATCHED.iter().map(|k| fmt(n(&w[*k]), 0)).collect();
        o.push_str(&format!(
            "| {} | {} | {} |\n",
            r["n"],
            r["via"].as_str().unwrap_or("?"),
            cells.join(" | ")
        ));
    }
    let m = &d["meter"];
    if !m.is_null() {
        let k = &m["kube_sim"];
        let a = &m["apiserver"];
        let open = |v: &Value| {
            WATCHED
                .iter()
                .map(|r| fmt(n(&v["watches_open"][*r]), 0))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        o.push_str(&format!(
            "\nkube-sim's load accounting against the apiserver's metrics: the same {} consumers of each shape started \
             directly on kube-sim (same preset, scale and seed; kube-sim's own slices) and on kube-apiserver (the start \
             phase above). kube-sim's watch bytes are its `kube_sim_sent_bytes_total{{verb=\"WATCH\"}}`, the apiserver's \
             the sum of `apiserver_watch_events_sizes`.{}\n\n\
             | | watch events | watch bytes | open watches ({}) |\n|---|---:|---:|---|\n\
             | kube-apiserver | {} | {} | {} |\n| kube-sim | {} | {} | {} |\n",
            m["n"],
            m["error"]
                .as_str()
                .map(|e| format!(" **Failed**: {e}"))
                .unwrap_or_default(),
            WATCHED.join(" / "),
            fmt(n(&a["watch_events"]), 0),
            fmt(n(&a["watch_bytes"]), 0),
            open(a),
            fmt(n(&k["watch_events"]), 0),
            fmt(n(&k["watch_bytes"]), 0),
            open(k),
        ));
    }
}

fn serving(o: &mut String, d: &Value) {
    let b = &d["body"];
    o.push_str(&format!(
        "kube-sim {}; herald serves `{}`: {} targets, {} bytes identity, {} bytes gzip. The static server \
         (`herald-bench static-server`) fetched the same bytes and ETag from herald once and serves them from \
         memory with hyper. Keep-alive clients (hyper), {} s per cell after {} s warm-up, herald and static \
         interleaved, one run; ratios within the run. identity = no Accept-Encoding (as Prometheus asks); \
         304 = If-None-Match with the ETag. CPU per request = server CPU over warm-up and window / requests.\n\n",
        d["cluster"].as_str().unwrap_or("?"),
        d["path"].as_str().unwrap_or("?"),
        fmt(n(&b["targets"]), 0),
        fmt(n(&b["identity_bytes"]), 0),
        fmt(n(&b["gzip_bytes"]), 0),
        d["seconds_per_cell"],
        d["warmup_seconds"],
    ));
    o.push_str("| clients | response | herald req/s | static req/s | herald/static req/s | herald MB/s | static MB/s | herald/static bytes/s | herald p50 / p99 ms | static p50 / p99 ms | herald CPU µs/req | static CPU µs/req |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let rows = d["rows"].as_array().cloned().unwrap_or_default();
    for r in d["ratios_herald_over_static"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let pick = |server: &str| {
            rows.iter()
                .find(|x| {
                    x["server"] == server
                        && x["mode"] == r["mode"]
                        && x["concurrency"] == r["concurrency"]
                })
                .cloned()
                .unwrap_or_default()
        };
        let (h, s) = (pick("herald"), pick("static"));
        o.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r["concurrency"],
            r["mode"].as_str().unwrap_or("?").replace('_', " "),
            fmt(n(&h["req_per_s"]), 0),
            fmt(n(&s["req_per_s"]), 0),
            ratio(n(&r["req_per_s"])),
            fmt(n(&h["bytes_per_s"]).map(|x| x / 1e6), 1),
            fmt(n(&s["bytes_per_s"]).map(|x| x / 1e6), 1),
            ratio(n(&r["bytes_per_s"])),
            ms_pair(&h),
            ms_pair(&s),
            fmt(n(&h["server_cpu_us_per_request"]), 1),
            fmt(n(&s["server_cpu_us_per_request"]), 1),
        ));
    }
}

fn propagation(o: &mut String, d: &Value) {
    o.push_str(&format!(
        "kube-sim {}; herald with jobs `pod`, `endpointslice` and `bench` (pods labelled `app=bench`). The \
         writes are the churn: PUTs of {} bench pods round-robin, each carrying its send time; {} s per rate, \
         one run. Long-poll: `GET /sd/v1/bench?wait=30s` with If-None-Match, latency = wake − send time of \
         the write that woke it. Watch: `watch` of the bench pods through herald's Kubernetes API face, and \
         directly on kube-sim for reference; latency = event receipt − its send time.\n\n",
        d["cluster"].as_str().unwrap_or("?"),
        d["bench_pods"],
        d["seconds_per_rate"],
    ));
    o.push_str("| writes/s asked (done) | long-poll wake p50 / p99 ms (samples) | watch via herald p50 / p99 ms (events) | watch on kube-sim p50 / p99 ms (events) |\n|---:|---:|---:|---:|\n");
    for r in d["rows"].as_array().into_iter().flatten() {
        let l = |k: &str| format!("{} ({})", ms_pair(&r[k]), fmt(n(&r[k]["samples"]), 0));
        o.push_str(&format!(
            "| {} ({}) | {} | {} | {} |\n",
            fmt(n(&r["rate"]), 0),
            fmt(n(&r["writes_per_s"]), 0),
            l("long_poll_wake"),
            l("watch_via_herald"),
            l("watch_direct"),
        ));
    }
}

/// Replaces the suite section of `path` (between the markers) with `section`, appending it when the
/// file has none; creates the file when missing.
pub fn splice(path: &Path, section: &str) -> anyhow::Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(a), Some(b)) if b > a => {
            format!(
                "{}{}{}",
                &old[..a],
                section.trim_end(),
                &old[b + END.len()..]
            )
        }
        _ if old.is_empty() => format!("# Benchmark results\n\n{section}"),
        _ => format!("{}\n{section}", old.trim_end()),
    };
    std::fs::write(path, new)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_between_markers_and_keeps_the_rest() {
        let dir = std::env::temp_dir().join(format!("splice-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("R.md");
        std::fs::write(&p, "# R\n\nbefore\n").expect("write");
        splice(&p, &format!("{BEGIN}\none\n{END}\n")).expect("splice");
        std::fs::write(&p, std::fs::read_to_string(&p).expect("read") + "\nafter\n")
            .expect("write");
        splice(&p, &format!("{BEGIN}\ntwo\n{END}\n")).expect("splice");
        let s = std::fs::read_to_string(&p).expect("read");
        assert!(s.starts_with("# R\n\nbefore\n"), "{s}");
        assert!(s.contains("two") && !s.contains("one"), "{s}");
        assert!(s.trim_end().ends_with("after"), "{s}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
