//! The watch-semantics suite, including ports of the Kubernetes conformance "Watchers" tests
//! (test/e2e/apimachinery/watch.go). It runs against any face of the list/watch API: kube-sim's own
//! (`kube_api_watch.rs`) and herald's cache in front of kube-sim (herald-server's `kube_api_watch.rs`).
//! Writes go to kube-sim; reads and watches go to the face. The including crate provides
//! `crate::start_face(window, settings)`.

use std::time::Duration;

use kube_sim::Settings;
use serde_json::json;

use crate::common::*;

/// A face under test: kube-sim (the writer), the base URL reads go to, and the face's own controls.
pub struct Face {
    pub sim: kube_sim::Sim,
    pub read: String,
    /// Ends every open watch of the face (kube-sim: the close_watches fault).
    pub close_watches: Box<dyn Fn() + Send + Sync>,
    /// Forgets the face's watch history (kube-sim: the compact fault).
    pub compact: Box<dyn Fn() + Send + Sync>,
    /// Whatever must live as long as the face.
    pub keep: Box<dyn std::any::Any + Send + Sync>,
}

impl Face {
    /// ConfigMaps in `default`, where reads and watches go.
    fn cms(&self) -> String {
        format!("{}/api/v1/namespaces/default/configmaps", self.read)
    }

    /// The same collection on kube-sim, where writes go.
    fn writes(&self) -> String {
        format!("{}/api/v1/namespaces/default/configmaps", self.sim.url())
    }

    /// Waits until the face has seen every write so far (a no-op on kube-sim itself): a list at
    /// kube-sim's newest version waits for it, as from an apiserver's watch cache.
    async fn sync(&self) {
        let rv = self.sim.handle().resource_version();
        for _ in 0..50 {
            let r = client()
                .get(format!(
                    "{}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan&limit=1",
                    self.cms()
                ))
                .send()
                .await
                .expect("list");
            if r.status() == 200 {
                return;
            }
        }
        panic!("the face never reached resourceVersion {rv}");
    }
}

async fn start_empty() -> Face {
    crate::start_face(1000, Settings::default()).await
}

/// Conformance: "should observe add, update, and delete watch notifications on configmaps".
#[tokio::test]
async fn watchers_observe_add_update_and_delete_per_label_selector() {
    let face = start_empty().await;
    let (base, wbase) = (face.cms(), face.writes());
    let mut wa = Watch::open(&format!(
        "{base}?watch=true&labelSelector=watch-this-configmap%3Dmultiple-watchers-A"
    ))
    .await;
    let mut wb = Watch::open(&format!(
        "{base}?watch=true&labelSelector=watch-this-configmap%3Dmultiple-watchers-B"
    ))
    .await;
    let mut wab = Watch::open(&format!(
        "{base}?watch=true&labelSelector=watch-this-configmap+in+%28multiple-watchers-A%2Cmultiple-watchers-B%29"
    ))
    .await;
    let la = json!({"watch-this-configmap": "multiple-watchers-A"});
    let lb = json!({"watch-this-configmap": "multiple-watchers-B"});

    post(&wbase, &cm("e2e-watch-test-configmap-a", la.clone(), "0")).await;
    assert_eq!(
        wa.expect().await,
        ev("ADDED", "e2e-watch-test-configmap-a", "0")
    );
    assert_eq!(
        wab.expect().await,
        ev("ADDED", "e2e-watch-test-configmap-a", "0")
    );
    put(
        &format!("{wbase}/e2e-watch-test-configmap-a"),
        &cm("e2e-watch-test-configmap-a", la.clone(), "1"),
    )
    .await;
    assert_eq!(
        wa.expect().await,
        ev("MODIFIED", "e2e-watch-test-configmap-a", "1")
    );
    assert_eq!(
        wab.expect().await,
        ev("MODIFIED", "e2e-watch-test-configmap-a", "1")
    );
    delete(&format!("{wbase}/e2e-watch-test-configmap-a")).await;
    assert_eq!(
        wa.expect().await,
        ev("DELETED", "e2e-watch-test-configmap-a", "1")
    );
    assert_eq!(
        wab.expect().await,
        ev("DELETED", "e2e-watch-test-configmap-a", "1")
    );
    wb.expect_silence().await;

    post(&wbase, &cm("e2e-watch-test-configmap-b", lb.clone(), "0")).await;
    assert_eq!(
        wb.expect().await,
        ev("ADDED", "e2e-watch-test-configmap-b", "0")
    );
    assert_eq!(
        wab.expect().await,
        ev("ADDED", "e2e-watch-test-configmap-b", "0")
    );
    delete(&format!("{wbase}/e2e-watch-test-configmap-b")).await;
    assert_eq!(
        wb.expect().await,
        ev("DELETED", "e2e-watch-test-configmap-b", "0")
    );
    assert_eq!(
        wab.expect().await,
        ev("DELETED", "e2e-watch-test-configmap-b", "0")
    );
    wa.expect_silence().await;
}

