use super::*;

#[test]
fn schema_parses_and_knows_the_served_kinds() {
    let s = schema();
    for (v, k) in [
        ("v1", "Pod"),
        ("v1", "Service"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("networking.k8s.io/v1", "ServiceCIDR"),
        ("apps/v1", "Deployment"),
    ] {
        assert!(s.kind(v, k).is_some(), "{v} {k}");
    }
    assert!(s.message("meta/v1.Status").is_some());
}
