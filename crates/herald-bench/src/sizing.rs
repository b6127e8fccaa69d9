//! The README's sizing formula ("Sizing"), so the benchmarks that measure herald under load can say
//! whether the memory request and limit the formula gives for that load hold what they measured. The
//! deploy manifests are sized with the same terms; a benchmark whose peak goes over the formula's limit
//! means the manifests would have the pod killed at that load.
//!
//! NB: keep the terms equal to README.md's "Sizing" block; a test below pins them.

/// The load herald is sized for.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Pods in the cluster (the formula's unit; the other kinds are taken at `k8s-limits`' density).
    pub pods: u64,
    /// Whether the Kubernetes API face serves pods, Services, EndpointSlices and nodes.
    pub face: bool,
    /// Open Kubernetes API watches.
    pub watches: u64,
    /// Shard schemes polled: one per distinct `shards=N`, one for unsharded jobs.
    pub shard_schemes: u64,
    /// `--body-budget-bytes`.
    pub body_budget_bytes: u64,
}

/// The formula's terms and totals for a [`Load`], MiB.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sizing {
    pub objects: f64,
    pub bodies: f64,
    pub watchers: f64,
    pub request: f64,
    pub limit: f64,
}

/// MiB every herald holds whatever the cluster (the fit's intercept).
pub const BASE_MIB: f64 = 64.0;
/// KiB per pod for discovery of the `pod` and `endpointslice` jobs.
pub const POD_KIB: f64 = 2.6;
/// KiB per pod more when the Kubernetes API face serves pods, Services, EndpointSlices and nodes.
pub const FACE_POD_KIB: f64 = 0.15;
/// KiB per pod of bodies, per shard scheme polled.
pub const BODY_POD_KIB: f64 = 0.9;
/// KiB per open Kubernetes API watch.
pub const WATCH_KIB: f64 = 36.0;
/// The limit's margin over objects and watchers, for the transient buffers of relists and builds.
pub const MARGIN: f64 = 1.25;

impl Load {
    /// The load of the steady-state and restart benchmarks: `k8s-limits`' shape at `pods`, the
    /// Kubernetes API face on with `watches` open, the shard consumers on one scheme (the gzip
    /// consumers poll the same shards), herald's body budget.
    pub fn benchmark(pods: u64, watches: u64, body_budget_bytes: u64) -> Load {
        Load {
            pods,
            face: true,
            watches,
            shard_schemes: 1,
            body_budget_bytes,
        }
    }

    pub fn sizing(&self) -> Sizing {
        let per_pod = POD_KIB + if self.face { FACE_POD_KIB } else { 0.0 };
        let objects = BASE_MIB + self.pods as f64 * per_pod / 1024.0;
        let budget = self.body_budget_bytes as f64 / 1_048_576.0;
        let bodies =
            (self.pods as f64 * BODY_POD_KIB * self.shard_schemes as f64 / 1024.0).min(budget);
        let watchers = self.watches as f64 * WATCH_KIB / 1024.0;
        Sizing {
            objects,
            bodies,
            watchers,
            request: objects + bodies + watchers,
            limit: MARGIN * (objects + watchers) + budget,
        }
    }
}

impl Sizing {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "objects_mib": self.objects, "bodies_mib": self.bodies, "watchers_mib": self.watchers,
            "request_mib": self.request, "limit_mib": self.limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's block carries the same terms as this module.
    #[test]
    fn terms_match_the_readme() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
                .expect("README.md");
        let block = readme
            .split("### Sizing")
            .nth(1)
            .and_then(|s| s.split("```").nth(1))
            .expect("the Sizing section's formula block");
        for needle in [
            format!("objects   = {BASE_MIB:.0} MiB + pods × ({POD_KIB:.1} KiB"),
            format!("+ {FACE_POD_KIB:.2} KiB if the Kubernetes API face"),
            format!("bodies    = pods × {BODY_POD_KIB:.1} KiB"),
            format!("watchers  = {WATCH_KIB:.0} KiB × open"),
            format!("limit     = {MARGIN:.2} × (objects + watchers) + --body-budget-bytes"),
        ] {
            assert!(
                block.contains(&needle),
                "README's Sizing block lacks {needle:?}:\n{block}"
            );
        }
    }

    /// The deploy manifests' example: 50,000 pods, SD only, one shard scheme, the default budget.
    #[test]
    fn the_manifests_example() {
        let load = Load {
            pods: 50_000,
            face: false,
            watches: 0,
            shard_schemes: 1,
            body_budget_bytes: 384 << 20,
        };
        let s = load.sizing();
        assert!((s.objects - 191.0).abs() < 1.0, "{s:?}");
        assert!((s.bodies - 43.9).abs() < 0.1, "{s:?}");
        assert!((s.limit - (1.25 * s.objects + 384.0)).abs() < 1e-9, "{s:?}");
        // Bodies never count for more than the budget.
        let many = Load {
            shard_schemes: 100,
            ..load
        }
        .sizing();
        assert_eq!(many.bodies, 384.0);
        assert!(many.request > s.request);
    }
}
