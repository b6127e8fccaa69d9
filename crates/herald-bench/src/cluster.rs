//! kube-sim clusters the benchmarks generate: a preset scaled in nodes, namespaces, Services and pods
//! together, with loopback pod and node addresses (nothing may dial outside the machine).

/// A kube-sim cluster: a preset scaled by `scale` (nodes, pods, Services and namespaces together).
#[derive(Debug, Clone, Copy)]
pub struct ClusterSpec {
    pub preset: &'static str,
    pub scale: f64,
    pub seed: u64,
    pub churn: f64,
}

impl ClusterSpec {
    /// The preset's (nodes, namespaces, services, pods), as kube-sim's generator defines them.
    fn base(&self) -> (f64, f64, f64, f64) {
        match self.preset {
            "k8s-limits" => (5_000.0, 100.0, 10_000.0, 150_000.0),
            _ => (10.0, 4.0, 20.0, 200.0),
        }
    }

    /// Pods in the generated cluster.
    pub fn pods(&self) -> u64 {
        (self.base().3 * self.scale).round() as u64
    }

    pub fn describe(&self) -> String {
        let (n, ns, s, p) = self.base();
        let sc = |x: f64| (x * self.scale).round().max(1.0);
        format!(
            "`{}` × {} ({} nodes, {} namespaces, {} Services, {} pods), seed {}, churn {}/s",
            self.preset,
            self.scale,
            sc(n),
            sc(ns),
            sc(s),
            sc(p),
            self.seed,
            self.churn
        )
    }

    /// `kube-sim serve` arguments for this cluster on a free loopback port.
    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--preset",
            self.preset,
            // Loopback pod and node addresses: nothing may dial outside the machine.
            "--pod-cidr",
            "127.16.0.0/12",
            "--node-cidr",
            "127.8.0.0/16",
        ]
        .map(String::from)
        .to_vec();
        a.extend(["--seed".into(), self.seed.to_string()]);
        a.extend(["--churn".into(), self.churn.to_string()]);
        if (self.scale - 1.0).abs() > 1e-9 {
            let (n, ns, s, p) = self.base();
            for (flag, v) in [
                ("--nodes", n),
                ("--namespaces", ns),
                ("--services", s),
                ("--pods", p),
            ] {
                a.extend([
                    flag.to_string(),
                    ((v * self.scale).round().max(1.0) as u64).to_string(),
                ]);
            }
        }
        a
    }
}
