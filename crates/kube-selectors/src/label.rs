//! Label selectors (`app=web,tier!=db,env in (a,b),!canary`), as k8s.io/apimachinery/pkg/labels/selector.go.

use std::collections::BTreeMap;
use std::fmt;

use crate::Error;

/// The operator of one requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `k=v` or `k==v`
    Equals,
    /// `k!=v`: also true when the label is absent.
    NotEquals,
    /// `k in (a,b)`
    In,
    /// `k notin (a,b)`: also true when the label is absent.
    NotIn,
    /// `k`
    Exists,
    /// `!k`
    DoesNotExist,
    /// `k>5` (integer comparison; false when the value is not an integer)
    GreaterThan,
    /// `k<5`
    LessThan,
}

/// What a selector reads of an object's labels: the value of one key. Implemented for the map
/// typed objects carry and for stores' compact forms (kube-face's `Labels`), so one matcher serves
/// both.
pub trait LabelSet {
    /// The value of label `key`, if the object has it.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSet for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// One comma-separated term of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Operator,
    pub values: Vec<String>,
}

impl Requirement {
    pub fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        let value = labels.label(&self.key);
        let listed = |v: &str| self.values.iter().any(|x| x == v);
        match self.op {
            Operator::Equals | Operator::In => value.is_some_and(listed),
            Operator::NotEquals | Operator::NotIn => value.is_none_or(|v| !listed(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(v), Some(bound)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|b| b.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.op == Operator::GreaterThan {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

/// A parsed label selector: the conjunction of its requirements. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    pub fn everything() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Parses the string form used in `?labelSelector=` and in Prometheus's `selectors[].label`.
    pub fn parse(input: &str) -> Result<Self, Error> {
        let mut requirements = Vec::new();
        for term in split_terms(input)? {
            let term = term.trim();
            if term.is_empty() {
                if input.trim().is_empty() {
                    continue;
                }
                return Err(Error::Requirement(format!("empty term in {input:?}")));
            }
            requirements.push(parse_requirement(term)?);
        }
        Ok(Self { requirements })
    }

    /// The selector of a `metav1.LabelSelector` given as `matchLabels` (as a Service's `spec.selector`).
    pub fn from_match_labels(labels: &BTreeMap<String, String>) -> Self {
        Self {
            requirements: labels
                .iter()
                .map(|(k, v)| Requirement {
                    key: k.clone(),
                    op: Operator::Equals,
                    values: vec![v.clone()],
                })
                .collect(),
        }
    }

    /// A `metav1.LabelSelector` (`matchLabels`, and `matchExpressions` as (key, operator, values)
    /// with the operators `In`, `NotIn`, `Exists`, `DoesNotExist`), checked as apimachinery's
    /// `LabelSelectorAsSelector` checks it: valid keys and values, values for `In`/`NotIn` and none
    /// for `Exists`/`DoesNotExist`. The error names the requirement at fault.
    pub fn from_parts<'a>(
        match_labels: &BTreeMap<String, String>,
        match_expressions: impl IntoIterator<Item = (&'a str, &'a str, &'a [String])>,
    ) -> Result<Self, Error> {
        let mut requirements = Vec::new();
        for (k, v) in match_labels {
            validate_key(k)?;
            validate_value(k, v)?;
            requirements.push(Requirement {
                key: k.clone(),
                op: Operator::Equals,
                values: vec![v.clone()],
            });
        }
        for (key, op, values) in match_expressions {
            validate_key(key)?;
            let op = match op {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(Error::Requirement(format!(
                        "{key}: {other:?} is not a valid label selector operator"
                    )));
                }
            };
            match op {
                Operator::In | Operator::NotIn if values.is_empty() => {
                    return Err(Error::Requirement(format!(
                        "{key}: for 'in', 'notin' operators, values set can't be empty"
                    )));
                }
                Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                    return Err(Error::Requirement(format!(
                        "{key}: values set must be empty for exists and does not exist"
                    )));
                }
                _ => {}
            }
            for v in values {
                validate_value(key, v)?;
            }
            requirements.push(Requirement {
                key: key.to_string(),
                op,
                values: values.to_vec(),
            });
        }
        Ok(Self { requirements })
    }
}

/// Splits on commas that are not inside a parenthesised value set.
fn split_terms(input: &str) -> Result<Vec<&str>, Error> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(Error::Requirement(format!("unbalanced ')' in {input:?}")));
                }
            }
            ',' if depth == 0 => {
                terms.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(Error::Requirement(format!("unbalanced '(' in {input:?}")));
    }
    terms.push(&input[start..]);
    Ok(terms)
}

