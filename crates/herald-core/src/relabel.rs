//! Prometheus relabeling (`relabel_configs`), as prometheus/prometheus `model/relabel/relabel.go` does
//! it as of commit d15adb9ad7e5d9fbde3a9a8f30200593a5a14d86 (the commit the rest of herald-core follows):
//! the YAML syntax and its defaults (`Config.UnmarshalYAML`), the validation rules (`Config.Validate`)
//! and every action (`relabel`). The Go code and `relabel_test.go` were read and ported, not copied.
//!
//! Label names are validated with Prometheus 3's default scheme, UTF-8 (`model.UTF8Validation`: any
//! non-empty name), unless a rule's [`RelabelConfig::name_validation`] asks for the legacy one
//! (`[a-zA-Z_][a-zA-Z0-9_]*`). Both are implemented because `relabel_test.go` exercises both; herald's
//! job file has no setting for it (Prometheus's is the global `metric_name_validation_scheme`), so jobs
//! use UTF-8 as a Prometheus 3 with default settings does.
//!
//! Regexes are anchored as `NewRegexp` anchors them, `^(?s:re)$` (`.` matches newlines too), and are
//! compiled once, when a rule is read; rules with the same pattern share one compiled regex while any
//! of them lives (thousands of monitor jobs repeat the same few patterns). Go's `regexp` and Rust's
//! `regex` share RE2's syntax; where they differ, patterns are translated to mean what they mean in Go
//! (see [`Regexp`]). Templates (`replacement`, and `target_label` of `replace`) are expanded with Go's
//! `Regexp.Expand` rules (`$1`, `${1}`, `$name`, `${name}`, the longest name wins, `$$` is a `$`,
//! unknown or unmatched groups expand to nothing, a malformed `$` is kept as text), which differ from
//! `regex::Captures::expand` in corner cases (`${a-b}`, `$é`), so herald expands them itself.
//!
//! Labels are a [`LabelSet`]; as in Prometheus's `labels.Builder`, a missing label reads as `""` and
//! setting a label to `""` deletes it. Labels present with an empty value are kept unless a rule touches
//! them (NB: Prometheus's scrape path never has such labels: `PopulateDiscoveredLabels` drops empty
//! values before relabeling; callers wanting exactly that should remove them first).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use regex::{CaptureLocations, Regex};
use serde::Deserialize;

use crate::target::LabelSet;

/// `separator` when not given.
pub const DEFAULT_SEPARATOR: &str = ";";
/// `regex` when not given.
pub const DEFAULT_REGEX: &str = "(.*)";
/// `replacement` when not given.
pub const DEFAULT_REPLACEMENT: &str = "$1";

/// `action`: what a rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Action {
    /// Set `target_label` (expanded) to `replacement` (expanded) when `regex` matches.
    #[default]
    Replace,
    /// Drop the target unless `regex` matches the source value.
    Keep,
    /// Drop the target when `regex` matches the source value.
    Drop,
    /// Drop the target unless the source value equals `target_label`'s value.
    KeepEqual,
    /// Drop the target when the source value equals `target_label`'s value.
    DropEqual,
    /// Set `target_label` to the MD5 hash of the source value modulo `modulus`.
    HashMod,
    /// Copy every label whose name `regex` matches to the name `replacement` expands to.
    LabelMap,
    /// Delete every label whose name `regex` matches.
    LabelDrop,
    /// Delete every label whose name `regex` does not match.
    LabelKeep,
    /// Set `target_label` to the source value in lower case.
    Lowercase,
    /// Set `target_label` to the source value in upper case.
    Uppercase,
}

impl Action {
    pub const ALL: [Action; 11] = [
        Action::Replace,
        Action::Keep,
        Action::Drop,
        Action::KeepEqual,
        Action::DropEqual,
        Action::HashMod,
        Action::LabelMap,
        Action::LabelDrop,
        Action::LabelKeep,
        Action::Lowercase,
        Action::Uppercase,
    ];

