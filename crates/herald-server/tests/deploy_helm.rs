//! The Helm chart `deploy/helm/herald`, rendered and linted by real helm (built from
//! `helm.sh/helm/v3` v3.22.0 by `peers/build`): every documented values combination passes
//! `helm lint --strict`, validates with `kubernetes-validate --strict`, holds a job file herald
//! accepts and meets the production rules deploy_manifests.rs checks on the kustomize tree; the
//! chart with each overlay's values file renders exactly the objects `kubectl kustomize` renders for
//! that overlay (the ConfigMap's hash suffix included); the PrometheusRule holds the groups of
//! `deploy/alerts/herald-rules.yaml` and the dashboard ConfigMap `deploy/dashboards/herald.json`.

#[path = "support/deploy.rs"]
mod deploy;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use deploy::{VALIDATE_INSTALL, check_rules, documents, one, render, root};
use kube_sim::peers as installed;
use serde_json::Value;

const CHART: &str = "deploy/helm/herald";

/// The values files the README documents, the kustomize overlay each renders, whether it serves the
/// kube-API face, and whether its ClusterRole grants exactly what its job file reads.
const EXAMPLES: &[(&str, &str, bool, bool)] = &[
    ("sd-only", "deploy/overlays/sd-only", false, false),
    ("sd-kube-api", "deploy/overlays/sd-kube-api", true, false),
    (
        "operator-istio",
        "deploy/overlays/operator-istio",
        false,
        true,
    ),
];

fn helm(helm: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(helm)
        .args(args)
        .current_dir(root())
        // NB: no user config or repository cache of the machine's: a chart without dependencies
        // needs none.
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("herald-helm-config"),
        )
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("herald-helm-cache"),
        )
        .output()
        .expect("helm runs");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("helm {}: {stdout}{stderr}", args.join(" ")))
    }
}

/// `helm lint --strict` and `helm template` of the chart as release `release` in `namespace`.
fn lint_and_render(bin: &Path, release: &str, namespace: &str, values: &[&str]) -> String {
    let mut lint = vec!["lint", "--strict", CHART, "--namespace", namespace];
    lint.extend_from_slice(values);
    let report = helm(bin, &lint).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report.contains("1 chart(s) linted, 0 chart(s) failed") && !report.contains("[WARNING]"),
        "helm lint {values:?}:\n{report}"
    );
    let mut template = vec!["template", release, CHART, "--namespace", namespace];
    template.extend_from_slice(values);
    helm(bin, &template).unwrap_or_else(|e| panic!("{e}"))
}

/// Objects by (kind, name).
fn by_name(docs: &[Value]) -> BTreeMap<(String, String), Value> {
    docs.iter()
        .map(|d| {
            let kind = d["kind"].as_str().expect("kind").to_string();
            let name = d["metadata"]["name"].as_str().expect("name").to_string();
            ((kind, name), d.clone())
        })
        .collect()
}

fn example(name: &str) -> String {
    format!("{CHART}/examples/{name}.yaml")
}

#[test]
fn each_overlays_values_file_renders_exactly_the_kustomize_overlays_objects() {
    let Some(bin) = installed::find("helm", installed::GO_PEERS_INSTALL) else {
        return;
    };
    let Some(kubectl) = installed::find("kubectl", installed::KUBECTL_INSTALL) else {
        return;
    };
    for (values, overlay, _, _) in EXAMPLES {
        let file = example(values);
        let chart = by_name(&documents(&lint_and_render(
            &bin,
            "herald",
            "herald",
            &["-f", &file, "--set", "namespace.create=true"],
        )));
        let kustomize = by_name(&documents(&render(&kubectl, overlay)));
        let only = |a: &BTreeMap<_, _>, b: &BTreeMap<_, _>| -> Vec<(String, String)> {
            a.keys().filter(|k| !b.contains_key(*k)).cloned().collect()
        };
        assert_eq!(
            (only(&kustomize, &chart), only(&chart, &kustomize)),
            (vec![], vec![]),
            "{values}: objects only kustomize renders, only helm renders"
        );
        for (key, k) in &kustomize {
            let h = &chart[key];
            assert!(
                h == k,
                "{values}: {key:?} differs between helm:\n{}\nand kustomize:\n{}",
                serde_yaml::to_string(h).expect("YAML"),
                serde_yaml::to_string(k).expect("YAML")
            );
        }
    }
}

