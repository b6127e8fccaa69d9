//! The audit against kube-sim: the `/sim/dump` document (audited `--from`) and the live cluster
//! (audited through kube-sim's kubeconfig) give the same findings, the generator's planted problems
//! are found, and every fix is accepted by real kubectl and, applied by its steps, makes its finding
//! disappear on the next live audit.

#[path = "support/plant.rs"]
mod plant;
#[path = "support/sim.rs"]
mod sim;

use std::collections::BTreeSet;
use std::path::Path;

use kube_sim::generate::ClusterSpec;
use kube_sim::{Kind, Sim, peers};
use serde_json::Value;
use sim::*;

/// Over 1000 nodes with few pods: node-exporter's Endpoints is truncated (1100 backends), while the
/// cluster still starts in about a second.
fn over_1000_nodes() -> ClusterSpec {
    ClusterSpec {
        nodes: 1100,
        namespaces: 1,
        services: 3,
        pods: 2216,
        ..ClusterSpec::small()
    }
}

/// Audits the dump and the live cluster and checks they agree; returns both reports.
async fn dump_and_live_agree(s: &Sim) -> (Value, Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = audit_dump(s, dir.path(), None).await;
    let live = audit_live(&kubeconfig(s, dir.path()), None).await;
    assert_eq!(summary(&dump), summary(&live));
    // Everything else too: titles, evidence, costs (the byte figures of HA002 and HA010 are the
    // objects' JSON sizes, and kube-sim serves the bytes it dumps) and fixes.
    assert_eq!(dump["findings"], live["findings"]);
    // The inventories differ only where the dump lacks a kind that live lists empty.
    let (d, l) = (&dump["inventory"]["objects"], &live["inventory"]["objects"]);
    for (kind, n) in l.as_object().expect("objects") {
        if d[kind].is_null() {
            assert_eq!(*n, 0, "{kind} has objects live but none in the dump");
        } else {
            assert_eq!(d[kind], *n, "{kind}");
        }
    }
    // Deployments (apps/v1) and PrometheusAgents (v1alpha1) are not served by kube-sim: live, the
    // 404 leaves them unchecked; the dump holds none either.
    for report in [&dump, &live] {
        let missing = report["inventory"]["missingKinds"]
            .as_array()
            .expect("missingKinds");
        for kind in ["Deployment", "PrometheusAgent"] {
            assert!(missing.contains(&Value::from(kind)), "{kind}: {missing:?}");
        }
    }
    (dump, live)
}

fn codes(report: &Value) -> BTreeSet<String> {
    findings(report)
        .iter()
        .map(|f| f["code"].as_str().expect("code").to_string())
        .collect()
}

fn the<'r>(report: &'r Value, code: &str, first: &str) -> &'r Value {
    with_code(report, code)
        .into_iter()
        .find(|(o, _)| o == first)
        .unwrap_or_else(|| panic!("no {code} on {first}: {:#?}", summary(report)))
        .1
}

#[tokio::test]
async fn the_small_preset_gives_the_same_findings_from_its_dump_and_live() {
    let s = start(ClusterSpec::small()).await;
    let (dump, live) = dump_and_live_agree(&s).await;

    // The one deliberate difference: kube-sim holds no PeerAuthentication. A dump cannot say "none"
    // (the kind is simply absent), so HA009 is not checked; live, the empty list is an answer.
    assert_eq!(
        dump["notChecked"],
        serde_json::json!([{"code": "HA009", "rule": "strict-mtls-blocks-scrape",
            "missingKinds": ["PeerAuthentication"]}])
    );
    assert_eq!(live["notChecked"], serde_json::json!([]));
    assert_eq!(live["inventory"]["objects"]["PeerAuthentication"], 0);

    // Planted by the generator: a Prometheus on the Endpoints role (nothing truncated at 10 nodes).
    let ha002 = the(&live, "HA002", "Prometheus monitoring/k8s");
    assert_eq!(ha002["severity"], "warning");
    assert_eq!(
        ha002["fix"]["manifests"][2]["spec"]["serviceDiscoveryRole"],
        "EndpointSlice"
    );
    // node-exporter is headless and metrics-only, but exported to the whole mesh (Istio 1.22: `~`).
    let ha006 = the(&live, "HA006", "Service monitoring/node-exporter");
    assert_eq!(
        ha006["fix"]["manifests"][0]["metadata"]["annotations"]["networking.istio.io/exportTo"],
        "~"
    );
    // istiod's Service carries xDS traffic and is scraped on http-monitoring.
    the(&live, "HA005", "Service istio-system/istiod");
    // The generator's web apps serve /metrics on their only, unnamed traffic port, and their
    // ServiceMonitor scrapes it by targetPort: they carry traffic (HA005), never "metrics-only"
    // (HA004 would recreate them headless and break their clients).
    let mut web_apps = 0;
    for sm in s.handle().objects_json(Kind::ServiceMonitor) {
        let by_target = sm["spec"]["endpoints"][0]["targetPort"].is_number();
        if by_target {
            let svc = format!(
                "Service {}/{}",
                sm["metadata"]["namespace"].as_str().expect("ns"),
                sm["metadata"]["name"].as_str().expect("name")
            );
            the(&live, "HA005", &svc);
            assert!(with_code(&live, "HA004").iter().all(|(o, _)| *o != svc));
            web_apps += 1;
        }
    }
    assert!(
        web_apps > 0,
        "the small preset has web apps scraped by targetPort"
    );
    // 24 Services: kube-proxy's iptables mode is fine; 10 nodes: nothing truncated.
    let found = codes(&live);
    for absent in ["HA001", "HA003", "HA007"] {
        assert!(!found.contains(absent), "{absent} in {found:?}");
    }
    assert!(found.contains("HA010"));
}

