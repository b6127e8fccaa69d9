//! A real Kubernetes control plane as a test peer and benchmark backend: etcd, kube-apiserver and
//! kube-controller-manager (built by `peers/build` from their upstream modules), started on
//! loopback in a temp dir with a throw-away CA, a service-account key and static tokens; a cluster
//! of kube-sim's shape loaded through the API; churn driven through the API.
//!
//! The controller-manager runs only the controllers that turn Services and Pods into Endpoints and
//! EndpointSlices, so the slices herald and its judges read are the real controller's. Nothing
//! else runs: no scheduler, no kubelet, no garbage collector. Pods get their node, IP and
//! conditions written by the loader through `/status`, as a kubelet would.
//!
//! NB: every address in the loaded objects is data that nothing dials (the apiserver refuses
//! loopback endpoint addresses, so the cluster's CIDRs stay the private ones kube-sim generates).
//! Every process is killed and its folder removed on drop, also when the test fails.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use http::{Method, Request, StatusCode};
use serde_json::{Value, json};
use tempfile::TempDir;

use super::free_loopback_port;
use crate::generate::Cluster;
use crate::{Kind, Object, Write};

/// How the control plane's binaries are installed.
pub const CONTROL_PLANE_INSTALL: &str = super::GO_PEERS_INSTALL;

/// How long etcd and the apiserver get to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The static tokens of the token file (`--token-auth-file`).
pub const ADMIN_TOKEN: &str = "herald-test-admin-token";
const KCM_TOKEN: &str = "herald-test-controller-manager-token";

/// Requests the loader keeps in flight.
const LOAD_PARALLELISM: usize = 16;

/// What to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// Run kube-controller-manager's Endpoints and EndpointSlice controllers.
    pub controllers: bool,
    /// The Service range (`--service-cluster-ip-range`): the loaded cluster's Services' IPs.
    pub service_cidr: String,
    /// Extra kube-apiserver flags (feature gates, compaction interval).
    pub apiserver_args: Vec<String>,
    /// Extra lines of the token file: `token,user,uid,"group1,group2"`.
    pub tokens: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            controllers: true,
            service_cidr: "172.20.0.0/16".into(),
            apiserver_args: Vec::new(),
            tokens: Vec::new(),
        }
    }
}

/// The binaries, when `peers/build` made them (else `None`, after printing how; a panic under `CI=true`).
pub struct Binaries {
    pub etcd: PathBuf,
    pub apiserver: PathBuf,
    pub controller_manager: PathBuf,
}

impl Binaries {
    pub fn find() -> Option<Binaries> {
        Some(Binaries {
            etcd: super::find("etcd", CONTROL_PLANE_INSTALL)?,
            apiserver: super::find("kube-apiserver", CONTROL_PLANE_INSTALL)?,
            controller_manager: super::find("kube-controller-manager", CONTROL_PLANE_INSTALL)?,
        })
    }
}

/// A child process with its command line kept, so it can be killed and started again as it was.
pub struct Proc {
    name: &'static str,
    bin: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    starts: u32,
}

impl Proc {
    fn spawn(
        name: &'static str,
        bin: &Path,
        args: Vec<String>,
        dir: &Path,
    ) -> anyhow::Result<Proc> {
        let mut p = Proc {
            name,
            bin: bin.to_path_buf(),
            args,
            log: dir.join(format!("{name}.log")),
            child: None,
            starts: 0,
        };
        p.start()?;
        Ok(p)
    }

    /// Starts the process (again), appending to its log.
    pub fn start(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("{} is running", self.name);
        }
        let out = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("{} log", self.name))?;
        let err = out.try_clone()?;
        let child = Command::new(&self.bin)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {} ({})", self.name, self.bin.display()))?;
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    /// SIGKILLs the process and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.as_mut().map(Child::try_wait) {
            None => bail!("{} is not running", self.name),
            Some(Ok(None)) => Ok(()),
            Some(Ok(Some(status))) => bail!(
                "{} exited with {status}; its log ends:\n{}",
                self.name,
                self.tail(30)
            ),
            Some(Err(e)) => bail!("cannot check on {}: {e}", self.name),
        }
    }

    /// The last `n` lines of the log.
    pub fn tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- {} log, last 40 lines ---\n{}",
                self.name,
                self.tail(40)
            );
        }
    }
}