    /// The name Prometheus uses (lower case).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Replace => "replace",
            Action::Keep => "keep",
            Action::Drop => "drop",
            Action::KeepEqual => "keepequal",
            Action::DropEqual => "dropequal",
            Action::HashMod => "hashmod",
            Action::LabelMap => "labelmap",
            Action::LabelDrop => "labeldrop",
            Action::LabelKeep => "labelkeep",
            Action::Lowercase => "lowercase",
            Action::Uppercase => "uppercase",
        }
    }

    /// Parse an action name in any case, as `Action.UnmarshalYAML` does (`strings.ToLower` first).
    pub fn parse(name: &str) -> Option<Action> {
        let lower = go_to_lower(name);
        Action::ALL.into_iter().find(|a| a.as_str() == lower)
    }

    /// The actions that require a `target_label`.
    fn needs_target(self) -> bool {
        matches!(
            self,
            Action::Replace
                | Action::HashMod
                | Action::Lowercase
                | Action::Uppercase
                | Action::KeepEqual
                | Action::DropEqual
        )
    }

    /// The actions that take only `source_labels` and `target_label`, or take no `replacement`.
    fn is_case_or_equal(self) -> bool {
        matches!(
            self,
            Action::Lowercase | Action::Uppercase | Action::KeepEqual | Action::DropEqual
        )
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which label names are valid (prometheus/common `model.ValidationScheme`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NameValidation {
    /// Any non-empty name (Prometheus 3's default).
    #[default]
    Utf8,
    /// `[a-zA-Z_][a-zA-Z0-9_]*` (Prometheus 2, or `metric_name_validation_scheme: legacy`).
    Legacy,
}

impl NameValidation {
    /// `ValidationScheme.IsValidLabelName`.
    pub fn is_valid_label_name(self, name: &str) -> bool {
        match self {
            // Rust strings are always valid UTF-8.
            NameValidation::Utf8 => !name.is_empty(),
            NameValidation::Legacy => {
                let mut bytes = name.bytes();
                bytes
                    .next()
                    .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                    && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
            }
        }
    }

    /// A `target_label` (of `replace`) or `replacement` (of `labelmap`) holding `$` references: under
    /// UTF-8 any non-empty name, under legacy rules `relabelTargetLegacy`, which lets `$1`, `${1}` and
    /// `$name` stand for name characters.
    fn is_valid_template_name(self, template: &str) -> bool {
        static LEGACY_TEMPLATE: LazyLock<Regex> = LazyLock::new(|| {
            // relabel.go's relabelTargetLegacy, its `\w` spelled out as the ASCII class it is in Go.
            Regex::new(r"^(?:(?:[a-zA-Z_]|\$(?:\{[0-9A-Za-z_]+\}|[0-9A-Za-z_]+))+[0-9A-Za-z_]*)+$")
                .expect("a fixed, valid pattern")
        });
        match self {
            NameValidation::Utf8 => self.is_valid_label_name(template),
            NameValidation::Legacy => LEGACY_TEMPLATE.is_match(template),
        }
    }
}

/// A rule's `regex`: the pattern as written, compiled anchored (`^(?s:pattern)$`) as Prometheus's
/// `NewRegexp` does.
///
/// Go's and Rust's regex syntaxes are both RE2's, but differ in places; the pattern is rewritten so it
/// means what it means in Go before Rust compiles it:
/// - `\d`, `\w`, `\s` and their negations are ASCII classes in Go (Unicode in Rust), and `\b`/`\B` are
///   ASCII word boundaries;
/// - `\Q...\E` (a literal) is Go syntax only;
/// - inside a bracket class, Go takes `[` (other than `[:name:]`), `&` and `~` literally, while Rust
///   reads nested classes and `&&`/`~~` set operations there.
///
/// Not translated (NB): Rust accepts some syntax Go rejects (e.g. `(?x)`, `\<`, repetition counts over
/// 1000), and a class's `--` is a set difference in Rust but a range ending at `-` in Go.
///
/// The compiled regex is shared: by clones, and by every `Regexp` of the same pattern alive at once
/// (`compiled`), so a rule costs its pattern's text, not a compiled program and match caches of
/// its own (~9 KiB a rule before: 4,951 monitor jobs' rules took ~550 MB at k8s-limits).
#[derive(Clone)]
pub struct Regexp {
    source: String,
    regex: Arc<Regex>,
    /// Whether this is the default (`regex` not given). Prometheus compares configs' regexes by
    /// pointer, so an explicit `regex: (.*)` is not "the default" for `keepequal`/`dropequal`.
    default: bool,
}

impl Regexp {
    /// Compile `pattern`, anchored.
    pub fn new(pattern: &str) -> Result<Self, RelabelError> {
        let anchored = format!("^(?s:{})$", translate_go_pattern(pattern));
        let regex = compiled(&anchored).map_err(|e| RelabelError::Regex {
            regex: pattern.to_owned(),
            message: e.to_string(),
        })?;
        Ok(Regexp {
            source: pattern.to_owned(),
            regex,
            default: false,
        })
    }

    /// The pattern as written (not anchored).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether this is the default regex of a rule whose `regex` was not given.
    pub fn is_default(&self) -> bool {
        self.default
    }

    /// Whether the whole of `text` matches.
    pub fn is_match(&self, text: &str) -> bool {
        self.regex.is_match(text)
    }

    /// The compiled, anchored regex.
    pub fn regex(&self) -> &Regex {
        &self.regex
    }
}

/// Compiled regexes by anchored pattern, held weakly: a pattern is compiled again only when no rule
/// holds it any more.
#[derive(Default)]
struct Compiled {
    by_pattern: HashMap<String, Weak<Regex>>,
    /// Entries past which dead ones are swept out (twice the live ones after a sweep).
    sweep_at: usize,
}

static COMPILED: LazyLock<Mutex<Compiled>> = LazyLock::new(Mutex::default);

/// The compiled regex of `anchored`: the one a live `Regexp` holds, or a new one.
fn compiled(anchored: &str) -> Result<Arc<Regex>, regex::Error> {
    let lock = || COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(live) = lock().by_pattern.get(anchored).and_then(Weak::upgrade) {
        return Ok(live);
    }
    // Compiled without the lock; another thread may compile the same pattern meanwhile, and the one
    // stored first is kept.
    let regex = Arc::new(Regex::new(anchored)?);
    let mut compiled = lock();
    if let Some(live) = compiled.by_pattern.get(anchored).and_then(Weak::upgrade) {
        return Ok(live);
    }
    if compiled.by_pattern.len() >= compiled.sweep_at {
        compiled.by_pattern.retain(|_, r| r.strong_count() > 0);
        compiled.sweep_at = (2 * compiled.by_pattern.len()).max(1024);
    }
    compiled
        .by_pattern
        .insert(anchored.to_owned(), Arc::downgrade(&regex));
    Ok(regex)
}

/// How many patterns the shared regexes hold, live or not yet swept out.
#[cfg(test)]
fn compiled_entries() -> usize {
    COMPILED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .by_pattern
        .len()
}

impl Default for Regexp {
    /// The default `(.*)`, compiled once.
    fn default() -> Self {
        static DEFAULT: LazyLock<Regexp> = LazyLock::new(|| Regexp {
            default: true,
            ..Regexp::new(DEFAULT_REGEX).expect("the default regex compiles")
        });
        DEFAULT.clone()
    }
}

impl PartialEq for Regexp {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source && self.default == other.default
    }
}

impl Eq for Regexp {}

impl fmt::Debug for Regexp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.default {
            write!(f, "Regexp(default {:?})", self.source)
        } else {
            write!(f, "Regexp({:?})", self.source)
        }
    }
}

