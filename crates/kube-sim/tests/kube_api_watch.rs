//! The watch-semantics suite (`suite/watch.rs`) against kube-sim's own face.

mod common;
#[path = "suite/watch.rs"]
mod suite;

use kube_sim::{Fault, Settings};
use suite::Face;

pub async fn start_face(window: usize, settings: Settings) -> Face {
    let sim = common::start_empty_with(window, settings).await;
    let read = sim.url();
    let (closer, compacter) = (sim.handle(), sim.handle());
    Face {
        sim,
        read,
        close_watches: Box::new(move || closer.fault(Fault::CloseWatches).expect("fault")),
        compact: Box::new(move || compacter.fault(Fault::Compact).expect("fault")),
        keep: Box::new(()),
    }
}
