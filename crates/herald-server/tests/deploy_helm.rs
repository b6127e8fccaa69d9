//! The Helm chart `deploy/helm/herald`, rendered and linted by real helm (built from
//! `helm.sh/helm/v3` v3.22.0 by `peers/build`): every documented values combination passes
//! `helm lint --strict`, validates with `kubernetes-validate --strict`, holds a job file herald
//! accepts and meets the production rules deploy_manifests.rs checks on the kustomize tree; the
//! chart with each overlay's values file renders exactly the objects `kubectl kustomize` renders for
//! that overlay (the ConfigMap's hash suffix included); the PrometheusRule holds the groups of
//! `deploy/alerts/herald-rules.yaml` and the dashboard ConfigMap `deploy/dashboards/herald.json`.
//! The defaults work where herald's do: `kubeApi.enabled` serves and grants herald's own default
//! kinds (servicecidrs included); the ServiceMonitor and PrometheusRule are rendered only for a
//! cluster serving prometheus-operator's CRDs; values.schema.json refuses a misspelled value.

#[path = "support/deploy.rs"]
mod deploy;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use deploy::{VALIDATE_INSTALL, check_rules, documents, one, render, root};
use kube_sim::peers as installed;
use serde_json::Value;

const CHART: &str = "deploy/helm/herald";

/// The values files docs/install.md documents, the kustomize overlay each renders, whether it serves
/// the kube-API face, whether its ClusterRole grants exactly what its job file reads, and whether
/// the overlay holds herald's own monitoring (a cluster with prometheus-operator's CRDs).
const EXAMPLES: &[(&str, &str, bool, bool, bool)] = &[
    ("sd-only", "deploy/overlays/sd-only", false, false, false),
    (
        "sd-kube-api",
        "deploy/overlays/sd-kube-api",
        true,
        false,
        false,
    ),
    (
        "operator-istio",
        "deploy/overlays/operator-istio",
        false,
        true,
        true,
    ),
];