#[tokio::test]
async fn over_1000_nodes_the_truncated_endpoints_are_found_in_the_dump_and_live() {
    let s = start(over_1000_nodes()).await;
    plant::operator_kubelet_endpoints(&s);
    let (_, live) = dump_and_live_agree(&s).await;

    // kube-sim's Endpoints controller cuts node-exporter's 1100 addresses at 1000 and annotates it.
    let ha001 = the(&live, "HA001", "Endpoints monitoring/node-exporter");
    assert_eq!(ha001["severity"], "critical");
    assert_eq!(ha001["cost"]["figures"]["listed_addresses"], 1000.0);
    assert_eq!(ha001["cost"]["figures"]["missing_addresses"], 100.0);
    assert_eq!(obj(&ha001["objects"][1]), "Prometheus monitoring/k8s");
    // So the Prometheus on the Endpoints role is critical now, missing those 100 targets.
    let ha002 = the(&live, "HA002", "Prometheus monitoring/k8s");
    assert_eq!(ha002["severity"], "critical");
    assert_eq!(ha002["cost"]["figures"]["missing_targets"], 100.0);
    // The operator's kubelet Endpoints on 1100 nodes, no operator-managed slices yet.
    let ha003 = the(&live, "HA003", "Endpoints kube-system/kubelet");
    assert_eq!(ha003["severity"], "critical");
    assert_eq!(
        ha003["cost"]["figures"]["kubelets_missing_from_mirrored_slices"],
        100.0
    );
    // Not HA001 too: the operator writes that object itself, uncapped.
    assert!(
        with_code(&live, "HA001")
            .iter()
            .all(|(o, _)| o != "Endpoints kube-system/kubelet")
    );
    // Seven Services: far below the iptables cliff.
    assert!(!codes(&live).contains("HA007"));
}

/// The small preset with every fixable problem planted at least once.
async fn start_with_every_fixable_problem() -> Sim {
    let s = start(ClusterSpec::small()).await;
    plant::strict_mtls(&s, "payments");
    plant::multi_port_pods(&s);
    plant::metrics_only_service(&s, "checkout");
    plant::bulk_services(&s, 1000);
    s
}

/// The codes whose fixes come with manifests, each of which the planted cluster must show.
const FIXABLE: [&str; 7] = [
    "HA002", "HA004", "HA005", "HA006", "HA007", "HA008", "HA009",
];

/// Audits live with `--fix DIR`; returns the report.
async fn audit_with_fixes(s: &Sim, dir: &Path) -> Value {
    audit_live(&kubeconfig(s, dir), Some(&dir.join("fix"))).await
}

/// `(finding, its fix file)` of every finding with a fix file.
fn fix_files(report: &Value) -> Vec<(String, String)> {
    findings(report)
        .iter()
        .filter_map(|f| {
            let file = f["fix"]["file"].as_str()?;
            let first = f["objects"].get(0).map_or_else(|| "cluster".into(), obj);
            Some((format!("{} {first}", f["code"].as_str()?), file.to_string()))
        })
        .collect()
}

/// Whether a manifest of a built-in kind survives a round trip through its k8s-openapi type
/// unchanged: a field the type does not know (a typo, a wrong level) would be dropped.
fn round_trips(m: &Value) -> Result<(), String> {
    fn check<T: serde::de::DeserializeOwned + serde::Serialize>(m: &Value) -> Result<(), String> {
        let typed: T = serde_json::from_value(m.clone()).map_err(|e| e.to_string())?;
        let mut back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
        for k in ["apiVersion", "kind"] {
            back[k] = m[k].clone();
        }
        if back == *m {
            Ok(())
        } else {
            Err(format!("changed by a round trip:\n{m:#}\n{back:#}"))
        }
    }
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    match m["kind"].as_str() {
        Some("Service") => check::<Service>(m),
        Some("ConfigMap") => check::<ConfigMap>(m),
        Some("ClusterRole") => check::<ClusterRole>(m),
        Some("ClusterRoleBinding") => check::<ClusterRoleBinding>(m),
        // Custom resources have no typed schema here; kube-sim stores them as JSON.
        _ => Ok(()),
    }
}

