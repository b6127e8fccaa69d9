//! Byte sizes on the command line: raw bytes (`402653184`) or a number with a unit, binary as
//! Kubernetes quantities write them (`512Ki`, `384Mi`, `1Gi`, `1.5Ti`, also `MiB`) or decimal
//! (`400MB`, `400M`, `2k`). Shown back in the largest binary unit that divides them exactly, so a
//! flag's default reads `384Mi`.

use std::fmt;
use std::str::FromStr;

/// A size in bytes, as a flag takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub usize);

/// Units and their multipliers; the longest spelling first so `MiB` is not read as `Mi` + `B`.
const UNITS: &[(&str, u64)] = &[
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("Ti", 1 << 40),
    ("kB", 1_000),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("k", 1_000),
    ("K", 1_000),
    ("M", 1_000_000),
    ("G", 1_000_000_000),
    ("T", 1_000_000_000_000),
    ("B", 1),
];

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<ByteSize, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = (&t[..split], t[split..].trim_start());
        if number.is_empty() {
            return Err(format!(
                "invalid size {s:?}: expected bytes or a number with a unit (512Mi, 1Gi, 400MB)"
            ));
        }
        let multiplier = if unit.is_empty() {
            1
        } else {
            UNITS
                .iter()
                .find(|(u, _)| *u == unit)
                .map(|(_, m)| *m)
                .ok_or_else(|| {
                    format!(
                        "invalid size {s:?}: unknown unit {unit:?} (use Ki, Mi, Gi, Ti for powers \
                         of 1024, KB, MB, GB, TB for powers of 1000, or bytes alone)"
                    )
                })?
        };
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if frac.contains('.') || (whole.is_empty() && frac.is_empty()) {
            return Err(format!("invalid size {s:?}: {number:?} is not a number"));
        }
        let too_large = || format!("invalid size {s:?}: too large");
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_large())?
        };
        let mut bytes = u128::from(whole) * u128::from(multiplier);
        if !frac.is_empty() {
            let digits = u32::try_from(frac.len()).map_err(|_| too_large())?;
            let scale = 10u128.checked_pow(digits).ok_or_else(too_large)?;
            let f: u128 = frac.parse().map_err(|_| too_large())?;
            let part = f * u128::from(multiplier);
            if !part.is_multiple_of(scale) {
                return Err(format!("invalid size {s:?}: not a whole number of bytes"));
            }
            bytes += part / scale;
        }
        usize::try_from(bytes)
            .map(ByteSize)
            .map_err(|_| too_large())
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0 as u64;
        for (unit, m) in [
            ("Ti", 1u64 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ] {
            if n != 0 && n.is_multiple_of(m) {
                return write!(f, "{}{unit}", n / m);
            }
        }
        write!(f, "{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<usize, String> {
        s.parse::<ByteSize>().map(|b| b.0)
    }

    fn bytes(s: &str) -> usize {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn raw_bytes_and_every_unit_parse() {
        assert_eq!(bytes("402653184"), 402_653_184);
        assert_eq!(bytes("0"), 0);
        assert_eq!(bytes("384Mi"), 384 << 20);
        assert_eq!(bytes("384MiB"), 384 << 20);
        assert_eq!(bytes("512Ki"), 512 << 10);
        assert_eq!(bytes("1Gi"), 1 << 30);
        assert_eq!(bytes("1.5Gi"), 3 << 29);
        assert_eq!(bytes("400MB"), 400_000_000);
        assert_eq!(bytes("400M"), 400_000_000);
        assert_eq!(bytes("2k"), 2_000);
        assert_eq!(bytes("64B"), 64);
        assert_eq!(bytes(" 3 Mi "), 3 << 20);
    }

    #[test]
    fn bad_sizes_say_what_is_wrong() {
        for (input, says) in [
            ("", "expected bytes or a number with a unit"),
            ("Mi", "expected bytes or a number with a unit"),
            ("-1", "expected bytes or a number with a unit"),
            ("12XB", "unknown unit \"XB\""),
            ("12 mi", "unknown unit \"mi\""),
            ("1.2.3Mi", "is not a number"),
            ("0.3B", "not a whole number of bytes"),
            ("99999999999999999999Ti", "too large"),
        ] {
            let err = parse(input).expect_err(input);
            assert!(err.contains(says), "{input:?}: {err}");
            assert!(
                err.contains(&format!("{input:?}")),
                "{input:?} is named: {err}"
            );
        }
    }

    #[test]
    fn sizes_display_in_the_largest_exact_binary_unit() {
        assert_eq!(ByteSize(384 << 20).to_string(), "384Mi");
        assert_eq!(ByteSize(3 << 20).to_string(), "3Mi");
        assert_eq!(ByteSize(1 << 30).to_string(), "1Gi");
        assert_eq!(ByteSize(1536).to_string(), "1536");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        assert_eq!(ByteSize(0).to_string(), "0");
        // What is shown parses back to the same size.
        for n in [0, 1, 1000, 1 << 10, 3 << 20, 402_653_184, 5 << 40] {
            assert_eq!(bytes(&ByteSize(n).to_string()), n);
        }
    }
}