/// A running control plane. Dropping it kills every process and removes its folder.
pub struct ControlPlane {
    pub etcd: Proc,
    pub apiserver: Proc,
    pub controller_manager: Option<Proc>,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// etcd's client URL, `http://127.0.0.1:PORT`.
    pub etcd_url: String,
    ca_pem: String,
    admin: kube::Client,
    /// Keys of the objects the loader and churn wrote that still exist: an update of one is a
    /// patch, anything else a create.
    written: std::sync::Mutex<HashSet<(Kind, Option<String>, String)>>,
    // Last, so the processes are killed before their folder goes.
    dir: TempDir,
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and (with `options.controllers`) kube-controller-manager, and waits
    /// until the apiserver is ready. `None` when the binaries are missing (a panic under `CI=true`).
    pub async fn start(options: Options) -> Option<anyhow::Result<ControlPlane>> {
        let bins = Binaries::find()?;
        Some(Self::start_with(&bins, options).await)
    }

    pub async fn start_with(bins: &Binaries, options: Options) -> anyhow::Result<ControlPlane> {
        let dir = tempfile::Builder::new()
            .prefix("herald-controlplane-")
            .tempdir()?;
        let d = dir.path();
        let pki = Pki::new()?;
        std::fs::write(d.join("ca.crt"), &pki.ca_pem)?;
        std::fs::write(d.join("apiserver.crt"), &pki.server_cert)?;
        std::fs::write(d.join("apiserver.key"), &pki.server_key)?;
        std::fs::write(d.join("sa.key"), &pki.sa_key)?;
        std::fs::write(d.join("sa.pub"), &pki.sa_pub)?;
        let mut tokens = vec![
            format!("{ADMIN_TOKEN},herald-test-admin,herald-test-admin,\"system:masters\""),
            // The controller-manager as system:masters: a test peer, never a template for RBAC.
            format!("{KCM_TOKEN},system:kube-controller-manager,kcm,\"system:masters\""),
        ];
        tokens.extend(options.tokens.iter().cloned());
        std::fs::write(d.join("tokens.csv"), tokens.join("\n") + "\n")?;

        let (client_port, peer_port) = (free_loopback_port(), free_loopback_port());
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_args = vec![
            "--name=default".to_string(),
            format!("--data-dir={}", d.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            // A test's etcd: durability is not what is measured, and fsyncs on a shared disk
            // make every write slow.
            "--unsafe-no-fsync".to_string(),
            "--log-level=warn".to_string(),
        ];
        let mut etcd = Proc::spawn("etcd", &bins.etcd, etcd_args, d)?;
        wait_etcd(&mut etcd, &etcd_url).await?;

        let port = free_loopback_port();
        let url = format!("https://127.0.0.1:{port}");
        let mut args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", d.join("apiserver.crt").display()),
            format!(
                "--tls-private-key-file={}",
                d.join("apiserver.key").display()
            ),
            format!("--token-auth-file={}", d.join("tokens.csv").display()),
            "--authorization-mode=RBAC".to_string(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-account-key-file={}", d.join("sa.pub").display()),
            format!(
                "--service-account-signing-key-file={}",
                d.join("sa.key").display()
            ),
            format!("--service-cluster-ip-range={}", options.service_cidr),
            // No reconciler writes the `kubernetes` Service's endpoints: 127.0.0.1 is refused
            // as an endpoint address, and nothing here dials it.
            "--endpoint-reconciler-type=none".to_string(),
            // Service accounts are made by a controller this control plane does not run.
            "--disable-admission-plugins=ServiceAccount".to_string(),
            "--profiling=false".to_string(),
            "--v=0".to_string(),
        ];
        args.extend(options.apiserver_args.iter().cloned());
        let apiserver = Proc::spawn("kube-apiserver", &bins.apiserver, args, d)?;
        let admin = client(&url, &pki.ca_pem, ADMIN_TOKEN)?;
        let mut cp = ControlPlane {
            etcd,
            apiserver,
            controller_manager: None,
            url,
            etcd_url,
            ca_pem: pki.ca_pem,
            admin,
            written: Default::default(),
            dir,
        };
        cp.wait_ready().await?;
        if options.controllers {
            let kubeconfig = cp.write_kubeconfig("controller-manager", KCM_TOKEN)?;
            let args = vec![
                format!("--kubeconfig={}", kubeconfig.display()),
                "--controllers=endpointslice-controller,endpoints-controller".to_string(),
                "--leader-elect=false".to_string(),
                "--use-service-account-credentials=false".to_string(),
                "--bind-address=127.0.0.1".to_string(),
                format!("--secure-port={}", free_loopback_port()),
                "--v=0".to_string(),
            ];
            cp.controller_manager = Some(Proc::spawn(
                "kube-controller-manager",
                &bins.controller_manager,
                args,
                cp.dir.path(),
            )?);
        }
        Ok(cp)
    }

    /// The folder holding the certificates, tokens, kubeconfigs, logs and etcd's data.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA that signed the apiserver's certificate, as PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A client as the admin (system:masters).
    pub fn admin(&self) -> &kube::Client {
        &self.admin
    }

    /// A kube config for `token`, trusting the control plane's CA.
    pub fn kube_config(&self, token: &str) -> anyhow::Result<kube::Config> {
        config(&self.url, &self.ca_pem, token)
    }

    /// A kubeconfig file for `token` in the control plane's folder; returns its path.
    pub fn write_kubeconfig(&self, name: &str, token: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, self.kubeconfig_yaml(token))?;
        Ok(path)
    }