/// Why a relabel rule was rejected. Messages are Prometheus's where it has one, and name the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelabelError {
    /// The rule is not valid YAML for a relabel config (unknown field, wrong type, ...).
    #[error("{0}")]
    Syntax(String),
    #[error("relabel action cannot be empty")]
    EmptyAction,
    #[error("unknown relabel action {0:?}")]
    UnknownAction(String),
    #[error("source_labels: {0:?} is not a valid label name")]
    InvalidSourceLabel(String),
    #[error("'regex' {regex:?} does not compile: {message}")]
    Regex { regex: String, message: String },
    #[error("relabel configuration for hashmod requires non-zero modulus")]
    ZeroModulus,
    #[error("relabel configuration for {action} action requires 'target_label' value")]
    MissingTargetLabel { action: Action },
    #[error("{target_label:?} is invalid 'target_label' for {action} action")]
    InvalidTargetLabel {
        target_label: String,
        action: Action,
    },
    #[error("'replacement' can not be set for {action} action")]
    ReplacementNotAllowed { action: Action },
    #[error("{replacement:?} is invalid 'replacement' for {action} action")]
    InvalidReplacement { replacement: String, action: Action },
    #[error(
        "{action} action requires only 'source_labels' and `target_label`, and no other fields"
    )]
    OnlySourceAndTarget { action: Action },
    #[error("{action} action requires only 'regex', and no other fields")]
    OnlyRegex { action: Action },
    /// A rule of a list, by its index.
    #[error("relabel_configs[{index}]: {error}")]
    Rule {
        index: usize,
        error: Box<RelabelError>,
    },
}

