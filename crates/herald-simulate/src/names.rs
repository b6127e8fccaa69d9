//! Chain and set names as kube-proxy derives them: a SHA-256 of the service port's name (and the
//! endpoint's address), base32-encoded and truncated.
//!
//! iptables: `portProtoHash` and `servicePortEndpointChainName` in kubernetes
//! pkg/proxy/iptables/proxier.go (aroradaman/kubernetes@4177b600d4b97a67b765a18ddeeb295ef757b212,
//! a fork tracking master): `KUBE-SVC-` + `base32(sha256(servicePortName + protocol))[:16]`, and
//! `KUBE-SEP-` the same over `servicePortName + protocol + "ip:port"`.
//! nftables: `hashAndTruncate`, `servicePortChainNameBase` and `servicePortEndpointChainNameBase` in
//! pkg/proxy/nftables/proxier.go: `base32(sha256(name))[:8] + "-" + name`, where name is
//! `namespace/service/protocol/portName` (and `__ip/port` for an endpoint), cut at 247 bytes
//! (knftables.NameLengthMax 256 less the longest prefix, `external-`).

use data_encoding::BASE32;
use sha2::{Digest, Sha256};

fn base32_sha256(input: &str) -> String {
    BASE32.encode(&Sha256::digest(input.as_bytes()))
}

/// `ns/name:port`, or `ns/name` for an unnamed port (`ServicePortName.String()` in
/// kubernetes pkg/proxy/types.go).
pub fn service_port_name(namespace: &str, name: &str, port_name: &str) -> String {
    if port_name.is_empty() {
        format!("{namespace}/{name}")
    } else {
        format!("{namespace}/{name}:{port_name}")
    }
}

/// The 16-character hash of the iptables per-service chains (KUBE-SVC/SVL/EXT/FW).
pub fn port_proto_hash(service_port_name: &str, protocol: &str) -> String {
    let mut h = base32_sha256(&format!("{service_port_name}{protocol}"));
    h.truncate(16);
    h
}

/// `KUBE-SEP-…` for one endpoint (`ip:port`) of a service port.
pub fn endpoint_chain(service_port_name: &str, protocol: &str, endpoint: &str) -> String {
    let h = base32_sha256(&format!("{service_port_name}{protocol}{endpoint}"));
    format!("KUBE-SEP-{}", &h[..16])
}

const NFT_BASE_MAX: usize = 256 - "external-".len();

fn hash_and_truncate(name: &str) -> String {
    let h = base32_sha256(name);
    let mut out = format!("{}-{name}", &h[..8]);
    if out.len() > NFT_BASE_MAX {
        // Names are ASCII (DNS labels, protocols, addresses): byte cuts are char cuts.
        out.truncate(NFT_BASE_MAX - 3);
        out.push_str("...");
    }
    out
}

/// The nftables base name of a service port's chains, e.g. `ULMVA6XW-ns1/svc1/tcp/p80`.
pub fn nft_service_base(namespace: &str, name: &str, protocol: &str, port_name: &str) -> String {
    hash_and_truncate(&format!("{namespace}/{name}/{protocol}/{port_name}"))
}

/// The nftables base name of an endpoint's chain and affinity set.
pub fn nft_endpoint_base(
    namespace: &str,
    name: &str,
    protocol: &str,
    port_name: &str,
    ip: &str,
    port: u16,
) -> String {
    let ip = ip.replace(':', ".");
    hash_and_truncate(&format!(
        "{namespace}/{name}/{protocol}/{port_name}__{ip}/{port}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iptables_chain_names_follow_kube_proxys_hash() {
        // kubernetes pkg/proxy/iptables/proxier_test.go expects, for ns1/svc1:p80 over tcp,
        // KUBE-SVC-XPGD46QRK7WJZT7O, and for its endpoint 10.180.0.1:80, KUBE-SEP-SXIVWICOYRO3J4NJ.
        let spn = service_port_name("ns1", "svc1", "p80");
        assert_eq!(port_proto_hash(&spn, "tcp"), "XPGD46QRK7WJZT7O");
        assert_eq!(
            endpoint_chain(&spn, "tcp", "10.180.0.1:80"),
            "KUBE-SEP-SXIVWICOYRO3J4NJ"
        );
    }

    #[test]
    fn nftables_chain_names_carry_the_service_in_clear() {
        // kubernetes pkg/proxy/nftables/proxier_test.go: "service-ULMVA6XW-ns1/svc1/tcp/p80" and
        // "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80".
        assert_eq!(
            nft_service_base("ns1", "svc1", "tcp", "p80"),
            "ULMVA6XW-ns1/svc1/tcp/p80"
        );
        assert_eq!(
            nft_endpoint_base("ns1", "svc1", "tcp", "p80", "10.180.0.1", 80),
            "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
        );
    }
}