    /// A kubeconfig for `token`.
    pub fn kubeconfig_yaml(&self, token: &str) -> String {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: real\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: real\n  context:\n    cluster: real\n    user: user\ncurrent-context: real\n",
            self.url
        )
    }

    /// Waits until `/readyz` answers 200 (after a start or a restart).
    pub async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            self.apiserver.check_alive()?;
            match self.request(Method::GET, "/readyz", None).await {
                Ok((StatusCode::OK, _)) => return Ok(()),
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok((status, body)) => bail!(
                    "kube-apiserver not ready within {START_TIMEOUT:?}: /readyz {status}: {}",
                    String::from_utf8_lossy(&body)
                ),
                Err(e) => bail!("kube-apiserver not ready within {START_TIMEOUT:?}: {e}"),
            }
        }
    }

    /// SIGKILLs kube-apiserver and starts it again on the same port, waiting until it is ready.
    pub async fn restart_apiserver(&mut self) -> anyhow::Result<()> {
        self.apiserver.kill();
        self.apiserver.start()?;
        self.wait_ready().await
    }

    /// SIGKILLs etcd (the apiserver stays up, failing its requests).
    pub fn stop_etcd(&mut self) {
        self.etcd.kill();
    }

    /// Starts etcd again on its ports and data, waiting until it is healthy.
    pub async fn start_etcd(&mut self) -> anyhow::Result<()> {
        self.etcd.start()?;
        wait_etcd(&mut self.etcd, &self.etcd_url).await
    }

    /// Compacts etcd's history up to its current revision (physically): a watch from an older
    /// resourceVersion then gets 410 Gone, as after the apiserver's periodic compaction.
    pub async fn compact(&self) -> anyhow::Result<u64> {
        let http = reqwest::Client::builder().no_proxy().build()?;
        let status: Value = http
            .post(format!("{}/v3/maintenance/status", self.etcd_url))
            .body("{}")
            .send()
            .await?
            .json()
            .await?;
        let rev: u64 = status["header"]["revision"]
            .as_str()
            .context("etcd status without a revision")?
            .parse()?;
        let resp = http
            .post(format!("{}/v3/kv/compaction", self.etcd_url))
            .json(&json!({"revision": rev.to_string(), "physical": true}))
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("etcd compaction: {}", resp.text().await?);
        }
        Ok(rev)
    }

    /// A request as the admin: the status and the body.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<(StatusCode, Vec<u8>)> {
        request(&self.admin, method, path, body).await
    }

    /// `GET path` as the admin, as JSON; an error unless 200.
    pub async fn get_json(&self, path: &str) -> anyhow::Result<Value> {
        let (status, body) = self.request(Method::GET, path, None).await?;
        if status != StatusCode::OK {
            bail!("GET {path}: {status}: {}", String::from_utf8_lossy(&body));
        }
        Ok(serde_json::from_slice(&body)?)
    }

    /// The apiserver's `/metrics`.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let (status, body) = self.request(Method::GET, "/metrics", None).await?;
        if status != StatusCode::OK {
            bail!("GET /metrics: {status}");
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// Loads `cluster` through the API: namespaces, nodes (with status), Services, ConfigMaps,
    /// Ingresses and pods (with status). Endpoints and EndpointSlices are left to the controller;
    /// custom resources, RBAC objects and ServiceCIDRs are skipped (the apiserver has its own
    /// ServiceCIDR, from `--service-cluster-ip-range`). Returns how many objects were written.
    pub async fn load(&self, cluster: &Cluster) -> anyhow::Result<usize> {
        let mut written = 0;
        // Kinds in an order where each finds what it refers to.
        for kind in [
            Kind::Namespace,
            Kind::Node,
            Kind::ConfigMap,
            Kind::Service,
            Kind::Ingress,
            Kind::Pod,
        ] {
            let objects: Vec<&Object> = cluster
                .objects
                .iter()
                .filter(|o| o.kind() == kind)
                .collect();
            written += objects.len();
            let results: Vec<anyhow::Result<()>> = futures::stream::iter(objects)
                .map(|o| self.put(o))
                .buffer_unordered(LOAD_PARALLELISM)
                .collect()
                .await;
            for r in results {
                r?;
            }
        }
        Ok(written)
    }

    /// Applies churn's writes in order through the API (see [`ControlPlane::load`] for what is
    /// skipped). A pod written with a deletionTimestamp is deleted gracefully (it stays, marked,
    /// as with a kubelet that has not confirmed); a delete is immediate (grace period 0).
    pub async fn apply(&self, writes: Vec<Write>) -> anyhow::Result<()> {
        for w in writes {
            match w {
                Write::Put(o) if loaded(o.kind()) => self.put(&o).await?,
                Write::Put(_) => {}
                Write::Delete {
                    kind,
                    namespace,
                    name,
                } if loaded(kind) => {
                    let path = object_path(kind, namespace.as_deref(), Some(&name));
                    let (status, body) = self
                        .request(
                            Method::DELETE,
                            &format!("{path}?gracePeriodSeconds=0"),
                            None,
                        )
                        .await?;
                    if !status.is_success() && status != StatusCode::NOT_FOUND {
                        bail!(
                            "DELETE {path}: {status}: {}",
                            String::from_utf8_lossy(&body)
                        );
                    }
                    self.forget(kind, namespace, name);
                }
                Write::Delete { .. } => {}
            }
        }
        Ok(())
    }

    fn forget(&self, kind: Kind, namespace: Option<String>, name: String) {
        self.written
            .lock()
            .expect("written keys")
            .remove(&(kind, namespace, name));
    }

    /// Creates or updates one object, then writes its status where the kind has one a kubelet or
    /// controller would write.
    async fn put(&self, o: &Object) -> anyhow::Result<()> {
        let kind = o.kind();
        let mut v = o.to_json();
        let meta = v["metadata"].take();
        let name = meta["name"].as_str().context("an object without a name")?;
        let ns = meta["namespace"].as_str().map(str::to_string);
        let terminating = meta.get("deletionTimestamp").is_some_and(|t| !t.is_null());
        let mut clean = serde_json::Map::new();
        for f in [
            "name",
            "namespace",
            "labels",
            "annotations",
            "ownerReferences",
        ] {
            if let Some(x) = meta.get(f).filter(|x| !x.is_null()) {
                clean.insert(f.into(), x.clone());
            }
        }
        v["metadata"] = Value::Object(clean);
        if kind == Kind::Service
            && let Some(spec) = v["spec"].as_object_mut()
            && spec.get("clusterIP").and_then(Value::as_str) != Some("None")
        {
            // The apiserver allocates from its own range (and keeps the first address for the
            // `kubernetes` Service): generated cluster IPs would collide with it.
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
        let status = v.as_object_mut().and_then(|m| m.remove("status"));
        let key = (kind, ns.clone(), name.to_string());
        let known = self.written.lock().expect("written keys").contains(&key);
        let collection = object_path(kind, ns.as_deref(), None);
        let one = object_path(kind, ns.as_deref(), Some(name));
        if !known {
            let (code, body) = self
                .request(
                    Method::POST,
                    &collection,
                    Some(("application/json", serde_json::to_vec(&v)?)),
                )
                .await?;
            if code == StatusCode::CONFLICT {
                // default, kube-system, the `kubernetes` Service and the like exist already:
                // take the generated labels and annotations.
                self.patch(&one, &json!({"metadata": v["metadata"]}))
                    .await?;
            } else if !code.is_success() {
                bail!(
                    "POST {collection} ({name}): {code}: {}",
                    String::from_utf8_lossy(&body)
                );
            }
            self.written.lock().expect("written keys").insert(key);
        } else {
            // An update: what churn changes of a live object (labels, annotations; a Service's
            // spec). A pod's spec is immutable but for a few fields churn never touches.
            let mut patch = json!({"metadata": v["metadata"]});
            if kind == Kind::Service || kind == Kind::ConfigMap || kind == Kind::Ingress {
                patch = v.clone();
            }
            self.patch(&one, &patch).await?;
        }
        if let Some(status) = status.filter(|_| matches!(kind, Kind::Pod | Kind::Node)) {
            self.patch(&format!("{one}/status"), &json!({ "status": status }))
                .await?;
        }
        if terminating {
            let (code, body) = self
                .request(
                    Method::DELETE,
                    &format!("{one}?gracePeriodSeconds=30"),
                    None,
                )
                .await?;
            if !code.is_success() && code != StatusCode::NOT_FOUND {
                bail!("DELETE {one}: {code}: {}", String::from_utf8_lossy(&body));
            }
        }
        Ok(())
    }

    async fn patch(&self, path: &str, patch: &Value) -> anyhow::Result<()> {
        let (code, body) = self
            .request(
                Method::PATCH,
                path,
                Some(("application/merge-patch+json", serde_json::to_vec(patch)?)),
            )
            .await?;
        if !code.is_success() {
            bail!("PATCH {path}: {code}: {}", String::from_utf8_lossy(&body));
        }
        Ok(())
    }

    /// Waits until the EndpointSlice controller has caught up: every Service with a selector has a
    /// slice, and the slices stopped changing for a second.
    pub async fn wait_endpointslices(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = (usize::MAX, String::new());
        let mut since = Instant::now();
        loop {
            let services = self.get_json("/api/v1/services").await?;
            let slices = self
                .get_json("/apis/discovery.k8s.io/v1/endpointslices")
                .await?;
            let selected: HashSet<(String, String)> = services["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| {
                    s["spec"]["selector"]
                        .as_object()
                        .is_some_and(|m| !m.is_empty())
                })
                .map(|s| {
                    (
                        s["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                        s["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            let served: HashSet<(String, String)> = slices["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| {
                    Some((
                        s["metadata"]["namespace"].as_str()?.to_string(),
                        s["metadata"]["labels"]["kubernetes.io/service-name"]
                            .as_str()?
                            .to_string(),
                    ))
                })
                .collect();
            let now = (
                slices["items"].as_array().map_or(0, Vec::len),
                slices["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
            if now != last {
                last = now;
                since = Instant::now();
            } else if selected.is_subset(&served) && since.elapsed() >= Duration::from_secs(1) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let missing: Vec<_> = selected.difference(&served).take(5).collect();
                bail!(
                    "the EndpointSlice controller did not settle within {timeout:?}; Services without a slice: {missing:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// Whether the loader and churn write this kind to the real apiserver.
fn loaded(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Namespace | Kind::Node | Kind::ConfigMap | Kind::Service | Kind::Ingress | Kind::Pod
    )
}

/// `/api/v1/namespaces/NS/pods[/NAME]` and the like.
pub fn object_path(kind: Kind, namespace: Option<&str>, name: Option<&str>) -> String {
    let mut p = if kind.group().is_empty() {
        format!("/api/{}", kind.version())
    } else {
        format!("/apis/{}/{}", kind.group(), kind.version())
    };
    if let Some(ns) = namespace.filter(|_| kind.namespaced()) {
        p.push_str("/namespaces/");
        p.push_str(ns);
    }
    p.push('/');
    p.push_str(kind.plural());
    if let Some(n) = name {
        p.push('/');
        p.push_str(n);
    }
    p
}

async fn wait_etcd(etcd: &mut Proc, url: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        etcd.check_alive()?;
        if let Ok(r) = http.get(format!("{url}/health")).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "etcd not healthy within {START_TIMEOUT:?}:\n{}",
                etcd.tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn config(url: &str, ca_pem: &str, token: &str) -> anyhow::Result<kube::Config> {
    let mut c = kube::Config::new(url.parse()?);
    let der = pem_der(ca_pem).context("the control plane's CA")?;
    c.root_cert = Some(vec![der]);
    c.auth_info.token = Some(token.to_string().into());
    Ok(c)
}

fn client(url: &str, ca_pem: &str, token: &str) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(config(url, ca_pem, token)?)?)
}

/// The DER of the first PEM block.
fn pem_der(pem: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

async fn request(
    client: &kube::Client,
    method: Method,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> anyhow::Result<(StatusCode, Vec<u8>)> {
    use http_body_util::BodyExt as _;
    let mut req = Request::builder().method(method.clone()).uri(path);
    let bytes = match body {
        Some((content_type, b)) => {
            req = req.header(http::header::CONTENT_TYPE, content_type);
            b
        }
        None => Vec::new(),
    };
    let req = req.body(kube::client::Body::from(bytes))?;
    let res = client
        .send(req)
        .await
        .with_context(|| format!("{method} {path}"))?;
    let status = res.status();
    let body = res
        .into_body()
        .collect()
        .await
        .with_context(|| format!("{method} {path}: reading the body"))?
        .to_bytes()
        .to_vec();
    Ok((status, body))
}

/// The control plane's throw-away PKI.
struct Pki {
    ca_pem: String,
    server_cert: String,
    server_key: String,
    sa_key: String,
    sa_pub: String,
}

impl Pki {
    fn new() -> anyhow::Result<Pki> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "herald-test-control-plane-ca");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        let mut leaf = CertificateParams::new(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        leaf.distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let key = KeyPair::generate()?;
        let cert = leaf.signed_by(&key, &issuer)?;
        // ES256 service-account tokens: kube-apiserver signs with ECDSA P-256 keys as with RSA.
        let sa = KeyPair::generate()?;
        Ok(Pki {
            ca_pem: issuer.pem(),
            server_cert: cert.pem(),
            server_key: key.serialize_pem(),
            sa_key: sa.serialize_pem(),
            sa_pub: sa.public_key_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_paths_follow_the_apis_layout() {
        assert_eq!(
            object_path(Kind::Pod, Some("a"), Some("p")),
            "/api/v1/namespaces/a/pods/p"
        );
        assert_eq!(
            object_path(Kind::Node, Some("ignored"), None),
            "/api/v1/nodes"
        );
        assert_eq!(
            object_path(Kind::Ingress, Some("a"), None),
            "/apis/networking.k8s.io/v1/namespaces/a/ingresses"
        );
    }

    #[test]
    fn the_pki_is_usable_pem() {
        let p = Pki::new().expect("pki");
        assert!(pem_der(&p.ca_pem).is_some_and(|d| !d.is_empty()));
        assert!(p.sa_key.contains("PRIVATE KEY"));
    }
}