/// One relabel rule, in Prometheus's YAML syntax, with Prometheus's defaults.
///
/// Reading one (`Deserialize`) compiles its regex but does not validate it: call
/// [`RelabelConfig::validate`] (or build a [`Relabeler`]), as Prometheus validates after unmarshaling.
/// As with Go's YAML decoder, a field given as `null` is its type's zero value, not the default:
/// `separator:` is `""`, `replacement:` is `""`, `regex:` is the empty regex (matching only `""`),
/// `action:` is the empty action (rejected).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawRelabelConfig")]
pub struct RelabelConfig {
    /// Labels whose values, joined by `separator`, are the source value. `None`: not given (or
    /// `null`); distinct from `Some(vec![])` only in that `labeldrop`/`labelkeep` reject the latter,
    /// as Prometheus rejects a non-nil list.
    pub source_labels: Option<Vec<String>>,
    pub separator: String,
    pub regex: Regexp,
    pub modulus: u64,
    pub target_label: String,
    pub replacement: String,
    pub action: Action,
    /// How label names are validated (Go's `NameValidationScheme`, not read from YAML).
    pub name_validation: NameValidation,
}

impl Default for RelabelConfig {
    /// Prometheus's `DefaultRelabelConfig`.
    fn default() -> Self {
        RelabelConfig {
            source_labels: None,
            separator: DEFAULT_SEPARATOR.to_owned(),
            regex: Regexp::default(),
            modulus: 0,
            target_label: String::new(),
            replacement: DEFAULT_REPLACEMENT.to_owned(),
            action: Action::Replace,
            name_validation: NameValidation::Utf8,
        }
    }
}

/// The YAML fields. `Option<Option<_>>`: absent (default) vs `null` (zero value) vs given.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelabelConfig {
    #[serde(default)]
    source_labels: Option<Vec<Option<String>>>,
    #[serde(default, deserialize_with = "present")]
    separator: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    regex: Option<Option<String>>,
    #[serde(default)]
    modulus: Option<u64>,
    #[serde(default)]
    target_label: Option<String>,
    #[serde(default, deserialize_with = "present")]
    replacement: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    action: Option<Option<String>>,
}

