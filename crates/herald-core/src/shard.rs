//! Sharding that agrees with Prometheus's relabel `hashmod`, so a fleet sharded by herald picks the same
//! targets as one sharded by `hashmod` on `__address__` (prometheus/prometheus model/relabel/relabel.go).

use md5::{Digest, Md5};

/// Prometheus relabel `hashmod`: the MD5 digest of `value`, its last 8 bytes read as a big-endian u64,
/// modulo `modulus`. (Prometheus keeps the last 8 bytes "to give the same result as earlier versions".)
///
/// # Panics
/// When `modulus` is 0; Prometheus rejects such a config at load time, and callers validate shard
/// counts before getting here.
pub fn hashmod(value: &str, modulus: u64) -> u64 {
    let digest = Md5::digest(value.as_bytes());
    let mut low = [0u8; 8];
    low.copy_from_slice(&digest[8..16]);
    u64::from_be_bytes(low)
        .checked_rem(modulus)
        .expect("hashmod modulus is non-zero: shard counts are validated before hashing")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values were computed outside this crate (coreutils md5sum, Python hashlib): the last 16
    // hex digits of the digest are the big-endian u64 Prometheus reduces.
    #[test]
    fn hashmod_uses_the_last_eight_digest_bytes_big_endian() {
        // md5("") = d41d8cd98f00b204 e9800998ecf8427e
        assert_eq!(hashmod("", 1 << 63), 0xe9800998ecf8427e - (1 << 63));
        // md5("a") = 0cc175b9c0f1b6a8 31c399e269772661
        assert_eq!(hashmod("a", u64::MAX), 0x31c399e269772661);
    }

    #[test]
    fn hashmod_matches_shard_assignments_computed_independently() {
        assert_eq!(hashmod("a", 10), 7);
        assert_eq!(hashmod("1.2.3.4:9000", 7), 1);
        assert_eq!(hashmod("10.0.0.1:8080", 3), 0);
    }

    #[test]
    fn hashmod_with_modulus_one_is_always_zero() {
        for v in ["", "x", "10.0.0.1:8080", "[2001:db8::1]:80"] {
            assert_eq!(hashmod(v, 1), 0);
        }
    }
}