#[tokio::test]
async fn every_fix_manifest_is_accepted_by_kubectl_create_dry_run() {
    let Some(bin) = peers::find("kubectl", peers::KUBECTL_INSTALL) else {
        return;
    };
    let s = start_with_every_fixable_problem().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let report = audit_with_fixes(&s, dir.path()).await;
    let files = fix_files(&report);
    let with_files: BTreeSet<&str> = files.iter().map(|(f, _)| &f[..5]).collect();
    for code in FIXABLE {
        assert!(with_files.contains(code), "no {code} fix file: {files:?}");
    }
    let k = Kubectl {
        bin,
        kubeconfig: kubeconfig(&s, dir.path()),
    };
    for (finding, file) in &files {
        let path = dir.path().join("fix").join(file);
        let path_str = path.to_str().expect("a UTF-8 temp path");
        // Validation stays on (kubectl's default, strict). NB: kube-sim's /openapi/v3 tells
        // kubectl that the server validates fields, so with --dry-run=client kubectl checks that
        // every document decodes and maps to a served kind, and leaves schema checks to the server
        // (k8s.io/cli-runtime pkg/resource/query_param_verifier_v3.go): hence the server dry run
        // and the typed round trip below.
        let (ok, out, err) = k
            .run(&["create", "--dry-run=client", "-o", "name", "-f", path_str])
            .await;
        assert!(ok, "{finding}: kubectl refused {file}:\n{out}\n{err}");
        let (header, manifests) = read_fix(&path);
        assert_eq!(
            out.lines().count(),
            manifests.len(),
            "{finding}: one object per manifest:\n{out}"
        );
        assert_eq!(header["code"], finding[..5]);
        // Each manifest on its own with --dry-run=server, as its action will apply it: kube-sim
        // decodes built-in kinds into their types. A create that follows the delete of the same
        // object (HA004) cannot be dry-run before that delete.
        let actions = header["actions"].as_array().expect("actions");
        let deleted: Vec<&Value> = actions
            .iter()
            .filter(|a| a["verb"] == "delete")
            .map(|a| &a["object"])
            .collect();
        let applied = actions.iter().filter(|a| a["verb"] != "delete");
        for (i, (action, m)) in applied.zip(&manifests).enumerate() {
            round_trips(m).unwrap_or_else(|e| panic!("{finding}: {e}"));
            if deleted.contains(&&action["object"]) {
                continue;
            }
            let step = dir.path().join(format!("dry-{i}.yaml"));
            std::fs::write(&step, serde_yaml::to_string(m).expect("YAML")).expect("write");
            let verb = action["verb"].as_str().expect("verb");
            let (ok, out, err) = k
                .run(&[
                    verb,
                    "--dry-run=server",
                    "-f",
                    step.to_str().expect("UTF-8"),
                ])
                .await;
            assert!(
                ok,
                "{finding}: kubectl {verb} --dry-run=server refused {m:#}:\n{out}\n{err}"
            );
        }
    }
}