/// A field that is present: `null` reads as `Some(None)`, an absent field keeps its `default`, `None`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl TryFrom<RawRelabelConfig> for RelabelConfig {
    type Error = RelabelError;

    fn try_from(raw: RawRelabelConfig) -> Result<Self, RelabelError> {
        let source_labels = match raw.source_labels {
            None => None,
            Some(names) => Some(
                names
                    .into_iter()
                    // `model.LabelName.UnmarshalYAML` checks names with the global scheme (UTF-8);
                    // a `null` entry is never unmarshaled and stays "".
                    .map(|n| match n {
                        None => Ok(String::new()),
                        Some(n) if n.is_empty() => Err(RelabelError::InvalidSourceLabel(n)),
                        Some(n) => Ok(n),
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        let action = match raw.action {
            None => Action::Replace,
            Some(None) => return Err(RelabelError::EmptyAction),
            Some(Some(name)) => Action::parse(&name).ok_or(RelabelError::UnknownAction(name))?,
        };
        let regex = match raw.regex {
            None => Regexp::default(),
            Some(pattern) => Regexp::new(pattern.as_deref().unwrap_or_default())?,
        };
        Ok(RelabelConfig {
            source_labels,
            separator: given_or(raw.separator, DEFAULT_SEPARATOR),
            regex,
            modulus: raw.modulus.unwrap_or_default(),
            target_label: raw.target_label.unwrap_or_default(),
            replacement: given_or(raw.replacement, DEFAULT_REPLACEMENT),
            action,
            name_validation: NameValidation::Utf8,
        })
    }
}

fn given_or(field: Option<Option<String>>, default: &str) -> String {
    match field {
        None => default.to_owned(),
        Some(value) => value.unwrap_or_default(),
    }
}

impl RelabelConfig {
    /// The rule in Prometheus's YAML syntax, fields left at their default omitted, so it reads back
    /// as the same rule (and passes the same validation) in Prometheus or herald.
    pub fn to_yaml(&self) -> serde_yaml::Value {
        use serde_yaml::Value as Y;
        let mut m = serde_yaml::Mapping::new();
        if let Some(source) = &self.source_labels {
            m.insert(
                "source_labels".into(),
                Y::Sequence(source.iter().map(|s| Y::from(s.as_str())).collect()),
            );
        }
        if self.separator != DEFAULT_SEPARATOR {
            m.insert("separator".into(), self.separator.as_str().into());
        }
        if !self.regex.is_default() {
            m.insert("regex".into(), self.regex.as_str().into());
        }
        if self.modulus != 0 {
            m.insert("modulus".into(), self.modulus.into());
        }
        if !self.target_label.is_empty() {
            m.insert("target_label".into(), self.target_label.as_str().into());
        }
        if self.replacement != DEFAULT_REPLACEMENT {
            m.insert("replacement".into(), self.replacement.as_str().into());
        }
        m.insert("action".into(), self.action.as_str().into());
        Y::Mapping(m)
    }

    /// The source labels (none when not given).
    pub fn source_labels(&self) -> &[String] {
        self.source_labels.as_deref().unwrap_or_default()
    }

    /// Prometheus's `Config.Validate`, with the rule's own [`NameValidation`].
    pub fn validate(&self) -> Result<(), RelabelError> {
        let action = self.action;
        let names = self.name_validation;
        let target = self.target_label.as_str();
        let invalid_target = || RelabelError::InvalidTargetLabel {
            target_label: target.to_owned(),
            action,
        };
        if action == Action::HashMod && self.modulus == 0 {
            return Err(RelabelError::ZeroModulus);
        }
        if action.needs_target() && target.is_empty() {
            return Err(RelabelError::MissingTargetLabel { action });
        }
        if action == Action::Replace {
            let valid = if has_var(target) {
                names.is_valid_template_name(target)
            } else {
                names.is_valid_label_name(target)
            };
            if !valid {
                return Err(invalid_target());
            }
        }
        if action.is_case_or_equal() {
            if !names.is_valid_label_name(target) {
                return Err(invalid_target());
            }
            if self.replacement != DEFAULT_REPLACEMENT {
                return Err(RelabelError::ReplacementNotAllowed { action });
            }
        }
        if action == Action::LabelMap && !names.is_valid_template_name(&self.replacement) {
            return Err(RelabelError::InvalidReplacement {
                replacement: self.replacement.clone(),
                action,
            });
        }
        if action == Action::HashMod && !names.is_valid_label_name(target) {
            return Err(invalid_target());
        }
        if matches!(action, Action::KeepEqual | Action::DropEqual)
            && (!self.regex.is_default()
                || self.modulus != 0
                || self.separator != DEFAULT_SEPARATOR
                || self.replacement != DEFAULT_REPLACEMENT)
        {
            return Err(RelabelError::OnlySourceAndTarget { action });
        }
        if matches!(action, Action::LabelDrop | Action::LabelKeep)
            && (self.source_labels.is_some()
                || !target.is_empty()
                || self.modulus != 0
                || self.separator != DEFAULT_SEPARATOR
                || self.replacement != DEFAULT_REPLACEMENT)
        {
            return Err(RelabelError::OnlyRegex { action });
        }
        Ok(())
    }

    /// Apply this rule to `labels`; `false` when it drops the target. The rule is assumed valid; an
    /// invalid one does not panic (a `hashmod` with modulus 0 leaves the labels alone).
    pub fn apply(&self, labels: &mut LabelSet) -> bool {
        let value = source_value(self, labels);
        match self.action {
            Action::Drop => !self.regex.is_match(&value),
            Action::Keep => self.regex.is_match(&value),
            Action::DropEqual => get(labels, &self.target_label) != value,
            Action::KeepEqual => get(labels, &self.target_label) == value,
            Action::Replace => {
                if let Some((target, result)) = replace(self, &value) {
                    set(labels, &target, result);
                }
                true
            }
            Action::Lowercase => {
                let lower = go_to_lower(&value);
                set(labels, &self.target_label, Cow::Owned(lower));
                true
            }
            Action::Uppercase => {
                let upper = go_to_upper(&value);
                set(labels, &self.target_label, Cow::Owned(upper));
                true
            }
            Action::HashMod => {
                if self.modulus != 0 {
                    let shard = crate::shard::hashmod(&value, self.modulus).to_string();
                    set(labels, &self.target_label, Cow::Owned(shard));
                }
                true
            }
            Action::LabelMap => {
                label_map(self, labels);
                true
            }
            Action::LabelDrop => {
                labels.retain(|name, _| !self.regex.is_match(name));
                true
            }
            Action::LabelKeep => {
                labels.retain(|name, _| self.regex.is_match(name));
                true
            }
        }
    }
}

/// Apply `configs` in order (Prometheus's `ProcessBuilder`); `false` when one of them drops the
/// target, and then `labels` are left as the rules before it made them. The rules are assumed
/// valid (see [`RelabelConfig::validate`]; [`Relabeler`] guarantees it).
pub fn process(labels: &mut LabelSet, configs: &[RelabelConfig]) -> bool {
    first_drop(labels, configs).is_none()
}

/// As [`process`], telling which rule dropped the target: `Some(i)` when rule `i` did (`labels`
/// are then what rule `i` saw), `None` when every rule kept it. The one loop serving and `explain`
/// share: serving asks only whether it is `None`.
pub fn first_drop(labels: &mut LabelSet, configs: &[RelabelConfig]) -> Option<usize> {
    configs.iter().position(|config| !config.apply(labels))
}

/// Validate `configs`, each with its own [`NameValidation`]; the error names the rule's index.
pub fn validate_all(configs: &[RelabelConfig]) -> Result<(), RelabelError> {
    for (index, config) in configs.iter().enumerate() {
        config.validate().map_err(|error| RelabelError::Rule {
            index,
            error: Box::new(error),
        })?;
    }
    Ok(())
}

/// A validated list of rules, to apply to many label sets. Regexes are compiled when the rules are
/// read; applying allocates only for what changes (new label names and values, joined source values,
/// expanded templates) and leaves untouched labels' strings alone. `Sync`: one can serve many threads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Relabeler {
    rules: Vec<RelabelConfig>,
}

impl Relabeler {
    /// Validate `rules` (see [`validate_all`]).
    pub fn new(rules: Vec<RelabelConfig>) -> Result<Self, RelabelError> {
        validate_all(&rules)?;
        Ok(Relabeler { rules })
    }

    pub fn rules(&self) -> &[RelabelConfig] {
        &self.rules
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Apply the rules to `labels`; `false` when the target is dropped (see [`process`]).
    pub fn process(&self, labels: &mut LabelSet) -> bool {
        process(labels, &self.rules)
    }

    /// Apply the rules to `labels`; the index of the rule that dropped the target, if one did (see
    /// [`first_drop`]).
    pub fn first_drop(&self, labels: &mut LabelSet) -> Option<usize> {
        first_drop(labels, &self.rules)
    }
}

/// `labels.Builder.Get`: a missing label is "".
fn get<'a>(labels: &'a LabelSet, name: &str) -> &'a str {
    labels.get(name).map_or("", String::as_str)
}

/// `labels.Builder.Set`: an empty value deletes; an existing label's strings are reused.
fn set(labels: &mut LabelSet, name: &str, value: Cow<'_, str>) {
    if value.is_empty() {
        labels.remove(name);
    } else if let Some(existing) = labels.get_mut(name) {
        if *existing != value {
            existing.clear();
            existing.push_str(&value);
        }
    } else {
        labels.insert(name.to_owned(), value.into_owned());
    }
}

/// The source labels' values joined by the separator; borrowed when there is at most one.
fn source_value<'a>(config: &RelabelConfig, labels: &'a LabelSet) -> Cow<'a, str> {
    match config.source_labels() {
        [] => Cow::Borrowed(""),
        [one] => Cow::Borrowed(get(labels, one)),
        many => {
            let mut joined = String::new();
            for (i, name) in many.iter().enumerate() {
                if i > 0 {
                    joined.push_str(&config.separator);
                }
                joined.push_str(get(labels, name));
            }
            Cow::Owned(joined)
        }
    }
}

