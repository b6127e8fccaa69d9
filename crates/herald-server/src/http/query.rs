//! The query string of `GET /sd/v1/{job}`: `shard`, `shards` and `wait`, strictly parsed so a typo is a
//! 400 naming the parameter rather than a silently unsharded response.

use std::time::Duration;

use herald_index::encoded::Shard;

/// Shard counts above this are refused: no fleet is that large, and each (shard, count) pair is a
/// cached body.
pub const MAX_SHARDS: u64 = 1024;

/// Longest `wait` honoured; longer asks are shortened to it.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// A bad query parameter. The message names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("unknown query parameter {0:?} (supported: shard, shards, wait)")]
    Unknown(String),
    #[error("query parameter {0:?} is given more than once")]
    Repeated(&'static str),
    #[error("query parameter {param:?}: {why}")]
    Invalid { param: &'static str, why: String },
    #[error("query parameter {missing:?} is required with {given:?}")]
    Missing {
        missing: &'static str,
        given: &'static str,
    },
}

/// The parsed query of an SD request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SdQuery {
    pub shard: Option<Shard>,
    pub wait: Option<Duration>,
}

impl SdQuery {
    pub fn parse(raw: Option<&str>) -> Result<SdQuery, QueryError> {
        let mut shard: Option<u64> = None;
        let mut shards: Option<u64> = None;
        let mut wait: Option<Duration> = None;
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "shard" => set(&mut shard, "shard", parse_u64("shard", value)?)?,
                "shards" => set(&mut shards, "shards", parse_u64("shards", value)?)?,
                "wait" => set(
                    &mut wait,
                    "wait",
                    parse_duration(value)
                        .map_err(|why| QueryError::Invalid { param: "wait", why })?,
                )?,
                other => return Err(QueryError::Unknown(other.to_string())),
            }
        }
        let shard = match (shard, shards) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(QueryError::Missing {
                    missing: "shards",
                    given: "shard",
                });
            }
            (None, Some(_)) => {
                return Err(QueryError::Missing {
                    missing: "shard",
                    given: "shards",
                });
            }
            (Some(index), Some(count)) => {
                if count == 0 || count > MAX_SHARDS {
                    return Err(QueryError::Invalid {
                        param: "shards",
                        why: format!("must be between 1 and {MAX_SHARDS}, got {count}"),
                    });
                }
                if index >= count {
                    return Err(QueryError::Invalid {
                        param: "shard",
                        why: format!("must be below shards ({count}), got {index}"),
                    });
                }
                Some(Shard { index, count })
            }
        };
        Ok(SdQuery {
            shard,
            wait: wait.map(|w| w.min(MAX_WAIT)),
        })
    }
}

fn set<T>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), QueryError> {
    if slot.replace(value).is_some() {
        return Err(QueryError::Repeated(name));
    }
    Ok(())
}

fn parse_u64(param: &'static str, value: &str) -> Result<u64, QueryError> {
    value.parse().map_err(|_| QueryError::Invalid {
        param,
        why: format!("expected a non-negative integer, got {value:?}"),
    })
}

/// Parses a Prometheus-style duration: one or more `<number><unit>` with units `ms`, `s`, `m`, `h`
/// (`30s`, `1m30s`, `500ms`).
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    if value.is_empty() {
        return Err("expected a duration like 30s, got an empty value".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("expected a duration like 30s, got {value:?}"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("number too large in {value:?}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            u => {
                return Err(format!(
                    "unknown unit {u:?} in {value:?} (use ms, s, m or h)"
                ));
            }
        };
        total = total.saturating_add(unit);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_query_means_whole_job_and_no_wait() {
        assert_eq!(SdQuery::parse(None), Ok(SdQuery::default()));
        assert_eq!(SdQuery::parse(Some("")), Ok(SdQuery::default()));
    }

    #[test]
    fn shard_wait_and_durations_parse() {
        let q = SdQuery::parse(Some("shard=2&shards=5&wait=1m30s")).expect("valid");
        assert_eq!(q.shard, Some(Shard { index: 2, count: 5 }));
        assert_eq!(q.wait, Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(
            SdQuery::parse(Some("wait=2h")).expect("valid").wait,
            Some(MAX_WAIT)
        );
    }

    #[test]
    fn each_bad_parameter_is_named() {
        let cases = [
            ("shard=1", "\"shards\""),
            ("shards=3", "\"shard\""),
            ("shard=3&shards=3", "\"shard\""),
            ("shard=0&shards=0", "\"shards\""),
            ("shard=x&shards=2", "\"shard\""),
            ("wait=soon", "\"wait\""),
            ("wait=5", "\"wait\""),
            ("limit=3", "\"limit\""),
            ("wait=1s&wait=2s", "\"wait\""),
        ];
        for (q, named) in cases {
            let err = SdQuery::parse(Some(q)).expect_err(q).to_string();
            assert!(err.contains(named), "{q}: {err}");
        }
    }
}