fn parse_requirement(term: &str) -> Result<Requirement, Error> {
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        validate_key(key)?;
        return Ok(Requirement {
            key: key.to_string(),
            op: Operator::DoesNotExist,
            values: vec![],
        });
    }
    // Set-based: `key in (a,b)` / `key notin (a,b)`
    if let Some(open) = term.find('(') {
        let head = term[..open].trim();
        let close = term
            .rfind(')')
            .filter(|&c| c == term.len() - 1)
            .ok_or_else(|| Error::Requirement(format!("{term:?}: expected ')' at the end")))?;
        let mut words = head.split_whitespace();
        let (key, op) = match (words.next(), words.next(), words.next()) {
            (Some(k), Some("in"), None) => (k, Operator::In),
            (Some(k), Some("notin"), None) => (k, Operator::NotIn),
            _ => {
                return Err(Error::Requirement(format!(
                    "{term:?}: expected 'key in (...)' or 'key notin (...)'"
                )));
            }
        };
        validate_key(key)?;
        let values: Vec<String> = term[open + 1..close]
            .split(',')
            .map(|v| v.trim().to_string())
            .collect();
        for v in &values {
            validate_value(key, v)?;
        }
        return Ok(Requirement {
            key: key.to_string(),
            op,
            values,
        });
    }
    // Equality-based, longest operators first.
    for (token, op) in [
        ("==", Operator::Equals),
        ("!=", Operator::NotEquals),
        ("=", Operator::Equals),
        (">", Operator::GreaterThan),
        ("<", Operator::LessThan),
    ] {
        if let Some(at) = term.find(token) {
            let key = term[..at].trim();
            let value = term[at + token.len()..].trim();
            validate_key(key)?;
            if matches!(op, Operator::GreaterThan | Operator::LessThan) {
                if value.parse::<i64>().is_err() {
                    return Err(Error::InvalidValue {
                        key: key.into(),
                        value: value.into(),
                        why: "must be an integer for '>' and '<'",
                    });
                }
            } else {
                validate_value(key, value)?;
            }
            return Ok(Requirement {
                key: key.to_string(),
                op,
                values: vec![value.to_string()],
            });
        }
    }
    let key = term.trim();
    if key.contains(char::is_whitespace) {
        return Err(Error::Requirement(format!(
            "{term:?}: expected an operator (=, ==, !=, in, notin) after the key"
        )));
    }
    validate_key(key)?;
    Ok(Requirement {
        key: key.to_string(),
        op: Operator::Exists,
        values: vec![],
    })
}

/// A qualified name: an optional DNS-subdomain prefix and '/', then 1–63 characters of [A-Za-z0-9-_.]
/// beginning and ending alphanumeric (k8s.io/apimachinery/pkg/util/validation IsQualifiedName).
fn validate_key(key: &str) -> Result<(), Error> {
    let bad = |why| {
        Err(Error::InvalidKey {
            key: key.to_string(),
            why,
        })
    };
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 {
            return bad("prefix must be a DNS subdomain of at most 253 characters");
        }
        if !p.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        }) {
            return bad("prefix must be a lower-case DNS subdomain");
        }
    }
    if name.is_empty() {
        return bad("name part must not be empty");
    }
    if name.len() > 63 {
        return bad("name part must be at most 63 characters");
    }
    if !is_label_chars(name) {
        return bad(
            "name part must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric",
        );
    }
    Ok(())
}

