//! `GET /explain?kind=&namespace=&name=[&shards=]`: why an object's targets are (not) served, as
//! JSON (`crate::explain`); `GET /explain.html`: the same answer as HTML under the status page's
//! form. Both sit behind the same credentials as `/sd/v1`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::escape::html as esc;
use crate::explain::{self, ExplainError};
use crate::shared::Shared;

fn status(e: &ExplainError) -> StatusCode {
    match e {
        ExplainError::BadParam { .. } => StatusCode::BAD_REQUEST,
        ExplainError::NotFound(_) => StatusCode::NOT_FOUND,
    }
}

async fn answer(
    shared: Arc<Shared>,
    params: BTreeMap<String, String>,
) -> Result<serde_json::Value, ExplainError> {
    let q = explain::Query::parse(&params)?;
    // NB: on a blocking thread: a monitor's answer walks its namespaces' groups.
    off_the_workers(move || {
        explain::explain(&shared, &q)
            .map(|e| serde_json::to_value(e).expect("an explanation is plain data"))
    })
    .await
}

/// Explains computed at once; more wait their turn. Each is milliseconds of CPU (up to ~50 at
/// `k8s-limits`); this keeps a burst of them from taking every core from serving.
const CONCURRENT_EXPLAINS: usize = 2;
static EXPLAINS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(CONCURRENT_EXPLAINS);

/// How long explains must pause before the memory they freed is given back.
const RELEASE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs an explain on a blocking thread (a monitor's answer walks its namespaces' groups). Once
/// explains pause, the memory they freed goes back to the OS: an answer allocates megabytes at full
/// size and frees them at once, and herald keeps nothing per explain (`crate::heap`).
async fn off_the_workers<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let _turn = EXPLAINS
        .acquire()
        .await
        .expect("the explain semaphore is never closed");
    let answer = tokio::task::spawn_blocking(f)
        .await
        .expect("explaining does not panic");
    crate::heap::release_when_quiet(RELEASE_AFTER);
    answer
}

pub async fn json(
    State(shared): State<Arc<Shared>>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Response {
    let answered = match explain::Query::parse(&params) {
        // Encoded on the blocking thread too: an answer lists every job reading the kind
        // (thousands with monitors).
        Ok(q) => {
            off_the_workers(move || {
                explain::explain(&shared, &q)
                    .map(|e| serde_json::to_vec(&e).expect("an explanation is plain data"))
            })
            .await
        }
        Err(e) => Err(e),
    };
    match answered {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(e) => (
            status(&e),
            axum::Json(serde_json::json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// The explain form, filled with `params`.
pub fn form(params: &BTreeMap<String, String>) -> String {
    let value = |k: &str| esc(params.get(k).map_or("", String::as_str));
    let mut h = String::from(
        "<h2>Explain</h2><form id=\"explain\" method=\"get\" action=\"/explain.html\">\
         <label>kind <select name=\"kind\" id=\"explain-kind\">",
    );
    for k in explain::KINDS {
        let selected = if params.get("kind").map(String::as_str) == Some(k) {
            " selected"
        } else {
            ""
        };
        let _ = write!(h, "<option{selected}>{k}</option>");
    }
    let _ = write!(
        h,
        "</select></label> <label>namespace <input name=\"namespace\" id=\"explain-namespace\" \
         value=\"{}\"></label> <label>name <input name=\"name\" id=\"explain-name\" value=\"{}\">\
         </label> <button type=\"submit\" id=\"explain-submit\">explain</button></form>",
        value("namespace"),
        value("name"),
    );
    h
}

pub async fn page(
    State(shared): State<Arc<Shared>>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Response {
    let mut h = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <link rel=\"icon\" href=\"data:,\"><title>herald explain</title><style>",
    );
    h.push_str(crate::http::style::STYLE);
    h.push_str("</style></head><body><p><a href=\"/\">status</a></p>");
    h.push_str(&form(&params));
    let code = match answer(shared, params).await {
        Ok(v) => {
            h.push_str(&explain::render::html(&v));
            StatusCode::OK
        }
        Err(e) => {
            let _ = write!(
                h,
                "<p class=\"stale\" id=\"explain-error\">{}</p>",
                esc(&e.to_string())
            );
            status(&e)
        }
    };
    h.push_str("</body></html>");
    let mut res = (code, Html(h)).into_response();
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}
