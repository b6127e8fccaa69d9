//! kube-sim
