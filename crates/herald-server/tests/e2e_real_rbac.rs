//! Least privilege, for real: the manifests herald ships, installed on the real kube-apiserver
//! v1.37.2 (`peers/build`; etcd and the EndpointSlice controller with it, kube-sim's `small` cluster
//! loaded through the API), and herald run under their RBAC.
//!
//! - Every kustomize tree (`deploy/base`, `deploy/`, each overlay) and the Helm chart (default
//!   values, and `kubeApi.enabled=true`) is rendered (real kubectl, real helm) and applied to the
//!   apiserver by server-side apply, one install after the other, each a fresh install (the previous
//!   one's objects deleted, the namespace and the Secrets the docs ask for kept): every object is
//!   created (201). prometheus-operator's and Istio's CRDs (minimal, schemaless: the repository
//!   carries none) are installed first, and the Prometheus object `monitoring/k8s` the operator
//!   overlay selects by.
//! - herald, in process, runs with the job file of the install's ConfigMap (the one its Deployment
//!   mounts, with the arguments it passes) as the install's ServiceAccount, with a token from
//!   TokenRequest, under the install's ClusterRole: it syncs every kind with no upstream error, its
//!   jobs find targets, and the Kubernetes API face (where the install turns it on) serves what the
//!   apiserver holds.
//! - With list and watch of EndpointSlices taken out of the ClusterRole, a fresh herald (streaming
//!   lists, and list+watch) is not ready, and its log, its status page (the kind's row, and the
//!   recent warnings) and `/status.json` name the verb refused and the resource, with the
//!   apiserver's own words; `herald_upstream_errors_total` counts the failures. With only `list`
//!   taken out, a list+watch herald is refused `list`, while a streaming list (which kube-apiserver
//!   1.37 authorizes as a watch) syncs: `list` is there for the list+watch fallback.

#[path = "support/deploy.rs"]
mod deploy;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use herald_server::{
    Herald, InitialList, KubeApiOptions, KubeServeOptions, ServeOptions, job_specs, kube_kinds,
};
use http::{Method, StatusCode};
use kube_sim::generate::{ClusterSpec, generate};
use kube_sim::peers::controlplane::{ControlPlane, Options};
use kube_sim::peers::{self as installed};
use serde_json::{Value, json};

/// The namespace and ServiceAccount every install uses (release `herald` in namespace `herald`).
const NAMESPACE: &str = "herald";
/// The field manager of the server-side applies.
const MANAGER: &str = "herald-e2e";
const CHART: &str = "deploy/helm/herald";
/// How long herald gets to sync under an install's RBAC.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a refused herald gets to report the refusal.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(20);

/// The kustomize trees: `deploy/` renders `overlays/sd-only`, which renders the base.
const KUSTOMIZE: &[&str] = &[
    "deploy/base",
    "deploy",
    "deploy/overlays/sd-only",
    "deploy/overlays/sd-kube-api",
    "deploy/overlays/operator-istio",
];

/// Minimal CRDs: what the manifests and herald need of prometheus-operator and Istio, schemaless.
fn crds() -> Vec<Value> {
    let crd = |group: &str, kind: &str, plural: &str, versions: &[&str]| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {
                    "plural": plural,
                    "singular": kind.to_lowercase(),
                    "kind": kind,
                    "listKind": format!("{kind}List"),
                },
                "versions": versions.iter().enumerate().map(|(i, v)| json!({
                    "name": v,
                    "served": true,
                    "storage": i == 0,
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                    }},
                })).collect::<Vec<_>>(),
            },
        })
    };
    let monitoring = "monitoring.coreos.com";
    vec![
        crd(monitoring, "ServiceMonitor", "servicemonitors", &["v1"]),
        crd(monitoring, "PodMonitor", "podmonitors", &["v1"]),
        crd(monitoring, "PrometheusRule", "prometheusrules", &["v1"]),
        crd(monitoring, "Prometheus", "prometheuses", &["v1"]),
        crd(
            "security.istio.io",
            "PeerAuthentication",
            "peerauthentications",
            &["v1", "v1beta1"],
        ),
    ]
}