/// Conformance: "should be able to start watching from a specific resource version".
#[tokio::test]
async fn a_watch_from_a_given_resource_version_sees_only_later_changes() {
    let face = start_empty().await;
    let (base, wbase) = (face.cms(), face.writes());
    let l = json!({"watch-this-configmap": "from-resource-version"});
    post(&wbase, &cm("c", l.clone(), "0")).await;
    let first = put(&format!("{wbase}/c"), &cm("c", l.clone(), "1")).await;
    put(&format!("{wbase}/c"), &cm("c", l.clone(), "2")).await;
    delete(&format!("{wbase}/c")).await;
    let mut w = Watch::open(&format!(
        "{base}?watch=true&resourceVersion={}",
        rv_of(&first)
    ))
    .await;
    assert_eq!(w.expect().await, ev("MODIFIED", "c", "2"));
    assert_eq!(w.expect().await, ev("DELETED", "c", "2"));
    w.expect_silence().await;
}

/// Conformance: "should be able to restart watching from the last resource version observed by the
/// previous watch".
#[tokio::test]
async fn a_watch_restarts_from_the_last_resource_version_it_saw() {
    let face = start_empty().await;
    let (base, wbase) = (face.cms(), face.writes());
    let l = json!({"watch-this-configmap": "watch-closed-and-restarted"});
    let mut w = Watch::open(&format!(
        "{base}?watch=true&labelSelector=watch-this-configmap%3Dwatch-closed-and-restarted"
    ))
    .await;
    post(&wbase, &cm("r", l.clone(), "0")).await;
    put(&format!("{wbase}/r"), &cm("r", l.clone(), "1")).await;
    let _ = w.expect().await;
    let e = w
        .next_change(Duration::from_secs(5))
        .await
        .expect("modified");
    let last_rv = rv_of(&e["object"]);
    drop(w);
    put(&format!("{wbase}/r"), &cm("r", l.clone(), "2")).await;
    delete(&format!("{wbase}/r")).await;
    let mut w2 = Watch::open(&format!(
        "{base}?watch=true&labelSelector=watch-this-configmap%3Dwatch-closed-and-restarted&resourceVersion={last_rv}"
    ))
    .await;
    assert_eq!(w2.expect().await, ev("MODIFIED", "r", "2"));
    assert_eq!(w2.expect().await, ev("DELETED", "r", "2"));
}

/// Conformance: "should observe an object deletion if it stops meeting the requirements of the selector".
#[tokio::test]
async fn an_object_leaving_the_selector_is_sent_as_deleted() {
    let face = start_empty().await;
    let (base, wbase) = (face.cms(), face.writes());
    let yes = json!({"watch-this-configmap": "label-changed-and-restored"});
    let no = json!({"watch-this-configmap": "wrong-value"});
    let mut w = Watch::open(&format!(
        "{base}?watch=true&labelSelector=watch-this-configmap%3Dlabel-changed-and-restored"
    ))
    .await;
    post(&wbase, &cm("s", yes.clone(), "0")).await;
    assert_eq!(w.expect().await, ev("ADDED", "s", "0"));
    put(&format!("{wbase}/s"), &cm("s", yes.clone(), "1")).await;
    assert_eq!(w.expect().await, ev("MODIFIED", "s", "1"));
    put(&format!("{wbase}/s"), &cm("s", no.clone(), "2")).await;
    assert_eq!(w.expect().await, ev("DELETED", "s", "2"));
    put(&format!("{wbase}/s"), &cm("s", no.clone(), "3")).await;
    w.expect_silence().await;
    put(&format!("{wbase}/s"), &cm("s", yes.clone(), "4")).await;
    assert_eq!(w.expect().await, ev("ADDED", "s", "4"));
    delete(&format!("{wbase}/s")).await;
    assert_eq!(w.expect().await, ev("DELETED", "s", "4"));
}