/// Applies a fix file by its actions with kubectl: delete the object, or create / replace the
/// next manifest (each written to its own file).
async fn apply(k: &Kubectl, fix: &Path, work: &Path) {
    let (header, manifests) = read_fix(fix);
    let mut next = manifests.into_iter();
    for (i, action) in header["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .enumerate()
    {
        let o = &action["object"];
        let (kind, name) = (
            o["kind"].as_str().expect("kind"),
            o["name"].as_str().expect("name"),
        );
        let mut ns = Vec::new();
        if let Some(n) = o["namespace"].as_str() {
            ns = vec!["-n", n];
        }
        match action["verb"].as_str().expect("verb") {
            "delete" => {
                let mut args = vec!["delete", resource(kind), name];
                args.extend(&ns);
                let out = k.ok(&args).await;
                assert!(out.contains("deleted"), "{out}");
            }
            verb => {
                let m = next
                    .next()
                    .unwrap_or_else(|| panic!("{}: no manifest for {o}", fix.display()));
                assert_eq!(m["kind"], o["kind"], "manifests follow the actions");
                assert_eq!(m["metadata"]["name"], o["name"]);
                let step = work.join(format!("step-{i}.yaml"));
                std::fs::write(&step, serde_yaml::to_string(&m).expect("YAML")).expect("write");
                let out = k
                    .ok(&[verb, "-f", step.to_str().expect("a UTF-8 temp path")])
                    .await;
                let done = if verb == "create" {
                    "created"
                } else {
                    "replaced"
                };
                assert!(out.contains(done), "kubectl {verb}: {out}");
            }
        }
    }
    assert!(next.next().is_none(), "a manifest without action");
}

/// `code first-object` of every finding.
fn keys(report: &Value) -> BTreeSet<String> {
    findings(report)
        .iter()
        .map(|f| {
            let first = f["objects"].get(0).map_or_else(|| "cluster".into(), obj);
            format!("{} {first}", f["code"].as_str().expect("code"))
        })
        .collect()
}

#[tokio::test]
async fn each_fix_applied_by_its_steps_with_kubectl_makes_its_finding_disappear() {
    let Some(bin) = peers::find("kubectl", peers::KUBECTL_INSTALL) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let before = {
        let s = start_with_every_fixable_problem().await;
        audit_with_fixes(&s, dir.path()).await
    };
    let files = fix_files(&before);
    assert!(files.len() >= FIXABLE.len(), "{files:?}");
    // HA007 appears only past the threshold: the planted Services make 1,024.
    assert_eq!(
        the(&before, "HA007", "ConfigMap kube-system/kube-proxy")["severity"],
        "info"
    );
    let before_keys = keys(&before);
    // Each fix on a fresh copy of the cluster (same seed, same plants): fixes of one object by two
    // findings (HA005 and HA009 both edit payments/api's ServiceMonitor) are alternatives, not steps
    // of one plan. Three copies at a time: most of the wait is on kubectl processes. (Local tasks:
    // `herald_audit::run` writes to a `&mut dyn Write`, so its future is not `Send`.)
    let before_keys = std::sync::Arc::new(before_keys);
    let mut pending = files.into_iter();
    let mut running = tokio::task::JoinSet::new();
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async move {
            loop {
                while running.len() < 3 {
                    let Some((finding, file)) = pending.next() else {
                        break;
                    };
                    let (bin, before_keys) = (bin.clone(), before_keys.clone());
                    let fix = dir.path().join("fix").join(&file);
                    running.spawn_local(async move {
                        let s = start_with_every_fixable_problem().await;
                        let work = tempfile::tempdir().expect("tempdir");
                        let k = Kubectl {
                            bin,
                            kubeconfig: kubeconfig(&s, work.path()),
                        };
                        apply(&k, &fix, work.path()).await;
                        let after_keys = keys(&audit_live(&k.kubeconfig, None).await);
                        assert!(
                            !after_keys.contains(&finding),
                            "{finding} is still found after applying {file}"
                        );
                        let new: Vec<_> = after_keys.difference(&before_keys).collect();
                        assert!(new.is_empty(), "applying {file} made new findings: {new:?}");
                    });
                }
                match running.join_next().await {
                    Some(done) => done.expect("a fix check panicked"),
                    None => break,
                }
            }
        })
        .await;
}

#[tokio::test]
async fn applying_the_fix_directory_round_by_round_leaves_nothing_to_fix() {
    let Some(bin) = peers::find("kubectl", peers::KUBECTL_INSTALL) else {
        return;
    };
    let s = start_with_every_fixable_problem().await;
    let work = tempfile::tempdir().expect("tempdir");
    let k = Kubectl {
        bin,
        kubeconfig: kubeconfig(&s, work.path()),
    };
    let mut applied = Vec::new();
    for round in 0..3 {
        let dir = tempfile::tempdir().expect("tempdir");
        let report = audit_with_fixes(&s, dir.path()).await;
        let files = fix_files(&report);
        if files.is_empty() {
            // What is left has no manifest to apply: the watch fan-out estimate.
            assert_eq!(keys(&report), BTreeSet::from(["HA010 cluster".to_string()]));
            assert!(round > 0 && applied.len() >= FIXABLE.len(), "{applied:?}");
            return;
        }
        // Fix files are cut from one snapshot: a file acting on an object an earlier file of the
        // same round already changed waits for the next audit (the README's advice).
        let mut touched = BTreeSet::new();
        for (finding, file) in files {
            let path = dir.path().join("fix").join(&file);
            let (header, _) = read_fix(&path);
            let objects: Vec<String> = header["actions"]
                .as_array()
                .expect("actions")
                .iter()
                .map(|a| obj(&a["object"]))
                .collect();
            if objects.iter().any(|o| touched.contains(o)) {
                continue;
            }
            apply(&k, &path, work.path()).await;
            touched.extend(objects);
            applied.push(finding);
        }
    }
    panic!("fixes still pending after 3 rounds; applied {applied:?}");
}
