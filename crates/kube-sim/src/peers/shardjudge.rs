//! The upstream's KEP-5866 shard selector as a judge (`peers/shardjudge`: k8s.io/apiserver's
//! `sharding.Parse` and apimachinery's `Matches`): one batch of questions per run, over stdin/stdout.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// How the tests install the judge.
pub const SHARDJUDGE_INSTALL: &str = "peers/build, then PATH=$(peers/build --print):$PATH";

/// Does `selector` parse, and does it select an object with this uid and namespace?
#[derive(Debug, Clone, Serialize)]
pub struct Question {
    pub selector: String,
    pub uid: String,
    pub namespace: String,
}

/// Go's answer: `error` when `Parse` refused the selector, else its canonical form and the match.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Answer {
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub canonical: Option<String>,
    pub matches: bool,
}

/// Asks the judge at `bin` every question, in order.
pub fn ask(bin: &Path, questions: &[Question]) -> anyhow::Result<Vec<Answer>> {
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut input = Vec::new();
    for q in questions {
        serde_json::to_writer(&mut input, q)?;
        input.push(b'\n');
    }
    // NB: written from a thread: the judge answers while it reads, and a full stdout pipe would
    // otherwise stall both sides.
    let mut stdin = child.stdin.take().expect("stdin was piped");
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    writer.join().expect("writer thread")?;
    anyhow::ensure!(
        out.status.success(),
        "shardjudge exited with {}",
        out.status
    );
    let answers = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(serde_json::from_slice)
        .collect::<Result<Vec<Answer>, _>>()?;
    anyhow::ensure!(
        answers.len() == questions.len(),
        "shardjudge answered {} of {} questions",
        answers.len(),
        questions.len()
    );
    Ok(answers)
}
