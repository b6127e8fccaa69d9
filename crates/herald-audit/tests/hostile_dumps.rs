//! Audit dumps are whatever a user points `--from` at: for any bytes, as JSON, YAML or sniffed,
//! loading returns an inventory or an error naming the file and what is wrong — never a panic.
//! 10,000 cases.

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;

/// One directory for every case: a dump file per extension, overwritten each time.
fn dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("tmp")).path()
}

fn dump_like() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[".to_vec()),
        Just(b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"namespace\":\"n\"},\"spec\":{\"containers\":[]}}".to_vec()),
        Just(b"{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"s\"},\"spec\":{\"ports\":[{\"port\":80}]}}".to_vec()),
        Just(b"{\"kind\":\"Node\",\"metadata\":{\"name\":7}}".to_vec()),
        Just(b"]}".to_vec()),
        Just(b"---\n".to_vec()),
        Just(b"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n".to_vec()),
        Just(b"kind: ConfigMap\ndata: {a: *x}\n".to_vec()),
        Just(b"items:\n- ~\n".to_vec()),
        Just(b",".to_vec()),
        Just(b"{".to_vec()),
        Just(b"\"".to_vec()),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(piece, 0..8).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn any_dump_loads_or_names_the_file_and_the_fault(
        bytes in prop_oneof![dump_like(), prop::collection::vec(any::<u8>(), 0..64)],
        ext in prop_oneof![Just("json"), Just("yaml"), Just("txt")],
    ) {
        let path = dir().join(format!("dump.{ext}"));
        std::fs::write(&path, &bytes).expect("write");
        match herald_audit::load::load_paths(std::slice::from_ref(&path)) {
            Ok(_) => {}
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("dump."), "the error names the file: {msg:?}");
            }
        }
    }
}
