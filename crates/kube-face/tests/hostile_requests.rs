//! What a downstream client controls — the query string, the path, continue tokens — and what an
//! upstream apiserver sends — objects — never panic the face, and every refusal says what is wrong.
//! 10,000 cases each.

use kube_face::request::{decode_continue, encode_continue, parse_query, route};
use kube_face::scan::{head, strip_managed_fields, with_resource_version};
use kube_face::{Catalog, Resource};
use proptest::prelude::*;

fn query_like() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("watch"),
        Just("resourceVersion"),
        Just("resourceVersionMatch"),
        Just("limit"),
        Just("continue"),
        Just("labelSelector"),
        Just("fieldSelector"),
        Just("timeoutSeconds"),
        Just("allowWatchBookmarks"),
        Just("sendInitialEvents"),
        Just("dryRun"),
        Just("x"),
    ];
    let value = prop_oneof![
        "[a-zA-Z0-9=!,.()% +-]{0,20}",
        Just("%ZZ".to_string()),
        Just("%".to_string()),
        Just("-1".to_string()),
        Just("99999999999999999999999".to_string()),
        any::<String>(),
    ];
    prop::collection::vec((key, value), 0..6).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    })
}

fn bytes_like_object() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"\"metadata\":".to_vec()),
        Just(b"{\"name\":\"p\",\"namespace\":\"n\",\"resourceVersion\":\"12\"}".to_vec()),
        Just(b"\"resourceVersion\":".to_vec()),
        Just(b"\"managedFields\":[{\"a\":1}]".to_vec()),
        Just(b"\"labels\":{\"a\":\"b\"}".to_vec()),
        Just(b"\"spec\":{\"nodeName\":\"n1\"}".to_vec()),
        Just(b",".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"\\u00".to_vec()),
        Just(b"1e999".to_vec()),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(piece, 0..14).prop_map(|p| p.concat())
}

fn catalog() -> Catalog {
    Catalog {
        resources: vec![Resource::builtin("pods").expect("pods")],
        writable: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn any_query_string_parses_or_is_a_400_naming_the_parameter(q in prop_oneof![query_like(), any::<String>()]) {
        let pods = Resource::builtin("pods").expect("pods");
        if let Err(e) = parse_query(Some(&q), &pods) {
            prop_assert_eq!(e.code, 400);
            let named = ["watch", "limit", "labelSelector", "fieldSelector", "field label", "timeoutSeconds",
                "allowWatchBookmarks", "sendInitialEvents", "resourceVersionMatch"];
            prop_assert!(named.iter().any(|n| e.message.contains(n)), "{} for {:?}", e.message, q);
        }
    }

    #[test]
    fn any_path_routes_or_is_refused(path in prop_oneof!["(/[a-z0-9.{}%-]{0,12}){0,8}", any::<String>()]) {
        if let Err(e) = route(&path, &catalog(), "") {
            prop_assert!(e.code >= 400 && !e.message.is_empty());
        }
    }

    #[test]
    fn any_continue_token_decodes_or_is_refused_naming_it(t in prop_oneof![any::<String>(), "[0-9a-f]{0,40}"]) {
        if let Err(e) = decode_continue(&t) {
            prop_assert!(e.message.contains("continue token"), "{}", e.message);
        }
    }

    #[test]
    fn continue_tokens_round_trip(rv in any::<u64>(), ns in "[a-z0-9-]{0,20}", name in any::<String>()) {
        let token = encode_continue(rv, &(ns.as_str().into(), name.as_str().into()));
        prop_assert_eq!(decode_continue(&token).expect("own token"), (rv, (ns.as_str().into(), name.as_str().into())));
    }

    #[test]
    fn any_upstream_object_is_read_or_refused_with_what_is_wrong(raw in prop_oneof![bytes_like_object(), prop::collection::vec(any::<u8>(), 0..64)]) {
        let pods = Resource::builtin("pods").expect("pods");
        match head(&pods, &raw) {
            Ok(h) => prop_assert!(!h.key.1.is_empty()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        let _ = strip_managed_fields(&raw);
        let _ = with_resource_version(&raw, 7);
    }
}

#[test]
fn a_continue_token_with_multibyte_characters_is_refused_not_a_panic() {
    let e = decode_continue("aéb").expect_err("not hex");
    assert!(e.message.contains("continue token"), "{}", e.message);
}