fn pod(name: &str, node: &str, v: &str) -> serde_json::Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]});
    if !node.is_empty() {
        spec["nodeName"] = json!(node);
    }
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "labels": {"v": v}},
           "spec": spec})
}

/// `(type, name, labels.v)` of a pod watch's next non-bookmark event.
async fn pod_event(w: &mut Watch) -> (String, String, String) {
    let e = w
        .next_change(Duration::from_secs(5))
        .await
        .expect("an event within 5s");
    let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    (
        s(&e["type"]),
        s(&e["object"]["metadata"]["name"]),
        s(&e["object"]["metadata"]["labels"]["v"]),
    )
}

/// A kubelet's watch (`fieldSelector=spec.nodeName=NODE`) sees its node's pods only, a pod scheduled
/// onto the node as ADDED, and, resumed from an older version, exactly its node's events since.
#[tokio::test]
async fn a_watch_of_one_nodes_pods_sees_that_node_only() {
    let face = start_empty().await;
    let base = format!("{}/api/v1/namespaces/default/pods", face.read);
    let wbase = format!("{}/api/v1/namespaces/default/pods", face.sim.url());
    let rv0 = face.sim.handle().resource_version();
    let on = |node: &str| {
        format!("{base}?watch=true&resourceVersion={rv0}&fieldSelector=spec.nodeName%3D{node}")
    };
    let mut n1 = Watch::open(&on("n1")).await;
    let mut n2 = Watch::open(&on("n2")).await;
    post(&wbase, &pod("a", "n1", "0")).await;
    post(&wbase, &pod("b", "n2", "0")).await;
    post(&wbase, &pod("c", "", "0")).await;
    assert_eq!(pod_event(&mut n1).await, ev("ADDED", "a", "0"));
    assert_eq!(pod_event(&mut n2).await, ev("ADDED", "b", "0"));
    put(&format!("{wbase}/c"), &pod("c", "n1", "1")).await;
    assert_eq!(pod_event(&mut n1).await, ev("ADDED", "c", "1"));
    put(&format!("{wbase}/a"), &pod("a", "n1", "1")).await;
    assert_eq!(pod_event(&mut n1).await, ev("MODIFIED", "a", "1"));
    delete(&format!("{wbase}/a")).await;
    assert_eq!(pod_event(&mut n1).await, ev("DELETED", "a", "1"));
    n1.expect_silence().await;
    n2.expect_silence().await;
    // Resumed from the first version: each node's own history, in order.
    let mut again = Watch::open(&on("n1")).await;
    for want in [
        ev("ADDED", "a", "0"),
        ev("ADDED", "c", "1"),
        ev("MODIFIED", "a", "1"),
        ev("DELETED", "a", "1"),
    ] {
        assert_eq!(pod_event(&mut again).await, want);
    }
    again.expect_silence().await;
    let mut again = Watch::open(&on("n2")).await;
    assert_eq!(pod_event(&mut again).await, ev("ADDED", "b", "0"));
    again.expect_silence().await;
    // A node with no pods yet: its watch starts empty and wakes for its first pod.
    let mut n3 = Watch::open(&on("n3")).await;
    n3.expect_silence().await;
    post(&wbase, &pod("d", "n3", "0")).await;
    assert_eq!(pod_event(&mut n3).await, ev("ADDED", "d", "0"));
}