/// `varInRegexTemplate`.
fn has_var(template: &str) -> bool {
    template.contains('$')
}

/// What `replace` sets: the label name and its value (empty: delete), or `None` to leave the labels
/// alone (no match, or the expanded target is not a valid name).
fn replace<'c>(config: &'c RelabelConfig, value: &str) -> Option<(Cow<'c, str>, Cow<'c, str>)> {
    let target_var = has_var(&config.target_label);
    let replacement_var = has_var(&config.replacement);
    if !target_var && !replacement_var {
        // Prometheus's fast path sets without matching when it knows the default regex matches.
        let fast = value.is_empty() && config.regex.is_default();
        if !fast
            && (!config.regex.is_match(value)
                || !config
                    .name_validation
                    .is_valid_label_name(&config.target_label))
        {
            return None;
        }
        return Some((
            Cow::Borrowed(&config.target_label),
            Cow::Borrowed(&config.replacement),
        ));
    }
    let regex = config.regex.regex();
    let mut locations = regex.capture_locations();
    regex.captures_read(&mut locations, value)?;
    let expand_or_borrow = |template: &'c str, var: bool| {
        if var {
            let mut out = String::new();
            expand(template, value, regex, &locations, &mut out);
            Cow::Owned(out)
        } else {
            Cow::Borrowed(template)
        }
    };
    let target = expand_or_borrow(&config.target_label, target_var);
    if !config.name_validation.is_valid_label_name(&target) {
        return None;
    }
    Some((
        target,
        expand_or_borrow(&config.replacement, replacement_var),
    ))
}