#[test]
fn every_documented_values_combination_lints_validates_and_meets_the_production_rules() {
    let Some(bin) = installed::find("helm", installed::GO_PEERS_INSTALL) else {
        return;
    };
    let Some(validate) = installed::find("kubernetes-validate", VALIDATE_INSTALL) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let rules: Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("deploy/alerts/herald-rules.yaml")).expect("rules"),
    )
    .expect("rule file YAML");
    let dashboard =
        std::fs::read_to_string(root().join("deploy/dashboards/herald.json")).expect("dashboard");

    // The overlays' values files, and monitors without Istio (no overlay renders it).
    let documented = EXAMPLES
        .iter()
        .map(|(values, _, kube_api, exact)| (*values, *kube_api, *exact))
        .chain([("operator", false, true)]);
    for (values, kube_api, exact) in documented {
        let file = example(values);
        let yaml = lint_and_render(&bin, "herald", "herald", &["-f", &file]);
        let docs = documents(&yaml);
        check_rules(values, &docs, kube_api, exact);
        assert!(
            docs.iter().all(|d| d["kind"] != "Namespace"),
            "{values}: the release namespace is helm's unless namespace.create"
        );
        assert_eq!(one(&docs, "PrometheusRule")["spec"], rules, "{values}");
        deploy::validate(
            &validate,
            dir.path(),
            &format!("{values}.yaml"),
            &yaml,
            &docs,
        );
    }

    // Everything on, as another release in another namespace: names follow the release, the
    // dashboard ships for Grafana's sidecar, and the selectors' labels reach the monitors.
    let yaml = lint_and_render(
        &bin,
        "edge",
        "observability",
        &[
            "-f",
            &example("sd-kube-api"),
            "--set",
            "dashboard.enabled=true,serviceMonitor.labels.release=kps,prometheusRule.labels.release=kps",
            // NB: --set would make the label value a boolean, which the schema refuses.
            "--set-string",
            "networkPolicy.from[0].namespaceSelector.matchLabels.monitoring=true",
            "--set",
            "extraArgs[0]=--body-budget-bytes=268435456",
        ],
    );
    let docs = documents(&yaml);
    check_rules("everything on", &docs, true, false);
    deploy::validate(&validate, dir.path(), "everything-on.yaml", &yaml, &docs);
    let dash = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "edge-herald-dashboard")
        .expect("the dashboard ConfigMap");
    assert_eq!(dash["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(dash["data"]["herald.json"], dashboard.as_str());
    let sm = one(&docs, "ServiceMonitor");
    assert_eq!(sm["metadata"]["labels"]["release"], "kps");
    let endpoint = &sm["spec"]["endpoints"][0];
    assert_eq!(
        endpoint["tlsConfig"]["serverName"],
        "edge-herald.observability.svc"
    );
    assert_eq!(
        endpoint["authorization"]["credentials"]["name"],
        "edge-herald-tokens"
    );
    assert_eq!(
        one(&docs, "PrometheusRule")["metadata"]["labels"]["release"],
        "kps"
    );
    let d = one(&docs, "Deployment");
    let args = &d["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[3], "--body-budget-bytes=268435456");
    let volumes = &d["spec"]["template"]["spec"]["volumes"];
    assert_eq!(volumes[1]["secret"]["secretName"], "edge-herald-tls");
    let jobs = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"]["jobs.yaml"].is_string())
        .expect("the job ConfigMap");
    assert_eq!(volumes[0]["configMap"]["name"], jobs["metadata"]["name"]);
    assert_eq!(
        one(&docs, "NetworkPolicy")["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]
            ["monitoring"],
        "true"
    );
    assert_eq!(
        one(&docs, "ClusterRoleBinding")["subjects"][0]["namespace"],
        "observability"
    );

    // Without prometheus-operator's CRDs nor a NetworkPolicy: the rest as in the default install.
    let yaml = lint_and_render(
        &bin,
        "herald",
        "herald",
        &[
            "--set",
            "serviceMonitor.enabled=false,prometheusRule.enabled=false,networkPolicy.enabled=false",
        ],
    );
    let bare = by_name(&documents(&yaml));
    let full = by_name(&documents(&lint_and_render(&bin, "herald", "herald", &[])));
    let dropped: Vec<&str> = full
        .keys()
        .filter(|k| !bare.contains_key(*k))
        .map(|(kind, _)| kind.as_str())
        .collect();
    assert_eq!(
        dropped,
        ["NetworkPolicy", "PrometheusRule", "ServiceMonitor"]
    );
    for (key, obj) in &bare {
        assert_eq!(obj, &full[key], "{key:?}");
    }
    deploy::validate(&validate, dir.path(), "bare.yaml", &yaml, &documents(&yaml));
}

#[test]
fn the_chart_refuses_any_verb_but_list_and_watch() {
    let Some(bin) = installed::find("helm", installed::GO_PEERS_INSTALL) else {
        return;
    };
    for verb in ["get", "create", "*"] {
        let err = helm(
            &bin,
            &[
                "template",
                "herald",
                CHART,
                "--set",
                &format!("rbac.rules[0].verbs={{list,{verb}}}"),
            ],
        )
        .expect_err("a verb beyond list and watch is refused");
        assert!(
            err.contains(&format!(
                "herald only lists and watches; \"{verb}\" is not granted"
            )),
            "{err}"
        );
    }
}
