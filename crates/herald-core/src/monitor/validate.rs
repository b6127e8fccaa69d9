//! The checks prometheus-operator makes on a monitor endpoint before generating its config, each of
//! which rejects the whole monitor (the operator's `InvalidConfiguration` event), and which herald
//! makes for the same reason: Prometheus refuses the whole `scrape_configs` file for one job whose
//! timeout exceeds its interval or whose client certificate has no key, so one such monitor would
//! stop every other job of the consumer.
//!
//! From prometheus-operator (6adcebc) `pkg/prometheus/resource_selector.go`
//! (`validateScrapeIntervalAndTimeout`), `pkg/prometheus/promcfg.go`
//! (`CompareScrapeTimeoutToScrapeInterval`), `pkg/apis/monitoring/v1/tls_types.go`
//! (`TLSConfig.Validate`, `SafeTLSConfig.Validate`) and `types.go` (`SecretOrConfigMap.Validate`,
//! `ProxyConfig.Validate`); and the CRD's `x-kubernetes-list-type: set` on `scrapeProtocols`, which
//! the apiserver enforces (Prometheus refuses a protocol listed twice).

use super::{EndpointCommon, SecretOrConfigMap, TlsConfig};

/// A Prometheus duration (`model.ParseDuration`: `0`, or units `y w d h m s ms` in that order,
/// each at most once) in milliseconds.
pub(super) fn duration_ms(s: &str) -> Option<u64> {
    if s == "0" {
        return Some(0);
    }
    const UNITS: [(&str, u64); 7] = [
        ("y", 365 * 24 * 3_600_000),
        ("w", 7 * 24 * 3_600_000),
        ("d", 24 * 3_600_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let mut rest = s;
    let mut next_unit = 0;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        // `ms` before `m`: the longest unit that follows.
        let (i, (unit, ms)) = UNITS
            .iter()
            .enumerate()
            .skip(next_unit)
            .filter(|(_, (u, _))| rest.starts_with(u))
            .max_by_key(|(_, (u, _))| u.len())?;
        rest = &rest[unit.len()..];
        next_unit = i + 1;
        total = total.checked_add(n.checked_mul(*ms)?)?;
    }
    (!s.is_empty()).then_some(total)
}

/// `validateScrapeIntervalAndTimeout`: a `scrapeTimeout` must not exceed the endpoint's interval, or
/// the Prometheus's (`default_interval`) when the endpoint sets none. Errors name the field.
pub(super) fn interval_and_timeout(
    interval: &str,
    timeout: &str,
    default_interval: &str,
) -> Result<(), (&'static str, String)> {
    if timeout.is_empty() {
        return Ok(());
    }
    let (interval, interval_field) = if interval.is_empty() {
        (default_interval, "the Prometheus's scrapeInterval")
    } else {
        (interval, "interval")
    };
    let Some(i) = duration_ms(interval) else {
        return Err(("interval", format!("{interval:?} is not a duration")));
    };
    let Some(t) = duration_ms(timeout) else {
        return Err(("scrapeTimeout", format!("{timeout:?} is not a duration")));
    };
    if t > i {
        return Err((
            "scrapeTimeout",
            format!("{timeout:?} is greater than {interval_field} {interval:?}"),
        ));
    }
    Ok(())
}

fn is_set(s: &SecretOrConfigMap) -> bool {
    s.secret.is_some() || s.config_map.is_some()
}

/// `TLSConfig.Validate` (ServiceMonitor, `files`) and `SafeTLSConfig.Validate` (PodMonitor, whose
/// TLS config has no file fields). The error names the field under `tlsConfig`.
pub(super) fn tls(tls: &TlsConfig, files: bool) -> Result<(), (&'static str, String)> {
    for (field, s) in [("ca", &tls.ca), ("cert", &tls.cert)] {
        if s.secret.is_some() && s.config_map.is_some() {
            return Err((field, "cannot specify both a secret and a configMap".into()));
        }
    }
    if let (Some(min), Some(max)) = (&tls.min_version, &tls.max_version)
        && max < min
    {
        return Err((
            "maxVersion",
            format!("{max:?} must be more than or equal to minVersion {min:?}"),
        ));
    }
    let (ca_file, cert_file, key_file) = if files {
        (&*tls.ca_file, &*tls.cert_file, &*tls.key_file)
    } else {
        ("", "", "")
    };
    if is_set(&tls.ca) && !ca_file.is_empty() {
        return Err(("caFile", "cannot specify both caFile and ca".into()));
    }
    if is_set(&tls.cert) && !cert_file.is_empty() {
        return Err(("certFile", "cannot specify both certFile and cert".into()));
    }
    if !key_file.is_empty() && tls.key_secret.is_some() {
        return Err((
            "keyFile",
            "cannot specify both keyFile and keySecret".into(),
        ));
    }
    let has_cert = is_set(&tls.cert) || !cert_file.is_empty();
    let has_key = tls.key_secret.is_some() || !key_file.is_empty();
    match (has_cert, has_key) {
        (true, false) => Err((
            if cert_file.is_empty() {
                "cert"
            } else {
                "certFile"
            },
            "a client certificate without a client key".into(),
        )),
        (false, true) => Err((
            if key_file.is_empty() {
                "keySecret"
            } else {
                "keyFile"
            },
            "a client key without a client certificate".into(),
        )),
        _ => Ok(()),
    }
}

/// `ProxyConfig.Validate`: which proxy settings go together. The error names the field.
pub(super) fn proxy(ep: &EndpointCommon) -> Result<(), (&'static str, String)> {
    let from_environment = ep.proxy_from_environment == Some(true);
    let url = ep.proxy_url.as_deref().is_some_and(|u| !u.is_empty());
    let no_proxy = ep.no_proxy.as_deref().is_some_and(|n| !n.is_empty());
    let headers = ep
        .proxy_connect_header
        .as_ref()
        .is_some_and(|h| !h.is_empty());
    let refuse = |field, m: &str| Err((field, m.to_owned()));
    if headers && !from_environment && !url {
        return refuse(
            "proxyConnectHeader",
            "needs proxyUrl or proxyFromEnvironment",
        );
    }
    if from_environment && url {
        return refuse("proxyUrl", "cannot be set with proxyFromEnvironment");
    }
    if from_environment && no_proxy {
        return refuse("noProxy", "cannot be set with proxyFromEnvironment");
    }
    if no_proxy && !url {
        return refuse("noProxy", "needs proxyUrl");
    }
    Ok(())
}

/// The first protocol `protocols` lists twice (the CRD's list is a set).
pub(super) fn repeated(protocols: &[String]) -> Option<(usize, &str)> {
    protocols
        .iter()
        .enumerate()
        .find(|(i, p)| protocols[..*i].contains(p))
        .map(|(i, p)| (i, p.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::KeySelector;

    #[test]
    fn durations_read_as_prometheus_reads_them() {
        for (s, ms) in [
            ("0", 0),
            ("30s", 30_000),
            ("1m30s", 90_000),
            ("1h", 3_600_000),
            ("500ms", 500),
            ("1m500ms", 60_500),
            ("2d", 172_800_000),
            ("1y1w", (365 + 7) * 86_400_000),
        ] {
            assert_eq!(duration_ms(s), Some(ms), "{s}");
        }
        for s in [
            "", "15sec", "30", "1s1m", "1m1m", "-1s", "1.5s", "s", "1 s", "30s ",
        ] {
            assert_eq!(duration_ms(s), None, "{s:?}");
        }
    }

    #[test]
    fn a_timeout_over_the_interval_is_refused_naming_both() {
        assert_eq!(interval_and_timeout("30s", "", "30s"), Ok(()));
        assert_eq!(interval_and_timeout("30s", "30s", "30s"), Ok(()));
        assert_eq!(interval_and_timeout("", "10s", "30s"), Ok(()));
        assert_eq!(
            interval_and_timeout("15s", "20s", "30s"),
            Err((
                "scrapeTimeout",
                "\"20s\" is greater than interval \"15s\"".into()
            ))
        );
        assert_eq!(
            interval_and_timeout("", "45s", "30s"),
            Err((
                "scrapeTimeout",
                "\"45s\" is greater than the Prometheus's scrapeInterval \"30s\"".into()
            ))
        );
        assert_eq!(
            interval_and_timeout("15sec", "10s", "30s"),
            Err(("interval", "\"15sec\" is not a duration".into()))
        );
    }

    fn secret() -> KeySelector {
        KeySelector {
            name: "s".into(),
            key: "k".into(),
            optional: None,
        }
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_one_source_each() {
        let ok = TlsConfig {
            cert_file: "/c".into(),
            key_file: "/k".into(),
            ca_file: "/ca".into(),
            ..TlsConfig::default()
        };
        assert_eq!(tls(&ok, true), Ok(()));
        let no_key = TlsConfig {
            cert_file: "/c".into(),
            ..TlsConfig::default()
        };
        assert_eq!(
            tls(&no_key, true),
            Err((
                "certFile",
                "a client certificate without a client key".into()
            ))
        );
        let no_cert = TlsConfig {
            key_secret: Some(secret()),
            ..TlsConfig::default()
        };
        assert_eq!(
            tls(&no_cert, false),
            Err((
                "keySecret",
                "a client key without a client certificate".into()
            ))
        );
        let both_ca = TlsConfig {
            ca_file: "/ca".into(),
            ca: SecretOrConfigMap {
                secret: Some(secret()),
                config_map: None,
            },
            ..TlsConfig::default()
        };
        assert_eq!(
            tls(&both_ca, true).map_err(|e| e.0),
            Err("caFile"),
            "caFile and ca"
        );
        // Without file fields (a PodMonitor), the file is not there to conflict.
        assert_eq!(tls(&both_ca, false), Ok(()));
        let versions = TlsConfig {
            min_version: Some("TLS13".into()),
            max_version: Some("TLS12".into()),
            ..TlsConfig::default()
        };
        assert_eq!(tls(&versions, true).map_err(|e| e.0), Err("maxVersion"));
    }

    #[test]
    fn proxy_settings_go_together_as_the_operator_checks() {
        let ep = |url: Option<&str>, env: Option<bool>, no_proxy: Option<&str>| EndpointCommon {
            proxy_url: url.map(str::to_owned),
            proxy_from_environment: env,
            no_proxy: no_proxy.map(str::to_owned),
            ..EndpointCommon::default()
        };
        assert_eq!(proxy(&ep(None, None, None)), Ok(()));
        assert_eq!(
            proxy(&ep(Some("http://p:3128"), None, Some("10.0.0.0/8"))),
            Ok(())
        );
        assert_eq!(proxy(&ep(None, Some(true), None)), Ok(()));
        assert_eq!(
            proxy(&ep(Some("http://p:3128"), Some(true), None)).map_err(|e| e.0),
            Err("proxyUrl")
        );
        assert_eq!(
            proxy(&ep(None, None, Some("10.0.0.0/8"))),
            Err(("noProxy", "needs proxyUrl".into()))
        );
        let headers = EndpointCommon {
            proxy_connect_header: Some([("X".to_string(), vec![KeySelector::default()])].into()),
            ..EndpointCommon::default()
        };
        assert_eq!(proxy(&headers).map_err(|e| e.0), Err("proxyConnectHeader"));
    }

    #[test]
    fn a_scrape_protocol_listed_twice_is_found() {
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            repeated(&list(&["PrometheusProto", "OpenMetricsText1.0.0"])),
            None
        );
        assert_eq!(
            repeated(&list(&[
                "PrometheusProto",
                "OpenMetricsText1.0.0",
                "PrometheusProto"
            ])),
            Some((2, "PrometheusProto"))
        );
    }
}