/// `labelmap`: every label whose name matches is copied to the expanded `replacement`. The names and
/// values are those from before the rule (Go ranges over a snapshot), applied in name order.
///
/// NB: when two names map to the same new name the last in name order wins. In Prometheus the order is
/// the builder's (base labels in name order, then labels set since, in the order set), and in its scrape
/// path every discovered label is "set since" in Go map order, so such collisions have no fixed winner.
fn label_map(config: &RelabelConfig, labels: &mut LabelSet) {
    let regex = config.regex.regex();
    let mut locations = regex.capture_locations();
    let mut copies: Vec<(String, String)> = Vec::new();
    for (name, value) in labels.iter() {
        if regex.captures_read(&mut locations, name).is_some() {
            let mut new_name = String::new();
            expand(&config.replacement, name, regex, &locations, &mut new_name);
            copies.push((new_name, value.clone()));
        }
    }
    for (name, value) in copies {
        if value.is_empty() {
            labels.remove(&name);
        } else {
            labels.insert(name, value);
        }
    }
}

/// Go's `Regexp.ExpandString`: append `template` to `out` with `$` references replaced by the groups
/// of `haystack` matched at `locations`.
fn expand(
    template: &str,
    haystack: &str,
    regex: &Regex,
    locations: &CaptureLocations,
    out: &mut String,
) {
    let mut rest = template;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        rest = &rest[dollar + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            out.push('$');
            rest = after;
            continue;
        }
        let Some((name, after)) = extract_reference(rest) else {
            // Malformed: the `$` is text.
            out.push('$');
            continue;
        };
        rest = after;
        if let Some((start, end)) = group(regex, locations, name) {
            out.push_str(&haystack[start..end]);
        }
    }
    out.push_str(rest);
}

/// Go's `extract`: the name after a `$` (`name` or `{name}`, the longest run of letters, digits and
/// `_`) and the text after it.
///
/// NB: Go's letters and digits are Unicode categories L and Nd; Rust's `is_alphabetic`/`is_numeric`
/// are slightly wider. A name with such characters names no group in either, so both expand it to "".
fn extract_reference(text: &str) -> Option<(&str, &str)> {
    let (braced, body) = match text.strip_prefix('{') {
        Some(body) => (true, body),
        None => (false, text),
    };
    let end = body
        .char_indices()
        .find(|&(_, c)| !(c.is_alphabetic() || c.is_numeric() || c == '_'))
        .map_or(body.len(), |(i, _)| i);
    if end == 0 {
        return None;
    }
    let (name, mut after) = body.split_at(end);
    if braced {
        after = after.strip_prefix('}')?;
    }
    Some((name, after))
}

