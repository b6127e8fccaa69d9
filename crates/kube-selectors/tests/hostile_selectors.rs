//! Label and field selectors arrive from any client (query parameters, job files): for any input the
//! parsers return a selector or an error naming what is wrong, and never panic. 10,000 cases each.

use kube_selectors::{FieldSelector, LabelSelector};
use proptest::prelude::*;

/// Strings built from selector syntax, so most cases get past the first character.
fn selector_like() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("app".to_string()),
        Just("example.com/tier".to_string()),
        Just("=".to_string()),
        Just("==".to_string()),
        Just("!=".to_string()),
        Just("!".to_string()),
        Just(",".to_string()),
        Just(" ".to_string()),
        Just(" in ".to_string()),
        Just(" notin ".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just(">".to_string()),
        Just("<".to_string()),
        Just("\\".to_string()),
        "[a-zA-Z0-9._/-]{0,70}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(token, 0..12).prop_map(|t| t.concat())
}

fn input() -> impl Strategy<Value = String> {
    prop_oneof![selector_like(), any::<String>()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn any_label_selector_parses_or_says_what_is_wrong(s in input()) {
        match LabelSelector::parse(&s) {
            Ok(sel) => {
                // A parsed selector can be evaluated.
                let _ = sel.matches(&std::collections::BTreeMap::<String, String>::new());
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(
                    msg.contains("requirement") || msg.contains("label key") || msg.contains("label value"),
                    "the error names the part at fault: {msg:?} for {s:?}"
                );
            }
        }
    }

    #[test]
    fn any_field_selector_parses_or_says_what_is_wrong(s in input()) {
        match FieldSelector::parse(&s) {
            Ok(sel) => {
                let _ = sel.matches(|_| None);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(
                    msg.contains("field selector") || msg.contains("requirement"),
                    "the error names the selector: {msg:?} for {s:?}"
                );
            }
        }
    }
}
