//! `resource.Quantity` as its protobuf form carries it: the string `Quantity.String()` returns after
//! the JSON text was parsed (k8s.io/apimachinery v0.37.2 pkg/api/resource quantity.go
//! `ParseQuantity`, `CanonicalizeBytes`; amount.go `AsCanonicalBytes`,
//! `AsCanonicalBase1024Bytes`). A string already in canonical form is kept as written (Go keeps
//! it too); any other is rounded up to nano precision and written with the largest suffix that
//! keeps the number whole ("0.5" → "500m", "1000m" → "1", "1.5Gi" → "1536Mi", "1024Ki" → "1Mi").
//!
//! A string Go would refuse, or one too large for 128 bits, is returned as it is.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// (base, exponent, format) of a suffix (suffix.go `interpret`).
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let dec = match suffix {
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "" => Some(0),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(e) = dec {
        return Some((10, e, Format::DecimalSi));
    }
    let bin = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(e) = bin {
        return Some((2, e, Format::BinarySi));
    }
    let rest = suffix.strip_prefix(['e', 'E'])?;
    if rest.is_empty() {
        return None;
    }
    let e: i64 = rest.parse().ok()?;
    Some((10, e as i32, Format::DecimalExponent))
}

/// (positive, num, denom, suffix) as `parseQuantityString` splits the text.
fn split(s: &str) -> Option<(bool, &str, &str, &str)> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < b.len() && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= b.len() {
        return Some((positive, "0", "", ""));
    }
    let start = pos;
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = if pos == start { "0" } else { &s[start..pos] };
    let mut denom = "";
    if pos < b.len() && b[pos] == b'.' {
        pos += 1;
        let d = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[d..pos];
    }
    let suffix_start = pos;
    while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < b.len() && matches!(b[pos], b'-' | b'+') {
        pos += 1;
    }
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < b.len() {
        return None;
    }
    Some((positive, num, denom, &s[suffix_start..]))
}

/// The canonical string of a quantity's JSON text (a JSON number's text or a string's content).
pub fn canonical(text: &str) -> String {
    let s = text.trim();
    if s.is_empty() || s == "0" {
        return "0".to_string();
    }
    compute(s).unwrap_or_else(|| s.to_string())
}

fn compute(s: &str) -> Option<String> {
    let (positive, num, denom, suffix) = split(s)?;
    let (base, exponent, mut format) = interpret(suffix)?;

    // ParseQuantity's fast path keeps a string that is already canonical.
    let digits = (num.len() + denom.len()) as i32;
    let (precision, scale) = match format {
        Format::DecimalSi | Format::DecimalExponent => (18 - digits, exponent),
        Format::BinarySi if exponent >= 0 && denom.is_empty() => (
            15 - num.len() as i32 - (exponent as f32 * 3.0 / 10.0) as i32 - 1,
            0,
        ),
        Format::BinarySi => (-1, 0),
    };
    if precision >= 0 {
        let scale = scale - denom.len() as i32;
        let shifted = format!("{num}{denom}");
        if scale >= -9 {
            let value: i64 = shifted.parse().ok()?;
            let mantissa: i64 = if format == Format::BinarySi {
                1i64.checked_shl(exponent as u32)?
            } else {
                1
            };
            if value.checked_mul(mantissa).is_some() {
                let keep = match format {
                    Format::BinarySi => exponent % 10 == 0 && value & 0x07 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
                };
                if keep {
                    return Some(s.to_string());
                }
            }
        }
    }

    // The exact value: magnitude m × 10^e.
    let mut m: u128 = format!("{num}{denom}").parse().ok()?;
    let mut e: i32 = -(denom.len() as i32);
    if base == 10 {
        e = e.checked_add(exponent)?;
    } else {
        m = m.checked_mul(1u128.checked_shl(exponent as u32)?)?;
    }
    // Round up (away from zero) to nano precision.
    if m != 0 && e < -9 {
        let div = 10u128.checked_pow((-9 - e) as u32)?;
        m = m.div_ceil(div);
        e = -9;
    }
    if m == 0 {
        return Some("0".to_string());
    }
    // Binary quantities are capped at the largest int64.
    if format == Format::BinarySi && greater_than(m, e, i64::MAX as u128) {
        m = i64::MAX as u128;
        e = 0;
    }
    if format == Format::BinarySi && !greater_or_equal(m, e, 1) {
        format = Format::DecimalSi;
    }
    let sign = if positive { "" } else { "-" };

    // CanonicalizeBytes.
    if format == Format::BinarySi {
        match whole(m, e) {
            Some(v) if v >= 1024 => {
                let (mut v, mut k) = (v, 0);
                while v.is_multiple_of(1024) && v != 0 {
                    v /= 1024;
                    k += 1;
                }
                let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].get(k)?;
                return Some(format!("{sign}{v}{suffix}"));
            }
            _ => format = Format::DecimalSi,
        }
    }
    while m.is_multiple_of(10) {
        m /= 10;
        e += 1;
    }
    let r = e.rem_euclid(3);
    m = m.checked_mul(10u128.pow(r as u32))?;
    e -= r;
    let suffix = match format {
        Format::DecimalExponent if e == 0 => String::new(),
        Format::DecimalExponent => format!("e{e}"),
        _ => match e {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            // Go's suffixer has no name for other exponents and writes none.
            _ => "",
        }
        .to_string(),
    };
    Some(format!("{sign}{m}{suffix}"))
}

