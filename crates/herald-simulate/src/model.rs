//! Sync times without root: a power law `t = a·rules^b` fitted (least squares in log-log) to
//! measurements recorded on a real machine, per backend, each point with its source. Figures from
//! it are labelled "modelled". IPVS is modelled from an assumption, never measured: this kernel has
//! no ip_vs.

use crate::measure::Backend;

/// One recorded measurement: a full sync of `rules` rules (iptables: filter + nat; nftables: rules
/// plus map elements) took `seconds`, the sync after one endpoint change `change_seconds`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recorded {
    pub backend: Backend,
    pub rules: f64,
    pub seconds: f64,
    pub change_seconds: f64,
    pub source: &'static str,
}

/// Where the recorded figures come from: `herald simulate --services 100 --endpoints-per-service 5
/// --factors 1,4,16 --measure` (median of 3 full syncs onto a namespace already holding the
/// ruleset), on the 2-core machine of bench/RESULTS.md, 2026-11-23.
const THIS_MACHINE: &str = "herald simulate --services 100 --factors 1,4,16 --measure, bench/RESULTS.md machine, 2026-11-23";

/// `bench/simulate.sh`'s `--measure` run on kube-sim's k8s-limits dump (seed 11), same machine,
/// 2026-11-23 03:17-03:27 UTC, under a load average of ~7 from concurrent builds.
const K8S_LIMITS: &str =
    "herald simulate --from k8s-limits dump --measure, bench/RESULTS.md machine, 2026-11-23";

/// The nftables transaction as kube-proxy v1.37.2 writes it (src/nftables.rs since the `simnft`
/// branch: a full sync is its first one, a change sync a partial one), re-measured with
/// `herald simulate --services 100 --factors 1,4,16 --measure` on the same machine, 2026-11-26
/// 20:19-20:23 UTC, while two other builds shared its 2 cores (its iptables-legacy figures came out
/// ~1.5-2× the 2026-11-23 ones, so these are high by as much). The earlier nftables figures timed
/// a transaction kube-proxy no longer writes (every map flushed and refilled, a chain per endpoint).
const NFT_V1_37: &str = "herald simulate --services 100 --factors 1,4,16 --measure (nftables of kube-proxy v1.37.2), bench/RESULTS.md machine under load, 2026-11-26";

/// The recorded measurements the model is fitted to.
pub const RECORDED: &[Recorded] = &[
    Recorded {
        backend: Backend::IptablesLegacy,
        rules: 1_739.0,
        seconds: 0.064,
        change_seconds: 0.035,
        source: THIS_MACHINE,
    },
    Recorded {
        backend: Backend::IptablesLegacy,
        rules: 6_929.0,
        seconds: 0.138,
        change_seconds: 0.060,
        source: THIS_MACHINE,
    },
    Recorded {
        backend: Backend::IptablesLegacy,
        rules: 27_689.0,
        seconds: 0.833,
        change_seconds: 0.272,
        source: THIS_MACHINE,
    },
    Recorded {
        backend: Backend::IptablesLegacy,
        rules: 151_423.0,
        seconds: 7.360,
        change_seconds: 1.014,
        source: K8S_LIMITS,
    },
    Recorded {
        backend: Backend::IptablesLegacy,
        rules: 587_369.0,
        seconds: 57.899,
        change_seconds: 4.892,
        source: K8S_LIMITS,
    },
    Recorded {
        backend: Backend::IptablesNft,
        rules: 1_739.0,
        seconds: 0.132,
        change_seconds: 0.045,
        source: THIS_MACHINE,
    },
    Recorded {
        backend: Backend::IptablesNft,
        rules: 6_929.0,
        seconds: 0.780,
        change_seconds: 0.062,
        source: THIS_MACHINE,
    },
    Recorded {
        backend: Backend::IptablesNft,
        rules: 27_689.0,
        seconds: 13.967,
        change_seconds: 0.193,
        source: THIS_MACHINE,
    },
    Recorded {
        backend: Backend::Nftables,
        rules: 356.0,
        seconds: 0.278,
        change_seconds: 0.091,
        source: NFT_V1_37,
    },
    Recorded {
        backend: Backend::Nftables,
        rules: 1_361.0,
        seconds: 0.416,
        change_seconds: 0.036,
        source: NFT_V1_37,
    },
    Recorded {
        backend: Backend::Nftables,
        rules: 5_381.0,
        seconds: 2.548,
        change_seconds: 0.180,
        source: NFT_V1_37,
    },
];

/// IPVS mode: one netlink operation per virtual server and per real server, at an assumed cost.
/// An assumption, not a measurement: this machine's kernel has no ip_vs module.
pub const IPVS_SECONDS_PER_OBJECT: f64 = 20e-6;

/// `t = a·x^b`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerLaw {
    pub a: f64,
    pub b: f64,
}

impl PowerLaw {
    /// Least squares in log-log over `(x, y)` points; `None` with fewer than two.
    pub fn fit(points: &[(f64, f64)]) -> Option<PowerLaw> {
        let pts: Vec<(f64, f64)> = points
            .iter()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .map(|(x, y)| (x.ln(), y.ln()))
            .collect();
        let n = pts.len() as f64;
        if pts.len() < 2 {
            return None;
        }
        let (sx, sy) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let (mx, my) = (sx / n, sy / n);
        let sxx: f64 = pts.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
        let sxy: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
        if sxx == 0.0 {
            return None;
        }
        let b = sxy / sxx;
        Some(PowerLaw {
            a: (my - b * mx).exp(),
            b,
        })
    }

    pub fn at(&self, x: f64) -> f64 {
        self.a * x.max(1.0).powf(self.b)
    }
}

/// The fitted models of a backend: (full sync, sync after one endpoint change), both over the
/// full sync's rule count.
pub fn fitted(backend: Backend) -> Option<(PowerLaw, PowerLaw)> {
    let of = |f: fn(&Recorded) -> f64| -> Vec<(f64, f64)> {
        RECORDED
            .iter()
            .filter(|r| r.backend == backend)
            .map(|r| (r.rules, f(r)))
            .collect()
    };
    Some((
        PowerLaw::fit(&of(|r| r.seconds))?,
        PowerLaw::fit(&of(|r| r.change_seconds))?,
    ))
}

/// Modelled seconds of a full sync and of the sync after one endpoint change, for a ruleset of
/// `rules` rules (iptables: filter + nat; nftables: rules + map elements); IPVS from its objects
/// (all, of the changed Service).
pub fn modelled(
    backend: Backend,
    rules: usize,
    ipvs_objects: (usize, usize),
) -> Option<(f64, f64)> {
    if backend == Backend::Ipvs {
        let (all, changed) = ipvs_objects;
        return Some((
            all as f64 * IPVS_SECONDS_PER_OBJECT,
            changed as f64 * IPVS_SECONDS_PER_OBJECT,
        ));
    }
    let (full, change) = fitted(backend)?;
    Some((full.at(rules as f64), change.at(rules as f64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_law_is_recovered_from_its_own_points() {
        let pts: Vec<(f64, f64)> = [1e3f64, 1e4, 1e5]
            .iter()
            .map(|x: &f64| (*x, 2e-6 * x.powf(1.3)))
            .collect();
        let m = PowerLaw::fit(&pts).expect("three points");
        assert!((m.b - 1.3).abs() < 1e-9, "{m:?}");
        assert!((m.at(5e4) / (2e-6 * 5e4f64.powf(1.3)) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn every_measurable_backend_has_a_fitted_model() {
        for b in Backend::MEASURABLE {
            assert!(fitted(b).is_some(), "{b:?}");
        }
    }
}