/// What the installs need before them: namespaces (herald's; the Prometheus object's; Istio's root),
/// the Secrets docs/install.md asks for, and the Prometheus object `monitoring/k8s` selecting every
/// monitor (the operator overlay's `monitors.prometheus`).
fn prerequisites() -> Vec<Value> {
    let ns =
        |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    let cert = rcgen::generate_simple_self_signed(vec![format!("herald.{NAMESPACE}.svc")])
        .expect("a certificate");
    let crt = cert.cert.pem();
    vec![
        ns(NAMESPACE),
        ns("monitoring"),
        ns("istio-system"),
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "herald-tls", "namespace": NAMESPACE},
            "stringData": {"tls.crt": crt, "tls.key": cert.signing_key.serialize_pem(), "ca.crt": crt},
        }),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "herald-tokens", "namespace": NAMESPACE},
            "stringData": {"tokens": "scraper-token\nconsumer-token\n", "prometheus": "scraper-token"},
        }),
        json!({
            "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
            "metadata": {"name": "k8s", "namespace": "monitoring"},
            "spec": {
                "serviceMonitorSelector": {}, "serviceMonitorNamespaceSelector": {},
                "podMonitorSelector": {}, "podMonitorNamespaceSelector": {},
            },
        }),
    ]
}

fn helm_template(bin: &Path, values: &[&str]) -> String {
    let mut args = vec!["template", "herald", CHART, "--namespace", NAMESPACE];
    args.extend_from_slice(values);
    let out = Command::new(bin)
        .args(&args)
        .current_dir(deploy::root())
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
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Resolves kinds to their collection paths through the apiserver's discovery.
#[derive(Default)]
struct Paths {
    known: BTreeMap<(String, String), (String, bool)>,
}

impl Paths {
    /// `(collection prefix up to the plural, namespaced)` of `apiVersion`/`kind`; waits for
    /// discovery to serve it (a CRD just established).
    async fn of(&mut self, cp: &ControlPlane, api_version: &str, kind: &str) -> (String, bool) {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(p) = self.known.get(&key) {
            return p.clone();
        }
        let base = if api_version.contains('/') {
            format!("/apis/{api_version}")
        } else {
            format!("/api/{api_version}")
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(list) = cp.get_json(&base).await
                && let Some(r) = list["resources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|r| r["kind"] == kind && !r["name"].as_str().unwrap_or("/").contains('/'))
            {
                let found = (
                    format!("{base}/{}", r["name"].as_str().expect("a name")),
                    r["namespaced"] == true,
                );
                self.known.insert(key, found.clone());
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "the apiserver's discovery does not serve {api_version} {kind}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The path of object `o`.
    async fn object(&mut self, cp: &ControlPlane, o: &Value) -> String {
        let (collection, namespaced) = self
            .of(
                cp,
                o["apiVersion"].as_str().expect("apiVersion"),
                o["kind"].as_str().expect("kind"),
            )
            .await;
        let name = o["metadata"]["name"].as_str().expect("a name");
        if namespaced {
            let ns = o["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE);
            let (prefix, plural) = collection.rsplit_once('/').expect("a plural");
            format!("{prefix}/namespaces/{ns}/{plural}/{name}")
        } else {
            format!("{collection}/{name}")
        }
    }
}

/// Server-side applies `o` (forced, as `kubectl apply --server-side --force-conflicts`); returns
/// the status, panicking on anything but 2xx.
async fn apply(cp: &ControlPlane, paths: &mut Paths, what: &str, o: &Value) -> StatusCode {
    let path = paths.object(cp, o).await;
    let (code, body) = cp
        .request(
            Method::PATCH,
            &format!("{path}?fieldManager={MANAGER}&force=true"),
            Some((
                "application/apply-patch+yaml",
                serde_json::to_vec(o).expect("JSON"),
            )),
        )
        .await
        .expect("the apply is answered");
    assert!(
        code.is_success(),
        "{what}: the apiserver refused {} {}: {code}: {}",
        o["kind"],
        o["metadata"]["name"],
        String::from_utf8_lossy(&body)
    );
    code
}

async fn delete(cp: &ControlPlane, paths: &mut Paths, o: &Value) {
    let path = paths.object(cp, o).await;
    let (code, body) = cp
        .request(Method::DELETE, &path, None)
        .await
        .expect("the delete is answered");
    assert!(
        code.is_success() || code == StatusCode::NOT_FOUND,
        "DELETE {path}: {code}: {}",
        String::from_utf8_lossy(&body)
    );
}

/// Waits until every CRD is Established and its resource served by a streaming list.
async fn wait_established(cp: &ControlPlane, crds: &[Value]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for c in crds {
        let name = c["metadata"]["name"].as_str().expect("name");
        loop {
            let got = cp
                .get_json(&format!(
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                ))
                .await
                .expect("the CRD");
            let established = got["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Established" && c["status"] == "True");
            if established {
                break;
            }
            assert!(Instant::now() < deadline, "CRD {name} not established");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // NB: Established is not yet served from the watch cache: until the new resource's cacher
        // has initialized, a streaming list of it is refused with 429 `storage is (re)initializing`
        // (herald retries, but counts the error the checks below must not see).
        let group = c["spec"]["group"].as_str().expect("group");
        let version = c["spec"]["versions"][0]["name"].as_str().expect("version");
        let plural = c["spec"]["names"]["plural"].as_str().expect("plural");
        let watch = format!(
            "/apis/{group}/{version}/{plural}?watch=true&sendInitialEvents=true\
             &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
        );
        loop {
            let (code, body) = cp
                .request(Method::GET, &watch, None)
                .await
                .expect("the watch");
            if code == StatusCode::OK {
                break;
            }
            assert!(
                Instant::now() < deadline && code == StatusCode::TOO_MANY_REQUESTS,
                "a streaming list of {plural}: {code}: {}",
                String::from_utf8_lossy(&body)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What one install runs herald as and with.
struct Install {
    service_account: String,
    /// The job file of the ConfigMap the Deployment mounts.
    jobs: String,
    /// The ClusterRole's rules.
    rules: Value,
}

/// Reads the install's identity and job file from its objects, checking that they fit together: the
/// Deployment runs as the ServiceAccount the ClusterRoleBinding binds to the ClusterRole, mounts the
/// job ConfigMap and passes no argument herald's in-process start would miss.
fn install_of(what: &str, docs: &[Value]) -> Install {
    let d = deploy::one(docs, "Deployment");
    let pod = &d["spec"]["template"]["spec"];
    let sa = pod["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");
    assert_eq!(deploy::one(docs, "ServiceAccount")["metadata"]["name"], sa);
    let binding = deploy::one(docs, "ClusterRoleBinding");
    let role = deploy::one(docs, "ClusterRole");
    assert_eq!(
        binding["roleRef"]["name"], role["metadata"]["name"],
        "{what}"
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]),
        "{what}"
    );
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string"))
        .collect();
    assert_eq!(
        args,
        [
            "serve",
            "--config=/etc/herald/jobs/jobs.yaml",
            "--log-format=json"
        ],
        "{what}: arguments herald in process is started with"
    );
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "jobs")
        .expect("the jobs volume");
    let cm = &volume["configMap"]["name"];
    let jobs = docs
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == *cm)
        .and_then(|o| o["data"]["jobs.yaml"].as_str())
        .unwrap_or_else(|| panic!("{what}: the mounted ConfigMap {cm} holds jobs.yaml"));
    Install {
        service_account: sa.to_string(),
        jobs: jobs.to_string(),
        rules: role["rules"].clone(),
    }
}

/// A token for the ServiceAccount from TokenRequest.
async fn token(cp: &ControlPlane, sa: &str) -> String {
    let path = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{sa}/token");
    let body = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    });
    let (code, out) = cp
        .request(
            Method::POST,
            &path,
            Some(("application/json", body.to_string().into_bytes())),
        )
        .await
        .expect("TokenRequest answered");
    assert!(
        code.is_success(),
        "TokenRequest: {code}: {}",
        String::from_utf8_lossy(&out)
    );
    let v: Value = serde_json::from_slice(&out).expect("JSON");
    v["status"]["token"].as_str().expect("a token").to_string()
}

/// herald in process with the job file `jobs`, as `token`, its ports plain on loopback.
async fn start_herald(cp: &ControlPlane, token: &str, jobs: &str, initial: InitialList) -> Herald {
    let cfg = herald_core::parse_config(jobs).expect("herald accepts the shipped job file");
    let kube = cfg.kube_api.listen.is_some().then(|| {
        let (resources, custom) = kube_kinds(&cfg.kube_api.kinds).expect("kinds resolve");
        KubeServeOptions {
            custom,
            ..KubeServeOptions::plain(
                "127.0.0.1:0".parse().expect("addr"),
                KubeApiOptions {
                    resources,
                    ..KubeApiOptions::default()
                },
            )
        }
    });
    Herald::start(
        job_specs(&cfg, Some(NAMESPACE)).expect("job specs"),
        cp.kube_config(token).expect("kube config"),
        ServeOptions {
            kube,
            initial_list: initial,
            monitors: cfg.monitors.clone(),
            istio: cfg.istio.clone(),
            ..ServeOptions::default()
        },
    )
    .await
    .expect("herald starts")
}

async fn status(http: &reqwest::Client, h: &Herald) -> Value {
    http.get(format!("{}/status.json", h.url()))
        .send()
        .await
        .expect("status.json")
        .json()
        .await
        .expect("JSON")
}

async fn text(http: &reqwest::Client, url: String) -> String {
    http.get(url)
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("text")
}

/// The status's entry for upstream kind `kind`.
fn upstream<'a>(s: &'a Value, kind: &str) -> &'a Value {
    s["upstream"]
        .as_array()
        .expect("upstream")
        .iter()
        .find(|u| u["kind"] == kind)
        .unwrap_or_else(|| panic!("{kind} in the status: {s}"))
}

/// herald under the install's RBAC, by streaming lists (its default) and by list+watch (its
/// fallback): ready, every kind synced without an error, targets in every configured job, the
/// monitors selected, the face serving the apiserver's pods.
async fn check_herald(cp: &ControlPlane, http: &reqwest::Client, what: &str, install: &Install) {
    for initial in [InitialList::Auto, InitialList::ListWatch] {
        check_herald_with(cp, http, &format!("{what} ({initial:?})"), install, initial).await;
    }
}

async fn check_herald_with(
    cp: &ControlPlane,
    http: &reqwest::Client,
    what: &str,
    install: &Install,
    initial: InitialList,
) {
    let token = token(cp, &install.service_account).await;
    let started = Instant::now();
    let h = start_herald(cp, &token, &install.jobs, initial).await;
    if tokio::time::timeout(READY_TIMEOUT, h.ready())
        .await
        .is_err()
    {
        panic!(
            "{what}: herald did not sync under the install's RBAC within {READY_TIMEOUT:?}: {:#}",
            status(http, &h).await
        );
    }
    let s = status(http, &h).await;
    eprintln!(
        "{what}: herald ready in {:?} as {}",
        started.elapsed(),
        install.service_account
    );
    let mut kinds = BTreeSet::new();
    for u in s["upstream"].as_array().expect("upstream") {
        assert_eq!(u["health"], "ok", "{what}: {u}");
        assert_eq!(u["errors"], 0, "{what}: {u}");
        kinds.insert(u["kind"].as_str().expect("kind").to_string());
    }
    let cfg = herald_core::parse_config(&install.jobs).expect("valid");
    for j in &cfg.jobs {
        let job = s["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|x| x["name"] == j.name.as_str())
            .expect("the job");
        assert!(job["targets"].as_u64() > Some(0), "{what}: {job}");
    }
    if cfg.monitors.is_some() {
        // The install's own ServiceMonitor, selected by monitoring/k8s.
        assert!(
            s["monitors"]["monitors"].as_u64() >= Some(1)
                && s["monitors"]["jobs"].as_u64() >= Some(1),
            "{what}: {}",
            s["monitors"]
        );
    }
    if let Some(face) = h.kube_url() {
        let direct = cp.get_json("/api/v1/pods").await.expect("pods");
        let served: Value = http
            .get(format!("{face}/api/v1/pods"))
            .send()
            .await
            .expect("the face answers")
            .json()
            .await
            .expect("JSON");
        assert_eq!(
            served["items"].as_array().map(Vec::len),
            direct["items"].as_array().map(Vec::len),
            "{what}: the face serves the apiserver's pods"
        );
        assert!(kinds.contains("pods") && kinds.contains("endpointslices"));
    }
    eprintln!("{what}: upstream kinds {kinds:?}");
    h.stop().await;
}

/// Replaces the ClusterRole's rules, then waits until the authorizer answers for herald's
/// ServiceAccount as `checks` say (verb, allowed) on EndpointSlices.
async fn set_rules(cp: &ControlPlane, rules: &Value, checks: &[(&str, bool)]) {
    let (code, body) = cp
        .request(
            Method::PATCH,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/herald",
            Some((
                "application/merge-patch+json",
                json!({ "rules": rules }).to_string().into_bytes(),
            )),
        )
        .await
        .expect("patch answered");
    assert!(
        code.is_success(),
        "{code}: {}",
        String::from_utf8_lossy(&body)
    );
    let review = |verb: &str| {
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": format!("system:serviceaccount:{NAMESPACE}:herald"),
                "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{NAMESPACE}"), "system:authenticated"],
                "resourceAttributes": {"verb": verb, "group": "discovery.k8s.io", "resource": "endpointslices"},
            },
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    for (verb, allowed) in checks {
        loop {
            let (code, out) = cp
                .request(
                    Method::POST,
                    "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                    Some(("application/json", review(verb).to_string().into_bytes())),
                )
                .await
                .expect("review answered");
            assert!(code.is_success(), "{}", String::from_utf8_lossy(&out));
            let v: Value = serde_json::from_slice(&out).expect("JSON");
            if v["status"]["allowed"] == *allowed {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the authorizer never answered {allowed} for {verb}: {v}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A fresh herald with `initial` under a ClusterRole short of a permission on EndpointSlices: not
/// ready, and its status, status page, log and metrics name `verb` and the resource.
async fn check_refused(
    cp: &ControlPlane,
    http: &reqwest::Client,
    install: &Install,
    initial: InitialList,
    verb: &str,
    rules: &str,
) {
    let what = format!("{initial:?} under {rules}");
    let token = token(cp, &install.service_account).await;
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let h = start_herald(cp, &token, &install.jobs, initial).await;
    let deadline = Instant::now() + REFUSAL_TIMEOUT;
    let s = loop {
        let s = status(http, &h).await;
        let eps = upstream(&s, "endpointslices");
        let others_synced = s["upstream"]
            .as_array()
            .expect("upstream")
            .iter()
            .filter(|u| u["kind"] != "endpointslices")
            .all(|u| u["health"] == "ok");
        if eps["errors"].as_u64() >= Some(2) && others_synced {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: herald did not report the refusal within {REFUSAL_TIMEOUT:?}: {s:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(s["ready"], false, "{what}");
    let eps = upstream(&s, "endpointslices");
    assert_eq!(eps["health"], "syncing", "{what}: {eps}");
    let said = eps["last_error"].as_str().unwrap_or_default();
    let herald_words = format!("forbidden: cannot {verb} endpointslices.discovery.k8s.io");
    let apiserver_words = format!(
        "User \"system:serviceaccount:{NAMESPACE}:herald\" cannot {verb} resource \"endpointslices\" in API group \"discovery.k8s.io\" at the cluster scope"
    );
    assert!(
        said.contains(&herald_words) && said.contains(&apiserver_words),
        "{what}: the status names the verb and the resource: {said:?}"
    );
    eprintln!("{what}: status.json says {said:?}");

    // The page: the kind's row, and the recent warnings.
    let page = text(http, format!("{}/", h.url())).await;
    let row = page
        .split("<tr data-kind=\"endpointslices\">")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .expect("the endpointslices row");
    let esc = |s: &str| s.replace('"', "&quot;");
    assert!(
        row.contains(&herald_words) && row.contains(&esc(&apiserver_words)),
        "{what}: the status page's row names the verb and the resource: {row}"
    );
    let warnings = page
        .split("id=\"warnings\"")
        .nth(1)
        .expect("the warnings table");
    assert!(
        warnings.contains(&herald_words),
        "{what}: the recent warnings name the verb and the resource"
    );

    // The log (what the warnings ring holds is what the log line says), since this herald started.
    let logged = herald_server::status::recent_warnings()
        .into_iter()
        .filter(|w| w.at >= since)
        .any(|w| {
            w.message.contains("upstream request failed")
                && w.message.contains(&herald_words)
                && w.message.contains(&apiserver_words)
        });
    assert!(logged, "{what}: the log names the verb and the resource");

    let metrics = text(http, format!("{}/metrics", h.url())).await;
    let errors: f64 = metrics
        .lines()
        .find(|l| l.starts_with("herald_upstream_errors_total{kind=\"endpointslices\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: herald_upstream_errors_total for endpointslices"));
    assert!(errors >= 2.0, "{what}: {errors}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_manifests_install_on_kube_apiserver_and_herald_runs_under_their_rbac_naming_a_missing_permission()
 {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // The warnings ring herald's binary installs (the status page's recent warnings), and the log.
    let _ = tracing_subscriber::registry()
        .with(herald_server::status::RecentWarnings)
        .with(
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(tracing_subscriber::EnvFilter::from_default_env()),
        )
        .try_init();
    let Some(kubectl) = installed::find("kubectl", installed::KUBECTL_INSTALL) else {
        return;
    };
    let Some(helm) = installed::find("helm", installed::GO_PEERS_INSTALL) else {
        return;
    };
    let spec = ClusterSpec::small();
    let Some(cp) = ControlPlane::start(Options {
        service_cidr: spec.service_cidr.to_string(),
        ..Options::default()
    })
    .await
    else {
        return;
    };
    let cp = cp.expect("the control plane starts");
    let started = Instant::now();
    let n = cp
        .load(&generate(&spec, 7))
        .await
        .expect("the cluster loads");
    cp.wait_endpointslices(Duration::from_secs(60))
        .await
        .expect("the EndpointSlice controller settles");
    eprintln!("loaded {n} objects in {:?}", started.elapsed());

    let mut paths = Paths::default();
    let crds = crds();
    for c in &crds {
        apply(&cp, &mut paths, "CRDs", c).await;
    }
    wait_established(&cp, &crds).await;
    for o in prerequisites() {
        apply(&cp, &mut paths, "prerequisites", &o).await;
    }

    let mut installs: Vec<(String, String)> = KUSTOMIZE
        .iter()
        .map(|k| (k.to_string(), deploy::render(&kubectl, k)))
        .collect();
    installs.push(("helm (defaults)".into(), helm_template(&helm, &[])));
    installs.push((
        "helm (kubeApi.enabled)".into(),
        helm_template(&helm, &["--set", "kubeApi.enabled=true"]),
    ));

    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let mut run = BTreeSet::new();
    let mut last = None;
    for (i, (what, yaml)) in installs.iter().enumerate() {
        let mut docs = deploy::documents(yaml);
        // Namespaces first, as kubectl orders them.
        docs.sort_by_key(|d| d["kind"] != "Namespace");
        let mut created = 0;
        for d in &docs {
            let code = apply(&cp, &mut paths, what, d).await;
            if d["kind"] != "Namespace" {
                assert_eq!(
                    code,
                    StatusCode::CREATED,
                    "{what}: {} {} is created",
                    d["kind"],
                    d["metadata"]["name"]
                );
            }
            created += usize::from(code == StatusCode::CREATED);
        }
        eprintln!("{what}: {} objects applied, {created} created", docs.len());
        let install = install_of(what, &docs);
        // Installs rendering the same identity, rules and job file are run once.
        if run.insert((install.rules.to_string(), install.jobs.clone())) {
            check_herald(&cp, &http, what, &install).await;
        }
        if i + 1 < installs.len() {
            for d in docs.iter().filter(|d| d["kind"] != "Namespace") {
                delete(&cp, &mut paths, d).await;
            }
        } else {
            last = Some(install);
        }
    }

    // One permission short: the last install's ClusterRole without EndpointSlices.
    let install = last.expect("an install");
    let all = install.rules.as_array().expect("rules").clone();
    let without: Vec<Value> = all
        .iter()
        .filter(|r| r["resources"] != json!(["endpointslices"]))
        .cloned()
        .collect();
    assert_eq!(
        without.len() + 1,
        all.len(),
        "one rule grants EndpointSlices"
    );
    set_rules(&cp, &json!(without), &[("list", false), ("watch", false)]).await;
    let none = "no EndpointSlice rule";
    check_refused(&cp, &http, &install, InitialList::Auto, "watch", none).await;
    check_refused(&cp, &http, &install, InitialList::ListWatch, "list", none).await;

    // Only `list` taken out: list+watch is refused its list.
    let mut watch_only = all.clone();
    for r in &mut watch_only {
        if r["resources"] == json!(["endpointslices"]) {
            r["verbs"] = json!(["watch"]);
        }
    }
    set_rules(&cp, &json!(watch_only), &[("list", false), ("watch", true)]).await;
    let watch = "EndpointSlices watch only";
    check_refused(&cp, &http, &install, InitialList::ListWatch, "list", watch).await;

    // kube-apiserver 1.37 authorizes a streaming list (a watch with sendInitialEvents) as a watch
    // only: herald's default start needs no `list`. The shipped ClusterRoles grant it still, for the
    // list+watch fallback (an apiserver refusing streaming lists; `--initial-list=list-watch`).
    let token = token(&cp, &install.service_account).await;
    let h = start_herald(&cp, &token, &install.jobs, InitialList::Auto).await;
    if tokio::time::timeout(READY_TIMEOUT, h.ready())
        .await
        .is_err()
    {
        panic!(
            "a streaming list with watch but not list granted did not sync (does this apiserver check list too?): {:#}",
            status(&http, &h).await
        );
    }
    h.stop().await;
}
