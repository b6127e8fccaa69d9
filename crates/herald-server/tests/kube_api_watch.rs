//! kube-sim's watch-semantics suite (conformance "Watchers" included) run against herald's Kubernetes
//! API: writes go to kube-sim, reads and watches to herald's cache in front of it.

#[path = "../../kube-sim/tests/common/mod.rs"]
mod common;
#[path = "../../kube-sim/tests/suite/watch.rs"]
mod suite;
#[path = "support/kube.rs"]
mod support;

use std::sync::Arc;

use herald_server::KubeApiOptions;
use kube_sim::Settings;
use suite::Face;

pub async fn start_face(window: usize, settings: Settings) -> Face {
    let sim = common::start_empty_with(1000, Settings::default()).await;
    let api = KubeApiOptions {
        resources: vec![
            kube_face::Resource::builtin("configmaps").expect("cm"),
            kube_face::Resource::builtin("pods").expect("pods"),
        ],
        history_window: window,
        watch: settings,
        ..KubeApiOptions::default()
    };
    let herald = support::start_herald(&sim.url(), "jobs: []\n", api, "herald/test").await;
    let read = herald.kube_url().expect("kube face on");
    let shared = herald.shared().clone();
    let compacting: Arc<herald_server::Shared> = shared.clone();
    Face {
        sim,
        read,
        close_watches: Box::new(move || {
            shared
                .kube_api
                .as_ref()
                .expect("kube face on")
                .close_watches()
        }),
        compact: Box::new(move || compacting.cache.compact_all()),
        keep: Box::new(herald),
    }
}