/// m × 10^e as a whole number, when it is one.
fn whole(m: u128, e: i32) -> Option<u128> {
    if e >= 0 {
        m.checked_mul(10u128.checked_pow(e as u32)?)
    } else {
        let d = 10u128.checked_pow((-e) as u32)?;
        m.is_multiple_of(d).then_some(m / d)
    }
}

fn greater_than(m: u128, e: i32, v: u128) -> bool {
    if e >= 0 {
        match 10u128.checked_pow(e as u32).and_then(|p| m.checked_mul(p)) {
            Some(x) => x > v,
            None => true,
        }
    } else {
        match 10u128
            .checked_pow((-e) as u32)
            .and_then(|p| v.checked_mul(p))
        {
            Some(x) => m > x,
            None => false,
        }
    }
}

fn greater_or_equal(m: u128, e: i32, v: u128) -> bool {
    !greater_than_rev(m, e, v)
}

/// m × 10^e < v.
fn greater_than_rev(m: u128, e: i32, v: u128) -> bool {
    if e >= 0 {
        match 10u128.checked_pow(e as u32).and_then(|p| m.checked_mul(p)) {
            Some(x) => x < v,
            None => false,
        }
    } else {
        match 10u128
            .checked_pow((-e) as u32)
            .and_then(|p| v.checked_mul(p))
        {
            Some(x) => m < x,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn canonical_forms() {
        for (input, want) in [
            ("0", "0"),
            ("100m", "100m"),
            ("1000m", "1"),
            ("0.5", "500m"),
            ("1.5Gi", "1536Mi"),
            ("1024Ki", "1Mi"),
            ("1Ki", "1Ki"),
            ("8Ki", "8Ki"),
            ("1536Ki", "1536Ki"),
            ("1500", "1500"),
            ("1e3", "1e3"),
            ("1.0", "1"),
            ("128974848", "128974848"),
            ("129e6", "129e6"),
            ("123Mi", "123Mi"),
            ("0.1m", "100u"),
            ("1n", "1n"),
            ("0.0000000001", "1n"),
            ("-1.5", "-1500m"),
            ("512", "512"),
            ("0.5Ki", "512"),
            ("2000Mi", "2000Mi"),
            ("12e6", "12e6"),
            ("100M", "100M"),
            ("4000000k", "4G"),
            ("", "0"),
            ("bogus", "bogus"),
        ] {
            assert_eq!(canonical(input), want, "canonical({input:?})");
        }
    }
}