/// The span a reference names: a group number when all ASCII digits, else the first group so named;
/// `None` when there is no such group or it did not take part in the match.
fn group(regex: &Regex, locations: &CaptureLocations, name: &str) -> Option<(usize, usize)> {
    if name.bytes().all(|b| b.is_ascii_digit()) {
        // Go gives up on numbers of 1e8 and more; no regex has that many groups.
        return name.parse().ok().and_then(|i| locations.get(i));
    }
    regex
        .capture_names()
        .enumerate()
        .filter(|(_, n)| *n == Some(name))
        .find_map(|(i, _)| locations.get(i))
}

/// Go's `strings.ToLower`: per character, Unicode's simple (one-to-one) lower-case mapping.
fn go_to_lower(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    s.chars()
        .map(|c| {
            let mut lower = c.to_lowercase();
            match (lower.next(), lower.next()) {
                (Some(l), None) => l,
                // The only character whose full lower case is longer than one: İ, simply `i`.
                _ if c == '\u{130}' => 'i',
                _ => c,
            }
        })
        .collect()
}

/// Go's `strings.ToUpper`: per character, Unicode's simple (one-to-one) upper-case mapping. Where
/// the full mapping is longer (`ß` -> `SS`) the simple one keeps the character, except for the Greek
/// letters with ypogegrammeni, whose simple upper case is their title-case form.
fn go_to_upper(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_uppercase();
    }
    s.chars()
        .map(|c| {
            let mut upper = c.to_uppercase();
            match (upper.next(), upper.next()) {
                (Some(u), None) => u,
                _ => match c {
                    '\u{1F80}'..='\u{1F87}' | '\u{1F90}'..='\u{1F97}' | '\u{1FA0}'..='\u{1FA7}' => {
                        char::from_u32(c as u32 + 8).unwrap_or(c)
                    }
                    '\u{1FB3}' => '\u{1FBC}',
                    '\u{1FC3}' => '\u{1FCC}',
                    '\u{1FF3}' => '\u{1FFC}',
                    _ => c,
                },
            }
        })
        .collect()
}

/// Rewrite a Go (RE2) pattern so Rust's `regex` reads it as Go does (see [`Regexp`]).
fn translate_go_pattern(go: &str) -> String {
    let mut out = String::with_capacity(go.len() + 8);
    let mut chars = go.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(escaped) = chars.next() else {
                    // A trailing backslash: left for the compiler to reject.
                    out.push('\\');
                    break;
                };
                match (escaped, in_class) {
                    ('d', false) => out.push_str("[0-9]"),
                    ('d', true) => out.push_str("0-9"),
                    ('w', false) => out.push_str("[0-9A-Za-z_]"),
                    ('w', true) => out.push_str("0-9A-Za-z_"),
                    ('s', false) => out.push_str(r"[\t\n\f\r ]"),
                    ('s', true) => out.push_str(r"\t\n\f\r "),
                    // Negated classes: in a class, Rust takes a nested class as a union.
                    ('D', _) => out.push_str("[^0-9]"),
                    ('W', _) => out.push_str("[^0-9A-Za-z_]"),
                    ('S', _) => out.push_str(r"[^\t\n\f\r ]"),
                    ('b', false) => out.push_str(r"(?-u:\b)"),
                    ('B', false) => out.push_str(r"(?-u:\B)"),
                    ('Q', false) => {
                        let mut literal = String::new();
                        while let Some(q) = chars.next() {
                            if q == '\\' && chars.peek() == Some(&'E') {
                                chars.next();
                                break;
                            }
                            literal.push(q);
                        }
                        out.push_str(&regex::escape(&literal));
                    }
                    _ => {
                        out.push('\\');
                        out.push(escaped);
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                // A `]` first in a class is literal in both; escaped for clarity.
                if chars.peek() == Some(&']') {
                    chars.next();
                    out.push_str(r"\]");
                }
            }
            '[' if chars.peek() == Some(&':') => {
                // `[:alpha:]`: copied through its `:]`.
                out.push('[');
                while let Some(p) = chars.next() {
                    out.push(p);
                    if p == ':' && chars.peek() == Some(&']') {
                        chars.next();
                        out.push(']');
                        break;
                    }
                }
            }
            '[' | '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
