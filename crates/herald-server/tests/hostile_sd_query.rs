//! The SD query string comes from any client: for any input it parses or is refused with an error
//! naming the parameter — never a panic. 10,000 cases each.

use herald_server::http::{SdQuery, parse_duration};
use proptest::prelude::*;

fn query_like() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("shard"),
        Just("shards"),
        Just("wait"),
        Just("x"),
        Just("")
    ];
    let value = prop_oneof![
        "[0-9]{0,22}",
        "[0-9]{1,4}(ms|s|m|h|d|w|y|us|ns)?",
        Just("-1".to_string()),
        Just("1.5s".to_string()),
        any::<String>(),
    ];
    let pair = prop_oneof![
        (key.clone(), value).prop_map(|(k, v)| format!("{k}={v}")),
        key.prop_map(str::to_string),
    ];
    prop::collection::vec(pair, 0..5).prop_map(|p| p.join("&"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn any_sd_query_parses_or_names_the_parameter(q in prop_oneof![query_like(), any::<String>()]) {
        match SdQuery::parse(Some(&q)) {
            Ok(parsed) => {
                if let Some(s) = parsed.shard {
                    prop_assert!(s.index < s.count, "shard {} of {}", s.index, s.count);
                }
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("query parameter"), "{msg:?} for {q:?}");
            }
        }
    }

    #[test]
    fn any_duration_parses_or_says_why(d in prop_oneof!["[0-9]{0,25}[a-zµ]{0,3}", any::<String>()]) {
        if let Err(why) = parse_duration(&d) {
            prop_assert!(!why.is_empty());
        }
    }
}
