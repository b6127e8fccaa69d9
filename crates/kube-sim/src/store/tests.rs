//! Store semantics: one RV counter, preconditions, rewinding lists, the history window and compaction.

use serde_json::json;

use super::*;

fn ns(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn cm(ns: &str, name: &str, data: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "labels": {"app": data}}, "data": {"k": data}})
}

fn mk_store(window: usize) -> Store {
    let s = Store::new(window);
    s.create(Kind::Namespace, ns("a")).expect("namespace");
    s.create(Kind::Namespace, ns("b")).expect("namespace");
    s
}

fn names(page: &Page) -> Vec<String> {
    page.items
        .iter()
        .map(|e| format!("{}/{}", e.key.0, e.key.1))
        .collect()
}

#[test]
fn one_resource_version_counter_spans_all_kinds() {
    let s = mk_store(100);
    let rv0 = s.resource_version();
    let c = s
        .create(Kind::ConfigMap, cm("a", "x", "1"))
        .expect("create");
    let n = s.create(Kind::Namespace, ns("c")).expect("create");
    assert_eq!(c.rv, rv0 + 1);
    assert_eq!(n.rv, rv0 + 2);
    let stored: Value = serde_json::from_slice(&c.bytes.get()).expect("json");
    assert_eq!(
        stored["metadata"]["resourceVersion"],
        json!((rv0 + 1).to_string())
    );
    assert!(
        stored["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| u.len() == 36)
    );
    assert!(stored["metadata"]["creationTimestamp"].is_string());
}

#[test]
fn preconditions_give_the_apiserver_errors() {
    let s = mk_store(100);
    let first = s
        .create(Kind::ConfigMap, cm("a", "x", "1"))
        .expect("create");
    assert!(matches!(
        s.create(Kind::ConfigMap, cm("a", "x", "1")),
        Err(StoreError::AlreadyExists { .. })
    ));
    let mut stale = cm("a", "x", "2");
    stale["metadata"]["resourceVersion"] = json!("1");
    assert!(matches!(
        s.update(Kind::ConfigMap, stale),
        Err(StoreError::Conflict { .. })
    ));
    let mut fresh = cm("a", "x", "2");
    fresh["metadata"]["resourceVersion"] = json!(first.rv.to_string());
    let second = s
        .update(Kind::ConfigMap, fresh)
        .expect("update with the current RV");
    let uid = |e: &Entry| {
        serde_json::from_slice::<serde_json::Value>(&e.bytes.get()).expect("json")["metadata"]["uid"]
            .clone()
    };
    assert_eq!(uid(&second), uid(&first), "uid survives updates");
    assert!(uid(&first).is_string());
    assert!(matches!(
        s.update(Kind::ConfigMap, cm("a", "nope", "1")),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        s.create(Kind::ConfigMap, cm("missing-ns", "x", "1")),
        Err(StoreError::NotFound { plural, .. }) if plural == "namespaces"
    ));
    let gone = s.delete(Kind::ConfigMap, "a", "x", None).expect("delete");
    assert_eq!(gone.rv, second.rv);
    assert!(matches!(
        s.delete(Kind::ConfigMap, "a", "x", None),
        Err(StoreError::NotFound { .. })
    ));
}

#[test]
fn malformed_bodies_are_rejected_before_they_are_stored() {
    let s = mk_store(100);
    let bad_type = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}, "spec": {"containers": "nope"}});
    assert!(matches!(
        s.create(Kind::Pod, bad_type),
        Err(StoreError::BadRequest(_))
    ));
    let wrong_kind =
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "p", "namespace": "a"}});
    assert!(matches!(
        s.create(Kind::Pod, wrong_kind),
        Err(StoreError::BadRequest(_))
    ));
    assert!(matches!(
        s.create(Kind::ConfigMap, cm("a", "Bad_Name", "1")),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        s.create(Kind::ConfigMap, json!({"metadata": {"namespace": "a"}})),
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(s.counts()[&Kind::Pod], 0);
}

#[test]
fn an_exact_list_rewinds_to_the_state_at_that_version() {
    let s = mk_store(100);
    s.create(Kind::ConfigMap, cm("a", "x", "old"))
        .expect("create");
    s.create(Kind::ConfigMap, cm("b", "y", "1"))
        .expect("create");
    let then = s.resource_version();
    s.update(Kind::ConfigMap, cm("a", "x", "new"))
        .expect("update");
    s.delete(Kind::ConfigMap, "b", "y", None).expect("delete");
    s.create(Kind::ConfigMap, cm("a", "z", "1"))
        .expect("create");
    let all = |_: &Entry| true;
    let past = s
        .list(
            Kind::ConfigMap,
            None,
            ListAt::Exact(then),
            None,
            None,
            None,
            &all,
        )
        .expect("in window");
    assert_eq!(names(&past), ["a/x", "b/y"]);
    assert_eq!(past.rv, then);
    assert_eq!(past.items[0].labels.get("app"), Some("old"));
    let now = s
        .list(
            Kind::ConfigMap,
            None,
            ListAt::Latest,
            None,
            None,
            None,
            &all,
        )
        .expect("latest");
    assert_eq!(names(&now), ["a/x", "a/z"]);
    assert!(matches!(
        s.list(
            Kind::ConfigMap,
            None,
            ListAt::NotOlderThan(now.rv + 5),
            None,
            None,
            None,
            &all
        ),
        Err(StoreError::TooLarge { .. })
    ));
}

#[test]
fn pages_continue_from_the_last_key_and_count_what_remains() {
    let s = mk_store(100);
    for (n, name) in ["e", "d", "c", "b", "a"].iter().enumerate() {
        s.create(
            Kind::ConfigMap,
            cm(if n % 2 == 0 { "a" } else { "b" }, name, "1"),
        )
        .expect("create");
    }
    let all = |_: &Entry| true;
    let p1 = s
        .list(
            Kind::ConfigMap,
            None,
            ListAt::Latest,
            None,
            Some(2),
            None,
            &all,
        )
        .expect("page 1");
    assert_eq!(names(&p1), ["a/a", "a/c"]);
    assert_eq!(p1.remaining, 3);
    // A write between pages must not show up: the next pages read the first page's RV.
    s.create(Kind::ConfigMap, cm("a", "b0", "1"))
        .expect("create");
    let p2 = s
        .list(
            Kind::ConfigMap,
            None,
            ListAt::Exact(p1.rv),
            p1.next.as_ref(),
            Some(2),
            None,
            &all,
        )
        .expect("page 2");
    assert_eq!(names(&p2), ["a/e", "b/b"]);
    let p3 = s
        .list(
            Kind::ConfigMap,
            None,
            ListAt::Exact(p1.rv),
            p2.next.as_ref(),
            Some(2),
            None,
            &all,
        )
        .expect("page 3");
    assert_eq!(names(&p3), ["b/d"]);
    assert!(p3.next.is_none());
    let in_b = s
        .list(
            Kind::ConfigMap,
            Some("b"),
            ListAt::Latest,
            None,
            None,
            None,
            &all,
        )
        .expect("ns");
    assert_eq!(names(&in_b), ["b/b", "b/d"]);
}

#[test]
fn the_history_window_and_compaction_expire_old_resource_versions() {
    let s = mk_store(3);
    let start = s.resource_version();
    for i in 0..5 {
        s.create(Kind::ConfigMap, cm("a", &format!("c{i}"), "1"))
            .expect("create");
    }
    assert!(matches!(
        s.events_after(Kind::ConfigMap, start, usize::MAX),
        Err(StoreError::Expired { .. })
    ));
    let (recent, complete_to) = s
        .events_after(Kind::ConfigMap, s.resource_version() - 2, usize::MAX)
        .expect("in window");
    assert_eq!(recent.len(), 2);
    assert_eq!(complete_to, s.resource_version());
    // Another kind's history is its own: namespaces still resume from the start.
    assert!(s.events_after(Kind::Namespace, start, usize::MAX).is_ok());
    s.compact();
    assert!(matches!(
        s.events_after(Kind::Namespace, start, usize::MAX),
        Err(StoreError::Expired { .. })
    ));
    assert!(
        s.events_after(Kind::ConfigMap, s.resource_version(), usize::MAX)
            .expect("at head")
            .0
            .is_empty()
    );
}

#[test]
fn deleted_events_carry_the_last_state_at_the_deletion_rv() {
    let s = mk_store(100);
    s.create(Kind::ConfigMap, cm("a", "x", "1"))
        .expect("create");
    let before = s.resource_version();
    s.delete(Kind::ConfigMap, "a", "x", None).expect("delete");
    let (events, _) = s
        .events_after(Kind::ConfigMap, before, usize::MAX)
        .expect("window");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].ty, EventType::Deleted);
    let line: Value = serde_json::from_slice(&events[0].line()).expect("json line");
    assert_eq!(line["type"], "DELETED");
    assert_eq!(
        line["object"]["metadata"]["resourceVersion"],
        json!(s.resource_version().to_string())
    );
    assert_eq!(line["object"]["data"]["k"], "1");
}
