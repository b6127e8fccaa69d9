//! Field selectors (`metadata.name=x,spec.nodeName!=y`), as k8s.io/apimachinery/pkg/fields/selector.go:
//! only `=`, `==` and `!=`, joined by commas; `\` escapes `,`, `=`, `!` and `\` in values.

use crate::Error;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub value: String,
    /// `!=` when true.
    pub negated: bool,
}

/// A parsed field selector. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn parse(input: &str) -> Result<Self, Error> {
        let mut requirements = Vec::new();
        if input.trim().is_empty() {
            return Ok(Self { requirements });
        }
        for term in split_unescaped(input, ',') {
            requirements.push(parse_term(&term).ok_or(Error::Field(term))?);
        }
        Ok(Self { requirements })
    }

    /// The fields this selector names, for a server to check it supports them.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|r| r.field.as_str())
    }

    /// `get` returns an object's value for a field name (None when the object has no such field, which
    /// matches as the empty string, as the apiserver's field sets do).
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let v = get(&r.field).unwrap_or_default();
            (v == r.value) != r.negated
        })
    }
}

fn parse_term(term: &str) -> Option<FieldRequirement> {
    // Find the first unescaped operator.
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' if bytes.get(i + 1) == Some(&b'=') => return mk(term, i, 2, true),
            b'=' if bytes.get(i + 1) == Some(&b'=') => return mk(term, i, 2, false),
            b'=' => return mk(term, i, 1, false),
            _ => i += 1,
        }
    }
    None
}

fn mk(term: &str, at: usize, len: usize, negated: bool) -> Option<FieldRequirement> {
    let field = term[..at].trim();
    if field.is_empty() {
        return None;
    }
    Some(FieldRequirement {
        field: field.to_string(),
        value: unescape(&term[at + len..]),
        negated,
    })
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            out.last_mut().expect("never empty").extend(['\\', c]);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(String::new());
        } else {
            out.last_mut().expect("never empty").push(c);
        }
    }
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(field: &str) -> Option<String> {
        match field {
            "metadata.name" => Some("web-1".into()),
            "spec.nodeName" => Some("node-a".into()),
            "status.phase" => Some("Running".into()),
            _ => None,
        }
    }

    #[test]
    fn equality_and_inequality_match() {
        for (s, want) in [
            ("", true),
            ("metadata.name=web-1", true),
            ("metadata.name==web-1", true),
            ("metadata.name!=web-1", false),
            ("spec.nodeName=node-a,status.phase!=Pending", true),
            ("spec.nodeName=node-b", false),
            ("spec.nodeName=", false),
            ("metadata.namespace=", true),
        ] {
            assert_eq!(
                FieldSelector::parse(s).expect(s).matches(get),
                want,
                "{s:?}"
            );
        }
    }

    #[test]
    fn escaped_separators_stay_in_values() {
        let s = FieldSelector::parse(r"metadata.name=a\,b,status.phase=x\=y").expect("parses");
        assert_eq!(s.requirements[0].value, "a,b");
        assert_eq!(s.requirements[1].value, "x=y");
    }

    #[test]
    fn terms_without_an_operator_are_rejected() {
        let err = FieldSelector::parse("metadata.name").expect_err("no operator");
        assert!(err.to_string().contains("metadata.name"), "{err}");
        assert!(FieldSelector::parse("=x").is_err());
    }
}