fn validate_value(key: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Ok(());
    }
    let why = if value.len() > 63 {
        "must be at most 63 characters"
    } else if !is_label_chars(value) {
        "must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric"
    } else {
        return Ok(());
    };
    Err(Error::InvalidValue {
        key: key.into(),
        value: value.into(),
        why,
    })
}

fn is_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match r.op {
                Operator::Equals => write!(f, "{}={}", r.key, r.values[0])?,
                Operator::NotEquals => write!(f, "{}!={}", r.key, r.values[0])?,
                Operator::In => write!(f, "{} in ({})", r.key, r.values.join(","))?,
                Operator::NotIn => write!(f, "{} notin ({})", r.key, r.values.join(","))?,
                Operator::Exists => write!(f, "{}", r.key)?,
                Operator::DoesNotExist => write!(f, "!{}", r.key)?,
                Operator::GreaterThan => write!(f, "{}>{}", r.key, r.values[0])?,
                Operator::LessThan => write!(f, "{}<{}", r.key, r.values[0])?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    #[test]
    fn every_operator_matches_as_the_apiserver_does() {
        let l = labels(&[("app", "web"), ("tier", "fe"), ("n", "5")]);
        for (s, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (web, db)", true),
            ("app in (db)", false),
            ("app notin (db)", true),
            ("missing notin (db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("n>4", true),
            ("n<5", false),
            ("app=web,tier in (fe,be),!canary", true),
            ("app=web,tier=be", false),
        ] {
            assert_eq!(sel(s).matches(&l), want, "selector {s:?}");
        }
    }

    #[test]
    fn prefixed_keys_and_empty_values_parse() {
        let s = sel("app.kubernetes.io/name=web,example.com/flag=");
        assert_eq!(s.requirements[0].key, "app.kubernetes.io/name");
        assert_eq!(s.requirements[1].values, vec![String::new()]);
    }

    #[test]
    fn malformed_selectors_are_rejected_with_the_part_at_fault() {
        for (s, needle) in [
            ("app in (a", "unbalanced"),
            ("app=web,", "empty term"),
            ("app web", "expected an operator"),
            ("-bad=x", "-bad"),
            ("app=has space", "has space"),
            ("app foo (a)", "expected 'key in"),
            ("n>x", "integer"),
            ("UPPER.case/x=1", "prefix"),
        ] {
            let err = LabelSelector::parse(s).expect_err(s).to_string();
            assert!(err.contains(needle), "{s:?}: {err}");
        }
    }

    #[test]
    fn display_round_trips() {
        let s = sel("a=1,b!=2,c in (x,y),d notin (z),e,!f");
        assert_eq!(sel(&s.to_string()), s);
    }

    #[test]
    fn structured_selectors_are_checked_as_apimachinery_checks_them() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let none: &[String] = &[];
        let ab = ["a".to_string(), "b".to_string()];
        let sel =
            LabelSelector::from_parts(&labels, [("tier", "In", &ab[..]), ("x", "Exists", none)])
                .expect("valid");
        assert_eq!(
            sel,
            LabelSelector::parse("app=web,tier in (a,b),x").expect("valid")
        );
        let err = |e: Result<LabelSelector, Error>| e.expect_err("invalid").to_string();
        assert!(
            err(LabelSelector::from_parts(
                &BTreeMap::new(),
                [("k", "In", none)]
            ))
            .contains("can't be empty")
        );
        assert!(
            err(LabelSelector::from_parts(
                &BTreeMap::new(),
                [("k", "Exists", &ab[..])]
            ))
            .contains("must be empty")
        );
        assert!(
            err(LabelSelector::from_parts(
                &BTreeMap::new(),
                [("k", "Gt", &ab[..])]
            ))
            .contains("\"Gt\"")
        );
        let bad_value = [".*".to_string()];
        assert!(
            err(LabelSelector::from_parts(
                &BTreeMap::new(),
                [("k", "In", &bad_value[..])]
            ))
            .contains("\".*\"")
        );
        let bad_key: BTreeMap<String, String> = [("a|b".to_string(), "v".to_string())].into();
        assert!(err(LabelSelector::from_parts(&bad_key, [])).contains("\"a|b\""));
    }
}
