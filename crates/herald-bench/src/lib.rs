//! Benchmarks that run herald and kube-sim as separate processes and measure them from outside, the way
//! an operator would: `/proc` for CPU and memory, kube-sim's load meter and herald's `/metrics` for what
//! crossed the wire, and clients of their own for delivery.
//!
//! The library holds the pieces the `kube-watchers` binary's thousands of watchers share, kept cheap so
//! the client is not what the benchmark measures: an HTTP/1.1 response head parser and chunked decoder
//! ([`wire`]), a scanner that pulls the send time out of a watch event line without building a JSON tree
//! ([`scan`]), a log-linear latency histogram ([`hist`]) and `/proc` readers ([`procfs`]); informers
//! that list then watch with client-go's backoff ([`informers`]); and the fault soak's churn plan,
//! bounds and checks ([`soak`]).

pub mod cluster;
pub mod hist;
pub mod informers;
pub mod pace;
pub mod procfs;
pub mod procs;
pub mod scan;
pub mod sizing;
pub mod soak;
pub mod watchers;
pub mod wire;

/// The socket address of an `http://HOST:PORT[/]` URL.
pub fn addr_of(url: &str) -> anyhow::Result<std::net::SocketAddr> {
    use anyhow::Context as _;
    url.strip_prefix("http://")
        .with_context(|| format!("{url} is not an http:// URL"))?
        .trim_end_matches('/')
        .parse()
        .with_context(|| format!("an address in {url}"))
}

/// Sums every series of the Prometheus text-format metric `name` (all label sets), or `None` when the
/// exposition has no such series.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let value = match rest.as_bytes().first() {
            Some(b'{') => rest.rsplit_once('}').map(|(_, v)| v),
            Some(b' ') => Some(rest),
            _ => None,
        };
        if let Some(v) = value.and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok()) {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// `v` with `decimals` decimals and thousands separators; "—" for `None` and non-finite values.
pub fn fmt(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(x) if x.is_finite() => {
            let s = format!("{x:.decimals$}");
            // thousands separators on the integer part
            let (int, frac) = s
                .split_once('.')
                .map_or((s.as_str(), None), |(i, f)| (i, Some(f)));
            let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
            let mut grouped = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i) % 3 == 0 {
                    grouped.push(',');
                }
                grouped.push(c);
            }
            match frac {
                Some(fr) => format!("{sign}{grouped}.{fr}"),
                None => format!("{sign}{grouped}"),
            }
        }
        _ => "—".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sum_adds_label_sets_and_skips_longer_names() {
        let text = "# HELP x y\n\
                    herald_kube_watches_open{kind=\"configmaps\"} 3\n\
                    herald_kube_watches_open{kind=\"pods\"} 2\n\
                    herald_kube_watches_open_total 99\n\
                    herald_up 1\n";
        assert_eq!(metric_sum(text, "herald_kube_watches_open"), Some(5.0));
        assert_eq!(metric_sum(text, "herald_up"), Some(1.0));
        assert_eq!(metric_sum(text, "missing"), None);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn fmt_groups_thousands() {
        assert_eq!(fmt(Some(1234567.891), 1), "1,234,567.9");
        assert_eq!(fmt(Some(-1000.0), 0), "-1,000");
        assert_eq!(fmt(Some(f64::NAN), 0), "—");
        assert_eq!(fmt(None, 2), "—");
    }

    #[test]
    fn addr_of_urls() {
        assert_eq!(
            addr_of("http://127.0.0.1:8080/").expect("valid").port(),
            8080
        );
        assert!(addr_of("https://127.0.0.1:1").is_err());
    }
}