/// A node's watch resumes from any version after its node's oldest event that left the window,
/// even when other nodes' events since then have left it (a quiet node's kubelet does not relist
/// because the cluster was busy); from before that event it gets 410 as any watch does.
#[tokio::test]
async fn a_nodes_watch_expires_only_when_its_nodes_events_left_the_window() {
    let face = crate::start_face(5, Settings::default()).await;
    let base = format!("{}/api/v1/namespaces/default/pods", face.read);
    let wbase = format!("{}/api/v1/namespaces/default/pods", face.sim.url());
    let before = face.sim.handle().resource_version();
    let a = rv_of(&post(&wbase, &pod("a", "n1", "0")).await);
    for i in 0..10 {
        post(&wbase, &pod(&format!("b{i}"), "n2", "0")).await;
    }
    let at = |rv: &str, sel: &str| format!("{base}?watch=true&resourceVersion={rv}{sel}");
    let n1 = "&fieldSelector=spec.nodeName%3Dn1";
    // Wait for the face to have the last write: the whole resource from `a` is expired then.
    let mut expired = false;
    for _ in 0..50 {
        let mut w = Watch::open(&at(&a, "")).await;
        let e = w.next(Duration::from_secs(5)).await.expect("an event");
        if e["type"] == "ERROR" {
            assert_eq!(e["object"]["code"], 410);
            expired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        expired,
        "the whole resource from {a} expires once 10 events follow in a window of 5"
    );
    let mut w = Watch::open(&at(&a, n1)).await;
    w.expect_silence().await;
    assert!(!w.ended, "n1 lost nothing after {a}");
    post(&wbase, &pod("c", "n1", "0")).await;
    assert_eq!(pod_event(&mut w).await, ev("ADDED", "c", "0"));
    let mut w = Watch::open(&at(&before.to_string(), n1)).await;
    let e = w
        .next(Duration::from_secs(5))
        .await
        .expect("an ERROR event");
    assert_eq!(
        (e["type"].as_str(), e["object"]["code"].as_i64()),
        (Some("ERROR"), Some(410))
    );
}

/// Conformance: "should receive events on concurrent watches in same order".
#[tokio::test]
async fn a_hundred_concurrent_watches_see_the_same_event_order() {
    let face = start_empty().await;
    let (base, wbase) = (face.cms(), face.writes());
    let start_rv = face.sim.handle().resource_version();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let wbase = wbase.clone();
            tokio::spawn(async move {
                for i in 0..10 {
                    let name = format!("w{w}-{i}");
                    post(&wbase, &cm(&name, json!({}), "0")).await;
                    if i % 3 == 0 {
                        delete(&format!("{wbase}/{name}")).await;
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.await.expect("writer");
    }
    let expected_events = 40 + 4 * 4;
    let mut orders = Vec::new();
    let watches: Vec<_> = (0..100)
        .map(|_| {
            let url = format!("{base}?watch=true&resourceVersion={start_rv}");
            tokio::spawn(async move {
                let mut w = Watch::open(&url).await;
                let mut seen = Vec::new();
                while seen.len() < expected_events {
                    let e = w.next_change(Duration::from_secs(5)).await.expect("event");
                    seen.push(rv_of(&e["object"]));
                }
                seen
            })
        })
        .collect();
    for w in watches {
        orders.push(w.await.expect("watch task"));
    }
    assert!(
        orders.iter().all(|o| o == &orders[0]),
        "every watch sees one order"
    );
    let rvs: Vec<u64> = orders[0]
        .iter()
        .map(|r| r.parse().expect("numeric RV"))
        .collect();
    assert!(
        rvs.windows(2).all(|w| w[0] < w[1]),
        "RVs strictly increase: {rvs:?}"
    );
}

#[tokio::test]
async fn a_watch_without_resource_version_starts_with_synthetic_added_events() {
    let face = start_empty().await;
    let (base, wbase) = (face.cms(), face.writes());
    post(&wbase, &cm("pre-1", json!({}), "a")).await;
    post(&wbase, &cm("pre-2", json!({}), "b")).await;
    face.sync().await;
    let mut w = Watch::open(&format!("{base}?watch=1")).await;
    assert_eq!(w.expect().await, ev("ADDED", "pre-1", "a"));
    assert_eq!(w.expect().await, ev("ADDED", "pre-2", "b"));
    post(&wbase, &cm("post", json!({}), "c")).await;
    assert_eq!(w.expect().await, ev("ADDED", "post", "c"));
}

#[tokio::test]
async fn send_initial_events_ends_with_the_initial_events_end_bookmark() {
    let face = start_empty().await;
    let (base, wbase) = (face.cms(), face.writes());
    post(&wbase, &cm("one", json!({}), "1")).await;
    let rv = face.sim.handle().resource_version();
    face.sync().await;
    let mut w = Watch::open(&format!(
        "{base}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    ))
    .await;
    assert_eq!(w.expect().await, ev("ADDED", "one", "1"));
    let b = w.next(Duration::from_secs(5)).await.expect("bookmark");
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(
        b["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(b["object"]["kind"], "ConfigMap");
    assert!(
        b["object"]["metadata"]["resourceVersion"]
            .as_str()
            .expect("rv")
            .parse::<u64>()
            .expect("n")
            >= rv
    );
    // Without allowWatchBookmarks the apiserver (1.37) serves the initial events all the same,
    // but no bookmark says where they end.
    let mut w = Watch::open(&format!(
        "{base}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1"
    ))
    .await;
    assert_eq!(w.expect().await, ev("ADDED", "one", "1"));
    assert!(
        w.next(Duration::from_secs(3)).await.is_none(),
        "no bookmark, the watch ends"
    );
    // Without resourceVersionMatch=NotOlderThan it is invalid, as in the apiserver.
    let r = client()
        .get(format!(
            "{base}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 422);
}

#[tokio::test]
async fn bookmarks_arrive_periodically_and_before_the_timeout() {
    let settings = Settings {
        bookmark_interval: Duration::from_millis(300),
        ..Settings::default()
    };
    let face = crate::start_face(1000, settings).await;
    let (base, wbase) = (face.cms(), face.writes());
    let began = std::time::Instant::now();
    // Bookmarks tell of progress the watcher has not seen: writes its selector leaves out.
    let mut w = Watch::open(&format!(
        "{base}?watch=true&allowWatchBookmarks=true&timeoutSeconds=2&labelSelector=watched%3Dyes&resourceVersion={}",
        face.sim.handle().resource_version()
    ))
    .await;
    let writer = tokio::spawn(async move {
        for i in 0..18 {
            post(&wbase, &cm(&format!("unwatched-{i}"), json!({}), "x")).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut bookmarks = 0;
    while let Some(e) = w.next(Duration::from_secs(4)).await {
        assert_eq!(e["type"], "BOOKMARK");
        bookmarks += 1;
    }
    writer.await.expect("the writer");
    assert!(w.ended, "the server ends the watch at timeoutSeconds");
    let took = began.elapsed();
    assert!(
        took >= Duration::from_millis(1900),
        "never closes early: {took:?}"
    );
    assert!(
        bookmarks >= 3,
        "periodic bookmarks plus one before the timeout, got {bookmarks}"
    );
}

#[tokio::test]
async fn a_quiet_watch_gets_no_bookmarks() {
    let settings = Settings {
        bookmark_interval: Duration::from_millis(200),
        ..Settings::default()
    };
    let face = crate::start_face(1000, settings).await;
    let base = face.cms();
    // Nothing happens after the version the watch starts from: as from the apiserver's watch
    // cache, no bookmark (there is no progress to tell of), then the end at the timeout.
    let mut w = Watch::open(&format!(
        "{base}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion={}",
        face.sim.handle().resource_version()
    ))
    .await;
    assert!(w.next(Duration::from_secs(3)).await.is_none(), "no event");
    assert!(w.ended, "the server ends the watch at timeoutSeconds");
}

#[tokio::test]
async fn a_watch_from_a_resource_version_older_than_the_window_gets_410_expired() {
    let face = crate::start_face(5, Settings::default()).await;
    let (base, wbase) = (face.cms(), face.writes());
    let old = face.sim.handle().resource_version();
    for i in 0..10 {
        post(&wbase, &cm(&format!("c{i}"), json!({}), "0")).await;
    }
    face.sync().await;
    let mut w = Watch::open(&format!("{base}?watch=true&resourceVersion={old}")).await;
    let e = w
        .next(Duration::from_secs(5))
        .await
        .expect("an ERROR event");
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    assert!(
        w.next(Duration::from_secs(2)).await.is_none() && w.ended,
        "the watch ends after the error"
    );
}

#[tokio::test]
async fn faults_close_watches_and_compaction_expires_old_versions() {
    let face = start_empty().await;
    let (base, wbase) = (face.cms(), face.writes());
    let rv = face.sim.handle().resource_version();
    let mut w = Watch::open(&format!("{base}?watch=true&resourceVersion={rv}")).await;
    (face.close_watches)();
    assert!(
        w.next(Duration::from_secs(3)).await.is_none() && w.ended,
        "closed by the fault"
    );
    post(&wbase, &cm("after", json!({}), "0")).await;
    face.sync().await;
    (face.compact)();
    let mut w = Watch::open(&format!("{base}?watch=true&resourceVersion={rv}")).await;
    let e = w.next(Duration::from_secs(3)).await.expect("error event");
    assert_eq!(e["object"]["code"], 410);
}

#[tokio::test]
async fn a_watch_from_a_future_resource_version_times_out_with_504() {
    let face = start_empty().await;
    let r = client()
        .get(format!(
            "{}?watch=true&resourceVersion=99999999",
            face.cms()
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 504);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1"),
        "504 says when to retry"
    );
    let status: serde_json::Value = r.json().await.expect("Status");
    assert_eq!(status["reason"], "Timeout");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("Too large resource version"))
    );
}