/// What `helm template` is told the cluster serves for the ServiceMonitor and PrometheusRule to
/// render (`helm install` reads it from the cluster).
const WITH_OPERATOR: [&str; 2] = ["--api-versions", "monitoring.coreos.com/v1"];

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
/// `--api-versions` goes to the template alone (helm lint takes none: it lints without the
/// objects gated on them).
fn lint_and_render(bin: &Path, release: &str, namespace: &str, values: &[&str]) -> String {
    let mut lint = vec!["lint", "--strict", CHART, "--namespace", namespace];
    let mut skip = false;
    for v in values {
        if std::mem::take(&mut skip) {
            continue;
        }
        if *v == "--api-versions" {
            skip = true;
            continue;
        }
        lint.push(v);
    }
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
    for (values, overlay, _, _, monitoring) in EXAMPLES {
        let file = example(values);
        let mut args = vec!["-f", &file, "--set", "namespace.create=true"];
        if *monitoring {
            args.extend(WITH_OPERATOR);
        }
        let chart = by_name(&documents(&lint_and_render(
            &bin, "herald", "herald", &args,
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
        .map(|(values, _, kube_api, exact, _)| (*values, *kube_api, *exact))
        .chain([("operator", false, true)]);
    for (values, kube_api, exact) in documented {
        let file = example(values);
        let mut args = vec!["-f", file.as_str()];
        args.extend(WITH_OPERATOR);
        let yaml = lint_and_render(&bin, "herald", "herald", &args);
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
            "--set",
            "logLevel=debug",
            WITH_OPERATOR[0],
            WITH_OPERATOR[1],
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
    assert_eq!(args[3], "--log-level=debug");
    assert_eq!(args[4], "--body-budget-bytes=268435456");
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
            WITH_OPERATOR[0],
            WITH_OPERATOR[1],
        ],
    );
    let bare = by_name(&documents(&yaml));
    let full = by_name(&documents(&lint_and_render(
        &bin,
        "herald",
        "herald",
        &WITH_OPERATOR,
    )));
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

/// The (API group, plural) pairs of a job file's `kube_api.kinds`, as herald resolves them.
fn served_kinds(jobs: &str) -> std::collections::BTreeSet<(String, String)> {
    let cfg = herald_core::parse_config(jobs).expect("herald accepts the job file");
    let (builtin, custom) = herald_server::kube_kinds(&cfg.kube_api.kinds).expect("kinds resolve");
    builtin
        .into_iter()
        .map(|r| (r.group, r.plural))
        .chain(custom.into_iter().map(|(g, _, p)| (g, p)))
        .collect()
}

#[test]
fn kube_api_enabled_serves_and_grants_heralds_own_default_kinds() {
    let Some(bin) = installed::find("helm", installed::GO_PEERS_INSTALL) else {
        return;
    };
    let docs = documents(&lint_and_render(
        &bin,
        "herald",
        "herald",
        &["--set", "kubeApi.enabled=true"],
    ));
    let jobs = docs
        .iter()
        .find_map(|d| d["data"]["jobs.yaml"].as_str())
        .expect("the job file");
    let served = served_kinds(jobs);
    // herald's default when kube_api.kinds names none (herald_server::DEFAULT_KUBE_KINDS).
    let (defaults, _) = herald_server::kube_kinds(&[]).expect("herald's defaults resolve");
    let defaults: std::collections::BTreeSet<_> =
        defaults.into_iter().map(|r| (r.group, r.plural)).collect();
    assert_eq!(
        served, defaults,
        "the chart's kubeApi.kinds are herald's defaults"
    );
    assert!(served.contains(&("networking.k8s.io".into(), "servicecidrs".into())));
    // check_rules: every served kind granted, list and watch only.
    check_rules("kubeApi.enabled", &docs, true, false);
    let role = one(&docs, "ClusterRole");
    let grants_cidrs = role["rules"].as_array().expect("rules").iter().any(|r| {
        r["apiGroups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g == "networking.k8s.io"))
            && r["resources"]
                .as_array()
                .is_some_and(|x| x.iter().any(|x| x == "servicecidrs"))
    });
    assert!(grants_cidrs, "servicecidrs granted: {role}");
}

#[test]
fn monitoring_objects_render_only_where_the_cluster_serves_their_crds() {
    let Some(bin) = installed::find("helm", installed::GO_PEERS_INSTALL) else {
        return;
    };
    let kinds = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["--set", "dashboard.enabled=true"];
        args.extend_from_slice(extra);
        let docs = documents(&lint_and_render(&bin, "herald", "herald", &args));
        let mut k: Vec<String> = docs
            .iter()
            .filter_map(|d| d["kind"].as_str())
            .filter(|k| deploy::MONITORING.contains(k))
            .map(String::from)
            .collect();
        k.sort();
        k
    };
    assert_eq!(
        kinds(&[]),
        Vec::<String>::new(),
        "no CRDs, no monitoring objects"
    );
    assert_eq!(kinds(&WITH_OPERATOR), ["PrometheusRule", "ServiceMonitor"]);
    assert_eq!(
        kinds(&[
            WITH_OPERATOR[0],
            WITH_OPERATOR[1],
            "--set",
            "serviceMonitor.enabled=false"
        ]),
        ["PrometheusRule"]
    );
}

#[test]
fn a_misspelled_value_is_refused_by_the_schema() {
    let Some(bin) = installed::find("helm", installed::GO_PEERS_INSTALL) else {
        return;
    };
    for (set, needle) in [
        ("kubeApi.enable=true", "enable"),
        ("imag.tag=0.1.0", "imag"),
        ("serviceMonitor.intervall=1m", "intervall"),
        ("logLevel=loud", "logLevel"),
        ("replicas=two", "replicas"),
    ] {
        for cmd in ["template", "lint"] {
            let mut args = vec![cmd];
            if cmd == "template" {
                args.push("herald");
            }
            args.extend([CHART, "--set", set]);
            let err = helm(&bin, &args).expect_err(set);
            assert!(
                err.contains("values don't meet the specifications of the schema")
                    || err.contains("schema"),
                "{cmd} --set {set}: {err}"
            );
            assert!(
                err.contains(needle),
                "{cmd} --set {set} names {needle}: {err}"
            );
        }
    }
}
