//! What the cluster's watchers cost the apiserver, from herald-audit's watch fan-out model (the one
//! HA010 uses: watchers per kind from the inventory, events per second from the churn, event sizes
//! from the objects' real JSON): directly, through one herald, and through an HA pair of heralds;
//! and the same as the number of consumers grows.

use herald_audit::Cluster;
use herald_audit::rules::{WatchFanout, watch_fanout};
use serde::Serialize;

/// One kind's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindRow {
    pub kind: String,
    pub watches: u64,
    pub watchers: Vec<(String, u64)>,
    pub events_per_second: f64,
    pub event_bytes: f64,
    pub direct_bytes_per_second: f64,
    pub herald_bytes_per_second: f64,
    pub herald_pair_bytes_per_second: f64,
}

/// One point of the egress curve: every consumer count scaled by `factor`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EgressPoint {
    pub factor: f64,
    pub watches: u64,
    pub direct_bytes_per_second: f64,
    pub herald_bytes_per_second: f64,
    pub herald_pair_bytes_per_second: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fanout {
    pub churn_per_second: f64,
    pub kinds: Vec<KindRow>,
    pub curve: Vec<EgressPoint>,
}

impl Fanout {
    pub fn of(cluster: &Cluster, churn: f64, factors: &[f64]) -> Fanout {
        let model = watch_fanout(cluster, churn);
        Fanout {
            churn_per_second: churn,
            kinds: rows(&model),
            curve: factors.iter().map(|f| point(&model, *f)).collect(),
        }
    }

    pub fn total(&self) -> EgressPoint {
        self.curve
            .iter()
            .find(|p| p.factor == 1.0)
            .cloned()
            .unwrap_or(EgressPoint {
                factor: 1.0,
                watches: self.kinds.iter().map(|k| k.watches).sum(),
                direct_bytes_per_second: self.kinds.iter().map(|k| k.direct_bytes_per_second).sum(),
                herald_bytes_per_second: self.kinds.iter().map(|k| k.herald_bytes_per_second).sum(),
                herald_pair_bytes_per_second: self
                    .kinds
                    .iter()
                    .map(|k| k.herald_pair_bytes_per_second)
                    .sum(),
            })
    }
}

fn rows(model: &WatchFanout) -> Vec<KindRow> {
    model
        .kinds
        .iter()
        .map(|k| KindRow {
            kind: k.kind.name().to_string(),
            watches: k.watches(),
            watchers: k.watchers.iter().map(|(w, n)| (w.clone(), *n)).collect(),
            events_per_second: k.events_per_second,
            event_bytes: k.event_bytes,
            direct_bytes_per_second: k.direct_bytes_per_second(),
            herald_bytes_per_second: k.herald_bytes_per_second(1),
            herald_pair_bytes_per_second: k.herald_bytes_per_second(2),
        })
        .collect()
}

fn point(model: &WatchFanout, factor: f64) -> EgressPoint {
    let mut p = EgressPoint {
        factor,
        watches: 0,
        direct_bytes_per_second: 0.0,
        herald_bytes_per_second: 0.0,
        herald_pair_bytes_per_second: 0.0,
    };
    for k in &model.kinds {
        let n = (k.watches() as f64 * factor).round() as u64;
        p.watches += n;
        p.direct_bytes_per_second += k.bytes_per_watch() * n as f64;
        if n > 0 {
            p.herald_bytes_per_second += k.bytes_per_watch();
            p.herald_pair_bytes_per_second += 2.0 * k.bytes_per_watch();
        }
    }
    p
}
